//! Every way a registration request can fail, with the HTTP status, the stable `code`
//! the page switches on, and a message a buyer can act on. `Display` is for logs (it
//! may name internals); [`RegisterError::buyer_message`] is what the buyer sees.

use awsmp_core::ports::{PortError, ResolveError};
use awsmp_core::register::RegistrationError;

use crate::form::FormError;

/// Where a buyer gets a fresh registration token.
pub const MARKETPLACE_LIBRARY_URL: &str = "https://aws.amazon.com/marketplace/library";

/// A failed registration request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegisterError {
    /// `CUSTOMER_PROFILE_TABLE` is unset or empty: a deployment mistake.
    #[error("CUSTOMER_PROFILE_TABLE not configured")]
    StoreNotConfigured,
    /// The request's `Origin` is not `ALLOWED_ORIGIN`.
    #[error("origin {0:?} is not the registration page's origin")]
    OriginNotAllowed(String),
    /// The form could not be read.
    #[error("unreadable registration form: {0}")]
    Form(#[from] FormError),
    /// The post carried no token.
    #[error("the registration form has no x-amzn-marketplace-token")]
    MissingToken,
    /// `InvalidTokenException`.
    #[error("ResolveCustomer: InvalidTokenException")]
    InvalidToken,
    /// `ExpiredTokenException`.
    #[error("ResolveCustomer: ExpiredTokenException")]
    ExpiredToken,
    /// The token belongs to another product than `PRODUCT_CODE`.
    #[error("the token resolves to product {found:?}, this stack meters {expected:?}")]
    WrongProduct {
        /// The stack's product code.
        expected: String,
        /// What ResolveCustomer returned.
        found: String,
    },
    /// ResolveCustomer throttled, failed internally, is disabled or unreachable.
    #[error("ResolveCustomer unavailable: {0}")]
    ResolveUnavailable(String),
    /// ResolveCustomer answered without LicenseArn/CustomerAWSAccountId.
    #[error(
        "ResolveCustomer returned no LicenseArn/CustomerAWSAccountId (a legacy, pre-Concurrent-Agreements product?)"
    )]
    ResolveIncomplete,
    /// Writing the profile or the subscriber row failed.
    #[error("registration store write failed: {0}")]
    Store(PortError),
    /// No such route.
    #[error("no route for {0}")]
    NotFound(String),
    /// The route exists but not with this method.
    #[error("method {method} not allowed on {path}")]
    MethodNotAllowed {
        /// The request method.
        method: String,
        /// The request path.
        path: String,
    },
}

impl From<RegistrationError> for RegisterError {
    fn from(e: RegistrationError) -> Self {
        match e {
            RegistrationError::Resolve(e) => e.into(),
            RegistrationError::WrongProduct { expected, found } => {
                RegisterError::WrongProduct { expected, found }
            }
            RegistrationError::Store(e) => RegisterError::Store(e),
        }
    }
}

impl From<ResolveError> for RegisterError {
    fn from(e: ResolveError) -> Self {
        match e {
            ResolveError::InvalidToken => RegisterError::InvalidToken,
            ResolveError::ExpiredToken => RegisterError::ExpiredToken,
            ResolveError::Unavailable(message) => RegisterError::ResolveUnavailable(message),
            ResolveError::Incomplete => RegisterError::ResolveIncomplete,
        }
    }
}

impl RegisterError {
    /// The HTTP status.
    pub fn status(&self) -> u16 {
        match self {
            RegisterError::StoreNotConfigured
            | RegisterError::ResolveIncomplete
            | RegisterError::Store(PortError::Corrupt { .. } | PortError::Failed { .. }) => 500,
            RegisterError::ResolveUnavailable(_)
            | RegisterError::Store(PortError::Transient { .. }) => 503,
            RegisterError::OriginNotAllowed(_) => 403,
            RegisterError::Form(FormError::UnsupportedContentType(_)) => 415,
            RegisterError::Form(FormError::BodyTooLarge) => 413,
            RegisterError::Form(_)
            | RegisterError::MissingToken
            | RegisterError::InvalidToken
            | RegisterError::ExpiredToken
            | RegisterError::WrongProduct { .. } => 400,
            RegisterError::NotFound(_) => 404,
            RegisterError::MethodNotAllowed { .. } => 405,
        }
    }

    /// The stable machine-readable code (the page switches on it).
    pub fn code(&self) -> &'static str {
        match self {
            RegisterError::StoreNotConfigured => "registration-store-not-configured",
            RegisterError::OriginNotAllowed(_) => "origin-not-allowed",
            RegisterError::Form(e) => match e {
                FormError::UnsupportedContentType(_) => "unsupported-content-type",
                FormError::BadBase64 | FormError::Malformed(_) => "malformed-form",
                FormError::BodyTooLarge => "form-too-large",
                FormError::TooManyFields => "too-many-fields",
                FormError::FieldTooLong(_) => "field-too-long",
                FormError::TokenTooLong => "invalid-token",
                FormError::DuplicateField(_) => "duplicate-field",
                FormError::InvalidValue(_) => "invalid-field-value",
            },
            RegisterError::MissingToken => "missing-token",
            RegisterError::InvalidToken => "invalid-token",
            RegisterError::ExpiredToken => "expired-token",
            RegisterError::WrongProduct { .. } => "wrong-product",
            RegisterError::ResolveUnavailable(_)
            | RegisterError::Store(PortError::Transient { .. }) => "temporarily-unavailable",
            RegisterError::ResolveIncomplete | RegisterError::Store(_) => "internal-error",
            RegisterError::NotFound(_) => "not-found",
            RegisterError::MethodNotAllowed { .. } => "method-not-allowed",
        }
    }

    /// The allowlisted field the error is about, so the page can point at it.
    pub fn field(&self) -> Option<&str> {
        match self {
            RegisterError::Form(
                FormError::FieldTooLong(Some(name))
                | FormError::DuplicateField(name)
                | FormError::InvalidValue(name),
            ) => Some(name),
            _ => None,
        }
    }

    /// What the buyer reads: what happened and what to do, without internals.
    pub fn buyer_message(&self) -> String {
        let start_again =
            "Return to AWS Marketplace and choose Set up your account again to get a new link.";
        match self {
            RegisterError::StoreNotConfigured => "Registration store not configured".to_string(),
            RegisterError::OriginNotAllowed(_) => {
                "This registration endpoint only accepts requests from the registration page."
                    .to_string()
            }
            RegisterError::Form(FormError::FieldTooLong(Some(name))) => format!(
                "{name} is too long: shorten it to at most {} characters and submit again.",
                crate::form::MAX_VALUE_CHARS
            ),
            RegisterError::Form(FormError::InvalidValue(name)) => format!(
                "{name} contains characters that are not allowed: correct it and submit again."
            ),
            RegisterError::Form(FormError::DuplicateField(name)) => {
                format!("{name} was sent more than once: submit the form again.")
            }
            RegisterError::Form(FormError::TokenTooLong) => {
                format!("This registration link is not valid. {start_again}")
            }
            RegisterError::Form(e) => format!("The registration form could not be read ({e})."),
            RegisterError::MissingToken => format!(
                "This page was opened without a registration token. {start_again}"
            ),
            RegisterError::InvalidToken => {
                format!("This registration link is not valid. {start_again}")
            }
            RegisterError::ExpiredToken => "Your registration link has expired. Return to AWS Marketplace and choose Set up your account again.".to_string(),
            RegisterError::WrongProduct { .. } => format!(
                "This registration link is for a different product. {start_again}"
            ),
            RegisterError::ResolveUnavailable(_) | RegisterError::Store(PortError::Transient { .. }) => {
                "Registration is temporarily unavailable. Please submit the form again in a few minutes."
                    .to_string()
            }
            RegisterError::ResolveIncomplete | RegisterError::Store(_) => {
                "We could not complete your registration because of a problem on our side. Please try again later or contact the seller's support."
                    .to_string()
            }
            RegisterError::NotFound(_) => "There is nothing here.".to_string(),
            RegisterError::MethodNotAllowed { .. } => {
                "This endpoint accepts the registration form only (POST).".to_string()
            }
        }
    }

    /// Whether the buyer needs a fresh token from AWS Marketplace to go on.
    pub fn needs_new_token(&self) -> bool {
        matches!(
            self,
            RegisterError::MissingToken
                | RegisterError::InvalidToken
                | RegisterError::ExpiredToken
                | RegisterError::WrongProduct { .. }
                | RegisterError::Form(FormError::TokenTooLong)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expired_token_tells_the_buyer_exactly_what_to_do() {
        let e = RegisterError::from(ResolveError::ExpiredToken);
        assert_eq!((e.status(), e.code()), (400, "expired-token"));
        assert!(
            e.buyer_message()
                .contains("Return to AWS Marketplace and choose Set up your account again")
        );
        assert!(e.needs_new_token());
    }

    #[test]
    fn internal_failures_do_not_leak_details() {
        let e = RegisterError::Store(PortError::Failed {
            operation: "PutItem",
            message: "AccessDeniedException: arn:aws:iam::123456789012:role/secret".into(),
        });
        assert_eq!(e.status(), 500);
        assert!(!e.buyer_message().contains("arn:"));
        let e = RegisterError::ResolveUnavailable("ThrottlingException: slow down".into());
        assert_eq!((e.status(), e.code()), (503, "temporarily-unavailable"));
        assert!(!e.buyer_message().contains("Throttling"));
    }

    #[test]
    fn store_not_configured_is_the_spec_text() {
        let e = RegisterError::StoreNotConfigured;
        assert_eq!(e.status(), 500);
        assert_eq!(e.buyer_message(), "Registration store not configured");
        assert_eq!(e.to_string(), "CUSTOMER_PROFILE_TABLE not configured");
    }
}

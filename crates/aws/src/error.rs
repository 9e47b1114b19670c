//! Mapping SDK failures to [`PortError`]: what the SDK's own retry classifiers retry
//! (throttling, transient and server errors, lost connections) is transient (the caller
//! or SQS redelivery retries); everything else is reported.

use aws_runtime::retries::classifiers::{THROTTLING_ERRORS, TRANSIENT_ERRORS};
use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_smithy_types::retry::{ErrorKind, ProvideErrorKind};
use awsmp_core::ports::PortError;

/// HTTP statuses the SDK's `HttpStatusCodeClassifier` retries (its list is private).
const TRANSIENT_STATUS_CODES: &[u16] = &[500, 502, 503, 504];

/// Codes we retry that the SDK's lists leave out. `TransactionConflictException`:
/// DynamoDB refused a write racing another transaction on the same item, and it goes
/// through once that one ends (the SDK leaves such retries to the caller). The others
/// name a service fault; they come with a 5xx status (retried on that alone), and are
/// kept for an endpoint that reports one under another status.
const ALSO_TRANSIENT_CODES: &[&str] = &[
    "TransactionConflictException",
    "InternalServerError",
    "InternalFailure",
    "InternalError",
    "ServiceUnavailable",
];

/// The service's error code, if the failure came from the service.
pub(crate) fn error_code<E>(err: &SdkError<E, HttpResponse>) -> Option<&str>
where
    E: ProvideErrorMetadata,
{
    err.as_service_error().and_then(|e| e.code())
}

/// Whether the service answered `ConditionalCheckFailedException`.
pub(crate) fn is_conditional_check_failed<E>(err: &SdkError<E, HttpResponse>) -> bool
where
    E: ProvideErrorMetadata,
{
    error_code(err) == Some("ConditionalCheckFailedException")
}

/// A conditional write's answer: `Ok(true)` applied, `Ok(false)` its condition failed
/// (the item changed, or is not in the state required), any other failure as a port
/// error of `operation`.
pub(crate) fn applied<T, E>(
    operation: &'static str,
    result: Result<T, SdkError<E, HttpResponse>>,
) -> Result<bool, PortError>
where
    E: ProvideErrorMetadata + ProvideErrorKind + std::error::Error + 'static,
{
    match result {
        Ok(_) => Ok(true),
        Err(e) if is_conditional_check_failed(&e) => Ok(false),
        Err(e) => Err(port_error(operation, e)),
    }
}

/// How the SDK's default retry classifiers would class a failure, `None` when they
/// would not retry it: the error code on the SDK's throttling or transient lists (or on
/// [`ALSO_TRANSIENT_CODES`]), an error modelled as retryable, a 500/502/503/504, and a
/// transport failure as the `TransientErrorClassifier` sees it (a timeout, an
/// unreadable response, a connection that failed on I/O or timed out, or a connector
/// error carrying its own kind; a refused request, such as a bad endpoint, is not).
pub(crate) fn retry_kind<E>(err: &SdkError<E, HttpResponse>) -> Option<ErrorKind>
where
    E: ProvideErrorMetadata + ProvideErrorKind,
{
    match err {
        SdkError::TimeoutError(_) | SdkError::ResponseError(_) => Some(ErrorKind::TransientError),
        SdkError::DispatchFailure(failure) => {
            if failure.is_timeout() || failure.is_io() {
                Some(ErrorKind::TransientError)
            } else {
                failure.as_other()
            }
        }
        SdkError::ServiceError(service) => {
            let error = service.err();
            let code = ProvideErrorMetadata::code(error);
            if code.is_some_and(|c| THROTTLING_ERRORS.contains(&c)) {
                Some(ErrorKind::ThrottlingError)
            } else if code.is_some_and(|c| TRANSIENT_ERRORS.contains(&c)) {
                Some(ErrorKind::TransientError)
            } else if let Some(kind) = error.retryable_error_kind() {
                Some(kind)
            } else if TRANSIENT_STATUS_CODES.contains(&service.raw().status().as_u16())
                || code.is_some_and(|c| ALSO_TRANSIENT_CODES.contains(&c))
            {
                Some(ErrorKind::TransientError)
            } else {
                None
            }
        }
        _ => None,
    }
}

/// Whether a failure is worth retrying (see [`retry_kind`]).
pub(crate) fn is_transient<E>(err: &SdkError<E, HttpResponse>) -> bool
where
    E: ProvideErrorMetadata + ProvideErrorKind,
{
    retry_kind(err).is_some()
}

/// Maps an SDK failure of `operation` to a [`PortError`], keeping the whole message chain.
pub(crate) fn port_error<E>(operation: &'static str, err: SdkError<E, HttpResponse>) -> PortError
where
    E: ProvideErrorMetadata + ProvideErrorKind + std::error::Error + 'static,
{
    let transient = is_transient(&err);
    let message = describe(&err);
    if transient {
        PortError::Transient { operation, message }
    } else {
        PortError::Failed { operation, message }
    }
}

/// `code: message` when the service answered, else the full error chain.
pub(crate) fn describe<E>(err: &SdkError<E, HttpResponse>) -> String
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    match err.as_service_error() {
        Some(service) if service.code().is_some() => format!(
            "{}: {}",
            service.code().unwrap_or_default(),
            service.message().unwrap_or("(no message)")
        ),
        _ => DisplayErrorContext(err).to_string(),
    }
}

/// A failure with no SDK error behind it (a request we refuse to send, a bad cursor).
pub(crate) fn failed(operation: &'static str, message: impl Into<String>) -> PortError {
    PortError::Failed {
        operation,
        message: message.into(),
    }
}

/// A stored item that does not read as the domain expects.
pub(crate) fn corrupt(table: &str, message: impl Into<String>) -> PortError {
    PortError::Corrupt {
        table: table.to_string(),
        message: message.into(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use aws_sdk_dynamodb::error::ErrorMetadata;
    use aws_smithy_types::body::SdkBody;

    /// A service error with any code and modelled retry kind (the SDK's own operation
    /// errors model none for the calls we make).
    #[derive(Debug)]
    struct Scripted {
        meta: ErrorMetadata,
        kind: Option<ErrorKind>,
    }

    impl std::fmt::Display for Scripted {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "scripted {:?}", self.meta.code())
        }
    }

    impl std::error::Error for Scripted {}

    impl ProvideErrorMetadata for Scripted {
        fn meta(&self) -> &ErrorMetadata {
            &self.meta
        }
    }

    impl ProvideErrorKind for Scripted {
        fn retryable_error_kind(&self) -> Option<ErrorKind> {
            self.kind
        }

        fn code(&self) -> Option<&str> {
            self.meta.code()
        }
    }

    fn response(status: u16) -> HttpResponse {
        HttpResponse::new(status.try_into().unwrap(), SdkBody::empty())
    }

    fn service(status: u16, code: Option<&str>, kind: Option<ErrorKind>) -> SdkError<Scripted> {
        let mut meta = ErrorMetadata::builder().message("scripted");
        if let Some(code) = code {
            meta = meta.code(code);
        }
        let err = Scripted {
            meta: meta.build(),
            kind,
        };
        SdkError::service_error(err, response(status))
    }

    #[test]
    fn the_sdks_code_lists_are_retried_with_their_kind() {
        for code in THROTTLING_ERRORS {
            let kind = retry_kind(&service(400, Some(code), None));
            assert_eq!(kind, Some(ErrorKind::ThrottlingError), "{code}");
        }
        for code in TRANSIENT_ERRORS {
            let kind = retry_kind(&service(400, Some(code), None));
            assert_eq!(kind, Some(ErrorKind::TransientError), "{code}");
        }
        // What the old hand list missed.
        for code in ["RequestTimeout", "ThrottledException", "SlowDown"] {
            assert!(is_transient(&service(400, Some(code), None)), "{code}");
        }
    }

    #[test]
    fn every_code_retried_before_still_is() {
        for code in [
            "ThrottlingException",
            "Throttling",
            "ProvisionedThroughputExceededException",
            "RequestLimitExceeded",
            "RequestThrottled",
            "RequestThrottledException",
            "TooManyRequestsException",
            "InternalServerError",
            "InternalFailure",
            "InternalError",
            "ServiceUnavailable",
            "TransactionInProgressException",
            "TransactionConflictException",
        ] {
            assert!(is_transient(&service(400, Some(code), None)), "{code}");
        }
    }

    #[test]
    fn a_modelled_retry_kind_is_kept() {
        for kind in [
            ErrorKind::ThrottlingError,
            ErrorKind::TransientError,
            ErrorKind::ServerError,
            ErrorKind::ClientError,
        ] {
            let err = service(400, Some("SomethingModelled"), Some(kind));
            assert_eq!(retry_kind(&err), Some(kind));
        }
    }

    #[test]
    fn the_sdks_statuses_are_transient_and_no_others() {
        for status in [500, 502, 503, 504] {
            assert!(is_transient(&service(status, None, None)), "{status}");
        }
        for status in [400, 403, 404, 413, 418, 429, 501, 505] {
            assert!(!is_transient(&service(status, None, None)), "{status}");
        }
    }

    #[test]
    fn final_answers_are_reported() {
        for code in [
            "ValidationException",
            "AccessDeniedException",
            "ConditionalCheckFailedException",
            "TransactionCanceledException",
            "ResourceNotFoundException",
        ] {
            let err = port_error("Op", service(400, Some(code), None));
            let PortError::Failed { operation, message } = err else {
                panic!("{code}: {err:?}");
            };
            assert_eq!(operation, "Op");
            assert_eq!(message, format!("{code}: scripted"));
        }
    }

    #[test]
    fn no_answer_is_transient_and_an_unsent_request_is_not() {
        let timeout: SdkError<Scripted> = SdkError::timeout_error("attempt timed out");
        assert!(matches!(
            port_error("Op", timeout),
            PortError::Transient { .. }
        ));
        let unreadable: SdkError<Scripted> =
            SdkError::response_error("body cut short", response(200));
        assert_eq!(retry_kind(&unreadable), Some(ErrorKind::TransientError));
        let unbuilt: SdkError<Scripted> = SdkError::construction_failure("missing field");
        assert!(matches!(
            port_error("Op", unbuilt),
            PortError::Failed { .. }
        ));
    }
}

//! Marketplace Metering: `BatchMeterUsage` and `ResolveCustomer`.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::model::{Allocation, GroupKey};

/// One usage record as sent to `BatchMeterUsage` (CustomerAWSAccountId + LicenseArn).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct MeteringRecord {
    /// The group (its hour start is the record's timestamp).
    pub key: GroupKey,
    /// Product (batches never mix products; never sent as request `ProductCode`).
    pub product_code: String,
    /// Quantity.
    pub quantity: i64,
    /// VMT allocations.
    pub allocations: Option<Vec<Allocation>>,
}

/// Per-record verdict in `Results[]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordVerdict {
    /// Billed.
    Success {
        /// Marketplace record id.
        metering_record_id: String,
    },
    /// Already metered for this group and hour.
    DuplicateRecord {
        /// Marketplace record id, if returned.
        metering_record_id: Option<String>,
    },
    /// Not entitled.
    CustomerNotSubscribed,
    /// Returned in `UnprocessedRecords`: not processed, nothing billed.
    Unprocessed,
    /// The answer does not say what became of the record, so the call may have billed
    /// it: only `UnprocessedRecords` says "not processed".
    Ambiguous {
        /// What was unclear.
        why: UnclearAnswer,
    },
}

/// Why a `BatchMeterUsage` answer leaves one record's fate unclear.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnclearAnswer {
    /// Listed in neither `Results` nor `UnprocessedRecords`.
    Missing,
    /// Its result's `Status` is not one AWS documents (the status as answered).
    UnknownStatus(String),
    /// Its result does not echo the record as sent (another quantity).
    NotEchoed,
}

impl std::fmt::Display for UnclearAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UnclearAnswer::Missing => f.write_str("missing from the answer"),
            UnclearAnswer::UnknownStatus(status) => write!(f, "unknown status {status:?}"),
            UnclearAnswer::NotEchoed => f.write_str("the result does not echo the record sent"),
        }
    }
}

/// Request-level exceptions that fail a whole batch because of its content
/// ([`MeteringError::Validation`]); the submitter bisects to isolate the record.
/// `ValidationException` is not modeled for this API but is answered by AWS services
/// generically.
pub const VALIDATION_EXCEPTIONS: &[&str] = &[
    "InvalidUsageDimensionException",
    "TimestampOutOfBoundsException",
    "InvalidLicenseException",
    "InvalidTagException",
    "InvalidUsageAllocationsException",
    "InvalidProductCodeException",
    "InvalidCustomerIdentifierException",
    "ValidationException",
];

/// Exceptions that refuse a whole call before Marketplace looks at its records: the
/// caller's credentials, role or signature ([`MeteringError::Refused`]). Nothing was
/// billed; nothing in the batch is to blame.
pub const REFUSAL_EXCEPTIONS: &[&str] = &[
    "AccessDeniedException",
    "UnrecognizedClientException",
    "ExpiredTokenException",
    "InvalidSignatureException",
    "InvalidClientTokenId",
    "MissingAuthenticationToken",
    "MissingAuthenticationTokenException",
    "IncompleteSignature",
    "IncompleteSignatureException",
    "SignatureDoesNotMatch",
    "NotAuthorized",
    "RequestExpired",
];

/// The `Exception` name of a call whose connection failed before the request was
/// written (refused, unresolvable, a failed TLS handshake): nothing reached Marketplace.
pub const CONNECT_FAILURE: &str = "ConnectFailure";

/// A request-level failure of `BatchMeterUsage`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MeteringError {
    /// A validation exception that fails the whole batch (bisect to isolate).
    #[error("{name}: {message}")]
    Validation {
        /// Exception name, e.g. `InvalidUsageDimensionException`.
        name: String,
        /// Service message.
        message: String,
    },
    /// `ThrottlingException` (back off with jitter; never bisect).
    #[error("ThrottlingException: {0}")]
    Throttled(String),
    /// `InternalServiceErrorException` or a transport failure (back off; never bisect).
    #[error("transient metering failure: {0}")]
    Transient(String),
    /// `DisabledApiException`: the Region cannot meter; stop the run.
    #[error("DisabledApiException: {0}")]
    Disabled(String),
    /// The call was refused before Marketplace processed any record: an
    /// authentication, authorization or signature exception ([`REFUSAL_EXCEPTIONS`],
    /// or an HTTP 401/403 without one), or a connection that failed before the request
    /// was written ([`CONNECT_FAILURE`]). A definite "nothing billed": the records are
    /// released unpinned; back off, never bisect.
    #[error("{name}: {message}")]
    Refused {
        /// Exception name, e.g. `AccessDeniedException`, or [`CONNECT_FAILURE`].
        name: String,
        /// Service or transport message.
        message: String,
    },
}

/// `BatchMeterUsage`. Results are returned in the order of `records`.
#[async_trait]
pub trait MeteringApi: Send + Sync {
    /// Sends one batch (≤ 25 records, ≤ 1 MB, one product, no request `ProductCode`).
    async fn batch_meter_usage(
        &self,
        records: &[MeteringRecord],
    ) -> Result<Vec<RecordVerdict>, MeteringError>;
}

/// What `ResolveCustomer` returns for a registration token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedCustomer {
    /// License.
    pub license_arn: String,
    /// Buyer account.
    pub customer_aws_account_id: String,
    /// Product code.
    pub product_code: String,
}

/// A `ResolveCustomer` failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    /// `InvalidTokenException`.
    #[error("the registration token is invalid")]
    InvalidToken,
    /// `ExpiredTokenException`.
    #[error("the registration token has expired")]
    ExpiredToken,
    /// Throttling, internal errors, disabled API, transport.
    #[error("ResolveCustomer failed: {0}")]
    Unavailable(String),
    /// The response lacked `LicenseArn` or `CustomerAWSAccountId`.
    #[error("ResolveCustomer returned no LicenseArn/CustomerAWSAccountId (legacy product?)")]
    Incomplete,
}

/// `ResolveCustomer`.
#[async_trait]
pub trait CustomerResolver: Send + Sync {
    /// Resolves a registration token. Implementations never log the token.
    async fn resolve(&self, token: &str) -> Result<ResolvedCustomer, ResolveError>;
}

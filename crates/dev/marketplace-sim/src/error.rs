//! Errors: the service exceptions the simulator answers on the wire, the admin API's
//! own errors, and the failures of starting the simulator.

use axum::http::StatusCode;
use serde::Serialize;

use crate::model::AuthFailure;

/// The exception names the simulator puts in `__type`, as the Marketplace Metering
/// model spells them (plus the generic AWS JSON 1.1 protocol errors).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum ApiErrorKind {
    /// A record's timestamp is 24 h old or more, in the future, or in a closed billing month.
    TimestampOutOfBounds,
    /// A `LicenseArn` does not match the model pattern or is unknown to the simulator.
    InvalidLicense,
    /// A dimension is not one of the seeded dimensions of the record's product.
    InvalidUsageDimension,
    /// More than 5 tags, or a tag key/value of the wrong length or characters.
    InvalidTag,
    /// Allocation quantities do not add up to the record quantity, or too many allocations.
    InvalidUsageAllocations,
    /// The request-level `ProductCode` is malformed or names another product.
    InvalidProductCode,
    /// The request breaks a model constraint that has no dedicated exception.
    Validation,
    /// The body is not the JSON shape of the operation.
    Serialization,
    /// The `X-Amz-Target` header is missing or names an operation the simulator lacks.
    UnknownOperation,
    /// The 10 requests/second quota (or an injected fault) refused the call.
    Throttling,
    /// An injected server-side failure (HTTP 500).
    InternalServiceError,
    /// An injected "API disabled in this Region" failure.
    DisabledApi,
    /// An injected refusal of the caller's credentials, role or signature.
    Unauthorized(AuthFailure),
    /// `ResolveCustomer` got a token the simulator never issued.
    InvalidToken,
    /// `ResolveCustomer` got a token issued 4 h or more ago (sim clock).
    ExpiredToken,
    /// CloudTrail `LookupEvents`: `MaxResults` outside 1..50.
    InvalidMaxResults,
    /// CloudTrail `LookupEvents`: more than one lookup attribute, or an unknown key.
    InvalidLookupAttributes,
    /// CloudTrail `LookupEvents`: `StartTime` after `EndTime`, or not a time.
    InvalidTimeRange,
    /// CloudTrail `LookupEvents`: a `NextToken` not issued for these parameters.
    InvalidNextToken,
    /// CloudTrail `LookupEvents`: an `EventCategory` other than `insight`.
    InvalidEventCategory,
}

impl ApiErrorKind {
    /// The `__type` value on the wire (the SDK maps it to its modeled error variant).
    pub fn wire_name(self) -> &'static str {
        match self {
            Self::TimestampOutOfBounds => "TimestampOutOfBoundsException",
            Self::InvalidLicense => "InvalidLicenseException",
            Self::InvalidUsageDimension => "InvalidUsageDimensionException",
            Self::InvalidTag => "InvalidTagException",
            Self::InvalidUsageAllocations => "InvalidUsageAllocationsException",
            Self::InvalidProductCode => "InvalidProductCodeException",
            Self::Validation => "ValidationException",
            Self::Serialization => "SerializationException",
            Self::UnknownOperation => "UnknownOperationException",
            Self::Throttling => "ThrottlingException",
            Self::InternalServiceError => "InternalServiceErrorException",
            Self::DisabledApi => "DisabledApiException",
            Self::Unauthorized(failure) => failure.wire_name(),
            Self::InvalidToken => "InvalidTokenException",
            Self::ExpiredToken => "ExpiredTokenException",
            Self::InvalidMaxResults => "InvalidMaxResultsException",
            Self::InvalidLookupAttributes => "InvalidLookupAttributesException",
            Self::InvalidTimeRange => "InvalidTimeRangeException",
            Self::InvalidNextToken => "InvalidNextTokenException",
            Self::InvalidEventCategory => "InvalidEventCategoryException",
        }
    }

    /// The HTTP status: every exception is a client error (400) except the internal one
    /// and the refusals AWS answers 403.
    pub fn http_status(self) -> StatusCode {
        match self {
            Self::InternalServiceError => StatusCode::INTERNAL_SERVER_ERROR,
            Self::Unauthorized(failure) if failure.http_status() == 403 => StatusCode::FORBIDDEN,
            _ => StatusCode::BAD_REQUEST,
        }
    }
}

/// A service exception as answered on the wire: `{"__type": ..., "message": ...}`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {message}", kind.wire_name())]
pub struct ApiError {
    /// Which exception.
    pub kind: ApiErrorKind,
    /// The human-readable reason, naming the offending record and field.
    pub message: String,
}

impl ApiError {
    /// An exception of `kind` with `message`.
    pub fn new(kind: ApiErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }
}

/// A refusal of the admin API (seeding, faults, clock, lifecycle events).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdminError {
    /// The admin request is malformed or breaks a rule of the simulator's state.
    #[error("invalid admin request: {0}")]
    Invalid(String),
    /// The admin request names something the simulator does not hold.
    #[error("not found: {0}")]
    NotFound(String),
}

impl AdminError {
    /// The HTTP status of this refusal on the admin API.
    pub fn http_status(&self) -> StatusCode {
        match self {
            Self::Invalid(_) => StatusCode::BAD_REQUEST,
            Self::NotFound(_) => StatusCode::NOT_FOUND,
        }
    }
}

/// A failure to start or run the simulator.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The configuration file could not be read.
    #[error("cannot read config file {path}: {source}")]
    ConfigRead {
        /// The file that was asked for.
        path: String,
        /// Why it could not be read.
        source: std::io::Error,
    },
    /// The configuration file is not a valid `SimConfig`.
    #[error("invalid config file {path}: {source}")]
    ConfigParse {
        /// The file that was asked for.
        path: String,
        /// Where and why parsing failed.
        source: serde_json::Error,
    },
    /// The configuration (file or flags) breaks a rule of the simulator.
    #[error("invalid configuration: {0}")]
    ConfigInvalid(String),
    /// A model pattern failed to compile (a bug in the simulator itself).
    #[error("model pattern does not compile: {0}")]
    Pattern(#[from] regex::Error),
    /// The listening socket could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: String,
        /// Why binding failed.
        source: std::io::Error,
    },
    /// The server stopped with an I/O error.
    #[error("server failed: {0}")]
    Serve(std::io::Error),
    /// The server task panicked or was cancelled.
    #[error("server task ended abnormally: {0}")]
    Join(String),
}

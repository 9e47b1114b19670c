//! Mapping SDK failures to [`PortError`]: throttling, 5xx and transport failures are
//! transient (the caller or SQS redelivery retries); everything else is reported.

use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use awsmp_core::ports::PortError;

/// Error codes that mean "try again later" on DynamoDB and SQS.
const TRANSIENT_CODES: &[&str] = &[
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
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    match result {
        Ok(_) => Ok(true),
        Err(e) if is_conditional_check_failed(&e) => Ok(false),
        Err(e) => Err(port_error(operation, e)),
    }
}

/// Whether a failure is worth retrying: throttling, a 5xx, or no answer at all.
pub(crate) fn is_transient<E>(err: &SdkError<E, HttpResponse>) -> bool
where
    E: ProvideErrorMetadata,
{
    match err {
        SdkError::DispatchFailure(_) | SdkError::TimeoutError(_) | SdkError::ResponseError(_) => {
            true
        }
        SdkError::ServiceError(service) => {
            service.raw().status().is_server_error()
                || service
                    .err()
                    .code()
                    .is_some_and(|code| TRANSIENT_CODES.contains(&code))
        }
        _ => false,
    }
}

/// Maps an SDK failure of `operation` to a [`PortError`], keeping the whole message chain.
pub(crate) fn port_error<E>(operation: &'static str, err: SdkError<E, HttpResponse>) -> PortError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
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

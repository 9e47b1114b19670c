//! How the subscription function reports an event it could not handle
//! ([`awsmp_core::lifecycle::subscription::EventError`]): as a batch item failure, so
//! SQS redelivers and eventually dead-letters the message, logged once at the level its
//! cause deserves; a batch fails as a whole only as `awsmp_lambda::BatchError`
//! says.

use awsmp_core::lifecycle::subscription::EventError;
use awsmp_lambda::MessageFailure;

/// One message's failure, as the SQS batch loop reports it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(transparent)]
pub struct Failure(pub EventError);

impl MessageFailure for Failure {
    /// Logs the failure once, at the level its cause deserves.
    fn log(&self, message_id: &str) {
        let error = &self.0;
        match error {
            EventError::MissingBody | EventError::Malformed(_) => tracing::error!(
                message_id,
                kind = error.kind(),
                error = %error,
                "malformed event reported as a batch item failure: SQS redelivers it, then moves it to the DLQ; nothing was written"
            ),
            EventError::AwaitingLicense { .. } => tracing::warn!(
                message_id,
                kind = error.kind(),
                error = %error,
                "event deferred: reported as a batch item failure for redelivery"
            ),
            EventError::Store(_) | EventError::Contention { .. } => tracing::error!(
                message_id,
                kind = error.kind(),
                error = %error,
                "event not applied: reported as a batch item failure for redelivery"
            ),
        }
    }
}

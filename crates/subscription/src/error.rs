//! Failures of one message of the subscription function ([`MessageError`], reported as
//! a batch item failure so SQS redelivers and eventually dead-letters the message); a
//! batch fails as a whole only as `awsmp_aws::lambda::BatchError` says.

use awsmp_aws::lambda::MessageFailure;
use awsmp_core::lifecycle::EventParseError;
use awsmp_core::ports::PortError;

/// Why one message was not handled (it is retried by SQS, then dead-lettered).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MessageError {
    /// The SQS record has no body.
    #[error("the SQS message has no body")]
    MissingBody,
    /// The body is not a usable Marketplace event (bad JSON, wrong source, missing field).
    #[error("malformed Marketplace event: {0}")]
    Malformed(#[from] EventParseError),
    /// Purchase Agreement Ended arrived before any row of its agreement exists.
    #[error(
        "Purchase Agreement Ended for agreement {agreement_id} arrived before its License Updated: retried until the row exists"
    )]
    AwaitingLicense {
        /// The agreement.
        agreement_id: String,
    },
    /// The subscribers table failed.
    #[error("subscribers table: {0}")]
    Store(#[from] PortError),
    /// Concurrent writers kept moving the row's version.
    #[error("row {license_arn}/{account} kept changing under {attempts} write attempts")]
    Contention {
        /// Partition key.
        license_arn: String,
        /// Sort key.
        account: String,
        /// Attempts made.
        attempts: usize,
    },
}

impl MessageError {
    /// A stable name for logs and metrics filters.
    pub fn kind(&self) -> &'static str {
        match self {
            MessageError::MissingBody | MessageError::Malformed(_) => "MalformedEvent",
            MessageError::AwaitingLicense { .. } => "AwaitingLicenseUpdated",
            MessageError::Store(_) => "SubscribersTableError",
            MessageError::Contention { .. } => "WriteContention",
        }
    }
}

impl MessageFailure for MessageError {
    /// Logs the failure once, at the level its cause deserves.
    fn log(&self, message_id: &str) {
        match self {
            MessageError::MissingBody | MessageError::Malformed(_) => tracing::error!(
                message_id,
                kind = self.kind(),
                error = %self,
                "malformed event reported as a batch item failure: SQS redelivers it, then moves it to the DLQ; nothing was written"
            ),
            MessageError::AwaitingLicense { .. } => tracing::warn!(
                message_id,
                kind = self.kind(),
                error = %self,
                "event deferred: reported as a batch item failure for redelivery"
            ),
            MessageError::Store(_) | MessageError::Contention { .. } => tracing::error!(
                message_id,
                kind = self.kind(),
                error = %self,
                "event not applied: reported as a batch item failure for redelivery"
            ),
        }
    }
}

//! Why a use case failed. A failed SQS message is redelivered and a failed scheduled
//! run is retried on the next tick, so every variant leaves the tables consistent.

use crate::model::GroupKey;
use crate::ports::PortError;

/// A use-case failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PipelineError {
    /// A store or queue failed (after the retries the use case makes itself).
    #[error(transparent)]
    Port(#[from] PortError),
    /// The aggregated record kept moving under us; the message is retried later.
    #[error("aggregation of {group} lost the optimistic-concurrency race {attempts} times")]
    CommitContention {
        /// The group.
        group: GroupKey,
        /// Commits tried.
        attempts: u32,
    },
    /// The group's aggregated record is held by a submitter (sending, or interrupted
    /// mid-send); folding now could bill a quantity other than the one stored.
    #[error("aggregated record {group} is in flight at the submitter; retry later")]
    RecordInFlight {
        /// The group.
        group: GroupKey,
    },
    /// The fold could not be computed (a defect: the rows were screened first).
    #[error("aggregation fold failed: {0}")]
    Fold(String),
    /// The queue refused some messages; the work they carried is retried by redelivery
    /// (aggregator) or rediscovered (discoverer).
    #[error("{failed} of {total} work messages were not accepted by the queue")]
    QueueRejected {
        /// Messages refused.
        failed: usize,
        /// Messages sent.
        total: usize,
    },
    /// A message of the wrong kind reached a stage.
    #[error("{stage} cannot handle a {kind} message")]
    WrongMessageKind {
        /// The stage that received it.
        stage: &'static str,
        /// The message kind received.
        kind: &'static str,
    },
}

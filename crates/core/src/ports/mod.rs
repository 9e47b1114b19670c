//! Ports: one narrow trait per external capability, one file per table, queue or
//! service. Domain code takes the narrowest one it needs (`&dyn UsageStore`);
//! `crate::memory` has an in-memory implementation of each for tests (one file per
//! port there too), and the `awsmp-aws` crate implements them with the AWS SDK.

mod aggregated;
mod agreements;
mod bus;
mod clock;
mod metering;
mod metrics;
mod operator;
mod queue;
mod subscribers;
mod usage;

pub use aggregated::*;
pub use agreements::*;
pub use bus::*;
pub use clock::*;
pub use metering::*;
pub use metrics::*;
pub use operator::*;
pub use queue::*;
pub use subscribers::*;
pub use usage::*;

use crate::model::Attr;

/// A failure talking to a store or queue. Transient errors are retried by the caller
/// (or by SQS redelivery); the others are reported.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PortError {
    /// Throttled or temporarily unavailable; safe to retry.
    #[error("transient failure in {operation}: {message}")]
    Transient {
        /// The operation that failed.
        operation: &'static str,
        /// What the service said.
        message: String,
    },
    /// A stored item could not be read as the domain expects.
    #[error("corrupt item in {table}: {message}")]
    Corrupt {
        /// Which table.
        table: String,
        /// What was wrong.
        message: String,
    },
    /// Anything else (permissions, missing table, ...).
    #[error("{operation} failed: {message}")]
    Failed {
        /// The operation that failed.
        operation: &'static str,
        /// What the service said.
        message: String,
    },
}

/// An opaque pagination cursor (a serialized `LastEvaluatedKey`).
pub type Cursor = String;

/// One page of a paginated query.
#[derive(Debug, Clone, PartialEq)]
pub struct Page<T> {
    /// Items on this page.
    pub items: Vec<T>,
    /// Items on this page that cannot be read as `T` (a seller's malformed row): listed
    /// by key, never a reason to fail the page (one bad row must not stop the rest).
    pub malformed: Vec<MalformedItem>,
    /// Cursor for the next page; `None` when this was the last.
    pub next: Option<Cursor>,
}

impl<T> Default for Page<T> {
    fn default() -> Self {
        Page {
            items: Vec::new(),
            malformed: Vec::new(),
            next: None,
        }
    }
}

/// A stored item that cannot be read as the domain expects, by its stored keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MalformedItem {
    /// Partition key as stored.
    pub license_arn: String,
    /// Sort key as stored.
    pub sort_key: String,
    /// What is wrong with it.
    pub problem: String,
}

/// The identity of one logical final write, stored with it (`finalWriteId`): drawn once
/// by the caller before the write's retries, so that a retry whose condition fails
/// because the write already took effect (its response was lost: a timeout, the SDK's
/// own retry, [`crate::pipeline::retry::retry_transient`] after a
/// [`PortError::Transient`]) learns that the transition was its own, and only its own:
/// a racing writer draws another. Every terminal status with a metric is counted by the
/// caller whose write made the transition, exactly once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FinalWriteId {
    random: u64,
    process: u32,
}

impl FinalWriteId {
    /// A fresh id: 64 random bits ([`crate::random::random_u64`], seeded in a
    /// simulation so it replays) and the process id, as a claim id is drawn.
    pub fn fresh() -> Self {
        FinalWriteId {
            random: crate::random::random_u64(),
            process: std::process::id(),
        }
    }

    /// The stored attribute (`finalWriteId`, a string).
    pub fn attr(&self) -> Attr {
        Attr::S(self.to_string())
    }

    /// Whether `stored` (an item's `finalWriteId`) is this write's.
    pub fn is(&self, stored: Option<&Attr>) -> bool {
        stored == Some(&self.attr())
    }
}

impl std::fmt::Display for FinalWriteId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:016x}{:08x}", self.random, self.process)
    }
}

/// Result of an idempotent ingestion write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutOutcome {
    /// Written.
    Created,
    /// A row with the same event id already exists; nothing changed.
    AlreadyExists,
}

/// Most claims or outcome writes in one [`AggregatedStore::claim_all`] /
/// [`AggregatedStore::record_all`] call: one `BatchMeterUsage` batch (a DynamoDB
/// transaction holds up to 100 items; 25 stays far inside its 4 MB).
pub const MAX_BATCH_WRITES: usize = 25;

/// Refuses a batched claim or outcome call of more than [`MAX_BATCH_WRITES`] items.
pub fn check_batch_writes(operation: &'static str, n: usize) -> Result<(), PortError> {
    if n > MAX_BATCH_WRITES {
        return Err(PortError::Failed {
            operation,
            message: format!("{n} items in one call; at most {MAX_BATCH_WRITES}"),
        });
    }
    Ok(())
}

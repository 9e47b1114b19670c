//! The work queues between the discoverer, the aggregator and cleanup.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::charges::UnitPrice;
use crate::model::{GroupKey, ReasonCode};

use super::PortError;

/// A work message between pipeline stages (JSON in SQS).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum WorkMessage {
    /// Aggregate one group (discoverer -> aggregator).
    Aggregate {
        /// The group.
        group: GroupKey,
        /// True for a deprovisioning flush (lock bypassed).
        #[serde(default)]
        flush: bool,
        /// The unit price of the group's usage under the buyer's agreement, from the
        /// rate card kept on the buyer's row when the group was sent (`None`: none
        /// kept, or the row could not be read). The aggregator keeps it on the record.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        price: Option<UnitPrice>,
    },
    /// Finalize raw rows of one group (aggregator -> cleanup).
    Cleanup {
        /// The group.
        group: GroupKey,
        /// Rows counted into the aggregate: mark `Aggregated`.
        #[serde(default)]
        aggregated: Vec<String>,
        /// Rows rejected client-side, with their reason code.
        #[serde(default)]
        rejected: Vec<(String, ReasonCode)>,
    },
}

/// Per-message result of a queue send.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SendReport {
    /// Indexes (into the input) of messages that were not accepted.
    pub failed: Vec<usize>,
}

/// A work queue (SQS `SendMessageBatch` in tens).
#[async_trait]
pub trait WorkQueue: Send + Sync {
    /// Sends messages; reports the ones that failed, never silently drops any.
    async fn send(&self, messages: &[WorkMessage]) -> Result<SendReport, PortError>;
}

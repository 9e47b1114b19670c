//! The raw usage table: a seller's rows, written idempotently by event id, found through
//! the sparse `metering_pending` index, counted and made final.

use async_trait::async_trait;
use serde::Serialize;

use crate::model::{Allocation, GroupKey, RawStatus, RawUsageRow, ReasonCode};
use crate::time::{HourBucket, Instant};

use super::{Cursor, FinalWriteId, Page, PortError};

/// A row still in a sparse `metering_pending` index whose index value is not a live
/// hour bucket (found by sweeping the index, never the table).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StrayPending {
    /// Partition key.
    pub license_arn: String,
    /// Sort key.
    pub sort_key: String,
    /// The `meteringPending` value it carries.
    pub metering_pending: String,
}

/// A pending raw row as the sparse `metering_pending` GSI shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingRawRef {
    /// Partition key.
    pub license_arn: String,
    /// Sort key.
    pub sort_key: String,
    /// Projected buyer account (absent if the seller did not write it).
    pub customer_aws_account_id: Option<String>,
    /// Projected dimension (absent if the seller did not write it).
    pub dimension: Option<String>,
}

/// What a row's counting claim (`aggregatedInto`) must be for a final status to apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowClaim<'a> {
    /// Counted into the record with this aggregated sort key.
    Counted(&'a str),
    /// Never counted.
    Uncounted,
}

/// What the write that makes a raw row final sets: its terminal status, the reason,
/// when DynamoDB may delete it (`expiresAt`; `None`: never, and a stale value is
/// removed), and the write's identity (`finalWriteId`). Build it with [`RowFinal::new`]
/// and [`RowFinal::expiring`], once per logical write, before its retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowFinal {
    /// The terminal status.
    pub status: RawStatus,
    /// The reason code (`RejectedClientSide`), if any.
    pub reason: Option<ReasonCode>,
    /// `expiresAt`, from the stack's retention ([`crate::retention::Retention::expiry`]).
    pub expires_at: Option<Instant>,
    /// This write's identity: a retry of it that finds it applied answers `true`.
    pub write_id: FinalWriteId,
}

impl RowFinal {
    /// `status` with `reason`, never expiring, with a fresh [`FinalWriteId`]: build it
    /// before the retries, never inside them.
    pub fn new(status: RawStatus, reason: Option<ReasonCode>) -> Self {
        RowFinal {
            status,
            reason,
            expires_at: None,
            write_id: FinalWriteId::fresh(),
        }
    }

    /// The same final write, deleted by DynamoDB from `expires_at` on.
    pub fn expiring(self, expires_at: Option<Instant>) -> Self {
        RowFinal { expires_at, ..self }
    }
}

/// A new usage row to ingest (the `awsmp usage` commands and the Rust ingestion API).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewUsageRow {
    /// License.
    pub license_arn: String,
    /// Buyer account.
    pub customer_aws_account_id: String,
    /// Dimension.
    pub dimension: String,
    /// Usage instant (whole seconds).
    pub timestamp: Instant,
    /// Quantity.
    pub quantity: i64,
    /// Optional VMT allocations.
    pub allocations: Option<Vec<Allocation>>,
    /// Optional product code.
    pub product_code: Option<String>,
    /// Caller-supplied idempotency id; it becomes the sort-key suffix, so a retried
    /// write with the same id is a no-op and same-second writes never collide.
    pub event_id: String,
    /// Whether `timestamp` is the moment of writing because the caller gave no instant
    /// ("now"): a retry's "now" is later than the first attempt's, so the instant is
    /// then no part of what a retry must repeat ([`crate::items::ingestion::judge_repeat`]).
    pub timestamp_defaulted: bool,
}

/// One event's usage: what a write of its event id stored, or what a call carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct EventContent {
    /// Buyer account.
    pub account: String,
    /// Dimension.
    pub dimension: String,
    /// Quantity.
    pub quantity: i64,
    /// VMT allocations, if any.
    pub allocations: Option<Vec<Allocation>>,
    /// Usage instant.
    pub timestamp: Instant,
}

/// An event id written before with other usage: nothing was written, and this call's
/// usage is not billed under that id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct EventConflict {
    /// License (the event id is unique per license).
    pub license_arn: String,
    /// The reused event id.
    pub event_id: String,
    /// What the first write of the event id stored; `None` when its row can no longer
    /// be read (deleted by the table's retention).
    pub recorded: Option<EventContent>,
    /// What this call carries.
    pub this: EventContent,
}

/// Result of an ingestion write ([`UsageStore::put_row`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IngestOutcome {
    /// Written.
    Created,
    /// The event id was written before with the same usage (a retry): nothing changed.
    Duplicate,
    /// The event id was written before with other usage: nothing changed.
    Conflict(Box<EventConflict>),
}

/// The raw usage table.
#[async_trait]
pub trait UsageStore: Send + Sync {
    /// One page of rows pending in `hour` (sparse GSI query, never a scan).
    async fn pending_page(
        &self,
        hour: HourBucket,
        cursor: Option<Cursor>,
    ) -> Result<Page<PendingRawRef>, PortError>;

    /// Every row of one group: a targeted query of the group's sort-key range
    /// (`<account>#<dimension>#<YYYY-MM-DDTHH>`), any status.
    async fn group_rows(&self, key: &GroupKey) -> Result<Vec<RawUsageRow>, PortError>;

    /// Reads one row by its keys.
    async fn get_row(
        &self,
        license_arn: &str,
        sort_key: &str,
    ) -> Result<Option<RawUsageRow>, PortError>;

    /// Gives a row its terminal status (`meteringStatus`, `meteringStatusReason`, removed
    /// when `None`), its `expiresAt` (removed when `None`) and `finalWriteId` (the
    /// write's id), and removes `meteringPending`, only if it is still pending and its
    /// counting claim is as `claim` says: `Counted(record sort key)` requires
    /// `aggregatedInto` to be exactly that (only a counted row becomes `Aggregated`);
    /// `Uncounted` requires no `aggregatedInto` (a counted row is never rejected or
    /// expired). `Ok(false)` when the condition fails (idempotent), unless the row
    /// carries this write's `finalWriteId` (an earlier attempt of the same write applied
    /// and its answer was lost): then `Ok(true)`, and nothing is written again. So
    /// `true` means "this write made the transition", across retries.
    async fn finalize_row(
        &self,
        license_arn: &str,
        sort_key: &str,
        claim: RowClaim<'_>,
        outcome: RowFinal,
        now: Instant,
    ) -> Result<bool, PortError>;

    /// Writes a new row and its event's marker unless the event id (or the row's key)
    /// was written before; then reads what the first write stored and answers
    /// [`IngestOutcome::Duplicate`] or [`IngestOutcome::Conflict`] by
    /// [`crate::items::ingestion::judge_repeat`].
    async fn put_row(&self, row: &NewUsageRow, now: Instant) -> Result<IngestOutcome, PortError>;

    /// One page of the sweep of the whole sparse pending index (a Scan of the index,
    /// which holds only pending rows, never of the table): the rows whose
    /// `meteringPending` is not one of `live` (the buckets the per-hour queries visit).
    async fn stray_pending_page(
        &self,
        live: &[HourBucket],
        cursor: Option<Cursor>,
    ) -> Result<Page<StrayPending>, PortError>;

    /// Sets `meteringPending` to `hour` on a row whose index value was `from` (a
    /// non-bucket marker such as `"true"`), only if it still is, and removes
    /// `expiresAt` (the row is pending). `Ok(false)` otherwise.
    async fn repair_pending(
        &self,
        license_arn: &str,
        sort_key: &str,
        from: &str,
        hour: HourBucket,
        now: Instant,
    ) -> Result<bool, PortError>;
}

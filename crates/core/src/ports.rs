//! Ports: one narrow trait per external capability. Domain code takes the narrowest
//! one it needs (`&dyn UsageStore`); `crate::memory` has an in-memory implementation
//! of each for tests, and the `awsmp-aws` crate implements them with the AWS SDK.

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::model::{
    AggregatedRecord, AggregatedStatus, Allocation, Attr, CustomerProfile, GroupKey, RawStatus,
    RawUsageRow, ReasonCode, Subscriber,
};
use crate::time::{HourBucket, Instant};

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
    /// A fresh id: 64 random bits ([`crate::pipeline::retry::random_u64`], seeded in a
    /// simulation so it replays) and the process id, as a claim id is drawn.
    pub fn fresh() -> Self {
        FinalWriteId {
            random: crate::pipeline::retry::random_u64(),
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

/// Result of an idempotent ingestion write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutOutcome {
    /// Written.
    Created,
    /// A row with the same event id already exists; nothing changed.
    AlreadyExists,
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

/// One atomic aggregation step: create-or-fold the group's aggregated record and
/// claim the counted raw rows (`aggregatedInto`), all or nothing. This is the
/// idempotency commit point: a raw row is counted exactly when it carries the claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AggregationCommit {
    /// The record as it must be after the commit (quantity and allocations include
    /// the newly claimed rows; `version` is the new version).
    pub record: AggregatedRecord,
    /// The version the stored record must still have; `None` means it must not exist.
    pub expected_version: Option<u64>,
    /// Raw rows (license, sort key) to claim; each must still be pending and unclaimed.
    /// At most [`MAX_ROWS_PER_COMMIT`].
    pub claimed_rows: Vec<(String, String)>,
    /// `expiresAt` of the claimed rows, which the commit makes final (`None`: removed).
    /// Never the record's: it stays pending, and the commit removes any it carries.
    pub rows_expire_at: Option<Instant>,
    /// Commit instant (audit stamps).
    pub now: Instant,
}

/// Most raw rows one commit claims (DynamoDB transactions hold 100 items).
pub const MAX_ROWS_PER_COMMIT: usize = 99;

/// Outcome of an [`AggregationCommit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitOutcome {
    /// Applied.
    Committed,
    /// Another writer got there first (version moved, record exists, or a row was
    /// claimed or finalized meanwhile); re-read and recompute.
    Conflict,
}

/// A terminal or retry outcome to record on an aggregated row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubmissionUpdate {
    /// New status; `Pending` keeps it pending (e.g. unprocessed) and only releases the claim.
    pub status: AggregatedStatus,
    /// Reason (exception name, ...), if any.
    pub reason: Option<String>,
    /// Marketplace record id, if billed.
    pub metering_record_id: Option<String>,
    /// For `Pending`: whether any send of this record may have taken effect (an
    /// ambiguous outcome now or earlier): `sentQuantity` is kept, so no more folds and
    /// only identical re-sends; `false` removes it (nothing was billed, folds resume).
    pub possibly_sent: bool,
    /// Whether a call of ours may have billed the record, now or earlier
    /// (`possiblyBilled`, any status): `true` sets it; `false` under a claim records
    /// "no" where nothing is stored yet; never cleared (see
    /// [`AggregatedStore::record_all`]).
    pub possibly_billed: bool,
    /// For a terminal status: `expiresAt`, when DynamoDB may delete the record
    /// ([`crate::retention::Retention::record_expiry`]); `None` removes it. A `Pending`
    /// update always removes it.
    pub expires_at: Option<Instant>,
    /// For a terminal status: this write's identity (`finalWriteId`), drawn once before
    /// its retries, for a write whose caller counts a metric when it applies (the
    /// claimless age-out): a retry that finds it applied answers `true`. `None`: a
    /// failed condition always answers `false`.
    pub final_write_id: Option<FinalWriteId>,
}

impl SubmissionUpdate {
    /// A terminal (or plain pending) update with nothing possibly sent.
    pub fn new(
        status: AggregatedStatus,
        reason: Option<String>,
        metering_record_id: Option<String>,
    ) -> Self {
        SubmissionUpdate {
            status,
            reason,
            metering_record_id,
            possibly_sent: false,
            possibly_billed: false,
            expires_at: None,
            final_write_id: None,
        }
    }

    /// The same update, identified as one logical write by a fresh [`FinalWriteId`]:
    /// build it before the retries, never inside them.
    pub fn once(self) -> Self {
        SubmissionUpdate {
            final_write_id: Some(FinalWriteId::fresh()),
            ..self
        }
    }

    /// The same update, saying whether a call of ours may have billed the record.
    pub fn with_possibly_billed(self, possibly_billed: bool) -> Self {
        SubmissionUpdate {
            possibly_billed,
            ..self
        }
    }

    /// The same update, with `expiresAt` (kept only on a terminal status).
    pub fn expiring(self, expires_at: Option<Instant>) -> Self {
        SubmissionUpdate { expires_at, ..self }
    }

    /// Stays pending and releases the claim; `possibly_sent` as on the field.
    pub fn release(possibly_sent: bool) -> Self {
        SubmissionUpdate {
            possibly_sent,
            ..SubmissionUpdate::new(AggregatedStatus::Pending, None, None)
        }
    }
}

/// A submitter's claim on one aggregated record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// Unique per claim: outcomes are written only under it, so a submitter whose
    /// lease ran out can never overwrite what a later claim recorded.
    pub id: String,
    /// Wall-clock now (a stale invocation time must not make a live lease look expired).
    pub now: Instant,
    /// Wall-clock end of the lease.
    pub until: Instant,
}

/// What a successful claim learned about the record's past (true at the claim: the
/// claim is taken only on the record exactly as read).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimGrant {
    /// The record's quantity is pinned (it carried `sentQuantity`, or an unreleased
    /// claim that may have sent): every re-send carries it, and a definite "not billed
    /// now" keeps it. Whether a call of ours may have billed it is
    /// [`AggregatedRecord::may_have_been_billed`] of the record as read.
    pub previously_sent: bool,
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

/// The state a claim expects to find: the record exactly as the submitter read it.
/// Every fold bumps `version`, every claim bumps `attempt_count` and sets a fresh
/// `claim_id`, every outcome removes `claim_id`: if all three match, nothing the
/// pipeline does happened to the record since the read. `quantity` catches what the
/// pipeline does not count: a seller updating a direct-submit record in place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimExpectation {
    /// `version` as read.
    pub version: u64,
    /// `quantity` as read.
    pub quantity: i64,
    /// `attemptCount` as read (0: absent).
    pub attempt_count: u32,
    /// `claimId` as read (`None`: absent).
    pub claim_id: Option<String>,
}

/// One record to claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRequest {
    /// Which record.
    pub key: GroupKey,
    /// The state it was read in.
    pub expected: ClaimExpectation,
    /// What an earlier send may have done, as read (the grant's `previously_sent`).
    pub previously_sent: bool,
    /// The quantity the call will send ([`AggregatedRecord::quantity_to_send`] as
    /// read): the claim stores it as `sentQuantity`.
    pub sent_quantity: i64,
    /// The claim to take.
    pub claim: Claim,
}

impl ClaimRequest {
    /// A claim on `record` as read.
    pub fn of(record: &AggregatedRecord, claim: Claim) -> Self {
        ClaimRequest {
            key: record.key.clone(),
            expected: ClaimExpectation {
                version: record.version,
                quantity: record.quantity,
                attempt_count: record.attempt_count,
                claim_id: record.claim_id.clone(),
            },
            previously_sent: record.sent_quantity.is_some() || record.in_flight_until.is_some(),
            sent_quantity: record.quantity_to_send(),
            claim,
        }
    }

    /// The grant, once the claim is taken (the record is as read, so is its past).
    pub fn grant(&self) -> ClaimGrant {
        ClaimGrant {
            previously_sent: self.previously_sent,
        }
    }
}

/// One submission outcome to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutcomeWrite {
    /// Which record.
    pub key: GroupKey,
    /// The claim it is written under (`None`: only while no unexpired claim holds it).
    pub claim_id: Option<String>,
    /// The outcome.
    pub update: SubmissionUpdate,
}

/// The aggregated-usage table.
#[async_trait]
pub trait AggregatedStore: Send + Sync {
    /// Reads one record.
    async fn get(&self, key: &GroupKey) -> Result<Option<AggregatedRecord>, PortError>;

    /// Applies one aggregation commit atomically (see [`AggregationCommit`]).
    async fn commit(&self, commit: &AggregationCommit) -> Result<CommitOutcome, PortError>;

    /// One page of records pending in `hour` (sparse GSI, never a scan), full records.
    async fn pending_page(
        &self,
        hour: HourBucket,
        cursor: Option<Cursor>,
    ) -> Result<Page<AggregatedRecord>, PortError>;

    /// Claims pending records for sending, in one request where the store can (DynamoDB:
    /// one `TransactWriteItems`, retried without the items whose condition failed).
    /// Each claim sets `inFlightUntil = claim.until`, `claimId = claim.id`,
    /// `sentQuantity` = the quantity the call sends (the request's), removes `expiresAt` (a pending record never
    /// carries it), and bumps the attempt count, only if the
    /// record is pending, not mid-fold (`aggregationInProgress`), not held by an
    /// unexpired claim at `claim.now`, and still exactly as read ([`ClaimExpectation`]:
    /// no fold, claim or outcome since, the quantity unchanged), so what the read says about earlier sends is
    /// what is true at the claim. One answer per request, in order: `None` where the
    /// condition failed (skip it this run). At most [`MAX_BATCH_WRITES`] requests.
    async fn claim_all(
        &self,
        requests: &[ClaimRequest],
    ) -> Result<Vec<Option<ClaimGrant>>, PortError>;

    /// [`AggregatedStore::claim_all`] for one record.
    async fn claim(
        &self,
        record: &AggregatedRecord,
        claim: &Claim,
    ) -> Result<Option<ClaimGrant>, PortError> {
        let request = ClaimRequest::of(record, claim.clone());
        let granted = self.claim_all(std::slice::from_ref(&request)).await?;
        Ok(granted.into_iter().next().flatten())
    }

    /// Records submission outcomes and releases their claims, in one request where the
    /// store can. Terminal statuses remove `meteringPending` and set `expiresAt` as the
    /// update says (removed when `None`); `Pending` removes `expiresAt`. Any status:
    /// `possiblyBilled` becomes true when the update says so, and, under a claim, false
    /// where it is absent; it is never cleared. Each applies only while
    /// the record is still pending and, with a claim id, only while that claim holds
    /// it; without one (age-out, a record that cannot be sent), only while no unexpired
    /// claim holds it at `now`. A terminal update with a
    /// [`final_write_id`](SubmissionUpdate::final_write_id) stores it (`finalWriteId`),
    /// and a write whose condition fails answers `true` when the record carries it (an
    /// earlier attempt applied, its answer lost). One answer per write, in order:
    /// whether it applied. At most [`MAX_BATCH_WRITES`] writes.
    async fn record_all(
        &self,
        writes: &[OutcomeWrite],
        now: Instant,
    ) -> Result<Vec<bool>, PortError>;

    /// [`AggregatedStore::record_all`] for one record.
    async fn record(
        &self,
        key: &GroupKey,
        claim_id: Option<&str>,
        update: &SubmissionUpdate,
        now: Instant,
    ) -> Result<bool, PortError> {
        let write = OutcomeWrite {
            key: key.clone(),
            claim_id: claim_id.map(str::to_string),
            update: update.clone(),
        };
        let applied = self.record_all(std::slice::from_ref(&write), now).await?;
        Ok(applied.into_iter().next().unwrap_or(false))
    }

    /// Gives a malformed item of the pending index (see [`Page::malformed`]) the final
    /// status `Error` with `reason` and `expiresAt` = `expires_at` (removed when `None`),
    /// by its stored keys, only while it still carries `meteringPending`. `Ok(false)`
    /// otherwise.
    async fn reject_malformed(
        &self,
        item: &MalformedItem,
        reason: &str,
        expires_at: Option<Instant>,
        now: Instant,
    ) -> Result<bool, PortError>;

    /// One page of the sweep of the whole sparse pending index (a Scan of the index,
    /// never of the table): full records whose `meteringPending` is not one of `live`
    /// (hours older than any per-hour query visits, or future ones); items that cannot
    /// be read, or whose `meteringPending` is not their hour, in `malformed`.
    async fn stray_pending_page(
        &self,
        live: &[HourBucket],
        cursor: Option<Cursor>,
    ) -> Result<Page<AggregatedRecord>, PortError>;

    /// Direct-submit ingestion: writes a finalized hourly total unless the group exists.
    async fn put_direct(
        &self,
        record: &AggregatedRecord,
        now: Instant,
    ) -> Result<PutOutcome, PortError>;
}

/// What the operator tool (`awsmp`) reads of the two metering tables, and its one
/// write. Reads page through one license's items (a query by partition key) or the
/// whole table (a scan: the operator pays one read of the table); the Lambdas never
/// use this port.
#[async_trait]
pub trait OperatorStore: Send + Sync {
    /// One page of raw usage items (ingestion markers included: the caller skips them),
    /// of `license_arn` only when given.
    async fn raw_rows_page(
        &self,
        license_arn: Option<&str>,
        cursor: Option<Cursor>,
    ) -> Result<Page<RawUsageRow>, PortError>;

    /// One page of aggregated records, of `license_arn` only when given; items that
    /// cannot be read as records in `malformed`.
    async fn records_page(
        &self,
        license_arn: Option<&str>,
        cursor: Option<Cursor>,
    ) -> Result<Page<AggregatedRecord>, PortError>;

    /// `awsmp replay`: puts an `Error` record back in the submitter's queue with the
    /// quantity it holds (`Pending`, `meteringPending` = its hour, reason and `expiresAt`
    /// removed, `sentQuantity` kept or set to its quantity so no late row folds in), only
    /// while it is still `Error` with the attempt count read. `Ok(false)` when it changed.
    async fn replay(&self, record: &AggregatedRecord, now: Instant) -> Result<bool, PortError>;
}

/// The PII-free subscribers table (in us-east-1, read cross-Region).
#[async_trait]
pub trait SubscriberStore: Send + Sync {
    /// Reads one row.
    async fn get(&self, license_arn: &str, account: &str) -> Result<Option<Subscriber>, PortError>;

    /// Rows for a license (any account).
    async fn by_license(&self, license_arn: &str) -> Result<Vec<Subscriber>, PortError>;

    /// Rows of an agreement (through the agreement index).
    async fn by_agreement(&self, agreement_id: &str) -> Result<Vec<Subscriber>, PortError>;

    /// Rows whose `subscriptionStatus` is `deprovisioning` (through the deprovisioning index).
    async fn deprovisioning(&self) -> Result<Vec<Subscriber>, PortError>;

    /// Writes the row's lifecycle fields if the stored version is still
    /// `row.version` (0 = must not exist); stores `row.version + 1`. Never touches
    /// `registeredRegions`. `Ok(false)` on a version conflict (re-read and retry).
    async fn put_lifecycle(&self, row: &Subscriber, now: Instant) -> Result<bool, PortError>;

    /// Registration: sets `productCode` if absent and `ADD registeredRegions :region`
    /// (idempotent), creating the row if needed. Never touches lifecycle fields.
    async fn add_registered_region(
        &self,
        license_arn: &str,
        account: &str,
        product_code: &str,
        region: &str,
        now: Instant,
    ) -> Result<(), PortError>;
}

/// The in-Region customer-profile table (buyer PII stays here).
#[async_trait]
pub trait ProfileStore: Send + Sync {
    /// Upserts the allowlisted fields (always writes the identity row, even with none).
    async fn upsert(&self, profile: &CustomerProfile, now: Instant) -> Result<(), PortError>;
}

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

/// EMF metric names (namespace `AwsMarketplace/Metering`).
pub mod metric {
    /// Namespace of every metric.
    pub const NAMESPACE: &str = "AwsMarketplace/Metering";
    /// A raw row rejected client-side (dimension `Reason`).
    pub const USAGE_RECORD_REJECTED: &str = "UsageRecordRejected";
    /// A record still unprocessed after the retry.
    pub const USAGE_RECORD_UNPROCESSED: &str = "UsageRecordUnprocessed";
    /// A raw row aged out.
    pub const USAGE_AGGREGATION_EXPIRED: &str = "UsageAggregationExpired";
    /// An aggregated row aged out.
    pub const USAGE_SUBMISSION_EXPIRED: &str = "UsageSubmissionExpired";
    /// A request-level exception (dimension `Exception`).
    pub const BATCH_METER_USAGE_EXCEPTION: &str = "BatchMeterUsageException";
    /// A final CustomerNotSubscribed.
    pub const CUSTOMER_NOT_SUBSCRIBED: &str = "CustomerNotSubscribed";
    /// A multi-record sub-batch reached the bisection depth cap.
    pub const BISECT_DEPTH_EXCEEDED: &str = "BisectDepthExceeded";
    /// Records billed.
    pub const USAGE_RECORD_SUBMITTED: &str = "UsageRecordSubmitted";
    /// A late raw row for an already-submitted hour.
    pub const LATE_USAGE_AFTER_SUBMISSION: &str = "LateUsageAfterSubmission";
    /// The Region refused metering (`DisabledApiException`).
    pub const METERING_API_DISABLED: &str = "MeteringApiDisabled";
    /// `DuplicateRecord` for a record no earlier call of ours may have billed:
    /// something else billed the hour, perhaps with another quantity (alarm).
    pub const UNEXPECTED_DUPLICATE_RECORD: &str = "UnexpectedDuplicateRecord";
    /// A send whose outcome is unknown (the call may have billed): the record is
    /// re-sent with exactly the same quantity until a definite answer (alarm).
    pub const AMBIGUOUS_SUBMISSION: &str = "AmbiguousSubmission";
    /// A run that could not do all it should (unreadable index, store failure,
    /// deadline with work left): dimension `Function` (alarm).
    pub const INCOMPLETE_RUN: &str = "IncompleteRun";
    /// Registration form fields dropped because `ALLOWED_REGISTRATION_FIELDS` does not
    /// list them (the buyer typed them; the profile does not keep them).
    pub const REGISTRATION_FIELD_DROPPED: &str = "RegistrationFieldDropped";
    /// A seller-written item the pipeline cannot read (dimension `Table`).
    pub const MALFORMED_ITEM: &str = "MalformedItem";
    /// Aggregated records a submitter run found pending past their lock and due (a
    /// dry run counts allowlisted accounts only), emitted every run, zero included:
    /// with `UsageRecordSubmitted`, the input of the submission heartbeat alarm.
    pub const PENDING_PAST_LOCK: &str = "PendingPastLock";
}

/// Metrics (EMF to stdout in Lambda).
pub trait MetricsSink: Send + Sync {
    /// Adds `value` to the count `name` with the given dimensions.
    fn count(&self, name: &str, dimensions: &[(&str, &str)], value: u64);
}

/// Time, injectable so every run can be replayed.
#[async_trait]
pub trait Clock: Send + Sync {
    /// Now.
    fn now(&self) -> Instant;
    /// Waits (backoff, pacing). A test clock advances instead of sleeping.
    async fn sleep(&self, duration: Duration);
}

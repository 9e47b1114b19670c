//! The aggregated-usage table: one record per group and hour, folded by the
//! aggregator's atomic commit, claimed and settled by the submitter.

use async_trait::async_trait;

use crate::model::{AggregatedRecord, AggregatedStatus, GroupKey};
use crate::time::{HourBucket, Instant};

use super::{Cursor, FinalWriteId, MalformedItem, Page, PortError, PutOutcome};

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
    /// condition failed (skip it this run). At most [`MAX_BATCH_WRITES`](super::MAX_BATCH_WRITES) requests.
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
    /// whether it applied. At most [`MAX_BATCH_WRITES`](super::MAX_BATCH_WRITES) writes.
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

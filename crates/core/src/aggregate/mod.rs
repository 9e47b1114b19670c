//! Aggregation: folding a group's accepted rows into the new state of its one
//! aggregated record, planning the ≤ 99-row commits that claim them, and deciding when
//! a pending record is due for submission (the zero-quantity policy).
//!
//! Fold rules (see [`fold`]):
//! - quantity = the existing record's + the rows'; a new record starts at version 1,
//!   a fold bumps the version by one and keeps every other field of the record;
//! - a record may never exceed 2147483647: before folding, [`split_within_cap`] gives
//!   any row that would take the total over it `QuantityTooLarge` (rejected, never
//!   silently wrapped or clamped; the rest of the group is still counted);
//! - allocations: zero-quantity rows never contribute allocations (they carry nothing
//!   to bill and are ignored by the mixing rule). A non-zero record is tagged when a
//!   non-zero counted row (or the existing non-zero record) is; its allocations are
//!   the VMT merge of the existing ones and the rows', and always sum to its quantity.
//!   An untagged non-zero record has none; a zero record keeps what it had.

pub mod run;
pub mod vmt;

use std::fmt;
use std::str::FromStr;

use chrono::{Datelike, Duration, TimeZone, Utc};

use crate::charges::UnitPrice;
use crate::guardrails::{
    self, AllocationMode, GuardrailContext, GuardrailOutcome, MAX_QUANTITY, RejectedRow,
};
use crate::model::{
    AggregatedRecord, AggregatedStatus, GroupKey, RawUsageRow, ReasonCode, ValidUsageRow,
};
use crate::ports::{AggregationCommit, MAX_ROWS_PER_COMMIT};
use crate::time::{Instant, MONTH_LOCK_DROP_HOUR, at_oldest_edge, bucket_expired};

/// Why a fold cannot be computed. Each is a caller error or a state the caller must
/// act on (retry later, reject the rows); none is a seller's bad write (those are
/// reason codes).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FoldError {
    /// The existing record is not the group's.
    #[error("existing record {found} is not the record of group {key}")]
    KeyMismatch {
        /// The group being folded.
        key: GroupKey,
        /// The key of the record passed in (boxed: keeps the error small).
        found: Box<GroupKey>,
    },
    /// The existing record was already submitted; late rows get `HourAlreadySubmitted`.
    #[error(
        "record {key} is {status}, not Pending: late rows must be rejected with HourAlreadySubmitted"
    )]
    NotPending {
        /// The group.
        key: GroupKey,
        /// Its status.
        status: AggregatedStatus,
    },
    /// A submitter holds the record; fold later (the message is retried).
    #[error("record {key} is in flight until {until}; fold after the claim ends")]
    InFlight {
        /// The group.
        key: GroupKey,
        /// End of the submitter's claim.
        until: Instant,
    },
    /// A row of another group was passed in.
    #[error("row {sort_key} does not belong to group {key}")]
    ForeignRow {
        /// The group.
        key: GroupKey,
        /// The row's sort key.
        sort_key: String,
    },
    /// The rows were not split with [`split_within_cap`].
    #[error("folding into {key} would total {total}, over the per-record cap of 2147483647")]
    QuantityOverflow {
        /// The group.
        key: GroupKey,
        /// The total the fold would reach.
        total: i128,
    },
    /// The rows mix tagged and untagged usage (they skipped [`guardrails::validate_group`]).
    #[error("allocations of {key} would sum to {allocated}, not its quantity {quantity}")]
    AllocationsDoNotSum {
        /// The group.
        key: GroupKey,
        /// Sum of the merged allocations.
        allocated: i64,
        /// The record's quantity.
        quantity: i64,
    },
}

/// Splits rows so the record's total stays within [`MAX_QUANTITY`]: rows are taken in
/// the given order (the guardrails' `(timestamp, sort key)` order) and a row that
/// would take `existing_quantity` plus the rows taken so far over the cap is rejected
/// with `QuantityTooLarge`. Later, smaller rows that still fit are counted.
pub fn split_within_cap(existing_quantity: i64, rows: Vec<ValidUsageRow>) -> GuardrailOutcome {
    let mut total = existing_quantity;
    let mut outcome = GuardrailOutcome::default();
    for row in rows {
        match total
            .checked_add(row.quantity)
            .filter(|t| *t <= MAX_QUANTITY)
        {
            Some(new_total) => {
                total = new_total;
                outcome.accepted.push(row);
            }
            None => outcome.rejected.push(RejectedRow {
                sort_key: row.sort_key,
                reason: ReasonCode::QuantityTooLarge,
            }),
        }
    }
    outcome
}

/// The record after counting `rows` into `existing` (or into a new record of `key`
/// for `product_code`). See the module doc for the rules.
///
/// Fails if the record is another group's or not pending, a row is another group's,
/// the total would pass the cap, or the allocations would not sum to the quantity.
pub fn fold(
    key: &GroupKey,
    product_code: &str,
    existing: Option<&AggregatedRecord>,
    rows: &[ValidUsageRow],
) -> Result<AggregatedRecord, FoldError> {
    if let Some(record) = existing {
        if record.key != *key {
            return Err(FoldError::KeyMismatch {
                key: key.clone(),
                found: Box::new(record.key.clone()),
            });
        }
        if !record.is_pending() {
            return Err(FoldError::NotPending {
                key: key.clone(),
                status: record.status,
            });
        }
    }
    if let Some(row) = rows.iter().find(|row| !guardrails::row_in_group(row, key)) {
        return Err(FoldError::ForeignRow {
            key: key.clone(),
            sort_key: row.sort_key.clone(),
        });
    }

    let base = existing.map_or(0, |r| r.quantity);
    let total = i128::from(base) + rows.iter().map(|r| i128::from(r.quantity)).sum::<i128>();
    let quantity = i64::try_from(total)
        .ok()
        .filter(|q| *q <= MAX_QUANTITY)
        .ok_or_else(|| FoldError::QuantityOverflow {
            key: key.clone(),
            total,
        })?;

    let existing_allocations = existing.and_then(|r| r.allocations.as_deref());
    let tagged_rows = || {
        rows.iter()
            .filter(|r| AllocationMode::of_row(r) == Some(AllocationMode::Tagged))
            .filter_map(|r| r.allocations.as_deref())
    };
    let tagged = existing.and_then(AllocationMode::of_record) == Some(AllocationMode::Tagged)
        || tagged_rows().next().is_some();
    let allocations = if quantity == 0 {
        existing_allocations.map(<[_]>::to_vec)
    } else if tagged {
        Some(vmt::merge_into(existing_allocations, tagged_rows()))
    } else {
        None
    };
    if let Some(allocated) = allocations
        .as_ref()
        .map(|a| a.iter().map(|x| x.quantity).sum::<i64>())
        && allocated != quantity
    {
        return Err(FoldError::AllocationsDoNotSum {
            key: key.clone(),
            allocated,
            quantity,
        });
    }

    Ok(match existing {
        Some(record) => AggregatedRecord {
            quantity,
            allocations,
            version: record.version + 1,
            ..record.clone()
        },
        None => AggregatedRecord {
            allocations,
            ..AggregatedRecord::pending(key.clone(), product_code, quantity)
        },
    })
}

/// Splits rows into the slices one commit may claim (at most [`MAX_ROWS_PER_COMMIT`]).
pub fn commit_chunks<T>(rows: &[T]) -> std::slice::Chunks<'_, T> {
    rows.chunks(MAX_ROWS_PER_COMMIT)
}

/// The commits that count `rows` into the group's record, one per ≤ 99 rows, each
/// folding its chunk into the previous commit's record and expecting that record's
/// version (`None` for the first commit of a new record). No rows: no commits.
///
/// Fails with [`FoldError::InFlight`] when a submitter holds the existing record at
/// `now`, and with any [`fold`] error.
pub fn plan_commits(
    key: &GroupKey,
    product_code: &str,
    existing: Option<&AggregatedRecord>,
    rows: &[ValidUsageRow],
    now: Instant,
) -> Result<Vec<AggregationCommit>, FoldError> {
    if let Some(until) = existing
        .and_then(|r| r.in_flight_until)
        .filter(|u| *u > now)
    {
        return Err(FoldError::InFlight {
            key: key.clone(),
            until,
        });
    }
    let mut current = existing.cloned();
    let chunks = rows.len().div_ceil(MAX_ROWS_PER_COMMIT);
    let mut commits = Vec::with_capacity(chunks.max(1));
    for (i, chunk) in commit_chunks(rows).enumerate() {
        let mut record = fold(key, product_code, current.as_ref(), chunk)?;
        // Every commit but the last leaves the fold marked in progress: the submitter
        // never claims a record that does not yet hold the whole group.
        record.folding = i + 1 < chunks;
        commits.push(AggregationCommit {
            record: record.clone(),
            expected_version: current.as_ref().map(|r| r.version),
            claimed_rows: chunk
                .iter()
                .map(|r| (r.license_arn.clone(), r.sort_key.clone()))
                .collect(),
            rows_expire_at: None,
            now,
        });
        current = Some(record);
    }
    // An interrupted fold whose remaining rows are all gone (rejected, counted
    // elsewhere) still has to end: one commit that only clears the marker.
    if let Some(record) = existing.filter(|r| r.folding && rows.is_empty()) {
        commits.push(AggregationCommit {
            record: AggregatedRecord {
                possibly_billed: None,
                folding: false,
                version: record.version + 1,
                ..record.clone()
            },
            expected_version: Some(record.version),
            claimed_rows: Vec::new(),
            rows_expire_at: None,
            now,
        });
    }
    Ok(commits)
}

/// Everything the aggregator does for one group, minus the I/O.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AggregationPlan {
    /// Commits to apply in order (empty when nothing can be counted).
    pub commits: Vec<AggregationCommit>,
    /// Rows rejected client-side (per-row, group and cap checks), sorted by sort key.
    pub rejected: Vec<RejectedRow>,
    /// Sort keys of valid rows of another group: leave them pending (see
    /// [`guardrails::screen_group`]).
    pub other_group: Vec<String>,
}

impl AggregationPlan {
    /// The plan with `expires_at` on the rows each commit counts (the commit makes them
    /// final; see [`crate::retention`]).
    pub fn with_row_expiry(mut self, expires_at: Option<Instant>) -> Self {
        for commit in &mut self.commits {
            commit.rows_expire_at = expires_at;
        }
        self
    }

    /// The plan with `price` kept on the record each commit writes (`None` leaves the
    /// record's own: a message sent while no card could be read never erases one).
    pub fn priced(mut self, price: Option<&UnitPrice>) -> Self {
        if let Some(price) = price {
            for commit in &mut self.commits {
                commit.record.unit_price = Some(price.clone());
            }
        }
        self
    }

    /// The record as it will be once every commit is applied, if any commit exists.
    pub fn final_record(&self) -> Option<&AggregatedRecord> {
        self.commits.last().map(|c| &c.record)
    }
}

/// Screens a group's pending raw rows (every guardrail), splits them within the cap,
/// and plans the commits that count the accepted rows into `existing` (or a new
/// record for `ctx.product_code`). Every row ends up in exactly one of: a commit's
/// claimed rows, `rejected`, or `other_group`.
///
/// `rows` must be the group's still-pending, unclaimed rows. Fails as
/// [`plan_commits`] does; a record that already left `Pending` is not an error: every
/// row is rejected with `HourAlreadySubmitted`.
pub fn plan_aggregation(
    key: &GroupKey,
    rows: &[RawUsageRow],
    existing: Option<&AggregatedRecord>,
    ctx: &GuardrailContext,
) -> Result<AggregationPlan, FoldError> {
    if let Some(until) = existing
        .filter(|r| r.is_pending())
        .and_then(|r| r.in_flight_until)
        .filter(|u| *u > ctx.now)
    {
        return Err(FoldError::InFlight {
            key: key.clone(),
            until,
        });
    }
    // Only a record no submitter ever claimed takes folds; for any other the guardrails
    // reject every row with `HourAlreadySubmitted`.
    let foldable = existing.filter(|r| r.accepts_folds());
    let screened = guardrails::screen_group(key, rows, existing, ctx);
    let capped = split_within_cap(
        foldable.map_or(0, |r| r.quantity),
        screened.outcome.accepted,
    );
    let commits = plan_commits(key, &ctx.product_code, foldable, &capped.accepted, ctx.now)?;
    let mut rejected = screened.outcome.rejected;
    rejected.extend(capped.rejected);
    rejected.sort_by(|a, b| a.sort_key.cmp(&b.sort_key));
    Ok(AggregationPlan {
        commits,
        rejected,
        other_group: screened.other_group,
    })
}

/// What to do with an aggregated record whose quantity is zero (`ZERO_QUANTITY_POLICY`).
///
/// Sending a zero for an hour is final (Marketplace keeps the first write), so a zero
/// sent early would turn any late usage for that hour into `HourAlreadySubmitted`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ZeroQuantityPolicy {
    /// Submit a zero hour only at the window's oldest edge (or, for last month's
    /// hours, from 03:00 UTC on the 1st), leaving room for late usage. The default.
    #[default]
    Defer,
    /// Submit zero hours as soon as they exist, like any other record.
    Submit,
    /// Never send zero hours; the submitter decides how to close such records
    /// (see [`is_skipped_zero`]).
    Skip,
}

impl ZeroQuantityPolicy {
    /// The configuration text (`defer`, `submit`, `skip`).
    pub fn as_str(&self) -> &'static str {
        match self {
            ZeroQuantityPolicy::Defer => "defer",
            ZeroQuantityPolicy::Submit => "submit",
            ZeroQuantityPolicy::Skip => "skip",
        }
    }
}

impl fmt::Display for ZeroQuantityPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A `ZERO_QUANTITY_POLICY` value that is not `defer`, `submit` or `skip`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "zero-quantity policy (ZERO_QUANTITY_POLICY) must be \"defer\", \"submit\" or \"skip\", got {0:?}"
)]
pub struct InvalidZeroQuantityPolicy(pub String);

impl FromStr for ZeroQuantityPolicy {
    type Err = InvalidZeroQuantityPolicy;
    /// Exactly `defer`, `submit` or `skip` (surrounding whitespace ignored).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "defer" => Ok(ZeroQuantityPolicy::Defer),
            "submit" => Ok(ZeroQuantityPolicy::Submit),
            "skip" => Ok(ZeroQuantityPolicy::Skip),
            _ => Err(InvalidZeroQuantityPolicy(s.to_string())),
        }
    }
}

/// Whether the submitter should send `record` at `now`.
///
/// Never for a record that is no longer `Pending` or whose hour has aged out (age-out
/// gives it `SubmissionExpired`; sending it would fail the whole batch with
/// `TimestampOutOfBoundsException`). A non-zero record is due at once. A zero record:
/// `Submit` at once; `Defer` only when its hour is at the window's oldest edge
/// ([`at_oldest_edge`]) or it is last month's hour and `now` is on/after 03:00 UTC on
/// the 1st (it ages out at 06:00); `Skip` never. Whether a submitter holds the record
/// is not considered here: claiming decides that.
pub fn submission_due(record: &AggregatedRecord, now: Instant, policy: ZeroQuantityPolicy) -> bool {
    let hour = record.key.hour;
    // Mid-fold (`aggregationInProgress`) the record does not yet hold its whole group.
    if !record.is_pending() || record.folding || bucket_expired(hour, now) {
        return false;
    }
    if record.quantity != 0 {
        return true;
    }
    match policy {
        ZeroQuantityPolicy::Submit => true,
        ZeroQuantityPolicy::Skip => false,
        ZeroQuantityPolicy::Defer => {
            at_oldest_edge(hour, now)
                || (hour.is_previous_month_of(now) && now >= month_lock_drop(now))
        }
    }
}

/// Whether `record` is a zero hour that `policy` says must never be sent. What the
/// record becomes instead is the submitter's decision.
pub fn is_skipped_zero(record: &AggregatedRecord, policy: ZeroQuantityPolicy) -> bool {
    record.quantity == 0 && policy == ZeroQuantityPolicy::Skip
}

/// 03:00 UTC on the 1st of `now`'s month.
fn month_lock_drop(now: Instant) -> Instant {
    let month_start = Utc
        .with_ymd_and_hms(now.year(), now.month(), 1, 0, 0, 0)
        .single()
        .unwrap_or(now);
    month_start + Duration::hours(i64::from(MONTH_LOCK_DROP_HOUR))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;

//! [`AggregatedStore`] over [`MemoryTables`]: the commit transaction, claims and outcomes.

use std::collections::{BTreeMap, BTreeSet};

use async_trait::async_trait;

use super::faults::StoreOp;
use super::page::paginate;
use super::tables::{MemoryTables, StoredAggregate, StoredMalformed, TableKey, aggregated_key};
use crate::items::size::{item_size, raw_row_size};
use crate::items::{CommitWrite, aggregated_item, check_item, check_transaction, set_expiry};
use crate::model::{AggregatedRecord, AggregatedStatus, Attr, GroupKey, RawUsageRow, attr};
use crate::ports::{
    AggregatedStore, AggregationCommit, Claim, ClaimGrant, ClaimRequest, CommitOutcome, Cursor,
    MalformedItem, OutcomeWrite, Page, PortError, PutOutcome, check_batch_writes,
};
use crate::stamp::AuditStamp;
use crate::sync::lock;
use crate::time::{HourBucket, Instant, format_instant};

/// [`AggregatedStore`] over [`MemoryTables`].
///
/// - `commit`: all or nothing. The record must not exist when `expected_version` is
///   `None`; otherwise the stored record must be at that version, still `Pending`, and
///   not in flight (`inFlightUntil` absent or `<= commit.now`). Every claimed raw row
///   must exist, still have `meteringPending`, and have no `aggregatedInto`. Any failed
///   condition is [`CommitOutcome::Conflict`] and changes nothing. On success the record
///   is stored as given and each claimed row is counted and finalized at once:
///   `aggregatedInto` = the record's sort key, `meteringStatus` = `Aggregated`, no
///   `meteringPending` (it leaves the index), `expiresAt` = `rows_expire_at` (removed
///   when `None`), a new `updatedAt`; the record is stored without `expiresAt`. More than [`MAX_ROWS_PER_COMMIT`](crate::ports::MAX_ROWS_PER_COMMIT) rows, or the same row
///   twice, is an error (DynamoDB refuses such a transaction). More than
///   [`MAX_BATCH_WRITES`](crate::ports::MAX_BATCH_WRITES) claims or outcomes in one call is an error too.
/// - `claim_all`, each request on its own: pending, exactly as read (version, quantity,
///   attempt count and claim id as expected), not mid-fold, not held by an unexpired
///   claim (`inFlightUntil <= claim.now` counts as expired) -> `inFlightUntil`,
///   `claimId`, `sentQuantity` = the request's (what the call sends), `attemptCount + 1`; the version does not move. The
///   grant says, from the read, whether an earlier send may have billed it.
/// - `record_all`, each write on its own: only while pending and, with a claim id, only under that claim (without
///   one, only while no unexpired claim holds it); releases the claim; a terminal
///   status also sets the reason and the record id (an absent record id keeps a stored
///   one) and `expiresAt` and leaves the pending index, and stores the update's
///   `finalWriteId` when it has one; a write whose condition fails answers `true` when
///   the record carries its `finalWriteId`. `Pending` releases the claim,
///   removes `expiresAt` and drops `sentQuantity` unless the update says a send may
///   have billed. Any status: `possiblyBilled` is set when the update says a call may
///   have billed, set `false` under a claim where absent, and never cleared. A claim
///   removes `expiresAt` too (pending).
/// - `commit` folds only into a record no claim ever held (`accepts_folds`).
/// - `pending_page`: `Pending` records of `hour`, ordered by (license, sort key), paged.
/// - DynamoDB's limits ([`crate::items::size`]): an item over 400 KB after the write, or
///   a commit transaction (the record and its claimed rows, each as it would be after
///   the write) of more than 100 items or 4 MB, is [`PortError::Failed`] and changes
///   nothing. Every condition is evaluated under the one lock that applies the write.
#[derive(Debug, Clone, Default)]
pub struct MemoryAggregatedStore {
    pub(crate) tables: MemoryTables,
}

impl MemoryTables {
    /// An aggregated-store handle on these tables.
    pub fn aggregated_store(&self) -> MemoryAggregatedStore {
        MemoryAggregatedStore {
            tables: self.clone(),
        }
    }
}

impl MemoryAggregatedStore {
    /// A store on fresh tables (use [`MemoryTables::aggregated_store`] to share them).
    pub fn new() -> Self {
        Self::default()
    }

    /// The tables behind this store.
    pub fn tables(&self) -> &MemoryTables {
        &self.tables
    }
}

/// A stored malformed item as an index page entry: its keys and what is wrong.
fn malformed_entry(
    key: &TableKey,
    item: &StoredMalformed,
) -> (TableKey, Result<AggregatedRecord, MalformedItem>) {
    (
        key.clone(),
        Err(MalformedItem {
            license_arn: key.0.clone(),
            sort_key: key.1.clone(),
            problem: item.problem.clone(),
        }),
    )
}

/// A page of readable-or-not items as the port returns it.
fn split_malformed(page: Page<Result<AggregatedRecord, MalformedItem>>) -> Page<AggregatedRecord> {
    let mut out = Page {
        next: page.next,
        ..Page::default()
    };
    for item in page.items {
        match item {
            Ok(record) => out.items.push(record),
            Err(malformed) => out.malformed.push(malformed),
        }
    }
    out
}

/// The size of an aggregated item as DynamoDB counts it ([`crate::items::size`]): the
/// record's attributes ([`aggregated_item`]), its audit stamps and `rawRowCount`
/// (taken as `raw_rows`; the real item adds up every commit's rows, a few bytes'
/// difference); refused over 400 KB.
/// Tests' shorthand for a claim: reads the record and claims it as read, expecting
/// `version` (a test of a stale version passes another). `Ok(None)` if it is absent.
pub async fn claim_read(
    store: &(impl AggregatedStore + ?Sized),
    key: &GroupKey,
    version: u64,
    claim: &Claim,
) -> Result<Option<ClaimGrant>, PortError> {
    let Some(mut record) = store.get(key).await? else {
        return Ok(None);
    };
    record.version = version;
    store.claim(&record, claim).await
}

/// A raw row counted into the record whose sort key is `claim`, and finalized in the
/// same write: `aggregatedInto`, `Aggregated`, out of the pending index, `expiresAt`.
fn count_row(row: &mut RawUsageRow, write: &CommitWrite, stamp: &AuditStamp) {
    write.count_row(&mut row.attrs);
    stamp.apply(&mut row.attrs);
}

/// One claim of [`AggregatedStore::claim_all`], under the table lock.
fn claim_one(
    state: &mut super::tables::TablesState,
    request: &ClaimRequest,
) -> Result<Option<ClaimGrant>, PortError> {
    let claim = &request.claim;
    let Some(stored) = state.aggregated.get_mut(&aggregated_key(&request.key)) else {
        return Ok(None);
    };
    let record = &mut stored.record;
    let expected = &request.expected;
    if !record.is_pending()
        || record.version != expected.version
        || record.quantity != expected.quantity
        || record.attempt_count != expected.attempt_count
        || record.claim_id != expected.claim_id
        || record.folding
        || in_flight_at(record, claim.now)
    {
        return Ok(None);
    }
    let mut next = record.clone();
    next.in_flight_until = Some(claim.until);
    next.claim_id = Some(claim.id.clone());
    next.sent_quantity = Some(request.sent_quantity);
    next.attempt_count = record.attempt_count.saturating_add(1);
    let stamp = AuditStamp {
        created_at: stored.stamp.created_at.clone(),
        updated_at: format_instant(claim.now),
    };
    record_size(&next, &stamp, 0, None)?;
    stored.record = next;
    stored.stamp = stamp;
    // Pending: a seller's direct-submit row may carry one; the claim removes it.
    stored.expires_at = None;
    Ok(Some(request.grant()))
}

/// One outcome of [`AggregatedStore::record_all`], under the table lock.
fn record_one(
    state: &mut super::tables::TablesState,
    write: &OutcomeWrite,
    now: Instant,
) -> Result<bool, PortError> {
    let Some(stored) = state.aggregated.get_mut(&aggregated_key(&write.key)) else {
        return Ok(false);
    };
    let record = &mut stored.record;
    let update = &write.update;
    let holder_ok = match &write.claim_id {
        Some(id) => record.claim_id.as_deref() == Some(id.as_str()),
        None => !in_flight_at(record, now),
    };
    if !record.is_pending() || !holder_ok {
        return Ok(false);
    }
    let mut next = record.clone();
    next.in_flight_until = None;
    next.claim_id = None;
    let expires_at = update
        .status
        .is_terminal()
        .then_some(update.expires_at)
        .flatten();
    if update.status.is_terminal() {
        next.status = update.status;
        next.status_reason = update.reason.clone();
        if update.metering_record_id.is_some() {
            next.metering_record_id = update.metering_record_id.clone();
        }
    } else if !update.possibly_sent {
        next.sent_quantity = None;
    }
    next.possibly_billed = possibly_billed_after(record.possibly_billed, write);
    let stamp = AuditStamp {
        created_at: stored.stamp.created_at.clone(),
        updated_at: format_instant(now),
    };
    record_size(&next, &stamp, 0, expires_at)?;
    stored.record = next;
    stored.stamp = stamp;
    stored.expires_at = expires_at;
    Ok(true)
}

/// A written outcome's `finalWriteId`: stored when `applied` (a terminal update that
/// has one), and otherwise whether the record carries it (an earlier attempt of the
/// same write applied, its answer lost: `true`).
fn final_write(
    state: &mut super::tables::TablesState,
    write: &OutcomeWrite,
    applied: bool,
) -> bool {
    let update = &write.update;
    let (Some(id), true) = (update.final_write_id, update.status.is_terminal()) else {
        return applied;
    };
    let Some(stored) = state.aggregated.get_mut(&aggregated_key(&write.key)) else {
        return applied;
    };
    if applied {
        stored.final_write_id = Some(id.to_string());
        return true;
    }
    stored.final_write_id.as_deref() == Some(id.to_string().as_str())
}

/// `possiblyBilled` after an outcome write: set when the update says a call may have
/// billed; under a claim, `false` where nothing is stored yet; never cleared.
fn possibly_billed_after(stored: Option<bool>, write: &OutcomeWrite) -> Option<bool> {
    if write.update.possibly_billed {
        Some(true)
    } else if write.claim_id.is_some() {
        Some(stored.unwrap_or(false))
    } else {
        stored
    }
}

fn record_size(
    record: &AggregatedRecord,
    stamp: &AuditStamp,
    raw_rows: usize,
    expires_at: Option<Instant>,
) -> Result<usize, PortError> {
    let mut item = aggregated_item(record);
    set_expiry(&mut item, expires_at);
    item.insert(
        attr::RAW_ROW_COUNT.to_string(),
        Attr::N(raw_rows.to_string()),
    );
    item.insert(
        attr::CREATED_AT.to_string(),
        Attr::S(stamp.created_at.clone()),
    );
    item.insert(
        attr::UPDATED_AT.to_string(),
        Attr::S(stamp.updated_at.clone()),
    );
    let bytes = item_size(&item);
    check_item(&record.key, bytes).map_err(|e| e.port_error("aggregated write"))?;
    Ok(bytes)
}

fn in_flight_at(record: &AggregatedRecord, now: Instant) -> bool {
    record.in_flight_until.is_some_and(|until| until > now)
}

#[async_trait]
impl AggregatedStore for MemoryAggregatedStore {
    async fn get(&self, key: &GroupKey) -> Result<Option<AggregatedRecord>, PortError> {
        self.tables.faults.check(StoreOp::AggregatedGet)?;
        Ok(lock(&self.tables.state)
            .aggregated
            .get(&aggregated_key(key))
            .map(|stored| stored.record.clone()))
    }

    async fn commit(&self, commit: &AggregationCommit) -> Result<CommitOutcome, PortError> {
        self.tables.faults.check(StoreOp::AggregatedCommit)?;
        let write = CommitWrite::new(commit).map_err(|e| e.port_error("commit"))?;

        let mut state = lock(&self.tables.state);
        let record_key = aggregated_key(&commit.record.key);
        // The transaction as DynamoDB would size it, each item as it would be after
        // the write; refused whole, before any condition, when over a limit.
        let stamp = AuditStamp::at(commit.now);
        let mut sizes = Vec::with_capacity(commit.claimed_rows.len() + 1);
        let stored_stamp = state.aggregated.get(&record_key).map(|s| &s.stamp);
        let record_stamp = AuditStamp {
            created_at: stored_stamp.map_or(stamp.created_at.clone(), |s| s.created_at.clone()),
            updated_at: stamp.updated_at.clone(),
        };
        sizes.push(record_size(
            &commit.record,
            &record_stamp,
            commit.claimed_rows.len(),
            None,
        )?);
        for (license_arn, sort_key) in &commit.claimed_rows {
            let key = (license_arn.clone(), sort_key.clone());
            let mut row = state
                .usage
                .get(&key)
                .cloned()
                .unwrap_or_else(|| RawUsageRow {
                    license_arn: license_arn.clone(),
                    sort_key: sort_key.clone(),
                    attrs: BTreeMap::new(),
                });
            count_row(&mut row, &write, &stamp);
            let bytes = raw_row_size(&row);
            check_item(format_args!("{license_arn}/{sort_key}"), bytes)
                .map_err(|e| e.port_error("commit"))?;
            sizes.push(bytes);
        }
        check_transaction(&sizes).map_err(|e| e.port_error("commit"))?;

        let stored = state.aggregated.get(&record_key);
        let record_ok = match (stored, commit.expected_version) {
            (None, None) => true,
            (Some(stored), Some(version)) => {
                stored.record.version == version && stored.record.accepts_folds()
            }
            (Some(_), None) | (None, Some(_)) => false,
        };
        if !record_ok {
            return Ok(CommitOutcome::Conflict);
        }
        let rows_ok = commit.claimed_rows.iter().all(|key| {
            state.usage.get(key).is_some_and(|row| {
                row.is_pending() && !row.attrs.contains_key(attr::AGGREGATED_INTO)
            })
        });
        if !rows_ok {
            return Ok(CommitOutcome::Conflict);
        }

        for key in &commit.claimed_rows {
            if let Some(row) = state.usage.get_mut(key) {
                count_row(row, &write, &stamp);
            }
        }
        // The record stays pending: no expiry (a fold removes any it carried).
        state.aggregated.insert(
            record_key,
            StoredAggregate {
                record: commit.record.clone(),
                stamp: record_stamp,
                expires_at: None,
                final_write_id: None,
            },
        );
        Ok(CommitOutcome::Committed)
    }

    async fn pending_page(
        &self,
        hour: HourBucket,
        cursor: Option<Cursor>,
    ) -> Result<Page<AggregatedRecord>, PortError> {
        self.tables.faults.check(StoreOp::AggregatedPendingPage)?;
        let state = lock(&self.tables.state);
        let hour_text = hour.to_string();
        // Readable and malformed items share one key order, as in the index.
        let mut items: Vec<(TableKey, Result<AggregatedRecord, MalformedItem>)> = state
            .aggregated
            .iter()
            .filter(|(_, stored)| stored.record.is_pending() && stored.record.key.hour == hour)
            .map(|(key, stored)| (key.clone(), Ok(stored.record.clone())))
            .collect();
        items.extend(
            state
                .malformed_aggregated
                .iter()
                .filter(|(_, m)| m.metering_pending.as_deref() == Some(hour_text.as_str()))
                .map(|(key, m)| malformed_entry(key, m)),
        );
        drop(state);
        items.sort_by(|a, b| a.0.cmp(&b.0));
        let page = paginate(
            items,
            cursor,
            self.tables.page_size,
            "aggregated pending_page",
        )?;
        Ok(split_malformed(page))
    }

    async fn claim_all(
        &self,
        requests: &[ClaimRequest],
    ) -> Result<Vec<Option<ClaimGrant>>, PortError> {
        check_batch_writes("aggregated claim_all", requests.len())?;
        self.tables.faults.check(StoreOp::AggregatedClaim)?;
        let mut state = lock(&self.tables.state);
        let mut granted = Vec::with_capacity(requests.len());
        for request in requests {
            granted.push(claim_one(&mut state, request)?);
        }
        Ok(granted)
    }

    async fn record_all(
        &self,
        writes: &[OutcomeWrite],
        now: Instant,
    ) -> Result<Vec<bool>, PortError> {
        check_batch_writes("aggregated record_all", writes.len())?;
        self.tables.faults.check(StoreOp::AggregatedRecord)?;
        let mut state = lock(&self.tables.state);
        let mut applied = Vec::with_capacity(writes.len());
        for write in writes {
            let done = record_one(&mut state, write, now)?;
            applied.push(final_write(&mut state, write, done));
        }
        Ok(applied)
    }

    async fn reject_malformed(
        &self,
        item: &MalformedItem,
        reason: &str,
        expires_at: Option<Instant>,
        _now: Instant,
    ) -> Result<bool, PortError> {
        self.tables
            .faults
            .check(StoreOp::AggregatedRejectMalformed)?;
        let mut state = lock(&self.tables.state);
        let key = (item.license_arn.clone(), item.sort_key.clone());
        let Some(stored) = state.malformed_aggregated.get_mut(&key) else {
            return Ok(false);
        };
        if stored.metering_pending.take().is_none() {
            return Ok(false);
        }
        stored.status = Some((AggregatedStatus::Error, reason.to_string()));
        stored.expires_at = expires_at;
        Ok(true)
    }

    async fn stray_pending_page(
        &self,
        live: &[HourBucket],
        cursor: Option<Cursor>,
    ) -> Result<Page<AggregatedRecord>, PortError> {
        self.tables
            .faults
            .check(StoreOp::AggregatedStrayPendingPage)?;
        let live: BTreeSet<String> = live.iter().map(ToString::to_string).collect();
        let state = lock(&self.tables.state);
        let mut items: Vec<(TableKey, Result<AggregatedRecord, MalformedItem>)> = state
            .aggregated
            .iter()
            .filter(|(_, stored)| {
                stored.record.is_pending() && !live.contains(&stored.record.key.hour.to_string())
            })
            .map(|(key, stored)| (key.clone(), Ok(stored.record.clone())))
            .collect();
        items.extend(state.malformed_aggregated.iter().filter_map(|(key, m)| {
            let pending = m.metering_pending.as_ref()?;
            (!live.contains(pending)).then(|| malformed_entry(key, m))
        }));
        drop(state);
        items.sort_by(|a, b| a.0.cmp(&b.0));
        let page = paginate(
            items,
            cursor,
            self.tables.page_size,
            "aggregated stray_pending_page",
        )?;
        Ok(split_malformed(page))
    }

    async fn put_direct(
        &self,
        record: &AggregatedRecord,
        now: Instant,
    ) -> Result<PutOutcome, PortError> {
        self.tables.faults.check(StoreOp::AggregatedPutDirect)?;
        let mut state = lock(&self.tables.state);
        let key = aggregated_key(&record.key);
        let stamp = AuditStamp::at(now);
        record_size(record, &stamp, 0, None)?;
        if state.aggregated.contains_key(&key) {
            return Ok(PutOutcome::AlreadyExists);
        }
        state.aggregated.insert(
            key,
            StoredAggregate {
                record: record.clone(),
                stamp,
                expires_at: None,
                final_write_id: None,
            },
        );
        Ok(PutOutcome::Created)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::memory::fixtures::*;
    use crate::memory::reference_row;
    use crate::model::RawUsageRow;
    use crate::ports::{MAX_ROWS_PER_COMMIT, SubmissionUpdate};
    #[tokio::test]
    async fn commit_creates_then_folds_and_claims_rows_atomically() {
        let tables = MemoryTables::new();
        let aggregated = tables.aggregated_store();
        let r1 = reference_row(LICENSE, ACCOUNT, "requests", "2026-11-30T10:00:00Z", 1);
        let r2 = reference_row(LICENSE, ACCOUNT, "requests", "2026-11-30T10:05:00Z", 2);
        let late = reference_row(LICENSE, ACCOUNT, "requests", "2026-11-30T10:50:00Z", 4);
        for r in [&r1, &r2, &late] {
            tables.insert_raw_row(r.clone());
        }
        let key = group("requests", "2026-11-30T10");

        let created = commit(
            record(key.clone(), 3, 1),
            None,
            &[&r1, &r2],
            "2026-11-30T11:10:00Z",
        );
        assert_eq!(
            aggregated.commit(&created).await.unwrap(),
            CommitOutcome::Committed
        );
        let claimed = tables.raw_row(LICENSE, &r1.sort_key).unwrap();
        assert_eq!(
            claimed.attrs["aggregatedInto"],
            Attr::S(key.aggregated_sort_key())
        );
        assert_eq!(
            claimed.attrs["meteringStatus"],
            Attr::S("Aggregated".into())
        );
        assert!(
            !claimed.attrs.contains_key("meteringPending"),
            "counted and finalized in the commit"
        );

        // Redelivery: the same commit again conflicts (record exists, rows claimed).
        assert_eq!(
            aggregated.commit(&created).await.unwrap(),
            CommitOutcome::Conflict
        );

        // A late row folds in at the expected version.
        let fold = commit(
            record(key.clone(), 7, 2),
            Some(1),
            &[&late],
            "2026-11-30T11:20:00Z",
        );
        assert_eq!(
            aggregated.commit(&fold).await.unwrap(),
            CommitOutcome::Committed
        );
        assert_eq!(aggregated.get(&key).await.unwrap().unwrap().quantity, 7);
        let audit = tables.aggregated_audit(&key).unwrap();
        assert_eq!(audit.created_at, "2026-11-30T11:10:00Z");
        assert_eq!(audit.updated_at, "2026-11-30T11:20:00Z");
    }

    #[tokio::test]
    async fn commit_conflicts_leave_everything_untouched() {
        let now = "2026-11-30T11:10:00Z";
        let key = group("requests", "2026-11-30T10");
        let fresh = || reference_row(LICENSE, ACCOUNT, "requests", "2026-11-30T10:00:00Z", 1);

        // Each case: (name, stored record, raw row as stored, expected version).
        let mut in_flight = record(key.clone(), 1, 1);
        in_flight.in_flight_until = Some(t("2026-11-30T11:15:00Z"));
        let mut expired_claim = record(key.clone(), 1, 1);
        expired_claim.in_flight_until = Some(t(now));
        let mut billed = record(key.clone(), 1, 1);
        billed.status = AggregatedStatus::Success;
        let mut finalized = fresh();
        finalized.attrs.remove("meteringPending");
        let mut claimed_elsewhere = fresh();
        claimed_elsewhere
            .attrs
            .insert("aggregatedInto".into(), Attr::S("other".into()));

        type Case = (
            &'static str,
            Option<AggregatedRecord>,
            Option<RawUsageRow>,
            Option<u64>,
            CommitOutcome,
        );
        let cases: Vec<Case> = vec![
            (
                "create but record exists",
                Some(record(key.clone(), 1, 1)),
                Some(fresh()),
                None,
                CommitOutcome::Conflict,
            ),
            (
                "fold but record missing",
                None,
                Some(fresh()),
                Some(1),
                CommitOutcome::Conflict,
            ),
            (
                "version moved",
                Some(record(key.clone(), 1, 2)),
                Some(fresh()),
                Some(1),
                CommitOutcome::Conflict,
            ),
            (
                "record in flight",
                Some(in_flight),
                Some(fresh()),
                Some(1),
                CommitOutcome::Conflict,
            ),
            (
                // The lapsed claim may have sent: its quantity is final.
                "claim expired exactly now",
                Some(expired_claim),
                Some(fresh()),
                Some(1),
                CommitOutcome::Conflict,
            ),
            (
                "an earlier send may have billed it",
                Some(AggregatedRecord {
                    sent_quantity: Some(1),
                    ..record(key.clone(), 1, 1)
                }),
                Some(fresh()),
                Some(1),
                CommitOutcome::Conflict,
            ),
            (
                "an unclaimed record takes the fold",
                Some(record(key.clone(), 1, 1)),
                Some(fresh()),
                Some(1),
                CommitOutcome::Committed,
            ),
            (
                "record no longer pending",
                Some(billed),
                Some(fresh()),
                Some(1),
                CommitOutcome::Conflict,
            ),
            ("raw row missing", None, None, None, CommitOutcome::Conflict),
            (
                "raw row finalized",
                None,
                Some(finalized),
                None,
                CommitOutcome::Conflict,
            ),
            (
                "raw row claimed elsewhere",
                None,
                Some(claimed_elsewhere),
                None,
                CommitOutcome::Conflict,
            ),
        ];
        for (name, stored, raw, expected, outcome) in cases {
            let tables = MemoryTables::new();
            let store = tables.aggregated_store();
            if let Some(stored) = &stored {
                tables.insert_aggregated(stored.clone(), t("2026-11-30T11:00:00Z"));
            }
            // A second, healthy row proves all-or-nothing: it is never claimed on conflict.
            let healthy = reference_row(LICENSE, ACCOUNT, "requests", "2026-11-30T10:30:00Z", 5);
            tables.insert_raw_row(healthy.clone());
            if let Some(raw) = &raw {
                tables.insert_raw_row(raw.clone());
            }
            let before = (tables.raw_rows(), tables.aggregated_records());
            let target = raw.clone().unwrap_or_else(fresh);
            let c = commit(
                record(key.clone(), 6, expected.map_or(1, |v| v + 1)),
                expected,
                &[&healthy, &target],
                now,
            );
            assert_eq!(store.commit(&c).await.unwrap(), outcome, "{name}");
            if outcome == CommitOutcome::Conflict {
                assert_eq!(
                    (tables.raw_rows(), tables.aggregated_records()),
                    before,
                    "{name}"
                );
            }
        }
    }

    #[tokio::test]
    async fn commit_refuses_oversized_or_repeating_claims() {
        let tables = MemoryTables::new();
        let store = tables.aggregated_store();
        let key = group("requests", "2026-11-30T10");
        let mut too_many = commit(record(key.clone(), 1, 1), None, &[], "2026-11-30T11:00:00Z");
        too_many.claimed_rows = (0..=MAX_ROWS_PER_COMMIT)
            .map(|i| (LICENSE.to_string(), format!("k{i}")))
            .collect();
        assert!(matches!(
            store.commit(&too_many).await,
            Err(PortError::Failed { .. })
        ));
        let row = reference_row(LICENSE, ACCOUNT, "requests", "2026-11-30T10:00:00Z", 1);
        tables.insert_raw_row(row.clone());
        let twice = commit(
            record(key, 1, 1),
            None,
            &[&row, &row],
            "2026-11-30T11:00:00Z",
        );
        assert!(matches!(
            store.commit(&twice).await,
            Err(PortError::Failed { .. })
        ));
        assert!(tables.aggregated_records().is_empty());
    }

    fn claim_at(id: &str, now: &str, until: &str) -> Claim {
        Claim {
            id: id.to_string(),
            now: t(now),
            until: t(until),
        }
    }

    #[tokio::test]
    async fn claim_expires_and_record_releases_it() {
        let tables = MemoryTables::new();
        let store = tables.aggregated_store();
        let key = group("requests", "2026-11-30T10");
        tables.insert_aggregated(record(key.clone(), 5, 3), t("2026-11-30T11:00:00Z"));
        let until = t("2026-11-30T11:10:00Z");
        let first = claim_at("c1", "2026-11-30T11:05:00Z", "2026-11-30T11:10:00Z");

        assert!(
            claim_read(&store, &key, 2, &first).await.unwrap().is_none(),
            "wrong version"
        );
        let grant = claim_read(&store, &key, 3, &first).await.unwrap().unwrap();
        assert!(!grant.previously_sent, "never sent before");
        assert!(
            claim_read(
                &store,
                &key,
                3,
                &claim_at("c2", "2026-11-30T11:09:59Z", "2026-11-30T11:20:00Z")
            )
            .await
            .unwrap()
            .is_none(),
            "held"
        );
        let held = store.get(&key).await.unwrap().unwrap();
        assert_eq!(
            (
                held.attempt_count,
                held.version,
                held.in_flight_until,
                held.claim_id.as_deref(),
                held.sent_quantity
            ),
            (1, 3, Some(until), Some("c1"), Some(5))
        );
        // A fold is refused while in flight.
        let fold = commit(
            record(key.clone(), 9, 4),
            Some(3),
            &[],
            "2026-11-30T11:06:00Z",
        );
        assert_eq!(store.commit(&fold).await.unwrap(), CommitOutcome::Conflict);
        // The claim expires at `until`; another submitter may take it, and learns that
        // the lapsed claim may have sent.
        let second = claim_at("c2", "2026-11-30T11:10:00Z", "2026-11-30T11:15:00Z");
        let grant = claim_read(&store, &key, 3, &second).await.unwrap().unwrap();
        assert!(grant.previously_sent);
        // The first holder's late outcome is refused: only the current claim records.
        let late = SubmissionUpdate::new(AggregatedStatus::Success, None, Some("mr-0".into()));
        assert!(
            !store
                .record(&key, Some("c1"), &late, t("2026-11-30T11:11:00Z"))
                .await
                .unwrap()
        );

        // Pending outcome after a possibly-billing send: releases, keeps the quantity.
        assert!(
            store
                .record(
                    &key,
                    Some("c2"),
                    &SubmissionUpdate::release(true),
                    t("2026-11-30T11:11:00Z")
                )
                .await
                .unwrap()
        );
        let released = store.get(&key).await.unwrap().unwrap();
        assert_eq!(
            (
                released.status,
                released.in_flight_until,
                released.claim_id.clone(),
                released.sent_quantity
            ),
            (AggregatedStatus::Pending, None, None, Some(5))
        );
        assert_eq!(released.attempt_count, 2);
        assert!(
            !released.accepts_folds(),
            "a possibly billed record is final"
        );
        assert_eq!(store.commit(&fold).await.unwrap(), CommitOutcome::Conflict);

        // Terminal outcome: leaves the pending index; later records are refused.
        let third = claim_at("c3", "2026-11-30T11:12:00Z", "2026-11-30T11:17:00Z");
        assert!(
            claim_read(&store, &key, 3, &third)
                .await
                .unwrap()
                .unwrap()
                .previously_sent
        );
        let billed = SubmissionUpdate::new(AggregatedStatus::Success, None, Some("mr-1".into()));
        assert!(
            store
                .record(&key, Some("c3"), &billed, t("2026-11-30T11:12:00Z"))
                .await
                .unwrap()
        );
        let done = store.get(&key).await.unwrap().unwrap();
        assert_eq!(
            (done.status, done.metering_record_id.as_deref()),
            (AggregatedStatus::Success, Some("mr-1"))
        );
        assert!(
            store
                .pending_page(hour("2026-11-30T10"), None)
                .await
                .unwrap()
                .items
                .is_empty()
        );
        let again = SubmissionUpdate::new(AggregatedStatus::Error, Some("X".into()), None);
        assert!(
            !store
                .record(&key, None, &again, t("2026-11-30T11:13:00Z"))
                .await
                .unwrap()
        );
        assert!(
            claim_read(
                &store,
                &key,
                3,
                &claim_at("c4", "2026-11-30T12:00:00Z", "2026-11-30T12:05:00Z")
            )
            .await
            .unwrap()
            .is_none()
        );
        assert!(
            !store
                .record(
                    &group("other", "2026-11-30T10"),
                    None,
                    &billed,
                    t("2026-11-30T11:13:00Z")
                )
                .await
                .unwrap()
        );
    }

    #[tokio::test]
    async fn a_definite_no_send_reopens_a_record_only_if_nothing_was_sent_before() {
        let tables = MemoryTables::new();
        let store = tables.aggregated_store();
        let key = group("requests", "2026-11-30T10");
        tables.insert_aggregated(record(key.clone(), 5, 1), t("2026-11-30T11:00:00Z"));
        // Throttled: nothing billed, nothing before -> folds resume.
        let c1 = claim_at("c1", "2026-11-30T11:05:00Z", "2026-11-30T11:10:00Z");
        assert!(
            !claim_read(&store, &key, 1, &c1)
                .await
                .unwrap()
                .unwrap()
                .previously_sent
        );
        let release = SubmissionUpdate::release(false);
        assert!(
            store
                .record(&key, Some("c1"), &release, t("2026-11-30T11:05:01Z"))
                .await
                .unwrap()
        );
        let reopened = store.get(&key).await.unwrap().unwrap();
        assert!(reopened.accepts_folds());
        assert_eq!(reopened.sent_quantity, None);
        // A record without a claim id cannot be written while a live claim holds it.
        let c2 = claim_at("c2", "2026-11-30T11:06:00Z", "2026-11-30T11:10:00Z");
        assert!(claim_read(&store, &key, 1, &c2).await.unwrap().is_some());
        let expire = SubmissionUpdate::new(AggregatedStatus::SubmissionExpired, None, None);
        assert!(
            !store
                .record(&key, None, &expire, t("2026-11-30T11:07:00Z"))
                .await
                .unwrap()
        );
        assert!(
            store
                .record(&key, None, &expire, t("2026-11-30T11:10:00Z"))
                .await
                .unwrap(),
            "the lease has lapsed"
        );
    }

    #[tokio::test]
    async fn a_record_mid_fold_cannot_be_claimed() {
        let tables = MemoryTables::new();
        let store = tables.aggregated_store();
        let key = group("requests", "2026-11-30T10");
        let mut folding = record(key.clone(), 5, 1);
        folding.folding = true;
        tables.insert_aggregated(folding, t("2026-11-30T11:00:00Z"));
        let c1 = claim_at("c1", "2026-11-30T11:05:00Z", "2026-11-30T11:10:00Z");
        assert!(claim_read(&store, &key, 1, &c1).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn aggregated_pending_page_and_put_direct() {
        let tables = MemoryTables::with_page_size(2);
        let store = tables.aggregated_store();
        let now = t("2026-11-30T11:00:00Z");
        for dimension in ["a", "b", "c"] {
            let outcome = store
                .put_direct(&record(group(dimension, "2026-11-30T10"), 1, 1), now)
                .await
                .unwrap();
            assert_eq!(outcome, PutOutcome::Created);
        }
        assert_eq!(
            store
                .put_direct(&record(group("a", "2026-11-30T10"), 9, 1), now)
                .await
                .unwrap(),
            PutOutcome::AlreadyExists
        );
        store
            .put_direct(&record(group("a", "2026-11-30T09"), 1, 1), now)
            .await
            .unwrap();
        let first = store
            .pending_page(hour("2026-11-30T10"), None)
            .await
            .unwrap();
        assert_eq!(first.items.len(), 2);
        let second = store
            .pending_page(hour("2026-11-30T10"), first.next)
            .await
            .unwrap();
        assert_eq!(second.items.len(), 1);
        assert_eq!(second.next, None);
        assert_eq!(
            store
                .get(&group("a", "2026-11-30T10"))
                .await
                .unwrap()
                .unwrap()
                .quantity,
            1
        );
    }
}

//! [`AggregatedStore`] over [`MemoryTables`]: the commit transaction, claims and outcomes.

use std::collections::{BTreeMap, BTreeSet};

use async_trait::async_trait;

use super::faults::StoreOp;
use super::page::paginate;
use super::tables::{MemoryTables, StoredAggregate, StoredMalformed, TableKey, aggregated_key};
use crate::items::size::{item_size, raw_row_size};
use crate::items::{CommitWrite, aggregated_item, check_item, check_transaction, set_expiry};
use crate::model::{AggregatedRecord, AggregatedStatus, Attr, GroupKey, RawUsageRow, attr};
use crate::outcomes::Table;
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

        let record_key = aggregated_key(&commit.record.key);
        let mut state = self.tables.write(|| {
            std::iter::once((Table::Aggregated, record_key.clone()))
                .chain(
                    commit
                        .claimed_rows
                        .iter()
                        .map(|key| (Table::Usage, key.clone())),
                )
                .collect()
        });
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
                correction: None,
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
        let mut state = self.tables.write(|| {
            requests
                .iter()
                .map(|r| (Table::Aggregated, aggregated_key(&r.key)))
                .collect()
        });
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
        let mut state = self.tables.write(|| {
            writes
                .iter()
                .map(|w| (Table::Aggregated, aggregated_key(&w.key)))
                .collect()
        });
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
        let key = (item.license_arn.clone(), item.sort_key.clone());
        let mut state = self.tables.write(|| vec![(Table::Aggregated, key.clone())]);
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
        let key = aggregated_key(&record.key);
        let mut state = self.tables.write(|| vec![(Table::Aggregated, key.clone())]);
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
                correction: None,
            },
        );
        Ok(PutOutcome::Created)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;

//! The usage and aggregated-usage tables in memory: one state behind one lock, shared
//! by [`MemoryUsageStore`](super::MemoryUsageStore) and
//! [`MemoryAggregatedStore`](super::MemoryAggregatedStore) (each made from the tables
//! in its own file, `MemoryTables::usage_store` / `aggregated_store`), so a commit is
//! atomic across both. Every write goes through one guard ([`MemoryTables::write`]),
//! which, once [`MemoryTables::record_changes`] is on, records each item it changed
//! with its old and new images: the tables' streams (`NEW_AND_OLD_IMAGES`).

use std::collections::BTreeMap;
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, MutexGuard};

use super::faults::{Faults, StoreOp};
use crate::items::{aggregated_item, set_expiry};
use crate::model::{AggregatedRecord, AggregatedStatus, Attr, GroupKey, RawUsageRow, attr};
use crate::outcomes::{Change, Table};
use crate::ports::PortError;
use crate::stamp::AuditStamp;
use crate::sync::lock;
use crate::time::Instant;

/// Page size of the in-memory pending indexes unless set otherwise: deliberately small,
/// so every test that has more than a few pending items exercises pagination.
pub const DEFAULT_PAGE_SIZE: usize = 3;

/// Table key `(partition key, sort key)`.
pub(crate) type TableKey = (String, String);

/// An aggregated record with its audit stamps, its `expiresAt` (set only by the
/// write that makes it final) and its `finalWriteId` (set by a final write that has one).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StoredAggregate {
    pub(crate) record: AggregatedRecord,
    pub(crate) stamp: AuditStamp,
    pub(crate) expires_at: Option<Instant>,
    pub(crate) final_write_id: Option<String>,
    /// `correction`, written by `awsmp adjust` on a billed record.
    pub(crate) correction: Option<crate::corrections::Correction>,
}

/// An aggregated-table item a seller wrote that cannot be read as a record (kept by
/// its stored keys, as the DynamoDB table would keep it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoredMalformed {
    /// `meteringPending` as written (`None` once finalized).
    pub(crate) metering_pending: Option<String>,
    /// What is wrong with it.
    pub(crate) problem: String,
    /// `meteringStatus` / `meteringStatusReason` once finalized.
    pub(crate) status: Option<(AggregatedStatus, String)>,
    /// `expiresAt` once finalized.
    pub(crate) expires_at: Option<Instant>,
}

#[derive(Debug, Default)]
pub(crate) struct TablesState {
    pub(crate) usage: BTreeMap<TableKey, RawUsageRow>,
    pub(crate) aggregated: BTreeMap<TableKey, StoredAggregate>,
    pub(crate) malformed_aggregated: BTreeMap<TableKey, StoredMalformed>,
    /// The streams, once recorded: every committed change, in commit order.
    stream: Option<Vec<StreamChange>>,
}

/// One committed change of one item, as a table's stream tells it.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamChange {
    /// The table it belongs to.
    pub table: Table,
    /// The item's keys `(partition key, sort key)`.
    pub key: (String, String),
    /// Its position in the tables' streams (`SequenceNumber`, increasing), its id
    /// (`eventID`) and its images.
    pub change: Change,
}

/// An item's attributes as DynamoDB would store them (an image of a stream record).
pub type Image = BTreeMap<String, Attr>;

impl TablesState {
    /// The item at `key` of `table` as stored, attributes and keys, if any.
    fn image(&self, table: Table, key: &TableKey) -> Option<Image> {
        let keys = |sort_key_name: &str| {
            [
                (attr::LICENSE_ARN.to_string(), Attr::S(key.0.clone())),
                (sort_key_name.to_string(), Attr::S(key.1.clone())),
            ]
        };
        match table {
            Table::Usage => self.usage.get(key).map(|row| {
                let mut item = row.attrs.clone();
                item.extend(keys(attr::USAGE_SORT_KEY));
                item
            }),
            Table::Aggregated => {
                if let Some(stored) = self.aggregated.get(key) {
                    let mut item = aggregated_item(&stored.record);
                    set_expiry(&mut item, stored.expires_at);
                    if let Some(id) = &stored.final_write_id {
                        item.insert(attr::FINAL_WRITE_ID.to_string(), Attr::S(id.clone()));
                    }
                    return Some(item);
                }
                // A malformed item: its keys and what the pipeline wrote to it (the
                // seller's other attributes are not kept in memory).
                let malformed = self.malformed_aggregated.get(key)?;
                let mut item: Image = keys(attr::AGGREGATED_SORT_KEY).into_iter().collect();
                if let Some(hour) = &malformed.metering_pending {
                    item.insert(attr::METERING_PENDING.to_string(), Attr::S(hour.clone()));
                }
                if let Some((status, reason)) = &malformed.status {
                    item.insert(
                        attr::METERING_STATUS.to_string(),
                        Attr::S(status.as_str().to_string()),
                    );
                    item.insert(
                        attr::METERING_STATUS_REASON.to_string(),
                        Attr::S(reason.clone()),
                    );
                }
                set_expiry(&mut item, malformed.expires_at);
                Some(item)
            }
        }
    }
}

/// The tables locked for one write (the only way a write reaches them): when the
/// streams are recorded, the items it may touch are read before it, and on release
/// each one that changed is appended to the stream with both images. A write that
/// changes nothing (a failed condition) records nothing, as in DynamoDB.
pub(crate) struct WriteGuard<'a> {
    state: MutexGuard<'a, TablesState>,
    before: Vec<(Table, TableKey, Option<Image>)>,
}

impl Deref for WriteGuard<'_> {
    type Target = TablesState;
    fn deref(&self) -> &TablesState {
        &self.state
    }
}

impl DerefMut for WriteGuard<'_> {
    fn deref_mut(&mut self) -> &mut TablesState {
        &mut self.state
    }
}

impl Drop for WriteGuard<'_> {
    fn drop(&mut self) {
        let before = std::mem::take(&mut self.before);
        for (table, key, old) in before {
            let new = self.state.image(table, &key);
            if new == old {
                continue;
            }
            let Some(stream) = self.state.stream.as_mut() else {
                return;
            };
            let position = stream.len() + 1;
            stream.push(StreamChange {
                table,
                key,
                change: Change {
                    change_id: format!("change-{position:08}"),
                    position: format!("{position:020}"),
                    old,
                    new,
                },
            });
        }
    }
}

/// The usage and aggregated-usage tables, shared by [`MemoryUsageStore`](super::MemoryUsageStore) and
/// [`MemoryAggregatedStore`](super::MemoryAggregatedStore) so that a commit is atomic across both.
#[derive(Debug, Clone)]
pub struct MemoryTables {
    pub(crate) state: Arc<Mutex<TablesState>>,
    pub(crate) faults: Arc<Faults>,
    pub(crate) page_size: usize,
}

impl Default for MemoryTables {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryTables {
    /// Empty tables whose pending indexes page by [`DEFAULT_PAGE_SIZE`].
    pub fn new() -> Self {
        Self::with_page_size(DEFAULT_PAGE_SIZE)
    }

    /// Empty tables whose pending indexes page by `page_size` (at least 1).
    pub fn with_page_size(page_size: usize) -> Self {
        MemoryTables {
            state: Arc::default(),
            faults: Arc::default(),
            page_size: page_size.max(1),
        }
    }

    /// Locks the tables for a write that may touch the items `keys` names (asked only
    /// while the streams are recorded): every write goes through here.
    pub(crate) fn write(&self, keys: impl FnOnce() -> Vec<(Table, TableKey)>) -> WriteGuard<'_> {
        let state = lock(&self.state);
        let mut before: Vec<(Table, TableKey, Option<Image>)> = Vec::new();
        if state.stream.is_some() {
            for (table, key) in keys() {
                if !before.iter().any(|(t, k, _)| *t == table && *k == key) {
                    let old = state.image(table, &key);
                    before.push((table, key, old));
                }
            }
        }
        WriteGuard { state, before }
    }

    /// Starts recording the tables' streams (off by default: nothing is kept or read
    /// for tables nobody streams). Changes before this call are not recorded.
    pub fn record_changes(&self) {
        lock(&self.state).stream.get_or_insert_with(Vec::new);
    }

    /// The recorded changes from position `from` on (0: the first), in commit order.
    pub fn changes_from(&self, from: usize) -> Vec<StreamChange> {
        lock(&self.state)
            .stream
            .as_ref()
            .map(|stream| stream.get(from..).unwrap_or_default().to_vec())
            .unwrap_or_default()
    }

    /// How many changes are recorded.
    pub fn change_count(&self) -> usize {
        lock(&self.state).stream.as_ref().map_or(0, Vec::len)
    }

    /// Makes the next call of `op` on either store fail with `error` (queued, one-shot).
    pub fn fail_next(&self, op: StoreOp, error: PortError) {
        self.faults.push(op, error);
    }

    /// Lets the next `calls` calls of `op` succeed, then makes the one after fail with
    /// `error` (a crash between two commits of one fold, say).
    pub fn fail_after(&self, op: StoreOp, calls: usize, error: PortError) {
        self.faults.push_after(op, calls, error);
    }

    /// Writes a raw row exactly as given (overwriting), as a seller's writer would.
    pub fn insert_raw_row(&self, row: RawUsageRow) {
        let key = (row.license_arn.clone(), row.sort_key.clone());
        self.write(|| vec![(Table::Usage, key.clone())])
            .usage
            .insert(key, row);
    }

    /// One raw row, as stored.
    pub fn raw_row(&self, license_arn: &str, sort_key: &str) -> Option<RawUsageRow> {
        lock(&self.state)
            .usage
            .get(&(license_arn.to_string(), sort_key.to_string()))
            .cloned()
    }

    /// Every raw row, ordered by (license, sort key).
    pub fn raw_rows(&self) -> Vec<RawUsageRow> {
        lock(&self.state).usage.values().cloned().collect()
    }

    /// Writes an aggregated record exactly as given (overwriting), stamped at `now`.
    pub fn insert_aggregated(&self, record: AggregatedRecord, now: Instant) {
        let key = aggregated_key(&record.key);
        self.write(|| vec![(Table::Aggregated, key.clone())])
            .aggregated
            .insert(
                key,
                StoredAggregate {
                    record,
                    stamp: AuditStamp::at(now),
                    expires_at: None,
                    final_write_id: None,
                    correction: None,
                },
            );
    }

    /// Sets a stored aggregated record's `quantity` and nothing else, as a direct-submit
    /// seller's `UpdateItem` does (no version bump); `false` when it is absent or no
    /// longer pending (the seller's update is conditional on `meteringPending`).
    pub fn update_aggregated_quantity(&self, key: &GroupKey, quantity: i64) -> bool {
        let mut state = self.write(|| vec![(Table::Aggregated, aggregated_key(key))]);
        match state.aggregated.get_mut(&aggregated_key(key)) {
            Some(stored) if stored.record.is_pending() => {
                stored.record.quantity = quantity;
                true
            }
            _ => false,
        }
    }

    /// Sets (or removes) a stored aggregated record's `expiresAt` as given, as a seller's
    /// writer could (a direct-submit row that sets it, say).
    pub fn set_aggregated_expiry(&self, key: &GroupKey, expires_at: Option<Instant>) {
        let key = aggregated_key(key);
        let mut state = self.write(|| vec![(Table::Aggregated, key.clone())]);
        if let Some(stored) = state.aggregated.get_mut(&key) {
            stored.expires_at = expires_at;
        }
    }

    /// The `expiresAt` of an aggregated record, if it carries one.
    pub fn aggregated_expiry(&self, key: &GroupKey) -> Option<Instant> {
        lock(&self.state)
            .aggregated
            .get(&aggregated_key(key))
            .and_then(|stored| stored.expires_at)
    }

    /// The `expiresAt` of a malformed aggregated item, once it has one.
    pub fn malformed_aggregated_expiry(
        &self,
        license_arn: &str,
        sort_key: &str,
    ) -> Option<Instant> {
        lock(&self.state)
            .malformed_aggregated
            .get(&(license_arn.to_string(), sort_key.to_string()))
            .and_then(|m| m.expires_at)
    }

    /// Every item of either table that is not final yet carries `expiresAt` (DynamoDB
    /// could delete usage before it is counted or billed), by table and keys. The
    /// pipeline keeps this empty; a seller's row is here until the pipeline finalizes it
    /// (`ReservedAttribute`).
    pub fn pending_items_with_expiry(&self) -> Vec<String> {
        let state = lock(&self.state);
        let raw = state
            .usage
            .values()
            .filter(|row| row.is_pending() && row.attrs.contains_key(attr::EXPIRES_AT))
            .map(|row| format!("usage {}/{}", row.license_arn, row.sort_key));
        let records = state
            .aggregated
            .iter()
            .filter(|(_, stored)| {
                !stored.record.status.is_terminal() && stored.expires_at.is_some()
            })
            .map(|((pk, sk), _)| format!("aggregated {pk}/{sk}"));
        let malformed = state
            .malformed_aggregated
            .iter()
            .filter(|(_, m)| m.metering_pending.is_some() && m.expires_at.is_some())
            .map(|((pk, sk), _)| format!("aggregated (malformed) {pk}/{sk}"));
        raw.chain(records).chain(malformed).collect()
    }

    /// Writes an aggregated-table item the pipeline cannot read as a record (a seller's
    /// malformed direct-submit row, or one whose keys contradict its attributes), with
    /// `meteringPending` = `metering_pending` and the reader's complaint `problem`.
    pub fn insert_malformed_aggregated(
        &self,
        license_arn: &str,
        sort_key: &str,
        metering_pending: &str,
        problem: &str,
    ) {
        let key = (license_arn.to_string(), sort_key.to_string());
        self.write(|| vec![(Table::Aggregated, key.clone())])
            .malformed_aggregated
            .insert(
                key,
                StoredMalformed {
                    metering_pending: Some(metering_pending.to_string()),
                    problem: problem.to_string(),
                    status: None,
                    expires_at: None,
                },
            );
    }

    /// The final status and reason of a malformed aggregated item, once it has one.
    pub fn malformed_aggregated_status(
        &self,
        license_arn: &str,
        sort_key: &str,
    ) -> Option<(AggregatedStatus, String)> {
        lock(&self.state)
            .malformed_aggregated
            .get(&(license_arn.to_string(), sort_key.to_string()))
            .and_then(|m| m.status.clone())
    }

    /// Every aggregated record, ordered by (license, sort key).
    pub fn aggregated_records(&self) -> Vec<AggregatedRecord> {
        lock(&self.state)
            .aggregated
            .values()
            .map(|stored| stored.record.clone())
            .collect()
    }

    /// Every aggregated record that carries a correction, with it.
    pub fn corrections(&self) -> Vec<(AggregatedRecord, crate::corrections::Correction)> {
        lock(&self.state)
            .aggregated
            .values()
            .filter_map(|stored| Some((stored.record.clone(), stored.correction.clone()?)))
            .collect()
    }

    /// The audit stamps of an aggregated record (`createdAt` kept from its first write).
    pub fn aggregated_audit(&self, key: &GroupKey) -> Option<AuditStamp> {
        lock(&self.state)
            .aggregated
            .get(&aggregated_key(key))
            .map(|stored| stored.stamp.clone())
    }
}

pub(crate) fn aggregated_key(key: &GroupKey) -> TableKey {
    (key.license_arn.clone(), key.aggregated_sort_key())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::memory::fixtures::{ONE_ROW_LICENSE, commit, pending_record, tables_with_one_row};
    use crate::ports::{AggregatedStore, CommitOutcome, OutcomeWrite, SubmissionUpdate};
    use crate::time::{HourBucket, parse_usage_timestamp};

    fn key() -> GroupKey {
        GroupKey {
            license_arn: ONE_ROW_LICENSE.into(),
            customer_aws_account_id: "111122223333".into(),
            dimension: "requests".into(),
            hour: HourBucket::containing(parse_usage_timestamp("2026-11-30T09:15:00Z").unwrap()),
        }
    }

    fn status(image: &Option<Image>) -> Option<&str> {
        image
            .as_ref()
            .and_then(|i| i.get(attr::METERING_STATUS))
            .and_then(Attr::as_s)
    }

    #[tokio::test]
    async fn every_committed_change_is_streamed_with_both_images_once_recorded() {
        let tables = tables_with_one_row();
        // Off by default: nothing kept.
        assert_eq!(tables.change_count(), 0);
        tables.record_changes();
        let store = tables.aggregated_store();
        let row = tables.raw_rows().remove(0);
        let record = pending_record(key(), "prod", 4, 1);
        let outcome = store
            .commit(&commit(
                record.clone(),
                None,
                &[&row],
                "2026-11-30T10:20:00Z",
            ))
            .await
            .unwrap();
        assert_eq!(outcome, CommitOutcome::Committed);
        // One transaction, two items: the record created, the row counted.
        let changes = tables.changes_from(0);
        assert_eq!(changes.len(), 2, "{changes:#?}");
        assert_eq!(changes[0].table, Table::Aggregated);
        assert_eq!(changes[0].change.old, None);
        assert_eq!(status(&changes[0].change.new), Some("Pending"));
        assert_eq!(changes[1].table, Table::Usage);
        assert!(changes[1].change.old.is_some());
        assert_eq!(status(&changes[1].change.new), Some("Aggregated"));
        assert_eq!(
            changes[1].change.new.as_ref().unwrap()[attr::USAGE_SORT_KEY],
            Attr::S(row.sort_key.clone())
        );
        // A write whose condition fails changes nothing and streams nothing.
        let again = store
            .commit(&commit(record, None, &[&row], "2026-11-30T10:21:00Z"))
            .await
            .unwrap();
        assert_eq!(again, CommitOutcome::Conflict);
        assert_eq!(tables.change_count(), 2);
        // The record's terminal write: old Pending, new Success, in order after the others.
        let write = OutcomeWrite {
            key: key(),
            claim_id: None,
            update: SubmissionUpdate::new(AggregatedStatus::Success, None, Some("mr-1".into())),
        };
        let now = parse_usage_timestamp("2026-11-30T10:30:00Z").unwrap();
        assert_eq!(store.record_all(&[write], now).await.unwrap(), vec![true]);
        let last = tables.changes_from(2);
        assert_eq!(last.len(), 1);
        assert_eq!(status(&last[0].change.old), Some("Pending"));
        assert_eq!(status(&last[0].change.new), Some("Success"));
        assert!(last[0].change.position > changes[1].change.position);
        assert_ne!(last[0].change.change_id, changes[1].change.change_id);
    }

    #[tokio::test]
    async fn a_malformed_item_closed_error_is_streamed_with_its_keys() {
        let tables = MemoryTables::new();
        tables.record_changes();
        tables.insert_malformed_aggregated(ONE_ROW_LICENSE, "garbage", "2026-11-30T09", "bad");
        let item = crate::ports::MalformedItem {
            license_arn: ONE_ROW_LICENSE.into(),
            sort_key: "garbage".into(),
            problem: "bad".into(),
        };
        let now = parse_usage_timestamp("2026-11-30T10:30:00Z").unwrap();
        let store = tables.aggregated_store();
        assert!(
            store
                .reject_malformed(&item, "MalformedItem", None, now)
                .await
                .unwrap()
        );
        let changes = tables.changes_from(0);
        assert_eq!(changes.len(), 2);
        let closed = changes[1].change.new.as_ref().unwrap();
        assert_eq!(closed[attr::AGGREGATED_SORT_KEY], Attr::S("garbage".into()));
        assert_eq!(closed[attr::METERING_STATUS], Attr::S("Error".into()));
        assert!(!closed.contains_key(attr::METERING_PENDING));
    }
}

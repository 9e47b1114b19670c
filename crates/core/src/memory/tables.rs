//! The usage and aggregated-usage tables in memory: one state behind one lock, shared
//! by [`MemoryUsageStore`](super::MemoryUsageStore) and
//! [`MemoryAggregatedStore`](super::MemoryAggregatedStore) (each made from the tables
//! in its own file, `MemoryTables::usage_store` / `aggregated_store`), so a commit is
//! atomic across both.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use super::faults::{Faults, StoreOp};
use crate::model::{AggregatedRecord, AggregatedStatus, GroupKey, RawUsageRow, attr};
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
        lock(&self.state)
            .usage
            .insert((row.license_arn.clone(), row.sort_key.clone()), row);
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
        lock(&self.state).aggregated.insert(
            key,
            StoredAggregate {
                record,
                stamp: AuditStamp::at(now),
                expires_at: None,
                final_write_id: None,
            },
        );
    }

    /// Sets a stored aggregated record's `quantity` and nothing else, as a direct-submit
    /// seller's `UpdateItem` does (no version bump); `false` when it is absent or no
    /// longer pending (the seller's update is conditional on `meteringPending`).
    pub fn update_aggregated_quantity(&self, key: &GroupKey, quantity: i64) -> bool {
        let mut state = lock(&self.state);
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
        if let Some(stored) = lock(&self.state).aggregated.get_mut(&aggregated_key(key)) {
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
        lock(&self.state).malformed_aggregated.insert(
            (license_arn.to_string(), sort_key.to_string()),
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

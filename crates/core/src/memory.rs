//! In-memory implementations of every port, faithful to the contracts in
//! [`crate::ports`] (conditional writes, sparse pending index, pagination), so use-case
//! tests exercise the same semantics and item shapes as the DynamoDB/SQS adapters.
//!
//! The usage and aggregated stores share one [`MemoryTables`], because an
//! [`AggregationCommit`] writes both tables in one all-or-nothing step, as the real
//! adapter does with a DynamoDB transaction. Every store is a cheap `Clone` handle on
//! shared state: give one clone to the code under test and inspect through another.
//! Store operations can be made to fail once with [`StoreOp`] (`fail_next`), to test
//! retries and error paths.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::model::{
    AggregatedRecord, AggregatedStatus, Allocation, Attr, CustomerProfile, GroupKey, RawStatus,
    RawUsageRow, ReasonCode, Subscriber, SubscriptionStatus, attr,
};
use crate::ports::{
    AggregatedStore, AggregationCommit, Claim, ClaimGrant, Clock, CommitOutcome, Cursor,
    CustomerResolver, MAX_ROWS_PER_COMMIT, MalformedItem, MeteringApi, MeteringError,
    MeteringRecord, MetricsSink, NewUsageRow, Page, PendingRawRef, PortError, ProfileStore,
    PutOutcome, RecordVerdict, ResolveError, ResolvedCustomer, RowClaim, SendReport, StrayPending,
    SubmissionUpdate, SubscriberStore, UsageStore, WorkMessage, WorkQueue,
};
use crate::stamp::AuditStamp;
use crate::time::{HourBucket, Instant, format_instant, parse_usage_timestamp};

/// Page size of the in-memory pending indexes unless set otherwise: deliberately small,
/// so every test that has more than a few pending items exercises pagination.
pub const DEFAULT_PAGE_SIZE: usize = 3;

/// Most records `BatchMeterUsage` takes in one call.
pub const MAX_RECORDS_PER_BATCH: usize = 25;

/// Largest SQS message body [`MemoryWorkQueue`] accepts by default (the classic SQS
/// limit of 256 KiB; conservative, so an oversized message shows up in tests).
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 256 * 1024;

/// Locks a mutex, recovering the data if a panicking test poisoned it (the state is
/// only ever mutated whole, under the lock).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A store operation, for injecting a one-shot failure with `fail_next`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StoreOp {
    /// [`UsageStore::pending_page`].
    UsagePendingPage,
    /// [`UsageStore::group_rows`].
    UsageGroupRows,
    /// [`UsageStore::get_row`].
    UsageGetRow,
    /// [`UsageStore::finalize_row`].
    UsageFinalizeRow,
    /// [`UsageStore::put_row`].
    UsagePutRow,
    /// [`UsageStore::stray_pending_page`].
    UsageStrayPendingPage,
    /// [`UsageStore::repair_pending`].
    UsageRepairPending,
    /// [`AggregatedStore::get`].
    AggregatedGet,
    /// [`AggregatedStore::commit`].
    AggregatedCommit,
    /// [`AggregatedStore::pending_page`].
    AggregatedPendingPage,
    /// [`AggregatedStore::claim`].
    AggregatedClaim,
    /// [`AggregatedStore::record`].
    AggregatedRecord,
    /// [`AggregatedStore::put_direct`].
    AggregatedPutDirect,
    /// [`AggregatedStore::reject_malformed`].
    AggregatedRejectMalformed,
    /// [`AggregatedStore::stray_pending_page`].
    AggregatedStrayPendingPage,
    /// [`SubscriberStore::get`].
    SubscriberGet,
    /// [`SubscriberStore::by_license`].
    SubscriberByLicense,
    /// [`SubscriberStore::by_agreement`].
    SubscriberByAgreement,
    /// [`SubscriberStore::deprovisioning`].
    SubscriberDeprovisioning,
    /// [`SubscriberStore::put_lifecycle`].
    SubscriberPutLifecycle,
    /// [`SubscriberStore::add_registered_region`].
    SubscriberAddRegisteredRegion,
    /// [`ProfileStore::upsert`].
    ProfileUpsert,
}

/// Queued one-shot outcomes per operation: `None` lets one call through, `Some` fails it.
#[derive(Debug, Default)]
struct Faults(Mutex<HashMap<StoreOp, VecDeque<Option<PortError>>>>);

impl Faults {
    fn push(&self, op: StoreOp, error: PortError) {
        lock(&self.0).entry(op).or_default().push_back(Some(error));
    }

    /// Lets the next `calls` calls of `op` through, then fails the one after with `error`.
    fn push_after(&self, op: StoreOp, calls: usize, error: PortError) {
        let mut faults = lock(&self.0);
        let queue = faults.entry(op).or_default();
        queue.extend(std::iter::repeat_n(None, calls));
        queue.push_back(Some(error));
    }

    /// Fails with the next queued error for `op`, if any.
    fn check(&self, op: StoreOp) -> Result<(), PortError> {
        match lock(&self.0).get_mut(&op).and_then(VecDeque::pop_front) {
            Some(Some(error)) => Err(error),
            Some(None) | None => Ok(()),
        }
    }
}

/// One page out of `items` (sorted by key) after `cursor`, as a DynamoDB `Query` with
/// `Limit` pages: a full page always carries a cursor, even when nothing follows (the
/// next page is then empty), because DynamoDB cannot know either.
fn paginate<K, T>(
    items: Vec<(K, T)>,
    cursor: Option<Cursor>,
    page_size: usize,
    operation: &'static str,
) -> Result<Page<T>, PortError>
where
    K: Ord + Serialize + DeserializeOwned,
{
    let after: Option<K> = match &cursor {
        None => None,
        Some(text) => Some(serde_json::from_str(text).map_err(|e| PortError::Failed {
            operation,
            message: format!("malformed pagination cursor {text:?}: {e}"),
        })?),
    };
    let mut page: Vec<(K, T)> = items
        .into_iter()
        .filter(|(key, _)| after.as_ref().is_none_or(|a| key > a))
        .take(page_size.max(1))
        .collect();
    let next = if page.len() == page_size.max(1) {
        match page.last() {
            Some((key, _)) => Some(serde_json::to_string(key).map_err(|e| PortError::Failed {
                operation,
                message: format!("cannot encode pagination cursor: {e}"),
            })?),
            None => None,
        }
    } else {
        None
    };
    Ok(Page {
        items: page.drain(..).map(|(_, item)| item).collect(),
        malformed: Vec::new(),
        next,
    })
}

// ---------------------------------------------------------------------------------
// Usage and aggregated tables
// ---------------------------------------------------------------------------------

/// Table key `(partition key, sort key)`.
type TableKey = (String, String);

/// An aggregated record with its audit stamps.
#[derive(Debug, Clone, PartialEq)]
struct StoredAggregate {
    record: AggregatedRecord,
    stamp: AuditStamp,
}

/// An aggregated-table item a seller wrote that cannot be read as a record (kept by
/// its stored keys, as the DynamoDB table would keep it).
#[derive(Debug, Clone, PartialEq, Eq)]
struct StoredMalformed {
    /// `meteringPending` as written (`None` once finalized).
    metering_pending: Option<String>,
    /// What is wrong with it.
    problem: String,
    /// `meteringStatus` / `meteringStatusReason` once finalized.
    status: Option<(AggregatedStatus, String)>,
}

#[derive(Debug, Default)]
struct TablesState {
    usage: BTreeMap<TableKey, RawUsageRow>,
    aggregated: BTreeMap<TableKey, StoredAggregate>,
    malformed_aggregated: BTreeMap<TableKey, StoredMalformed>,
}

/// The usage and aggregated-usage tables, shared by [`MemoryUsageStore`] and
/// [`MemoryAggregatedStore`] so that a commit is atomic across both.
#[derive(Debug, Clone)]
pub struct MemoryTables {
    state: Arc<Mutex<TablesState>>,
    faults: Arc<Faults>,
    page_size: usize,
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

    /// A usage-store handle on these tables.
    pub fn usage_store(&self) -> MemoryUsageStore {
        MemoryUsageStore {
            tables: self.clone(),
        }
    }

    /// An aggregated-store handle on these tables.
    pub fn aggregated_store(&self) -> MemoryAggregatedStore {
        MemoryAggregatedStore {
            tables: self.clone(),
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
            },
        );
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

fn aggregated_key(key: &GroupKey) -> TableKey {
    (key.license_arn.clone(), key.aggregated_sort_key())
}

/// Sort-key prefix of the ingestion markers in the usage table. It starts with a
/// letter, so it never matches a group's prefix `<12-digit account>#<dimension>#<hour>`.
pub const INGESTION_MARKER_PREFIX: &str = "event#";

/// Attribute of an ingestion marker naming the sort key of the row its event wrote.
pub const INGESTION_MARKER_ROW: &str = "ingestedRow";

/// The usage-table sort key of the ingestion marker of `event_id` (partition key: the
/// row's license): `event#<eventId>`. [`UsageStore::put_row`] writes the marker with
/// the row, both or neither, so the event id alone (per license) makes a retry a
/// no-op whatever timestamp it carries.
pub fn ingestion_marker_sort_key(event_id: &str) -> String {
    format!("{INGESTION_MARKER_PREFIX}{event_id}")
}

/// The event id of an ingestion marker's sort key; `None` for any other sort key (a
/// usage row). Readers that scan the usage table skip what this recognizes.
pub fn ingestion_marker_event_id(sort_key: &str) -> Option<&str> {
    sort_key.strip_prefix(INGESTION_MARKER_PREFIX)
}

/// The ingestion marker item for `row`: keys (license, [`ingestion_marker_sort_key`]),
/// [`INGESTION_MARKER_ROW`] and the audit stamps. Never `meteringPending`,
/// `customerAWSAccountId` or `dimension`: it is not usage and never enters the sparse
/// index.
pub fn ingestion_marker_item(row: &NewUsageRow, now: Instant) -> RawUsageRow {
    let mut attrs = BTreeMap::from([(
        INGESTION_MARKER_ROW.to_string(),
        Attr::S(ingestion_sort_key(row)),
    )]);
    AuditStamp::at(now).apply(&mut attrs);
    RawUsageRow {
        license_arn: row.license_arn.clone(),
        sort_key: ingestion_marker_sort_key(&row.event_id),
        attrs,
    }
}

/// The usage-table sort key of an ingested row:
/// `<account>#<dimension>#<YYYY-MM-DDTHH:MM:SSZ>#<eventId>`.
pub fn ingestion_sort_key(row: &NewUsageRow) -> String {
    format!(
        "{}#{}#{}#{}",
        row.customer_aws_account_id,
        row.dimension,
        format_instant(row.timestamp),
        row.event_id
    )
}

/// The allocations as DynamoDB holds them: a list of
/// `{allocatedUsageQuantity: N, tags: [{key: S, value: S}]}` maps.
pub fn allocations_attr(allocations: &[Allocation]) -> Attr {
    Attr::L(
        allocations
            .iter()
            .map(|allocation| {
                let tags = allocation
                    .tags
                    .iter()
                    .map(|tag| {
                        Attr::M(BTreeMap::from([
                            (attr::TAG_KEY.to_string(), Attr::S(tag.key.clone())),
                            (attr::TAG_VALUE.to_string(), Attr::S(tag.value.clone())),
                        ]))
                    })
                    .collect();
                Attr::M(BTreeMap::from([
                    (
                        attr::ALLOCATED_USAGE_QUANTITY.to_string(),
                        Attr::N(allocation.quantity.to_string()),
                    ),
                    (attr::TAGS.to_string(), Attr::L(tags)),
                ]))
            })
            .collect(),
    )
}

/// The item an ingestion write stores, attribute for attribute as the DynamoDB
/// adapter writes it: keys, `customerAWSAccountId`, `dimension`, `timestamp`
/// (`YYYY-MM-DDTHH:MM:SSZ`), `quantity` (N), optional `usageAllocations` and
/// `productCode`, `meteringPending` (the hour bucket, S) and the audit stamps.
pub fn ingestion_item(row: &NewUsageRow, now: Instant) -> RawUsageRow {
    let mut attrs = BTreeMap::from([
        (
            attr::CUSTOMER_ACCOUNT.to_string(),
            Attr::S(row.customer_aws_account_id.clone()),
        ),
        (attr::DIMENSION.to_string(), Attr::S(row.dimension.clone())),
        (
            attr::TIMESTAMP.to_string(),
            Attr::S(format_instant(row.timestamp)),
        ),
        (
            attr::QUANTITY.to_string(),
            Attr::N(row.quantity.to_string()),
        ),
        (
            attr::METERING_PENDING.to_string(),
            Attr::S(HourBucket::containing(row.timestamp).to_string()),
        ),
    ]);
    if let Some(allocations) = &row.allocations {
        attrs.insert(
            attr::USAGE_ALLOCATIONS.to_string(),
            allocations_attr(allocations),
        );
    }
    if let Some(code) = &row.product_code {
        attrs.insert(attr::PRODUCT_CODE.to_string(), Attr::S(code.clone()));
    }
    AuditStamp::at(now).apply(&mut attrs);
    RawUsageRow {
        license_arn: row.license_arn.clone(),
        sort_key: ingestion_sort_key(row),
        attrs,
    }
}

/// A pending raw row in the reference writer's shape (sort key
/// `<account>#<dimension>#<timestamp>` with the timestamp text exactly as given, no
/// audit stamps), for tests. `meteringPending` is the timestamp's hour bucket, or its
/// first 13 characters when it does not parse (a malformed row a seller could write).
pub fn reference_row(
    license_arn: &str,
    account: &str,
    dimension: &str,
    timestamp: &str,
    quantity: i64,
) -> RawUsageRow {
    let pending = match parse_usage_timestamp(timestamp) {
        Ok(t) => HourBucket::containing(t).to_string(),
        Err(_) => timestamp.chars().take(13).collect(),
    };
    RawUsageRow {
        license_arn: license_arn.to_string(),
        sort_key: format!("{account}#{dimension}#{timestamp}"),
        attrs: BTreeMap::from([
            (
                attr::CUSTOMER_ACCOUNT.to_string(),
                Attr::S(account.to_string()),
            ),
            (attr::DIMENSION.to_string(), Attr::S(dimension.to_string())),
            (attr::TIMESTAMP.to_string(), Attr::S(timestamp.to_string())),
            (attr::QUANTITY.to_string(), Attr::N(quantity.to_string())),
            (attr::METERING_PENDING.to_string(), Attr::S(pending)),
        ]),
    }
}

/// [`UsageStore`] over [`MemoryTables`].
///
/// - `pending_page`: rows whose `meteringPending` is the string `hour` (a non-string
///   value keeps a row out of the sparse index, as in DynamoDB), ordered by
///   (license, sort key), paged by the tables' page size.
/// - `finalize_row`: sets `meteringStatus` (and `meteringStatusReason`, removed when
///   `None`), removes `meteringPending`, stamps `updatedAt`, only if the row exists,
///   still has `meteringPending` and its `aggregatedInto` is as the `RowClaim` says;
///   `Ok(false)` otherwise.
/// - `put_row`: writes [`ingestion_item`] and its [`ingestion_marker_item`] together, or
///   neither when either key exists (the event id alone makes a retry a no-op).
#[derive(Debug, Clone, Default)]
pub struct MemoryUsageStore {
    tables: MemoryTables,
}

impl MemoryUsageStore {
    /// A store on fresh tables (use [`MemoryTables::usage_store`] to share them).
    pub fn new() -> Self {
        Self::default()
    }

    /// The tables behind this store (for helpers and the matching aggregated store).
    pub fn tables(&self) -> &MemoryTables {
        &self.tables
    }
}

#[async_trait]
impl UsageStore for MemoryUsageStore {
    async fn pending_page(
        &self,
        hour: HourBucket,
        cursor: Option<Cursor>,
    ) -> Result<Page<PendingRawRef>, PortError> {
        self.tables.faults.check(StoreOp::UsagePendingPage)?;
        let wanted = Attr::S(hour.to_string());
        let items: Vec<(TableKey, PendingRawRef)> = lock(&self.tables.state)
            .usage
            .iter()
            .filter(|(_, row)| row.attrs.get(attr::METERING_PENDING) == Some(&wanted))
            .map(|(key, row)| {
                let projected =
                    |name: &str| row.attrs.get(name).and_then(Attr::as_s).map(str::to_string);
                (
                    key.clone(),
                    PendingRawRef {
                        license_arn: row.license_arn.clone(),
                        sort_key: row.sort_key.clone(),
                        customer_aws_account_id: projected(attr::CUSTOMER_ACCOUNT),
                        dimension: projected(attr::DIMENSION),
                    },
                )
            })
            .collect();
        paginate(items, cursor, self.tables.page_size, "usage pending_page")
    }

    async fn group_rows(&self, key: &GroupKey) -> Result<Vec<RawUsageRow>, PortError> {
        self.tables.faults.check(StoreOp::UsageGroupRows)?;
        let prefix = key.usage_sort_key_prefix();
        Ok(lock(&self.tables.state)
            .usage
            .values()
            .filter(|row| row.license_arn == key.license_arn && row.sort_key.starts_with(&prefix))
            .cloned()
            .collect())
    }

    async fn get_row(
        &self,
        license_arn: &str,
        sort_key: &str,
    ) -> Result<Option<RawUsageRow>, PortError> {
        self.tables.faults.check(StoreOp::UsageGetRow)?;
        Ok(self.tables.raw_row(license_arn, sort_key))
    }

    async fn finalize_row(
        &self,
        license_arn: &str,
        sort_key: &str,
        claim: RowClaim<'_>,
        status: RawStatus,
        reason: Option<ReasonCode>,
        now: Instant,
    ) -> Result<bool, PortError> {
        self.tables.faults.check(StoreOp::UsageFinalizeRow)?;
        let mut state = lock(&self.tables.state);
        let key = (license_arn.to_string(), sort_key.to_string());
        let Some(row) = state.usage.get_mut(&key) else {
            return Ok(false);
        };
        let claim_ok = match (claim, row.attrs.get(attr::AGGREGATED_INTO)) {
            (RowClaim::Counted(record), Some(Attr::S(into))) => into == record,
            (RowClaim::Counted(_), _) => false,
            (RowClaim::Uncounted, found) => found.is_none(),
        };
        if !claim_ok || !row.attrs.contains_key(attr::METERING_PENDING) {
            return Ok(false);
        }
        row.attrs.remove(attr::METERING_PENDING);
        row.attrs.insert(
            attr::METERING_STATUS.to_string(),
            Attr::S(status.as_str().to_string()),
        );
        match reason {
            Some(reason) => {
                row.attrs.insert(
                    attr::METERING_STATUS_REASON.to_string(),
                    Attr::S(reason.as_str().to_string()),
                );
            }
            None => {
                row.attrs.remove(attr::METERING_STATUS_REASON);
            }
        }
        AuditStamp::at(now).apply(&mut row.attrs);
        Ok(true)
    }

    async fn put_row(&self, row: &NewUsageRow, now: Instant) -> Result<PutOutcome, PortError> {
        self.tables.faults.check(StoreOp::UsagePutRow)?;
        // The row and its event's marker, both or neither (one transaction in DynamoDB,
        // each conditional on its item not existing).
        let item = ingestion_item(row, now);
        let marker = ingestion_marker_item(row, now);
        let mut state = lock(&self.tables.state);
        let key = (item.license_arn.clone(), item.sort_key.clone());
        let marker_key = (marker.license_arn.clone(), marker.sort_key.clone());
        if state.usage.contains_key(&key) || state.usage.contains_key(&marker_key) {
            return Ok(PutOutcome::AlreadyExists);
        }
        state.usage.insert(key, item);
        state.usage.insert(marker_key, marker);
        Ok(PutOutcome::Created)
    }

    async fn stray_pending_page(
        &self,
        live: &[HourBucket],
        cursor: Option<Cursor>,
    ) -> Result<Page<StrayPending>, PortError> {
        self.tables.faults.check(StoreOp::UsageStrayPendingPage)?;
        let live: BTreeSet<String> = live.iter().map(ToString::to_string).collect();
        let items: Vec<(TableKey, StrayPending)> = lock(&self.tables.state)
            .usage
            .iter()
            .filter_map(|(key, row)| match row.attrs.get(attr::METERING_PENDING) {
                Some(Attr::S(value)) if !live.contains(value) => Some((
                    key.clone(),
                    StrayPending {
                        license_arn: row.license_arn.clone(),
                        sort_key: row.sort_key.clone(),
                        metering_pending: value.clone(),
                    },
                )),
                _ => None,
            })
            .collect();
        paginate(
            items,
            cursor,
            self.tables.page_size,
            "usage stray_pending_page",
        )
    }

    async fn repair_pending(
        &self,
        license_arn: &str,
        sort_key: &str,
        from: &str,
        hour: HourBucket,
        now: Instant,
    ) -> Result<bool, PortError> {
        self.tables.faults.check(StoreOp::UsageRepairPending)?;
        let mut state = lock(&self.tables.state);
        let key = (license_arn.to_string(), sort_key.to_string());
        let Some(row) = state.usage.get_mut(&key) else {
            return Ok(false);
        };
        if row.attrs.get(attr::METERING_PENDING) != Some(&Attr::S(from.to_string())) {
            return Ok(false);
        }
        row.attrs.insert(
            attr::METERING_PENDING.to_string(),
            Attr::S(hour.to_string()),
        );
        AuditStamp::at(now).apply(&mut row.attrs);
        Ok(true)
    }
}

/// [`AggregatedStore`] over [`MemoryTables`].
///
/// - `commit`: all or nothing. The record must not exist when `expected_version` is
///   `None`; otherwise the stored record must be at that version, still `Pending`, and
///   not in flight (`inFlightUntil` absent or `<= commit.now`). Every claimed raw row
///   must exist, still have `meteringPending`, and have no `aggregatedInto`. Any failed
///   condition is [`CommitOutcome::Conflict`] and changes nothing. On success the record
///   is stored as given and each claimed row gets `aggregatedInto` = the record's sort
///   key and a new `updatedAt`. More than [`MAX_ROWS_PER_COMMIT`] rows, or the same row
///   twice, is an error (DynamoDB refuses such a transaction).
/// - `claim`: pending, at `expected_version`, not mid-fold, not held by an unexpired
///   claim (`inFlightUntil <= claim.now` counts as expired) -> `inFlightUntil`,
///   `claimId`, `sentQuantity` (kept if set), `attemptCount + 1`; the version does not
///   move. The grant says whether an earlier send may have billed it.
/// - `record`: only while pending and, with a claim id, only under that claim (without
///   one, only while no unexpired claim holds it); releases the claim; a terminal
///   status also sets the reason and the record id (an absent record id keeps a stored
///   one) and leaves the pending index. `Pending` releases the claim and drops
///   `sentQuantity` unless the update says a send may have billed.
/// - `commit` folds only into a record no claim ever held (`accepts_folds`).
/// - `pending_page`: `Pending` records of `hour`, ordered by (license, sort key), paged.
#[derive(Debug, Clone, Default)]
pub struct MemoryAggregatedStore {
    tables: MemoryTables,
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
        if commit.claimed_rows.len() > MAX_ROWS_PER_COMMIT {
            return Err(PortError::Failed {
                operation: "commit",
                message: format!(
                    "a commit claims at most {MAX_ROWS_PER_COMMIT} raw rows, got {}",
                    commit.claimed_rows.len()
                ),
            });
        }
        let distinct: BTreeSet<&(String, String)> = commit.claimed_rows.iter().collect();
        if distinct.len() != commit.claimed_rows.len() {
            return Err(PortError::Failed {
                operation: "commit",
                message: "a commit names the same raw row twice".to_string(),
            });
        }

        let mut state = lock(&self.tables.state);
        let record_key = aggregated_key(&commit.record.key);
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
                row.attrs.contains_key(attr::METERING_PENDING)
                    && !row.attrs.contains_key(attr::AGGREGATED_INTO)
            })
        });
        if !rows_ok {
            return Ok(CommitOutcome::Conflict);
        }

        let stamp = AuditStamp::at(commit.now);
        let claim = Attr::S(record_key.1.clone());
        for key in &commit.claimed_rows {
            if let Some(row) = state.usage.get_mut(key) {
                row.attrs
                    .insert(attr::AGGREGATED_INTO.to_string(), claim.clone());
                stamp.apply(&mut row.attrs);
            }
        }
        let created_at = state
            .aggregated
            .get(&record_key)
            .map_or_else(|| stamp.created_at.clone(), |s| s.stamp.created_at.clone());
        state.aggregated.insert(
            record_key,
            StoredAggregate {
                record: commit.record.clone(),
                stamp: AuditStamp {
                    created_at,
                    updated_at: stamp.updated_at,
                },
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
            .filter(|(_, stored)| {
                stored.record.status == AggregatedStatus::Pending && stored.record.key.hour == hour
            })
            .map(|(key, stored)| (key.clone(), Ok(stored.record.clone())))
            .collect();
        items.extend(
            state
                .malformed_aggregated
                .iter()
                .filter(|(_, m)| m.metering_pending.as_deref() == Some(hour_text.as_str()))
                .map(|(key, m)| {
                    (
                        key.clone(),
                        Err(MalformedItem {
                            license_arn: key.0.clone(),
                            sort_key: key.1.clone(),
                            problem: m.problem.clone(),
                        }),
                    )
                }),
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

    async fn claim(
        &self,
        key: &GroupKey,
        expected_version: u64,
        claim: &Claim,
    ) -> Result<Option<ClaimGrant>, PortError> {
        self.tables.faults.check(StoreOp::AggregatedClaim)?;
        let mut state = lock(&self.tables.state);
        let Some(stored) = state.aggregated.get_mut(&aggregated_key(key)) else {
            return Ok(None);
        };
        let record = &mut stored.record;
        if record.status != AggregatedStatus::Pending
            || record.version != expected_version
            || record.folding
            || in_flight_at(record, claim.now)
        {
            return Ok(None);
        }
        let grant = ClaimGrant {
            previously_sent: record.sent_quantity.is_some() || record.in_flight_until.is_some(),
        };
        record.in_flight_until = Some(claim.until);
        record.claim_id = Some(claim.id.clone());
        record.sent_quantity = Some(record.sent_quantity.unwrap_or(record.quantity));
        record.attempt_count = record.attempt_count.saturating_add(1);
        stored.stamp.updated_at = format_instant(claim.now);
        Ok(Some(grant))
    }

    async fn record(
        &self,
        key: &GroupKey,
        claim_id: Option<&str>,
        update: &SubmissionUpdate,
        now: Instant,
    ) -> Result<bool, PortError> {
        self.tables.faults.check(StoreOp::AggregatedRecord)?;
        let mut state = lock(&self.tables.state);
        let Some(stored) = state.aggregated.get_mut(&aggregated_key(key)) else {
            return Ok(false);
        };
        let record = &mut stored.record;
        let holder_ok = match claim_id {
            Some(id) => record.claim_id.as_deref() == Some(id),
            None => !in_flight_at(record, now),
        };
        if record.status != AggregatedStatus::Pending || !holder_ok {
            return Ok(false);
        }
        record.in_flight_until = None;
        record.claim_id = None;
        if update.status.is_terminal() {
            record.status = update.status;
            record.status_reason = update.reason.clone();
            if update.metering_record_id.is_some() {
                record.metering_record_id = update.metering_record_id.clone();
            }
        } else if !update.possibly_sent {
            record.sent_quantity = None;
        }
        stored.stamp.updated_at = format_instant(now);
        Ok(true)
    }

    async fn reject_malformed(
        &self,
        item: &MalformedItem,
        reason: &str,
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
                stored.record.status == AggregatedStatus::Pending
                    && !live.contains(&stored.record.key.hour.to_string())
            })
            .map(|(key, stored)| (key.clone(), Ok(stored.record.clone())))
            .collect();
        items.extend(state.malformed_aggregated.iter().filter_map(|(key, m)| {
            let pending = m.metering_pending.as_ref()?;
            (!live.contains(pending)).then(|| {
                (
                    key.clone(),
                    Err(MalformedItem {
                        license_arn: key.0.clone(),
                        sort_key: key.1.clone(),
                        problem: m.problem.clone(),
                    }),
                )
            })
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
        if state.aggregated.contains_key(&key) {
            return Ok(PutOutcome::AlreadyExists);
        }
        state.aggregated.insert(
            key,
            StoredAggregate {
                record: record.clone(),
                stamp: AuditStamp::at(now),
            },
        );
        Ok(PutOutcome::Created)
    }
}

// ---------------------------------------------------------------------------------
// Subscribers and profiles
// ---------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq)]
struct StoredSubscriber {
    row: Subscriber,
    stamp: AuditStamp,
}

/// [`SubscriberStore`] in memory.
///
/// - A row created by `add_registered_region` has no lifecycle and version 0, so a
///   `put_lifecycle` at version 0 ("no lifecycle yet") succeeds on it, as the DynamoDB
///   condition `attribute_not_exists(version)` does; the registration fields survive.
/// - `put_lifecycle` writes `agreementStatus`, `subscriptionStatus`,
///   `deprovisioningExpiry`, the two guards (each removed when `None`) and
///   `productCode`/`agreementId` (kept when `None`: a lifecycle write never erases
///   identity); stores `version + 1`; never touches `registeredRegions`.
/// - `deprovisioning` lists rows that are `deprovisioning` with an expiry (the sparse
///   index needs both), by expiry.
#[derive(Debug, Clone, Default)]
pub struct MemorySubscriberStore {
    rows: Arc<Mutex<BTreeMap<TableKey, StoredSubscriber>>>,
    faults: Arc<Faults>,
}

impl MemorySubscriberStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes the next call of `op` fail with `error` (queued, one-shot).
    pub fn fail_next(&self, op: StoreOp, error: PortError) {
        self.faults.push(op, error);
    }

    /// Writes a row exactly as given (overwriting, version included), stamped at `now`.
    pub fn insert(&self, row: Subscriber, now: Instant) {
        lock(&self.rows).insert(
            (row.license_arn.clone(), row.customer_aws_account_id.clone()),
            StoredSubscriber {
                row,
                stamp: AuditStamp::at(now),
            },
        );
    }

    /// Every row, ordered by (license, account).
    pub fn rows(&self) -> Vec<Subscriber> {
        lock(&self.rows).values().map(|s| s.row.clone()).collect()
    }

    /// The audit stamps of a row.
    pub fn audit(&self, license_arn: &str, account: &str) -> Option<AuditStamp> {
        lock(&self.rows)
            .get(&(license_arn.to_string(), account.to_string()))
            .map(|s| s.stamp.clone())
    }

    fn select(&self, keep: impl Fn(&Subscriber) -> bool) -> Vec<Subscriber> {
        lock(&self.rows)
            .values()
            .filter(|s| keep(&s.row))
            .map(|s| s.row.clone())
            .collect()
    }
}

#[async_trait]
impl SubscriberStore for MemorySubscriberStore {
    async fn get(&self, license_arn: &str, account: &str) -> Result<Option<Subscriber>, PortError> {
        self.faults.check(StoreOp::SubscriberGet)?;
        Ok(lock(&self.rows)
            .get(&(license_arn.to_string(), account.to_string()))
            .map(|s| s.row.clone()))
    }

    async fn by_license(&self, license_arn: &str) -> Result<Vec<Subscriber>, PortError> {
        self.faults.check(StoreOp::SubscriberByLicense)?;
        Ok(self.select(|row| row.license_arn == license_arn))
    }

    async fn by_agreement(&self, agreement_id: &str) -> Result<Vec<Subscriber>, PortError> {
        self.faults.check(StoreOp::SubscriberByAgreement)?;
        Ok(self.select(|row| row.agreement_id.as_deref() == Some(agreement_id)))
    }

    async fn deprovisioning(&self) -> Result<Vec<Subscriber>, PortError> {
        self.faults.check(StoreOp::SubscriberDeprovisioning)?;
        let mut rows = self.select(|row| {
            row.subscription_status == Some(SubscriptionStatus::Deprovisioning)
                && row.deprovisioning_expiry.is_some()
        });
        rows.sort_by_key(|row| row.deprovisioning_expiry);
        Ok(rows)
    }

    async fn put_lifecycle(&self, row: &Subscriber, now: Instant) -> Result<bool, PortError> {
        self.faults.check(StoreOp::SubscriberPutLifecycle)?;
        let mut rows = lock(&self.rows);
        let key = (row.license_arn.clone(), row.customer_aws_account_id.clone());
        let stored_version = rows.get(&key).map_or(0, |s| s.row.version);
        if stored_version != row.version {
            return Ok(false);
        }
        let stamp = AuditStamp::at(now);
        let entry = rows.entry(key).or_insert_with(|| StoredSubscriber {
            row: Subscriber::new(row.license_arn.clone(), row.customer_aws_account_id.clone()),
            stamp: stamp.clone(),
        });
        let target = &mut entry.row;
        if row.product_code.is_some() {
            target.product_code = row.product_code.clone();
        }
        if row.agreement_id.is_some() {
            target.agreement_id = row.agreement_id.clone();
        }
        target.agreement_status = row.agreement_status;
        target.subscription_status = row.subscription_status;
        target.deprovisioning_expiry = row.deprovisioning_expiry;
        target.agreement_event_at = row.agreement_event_at;
        target.subscription_event_at = row.subscription_event_at;
        target.version = row.version + 1;
        entry.stamp.updated_at = stamp.updated_at;
        Ok(true)
    }

    async fn add_registered_region(
        &self,
        license_arn: &str,
        account: &str,
        product_code: &str,
        region: &str,
        now: Instant,
    ) -> Result<(), PortError> {
        self.faults.check(StoreOp::SubscriberAddRegisteredRegion)?;
        if region.is_empty() {
            // DynamoDB refuses an empty string in a String Set.
            return Err(PortError::Failed {
                operation: "add_registered_region",
                message: "the region to add is empty".to_string(),
            });
        }
        let mut rows = lock(&self.rows);
        let stamp = AuditStamp::at(now);
        let entry = rows
            .entry((license_arn.to_string(), account.to_string()))
            .or_insert_with(|| StoredSubscriber {
                row: Subscriber::new(license_arn, account),
                stamp: stamp.clone(),
            });
        if entry.row.product_code.is_none() {
            entry.row.product_code = Some(product_code.to_string());
        }
        let regions = &mut entry.row.registered_regions;
        if !regions.iter().any(|r| r == region) {
            regions.push(region.to_string());
            regions.sort();
        }
        entry.stamp.updated_at = stamp.updated_at;
        Ok(())
    }
}

/// [`ProfileStore`] in memory. An upsert creates the identity row if needed, sets
/// `productCode`, and sets each given field, keeping fields not given (a field-by-field
/// `SET`, so a second registration never erases what the first stored).
#[derive(Debug, Clone, Default)]
pub struct MemoryProfileStore {
    profiles: Arc<Mutex<BTreeMap<TableKey, (CustomerProfile, AuditStamp)>>>,
    faults: Arc<Faults>,
}

impl MemoryProfileStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes the next upsert fail with `error` (queued, one-shot).
    pub fn fail_next(&self, error: PortError) {
        self.faults.push(StoreOp::ProfileUpsert, error);
    }

    /// One profile.
    pub fn get(&self, license_arn: &str, account: &str) -> Option<CustomerProfile> {
        lock(&self.profiles)
            .get(&(license_arn.to_string(), account.to_string()))
            .map(|(profile, _)| profile.clone())
    }

    /// Every profile, ordered by (license, account).
    pub fn all(&self) -> Vec<CustomerProfile> {
        lock(&self.profiles)
            .values()
            .map(|(profile, _)| profile.clone())
            .collect()
    }
}

#[async_trait]
impl ProfileStore for MemoryProfileStore {
    async fn upsert(&self, profile: &CustomerProfile, now: Instant) -> Result<(), PortError> {
        self.faults.check(StoreOp::ProfileUpsert)?;
        let stamp = AuditStamp::at(now);
        let mut profiles = lock(&self.profiles);
        let (stored, stored_stamp) = profiles
            .entry((
                profile.license_arn.clone(),
                profile.customer_aws_account_id.clone(),
            ))
            .or_insert_with(|| {
                (
                    CustomerProfile {
                        license_arn: profile.license_arn.clone(),
                        customer_aws_account_id: profile.customer_aws_account_id.clone(),
                        product_code: profile.product_code.clone(),
                        fields: BTreeMap::new(),
                    },
                    stamp.clone(),
                )
            });
        stored.product_code = profile.product_code.clone();
        stored.fields.extend(
            profile
                .fields
                .iter()
                .map(|(name, value)| (name.clone(), value.clone())),
        );
        stored_stamp.updated_at = stamp.updated_at;
        Ok(())
    }
}

// ---------------------------------------------------------------------------------
// Work queue
// ---------------------------------------------------------------------------------

/// Decides whether a message send fails.
type FailPredicate = Box<dyn Fn(&WorkMessage) -> bool + Send + Sync>;

struct QueueState {
    messages: VecDeque<WorkMessage>,
    fail_where: Option<FailPredicate>,
    next_errors: VecDeque<PortError>,
    send_calls: usize,
    max_message_bytes: usize,
}

/// [`WorkQueue`] in memory. Each accepted message goes through its JSON body (as over
/// SQS), so a message that does not round-trip fails the send. Messages are refused
/// (reported in [`SendReport::failed`], never stored) when they match the predicate
/// set with [`MemoryWorkQueue::fail_where`] or exceed the body size limit; a whole send
/// fails with the errors queued by [`MemoryWorkQueue::fail_next_send`].
#[derive(Clone)]
pub struct MemoryWorkQueue {
    state: Arc<Mutex<QueueState>>,
}

impl Default for MemoryWorkQueue {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for MemoryWorkQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = lock(&self.state);
        f.debug_struct("MemoryWorkQueue")
            .field("messages", &state.messages.len())
            .field("send_calls", &state.send_calls)
            .finish()
    }
}

impl MemoryWorkQueue {
    /// An empty queue with the default body limit.
    pub fn new() -> Self {
        MemoryWorkQueue {
            state: Arc::new(Mutex::new(QueueState {
                messages: VecDeque::new(),
                fail_where: None,
                next_errors: VecDeque::new(),
                send_calls: 0,
                max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            })),
        }
    }

    /// Sets the largest accepted message body in bytes.
    pub fn with_max_message_bytes(self, bytes: usize) -> Self {
        lock(&self.state).max_message_bytes = bytes;
        self
    }

    /// From now on, refuses every message for which `predicate` is true.
    pub fn fail_where(&self, predicate: impl Fn(&WorkMessage) -> bool + Send + Sync + 'static) {
        lock(&self.state).fail_where = Some(Box::new(predicate));
    }

    /// Stops refusing messages set up with [`MemoryWorkQueue::fail_where`].
    pub fn clear_failures(&self) {
        lock(&self.state).fail_where = None;
    }

    /// Makes the next send fail as a whole with `error` (queued, one-shot).
    pub fn fail_next_send(&self, error: PortError) {
        lock(&self.state).next_errors.push_back(error);
    }

    /// The accepted messages, oldest first, without removing them.
    pub fn messages(&self) -> Vec<WorkMessage> {
        lock(&self.state).messages.iter().cloned().collect()
    }

    /// Removes and returns every accepted message, oldest first.
    pub fn drain(&self) -> Vec<WorkMessage> {
        lock(&self.state).messages.drain(..).collect()
    }

    /// Number of accepted messages waiting.
    pub fn len(&self) -> usize {
        lock(&self.state).messages.len()
    }

    /// Whether no message is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of `send` calls so far (including failed ones).
    pub fn send_calls(&self) -> usize {
        lock(&self.state).send_calls
    }
}

#[async_trait]
impl WorkQueue for MemoryWorkQueue {
    async fn send(&self, messages: &[WorkMessage]) -> Result<SendReport, PortError> {
        let mut state = lock(&self.state);
        state.send_calls += 1;
        if let Some(error) = state.next_errors.pop_front() {
            return Err(error);
        }
        let mut report = SendReport::default();
        for (index, message) in messages.iter().enumerate() {
            let body = serde_json::to_string(message).map_err(|e| PortError::Failed {
                operation: "send",
                message: format!("work message does not serialize: {e}"),
            })?;
            let refused = body.len() > state.max_message_bytes
                || state.fail_where.as_ref().is_some_and(|fail| fail(message));
            if refused {
                report.failed.push(index);
                continue;
            }
            let received: WorkMessage =
                serde_json::from_str(&body).map_err(|e| PortError::Failed {
                    operation: "send",
                    message: format!("work message does not round-trip through JSON: {e}"),
                })?;
            state.messages.push_back(received);
        }
        Ok(report)
    }
}

// ---------------------------------------------------------------------------------
// Metrics and clock
// ---------------------------------------------------------------------------------

/// A metric series: name plus its dimensions, sorted by dimension name.
type Series = (String, Vec<(String, String)>);

/// [`MetricsSink`] that adds up counts per name and dimension set (dimension order
/// does not matter).
#[derive(Debug, Clone, Default)]
pub struct RecordingMetrics {
    counts: Arc<Mutex<BTreeMap<Series, u64>>>,
}

fn series(name: &str, dimensions: &[(&str, &str)]) -> Series {
    let mut dims: Vec<(String, String)> = dimensions
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    dims.sort();
    (name.to_string(), dims)
}

impl RecordingMetrics {
    /// An empty recorder.
    pub fn new() -> Self {
        Self::default()
    }

    /// The count of `name` with exactly these dimensions (0 if never counted).
    pub fn get(&self, name: &str, dimensions: &[(&str, &str)]) -> u64 {
        lock(&self.counts)
            .get(&series(name, dimensions))
            .copied()
            .unwrap_or(0)
    }

    /// The count of `name` summed over every dimension set.
    pub fn total(&self, name: &str) -> u64 {
        lock(&self.counts)
            .iter()
            .filter(|((n, _), _)| n == name)
            .map(|(_, v)| *v)
            .sum()
    }

    /// Every series and its count.
    pub fn snapshot(&self) -> BTreeMap<(String, Vec<(String, String)>), u64> {
        lock(&self.counts).clone()
    }
}

impl MetricsSink for RecordingMetrics {
    fn count(&self, name: &str, dimensions: &[(&str, &str)], value: u64) {
        let mut counts = lock(&self.counts);
        let total = counts.entry(series(name, dimensions)).or_insert(0);
        *total = total.saturating_add(value);
    }
}

#[derive(Debug)]
struct ClockState {
    now: Instant,
    sleeps: Vec<Duration>,
}

/// [`Clock`] under test control: `sleep` returns at once, advancing the time by the
/// duration and recording it, so backoff is observable and tests never wait.
#[derive(Debug, Clone)]
pub struct ManualClock {
    state: Arc<Mutex<ClockState>>,
}

impl ManualClock {
    /// A clock standing at `start`.
    pub fn new(start: Instant) -> Self {
        ManualClock {
            state: Arc::new(Mutex::new(ClockState {
                now: start,
                sleeps: Vec::new(),
            })),
        }
    }

    /// Moves the time to `now` (backwards too).
    pub fn set(&self, now: Instant) {
        lock(&self.state).now = now;
    }

    /// Moves the time forward by `duration`, without recording a sleep.
    pub fn advance(&self, duration: Duration) {
        let mut state = lock(&self.state);
        state.now = add_std(state.now, duration);
    }

    /// Every sleep so far, in order.
    pub fn sleeps(&self) -> Vec<Duration> {
        lock(&self.state).sleeps.clone()
    }

    /// The sum of every sleep so far.
    pub fn total_slept(&self) -> Duration {
        lock(&self.state).sleeps.iter().sum()
    }
}

/// `t + d`, saturating at the latest representable instant.
fn add_std(t: Instant, d: Duration) -> Instant {
    chrono::Duration::from_std(d)
        .ok()
        .and_then(|d| t.checked_add_signed(d))
        .unwrap_or(chrono::DateTime::<chrono::Utc>::MAX_UTC)
}

#[async_trait]
impl Clock for ManualClock {
    fn now(&self) -> Instant {
        lock(&self.state).now
    }

    async fn sleep(&self, duration: Duration) {
        let mut state = lock(&self.state);
        state.now = add_std(state.now, duration);
        state.sleeps.push(duration);
    }
}

// ---------------------------------------------------------------------------------
// Marketplace Metering and ResolveCustomer
// ---------------------------------------------------------------------------------

/// What the in-memory Marketplace billed for one group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerEntry {
    /// Billed quantity (the first write's).
    pub quantity: i64,
    /// Billed allocations.
    pub allocations: Option<Vec<Allocation>>,
    /// Product of the record.
    pub product_code: String,
    /// The record id returned.
    pub metering_record_id: String,
}

#[derive(Debug, Default)]
struct MeteringState {
    entitled: BTreeSet<(String, String)>,
    ledger: BTreeMap<GroupKey, LedgerEntry>,
    rejected_dimensions: BTreeMap<String, String>,
    next_errors: VecDeque<MeteringError>,
    calls: Vec<Vec<MeteringRecord>>,
    issued_ids: u64,
}

/// A simple in-memory `BatchMeterUsage` for use-case tests (the wire-level simulator is
/// `awsmp-marketplace-sim`). Per record, in order:
/// - license/account not entitled -> `CustomerNotSubscribed`;
/// - first record for its (account, license, dimension, hour) -> billed, `Success`;
/// - same group again with the same quantity and allocations -> `Success` with the
///   original record id (an identical retry);
/// - same group with a different quantity -> `DuplicateRecord` (first write wins).
///
/// Request-level errors, before any record is billed: errors queued with
/// [`MemoryMeteringApi::fail_next`]; more than 25 records (`ValidationException`); any
/// record whose dimension was set up with [`MemoryMeteringApi::reject_dimension`].
/// No timestamp window or throttling rules: the simulator has those.
#[derive(Debug, Clone, Default)]
pub struct MemoryMeteringApi {
    state: Arc<Mutex<MeteringState>>,
}

impl MemoryMeteringApi {
    /// A Marketplace with no entitlements.
    pub fn new() -> Self {
        Self::default()
    }

    /// Entitles a license/account pair.
    pub fn entitle(&self, license_arn: &str, account: &str) {
        lock(&self.state)
            .entitled
            .insert((license_arn.to_string(), account.to_string()));
    }

    /// Removes an entitlement.
    pub fn revoke(&self, license_arn: &str, account: &str) {
        lock(&self.state)
            .entitled
            .remove(&(license_arn.to_string(), account.to_string()));
    }

    /// Fails every batch containing `dimension` with the request-level validation
    /// exception `exception` (e.g. `InvalidUsageDimensionException`).
    pub fn reject_dimension(&self, dimension: &str, exception: &str) {
        lock(&self.state)
            .rejected_dimensions
            .insert(dimension.to_string(), exception.to_string());
    }

    /// Makes the next call fail with `error` (queued, one-shot).
    pub fn fail_next(&self, error: MeteringError) {
        lock(&self.state).next_errors.push_back(error);
    }

    /// What was billed, per group.
    pub fn ledger(&self) -> BTreeMap<GroupKey, LedgerEntry> {
        lock(&self.state).ledger.clone()
    }

    /// Every batch received, in order (failed ones included).
    pub fn calls(&self) -> Vec<Vec<MeteringRecord>> {
        lock(&self.state).calls.clone()
    }
}

#[async_trait]
impl MeteringApi for MemoryMeteringApi {
    async fn batch_meter_usage(
        &self,
        records: &[MeteringRecord],
    ) -> Result<Vec<RecordVerdict>, MeteringError> {
        let mut state = lock(&self.state);
        state.calls.push(records.to_vec());
        if let Some(error) = state.next_errors.pop_front() {
            return Err(error);
        }
        if records.len() > MAX_RECORDS_PER_BATCH {
            return Err(MeteringError::Validation {
                name: "ValidationException".to_string(),
                message: format!(
                    "UsageRecords has {} records; at most {MAX_RECORDS_PER_BATCH} are allowed",
                    records.len()
                ),
            });
        }
        if let Some((dimension, exception)) = records.iter().find_map(|r| {
            state
                .rejected_dimensions
                .get_key_value(&r.key.dimension)
                .map(|(d, e)| (d.clone(), e.clone()))
        }) {
            return Err(MeteringError::Validation {
                name: exception,
                message: format!("the usage dimension {dimension:?} is not valid for the product"),
            });
        }
        let mut verdicts = Vec::with_capacity(records.len());
        for record in records {
            let entitled = state.entitled.contains(&(
                record.key.license_arn.clone(),
                record.key.customer_aws_account_id.clone(),
            ));
            if !entitled {
                verdicts.push(RecordVerdict::CustomerNotSubscribed);
                continue;
            }
            let verdict = match state.ledger.get(&record.key) {
                Some(billed)
                    if billed.quantity == record.quantity
                        && billed.allocations == record.allocations =>
                {
                    RecordVerdict::Success {
                        metering_record_id: billed.metering_record_id.clone(),
                    }
                }
                Some(billed) => RecordVerdict::DuplicateRecord {
                    metering_record_id: Some(billed.metering_record_id.clone()),
                },
                None => {
                    state.issued_ids += 1;
                    let id = format!("mr-{:08}", state.issued_ids);
                    state.ledger.insert(
                        record.key.clone(),
                        LedgerEntry {
                            quantity: record.quantity,
                            allocations: record.allocations.clone(),
                            product_code: record.product_code.clone(),
                            metering_record_id: id.clone(),
                        },
                    );
                    RecordVerdict::Success {
                        metering_record_id: id,
                    }
                }
            };
            verdicts.push(verdict);
        }
        Ok(verdicts)
    }
}

/// [`CustomerResolver`] from a token -> result map; an unknown token is
/// [`ResolveError::InvalidToken`], as the service answers.
#[derive(Debug, Clone, Default)]
pub struct MemoryCustomerResolver {
    answers: Arc<Mutex<HashMap<String, Result<ResolvedCustomer, ResolveError>>>>,
    calls: Arc<Mutex<usize>>,
}

impl MemoryCustomerResolver {
    /// A resolver that knows no token.
    pub fn new() -> Self {
        Self::default()
    }

    /// Answers `token` with `answer` from now on.
    pub fn insert(&self, token: &str, answer: Result<ResolvedCustomer, ResolveError>) {
        lock(&self.answers).insert(token.to_string(), answer);
    }

    /// Number of `resolve` calls so far.
    pub fn calls(&self) -> usize {
        *lock(&self.calls)
    }
}

#[async_trait]
impl CustomerResolver for MemoryCustomerResolver {
    async fn resolve(&self, token: &str) -> Result<ResolvedCustomer, ResolveError> {
        *lock(&self.calls) += 1;
        lock(&self.answers)
            .get(token)
            .cloned()
            .unwrap_or(Err(ResolveError::InvalidToken))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::model::{AgreementStatus, Tag};

    const LICENSE: &str = "arn:aws:license-manager::123456789012:license:l-0123456789abcdef";
    const ACCOUNT: &str = "111122223333";

    fn t(s: &str) -> Instant {
        parse_usage_timestamp(s).unwrap()
    }

    fn hour(s: &str) -> HourBucket {
        s.parse().unwrap()
    }

    fn group(dimension: &str, h: &str) -> GroupKey {
        GroupKey {
            license_arn: LICENSE.into(),
            customer_aws_account_id: ACCOUNT.into(),
            dimension: dimension.into(),
            hour: hour(h),
        }
    }

    fn record(key: GroupKey, quantity: i64, version: u64) -> AggregatedRecord {
        AggregatedRecord {
            key,
            product_code: "prod".into(),
            quantity,
            allocations: None,
            status: AggregatedStatus::Pending,
            status_reason: None,
            metering_record_id: None,
            attempt_count: 0,
            version,
            in_flight_until: None,
            claim_id: None,
            sent_quantity: None,
            folding: false,
        }
    }

    fn new_row(event_id: &str, ts: &str, quantity: i64) -> NewUsageRow {
        NewUsageRow {
            license_arn: LICENSE.into(),
            customer_aws_account_id: ACCOUNT.into(),
            dimension: "requests".into(),
            timestamp: t(ts),
            quantity,
            allocations: None,
            product_code: None,
            event_id: event_id.into(),
        }
    }

    fn commit(
        rec: AggregatedRecord,
        expected: Option<u64>,
        rows: &[&RawUsageRow],
        now: &str,
    ) -> AggregationCommit {
        AggregationCommit {
            record: rec,
            expected_version: expected,
            claimed_rows: rows
                .iter()
                .map(|r| (r.license_arn.clone(), r.sort_key.clone()))
                .collect(),
            now: t(now),
        }
    }

    #[tokio::test]
    async fn put_row_writes_dynamodb_shapes_and_is_idempotent_on_the_event_id() {
        let store = MemoryUsageStore::new();
        let now = t("2026-11-30T10:20:00Z");
        let mut row = new_row("evt-1", "2026-11-30T10:15:42Z", 42);
        row.allocations = Some(vec![Allocation {
            quantity: 42,
            tags: vec![Tag {
                key: "team".into(),
                value: "a".into(),
            }],
        }]);
        row.product_code = Some("prod".into());
        assert_eq!(store.put_row(&row, now).await.unwrap(), PutOutcome::Created);
        let sort_key = "111122223333#requests#2026-11-30T10:15:42Z#evt-1";
        let stored = store.get_row(LICENSE, sort_key).await.unwrap().unwrap();
        let a = &stored.attrs;
        assert_eq!(a["customerAWSAccountId"], Attr::S(ACCOUNT.into()));
        assert_eq!(a["dimension"], Attr::S("requests".into()));
        assert_eq!(a["timestamp"], Attr::S("2026-11-30T10:15:42Z".into()));
        assert_eq!(a["quantity"], Attr::N("42".into()));
        assert_eq!(a["meteringPending"], Attr::S("2026-11-30T10".into()));
        assert_eq!(a["productCode"], Attr::S("prod".into()));
        assert_eq!(a["createdAt"], Attr::S("2026-11-30T10:20:00Z".into()));
        let Attr::L(allocations) = &a["usageAllocations"] else {
            panic!("usageAllocations is not a list")
        };
        let Attr::M(first) = &allocations[0] else {
            panic!("allocation is not a map")
        };
        assert_eq!(first["allocatedUsageQuantity"], Attr::N("42".into()));
        assert!(!a.contains_key("meteringStatus"));

        // A retry with the same event id changes nothing; a new id at the same second is kept.
        let mut retry = row.clone();
        retry.quantity = 7;
        assert_eq!(
            store
                .put_row(&retry, t("2026-11-30T10:21:00Z"))
                .await
                .unwrap(),
            PutOutcome::AlreadyExists
        );
        assert_eq!(
            store.get_row(LICENSE, sort_key).await.unwrap().unwrap(),
            stored
        );
        let same_second = new_row("evt-2", "2026-11-30T10:15:42Z", 1);
        assert_eq!(
            store.put_row(&same_second, now).await.unwrap(),
            PutOutcome::Created
        );
        // Two rows, each with its event's idempotency marker (`event#<eventId>`).
        assert_eq!(store.tables().raw_rows().len(), 4);
    }

    #[tokio::test]
    async fn pending_index_pages_and_follows_the_cursor() {
        let tables = MemoryTables::with_page_size(2);
        let store = tables.usage_store();
        for (i, minute) in ["00", "10", "20", "30", "40"].iter().enumerate() {
            let row = new_row(&format!("e{i}"), &format!("2026-11-30T10:{minute}:00Z"), 1);
            store
                .put_row(&row, t("2026-11-30T11:00:00Z"))
                .await
                .unwrap();
        }
        // Another hour, a finalized row and a non-string marker stay out of the index.
        store
            .put_row(
                &new_row("other-hour", "2026-11-30T11:00:00Z", 1),
                t("2026-11-30T11:00:00Z"),
            )
            .await
            .unwrap();
        let mut odd = reference_row(LICENSE, ACCOUNT, "requests", "2026-11-30T10:50:00Z", 1);
        odd.attrs
            .insert("meteringPending".into(), Attr::N("2026113010".into()));
        tables.insert_raw_row(odd);

        let mut seen = Vec::new();
        let mut cursor = None;
        let mut pages = 0;
        loop {
            let page = store
                .pending_page(hour("2026-11-30T10"), cursor)
                .await
                .unwrap();
            pages += 1;
            assert!(page.items.len() <= 2);
            seen.extend(page.items);
            cursor = page.next;
            if cursor.is_none() {
                break;
            }
        }
        assert_eq!(seen.len(), 5);
        assert_eq!(pages, 3);
        assert!(
            seen.iter()
                .all(|r| r.customer_aws_account_id.as_deref() == Some(ACCOUNT))
        );
        assert!(
            seen.iter()
                .all(|r| r.dimension.as_deref() == Some("requests"))
        );
        let keys: Vec<_> = seen.iter().map(|r| r.sort_key.clone()).collect();
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(keys, sorted);

        // A full last page carries a cursor to an empty page, as DynamoDB does.
        let tables = MemoryTables::with_page_size(5);
        let exact = tables.usage_store();
        for i in 0..5 {
            exact
                .put_row(
                    &new_row(&format!("x{i}"), "2026-11-30T10:00:00Z", 1),
                    t("2026-11-30T11:00:00Z"),
                )
                .await
                .unwrap();
        }
        let first = exact
            .pending_page(hour("2026-11-30T10"), None)
            .await
            .unwrap();
        assert_eq!(first.items.len(), 5);
        let last = exact
            .pending_page(hour("2026-11-30T10"), first.next)
            .await
            .unwrap();
        assert_eq!(
            last,
            Page {
                items: vec![],
                malformed: vec![],
                next: None
            }
        );

        let bad = exact
            .pending_page(hour("2026-11-30T10"), Some("not a cursor".into()))
            .await;
        assert!(matches!(bad, Err(PortError::Failed { .. })));
    }

    #[tokio::test]
    async fn group_rows_select_the_sort_key_range_in_any_status() {
        let tables = MemoryTables::new();
        let store = tables.usage_store();
        tables.insert_raw_row(reference_row(
            LICENSE,
            ACCOUNT,
            "requests",
            "2026-11-30T10:00:00",
            1,
        ));
        tables.insert_raw_row(reference_row(
            LICENSE,
            ACCOUNT,
            "requests",
            "2026-11-30T10:59:59Z",
            2,
        ));
        tables.insert_raw_row(reference_row(
            LICENSE,
            ACCOUNT,
            "requests",
            "2026-11-30T11:00:00Z",
            3,
        ));
        tables.insert_raw_row(reference_row(
            LICENSE,
            ACCOUNT,
            "requestsX",
            "2026-11-30T10:30:00Z",
            4,
        ));
        tables.insert_raw_row(reference_row(
            LICENSE,
            "999988887777",
            "requests",
            "2026-11-30T10:30:00Z",
            5,
        ));
        tables.insert_raw_row(reference_row(
            "arn:other",
            ACCOUNT,
            "requests",
            "2026-11-30T10:30:00Z",
            6,
        ));
        store
            .finalize_row(
                LICENSE,
                "111122223333#requests#2026-11-30T10:00:00",
                RowClaim::Uncounted,
                RawStatus::Aggregated,
                None,
                t("2026-11-30T12:00:00Z"),
            )
            .await
            .unwrap();
        let rows = store
            .group_rows(&group("requests", "2026-11-30T10"))
            .await
            .unwrap();
        let quantities: Vec<_> = rows.iter().map(|r| r.attrs["quantity"].clone()).collect();
        assert_eq!(quantities, vec![Attr::N("1".into()), Attr::N("2".into())]);
    }

    #[tokio::test]
    async fn finalize_row_applies_once_and_only_to_pending_rows() {
        let tables = MemoryTables::new();
        let store = tables.usage_store();
        let row = reference_row(LICENSE, ACCOUNT, "requests", "2026-11-30T10:00:00Z", 1);
        tables.insert_raw_row(row.clone());
        let first = store
            .finalize_row(
                LICENSE,
                &row.sort_key,
                RowClaim::Uncounted,
                RawStatus::RejectedClientSide,
                Some(ReasonCode::MalformedTimestamp),
                t("2026-11-30T12:00:00Z"),
            )
            .await
            .unwrap();
        assert!(first);
        let stored = tables.raw_row(LICENSE, &row.sort_key).unwrap();
        assert!(!stored.attrs.contains_key("meteringPending"));
        assert_eq!(
            stored.attrs["meteringStatus"],
            Attr::S("RejectedClientSide".into())
        );
        assert_eq!(
            stored.attrs["meteringStatusReason"],
            Attr::S("MalformedTimestamp".into())
        );
        assert_eq!(
            stored.attrs["updatedAt"],
            Attr::S("2026-11-30T12:00:00Z".into())
        );
        // A second finalize (any status) changes nothing.
        let second = store
            .finalize_row(
                LICENSE,
                &row.sort_key,
                RowClaim::Uncounted,
                RawStatus::Aggregated,
                None,
                t("2026-11-30T13:00:00Z"),
            )
            .await
            .unwrap();
        assert!(!second);
        assert_eq!(tables.raw_row(LICENSE, &row.sort_key).unwrap(), stored);
        // A missing row is not created.
        assert!(
            !store
                .finalize_row(
                    LICENSE,
                    "nope",
                    RowClaim::Uncounted,
                    RawStatus::Aggregated,
                    None,
                    t("2026-11-30T13:00:00Z")
                )
                .await
                .unwrap()
        );
        assert_eq!(tables.raw_rows().len(), 1);
    }

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
            claimed.attrs["meteringPending"],
            Attr::S("2026-11-30T10".into())
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
            store.claim(&key, 2, &first).await.unwrap().is_none(),
            "wrong version"
        );
        let grant = store.claim(&key, 3, &first).await.unwrap().unwrap();
        assert!(!grant.previously_sent, "never sent before");
        assert!(
            store
                .claim(
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
        let grant = store.claim(&key, 3, &second).await.unwrap().unwrap();
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
            store
                .claim(&key, 3, &third)
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
            store
                .claim(
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
            !store
                .claim(&key, 1, &c1)
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
        assert!(store.claim(&key, 1, &c2).await.unwrap().is_some());
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
        assert!(store.claim(&key, 1, &c1).await.unwrap().is_none());
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

    #[tokio::test]
    async fn injected_store_failures_fire_once() {
        let tables = MemoryTables::new();
        let store = tables.usage_store();
        let error = PortError::Transient {
            operation: "query",
            message: "throttled".into(),
        };
        tables.fail_next(StoreOp::UsagePendingPage, error.clone());
        assert_eq!(
            store.pending_page(hour("2026-11-30T10"), None).await,
            Err(error)
        );
        assert!(
            store
                .pending_page(hour("2026-11-30T10"), None)
                .await
                .is_ok()
        );
    }

    #[tokio::test]
    async fn subscriber_store_versions_lifecycle_and_never_touches_regions() {
        let store = MemorySubscriberStore::new();
        let now = t("2026-11-30T10:00:00Z");
        // Registration first: a row with regions and no lifecycle, version 0.
        store
            .add_registered_region(LICENSE, ACCOUNT, "prod", "eu-west-1", now)
            .await
            .unwrap();
        store
            .add_registered_region(LICENSE, ACCOUNT, "other", "eu-west-1", now)
            .await
            .unwrap();
        store
            .add_registered_region(LICENSE, ACCOUNT, "prod", "ap-south-1", now)
            .await
            .unwrap();
        let registered = store.get(LICENSE, ACCOUNT).await.unwrap().unwrap();
        assert_eq!(
            registered.registered_regions,
            vec!["ap-south-1", "eu-west-1"]
        );
        assert_eq!(registered.product_code.as_deref(), Some("prod"));
        assert_eq!(registered.version, 0);
        assert!(
            store
                .add_registered_region(LICENSE, ACCOUNT, "prod", "", now)
                .await
                .is_err()
        );

        // A lifecycle write computed before the registration (version 0) still lands.
        let mut active = Subscriber::new(LICENSE, ACCOUNT);
        active.agreement_id = Some("agmt-1".into());
        active.agreement_status = Some(AgreementStatus::Active);
        active.subscription_status = Some(SubscriptionStatus::Active);
        active.registered_regions = vec!["must-not-be-written".into()];
        assert!(store.put_lifecycle(&active, now).await.unwrap());
        let stored = store.get(LICENSE, ACCOUNT).await.unwrap().unwrap();
        assert_eq!(stored.version, 1);
        assert_eq!(stored.registered_regions, vec!["ap-south-1", "eu-west-1"]);
        assert_eq!(
            stored.product_code.as_deref(),
            Some("prod"),
            "None keeps identity"
        );
        // A stale version conflicts.
        assert!(!store.put_lifecycle(&active, now).await.unwrap());
        // Registration after the lifecycle never touches lifecycle fields.
        store
            .add_registered_region(LICENSE, ACCOUNT, "prod", "us-east-1", now)
            .await
            .unwrap();
        let after = store.get(LICENSE, ACCOUNT).await.unwrap().unwrap();
        assert_eq!(after.subscription_status, Some(SubscriptionStatus::Active));
        assert_eq!(after.version, 1);

        assert_eq!(store.by_agreement("agmt-1").await.unwrap().len(), 1);
        assert!(store.by_agreement("agmt-2").await.unwrap().is_empty());
        assert_eq!(store.by_license(LICENSE).await.unwrap().len(), 1);
        assert!(store.deprovisioning().await.unwrap().is_empty());

        let mut deprovisioning = after.clone();
        deprovisioning.subscription_status = Some(SubscriptionStatus::Deprovisioning);
        deprovisioning.deprovisioning_expiry = Some(t("2026-11-30T11:00:00Z"));
        assert!(store.put_lifecycle(&deprovisioning, now).await.unwrap());
        let mut other =
            Subscriber::new("arn:aws:license-manager::123456789012:license:l-2", ACCOUNT);
        other.subscription_status = Some(SubscriptionStatus::Deprovisioning);
        other.deprovisioning_expiry = Some(t("2026-11-30T10:30:00Z"));
        assert!(store.put_lifecycle(&other, now).await.unwrap());
        let listed = store.deprovisioning().await.unwrap();
        assert_eq!(listed.len(), 2);
        assert_eq!(
            listed[0].deprovisioning_expiry,
            Some(t("2026-11-30T10:30:00Z"))
        );
    }

    #[tokio::test]
    async fn profile_upserts_merge_fields() {
        let store = MemoryProfileStore::new();
        let mut profile = CustomerProfile {
            license_arn: LICENSE.into(),
            customer_aws_account_id: ACCOUNT.into(),
            product_code: "prod".into(),
            fields: BTreeMap::new(),
        };
        store
            .upsert(&profile, t("2026-11-30T10:00:00Z"))
            .await
            .unwrap();
        assert_eq!(store.get(LICENSE, ACCOUNT).unwrap().fields.len(), 0);
        profile.fields.insert("company".into(), "Acme".into());
        store
            .upsert(&profile, t("2026-11-30T10:01:00Z"))
            .await
            .unwrap();
        profile.fields = BTreeMap::from([("email".to_string(), "a@example.com".to_string())]);
        store
            .upsert(&profile, t("2026-11-30T10:02:00Z"))
            .await
            .unwrap();
        let stored = store.get(LICENSE, ACCOUNT).unwrap();
        assert_eq!(stored.fields.len(), 2);
        store.fail_next(PortError::Failed {
            operation: "put",
            message: "denied".into(),
        });
        assert!(
            store
                .upsert(&profile, t("2026-11-30T10:03:00Z"))
                .await
                .is_err()
        );
        assert_eq!(store.all().len(), 1);
    }

    #[tokio::test]
    async fn work_queue_records_refuses_chosen_messages_and_drains() {
        let queue = MemoryWorkQueue::new();
        let keep = WorkMessage::Aggregate {
            group: group("a", "2026-11-30T10"),
            flush: false,
        };
        let refuse = WorkMessage::Aggregate {
            group: group("b", "2026-11-30T10"),
            flush: true,
        };
        queue.fail_where(
            |m| matches!(m, WorkMessage::Aggregate { group, .. } if group.dimension == "b"),
        );
        let report = queue
            .send(&[keep.clone(), refuse.clone(), keep.clone()])
            .await
            .unwrap();
        assert_eq!(report.failed, vec![1]);
        assert_eq!(queue.len(), 2);
        queue.clear_failures();
        queue.fail_next_send(PortError::Transient {
            operation: "send",
            message: "down".into(),
        });
        assert!(queue.send(std::slice::from_ref(&refuse)).await.is_err());
        assert_eq!(
            queue.send(std::slice::from_ref(&refuse)).await.unwrap(),
            SendReport::default()
        );
        assert_eq!(queue.send_calls(), 3);
        assert_eq!(queue.drain(), vec![keep.clone(), keep, refuse]);
        assert!(queue.is_empty());

        let small = MemoryWorkQueue::new().with_max_message_bytes(64);
        let big = WorkMessage::Cleanup {
            group: group("a", "2026-11-30T10"),
            aggregated: vec!["x".repeat(100)],
            rejected: vec![],
        };
        assert_eq!(small.send(&[big]).await.unwrap().failed, vec![0]);
    }

    #[test]
    fn metrics_count_by_name_and_dimensions() {
        let metrics = RecordingMetrics::new();
        metrics.count(
            "UsageRecordRejected",
            &[("Reason", "MalformedTimestamp")],
            1,
        );
        metrics.count(
            "UsageRecordRejected",
            &[("Reason", "MalformedTimestamp")],
            2,
        );
        metrics.count("UsageRecordRejected", &[("Reason", "TooManyTags")], 1);
        metrics.count("X", &[("b", "2"), ("a", "1")], 1);
        assert_eq!(
            metrics.get("UsageRecordRejected", &[("Reason", "MalformedTimestamp")]),
            3
        );
        assert_eq!(metrics.total("UsageRecordRejected"), 4);
        assert_eq!(metrics.get("X", &[("a", "1"), ("b", "2")]), 1);
        assert_eq!(metrics.get("Missing", &[]), 0);
    }

    #[tokio::test]
    async fn manual_clock_sleep_advances_and_records() {
        let clock = ManualClock::new(t("2026-11-30T10:00:00Z"));
        clock.sleep(Duration::from_millis(1500)).await;
        clock.sleep(Duration::from_secs(2)).await;
        clock.advance(Duration::from_secs(60));
        assert_eq!(
            clock.sleeps(),
            vec![Duration::from_millis(1500), Duration::from_secs(2)]
        );
        assert_eq!(clock.total_slept(), Duration::from_millis(3500));
        assert_eq!(
            clock.now(),
            t("2026-11-30T10:01:03Z") + chrono::Duration::milliseconds(500)
        );
        clock.set(t("2026-12-01T00:00:00Z"));
        assert_eq!(clock.now(), t("2026-12-01T00:00:00Z"));
    }

    #[tokio::test]
    async fn metering_api_is_first_write_wins_with_entitlements_and_injected_errors() {
        let api = MemoryMeteringApi::new();
        api.entitle(LICENSE, ACCOUNT);
        let rec = |dimension: &str, quantity: i64| MeteringRecord {
            key: group(dimension, "2026-11-30T10"),
            product_code: "prod".into(),
            quantity,
            allocations: None,
        };
        let mut stranger = rec("requests", 1);
        stranger.key.customer_aws_account_id = "999988887777".into();
        let verdicts = api
            .batch_meter_usage(&[rec("requests", 5), stranger])
            .await
            .unwrap();
        let RecordVerdict::Success { metering_record_id } = &verdicts[0] else {
            panic!("{verdicts:?}")
        };
        assert_eq!(verdicts[1], RecordVerdict::CustomerNotSubscribed);
        // An identical retry succeeds with the same id; a different quantity is a duplicate.
        let again = api
            .batch_meter_usage(&[rec("requests", 5), rec("requests", 6)])
            .await
            .unwrap();
        assert_eq!(
            again[0],
            RecordVerdict::Success {
                metering_record_id: metering_record_id.clone()
            }
        );
        assert_eq!(
            again[1],
            RecordVerdict::DuplicateRecord {
                metering_record_id: Some(metering_record_id.clone())
            }
        );
        assert_eq!(
            api.ledger()[&group("requests", "2026-11-30T10")].quantity,
            5
        );

        api.reject_dimension("bogus", "InvalidUsageDimensionException");
        let err = api
            .batch_meter_usage(&[rec("ok", 1), rec("bogus", 1)])
            .await
            .unwrap_err();
        assert!(
            matches!(err, MeteringError::Validation { ref name, .. } if name == "InvalidUsageDimensionException")
        );
        assert!(
            !api.ledger().contains_key(&group("ok", "2026-11-30T10")),
            "nothing billed from a failed batch"
        );
        api.fail_next(MeteringError::Throttled("slow down".into()));
        assert_eq!(
            api.batch_meter_usage(&[rec("ok", 1)]).await,
            Err(MeteringError::Throttled("slow down".into()))
        );
        let too_many: Vec<_> = (0..26).map(|i| rec(&format!("d{i}"), 1)).collect();
        assert!(matches!(
            api.batch_meter_usage(&too_many).await,
            Err(MeteringError::Validation { .. })
        ));
        assert_eq!(api.calls().len(), 5);
        api.revoke(LICENSE, ACCOUNT);
        assert_eq!(
            api.batch_meter_usage(&[rec("ok", 1)]).await.unwrap(),
            vec![RecordVerdict::CustomerNotSubscribed]
        );
    }

    #[tokio::test]
    async fn customer_resolver_answers_from_its_map() {
        let resolver = MemoryCustomerResolver::new();
        let customer = ResolvedCustomer {
            license_arn: LICENSE.into(),
            customer_aws_account_id: ACCOUNT.into(),
            product_code: "prod".into(),
        };
        resolver.insert("good", Ok(customer.clone()));
        resolver.insert("old", Err(ResolveError::ExpiredToken));
        assert_eq!(resolver.resolve("good").await, Ok(customer));
        assert_eq!(
            resolver.resolve("old").await,
            Err(ResolveError::ExpiredToken)
        );
        assert_eq!(
            resolver.resolve("unknown").await,
            Err(ResolveError::InvalidToken)
        );
        assert_eq!(resolver.calls(), 3);
    }
}

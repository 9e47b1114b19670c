//! The usage/aggregated store contract: one set of assertions that every
//! [`UsageStore`] + [`AggregatedStore`] pair must pass, run against the in-memory stores
//! (this crate's tests) and the DynamoDB adapters on moto (`crates/aws/tests`), so the
//! fakes the use cases and the simulation run on behave like DynamoDB where it matters:
//! conditions evaluated with the write, all-or-nothing transactions, pagination, and
//! DynamoDB's item and transaction limits.
//!
//! A backend implements [`Backend`]; [`store_contract_tests!`](crate::store_contract_tests)
//! expands to one `#[tokio::test]` per case, so both backends run the same list.
//! Where moto does not do what DynamoDB documents, the case says so and asserts
//! DynamoDB's behaviour only where [`Backend::enforces_transaction_bytes`] says the
//! backend claims it.

// A test suite: a failed expectation is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::collections::{BTreeMap, BTreeSet};

use async_trait::async_trait;

use super::{MemoryTables, claim_read, reference_row};
use crate::items::size::{MAX_ITEM_BYTES, MAX_TRANSACTION_BYTES};
use crate::items::{
    ingestion_item, ingestion_marker_item, ingestion_marker_sort_key, ingestion_sort_key,
};
use crate::model::{
    AggregatedRecord, AggregatedStatus, Allocation, Attr, GroupKey, RawStatus, RawUsageRow,
    ReasonCode, Tag, attr,
};
use crate::ports::{
    AggregatedStore, Claim, ClaimRequest, CommitOutcome, Cursor, IngestOutcome, MAX_BATCH_WRITES,
    MAX_ROWS_PER_COMMIT, NewUsageRow, OperatorStore, OutcomeWrite, Page, PortError, PutOutcome,
    RowClaim, RowFinal, SubmissionUpdate, UsageStore,
};
use crate::time::{HourBucket, Instant, parse_usage_timestamp};

/// Page size every backend is built with (pending pages of at most this many items).
pub const PAGE_SIZE: usize = 2;

/// A license of the contract's rows.
pub const LICENSE: &str =
    "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef";
/// The buyer account of the contract's rows.
pub const ACCOUNT: &str = "111122223333";

/// The stores under test, on fresh empty tables, paging by [`PAGE_SIZE`].
#[async_trait]
pub trait Backend: Send + Sync {
    /// The usage store.
    fn usage(&self) -> &dyn UsageStore;
    /// The aggregated store, committing into the usage store's table.
    fn aggregated(&self) -> &dyn AggregatedStore;
    /// The operator's view of the same two tables.
    fn operator(&self) -> &dyn OperatorStore;
    /// Writes a usage-table item exactly as given (a seller's writer; no checks).
    async fn insert_raw_row(&self, row: &RawUsageRow);
    /// The stored `expiresAt` of an aggregated record (read raw, not through the port).
    async fn record_expiry(&self, key: &GroupKey) -> Option<Instant>;
    /// Sets an aggregated record's `expiresAt` as a seller's writer could.
    async fn set_record_expiry(&self, key: &GroupKey, at: Instant);
    /// Whether it refuses a transaction whose items add up to more than 4 MB, as
    /// DynamoDB does. moto 5.2 checks the 100-item count but not the size.
    fn enforces_transaction_bytes(&self) -> bool;
}

/// The in-memory stores as a [`Backend`].
#[derive(Debug, Clone)]
pub struct MemoryBackend {
    tables: MemoryTables,
    usage: super::MemoryUsageStore,
    aggregated: super::MemoryAggregatedStore,
    operator: super::MemoryOperatorStore,
}

impl MemoryBackend {
    /// Fresh tables paging by [`PAGE_SIZE`].
    pub fn new() -> Self {
        let tables = MemoryTables::with_page_size(PAGE_SIZE);
        MemoryBackend {
            usage: tables.usage_store(),
            aggregated: tables.aggregated_store(),
            operator: tables.operator_store(),
            tables,
        }
    }
}

impl Default for MemoryBackend {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl Backend for MemoryBackend {
    fn usage(&self) -> &dyn UsageStore {
        &self.usage
    }
    fn aggregated(&self) -> &dyn AggregatedStore {
        &self.aggregated
    }
    fn operator(&self) -> &dyn OperatorStore {
        &self.operator
    }
    async fn insert_raw_row(&self, row: &RawUsageRow) {
        self.tables.insert_raw_row(row.clone());
    }
    async fn record_expiry(&self, key: &GroupKey) -> Option<Instant> {
        self.tables.aggregated_expiry(key)
    }
    async fn set_record_expiry(&self, key: &GroupKey, at: Instant) {
        self.tables.set_aggregated_expiry(key, Some(at));
    }
    fn enforces_transaction_bytes(&self) -> bool {
        true
    }
}

/// Expands to one `#[tokio::test]` per contract case, each building its backend with
/// `$backend` (an expression, may `.await`; a fresh backend per test).
#[macro_export]
macro_rules! store_contract_tests {
    ($backend:expr) => {
        $crate::store_contract_tests!(@cases $backend;
            put_row_writes_the_shared_shape_once_per_event_id,
            put_row_refuses_an_ambiguous_sort_key,
            put_row_reports_an_event_id_reused_with_other_usage,
            commit_creates_then_folds_under_the_version_and_claims_rows,
            commit_is_all_or_nothing_when_a_row_condition_fails,
            commit_folds_only_into_a_record_no_claim_ever_held,
            claim_and_record_hold_to_the_claim_id,
            claim_all_takes_only_records_exactly_as_read_and_answers_each,
            a_claim_pins_the_quantity_it_sends_and_holds_only_while_it_is_stored,
            finalize_row_requires_the_row_claim,
            finalize_row_makes_a_pending_row_final_once,
            pending_pages_cover_every_pending_item_once,
            a_commit_holds_at_most_100_items,
            an_item_over_400_kb_is_refused,
            a_transaction_over_4_mb_is_refused,
            operator_reads_both_tables_and_replays_only_an_unchanged_error,
            expires_at_only_on_final_writes_and_removed_by_pending_ones,
            a_final_write_retried_after_it_applied_answers_true_and_only_to_itself,
            possibly_billed_is_written_by_outcomes_and_never_cleared,
        );
    };
    (@cases $backend:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $case() {
                let backend = $backend;
                $crate::memory::contract::$case(&backend).await;
            }
        )*
    };
}

// ------------------------------------------------------------------ fixtures

fn t(s: &str) -> Instant {
    parse_usage_timestamp(s).expect("a fixture instant")
}

fn hour(s: &str) -> HourBucket {
    s.parse().expect("a fixture hour")
}

fn group(h: &str) -> GroupKey {
    GroupKey {
        license_arn: LICENSE.into(),
        customer_aws_account_id: ACCOUNT.into(),
        dimension: "requests".into(),
        hour: hour(h),
    }
}

fn new_row(event_id: &str, ts: &str, quantity: i64) -> NewUsageRow {
    super::fixtures::usage_row(LICENSE, ACCOUNT, "requests", t(ts), quantity, event_id)
}

fn record(key: GroupKey, quantity: i64, version: u64) -> AggregatedRecord {
    super::fixtures::pending_record(key, "prodcode", quantity, version)
}

use super::fixtures::commit;

fn claim(id: &str, now: &str, until: &str) -> Claim {
    Claim {
        id: id.into(),
        now: t(now),
        until: t(until),
    }
}

/// A pending raw row at `ts` (reference writer's shape), written raw.
async fn seed(b: &dyn Backend, ts: &str, quantity: i64) -> RawUsageRow {
    let row = reference_row(LICENSE, ACCOUNT, "requests", ts, quantity);
    b.insert_raw_row(&row).await;
    row
}

/// Every page of a paginated read, following cursors to the end.
async fn all_pages<T, F, Fut>(mut read: F) -> Vec<T>
where
    F: FnMut(Option<Cursor>) -> Fut,
    Fut: std::future::Future<Output = Result<Page<T>, PortError>>,
{
    let mut items = Vec::new();
    let mut cursor = None;
    for _ in 0..100 {
        let page = read(cursor).await.expect("a page");
        assert!(
            page.items.len() <= PAGE_SIZE,
            "a page holds at most {PAGE_SIZE} items, got {}",
            page.items.len()
        );
        items.extend(page.items);
        match page.next {
            Some(next) => cursor = Some(next),
            None => return items,
        }
    }
    panic!("pagination did not end after 100 pages");
}

fn assert_failed(result: Result<impl std::fmt::Debug, PortError>, what: &str) -> String {
    match result {
        Err(PortError::Failed { message, .. }) => message,
        other => panic!("{what}: expected PortError::Failed, got {other:?}"),
    }
}

/// A tag value of `bytes` bytes, to grow an item.
fn big_allocations(bytes: usize) -> Vec<Allocation> {
    vec![Allocation {
        quantity: 1,
        tags: vec![Tag {
            key: "blob".into(),
            value: "x".repeat(bytes),
        }],
    }]
}

// ------------------------------------------------------------------ cases

/// `put_row` writes the row and its event marker in the domain's shape
/// ([`ingestion_item`], [`ingestion_marker_item`]); the same event id again with the
/// same usage, at a defaulted later "now", writes nothing.
pub async fn put_row_writes_the_shared_shape_once_per_event_id(b: &dyn Backend) {
    let now = t("2026-11-30T10:20:00Z");
    let mut row = new_row("evt-1", "2026-11-30T10:15:42Z", 42);
    row.allocations = Some(vec![Allocation {
        quantity: 42,
        tags: vec![Tag {
            key: "team".into(),
            value: "a".into(),
        }],
    }]);
    row.product_code = Some("prodcode".into());
    assert_eq!(
        b.usage().put_row(&row, now).await.expect("put_row"),
        IngestOutcome::Created
    );
    let expected = ingestion_item(&row, now);
    let stored = b
        .usage()
        .get_row(LICENSE, &expected.sort_key)
        .await
        .expect("get_row")
        .expect("the row");
    assert_eq!(stored, expected);
    let marker = b
        .usage()
        .get_row(LICENSE, &ingestion_marker_sort_key("evt-1"))
        .await
        .expect("get_row")
        .expect("the marker");
    assert_eq!(marker, ingestion_marker_item(&row, now));

    // The retry of a call that left the instant to "now": a later "now".
    let mut retry = row.clone();
    retry.timestamp = t("2026-11-30T10:16:00Z");
    retry.timestamp_defaulted = true;
    assert_eq!(
        b.usage()
            .put_row(&retry, t("2026-11-30T10:21:00Z"))
            .await
            .expect("put_row retry"),
        IngestOutcome::Duplicate
    );
    let rows = b.usage().group_rows(&group("2026-11-30T10")).await.unwrap();
    assert_eq!(rows, vec![expected], "one row, and the marker is not usage");
}

/// An event id written before answers `Duplicate` only for the same usage; other usage
/// under it (another quantity, tags, or a given instant) is a `Conflict` carrying what
/// the first write stored and what the call carries, and writes nothing. A marker
/// written before markers kept a digest is compared through the row it names.
pub async fn put_row_reports_an_event_id_reused_with_other_usage(b: &dyn Backend) {
    let now = t("2026-11-30T10:20:00Z");
    let mut first = new_row("evt-1", "2026-11-30T10:15:00Z", 3);
    first.allocations = Some(vec![Allocation {
        quantity: 3,
        tags: vec![Tag {
            key: "team".into(),
            value: "a".into(),
        }],
    }]);
    assert_eq!(
        b.usage().put_row(&first, now).await.unwrap(),
        IngestOutcome::Created
    );
    assert_eq!(
        b.usage().put_row(&first, now).await.unwrap(),
        IngestOutcome::Duplicate
    );
    let conflict = |outcome: IngestOutcome| match outcome {
        IngestOutcome::Conflict(c) => c,
        other => panic!("expected a conflict, got {other:?}"),
    };
    let mut more = first.clone();
    more.quantity = 4;
    more.allocations = Some(vec![Allocation {
        quantity: 4,
        tags: vec![Tag {
            key: "team".into(),
            value: "a".into(),
        }],
    }]);
    let c = conflict(b.usage().put_row(&more, now).await.unwrap());
    assert_eq!(c.event_id, "evt-1");
    assert_eq!(c.recorded.as_ref().map(|r| r.quantity), Some(3));
    assert_eq!(c.this.quantity, 4);
    let mut later = first.clone();
    later.timestamp = t("2026-11-30T10:16:00Z");
    let c = conflict(b.usage().put_row(&later, now).await.unwrap());
    assert_eq!(
        c.recorded.as_ref().map(|r| r.timestamp),
        Some(t("2026-11-30T10:15:00Z"))
    );
    let rows = b.usage().group_rows(&group("2026-11-30T10")).await.unwrap();
    assert_eq!(rows.len(), 1, "nothing written by a conflict: {rows:?}");
    assert_eq!(rows[0].attrs[attr::QUANTITY], Attr::N("3".into()));

    // A marker as older versions wrote it (no digest): its row decides.
    let old = new_row("evt-old", "2026-11-30T10:10:00Z", 5);
    let mut marker = ingestion_marker_item(&old, now);
    marker.attrs.remove(crate::items::INGESTION_MARKER_DIGEST);
    b.insert_raw_row(&ingestion_item(&old, now)).await;
    b.insert_raw_row(&marker).await;
    assert_eq!(
        b.usage().put_row(&old, now).await.unwrap(),
        IngestOutcome::Duplicate
    );
    let mut changed = old.clone();
    changed.quantity = 6;
    let c = conflict(b.usage().put_row(&changed, now).await.unwrap());
    assert_eq!(c.recorded.as_ref().map(|r| r.quantity), Some(5));
}

/// A `#` in a sort-key part, or an empty event id, is refused before any write.
pub async fn put_row_refuses_an_ambiguous_sort_key(b: &dyn Backend) {
    let now = t("2026-11-30T10:20:00Z");
    let mut bad = new_row("evt-1", "2026-11-30T10:15:42Z", 1);
    bad.dimension = "re#quests".into();
    let message = assert_failed(b.usage().put_row(&bad, now).await, "a '#' in the dimension");
    assert!(message.contains("sort-key separator"), "{message}");
    let empty = new_row("", "2026-11-30T10:15:42Z", 1);
    assert_failed(b.usage().put_row(&empty, now).await, "an empty event id");
}

/// A create commit needs the record to be absent, a fold the stored version; each
/// claimed row must be pending and unclaimed, and gets `aggregatedInto`.
pub async fn commit_creates_then_folds_under_the_version_and_claims_rows(b: &dyn Backend) {
    let key = group("2026-11-30T10");
    let r1 = seed(b, "2026-11-30T10:00:00Z", 1).await;
    let r2 = seed(b, "2026-11-30T10:05:00Z", 2).await;
    let late = seed(b, "2026-11-30T10:50:00Z", 4).await;
    let agg = b.aggregated();

    let create = commit(
        record(key.clone(), 3, 1),
        None,
        &[&r1, &r2],
        "2026-11-30T11:00:00Z",
    );
    assert_eq!(agg.commit(&create).await.unwrap(), CommitOutcome::Committed);
    assert_eq!(agg.get(&key).await.unwrap(), Some(create.record.clone()));
    for row in [&r1, &r2] {
        let stored = b.usage().get_row(LICENSE, &row.sort_key).await.unwrap();
        assert_eq!(
            stored.and_then(|r| r.attrs.get(attr::AGGREGATED_INTO).cloned()),
            Some(Attr::S(key.aggregated_sort_key())),
            "claimed into the record"
        );
    }
    // Created twice: the record exists.
    let again = commit(
        record(key.clone(), 4, 1),
        None,
        &[&late],
        "2026-11-30T11:01:00Z",
    );
    assert_eq!(agg.commit(&again).await.unwrap(), CommitOutcome::Conflict);
    // A fold at a stale version.
    let stale = commit(
        record(key.clone(), 7, 2),
        Some(0),
        &[&late],
        "2026-11-30T11:01:00Z",
    );
    assert_eq!(agg.commit(&stale).await.unwrap(), CommitOutcome::Conflict);
    // A fold claiming a row already claimed.
    let twice = commit(
        record(key.clone(), 5, 2),
        Some(1),
        &[&r1],
        "2026-11-30T11:01:00Z",
    );
    assert_eq!(agg.commit(&twice).await.unwrap(), CommitOutcome::Conflict);
    // The fold at the stored version.
    let fold = commit(
        record(key.clone(), 7, 2),
        Some(1),
        &[&late],
        "2026-11-30T11:02:00Z",
    );
    assert_eq!(agg.commit(&fold).await.unwrap(), CommitOutcome::Committed);
    assert_eq!(agg.get(&key).await.unwrap(), Some(fold.record));
}

/// One failing row condition cancels the whole commit: no record, no row claimed.
pub async fn commit_is_all_or_nothing_when_a_row_condition_fails(b: &dyn Backend) {
    let key = group("2026-11-30T10");
    let healthy = seed(b, "2026-11-30T10:00:00Z", 1).await;
    let finalized = seed(b, "2026-11-30T10:01:00Z", 1).await;
    assert!(
        b.usage()
            .finalize_row(
                LICENSE,
                &finalized.sort_key,
                RowClaim::Uncounted,
                RowFinal::new(
                    RawStatus::RejectedClientSide,
                    Some(ReasonCode::NegativeQuantity)
                ),
                t("2026-11-30T10:30:00Z")
            )
            .await
            .unwrap()
    );
    let missing = reference_row(LICENSE, ACCOUNT, "requests", "2026-11-30T10:02:00Z", 1);
    for bad in [&finalized, &missing] {
        let c = commit(
            record(key.clone(), 2, 1),
            None,
            &[&healthy, bad],
            "2026-11-30T11:00:00Z",
        );
        assert_eq!(
            b.aggregated().commit(&c).await.unwrap(),
            CommitOutcome::Conflict
        );
        assert_eq!(b.aggregated().get(&key).await.unwrap(), None, "no record");
        let row = b
            .usage()
            .get_row(LICENSE, &healthy.sort_key)
            .await
            .unwrap()
            .unwrap();
        assert!(
            !row.attrs.contains_key(attr::AGGREGATED_INTO),
            "the healthy row is not claimed"
        );
    }
    // A commit naming one row twice is refused outright.
    let twice = commit(
        record(key, 2, 1),
        None,
        &[&healthy, &healthy],
        "2026-11-30T11:00:00Z",
    );
    assert_failed(b.aggregated().commit(&twice).await, "the same row twice");
}

/// A fold lands only in a record no submitter ever claimed (`inFlightUntil` and
/// `sentQuantity` absent); a record mid-fold (`aggregationInProgress`) cannot be claimed.
pub async fn commit_folds_only_into_a_record_no_claim_ever_held(b: &dyn Backend) {
    let agg = b.aggregated();
    let key = group("2026-11-30T10");
    let r1 = seed(b, "2026-11-30T10:00:00Z", 1).await;
    let late = seed(b, "2026-11-30T10:40:00Z", 1).await;
    let create = commit(
        record(key.clone(), 1, 1),
        None,
        &[&r1],
        "2026-11-30T11:00:00Z",
    );
    assert_eq!(agg.commit(&create).await.unwrap(), CommitOutcome::Committed);
    let held = claim("c1", "2026-11-30T11:05:00Z", "2026-11-30T11:10:00Z");
    assert!(claim_read(agg, &key, 1, &held).await.unwrap().is_some());
    let fold = commit(
        record(key.clone(), 2, 2),
        Some(1),
        &[&late],
        "2026-11-30T11:06:00Z",
    );
    assert_eq!(
        agg.commit(&fold).await.unwrap(),
        CommitOutcome::Conflict,
        "held by a claim"
    );
    // Released as "may have been billed": sentQuantity stays, still no fold.
    let ambiguous = SubmissionUpdate {
        status: AggregatedStatus::Pending,
        reason: Some("Timeout".into()),
        metering_record_id: None,
        possibly_sent: true,
        possibly_billed: true,
        expires_at: None,
        final_write_id: None,
    };
    assert!(
        agg.record(&key, Some("c1"), &ambiguous, t("2026-11-30T11:07:00Z"))
            .await
            .unwrap()
    );
    let stored = agg.get(&key).await.unwrap().unwrap();
    assert_eq!(
        (stored.sent_quantity, stored.in_flight_until),
        (Some(1), None)
    );
    let fold = commit(
        record(key.clone(), 2, 2),
        Some(1),
        &[&late],
        "2026-11-30T11:08:00Z",
    );
    assert_eq!(
        agg.commit(&fold).await.unwrap(),
        CommitOutcome::Conflict,
        "possibly sent"
    );

    // A record written mid-fold is not claimable until the fold clears the marker.
    let other = group("2026-11-30T12");
    let r3 = seed(b, "2026-11-30T12:00:00Z", 1).await;
    let mut folding = record(other.clone(), 1, 1);
    folding.folding = true;
    let c = commit(folding, None, &[&r3], "2026-11-30T13:00:00Z");
    assert_eq!(agg.commit(&c).await.unwrap(), CommitOutcome::Committed);
    let c2 = claim("c2", "2026-11-30T13:05:00Z", "2026-11-30T13:10:00Z");
    assert!(
        claim_read(agg, &other, 1, &c2).await.unwrap().is_none(),
        "mid-fold"
    );
}

/// A claim holds the record at its version until it expires; outcomes are written
/// only under the claim that holds it; `sentQuantity` is set by the claim and dropped
/// by a definite no-send.
pub async fn claim_and_record_hold_to_the_claim_id(b: &dyn Backend) {
    let agg = b.aggregated();
    let key = group("2026-11-30T10");
    let r1 = seed(b, "2026-11-30T10:00:00Z", 5).await;
    let create = commit(
        record(key.clone(), 5, 3),
        None,
        &[&r1],
        "2026-11-30T11:00:00Z",
    );
    assert_eq!(agg.commit(&create).await.unwrap(), CommitOutcome::Committed);

    let first = claim("c1", "2026-11-30T11:05:00Z", "2026-11-30T11:10:00Z");
    assert!(
        claim_read(agg, &key, 2, &first).await.unwrap().is_none(),
        "wrong version"
    );
    let grant = claim_read(agg, &key, 3, &first)
        .await
        .unwrap()
        .expect("claimed");
    assert!(!grant.previously_sent);
    let stored = agg.get(&key).await.unwrap().unwrap();
    assert_eq!(
        (
            stored.version,
            stored.attempt_count,
            stored.claim_id.as_deref(),
            stored.sent_quantity,
            stored.in_flight_until,
        ),
        (3, 1, Some("c1"), Some(5), Some(t("2026-11-30T11:10:00Z")))
    );
    let early = claim("c2", "2026-11-30T11:09:59Z", "2026-11-30T11:20:00Z");
    assert!(
        claim_read(agg, &key, 3, &early).await.unwrap().is_none(),
        "held"
    );

    let success = SubmissionUpdate {
        status: AggregatedStatus::Success,
        reason: None,
        metering_record_id: Some("mr-1".into()),
        possibly_sent: false,
        possibly_billed: false,
        expires_at: None,
        final_write_id: None,
    };
    let now = t("2026-11-30T11:06:00Z");
    assert!(
        !agg.record(&key, Some("someone-else"), &success, now)
            .await
            .unwrap(),
        "another claim id"
    );
    assert!(
        !agg.record(&key, None, &success, now).await.unwrap(),
        "no claim id while a claim holds it"
    );

    // The lease runs out: a second claim takes over and learns a send may have billed.
    let second = claim("c2", "2026-11-30T11:10:00Z", "2026-11-30T11:20:00Z");
    let grant = claim_read(agg, &key, 3, &second)
        .await
        .unwrap()
        .expect("expired");
    assert!(grant.previously_sent);
    assert!(
        !agg.record(&key, Some("c1"), &success, t("2026-11-30T11:11:00Z"))
            .await
            .unwrap(),
        "the expired claim writes nothing"
    );
    // A definite no-send reopens it and drops sentQuantity.
    let unsent = SubmissionUpdate {
        status: AggregatedStatus::Pending,
        reason: Some("Throttled".into()),
        metering_record_id: None,
        possibly_sent: false,
        possibly_billed: false,
        expires_at: None,
        final_write_id: None,
    };
    assert!(
        agg.record(&key, Some("c2"), &unsent, t("2026-11-30T11:12:00Z"))
            .await
            .unwrap()
    );
    let stored = agg.get(&key).await.unwrap().unwrap();
    assert_eq!(
        (
            stored.status,
            stored.claim_id,
            stored.sent_quantity,
            stored.in_flight_until
        ),
        (AggregatedStatus::Pending, None, None, None)
    );
    let third = claim("c3", "2026-11-30T11:13:00Z", "2026-11-30T11:23:00Z");
    assert!(claim_read(agg, &key, 3, &third).await.unwrap().is_some());
    assert!(
        agg.record(&key, Some("c3"), &success, t("2026-11-30T11:14:00Z"))
            .await
            .unwrap()
    );
    let done = agg.get(&key).await.unwrap().unwrap();
    assert_eq!(
        (done.status, done.metering_record_id.as_deref()),
        (AggregatedStatus::Success, Some("mr-1"))
    );
    assert!(
        !agg.record(&key, None, &success, t("2026-11-30T11:15:00Z"))
            .await
            .unwrap(),
        "terminal: no more outcomes"
    );
    let pending = agg.pending_page(hour("2026-11-30T10"), None).await.unwrap();
    assert!(pending.items.is_empty(), "left the pending index");
}

/// Batched claims and outcomes answer each item on its own (one whose condition fails
/// does not stop the rest): a claim is taken only on a record exactly as read, so one
/// claimed, released or folded since the read is skipped; what a claim says about
/// earlier sends is what the read said. More than [`MAX_BATCH_WRITES`] is refused.
pub async fn claim_all_takes_only_records_exactly_as_read_and_answers_each(b: &dyn Backend) {
    let agg = b.aggregated();
    let mut reads = Vec::new();
    for (n, h) in ["2026-11-30T07", "2026-11-30T08", "2026-11-30T09"]
        .into_iter()
        .enumerate()
    {
        let key = group(h);
        let row = seed(b, &format!("{h}:00:00Z"), 2).await;
        let create = commit(
            record(key.clone(), 2, 1),
            None,
            &[&row],
            "2026-11-30T10:00:00Z",
        );
        assert_eq!(agg.commit(&create).await.unwrap(), CommitOutcome::Committed);
        let read = agg.get(&key).await.unwrap().unwrap();
        assert_eq!(read.attempt_count, 0, "record {n} is fresh");
        reads.push(read);
    }
    // Behind the reader's back: the second is claimed and released as possibly sent.
    let rival = claim("rival", "2026-11-30T10:01:00Z", "2026-11-30T10:06:00Z");
    assert!(agg.claim(&reads[1], &rival).await.unwrap().is_some());
    let ambiguous = SubmissionUpdate::release(true);
    assert!(
        agg.record(
            &reads[1].key,
            Some("rival"),
            &ambiguous,
            t("2026-11-30T10:02:00Z")
        )
        .await
        .unwrap()
    );
    let requests: Vec<ClaimRequest> = reads
        .iter()
        .enumerate()
        .map(|(n, r)| {
            ClaimRequest::of(
                r,
                claim(
                    &format!("c{n}"),
                    "2026-11-30T10:03:00Z",
                    "2026-11-30T10:08:00Z",
                ),
            )
        })
        .collect();
    let granted = agg.claim_all(&requests).await.unwrap();
    assert_eq!(
        granted.iter().map(Option::is_some).collect::<Vec<_>>(),
        vec![true, false, true],
        "the stale read is skipped, the others claimed"
    );
    assert!(granted.iter().flatten().all(|g| !g.previously_sent));
    let stale = agg.get(&reads[1].key).await.unwrap().unwrap();
    assert_eq!(
        (stale.claim_id, stale.sent_quantity, stale.attempt_count),
        (None, Some(2), 1),
        "untouched by the skipped claim"
    );
    // Read again, it is claimable, and the grant says an earlier send may have billed.
    let again = ClaimRequest::of(
        &read_record(agg, &reads[1].key).await,
        claim("c9", "2026-11-30T10:03:00Z", "2026-11-30T10:08:00Z"),
    );
    let grant = agg.claim_all(&[again]).await.unwrap();
    assert_eq!(grant[0].map(|g| g.previously_sent), Some(true));

    // Outcomes: each under its own claim id; a wrong id fails alone.
    let billed = SubmissionUpdate::new(AggregatedStatus::Success, None, Some("mr".into()));
    let writes = vec![
        OutcomeWrite {
            key: reads[0].key.clone(),
            claim_id: Some("c0".into()),
            update: billed.clone(),
        },
        OutcomeWrite {
            key: reads[1].key.clone(),
            claim_id: Some("c1".into()),
            update: billed.clone(),
        },
        OutcomeWrite {
            key: reads[2].key.clone(),
            claim_id: Some("c2".into()),
            update: billed.clone(),
        },
    ];
    let applied = agg
        .record_all(&writes, t("2026-11-30T10:04:00Z"))
        .await
        .unwrap();
    assert_eq!(applied, vec![true, false, true]);
    for (n, status) in [
        (0, AggregatedStatus::Success),
        (1, AggregatedStatus::Pending),
        (2, AggregatedStatus::Success),
    ] {
        let stored = agg.get(&reads[n].key).await.unwrap().unwrap();
        assert_eq!(stored.status, status, "record {n}");
    }

    let too_many: Vec<ClaimRequest> = (0..=MAX_BATCH_WRITES)
        .map(|n| {
            let mut r = reads[0].clone();
            r.key.dimension = format!("d{n}");
            ClaimRequest::of(
                &r,
                claim("x", "2026-11-30T10:05:00Z", "2026-11-30T10:09:00Z"),
            )
        })
        .collect();
    assert!(
        agg.claim_all(&too_many).await.is_err(),
        "over the batch size"
    );
}

/// Direct-submit: the seller may update a record in place (no version bump). A claim
/// taken on a read whose quantity is no longer stored is refused; a claim stores as
/// `sentQuantity` exactly the quantity its call sends, never the stored one.
pub async fn a_claim_pins_the_quantity_it_sends_and_holds_only_while_it_is_stored(b: &dyn Backend) {
    let agg = b.aggregated();
    let key = group("2026-11-30T09");
    let written = record(key.clone(), 5, 0);
    assert_eq!(
        agg.put_direct(&written, t("2026-11-30T10:00:00Z"))
            .await
            .unwrap(),
        PutOutcome::Created
    );
    // A read that saw 7 (the seller's value before or after), while 5 is stored.
    let mut seen = read_record(agg, &key).await;
    seen.quantity = 7;
    let moved = ClaimRequest::of(
        &seen,
        claim("c1", "2026-11-30T10:01:00Z", "2026-11-30T10:05:00Z"),
    );
    assert_eq!(moved.sent_quantity, 7);
    assert_eq!(agg.claim_all(&[moved]).await.unwrap(), vec![None]);
    let untouched = read_record(agg, &key).await;
    assert_eq!((untouched.sent_quantity, untouched.claim_id), (None, None));
    // Read as stored: claimed, and `sentQuantity` is the quantity the call sends.
    let mut read = read_record(agg, &key).await;
    let as_read = ClaimRequest::of(
        &read,
        claim("c2", "2026-11-30T10:01:00Z", "2026-11-30T10:05:00Z"),
    );
    assert!(agg.claim_all(&[as_read]).await.unwrap()[0].is_some());
    assert_eq!(read_record(agg, &key).await.sent_quantity, Some(5));
    // A request that sends a pinned quantity stores that one, whatever `quantity` says.
    let release = SubmissionUpdate::release(true);
    assert!(
        agg.record(&key, Some("c2"), &release, t("2026-11-30T10:02:00Z"))
            .await
            .unwrap()
    );
    read = read_record(agg, &key).await;
    let mut request = ClaimRequest::of(
        &read,
        claim("c3", "2026-11-30T10:03:00Z", "2026-11-30T10:06:00Z"),
    );
    request.sent_quantity = 4;
    assert!(agg.claim_all(&[request]).await.unwrap()[0].is_some());
    assert_eq!(read_record(agg, &key).await.sent_quantity, Some(4));
}

async fn read_record(agg: &dyn AggregatedStore, key: &GroupKey) -> AggregatedRecord {
    agg.get(key).await.unwrap().unwrap()
}

/// The commit counts and finalizes its rows at once; `finalize_row` applies once, only
/// to a pending row, and only under the right [`RowClaim`]: counted into this record
/// (a row counted by an earlier version, still pending), or not counted at all.
pub async fn finalize_row_requires_the_row_claim(b: &dyn Backend) {
    let key = group("2026-11-30T10");
    let committed = seed(b, "2026-11-30T10:00:00Z", 1).await;
    let uncounted = seed(b, "2026-11-30T10:01:00Z", 1).await;
    let c = commit(
        record(key.clone(), 1, 1),
        None,
        &[&committed],
        "2026-11-30T11:00:00Z",
    );
    assert_eq!(
        b.aggregated().commit(&c).await.unwrap(),
        CommitOutcome::Committed
    );
    let into = key.aggregated_sort_key();
    let row = b
        .usage()
        .get_row(LICENSE, &committed.sort_key)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (
            row.attrs.get(attr::METERING_STATUS),
            row.attrs.get(attr::AGGREGATED_INTO),
            row.attrs.contains_key(attr::METERING_PENDING)
        ),
        (
            Some(&Attr::S("Aggregated".into())),
            Some(&Attr::S(into.clone())),
            false
        ),
        "counted and finalized by the commit"
    );
    assert!(
        !finalize(b, &committed.sort_key, RowClaim::Counted(&into)).await,
        "already final"
    );

    // A row counted but still pending (what an earlier version's commit left).
    let mut counted = seed(b, "2026-11-30T10:02:00Z", 1).await;
    counted
        .attrs
        .insert(attr::AGGREGATED_INTO.to_string(), Attr::S(into.clone()));
    b.insert_raw_row(&counted).await;
    let other = "111122223333#requests#2026-11-30T09";
    assert!(!finalize(b, &counted.sort_key, RowClaim::Uncounted).await);
    assert!(!finalize(b, &counted.sort_key, RowClaim::Counted(other)).await);
    assert!(!finalize(b, &uncounted.sort_key, RowClaim::Counted(other)).await);
    assert!(finalize(b, &counted.sort_key, RowClaim::Counted(&into)).await);
    assert!(
        !finalize(b, &counted.sort_key, RowClaim::Counted(&into)).await,
        "once"
    );
    assert!(finalize(b, &uncounted.sort_key, RowClaim::Uncounted).await);
    let row = b
        .usage()
        .get_row(LICENSE, &counted.sort_key)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        row.attrs.get(attr::METERING_STATUS),
        Some(&Attr::S("Aggregated".into()))
    );
    assert!(!row.attrs.contains_key(attr::METERING_PENDING));
    assert!(
        !finalize(
            b,
            "111122223333#requests#2026-11-30T10:59:00Z",
            RowClaim::Uncounted
        )
        .await,
        "absent row"
    );
}

/// `finalize_row` makes a pending row final once: status and reason set, out of the
/// pending index, `createdAt` kept and `updatedAt` moved; a second finalize, whatever
/// status it asks for, changes nothing, and a missing row is not created.
pub async fn finalize_row_makes_a_pending_row_final_once(b: &dyn Backend) {
    let row = new_row("evt-1", "2026-11-30T10:15:42Z", 5);
    b.usage()
        .put_row(&row, t("2026-11-30T10:20:00Z"))
        .await
        .expect("put_row");
    let sort_key = ingestion_sort_key(&row);
    let pending = || async {
        all_pages(|c| b.usage().pending_page(hour("2026-11-30T10"), c))
            .await
            .len()
    };
    assert_eq!(pending().await, 1);

    let done = b
        .usage()
        .finalize_row(
            LICENSE,
            &sort_key,
            RowClaim::Uncounted,
            RowFinal::new(
                RawStatus::RejectedClientSide,
                Some(ReasonCode::MalformedTimestamp),
            ),
            t("2026-11-30T12:00:00Z"),
        )
        .await
        .unwrap();
    assert!(done);
    assert_eq!(pending().await, 0);
    let stored = b
        .usage()
        .get_row(LICENSE, &sort_key)
        .await
        .unwrap()
        .unwrap();
    assert!(!stored.attrs.contains_key(attr::METERING_PENDING));
    assert_eq!(
        stored.attrs[attr::METERING_STATUS],
        Attr::S("RejectedClientSide".into())
    );
    assert_eq!(
        stored.attrs[attr::METERING_STATUS_REASON],
        Attr::S("MalformedTimestamp".into())
    );
    assert_eq!(
        stored.attrs[attr::CREATED_AT],
        Attr::S("2026-11-30T10:20:00Z".into())
    );
    assert_eq!(
        stored.attrs[attr::UPDATED_AT],
        Attr::S("2026-11-30T12:00:00Z".into())
    );

    // Already terminal: nothing changes, whatever status is asked for.
    let again = b
        .usage()
        .finalize_row(
            LICENSE,
            &sort_key,
            RowClaim::Uncounted,
            RowFinal::new(RawStatus::Aggregated, None),
            t("2026-11-30T13:00:00Z"),
        )
        .await
        .unwrap();
    assert!(!again);
    assert_eq!(
        b.usage()
            .get_row(LICENSE, &sort_key)
            .await
            .unwrap()
            .unwrap(),
        stored
    );
    // A missing row is not created.
    assert!(
        !b.usage()
            .finalize_row(
                LICENSE,
                "missing",
                RowClaim::Uncounted,
                RowFinal::new(RawStatus::Aggregated, None),
                t("2026-11-30T13:00:00Z")
            )
            .await
            .unwrap()
    );
    assert!(
        b.usage()
            .get_row(LICENSE, "missing")
            .await
            .unwrap()
            .is_none()
    );
}

async fn finalize(b: &dyn Backend, sort_key: &str, claim: RowClaim<'_>) -> bool {
    b.usage()
        .finalize_row(
            LICENSE,
            sort_key,
            claim,
            RowFinal::new(RawStatus::Aggregated, None),
            t("2026-11-30T11:30:00Z"),
        )
        .await
        .expect("finalize_row")
}

/// The pending indexes and their sweeps page through every pending item exactly once
/// (at most [`PAGE_SIZE`] a page, whatever order the index keeps).
pub async fn pending_pages_cover_every_pending_item_once(b: &dyn Backend) {
    let mut by_hour: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for (h, minutes) in [
        ("2026-11-30T10", 5),
        ("2026-11-30T11", 3),
        ("2026-11-30T12", 1),
    ] {
        for m in 0..minutes {
            let row = seed(b, &format!("{h}:{m:02}:00Z"), 1).await;
            by_hour.entry(h).or_default().insert(row.sort_key);
        }
    }
    for (h, expected) in &by_hour {
        let h = hour(h);
        let refs = all_pages(|c| b.usage().pending_page(h, c)).await;
        let got: Vec<String> = refs.iter().map(|r| r.sort_key.clone()).collect();
        assert_eq!(got.len(), expected.len(), "each once: {got:?}");
        assert_eq!(got.into_iter().collect::<BTreeSet<_>>(), *expected);
        assert!(refs.iter().all(|r| {
            r.customer_aws_account_id.as_deref() == Some(ACCOUNT)
                && r.dimension.as_deref() == Some("requests")
        }));
    }
    let live = [hour("2026-11-30T10")];
    let stray = all_pages(|c| b.usage().stray_pending_page(&live, c)).await;
    let got: BTreeSet<String> = stray.iter().map(|s| s.sort_key.clone()).collect();
    assert_eq!(stray.len(), 4, "each once: {stray:?}");
    let expected: BTreeSet<String> = by_hour
        .iter()
        .filter(|(h, _)| **h != "2026-11-30T10")
        .flat_map(|(_, keys)| keys.iter().cloned())
        .collect();
    assert_eq!(got, expected);

    // Aggregated: five pending records over two hours, one of them finalized.
    let agg = b.aggregated();
    for (i, h) in [
        "2026-11-30T10",
        "2026-11-30T10",
        "2026-11-30T10",
        "2026-11-30T11",
        "2026-11-30T11",
    ]
    .into_iter()
    .enumerate()
    {
        let mut key = group(h);
        key.dimension = format!("d{i}");
        let rec = record(key, 1, 1);
        assert_eq!(
            agg.put_direct(&rec, t("2026-11-30T12:00:00Z"))
                .await
                .unwrap(),
            PutOutcome::Created
        );
    }
    let mut done = group("2026-11-30T10");
    done.dimension = "d0".into();
    let terminal = SubmissionUpdate {
        status: AggregatedStatus::Success,
        reason: None,
        metering_record_id: Some("mr-0".into()),
        possibly_sent: false,
        possibly_billed: false,
        expires_at: None,
        final_write_id: None,
    };
    assert!(
        agg.record(&done, None, &terminal, t("2026-11-30T12:01:00Z"))
            .await
            .unwrap()
    );
    let ten = all_pages(|c| agg.pending_page(hour("2026-11-30T10"), c)).await;
    let dims: BTreeSet<String> = ten.iter().map(|r| r.key.dimension.clone()).collect();
    assert_eq!(ten.len(), 2);
    assert_eq!(dims, BTreeSet::from(["d1".to_string(), "d2".to_string()]));
    let stray = all_pages(|c| agg.stray_pending_page(&live, c)).await;
    let dims: BTreeSet<String> = stray.iter().map(|r| r.key.dimension.clone()).collect();
    assert_eq!(stray.len(), 2);
    assert_eq!(dims, BTreeSet::from(["d3".to_string(), "d4".to_string()]));
}

/// A commit is one transaction: the record and [`MAX_ROWS_PER_COMMIT`] rows (100 items,
/// DynamoDB's limit) commit; one row more is refused before anything is written.
pub async fn a_commit_holds_at_most_100_items(b: &dyn Backend) {
    let key = group("2026-11-30T10");
    let mut rows = Vec::new();
    for i in 0..=MAX_ROWS_PER_COMMIT {
        rows.push(seed(b, &format!("2026-11-30T10:{:02}:{:02}Z", i / 60, i % 60), 1).await);
    }
    let all: Vec<&RawUsageRow> = rows.iter().collect();
    let too_many = commit(
        record(key.clone(), all.len() as i64, 1),
        None,
        &all,
        "2026-11-30T11:00:00Z",
    );
    let message = assert_failed(b.aggregated().commit(&too_many).await, "101 items");
    assert!(message.contains("at most 99"), "{message}");
    assert_eq!(b.aggregated().get(&key).await.unwrap(), None);

    let fits = commit(
        record(key.clone(), MAX_ROWS_PER_COMMIT as i64, 1),
        None,
        &all[..MAX_ROWS_PER_COMMIT],
        "2026-11-30T11:00:00Z",
    );
    assert_eq!(
        b.aggregated().commit(&fits).await.unwrap(),
        CommitOutcome::Committed
    );
    let last = b
        .usage()
        .get_row(LICENSE, &all[MAX_ROWS_PER_COMMIT - 1].sort_key)
        .await
        .unwrap()
        .unwrap();
    assert!(last.attrs.contains_key(attr::AGGREGATED_INTO));
}

/// An item over DynamoDB's 400 KB is refused as [`PortError::Failed`] and nothing is
/// written; one well under it is stored. (moto sizes items its own way and refuses
/// over 405,000 of its bytes, DynamoDB over 409,600 of its own: between the two they
/// differ, so the case stays clear of both.)
pub async fn an_item_over_400_kb_is_refused(b: &dyn Backend) {
    let now = t("2026-11-30T10:20:00Z");
    let mut fits = new_row("evt-fits", "2026-11-30T10:15:00Z", 1);
    fits.allocations = Some(big_allocations(300_000));
    assert_eq!(
        b.usage().put_row(&fits, now).await.unwrap(),
        IngestOutcome::Created
    );

    let mut huge = new_row("evt-huge", "2026-11-30T10:16:00Z", 1);
    huge.allocations = Some(big_allocations(MAX_ITEM_BYTES + 40_000));
    assert_failed(b.usage().put_row(&huge, now).await, "a row over 400 KB");
    assert_eq!(
        b.usage()
            .get_row(LICENSE, &ingestion_marker_sort_key("evt-huge"))
            .await
            .unwrap(),
        None,
        "not even the marker"
    );

    let key = group("2026-11-30T10");
    let row = seed(b, "2026-11-30T10:30:00Z", 1).await;
    let mut rec = record(key.clone(), 1, 1);
    rec.allocations = Some(big_allocations(MAX_ITEM_BYTES + 40_000));
    let c = commit(rec, None, &[&row], "2026-11-30T11:00:00Z");
    assert_failed(b.aggregated().commit(&c).await, "a record over 400 KB");
    assert_eq!(b.aggregated().get(&key).await.unwrap(), None);
    let stored = b
        .usage()
        .get_row(LICENSE, &row.sort_key)
        .await
        .unwrap()
        .unwrap();
    assert!(!stored.attrs.contains_key(attr::AGGREGATED_INTO));
}

/// DynamoDB refuses a transaction whose items add up to more than 4 MB. Eleven rows of
/// ~390 KB each (each under 400 KB, together over 4 MB) claimed by one commit: the
/// memory store refuses it, changing nothing. moto 5.2 does not check the aggregate
/// size and commits it; the case records that difference rather than hiding it.
pub async fn a_transaction_over_4_mb_is_refused(b: &dyn Backend) {
    let key = group("2026-11-30T10");
    let mut rows = Vec::new();
    for i in 0..11 {
        let mut row = reference_row(
            LICENSE,
            ACCOUNT,
            "requests",
            &format!("2026-11-30T10:{i:02}:00Z"),
            1,
        );
        row.attrs
            .insert("payload".into(), Attr::S("x".repeat(390_000)));
        b.insert_raw_row(&row).await;
        rows.push(row);
    }
    let all: Vec<&RawUsageRow> = rows.iter().collect();
    let c = commit(
        record(key.clone(), 11, 1),
        None,
        &all,
        "2026-11-30T11:00:00Z",
    );
    let result = b.aggregated().commit(&c).await;
    if b.enforces_transaction_bytes() {
        let message = assert_failed(result, "a transaction over 4 MB");
        assert!(
            message.contains(&MAX_TRANSACTION_BYTES.to_string()),
            "{message}"
        );
        assert_eq!(b.aggregated().get(&key).await.unwrap(), None);
    } else {
        // moto: not enforced (DynamoDB would answer ValidationException).
        assert_eq!(result.unwrap(), CommitOutcome::Committed);
    }
}

/// The operator's pages cover each table once (by license: only that license's items),
/// and a replay puts an `Error` record back in the pending index with its quantity
/// pinned, only while it is still `Error` with the attempt count read.
pub async fn operator_reads_both_tables_and_replays_only_an_unchanged_error(b: &dyn Backend) {
    let (usage, agg, op) = (b.usage(), b.aggregated(), b.operator());
    let now = t("2026-11-30T11:00:00Z");
    let mut other = new_row("e-2", "2026-11-30T10:20:00Z", 1);
    other.license_arn = format!("{LICENSE}0");
    for row in [
        new_row("e-1", "2026-11-30T10:10:00Z", 5),
        other,
        new_row("e-3", "2026-11-30T10:30:00Z", 2),
    ] {
        assert_eq!(
            usage.put_row(&row, now).await.unwrap(),
            IngestOutcome::Created
        );
    }
    let all = all_pages(|c| op.raw_rows_page(None, c)).await;
    // Three rows and their three idempotency markers.
    assert_eq!(all.len(), 6, "{all:?}");
    let mine = all_pages(|c| op.raw_rows_page(Some(LICENSE), c)).await;
    assert_eq!(mine.len(), 4);
    assert!(mine.iter().all(|r| r.license_arn == LICENSE));

    let key = group("2026-11-30T10");
    let rows = usage.group_rows(&key).await.unwrap();
    let refs: Vec<&RawUsageRow> = rows.iter().collect();
    let create = commit(
        record(key.clone(), 7, 1),
        None,
        &refs,
        "2026-11-30T11:01:00Z",
    );
    assert_eq!(agg.commit(&create).await.unwrap(), CommitOutcome::Committed);
    let held = claim("c1", "2026-11-30T11:05:00Z", "2026-11-30T11:10:00Z");
    claim_read(agg, &key, 1, &held)
        .await
        .unwrap()
        .expect("claimed");
    let error = SubmissionUpdate {
        status: AggregatedStatus::Error,
        reason: Some("InvalidUsageDimensionException".into()),
        metering_record_id: None,
        possibly_sent: false,
        possibly_billed: false,
        expires_at: None,
        final_write_id: None,
    };
    let at = t("2026-11-30T11:06:00Z");
    assert!(agg.record(&key, Some("c1"), &error, at).await.unwrap());

    let records = all_pages(|c| op.records_page(Some(LICENSE), c)).await;
    assert_eq!(records.len(), 1);
    let failed = records[0].clone();
    assert_eq!(failed.status, AggregatedStatus::Error);
    assert!(
        all_pages(|c| op.records_page(Some("arn:aws:license-manager::1:license:l-x"), c))
            .await
            .is_empty()
    );
    assert!(
        agg.pending_page(key.hour, None)
            .await
            .unwrap()
            .items
            .is_empty()
    );

    let mut stale = failed.clone();
    stale.attempt_count += 1;
    assert!(
        !op.replay(&stale, at).await.unwrap(),
        "attempt count changed"
    );
    assert!(op.replay(&failed, at).await.unwrap());
    let replayed = agg.get(&key).await.unwrap().unwrap();
    assert_eq!(
        (
            replayed.status,
            replayed.status_reason.clone(),
            replayed.sent_quantity,
            replayed.quantity,
            replayed.claim_id.clone()
        ),
        (AggregatedStatus::Pending, None, Some(7), 7, None)
    );
    assert_eq!(
        replayed.possibly_billed,
        Some(false),
        "nothing of ours billed it: a DuplicateRecord now is something else's"
    );
    assert!(!replayed.may_have_been_billed());
    let pending = all_pages(|c| agg.pending_page(key.hour, c)).await;
    assert_eq!(pending.len(), 1, "back in the pending index");
    assert!(
        !replayed.accepts_folds(),
        "a replayed record takes no late rows"
    );
    assert!(!op.replay(&failed, at).await.unwrap(), "no longer Error");
    // The submitter can claim it as read.
    let again = claim("c2", "2026-11-30T11:07:00Z", "2026-11-30T11:12:00Z");
    let grant = agg
        .claim(&replayed, &again)
        .await
        .unwrap()
        .expect("claimable");
    assert!(grant.previously_sent);
}

/// `possiblyBilled` (whether a call of ours may have billed the record) is written by
/// outcomes only: `true` when the update says so; under a claim, `false` where it is
/// absent; never cleared, by any write. Without it (an item written before it existed)
/// `sentQuantity` is read as it; a pending release that pins the quantity without a
/// possible billing stores `false` explicitly, so the record reads as not billed.
pub async fn possibly_billed_is_written_by_outcomes_and_never_cleared(b: &dyn Backend) {
    let agg = b.aggregated();
    let key = group("2026-11-30T10");
    let r1 = seed(b, "2026-11-30T10:00:00Z", 1).await;
    let create = commit(
        record(key.clone(), 3, 1),
        None,
        &[&r1],
        "2026-11-30T11:00:00Z",
    );
    assert_eq!(agg.commit(&create).await.unwrap(), CommitOutcome::Committed);
    let stored = || async { agg.get(&key).await.unwrap().unwrap() };
    assert_eq!(
        stored().await.possibly_billed,
        None,
        "a new record has none"
    );

    // A claim sets sentQuantity and leaves possiblyBilled alone: while it is held (or
    // after it lapses) the record reads as possibly billed anyway.
    let c1 = claim("c1", "2026-11-30T11:05:00Z", "2026-11-30T11:10:00Z");
    assert!(claim_read(agg, &key, 1, &c1).await.unwrap().is_some());
    let held = stored().await;
    assert_eq!((held.sent_quantity, held.possibly_billed), (Some(3), None));
    assert!(held.may_have_been_billed());

    // Released with the quantity pinned but nothing billed (CustomerNotSubscribed
    // before activation): "no" is stored, so sentQuantity alone no longer reads as billed.
    let pinned = SubmissionUpdate::release(true);
    let at = t("2026-11-30T11:06:00Z");
    assert!(agg.record(&key, Some("c1"), &pinned, at).await.unwrap());
    let released = stored().await;
    assert_eq!(
        (released.sent_quantity, released.possibly_billed),
        (Some(3), Some(false))
    );
    assert!(!released.may_have_been_billed());

    // A send that may have billed sets it.
    let c2 = claim("c2", "2026-11-30T11:07:00Z", "2026-11-30T11:12:00Z");
    assert!(agg.claim(&released, &c2).await.unwrap().is_some());
    let ambiguous = SubmissionUpdate::release(true).with_possibly_billed(true);
    let at = t("2026-11-30T11:08:00Z");
    assert!(agg.record(&key, Some("c2"), &ambiguous, at).await.unwrap());
    let billed = stored().await;
    assert_eq!(billed.possibly_billed, Some(true));

    // Never cleared: not by a later "no" under a claim, nor by a final write.
    let c3 = claim("c3", "2026-11-30T11:13:00Z", "2026-11-30T11:18:00Z");
    assert!(agg.claim(&billed, &c3).await.unwrap().is_some());
    let at = t("2026-11-30T11:14:00Z");
    assert!(agg.record(&key, Some("c3"), &pinned, at).await.unwrap());
    assert_eq!(stored().await.possibly_billed, Some(true));
    let expired = SubmissionUpdate::new(AggregatedStatus::SubmissionExpired, None, None);
    let at = t("2026-11-30T11:20:00Z");
    assert!(agg.record(&key, None, &expired, at).await.unwrap());
    let done = stored().await;
    assert_eq!(
        (done.status, done.possibly_billed),
        (AggregatedStatus::SubmissionExpired, Some(true))
    );

    // A write without a claim never stores "no" where nothing is stored.
    let other = group("2026-11-30T12");
    let r2 = seed(b, "2026-11-30T12:00:00Z", 1).await;
    let c = commit(
        record(other.clone(), 1, 1),
        None,
        &[&r2],
        "2026-11-30T13:00:00Z",
    );
    assert_eq!(agg.commit(&c).await.unwrap(), CommitOutcome::Committed);
    let error = SubmissionUpdate::new(
        AggregatedStatus::Error,
        Some("RequestTooLarge".into()),
        None,
    );
    let at = t("2026-11-30T13:01:00Z");
    assert!(agg.record(&other, None, &error, at).await.unwrap());
    assert_eq!(
        agg.get(&other).await.unwrap().unwrap().possibly_billed,
        None
    );
}

/// `expiresAt` (the tables' TTL attribute, epoch seconds) is written only by a final
/// write, exactly as the write says: a finalized row, the rows a commit counts, a
/// record's terminal outcome, a malformed item closed `Error`. Every write that leaves
/// or puts an item pending removes it: the commit's record, a claim, a release, the
/// replay of an `Error` record, a row re-filed under its hour.
pub async fn expires_at_only_on_final_writes_and_removed_by_pending_ones(b: &dyn Backend) {
    let (usage, agg, op) = (b.usage(), b.aggregated(), b.operator());
    let at = t("2026-12-03T11:00:00Z");
    let expiry = |row: &RawUsageRow| row.attrs.get(attr::EXPIRES_AT).cloned();
    let read =
        |sort_key: String| async move { usage.get_row(LICENSE, &sort_key).await.unwrap().unwrap() };

    // A finalized row carries the expiry given, as epoch seconds; `None` removes one.
    let rejected = seed(b, "2026-11-30T10:00:00Z", 1).await;
    let final_row = RowFinal::new(RawStatus::RejectedClientSide, Some(ReasonCode::TooManyTags));
    assert!(
        usage
            .finalize_row(
                LICENSE,
                &rejected.sort_key,
                RowClaim::Uncounted,
                final_row.expiring(Some(at)),
                t("2026-11-30T11:00:00Z")
            )
            .await
            .unwrap()
    );
    assert_eq!(
        expiry(&read(rejected.sort_key.clone()).await),
        Some(Attr::N(at.timestamp().to_string()))
    );
    let mut stale = seed(b, "2026-11-30T10:01:00Z", 1).await;
    stale
        .attrs
        .insert(attr::EXPIRES_AT.into(), Attr::N("1".into()));
    b.insert_raw_row(&stale).await;
    assert!(
        usage
            .finalize_row(
                LICENSE,
                &stale.sort_key,
                RowClaim::Uncounted,
                RowFinal::new(RawStatus::AggregationExpired, None),
                t("2026-11-30T11:00:00Z")
            )
            .await
            .unwrap()
    );
    assert_eq!(
        expiry(&read(stale.sort_key.clone()).await),
        None,
        "retention off"
    );

    // A row re-filed under its hour is pending: a seller's expiresAt goes.
    let mut marked = seed(b, "2026-11-30T10:02:00Z", 1).await;
    marked
        .attrs
        .insert(attr::METERING_PENDING.into(), Attr::S("true".into()));
    marked
        .attrs
        .insert(attr::EXPIRES_AT.into(), Attr::N("1".into()));
    b.insert_raw_row(&marked).await;
    assert!(
        usage
            .repair_pending(
                LICENSE,
                &marked.sort_key,
                "true",
                hour("2026-11-30T10"),
                t("2026-11-30T11:00:00Z")
            )
            .await
            .unwrap()
    );
    assert_eq!(expiry(&read(marked.sort_key.clone()).await), None);

    // The commit: its counted rows are final (the expiry given), its record pending.
    let key = group("2026-11-30T10");
    let counted = seed(b, "2026-11-30T10:03:00Z", 4).await;
    let mut c = commit(
        record(key.clone(), 4, 1),
        None,
        &[&counted],
        "2026-11-30T11:00:00Z",
    );
    c.rows_expire_at = Some(at);
    assert_eq!(agg.commit(&c).await.unwrap(), CommitOutcome::Committed);
    assert_eq!(
        expiry(&read(counted.sort_key.clone()).await),
        Some(Attr::N(at.timestamp().to_string()))
    );
    assert_eq!(
        b.record_expiry(&key).await,
        None,
        "the record stays pending"
    );

    // A seller's expiresAt on a pending record: a fold, a claim and a release remove it.
    b.set_record_expiry(&key, t("2026-11-30T12:00:00Z")).await;
    let late = seed(b, "2026-11-30T10:04:00Z", 1).await;
    let fold = commit(
        record(key.clone(), 5, 2),
        Some(1),
        &[&late],
        "2026-11-30T11:01:00Z",
    );
    assert_eq!(agg.commit(&fold).await.unwrap(), CommitOutcome::Committed);
    assert_eq!(b.record_expiry(&key).await, None, "a fold");
    b.set_record_expiry(&key, t("2026-11-30T12:00:00Z")).await;
    let first = claim("c1", "2026-11-30T11:05:00Z", "2026-11-30T11:10:00Z");
    assert!(
        agg.claim(&read_record(agg, &key).await, &first)
            .await
            .unwrap()
            .is_some()
    );
    assert_eq!(b.record_expiry(&key).await, None, "a claim");
    let release = SubmissionUpdate::release(false).expiring(Some(at));
    assert!(
        agg.record(&key, Some("c1"), &release, t("2026-11-30T11:06:00Z"))
            .await
            .unwrap()
    );
    assert_eq!(b.record_expiry(&key).await, None, "a release never expires");

    // A terminal outcome carries the expiry given; the replay back to Pending removes it.
    let second = claim("c2", "2026-11-30T11:07:00Z", "2026-11-30T11:12:00Z");
    assert!(
        agg.claim(&read_record(agg, &key).await, &second)
            .await
            .unwrap()
            .is_some()
    );
    let error = SubmissionUpdate::new(
        AggregatedStatus::Error,
        Some("InvalidUsageDimensionException".into()),
        None,
    )
    .expiring(Some(at));
    assert!(
        agg.record(&key, Some("c2"), &error, t("2026-11-30T11:08:00Z"))
            .await
            .unwrap()
    );
    assert_eq!(b.record_expiry(&key).await, Some(at));
    assert!(
        op.replay(&read_record(agg, &key).await, t("2026-11-30T11:09:00Z"))
            .await
            .unwrap()
    );
    assert_eq!(
        b.record_expiry(&key).await,
        None,
        "pending again after the replay"
    );
    let third = claim("c3", "2026-11-30T11:10:00Z", "2026-11-30T11:15:00Z");
    assert!(
        agg.claim(&read_record(agg, &key).await, &third)
            .await
            .unwrap()
            .is_some()
    );
    let billed = SubmissionUpdate::new(AggregatedStatus::Success, None, Some("mr-1".into()))
        .expiring(Some(at));
    assert!(
        agg.record(&key, Some("c3"), &billed, t("2026-11-30T11:11:00Z"))
            .await
            .unwrap()
    );
    assert_eq!(b.record_expiry(&key).await, Some(at));
}

/// A final write's retry after its answer was lost: the condition fails (the item is
/// final), and the store answers `true` because the item carries the write's
/// `finalWriteId`, so its caller counts the transition's metric; a racing write (another
/// id) answers `false`, and a write without an id too. Raw rows (`finalize_row`) and the
/// claimless outcome of a record (the age-out, `record`).
pub async fn a_final_write_retried_after_it_applied_answers_true_and_only_to_itself(
    b: &dyn Backend,
) {
    let (usage, agg) = (b.usage(), b.aggregated());
    let now = t("2026-11-30T11:00:00Z");

    // A raw row.
    let row = seed(b, "2026-11-30T10:00:00Z", 1).await;
    let reject = RowFinal::new(
        RawStatus::RejectedClientSide,
        Some(ReasonCode::HourAlreadySubmitted),
    );
    let sort_key = row.sort_key.as_str();
    let finalize = |outcome: RowFinal| async move {
        usage
            .finalize_row(LICENSE, sort_key, RowClaim::Uncounted, outcome, now)
            .await
            .unwrap()
    };
    assert!(finalize(reject).await, "the write");
    assert!(finalize(reject).await, "its retry");
    assert!(finalize(reject).await, "and again");
    let stored = usage
        .get_row(LICENSE, &row.sort_key)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        stored.attrs.get(attr::FINAL_WRITE_ID),
        Some(&Attr::S(reject.write_id.to_string()))
    );
    assert_eq!(
        stored.attrs.get(attr::METERING_STATUS_REASON),
        Some(&Attr::S("HourAlreadySubmitted".into()))
    );
    assert!(
        !finalize(RowFinal::new(
            RawStatus::RejectedClientSide,
            Some(ReasonCode::HourAlreadySubmitted)
        ))
        .await,
        "a racing write: another id"
    );
    assert!(
        !finalize(RowFinal::new(RawStatus::AggregationExpired, None)).await,
        "another id, another status"
    );
    let after = usage
        .get_row(LICENSE, &row.sort_key)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        after.attrs.get(attr::FINAL_WRITE_ID),
        Some(&Attr::S(reject.write_id.to_string())),
        "the losers wrote nothing"
    );
    assert_eq!(
        after.attrs.get(attr::METERING_STATUS),
        Some(&Attr::S("RejectedClientSide".into()))
    );

    // A record aged out (no claim).
    let key = group("2026-11-30T09");
    let counted = seed(b, "2026-11-30T09:30:00Z", 3).await;
    let create = commit(
        record(key.clone(), 3, 1),
        None,
        &[&counted],
        "2026-11-30T10:00:00Z",
    );
    assert_eq!(agg.commit(&create).await.unwrap(), CommitOutcome::Committed);
    let expire = SubmissionUpdate::new(AggregatedStatus::SubmissionExpired, None, None).once();
    let record_outcome = |update: SubmissionUpdate| {
        let key = key.clone();
        async move { agg.record(&key, None, &update, now).await.unwrap() }
    };
    assert!(record_outcome(expire.clone()).await, "the write");
    assert!(record_outcome(expire.clone()).await, "its retry");
    assert!(
        !record_outcome(expire.clone().once()).await,
        "a racing write: another id"
    );
    assert!(
        !record_outcome(SubmissionUpdate::new(
            AggregatedStatus::SubmissionExpired,
            None,
            None
        ))
        .await,
        "a write without an id"
    );
    // In a batch, each write answers for itself: a retry beside a first write.
    let other = group("2026-11-30T08");
    let counted = seed(b, "2026-11-30T08:30:00Z", 2).await;
    let create = commit(
        record(other.clone(), 2, 1),
        None,
        &[&counted],
        "2026-11-30T10:00:00Z",
    );
    assert_eq!(agg.commit(&create).await.unwrap(), CommitOutcome::Committed);
    let writes = [
        OutcomeWrite {
            key: key.clone(),
            claim_id: None,
            update: expire.clone(),
        },
        OutcomeWrite {
            key: other.clone(),
            claim_id: None,
            update: expire.clone().once(),
        },
    ];
    assert_eq!(
        agg.record_all(&writes, now).await.unwrap(),
        vec![true, true]
    );
    assert!(
        !agg.record(&other, None, &expire, now).await.unwrap(),
        "an id is its own record's only"
    );
    for key in [&key, &other] {
        assert_eq!(
            read_record(agg, key).await.status,
            AggregatedStatus::SubmissionExpired
        );
    }
}

#[cfg(test)]
mod tests {
    crate::store_contract_tests!(crate::memory::contract::MemoryBackend::new());
}

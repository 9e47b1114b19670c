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
//!
//! The cases, by concern: raw rows and the pending pages (`rows.rs`), the aggregation
//! commit (`commit.rs`), the submitter's claims (`claims.rs`), final writes of raw
//! rows (`finals.rs`), DynamoDB's size and count limits (`limits.rs`), and what an
//! aggregated record keeps, its correction included (`records.rs`); the shared
//! fixtures are here.

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
            a_correction_is_written_on_a_billed_record_only_over_the_one_it_holds,
            a_correction_needs_a_billed_record,
            corrections_page_lists_exactly_the_corrected_records,
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

async fn read_record(agg: &dyn AggregatedStore, key: &GroupKey) -> AggregatedRecord {
    agg.get(key).await.unwrap().unwrap()
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

// ------------------------------------------------------------------ cases

mod claims;
mod commit;
mod finals;
mod limits;
mod records;
mod rows;

pub use claims::*;
pub use commit::*;
pub use finals::*;
pub use limits::*;
pub use records::*;
pub use rows::*;

#[cfg(test)]
mod tests {
    crate::store_contract_tests!(crate::memory::contract::MemoryBackend::new());
}

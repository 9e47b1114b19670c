//! Shared test fixtures: the public ones every crate's tests use (under `test-util`),
//! and the in-memory stores' own unit-test helpers.

use crate::model::{AggregatedRecord, Allocation, GroupKey, RawUsageRow, Tag};
use crate::ports::{
    AggregationCommit, Cursor, IngestOutcome, NewUsageRow, Page, PortError, UsageStore,
};
use crate::time::{Instant, parse_usage_timestamp};

/// A pending aggregated record as the aggregator leaves it
/// ([`AggregatedRecord::pending`]) at `version`: never claimed or sent, no allocations.
pub fn pending_record(
    key: GroupKey,
    product_code: &str,
    quantity: i64,
    version: u64,
) -> AggregatedRecord {
    AggregatedRecord {
        version,
        ..AggregatedRecord::pending(key, product_code, quantity)
    }
}

/// A new usage row as a client sends it: no allocations, no product code.
pub fn usage_row(
    license_arn: &str,
    account: &str,
    dimension: &str,
    timestamp: Instant,
    quantity: i64,
    event_id: &str,
) -> NewUsageRow {
    NewUsageRow {
        license_arn: license_arn.into(),
        customer_aws_account_id: account.into(),
        dimension: dimension.into(),
        timestamp,
        quantity,
        allocations: None,
        product_code: None,
        event_id: event_id.into(),
        timestamp_defaulted: false,
    }
}

/// A commit of `record` (over `expected_version`, `None`: create) claiming `rows`, at
/// `now` (a usage timestamp), with no expiry on the rows.
///
/// # Panics
/// When `now` is not a usage timestamp.
pub fn commit(
    record: AggregatedRecord,
    expected_version: Option<u64>,
    rows: &[&RawUsageRow],
    now: &str,
) -> AggregationCommit {
    AggregationCommit {
        record,
        expected_version,
        claimed_rows: rows
            .iter()
            .map(|r| (r.license_arn.clone(), r.sort_key.clone()))
            .collect(),
        rows_expire_at: None,
        now: parse_usage_timestamp(now).unwrap_or_else(|e| panic!("{now}: {e}")),
    }
}

/// The license of [`tables_with_one_row`]'s row.
pub const ONE_ROW_LICENSE: &str =
    "arn:aws:license-manager::123456789012:license:l-0000000000000001";

/// Tables holding one pending raw row: 4 `requests` at 2026-11-30T09:15:00Z of
/// [`ONE_ROW_LICENSE`] and account 111122223333 (a handler test's smallest world).
pub fn tables_with_one_row() -> super::MemoryTables {
    let tables = super::MemoryTables::new();
    tables.insert_raw_row(super::reference_row(
        ONE_ROW_LICENSE,
        "111122223333",
        "requests",
        "2026-11-30T09:15:00Z",
        4,
    ));
    tables
}

/// One allocation of all of `quantity`, tagged `team=a`.
pub fn team_allocation(quantity: i64) -> Vec<Allocation> {
    vec![Allocation {
        quantity,
        tags: vec![Tag {
            key: "team".into(),
            value: "a".into(),
        }],
    }]
}

/// `store.put_row(row, now)`, which must not fail; the outcome.
///
/// # Panics
/// When the write fails, naming the row's event id and the error.
pub async fn put_row(store: &impl UsageStore, row: &NewUsageRow, now: Instant) -> IngestOutcome {
    store
        .put_row(row, now)
        .await
        .unwrap_or_else(|e| panic!("put_row of event {:?}: {e}", row.event_id))
}

/// Every page of a paginated query, first to last: `page(cursor)` reads one, from the
/// start with `None`, then with each page's `next` until a page has none.
///
/// # Panics
/// When a read fails, naming the page and the error.
pub async fn all_pages<T, F, Fut>(mut page: F) -> Vec<Page<T>>
where
    F: FnMut(Option<Cursor>) -> Fut,
    Fut: Future<Output = Result<Page<T>, PortError>>,
{
    let mut pages: Vec<Page<T>> = Vec::new();
    loop {
        let cursor = pages.last().and_then(|p| p.next.clone());
        let read = page(cursor)
            .await
            .unwrap_or_else(|e| panic!("page {} of the query: {e}", pages.len() + 1));
        let last = read.next.is_none();
        pages.push(read);
        if last {
            return pages;
        }
    }
}

#[cfg(test)]
pub(crate) use unit::*;

/// An aggregated record of license `l-1` and account `111122223333` that has been sent
/// (`sentQuantity` = `quantity`), in `status` with `reason`: the record the operator
/// views' tests share.
#[allow(clippy::unwrap_used)]
pub fn operator_record(
    dimension: &str,
    hour: &str,
    status: crate::model::AggregatedStatus,
    quantity: i64,
    reason: Option<&str>,
) -> crate::model::AggregatedRecord {
    crate::model::AggregatedRecord {
        key: crate::model::GroupKey {
            license_arn: "arn:aws:license-manager::123456789012:license:l-1".into(),
            customer_aws_account_id: "111122223333".into(),
            dimension: dimension.into(),
            hour: hour.parse().unwrap(),
        },
        product_code: "prod".into(),
        quantity,
        allocations: None,
        status,
        status_reason: reason.map(str::to_string),
        metering_record_id: None,
        attempt_count: 1,
        version: 1,
        in_flight_until: None,
        claim_id: None,
        sent_quantity: Some(quantity),
        possibly_billed: None,
        folding: false,
        unit_price: None,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod unit {
    //! The in-memory stores' unit-test helpers.
    use super::{pending_record, usage_row};
    use crate::model::{AggregatedRecord, GroupKey};
    use crate::ports::NewUsageRow;
    use crate::time::{HourBucket, Instant, parse_usage_timestamp};

    pub(crate) const LICENSE: &str =
        "arn:aws:license-manager::123456789012:license:l-0123456789abcdef";
    pub(crate) const ACCOUNT: &str = "111122223333";

    pub(crate) fn t(s: &str) -> Instant {
        parse_usage_timestamp(s).unwrap()
    }

    pub(crate) fn hour(s: &str) -> HourBucket {
        s.parse().unwrap()
    }

    pub(crate) fn group(dimension: &str, h: &str) -> GroupKey {
        GroupKey {
            license_arn: LICENSE.into(),
            customer_aws_account_id: ACCOUNT.into(),
            dimension: dimension.into(),
            hour: hour(h),
        }
    }

    pub(crate) fn record(key: GroupKey, quantity: i64, version: u64) -> AggregatedRecord {
        pending_record(key, "prod", quantity, version)
    }

    pub(crate) fn new_row(event_id: &str, ts: &str, quantity: i64) -> NewUsageRow {
        usage_row(LICENSE, ACCOUNT, "requests", t(ts), quantity, event_id)
    }
}

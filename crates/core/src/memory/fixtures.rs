//! Shared fixtures of the in-memory stores' unit tests.

#![allow(clippy::unwrap_used, missing_docs)]

use crate::model::{AggregatedRecord, AggregatedStatus, GroupKey, RawUsageRow};
use crate::ports::{AggregationCommit, NewUsageRow};
use crate::time::{HourBucket, Instant, parse_usage_timestamp};
pub(crate) const LICENSE: &str = "arn:aws:license-manager::123456789012:license:l-0123456789abcdef";
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

pub(crate) fn new_row(event_id: &str, ts: &str, quantity: i64) -> NewUsageRow {
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

pub(crate) fn commit(
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
        rows_expire_at: None,
        now: t(now),
    }
}

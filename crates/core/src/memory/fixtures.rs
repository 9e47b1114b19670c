//! Shared test fixtures: the public ones every crate's tests use (under `test-util`),
//! and the in-memory stores' own unit-test helpers.

use crate::model::{AggregatedRecord, GroupKey};

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

#[cfg(test)]
pub(crate) use unit::*;

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod unit {
    //! The in-memory stores' unit-test helpers.
    use super::pending_record;
    use crate::model::{AggregatedRecord, GroupKey, RawUsageRow};
    use crate::ports::{AggregationCommit, NewUsageRow};
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
}

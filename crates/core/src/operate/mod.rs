//! The operator's use cases (`awsmp`): pure views over what the tables hold (status,
//! failures, one license's chain, the HTML report), when a record may be replayed, what
//! a usage line needs before it is written, and what each failure means. The CLI reads
//! the tables through [`crate::ports::OperatorStore`] and renders these.

pub mod failures;
pub mod import;
pub mod license;
pub mod remedy;
pub mod replay;
pub mod report;
pub mod rows;
pub mod status;

use crate::time::{Instant, format_instant};

/// Serializes an instant as the tables store it (`2026-11-30T10:15:42Z`).
pub fn serialize_instant<S: serde::Serializer>(t: &Instant, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format_instant(*t))
}

/// The aggregated record the operator tests share.
#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) fn test_record(
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
    }
}

//! What the CLI's reconciliation tests share: the simulator's product, licenses and
//! accounts, our aggregated records as the submitter leaves them, and
//! `awsmp reconcile`'s arguments and JSON answer; a recording front on moto
//! ([`front`]); and the shipped binary run against an endpoint ([`binary`]).

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod binary;
pub mod front;

use awsmp_cli::commands::reconcile::{ReconcileArgs, load_our_records};
use awsmp_cli::commands::trail::Report;
use awsmp_core::memory::MemoryTables;
use awsmp_core::model::{AggregatedRecord, AggregatedStatus, GroupKey};
use awsmp_core::ports::MalformedItem;
use awsmp_core::time::HourBucket;
use awsmp_operate::reconcile::OurRecord;

/// The product the simulator's licenses belong to.
pub const PRODUCT: &str = "prodsim1234567890abcdef";
/// A license of PRODUCT, of ACCOUNT.
pub const LICENSE: &str =
    "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef";
/// A second license of PRODUCT, of ACCOUNT_2.
pub const LICENSE_2: &str =
    "arn:aws:license-manager::123456789012:license:l-fedcba9876543210fedcba9876543210";
/// The buyer of LICENSE.
pub const ACCOUNT: &str = "111122223333";
/// The buyer of LICENSE_2.
pub const ACCOUNT_2: &str = "444455556666";

/// The group of (license, account, dimension) in `hour` (`2026-03-15T11`).
pub fn group(license: &str, account: &str, dimension: &str, hour: &str) -> GroupKey {
    GroupKey {
        license_arn: license.into(),
        customer_aws_account_id: account.into(),
        dimension: dimension.into(),
        hour: hour.parse::<HourBucket>().unwrap(),
    }
}

/// Our record of `key` (PRODUCT) as the submitter leaves it after one send of
/// `quantity` answered with `status` and `metering_record_id`.
pub fn sent(
    key: GroupKey,
    quantity: i64,
    status: AggregatedStatus,
    metering_record_id: Option<String>,
) -> AggregatedRecord {
    AggregatedRecord {
        status,
        metering_record_id,
        attempt_count: 1,
        sent_quantity: Some(quantity),
        ..AggregatedRecord::pending(key, PRODUCT, quantity)
    }
}

/// Every record of our table, with the items that could not be read as records.
pub async fn our_records(tables: &MemoryTables) -> (Vec<OurRecord>, Vec<MalformedItem>) {
    load_our_records(&tables.operator_store(), None)
        .await
        .unwrap()
}

/// `awsmp reconcile --month 2026-03 --region us-east-1 --json`.
pub fn march_as_json() -> ReconcileArgs {
    ReconcileArgs {
        month: Some("2026-03".into()),
        region: "us-east-1".into(),
        json: true,
        ..ReconcileArgs::default()
    }
}

/// The document of a `--json` report.
pub fn json_of(report: &Report) -> serde_json::Value {
    serde_json::from_str(&report.text).unwrap()
}

/// How many items the JSON array `value` holds.
pub fn count(value: &serde_json::Value) -> usize {
    value.as_array().unwrap().len()
}

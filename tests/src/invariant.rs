//! The conservation invariant (ARCHITECTURE.md: status transitions) over the stored
//! tables and the simulator's ledger, read by the workspace's one checker
//! ([`awsmp_core::memory::conservation`], which the simulation runs too): every raw row
//! ends in exactly one terminal status; the quantity billed for a group equals the sum
//! of its counted rows; no group is ever submitted with two different quantities;
//! nothing is billed twice.

use std::collections::{BTreeMap, BTreeSet};

use awsmp_core::memory::conservation::{Billed, Books, Conservation, RecordView, RowView};
use awsmp_core::model::GroupKey;
use awsmp_core::time::HourBucket;
use awsmp_marketplace_sim::LedgerSnapshot;

use crate::views::{AggregatedView, RawRowView};

/// Every violation found; empty when the invariant holds. With `settled`, every raw
/// row and every aggregated record must also have reached a terminal status.
pub fn conservation(
    raw: &[RawRowView],
    aggregated: &[AggregatedView],
    ledger: &LedgerSnapshot,
    settled: bool,
) -> Vec<String> {
    let books = Books {
        rows: raw.iter().map(RawRowView::conservation_view).collect(),
        records: aggregated
            .iter()
            .map(AggregatedView::conservation_view)
            .collect(),
        billed: ledger
            .records
            .iter()
            .map(|entry| Billed {
                key: group(
                    &entry.license_arn,
                    &entry.customer_aws_account_id,
                    &entry.dimension,
                    entry.hour,
                ),
                quantity: i64::from(entry.quantity),
                metering_record_id: entry.metering_record_id.clone(),
            })
            .collect(),
        sent: sent(ledger),
    };
    Conservation {
        settled,
        ..Conservation::default()
    }
    .check(&books)
}

fn group(
    license_arn: &str,
    account: &str,
    dimension: &str,
    hour: chrono::DateTime<chrono::Utc>,
) -> GroupKey {
    GroupKey {
        license_arn: license_arn.to_string(),
        customer_aws_account_id: account.to_string(),
        dimension: dimension.to_string(),
        hour: HourBucket::containing(hour),
    }
}

/// Every quantity the simulator processed for each group: what it billed, and what it
/// refused as a conflicting duplicate of a billed record.
fn sent(ledger: &LedgerSnapshot) -> BTreeMap<GroupKey, BTreeSet<i64>> {
    let mut sent: BTreeMap<GroupKey, BTreeSet<i64>> = BTreeMap::new();
    for entry in &ledger.records {
        let key = group(
            &entry.license_arn,
            &entry.customer_aws_account_id,
            &entry.dimension,
            entry.hour,
        );
        sent.entry(key)
            .or_default()
            .insert(i64::from(entry.quantity));
    }
    for conflict in &ledger.conflicts {
        let key = group(
            &conflict.license_arn,
            &conflict.customer_aws_account_id,
            &conflict.dimension,
            conflict.hour,
        );
        sent.entry(key).or_default().extend([
            i64::from(conflict.billed_quantity),
            i64::from(conflict.attempted_quantity),
        ]);
    }
    sent
}

impl RawRowView {
    /// The row as the conservation checker reads it.
    pub fn conservation_view(&self) -> RowView {
        RowView {
            license_arn: self.license_arn.clone(),
            sort_key: self.sort_key.clone(),
            quantity: self.quantity,
            status: self.status.clone(),
            reason: self.reason.clone(),
            pending: self.pending,
            aggregated_into: self.aggregated_into.clone(),
        }
    }
}

impl AggregatedView {
    /// The record as the conservation checker reads it.
    pub fn conservation_view(&self) -> RecordView {
        RecordView {
            license_arn: self.license_arn.clone(),
            sort_key: self.sort_key.clone(),
            quantity: self.quantity,
            status: self.status.clone(),
            pending: self.pending,
            sent_quantity: self.sent_quantity,
            metering_record_id: self.metering_record_id.clone(),
        }
    }
}

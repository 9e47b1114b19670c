//! The conservation invariant (ARCHITECTURE.md: status transitions) checked over the stored tables and
//! the simulator's ledger: every raw row ends in exactly one terminal status; the
//! quantity billed for a group equals the sum of its counted rows; no group is ever
//! submitted with two different quantities; nothing is billed twice.

use std::collections::{BTreeMap, BTreeSet};

use awsmp_marketplace_sim::LedgerSnapshot;

use crate::views::{AggregatedView, RawRowView};

const RAW_TERMINAL: [&str; 3] = ["Aggregated", "RejectedClientSide", "AggregationExpired"];
const AGGREGATED_TERMINAL: [&str; 6] = [
    "Success",
    "DuplicateRecord",
    "CustomerNotSubscribed",
    "Error",
    "SubmissionExpired",
    "DryRunSubmitted",
];

/// Every violation found; empty when the invariant holds. With `settled`, every raw
/// row and every aggregated record must also have reached a terminal status.
pub fn conservation(
    raw: &[RawRowView],
    aggregated: &[AggregatedView],
    ledger: &LedgerSnapshot,
    settled: bool,
) -> Vec<String> {
    let mut violations = Vec::new();

    // Raw rows: one terminal status, pending marker consistent with it, claims respected.
    let mut counted: BTreeMap<(String, String), i64> = BTreeMap::new();
    for row in raw {
        let id = format!("raw {} {}", row.license_arn, row.sort_key);
        match row.status.as_deref() {
            None if settled => violations.push(format!("{id}: still pending at the end")),
            None if !row.pending => {
                violations.push(format!("{id}: no status and no meteringPending"))
            }
            None => {}
            Some(status) if !RAW_TERMINAL.contains(&status) => {
                violations.push(format!("{id}: unknown status {status}"))
            }
            Some(_) if row.pending => violations.push(format!("{id}: terminal but still pending")),
            Some("RejectedClientSide") if row.reason.is_none() => {
                violations.push(format!("{id}: rejected without a reason"))
            }
            Some("Aggregated") if row.aggregated_into.is_none() && row.quantity != Some(0) => {
                violations.push(format!(
                    "{id}: Aggregated with quantity {:?} but never counted",
                    row.quantity
                ))
            }
            Some(status @ ("RejectedClientSide" | "AggregationExpired"))
                if row.aggregated_into.is_some() =>
            {
                violations.push(format!("{id}: counted into a record but ended {status}"))
            }
            Some(_) => {}
        }
        if let Some(into) = &row.aggregated_into {
            *counted
                .entry((row.license_arn.clone(), into.clone()))
                .or_insert(0) += row.quantity.unwrap_or(0);
        }
    }

    // Aggregated records: status machine, and quantity = sum of the rows claimed into it.
    let mut records: BTreeMap<(String, String, String, String), &AggregatedView> = BTreeMap::new();
    for record in aggregated {
        let id = format!("aggregated {} {}", record.license_arn, record.sort_key);
        let terminal = AGGREGATED_TERMINAL.contains(&record.status.as_str());
        if record.status == "RejectedClientSide" {
            violations.push(format!("{id}: RejectedClientSide on the aggregated table"));
        } else if !terminal && record.status != "Pending" {
            violations.push(format!("{id}: unknown status {}", record.status));
        }
        if terminal == record.pending {
            violations.push(format!(
                "{id}: status {} but pending={}",
                record.status, record.pending
            ));
        }
        if settled && !terminal {
            violations.push(format!("{id}: still pending at the end"));
        }
        let sum = counted
            .get(&(record.license_arn.clone(), record.sort_key.clone()))
            .copied()
            .unwrap_or(0);
        if sum != record.quantity {
            violations.push(format!(
                "{id}: quantity {} but its counted rows sum to {sum}",
                record.quantity
            ));
        }
        records.insert(
            (
                record.license_arn.clone(),
                record.account.clone(),
                record.dimension.clone(),
                record.hour.clone(),
            ),
            record,
        );
    }

    // The ledger: each group billed once, with the stored quantity, for a billed record.
    let mut billed = BTreeSet::new();
    for entry in &ledger.records {
        let hour = entry.hour.format("%Y-%m-%dT%H").to_string();
        let key = (
            entry.license_arn.clone(),
            entry.customer_aws_account_id.clone(),
            entry.dimension.clone(),
            hour,
        );
        let id = format!("billed {key:?}");
        if !billed.insert(key.clone()) {
            violations.push(format!("{id}: billed twice"));
        }
        match records.get(&key) {
            None => violations.push(format!("{id}: no aggregated record")),
            Some(record) => {
                if i64::from(entry.quantity) != record.quantity {
                    violations.push(format!(
                        "{id}: billed {} but the record holds {}",
                        entry.quantity, record.quantity
                    ));
                }
                if !["Success", "DuplicateRecord", "Pending", "SubmissionExpired"]
                    .contains(&record.status.as_str())
                {
                    violations.push(format!(
                        "{id}: billed but the record says {}",
                        record.status
                    ));
                }
                if record.status == "Success"
                    && record.metering_record_id.as_deref()
                        != Some(entry.metering_record_id.as_str())
                {
                    violations.push(format!("{id}: record id differs from the ledger's"));
                }
            }
        }
    }
    for (key, record) in &records {
        if record.status == "Success" && !billed.contains(key) {
            violations.push(format!("aggregated {key:?}: Success but not in the ledger"));
        }
    }
    for conflict in &ledger.conflicts {
        violations.push(format!(
            "group {} {} {} {} submitted with two quantities: billed {}, then {}",
            conflict.license_arn,
            conflict.customer_aws_account_id,
            conflict.dimension,
            conflict.hour,
            conflict.billed_quantity,
            conflict.attempted_quantity
        ));
    }
    violations
}

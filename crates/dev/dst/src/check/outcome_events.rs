//! The outcome-events invariant, after a settled schedule: every committed move of an
//! item into a told status (a record's terminal status, a row's not-billed one) was
//! told at least once, and every copy of one outcome (one `outcomeId`) says the same;
//! nothing was told that no committed change did; and each record's `billed`,
//! `possiblyBilled` and `quantity` agree with what the simulated Marketplace billed.
//! The streams are drained fault-free before the check, so an outcome never told is a
//! liveness failure too (an event the bus can never take holds its shard).

use std::collections::{BTreeMap, BTreeSet};

use awsmp_core::memory::{INGESTION_MARKER_PREFIX, Image, StreamChange};
use awsmp_core::model::{AggregatedStatus, Attr, attr};
use awsmp_core::outcomes::{RECORD_OUTCOME, ROW_NOT_BILLED, Table};
use serde_json::Value;

use crate::world::World;

fn status(image: Option<&Image>) -> Option<&str> {
    image
        .and_then(|i| i.get(attr::METERING_STATUS))
        .and_then(Attr::as_s)
}

/// The committed changes that move an item into a told status, by change id.
fn moves(changes: &[StreamChange]) -> BTreeMap<&str, &StreamChange> {
    changes
        .iter()
        .filter(|c| {
            let Some(new) = status(c.change.new.as_ref()) else {
                return false;
            };
            c.table.told_statuses().contains(&new)
                && status(c.change.old.as_ref()) != Some(new)
                && !(c.table == Table::Usage && c.key.1.starts_with(INGESTION_MARKER_PREFIX))
        })
        .map(|c| (c.change.change_id.as_str(), c))
        .collect()
}

/// Every violation of the outcome-events invariant in `world` (empty when it holds, or
/// when the world runs no outcome-events function).
pub fn check(world: &World) -> Vec<String> {
    let Some(outcomes) = &world.outcomes else {
        return Vec::new();
    };
    let mut violations = Vec::new();
    let changes = world.tables.changes_from(0);
    let moves = moves(&changes);
    // Every copy of each outcome, by outcomeId.
    let mut told: BTreeMap<String, Vec<(&'static str, Value)>> = BTreeMap::new();
    for event in outcomes.told() {
        let detail: Value = serde_json::from_str(&event.detail).unwrap_or(Value::Null);
        let id = detail["outcomeId"].as_str().unwrap_or_default().to_string();
        told.entry(id)
            .or_default()
            .push((event.detail_type, detail));
    }
    for (id, change) in &moves {
        if !told.contains_key(*id) {
            violations.push(format!(
                "outcome events: {:?} {}/{} moved to {} ({id}) and was never told",
                change.table,
                change.key.0,
                change.key.1,
                status(change.change.new.as_ref()).unwrap_or_default()
            ));
        }
    }
    let ledger: BTreeMap<(String, String), _> = world
        .metering
        .inner
        .ledger()
        .into_iter()
        .map(|(key, entry)| ((key.license_arn.clone(), key.aggregated_sort_key()), entry))
        .collect();
    let rival = world.metering.rival_record_keys();
    // Each record's last move into a terminal status: the ledger at the end speaks of it.
    let mut last: BTreeMap<&(String, String), &str> = BTreeMap::new();
    for change in changes.iter().filter(|c| c.table == Table::Aggregated) {
        if moves.contains_key(change.change.change_id.as_str()) {
            last.insert(&change.key, change.change.change_id.as_str());
        }
    }
    for (id, copies) in &told {
        let Some(change) = moves.get(id.as_str()) else {
            violations.push(format!(
                "outcome events: told {id} ({}), which no committed change made",
                copies[0].1
            ));
            continue;
        };
        let (detail_type, detail) = &copies[0];
        if copies.iter().any(|(_, d)| d != detail) {
            violations.push(format!(
                "outcome events: {id} told {} times, not all alike",
                copies.len()
            ));
        }
        let who = format!("outcome events: {}/{} ({id})", change.key.0, change.key.1);
        let (expected_type, key_field) = match change.table {
            Table::Usage => (ROW_NOT_BILLED, "usageRowKey"),
            Table::Aggregated => (RECORD_OUTCOME, "recordKey"),
        };
        let new_status = status(change.change.new.as_ref()).unwrap_or_default();
        if *detail_type != expected_type
            || detail["status"] != new_status
            || detail["licenseArn"] != change.key.0.as_str()
            || detail[key_field] != change.key.1.as_str()
        {
            violations.push(format!(
                "{who}: moved to {new_status}, told {detail_type} {detail}"
            ));
            continue;
        }
        if change.table == Table::Aggregated {
            let is_last = last.get(&change.key) == Some(&id.as_str());
            violations.extend(
                agrees_with_ledger(detail, new_status, &change.key, is_last, &ledger, &rival)
                    .map(|why| format!("{who}: {why}")),
            );
        }
    }
    violations
}

/// Why a record's told outcome disagrees with Marketplace's ledger, if it does. `last`:
/// the record's last terminal move (an earlier one, replayed since, may precede a bill).
fn agrees_with_ledger(
    detail: &Value,
    status: &str,
    key: &(String, String),
    last: bool,
    ledger: &BTreeMap<(String, String), crate::marketplace::LedgerEntry>,
    rival: &BTreeSet<(String, String)>,
) -> Option<String> {
    let billed = detail["billed"].as_bool().unwrap_or(false);
    let possibly = detail["possiblyBilled"].as_bool().unwrap_or(false);
    let quantity = detail["quantity"].as_i64();
    if billed && possibly {
        return Some(format!("told both billed and possiblyBilled: {detail}"));
    }
    // Another writer billed the hour first: a DuplicateRecord cannot say whose bill it
    // answers, and a lapsed claim of ours is rightly read as possibly billing it (the
    // main invariant holds the record's status to that).
    if rival.contains(key) {
        return None;
    }
    let ours = ledger.get(key);
    match ours {
        None if billed => Some(format!(
            "told billed ({status}), but Marketplace billed nothing of ours: {detail}"
        )),
        Some(entry) if (billed || possibly) && quantity != Some(entry.quantity) => Some(format!(
            "told quantity {quantity:?} (billed {billed}, possiblyBilled {possibly}), but \
             Marketplace billed {}: {detail}",
            entry.quantity
        )),
        Some(entry) if last && !billed && !possibly => {
            let unbilled = [
                AggregatedStatus::Error,
                AggregatedStatus::CustomerNotSubscribed,
                AggregatedStatus::SubmissionExpired,
            ];
            let may_have = unbilled.iter().any(|s| s.as_str() == status);
            Some(format!(
                "Marketplace billed {} for it, yet it was told billed false{}: {detail}",
                entry.quantity,
                if may_have {
                    " and not possiblyBilled"
                } else {
                    ""
                }
            ))
        }
        _ => None,
    }
}

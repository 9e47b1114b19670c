//! The conservation invariant (architecture.md §4) over the in-memory tables and
//! Marketplace after a settled schedule: every raw row ended in exactly one terminal
//! status, consistent with its counting claim; every aggregated record ended, holding
//! the sum of the rows counted into it; what Marketplace billed for a group is that
//! record's quantity; no group was ever sent with two different quantities; every
//! registration answered 200 is stored, and none changed a lifecycle status.

use std::collections::BTreeMap;

use awsmp_core::items::expiry_of;
use awsmp_core::model::{AggregatedStatus, Attr, SubscriptionStatus, attr};

use crate::scenario::{ACCOUNT, REGION, RETENTION, World};

const RAW_TERMINAL: [&str; 3] = ["Aggregated", "RejectedClientSide", "AggregationExpired"];

fn text<'a>(attrs: &'a BTreeMap<String, Attr>, name: &str) -> Option<&'a str> {
    attrs.get(name).and_then(Attr::as_s)
}

fn quantity(attrs: &BTreeMap<String, Attr>) -> i64 {
    match attrs.get(attr::QUANTITY) {
        Some(Attr::N(n)) => n.parse().unwrap_or(0),
        _ => 0,
    }
}

/// Every violation found (empty when the invariant holds).
pub fn check(world: &World) -> Vec<String> {
    let mut violations = retention(world);
    let mut counted: BTreeMap<(String, String), i64> = BTreeMap::new();
    for row in world.tables.raw_rows() {
        if row.sort_key.starts_with("event#") {
            continue;
        }
        let id = format!("raw {} {}", row.license_arn, row.sort_key);
        let status = text(&row.attrs, attr::METERING_STATUS);
        let pending = row.attrs.contains_key(attr::METERING_PENDING);
        let into = text(&row.attrs, attr::AGGREGATED_INTO);
        match status {
            None => violations.push(format!("{id}: never reached a terminal status")),
            Some(s) if !RAW_TERMINAL.contains(&s) => {
                violations.push(format!("{id}: unknown status {s}"))
            }
            Some(_) if pending => violations.push(format!("{id}: terminal but still pending")),
            Some("RejectedClientSide")
                if text(&row.attrs, attr::METERING_STATUS_REASON).is_none() =>
            {
                violations.push(format!("{id}: rejected without a reason"))
            }
            Some("Aggregated") if into.is_none() && quantity(&row.attrs) != 0 => {
                violations.push(format!("{id}: Aggregated but never counted"))
            }
            Some(s @ ("RejectedClientSide" | "AggregationExpired")) if into.is_some() => {
                violations.push(format!("{id}: counted into a record but ended {s}"))
            }
            Some(_) => {}
        }
        if let Some(into) = into {
            *counted
                .entry((row.license_arn.clone(), into.to_string()))
                .or_insert(0) += quantity(&row.attrs);
        }
    }

    for (license_arn, sort_key) in &world.initial_rows {
        if let Some(row) = world.tables.raw_row(license_arn, sort_key)
            && text(&row.attrs, attr::METERING_STATUS_REASON) == Some("HourAlreadySubmitted")
        {
            violations.push(format!(
                "raw {license_arn} {sort_key}: written before the pipeline ran, yet late usage \
                 (part of its hour was billed without it)"
            ));
        }
    }

    let ledger = world.metering.inner.ledger();
    for record in world.tables.aggregated_records() {
        let id = format!("aggregated {}", record.key);
        if record.status == AggregatedStatus::Pending {
            violations.push(format!("{id}: still pending after settling"));
        }
        if record.folding {
            violations.push(format!("{id}: a fold never completed"));
        }
        let sum = counted
            .get(&(
                record.key.license_arn.clone(),
                record.key.aggregated_sort_key(),
            ))
            .copied()
            .unwrap_or(0);
        if sum != record.quantity {
            violations.push(format!(
                "{id}: holds {} but the rows counted into it sum to {sum}",
                record.quantity
            ));
        }
        match ledger.get(&record.key) {
            Some(billed) => {
                if billed.quantity != record.quantity {
                    violations.push(format!(
                        "{id}: Marketplace billed {} but the record holds {} (status {})",
                        billed.quantity, record.quantity, record.status
                    ));
                }
                if !matches!(
                    record.status,
                    AggregatedStatus::Success
                        | AggregatedStatus::DuplicateRecord
                        | AggregatedStatus::SubmissionExpired
                ) {
                    violations.push(format!(
                        "{id}: billed but the record says {}",
                        record.status
                    ));
                }
            }
            None if record.status == AggregatedStatus::Success => {
                violations.push(format!("{id}: Success but Marketplace billed nothing"))
            }
            None => {}
        }
    }
    for (key, quantities) in world.metering.sent() {
        if quantities.len() > 1 {
            violations.push(format!("group {key}: sent with quantities {quantities:?}"));
        }
    }
    violations.extend(registrations(world));
    violations
}

/// Retention ([`RETENTION`]): no item that is not final carries `expiresAt` (DynamoDB
/// would delete usage before it is billed), and every final item does, from its final
/// write (a raw row exactly the retention after its last write; a record at least that).
fn retention(world: &World) -> Vec<String> {
    let mut violations: Vec<String> = world
        .tables
        .pending_items_with_expiry()
        .into_iter()
        .map(|item| format!("{item}: pending but carries expiresAt"))
        .collect();
    let days = chrono::Duration::days(i64::from(RETENTION.as_days()));
    let stamped = |attrs: &BTreeMap<String, Attr>| {
        text(attrs, attr::UPDATED_AT).and_then(awsmp_core::time::parse_instant)
    };
    for row in world.tables.raw_rows() {
        if row.sort_key.starts_with("event#") || row.attrs.contains_key(attr::METERING_PENDING) {
            continue;
        }
        let id = format!("raw {} {}", row.license_arn, row.sort_key);
        let expiry = row.attrs.get(attr::EXPIRES_AT).and_then(expiry_of);
        match (expiry, stamped(&row.attrs)) {
            (None, _) => violations.push(format!("{id}: final without expiresAt")),
            (Some(at), Some(written)) if at != written + days => violations.push(format!(
                "{id}: expiresAt {at} is not {} days after its final write {written}",
                RETENTION.as_days()
            )),
            _ => {}
        }
    }
    for record in world.tables.aggregated_records() {
        if !record.status.is_terminal() {
            continue;
        }
        let id = format!("aggregated {}", record.key);
        let written = world
            .tables
            .aggregated_audit(&record.key)
            .and_then(|stamp| awsmp_core::time::parse_instant(&stamp.updated_at));
        match (world.tables.aggregated_expiry(&record.key), written) {
            (None, _) => violations.push(format!("{id}: {} without expiresAt", record.status)),
            (Some(at), Some(written)) if at < written + days => violations.push(format!(
                "{id}: expiresAt {at} earlier than {} days after its final write {written}",
                RETENTION.as_days()
            )),
            _ => {}
        }
    }
    violations
}

/// Registration: a buyer with a valid token is never refused (only a server error under
/// faults, which the page retries); an answered registration is stored (profile and
/// Region); and registering never changes a lifecycle status the events set.
fn registrations(world: &World) -> Vec<String> {
    let mut violations = Vec::new();
    for (license, status) in &world.registrations {
        let id = format!("registration {license}");
        let row = world
            .subscribers
            .rows()
            .into_iter()
            .find(|r| r.license_arn == *license && r.customer_aws_account_id == ACCOUNT);
        match status {
            200 => {
                if !row
                    .as_ref()
                    .is_some_and(|r| r.registered_regions.iter().any(|x| x == REGION))
                {
                    violations.push(format!("{id}: answered 200 but {REGION} is not recorded"));
                }
                if world.profiles.get(license, ACCOUNT).is_none() {
                    violations.push(format!("{id}: answered 200 but no profile was stored"));
                }
            }
            500.. => {}
            other => violations.push(format!("{id}: a valid buyer was answered {other}")),
        }
        let expected_active = !world.deprovisioned.contains(license);
        let active =
            row.as_ref().and_then(|r| r.subscription_status) == Some(SubscriptionStatus::Active);
        if active != expected_active {
            violations.push(format!(
                "{id}: subscription status {:?} after its lifecycle events (registration \
                 must not change it)",
                row.and_then(|r| r.subscription_status)
            ));
        }
    }
    violations
}

//! The conservation invariant (ARCHITECTURE.md) over the in-memory tables and the
//! simulator's Marketplace after a settled schedule, in each metering Region: every raw row ended in exactly one terminal
//! status, consistent with its counting claim; every aggregated record ended, holding
//! the sum of the rows counted into it; what Marketplace billed for a group is that
//! record's quantity; no group was ever sent with two different quantities; every
//! registration answered 200 is stored, and none changed a lifecycle status.
//!
//! Liveness as well as safety: every fault of a schedule ends well inside the 24-hour
//! window, so every row written in time is counted and every group is billed; an
//! ending other than billed must be explained by the schedule itself (the refused
//! dimension, a late row for an hour already sent). And metrics are part of it: every
//! terminal status that has a metric emitted it exactly once, and no record was
//! reported ambiguous that was never in a call that could have billed it. Across
//! Regions and queues: an imported line is stored only in the Region it was imported
//! into; no work message is dead-lettered, and none that is not one is ever deleted.

use std::collections::BTreeMap;

use awsmp_core::items::expiry_of;
use awsmp_core::model::{
    AggregatedStatus, Attr, RawUsageRow, ReasonCode, SubscriptionStatus, attr,
};
use awsmp_core::ports::metric;
use awsmp_core::submit::REASON_ZERO_QUANTITY_SKIPPED;
use awsmp_core::submit::outcome::{REASON_BILLED_BY_EARLIER_ATTEMPT, REASON_UNEXPECTED_DUPLICATE};

use crate::marketplace::INVALID_DIMENSION;
use crate::scenario::{ACCOUNT, GARBAGE, Ingested, POISON, REGION, RETENTION, World};
use crate::sim::FaultKind;

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

/// The usage rows (not the event-id markers) of `license` written with `event_id`.
fn rows_of_event<'a>(
    rows: &'a [RawUsageRow],
    license: &'a str,
    event_id: &str,
) -> impl Iterator<Item = &'a RawUsageRow> {
    let suffix = format!("#{event_id}");
    rows.iter().filter(move |r| {
        r.license_arn == license
            && !r.sort_key.starts_with("event#")
            && r.sort_key.ends_with(&suffix)
    })
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
    let rival = world.metering.rival_groups();
    // Groups a call of ours may have billed: one of ours got them billed, or one of
    // ours ended without a definite answer.
    let mut sent_or_ambiguous = world.metering.ambiguous_groups();
    sent_or_ambiguous.extend(ledger.keys().filter(|k| !rival.contains(*k)).cloned());
    // A claim nobody released (its invocation crashed or was killed past its timeout,
    // or the claim's answer was lost) may or may not have been sent: the protocol
    // rightly reads a lapsed claim as possibly billed.
    let died_holding_claims = world.sim.injected().iter().any(|f| {
        matches!(f.kind, FaultKind::Crash | FaultKind::Stall)
            || (f.kind == FaultKind::StoreLostResponse && f.place == "aggregated.claim_all")
    });
    for record in world.tables.aggregated_records() {
        let id = format!("aggregated {}", record.key);
        if record.status == AggregatedStatus::Pending {
            violations.push(format!("{id}: still pending after settling"));
        }
        if record.folding {
            violations.push(format!("{id}: a fold never completed"));
        }
        if rival.contains(&record.key) {
            // Another writer billed the hour first: ours is never billed, and says so.
            let reason = record.status_reason.as_deref();
            let ours_may_have = died_holding_claims || sent_or_ambiguous.contains(&record.key);
            let told = match record.status {
                // Never sent again: nothing of ours was billed.
                AggregatedStatus::Error | AggregatedStatus::SubmissionExpired => true,
                // A dry run never sends.
                AggregatedStatus::DryRunSubmitted => world.dry_run == Some(true),
                AggregatedStatus::DuplicateRecord => {
                    reason == Some(REASON_UNEXPECTED_DUPLICATE)
                        || (ours_may_have && reason == Some(REASON_BILLED_BY_EARLIER_ATTEMPT))
                }
                _ => false,
            };
            if !told {
                violations.push(format!(
                    "{id}: another writer billed the hour first, yet the record ended {} ({:?})",
                    record.status, record.status_reason
                ));
            }
            continue;
        }
        let sum = counted
            .get(&(
                record.key.license_arn.clone(),
                record.key.aggregated_sort_key(),
            ))
            .copied()
            .unwrap_or(0);
        if world.direct {
            // The seller may update a record in place until it is claimed: what was
            // billed must be what the record says was sent.
            if let (Some(billed), Some(sent)) = (ledger.get(&record.key), record.sent_quantity)
                && billed.quantity != sent
            {
                violations.push(format!(
                    "{id}: Marketplace billed {} but the record says {sent} was sent (status {})",
                    billed.quantity, record.status
                ));
            }
            if ledger.contains_key(&record.key) && record.sent_quantity.is_none() {
                violations.push(format!("{id}: billed, but no sent quantity is recorded"));
            }
            continue;
        }
        if sum != record.quantity {
            violations.push(format!(
                "{id}: holds {} but the rows counted into it sum to {sum}",
                record.quantity
            ));
        }
        if record.status == AggregatedStatus::DuplicateRecord
            && record.status_reason.as_deref() == Some(REASON_BILLED_BY_EARLIER_ATTEMPT)
            && !died_holding_claims
            && !sent_or_ambiguous.contains(&record.key)
        {
            violations.push(format!(
                "{id}: DuplicateRecord read as billed by our earlier attempt, but no call of ours \
                 may have billed it"
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
                ) && !billed_before_revocation(world, &record)
                {
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
    if world.dry_run.is_some() {
        for key in ledger.keys().filter(|k| !rival.contains(*k)) {
            violations.push(format!("group {key}: billed by a dry run"));
        }
    }
    for (key, quantities) in world.metering.sent() {
        if quantities.len() > 1 {
            violations.push(format!("group {key}: sent with quantities {quantities:?}"));
        }
    }
    violations.extend(registrations(world));
    violations.extend(profile_expiries(world));
    violations.extend(ingestion(world));
    violations.extend(imports(world));
    violations.extend(queues(world));
    violations.extend(allocations(world));
    violations.extend(liveness(world));
    violations.extend(crate::refusals::check(world));
    violations.extend(refused_calls(world));
    violations.extend(metrics(world));
    violations.extend(crate::outcome_check::check(world));
    violations.extend(crate::api_edges::check(
        &world.edges,
        &world.tables.raw_rows(),
    ));
    if let Some(other) = &world.second {
        violations.extend(
            check(other)
                .into_iter()
                .map(|v| format!("{} {}: {v}", other.product, other.region)),
        );
    }
    violations
}

/// Queues: a message that is no work message is never deleted (every receive reports it
/// failed, so SQS keeps it and dead-letters it after the redrive policy's receives),
/// and no work message is ever dead-lettered (the pipeline never gives up on work it
/// was handed).
fn queues(world: &World) -> Vec<String> {
    let mut violations = Vec::new();
    for body in &world.dead_letters {
        if body != GARBAGE {
            violations.push(format!("a work message was dead-lettered: {body}"));
        }
    }
    let kept = world
        .queued
        .iter()
        .chain(&world.dead_letters)
        .any(|b| b == GARBAGE);
    if world.garbage_sent && !kept {
        violations.push(format!(
            "the message {GARBAGE} (no work message) was deleted: a handler took it as done"
        ));
    }
    violations
}

/// The operator's imports: a file imported into one deployment and reported done has
/// every line stored there once, with its quantity; no line is stored in a Region it
/// was not imported into (Marketplace would bill it once in each); a deployment that
/// refused raw usage stored nothing.
fn imports(world: &World) -> Vec<String> {
    let mut violations = Vec::new();
    let worlds: Vec<&World> = std::iter::once(world)
        .chain(world.second.as_deref())
        .collect();
    for import in &world.imports {
        for w in &worlds {
            let rows = w.tables.raw_rows();
            for (license, event_id, sent) in &import.lines {
                let stored: Vec<i64> = rows_of_event(&rows, license, event_id)
                    .map(|r| quantity(&r.attrs))
                    .collect();
                let id = format!("imported {event_id} into {}", import.region);
                let here =
                    w.region == import.region && w.product == import.product && !import.refused;
                match (here, import.done, stored.as_slice()) {
                    (false, _, []) | (true, false, _) => {}
                    (true, true, [q]) if q == sent => {}
                    (false, _, _) => violations.push(format!(
                        "{id}: stored in {} too (refused: {}): billed once in each Region",
                        w.region, import.refused
                    )),
                    (true, true, _) => violations.push(format!(
                        "{id}: the import reported done, but {} holds {stored:?} for \
                         quantity {sent}",
                        w.region
                    )),
                }
            }
        }
    }
    violations
}

/// Vendor-metered tagging: each billed record of the seller's events carries, per
/// `team` tag, exactly the quantity of the events counted into it with that tag (none
/// when the events were untagged); allocations always sum to the billed quantity.
fn allocations(world: &World) -> Vec<String> {
    let mut violations = Vec::new();
    let ledger = world.metering.inner.ledger();
    let rows = world.tables.raw_rows();
    for record in world.tables.aggregated_records() {
        let Some(billed) = ledger.get(&record.key) else {
            continue;
        };
        let allocated: i64 = billed.allocations.values().sum();
        if !billed.allocations.is_empty() && allocated != billed.quantity {
            violations.push(format!(
                "aggregated {}: billed {} with allocations summing to {allocated}",
                record.key, billed.quantity
            ));
        }
        if world.direct || record.key.dimension != "events" {
            continue;
        }
        let into = record.key.aggregated_sort_key();
        // An event answered twice (a retry) was stored once: count it once.
        let mut seen = std::collections::BTreeSet::new();
        let mut once: BTreeMap<Vec<(String, String)>, i64> = BTreeMap::new();
        for event in &world.ingested {
            let Some(team) = event.team else { continue };
            // An unanswered event counts when the row its id wrote holds its usage.
            let answered_written = matches!(event.answer, Ingested::Created | Ingested::Duplicate);
            let unanswered_written = event.answer == Ingested::Unanswered
                && rows_of_event(&rows, &event.license, &event.event_id)
                    .any(|r| quantity(&r.attrs) == event.quantity);
            if !(answered_written || unanswered_written)
                || !seen.insert((event.license.clone(), event.event_id.clone()))
            {
                continue;
            }
            let counted = rows_of_event(&rows, &event.license, &event.event_id)
                .any(|r| text(&r.attrs, attr::AGGREGATED_INTO) == Some(into.as_str()));
            if counted {
                *once
                    .entry(vec![("team".to_string(), team.to_string())])
                    .or_insert(0) += event.quantity;
            }
        }
        if billed.allocations != once {
            violations.push(format!(
                "aggregated {}: billed allocations {:?}, but the events counted into it \
                 carry {once:?}",
                record.key, billed.allocations
            ));
        }
    }
    violations
}

/// Ingestion by event id: an event answered written or duplicate is stored exactly
/// once with that usage; an id reused for other usage is answered conflict and never
/// changes what is stored.
fn ingestion(world: &World) -> Vec<String> {
    let mut violations = Vec::new();
    let rows = world.tables.raw_rows();
    for event in &world.ingested {
        let (license, event_id, sent, answer) = (
            &event.license,
            &event.event_id,
            &event.quantity,
            &event.answer,
        );
        let stored: Vec<i64> = rows_of_event(&rows, license, event_id)
            .map(|r| quantity(&r.attrs))
            .collect();
        let id = format!("event {event_id} of {license}");
        match (answer, stored.as_slice()) {
            (Ingested::Refused, []) => {}
            (Ingested::Refused, _) => violations.push(format!(
                "{id}: refused (a direct-submit stack takes no raw usage), yet stored"
            )),
            // Unanswered: stored or not, but never twice (the arm below).
            (Ingested::Unanswered, [] | [_]) => {}
            (_, []) => violations.push(format!("{id}: answered {answer:?}, never stored")),
            (Ingested::Created | Ingested::Duplicate, [q]) if q == sent => {}
            (Ingested::Conflict, [q]) if q != sent => {}
            (_, [q]) => violations.push(format!(
                "{id}: {sent} answered {answer:?}, but {q} is stored"
            )),
            (_, many) => violations.push(format!("{id}: stored {} times", many.len())),
        }
    }
    violations
}

/// Every row written in its window was counted (or is a late row for an hour already
/// sent), and every group was billed: the schedule's faults all end long before the
/// window closes. Only the refused dimension may end `Error` (the operator may define
/// it and replay, then it bills), and only a record Marketplace refused after its
/// buyer's entitlement was revoked may end `CustomerNotSubscribed`.
fn liveness(world: &World) -> Vec<String> {
    let mut violations = Vec::new();
    // The first fault-free runs come 20 minutes after the faults end: an hour whose
    // window closed by then (last month's hours at 06:00 on the 1st) may age out, and so
    // may one closing within the submitter's send margin of that run (it no longer sends
    // a record Marketplace would refuse as past the window by the time it arrives).
    let recovered =
        world.faults_end + chrono::Duration::minutes(20) + awsmp_core::submit::SEND_MARGIN;
    let closed = |hour| awsmp_core::time::bucket_expired(hour, recovered);
    let late = ReasonCode::HourAlreadySubmitted.to_string();
    for row in world.tables.raw_rows() {
        if row.sort_key.starts_with("event#") {
            continue;
        }
        let id = format!("raw {} {}", row.license_arn, row.sort_key);
        let hour = text(&row.attrs, attr::TIMESTAMP)
            .and_then(|t| awsmp_core::time::parse_usage_timestamp(t).ok())
            .map(awsmp_core::time::HourBucket::containing);
        if hour.is_some_and(closed) {
            continue;
        }
        match text(&row.attrs, attr::METERING_STATUS) {
            Some("AggregationExpired") => violations.push(format!(
                "{id}: written in its window, yet aged out uncounted (liveness)"
            )),
            Some("RejectedClientSide")
                if text(&row.attrs, attr::METERING_STATUS_REASON) != Some(late.as_str()) =>
            {
                violations.push(format!(
                    "{id}: a valid row rejected {:?} (liveness)",
                    text(&row.attrs, attr::METERING_STATUS_REASON)
                ))
            }
            _ => {}
        }
    }
    let ledger = world.metering.inner.ledger();
    for record in world.tables.aggregated_records() {
        let id = format!("aggregated {}", record.key);
        let billed = ledger.contains_key(&record.key);
        if closed(record.key.hour) && !billed {
            continue;
        }
        let explained = match record.status {
            AggregatedStatus::Success => billed,
            AggregatedStatus::DuplicateRecord => billed,
            AggregatedStatus::Error => record.key.dimension == POISON,
            AggregatedStatus::CustomerNotSubscribed => refused_after_revocation(world, &record.key),
            // A dry run never sends: its test accounts' records end DryRunSubmitted, every
            // other account's stays pending until its window closes.
            AggregatedStatus::DryRunSubmitted => world.dry_run == Some(true),
            AggregatedStatus::SubmissionExpired if world.dry_run == Some(false) => true,
            // The window closed before the faults ended, on a send whose answer never
            // came: the best the pipeline can say is "may have been billed".
            AggregatedStatus::SubmissionExpired
                if closed(record.key.hour)
                    && record.status_reason.as_deref()
                        == Some(awsmp_core::submit::REASON_INTERRUPTED_SUBMISSION) =>
            {
                true
            }
            AggregatedStatus::SubmissionExpired => {
                record.quantity == 0
                    && record.status_reason.as_deref() == Some(REASON_ZERO_QUANTITY_SKIPPED)
            }
            _ => false,
        };
        if !explained {
            violations.push(format!(
                "{id}: ended {} ({:?}) with no fault of the schedule to explain it; billed: \
                 {billed} (liveness)",
                record.status, record.status_reason
            ));
        }
    }
    violations
}

/// Whether Marketplace answered a record of `key` `CustomerNotSubscribed` after its
/// buyer's entitlement was revoked: the only reason a record of an entitled buyer may
/// end `CustomerNotSubscribed`.
fn refused_after_revocation(world: &World, key: &awsmp_core::model::GroupKey) -> bool {
    let revocations = world.metering.inner.revocations();
    world
        .metering
        .inner
        .not_subscribed()
        .iter()
        .any(|answered| {
            answered.key == *key
                && revocations.iter().any(|revoked| {
                    revoked.license_arn == key.license_arn
                        && revoked.customer_aws_account_id == key.customer_aws_account_id
                        && answered.at >= revoked.at
                })
        })
}

/// A record billed by a call of ours whose answer never came back (a crash, a lost
/// answer), re-sent after its buyer's entitlement was revoked and then answered
/// `CustomerNotSubscribed`: nothing more can be learned by sending it again, and the
/// record must say that it may have been billed.
fn billed_before_revocation(world: &World, record: &awsmp_core::model::AggregatedRecord) -> bool {
    record.status == AggregatedStatus::CustomerNotSubscribed
        && record.possibly_billed == Some(true)
        && refused_after_revocation(world, &record.key)
}

/// Every call Marketplace refused with an exception was refused for the dimension the
/// schedule leaves out of the catalog; any other refusal is something the pipeline
/// sent that AWS refuses (a record outside the 24-hour window or the month-end grace,
/// in the future, malformed), which its own checks must have kept back.
fn refused_calls(world: &World) -> Vec<String> {
    // A call handed over inside the window and delayed in flight past it: the
    // submitter checked it as it went out (`submit/run/send.rs`); AWS judges arrival.
    let delayed = world.metering.delayed_past_window();
    world
        .metering
        .inner
        .refused_calls()
        .into_iter()
        .filter(|refused| refused.error_type != INVALID_DIMENSION)
        .filter(|refused| !delayed.contains(&refused.at))
        .map(|refused| {
            format!(
                "Marketplace refused a call of {} records at {} with {}: {}",
                refused.record_count, refused.at, refused.error_type, refused.message
            )
        })
        .collect()
}

/// Every terminal status that has a metric emitted it exactly once (retries, lost
/// responses and races included), and `AmbiguousSubmission` never counts a record that
/// was not in a call that may have billed it.
fn metrics(world: &World) -> Vec<String> {
    let mut violations = Vec::new();
    let rows = world.tables.raw_rows();
    let raw = |status: &str, reason: Option<&str>| -> u64 {
        rows.iter()
            .filter(|r| !r.sort_key.starts_with("event#"))
            .filter(|r| text(&r.attrs, attr::METERING_STATUS) == Some(status))
            .filter(|r| {
                reason.is_none_or(|x| text(&r.attrs, attr::METERING_STATUS_REASON) == Some(x))
            })
            .count() as u64
    };
    let records = world.tables.aggregated_records();
    let loud_expiries = records
        .iter()
        .filter(|r| r.status == AggregatedStatus::SubmissionExpired)
        .filter(|r| r.status_reason.as_deref() != Some(REASON_ZERO_QUANTITY_SKIPPED))
        .count() as u64;
    let late = ReasonCode::HourAlreadySubmitted.to_string();
    let m = &world.metrics;
    // A final write that took effect, lost its answer, and whose invocation then died
    // before its retry: the metric line that follows the write is never logged, and no
    // later invocation can tell that write from another writer's. At most that many
    // metrics are missing.
    let injected = world.sim.injected();
    let died_after_final_write = injected
        .iter()
        .filter(|lost| lost.kind == FaultKind::FinalWriteLostResponse)
        .filter(|lost| {
            injected.iter().any(|died| {
                matches!(died.kind, FaultKind::Crash | FaultKind::Stall)
                    && died.task == lost.task
                    && died.point > lost.point
            })
        })
        .count() as u64;
    for (what, metric_name, items) in [
        (
            "raw rows RejectedClientSide",
            metric::USAGE_RECORD_REJECTED,
            raw("RejectedClientSide", None),
        ),
        (
            "late raw rows (HourAlreadySubmitted)",
            metric::LATE_USAGE_AFTER_SUBMISSION,
            raw("RejectedClientSide", Some(late.as_str())),
        ),
        (
            "raw rows AggregationExpired",
            metric::USAGE_AGGREGATION_EXPIRED,
            raw("AggregationExpired", None),
        ),
        (
            "records SubmissionExpired",
            metric::USAGE_SUBMISSION_EXPIRED,
            loud_expiries,
        ),
    ] {
        let emitted = m.total(metric_name);
        if emitted > items || emitted + died_after_final_write < items {
            violations.push(format!(
                "metric {metric_name}: emitted {emitted} times for {items} {what}"
            ));
        }
    }
    let errors = records
        .iter()
        .filter(|r| r.status == AggregatedStatus::Error)
        .count() as u64;
    let unexpected = records
        .iter()
        .filter(|r| r.status_reason.as_deref() == Some(REASON_UNEXPECTED_DUPLICATE))
        .count() as u64;
    // At least once per record: a replayed record may be refused, or answered, again.
    for (metric_name, items, what) in [
        (metric::BATCH_METER_USAGE_EXCEPTION, errors, "Error records"),
        (
            metric::UNEXPECTED_DUPLICATE_RECORD,
            unexpected,
            "records something else billed first",
        ),
    ] {
        let emitted = m.total(metric_name);
        if emitted < items {
            violations.push(format!(
                "metric {metric_name}: emitted {emitted} times for {items} {what}"
            ));
        }
    }
    violations.extend(world.metering.overlong_leases());
    let ambiguous = m.total(metric::AMBIGUOUS_SUBMISSION);
    let could_have_billed = world.metering.ambiguous_sends();
    if ambiguous > could_have_billed {
        violations.push(format!(
            "metric {}: {ambiguous} records reported ambiguous, but only {could_have_billed} \
             were in calls whose answer was lost or failed",
            metric::AMBIGUOUS_SUBMISSION
        ));
    }
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

/// Profile retention: a profile is set to expire only for a deprovisioned license of
/// this product, and exactly `PROFILE_RETENTION_DAYS` after its deprovisioning window
/// ends; never a live buyer's, never one another product's stack saw.
fn profile_expiries(world: &World) -> Vec<String> {
    let mut violations = Vec::new();
    let rows = world.subscribers.rows();
    for profile in world.profiles.all() {
        let (license, account) = (&profile.license_arn, &profile.customer_aws_account_id);
        let Some(at) = world.profiles.expires_at(license, account) else {
            continue;
        };
        let id = format!("profile {license}");
        if !world.deprovisioned.contains(license) {
            violations.push(format!(
                "{id}: set to expire at {at} but never deprovisioned"
            ));
            continue;
        }
        let expected = rows
            .iter()
            .find(|r| r.license_arn == *license && r.customer_aws_account_id == *account)
            .and_then(|r| r.deprovisioning_expiry)
            .map(|e| e + chrono::Duration::days(crate::scenario::PROFILE_RETENTION_DAYS));
        if expected != Some(at) {
            violations.push(format!(
                "{id}: expires at {at}, not {PROFILE_DAYS} days after its deprovisioning window ({expected:?})",
                PROFILE_DAYS = crate::scenario::PROFILE_RETENTION_DAYS
            ));
        }
    }
    violations
}

//! The usage API across the edges of time, held after settling: every batch the edge
//! seller ([`crate::actors::edge_seller`]) posted gets its verdicts (settling injects no
//! fault); `accepted` means stored once and billable then (its hour's record sendable,
//! under the stack's lock, before Marketplace's window for it closes); `rejected` means
//! nothing stored for that event unless an earlier write stored it, and then the
//! verdict must be `duplicate` or `conflict`; usage that could still be billed is not
//! rejected for time; and no producer's event is answered as another's.

use std::collections::{BTreeMap, BTreeSet};

use awsmp_core::model::RawUsageRow;
use awsmp_core::time::{HourBucket, Instant, MeteringLockHours, format_instant};
use chrono::{Datelike, Duration, TimeZone, Utc};

use crate::actors::edge_seller::{EdgeLog, Posted, Producer};
use crate::actors::reconcile::EDGES_PRICE;

/// The first instant of the month after `t`'s.
fn next_month(t: Instant) -> Instant {
    let (year, month) = match t.month() {
        12 => (t.year() + 1, 1),
        m => (t.year(), m + 1),
    };
    Utc.with_ymd_and_hms(year, month, 1, 0, 0, 0)
        .single()
        .unwrap_or(t)
}

/// Whether usage stamped `stamped`, written at `at`, can be billed: its hour's record
/// (stamped at the hour's start) may be sent `lock` hours after the hour's start (a
/// lock of 1: once the hour ends; last month's hours from 03:00 on the 1st), and Marketplace takes it until 24 hours after
/// the hour's start, last month's only until 06:00 on the 1st. Written from AWS's
/// rules here, not from the product's code.
fn billable(stamped: Instant, at: Instant, lock: MeteringLockHours) -> bool {
    let start = HourBucket::containing(stamped).start();
    let month_after = next_month(start);
    let opens = (start + Duration::hours(lock.hours())).min(month_after + Duration::hours(3));
    let closes = (start + Duration::hours(24)).min(month_after + Duration::hours(6));
    stamped <= at && at.max(opens) < closes
}

/// The edge seller's invariant, over what it was answered and the table it wrote.
pub fn check(log: &EdgeLog, rows: &[RawUsageRow]) -> Vec<String> {
    let mut violations = Vec::new();
    let Some(lock) = log.lock else {
        return violations;
    };
    let stored = |key: &str| {
        let suffix = format!("#{key}");
        rows.iter()
            .filter(|r| {
                r.license_arn == log.license
                    && !r.sort_key.starts_with("event#")
                    && r.sort_key.ends_with(&suffix)
            })
            .count()
    };
    // Events written so far: (producer, id) -> when.
    let mut written: BTreeMap<(Producer, String), Instant> = BTreeMap::new();
    let mut accepted_keys: BTreeSet<String> = BTreeSet::new();
    for answer in &log.answers {
        let when = format_instant(answer.at);
        if answer.status != 200 || answer.verdicts.len() != answer.events.len() {
            violations.push(format!(
                "usage API at {when}: a batch of {} events answered {} with no fault injected: \
                 its events got no verdict, and a retry is answered the same",
                answer.events.len(),
                answer.status
            ));
            continue;
        }
        for (event, (status, reason)) in answer.events.iter().zip(&answer.verdicts) {
            let who = (event.producer, event.id.clone());
            let stamped = event.stamped.unwrap_or(answer.at);
            let earlier = written.get(&who).copied();
            let name = event.label();
            match (status.as_str(), earlier) {
                ("accepted", Some(first)) => violations.push(format!(
                    "usage API at {when}: {name} accepted again (first written {})",
                    format_instant(first)
                )),
                ("accepted", None) => {
                    if !billable(stamped, answer.at, lock) {
                        violations.push(format!(
                            "usage API at {when}: {name} stamped {} accepted, but its hour's \
                             record can no longer be sent before its window closes",
                            format_instant(stamped)
                        ));
                    }
                    written.insert(who, answer.at);
                    accepted_keys.insert(event.key());
                }
                ("duplicate" | "conflict", None) => violations.push(format!(
                    "usage API at {when}: {name} answered {status}, yet this producer never \
                     wrote it: it collided with another producer's event"
                )),
                ("conflict", Some(_)) => violations.push(format!(
                    "usage API at {when}: {name} answered conflict for a retry of the same usage"
                )),
                ("duplicate", Some(_)) => {}
                ("rejected", Some(first)) => violations.push(format!(
                    "usage API at {when}: {name} answered rejected ({}), yet it was written at {} \
                     and billable then: the verdict must say duplicate",
                    reason.as_deref().unwrap_or("?"),
                    format_instant(first)
                )),
                ("rejected", None) => {
                    let for_time = reason.as_deref() == Some("TimestampOutOfWindow");
                    // The product refuses usage its pipeline could not send before the
                    // window closes (`PIPELINE_ROOM` before it): only usage billable
                    // with that room to spare must be accepted.
                    let room = awsmp_core::guardrails::sendable::PIPELINE_ROOM;
                    if for_time && billable(stamped, answer.at + room, lock) {
                        violations.push(format!(
                            "usage API at {when}: {name} stamped {} rejected for its time, yet \
                             its record could still be billed",
                            format_instant(stamped)
                        ));
                    }
                }
                (other, _) => {
                    violations.push(format!("usage API at {when}: {name} answered {other:?}"))
                }
            }
        }
    }
    // Stored once each; never for an event no verdict accepted.
    let all_keys: BTreeSet<String> = log
        .answers
        .iter()
        .flat_map(|a| a.events.iter().map(Posted::key))
        .collect();
    for key in all_keys {
        let count = stored(&key);
        let want = usize::from(accepted_keys.contains(&key));
        if count != want {
            violations.push(format!(
                "usage API: the event stored under {:.60} is stored {count} times, \
                 accepted {want} times",
                key
            ));
        }
    }
    violations
}

/// The edge seller's read-backs, once settled: every accepted event is found (`200`),
/// and a counted one's record says what it is worth under the buyer's agreement,
/// exactly its quantity x [`EDGES_PRICE`] in USD, labelled `priced` (the buyer's card is
/// kept on its row by then: [`crate::check::entitlements`] holds that).
pub fn read_backs(log: &EdgeLog) -> Vec<String> {
    let mut violations = Vec::new();
    for (event, status, answer) in &log.read_backs {
        if *status != 200 {
            violations.push(format!(
                "{}: accepted, yet read back {status}: {answer} (read-back)",
                event.label()
            ));
            continue;
        }
        if answer["fate"]["state"] != "counted" {
            continue;
        }
        let record = &answer["fate"]["record"];
        let Some(quantity) = record["quantity"].as_i64() else {
            violations.push(format!(
                "{}: a counted record without its quantity: {answer} (read-back)",
                event.label()
            ));
            continue;
        };
        let worth = (EDGES_PRICE * rust_decimal::Decimal::from(quantity))
            .normalize()
            .to_string();
        let want = serde_json::json!({"amount": worth, "currency": "USD", "basis": "priced"});
        if record["estimatedCharge"] != want {
            violations.push(format!(
                "{}: its record of {quantity} is said to be worth {}, the agreement prices it {want} (read-back)",
                event.label(),
                record["estimatedCharge"]
            ));
        }
    }
    violations
}

//! Conservation in one Region after a settled schedule: the workspace's one checker
//! ([`awsmp_core::memory::conservation`]) over the in-memory tables, the simulated
//! Marketplace's ledger and every quantity Marketplace was sent; then what only the
//! simulation knows enough to hold: a row written before the pipeline ran is never
//! late usage (every fold of its group includes it); no fold is left half done; a
//! record whose hour another writer billed first is never billed, and says so; and a
//! `DuplicateRecord` read as billed by our earlier attempt had one that may have.

use std::collections::BTreeSet;

use awsmp_core::memory::conservation::{Billed, Books, Conservation};
use awsmp_core::model::{AggregatedStatus, GroupKey, attr};
use awsmp_core::submit::outcome::{REASON_BILLED_BY_EARLIER_ATTEMPT, REASON_UNEXPECTED_DUPLICATE};

use crate::check::{refused_after_revocation, text};
use crate::sim::FaultKind;
use crate::world::World;

/// Every violation of conservation in `world` (empty when it holds).
pub fn check(world: &World) -> Vec<String> {
    let records = world.tables.aggregated_records();
    let rival = world.metering.rival_groups();
    let mut books = Books::of_tables(&world.tables.raw_rows(), &records);
    books.billed = world
        .metering
        .inner
        .billed()
        .into_iter()
        .map(|(key, entry)| Billed {
            key,
            quantity: entry.quantity,
            metering_record_id: entry.metering_record_id,
        })
        .collect();
    books.sent = world.metering.sent();
    // A record billed by a call of ours whose answer never came back (a crash, a lost
    // answer), re-sent after its buyer's entitlement was revoked and then answered
    // `CustomerNotSubscribed`: nothing more can be learned by sending it again, and the
    // record must say that it may have been billed.
    let refused_after_billing: BTreeSet<GroupKey> = records
        .iter()
        .filter(|r| {
            r.status == AggregatedStatus::CustomerNotSubscribed
                && r.possibly_billed == Some(true)
                && refused_after_revocation(world, &r.key)
        })
        .map(|r| r.key.clone())
        .collect();
    let mut violations = Conservation {
        settled: true,
        direct: world.direct(),
        billed_by_another: rival.clone(),
        refused_after_billing,
    }
    .check(&books);

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

    // Groups a call of ours may have billed: one of ours got them billed, or one of
    // ours ended without a definite answer.
    let ledger = world.metering.inner.ledger();
    let mut sent_or_ambiguous = world.metering.ambiguous_groups();
    sent_or_ambiguous.extend(ledger.keys().filter(|k| !rival.contains(*k)).cloned());
    // A claim nobody released (its invocation crashed or was killed past its timeout,
    // or the claim's answer was lost) may or may not have been sent: the protocol
    // rightly reads a lapsed claim as possibly billed.
    let died_holding_claims = world.sim.injected().iter().any(|f| {
        matches!(f.kind, FaultKind::Crash | FaultKind::Stall)
            || (f.kind == FaultKind::StoreLostResponse && f.place == "aggregated.claim_all")
    });
    for record in &records {
        let id = format!("aggregated {}", record.key);
        if record.folding {
            violations.push(format!("{id}: a fold never completed"));
        }
        let reason = record.status_reason.as_deref();
        let ours_may_have = died_holding_claims || sent_or_ambiguous.contains(&record.key);
        if rival.contains(&record.key) {
            // Another writer billed the hour first: ours is never billed, and says so.
            let told = match record.status {
                // Never sent again: nothing of ours was billed.
                AggregatedStatus::Error | AggregatedStatus::SubmissionExpired => true,
                // A dry run never sends.
                AggregatedStatus::DryRunSubmitted => world.dry_run() == Some(true),
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
        } else if !world.direct()
            && record.status == AggregatedStatus::DuplicateRecord
            && reason == Some(REASON_BILLED_BY_EARLIER_ATTEMPT)
            && !ours_may_have
        {
            violations.push(format!(
                "{id}: DuplicateRecord read as billed by our earlier attempt, but no call of ours \
                 may have billed it"
            ));
        }
    }
    violations
}

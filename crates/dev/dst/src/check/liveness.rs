//! Liveness: every row written in its window was counted (or is a late row for an hour
//! already sent), and every group was billed: the schedule's faults all end long before
//! the window closes. Only the refused dimension may end `Error` (the operator may
//! define it and replay, then it bills), only a record Marketplace refused after its
//! buyer's entitlement was revoked may end `CustomerNotSubscribed`, and a dry run's or
//! a closed hour's endings are explained by the schedule itself.

use awsmp_core::model::{AggregatedStatus, ReasonCode, attr};
use awsmp_core::submit::REASON_ZERO_QUANTITY_SKIPPED;

use crate::check::{refused_after_revocation, text};
use crate::scenario::POISON;
use crate::world::World;

/// Every violation of it in `world` (empty when it holds).
pub fn check(world: &World) -> Vec<String> {
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
            AggregatedStatus::DryRunSubmitted => world.dry_run() == Some(true),
            AggregatedStatus::SubmissionExpired if world.dry_run() == Some(false) => true,
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

//! Metrics after a settled schedule: every terminal status that has a metric emitted it
//! exactly once (retries, lost responses and races included), the refusals at least
//! once per record, no claim outlived its invocation, and `AmbiguousSubmission` never
//! counts a record that was not in a call that may have billed it.

use std::collections::BTreeMap;

use awsmp_core::model::{AggregatedStatus, ReasonCode, attr};
use awsmp_core::pipeline::retry::RetryPolicy;
use awsmp_core::ports::metric;
use awsmp_core::submit::REASON_ZERO_QUANTITY_SKIPPED;
use awsmp_core::submit::outcome::REASON_UNEXPECTED_DUPLICATE;

use crate::check::text;
use crate::sim::FaultKind;
use crate::world::World;

/// Every violation of it in `world` (empty when it holds).
pub fn check(world: &World) -> Vec<String> {
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
    // A final write every attempt of which lost its answer: its writer gave up on it (the
    // write failed, for all it knew) although it took effect, so the metric line that
    // follows the write is never logged either, and no later invocation can tell it from
    // another writer's. At most one per `RetryPolicy::STORE.attempts` lost answers of one
    // task.
    let mut lost_by_task: BTreeMap<usize, u64> = BTreeMap::new();
    for lost in injected
        .iter()
        .filter(|lost| lost.kind == FaultKind::FinalWriteLostResponse)
    {
        *lost_by_task.entry(lost.task).or_default() += 1;
    }
    let attempts = u64::from(RetryPolicy::STORE.attempts);
    let gave_up_after_final_write: u64 = lost_by_task.values().map(|n| n / attempts).sum();
    let died_after_final_write = died_after_final_write + gave_up_after_final_write;
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

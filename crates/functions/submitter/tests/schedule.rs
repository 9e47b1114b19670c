//! The template's schedule and timeout for the submitter are the ones its budget is
//! computed for (`awsmp_core::submit::schedule`): a period other than the one the run
//! stops before would overlap runs or leave the quota idle.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use awsmp_core::submit::schedule::{PERIOD_SECONDS, TIMEOUT_SECONDS};
use awsmp_local_aws::{EventSource, StackTemplate, workspace_root};

#[test]
fn the_template_runs_the_submitter_every_period_under_its_timeout() {
    let template = StackTemplate::load(
        &workspace_root().join("template-main.yaml"),
        &[("ProductCode", "abc"), ("StageName", "test")],
    )
    .unwrap();
    let submitter = template.function("submitter").unwrap();
    assert_eq!(
        submitter.timeout_secs,
        Some(u64::try_from(TIMEOUT_SECONDS).unwrap())
    );
    let schedules: Vec<u32> = submitter
        .events
        .iter()
        .filter_map(|e| match e {
            EventSource::Schedule { every_minutes } => Some(*every_minutes),
            _ => None,
        })
        .collect();
    assert_eq!(schedules, vec![u32::try_from(PERIOD_SECONDS / 60).unwrap()]);
    let reserved = template
        .properties(&submitter.logical_id)
        .and_then(|p| p.get("ReservedConcurrentExecutions"))
        .and_then(serde_norway::Value::as_u64);
    assert_eq!(reserved, Some(1), "one run at a time");
}

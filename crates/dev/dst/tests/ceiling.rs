//! The submitter's schedule keeps its promises while draining a backlog at the quota
//! (a smaller one than `make bench` prints): each run stops before the next tick, every
//! call is made inside its run's invocation, no claim outlives its run, every record is
//! billed exactly once, and the schedule sends at least 95% of the quota; two stacks
//! at half the quota each are never throttled.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use awsmp_core::time::parse_usage_timestamp;
use awsmp_dst::ceiling::{Backlog, Schedule, drain};

#[tokio::test(start_paused = true)]
async fn a_backlog_drains_at_the_quota_without_overlapping_runs() {
    let start = parse_usage_timestamp("2026-11-18T12:00:00Z").unwrap();
    for stacks in [1, 2] {
        let backlog = Backlog {
            stacks,
            records_per_stack: 20_000 / stacks,
            startup_ms: 500,
        };
        let figures = drain(Schedule::current(), backlog, start).await.unwrap();
        assert!(figures.violations.is_empty(), "{:?}", figures.violations);
        for stack in &figures.stacks {
            assert_eq!(stack.runs_past_next_tick, 0, "{stack:?}");
            assert_eq!(stack.throttled_calls, 0, "{stack:?}");
            assert!(stack.runs > 1, "{stack:?}");
        }
        assert!(
            figures.share_of_quota >= 0.95,
            "{stacks} stack(s): {:.3} of the quota",
            figures.share_of_quota
        );
    }
}

#[tokio::test(start_paused = true)]
async fn the_five_minute_schedule_left_the_quota_idle_between_runs() {
    // Two runs' worth at the old schedule: the gap between them shows.
    let start = parse_usage_timestamp("2026-11-18T12:00:00Z").unwrap();
    let backlog = Backlog {
        stacks: 1,
        records_per_stack: 60_000,
        startup_ms: 500,
    };
    let before = drain(Schedule::five_minutes(), backlog, start)
        .await
        .unwrap();
    let now = drain(Schedule::current(), backlog, start).await.unwrap();
    assert!(before.violations.is_empty(), "{:?}", before.violations);
    assert!(
        before.share_of_quota + 0.1 < now.share_of_quota,
        "before {:.3}, now {:.3}",
        before.share_of_quota,
        now.share_of_quota
    );
}

//! `make bench`: the submitter draining a backlog of 200,000 pending records at the
//! `BatchMeterUsage` quota (10 requests/s, the simulator's token bucket) on its
//! schedule, one stack alone and two stacks sharing the quota at 5 requests/s each,
//! today's schedule beside the one before it. Prints records billed per hour as a share
//! of the 900,000 the quota allows, the time to drain, and the schedule's promises
//! (runs past the next tick, calls outside their run, claims past their run, records
//! billed). Simulated time (tokio's paused clock): the figures do not depend on this
//! machine; each run is charged `STARTUP_MS` before its first call.

#![allow(clippy::expect_used)]

use awsmp_core::time::parse_usage_timestamp;
use awsmp_dst::ceiling::{Backlog, Schedule, drain};

/// Each run's start-up: Lambda's invoke of a warm function and the run's first index
/// queries (a cold start adds about 100 ms more for these Rust functions).
const STARTUP_MS: i64 = 500;
const RECORDS: usize = 200_000;

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a paused runtime");
    let start = parse_usage_timestamp("2026-11-18T12:00:00Z").expect("a start");
    println!(
        "submitter at the quota: a backlog of {RECORDS} pending records per stack (20 completed hours), 10 requests/s for the account, {STARTUP_MS} ms start-up a run"
    );
    for stacks in [1usize, 2] {
        for schedule in [Schedule::current(), Schedule::five_minutes()] {
            let backlog = Backlog {
                stacks,
                records_per_stack: RECORDS,
                startup_ms: STARTUP_MS,
            };
            let wall = std::time::Instant::now();
            let figures = runtime
                .block_on(drain(schedule, backlog, start))
                .expect("the simulated Marketplace is set up");
            let runs: usize = figures.stacks.iter().map(|s| s.runs).sum();
            let past: usize = figures.stacks.iter().map(|s| s.runs_past_next_tick).sum();
            let throttled: usize = figures.stacks.iter().map(|s| s.throttled_calls).sum();
            println!(
                "  {stacks} stack(s) at {} requests/s each, {}: {:.0} records/h = {:.1}% of 900,000; {} records drained in {:.1} min; {runs} runs, {past} still going at the next tick, {throttled} calls throttled; {} ({:.1} s to compute)",
                10 / stacks,
                schedule.name,
                figures.records_per_hour,
                figures.share_of_quota * 100.0,
                RECORDS * stacks,
                figures.drained_after_seconds / 60.0,
                if figures.violations.is_empty() {
                    "every call inside its run, no claim past its run, each record billed once"
                        .to_string()
                } else {
                    format!(
                        "VIOLATIONS: {:?}",
                        &figures.violations[..figures.violations.len().min(5)]
                    )
                },
                wall.elapsed().as_secs_f64(),
            );
        }
    }
}

//! The submitter's schedule: one run a minute (`rate(1 minute)`, reserved concurrency
//! 1), each sending until just before the next tick, so that with a backlog the runs
//! follow each other with only their start-up between them and never overlap, and a
//! crashed run costs at most one minute. Each run's claims end with its invocation
//! ([`Budget::end`]), whatever its budget says.
//!
//! | | before (5-minute runs, 240 s timeout, 20 s margin) | now |
//! |---|---|---|
//! | sending per period | 220 s of 300 | up to 58 s of 60 |
//! | records per hour at 10 requests/s | 660,000 (73%) | up to 870,000 (97%) less each run's start-up |
//!
//! `make bench` measures it on the real use case (`crates/dev/dst/benches/submitter_ceiling.rs`).

use chrono::Duration;

use crate::pipeline::budget::Budget;
use crate::time::Instant;

/// Seconds between scheduled runs (template-main.yaml's `rate(1 minute)`).
pub const PERIOD_SECONDS: i64 = 60;
/// A run stops starting batches this long before the next tick, so the batch in
/// flight and its write-back end before the next run starts.
pub const HANDOVER_SECONDS: i64 = 2;
/// ... and this long before its Lambda deadline (one batch with its bisection and
/// unprocessed retry, and the writes, fit well inside it).
pub const DEADLINE_MARGIN_SECONDS: i64 = 20;
/// The Lambda timeout the template gives the submitter: the period plus the margin and
/// room for a late start, so the period, not the timeout, ends a run.
pub const TIMEOUT_SECONDS: i64 = 90;

/// Records one `BatchMeterUsage` request carries.
pub const RECORDS_PER_REQUEST: u64 = 25;

/// Records an hour `requests_per_second` sustains without pause (10/s: the account's
/// whole quota in a Region, 900,000).
pub fn quota_records_per_hour(requests_per_second: u32) -> u64 {
    u64::from(requests_per_second) * RECORDS_PER_REQUEST * 3600
}

/// Records an hour the schedule sends at `requests_per_second` with a backlog: the
/// sending part of each period (before each run's own start-up).
pub fn scheduled_records_per_hour(requests_per_second: u32) -> u64 {
    let sending = u64::try_from(PERIOD_SECONDS - HANDOVER_SECONDS).unwrap_or(0);
    let period = u64::try_from(PERIOD_SECONDS).unwrap_or(1).max(1);
    quota_records_per_hour(requests_per_second) * sending / period
}

/// The budget of a run started (wall clock) at `started` by the tick at `event_time`,
/// in an invocation whose own budget is `invocation` (its deadline and end): stop
/// starting batches [`HANDOVER_SECONDS`] before the next tick. The tick is the event's
/// time when it is at most one period old, as a scheduled event is; otherwise (a
/// replayed event, a clock far from the wall's: the local stack's virtual time) the
/// run's own start stands in for it. Without a deadline (tools, tests) the run is not
/// cut short.
pub fn run_budget(event_time: Instant, started: Instant, invocation: Budget) -> Budget {
    if invocation.end().is_none() {
        return invocation;
    }
    let lag = started - event_time;
    let tick = if lag >= Duration::zero() && lag <= Duration::seconds(PERIOD_SECONDS) {
        event_time
    } else {
        started
    };
    invocation.stopping_by(tick + Duration::seconds(PERIOD_SECONDS - HANDOVER_SECONDS))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::time::parse_usage_timestamp;

    fn at(s: &str) -> Instant {
        parse_usage_timestamp(s).unwrap()
    }

    #[test]
    fn a_run_stops_before_the_next_tick_and_holds_claims_to_its_end() {
        let tick = at("2026-12-03T10:00:00Z");
        let started = tick + Duration::milliseconds(300);
        let lambda_end = started + Duration::seconds(TIMEOUT_SECONDS);
        let invocation = Budget::before(lambda_end, Duration::seconds(DEADLINE_MARGIN_SECONDS));
        let budget = run_budget(tick, started, invocation);
        assert_eq!(budget.deadline(), Some(at("2026-12-03T10:00:58Z")));
        assert_eq!(budget.end(), Some(lambda_end));
        // A run retried 50 s late stops at the same point: the next tick is on time.
        let late = run_budget(tick, tick + Duration::seconds(50), invocation);
        assert_eq!(late.deadline(), Some(at("2026-12-03T10:00:58Z")));
        // An event time far from the wall clock: the run's start stands in.
        let virtual_time = run_budget(at("2026-12-03T06:00:00Z"), started, invocation);
        assert_eq!(
            virtual_time.deadline(),
            Some(started + Duration::seconds(58))
        );
        // A short Lambda deadline still wins.
        let short = Budget::before(started + Duration::seconds(30), Duration::seconds(20));
        assert_eq!(
            run_budget(tick, started, short).deadline(),
            Some(started + Duration::seconds(10))
        );
        assert_eq!(
            run_budget(tick, started, Budget::UNLIMITED),
            Budget::UNLIMITED
        );
    }

    #[test]
    fn the_schedule_sends_most_of_the_quota() {
        assert_eq!(quota_records_per_hour(10), 900_000);
        assert_eq!(scheduled_records_per_hour(10), 870_000);
        assert_eq!(scheduled_records_per_hour(5), 435_000);
    }
}

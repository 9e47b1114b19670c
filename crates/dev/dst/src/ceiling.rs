//! The submitter at the quota's ceiling: a backlog of pending records drained by the
//! real submitter use case on its schedule (a run each period, one at a time as
//! reserved concurrency 1 allows, a tick that finds the previous run still going
//! retried until it is a minute old, as Lambda retries a throttled scheduled event),
//! against the Metering simulator's engine and its quota (the simulator's own token
//! bucket, 10 requests/s with a burst of 10, fed the simulation's time and shared by
//! every stack of the account and Region; a call over it is refused with
//! `ThrottlingException`). One or more stacks (products) share that quota, each paced
//! at its share. Time is tokio's paused clock: every sleep (pacing, backoff, the wait for
//! the next tick, each run's start-up) advances it exactly, so concurrent stacks share
//! one timeline.
//!
//! It measures the records billed per hour as a share of the quota and the time to
//! drain, and checks what the schedule promises: no run still going when the next
//! tick fires, every call made inside its run's invocation, no claim held past the
//! invocation that took it, and nothing billed twice. `make bench` prints it for a
//! backlog of 200,000 records (`benches/submitter_ceiling.rs`); `tests/ceiling.rs`
//! checks it on a smaller one.

use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use awsmp_core::aggregate::ZeroQuantityPolicy;
use awsmp_core::memory::fixtures::pending_record;
use awsmp_core::memory::{MemorySubscriberStore, MemoryTables, RecordingMetrics};
use awsmp_core::model::{AggregatedStatus, GroupKey};
use awsmp_core::pipeline::budget::Budget;
use awsmp_core::ports::{Clock, MeteringApi, MeteringError, MeteringRecord, RecordVerdict};
use awsmp_core::submit::answer;
use awsmp_core::submit::schedule;
use awsmp_core::submit::{
    DeploymentMode, MeteringMode, PENDING_PAGE_RECORDS, SubmitPorts, SubmitSettings, submit,
};
use awsmp_core::time::{HourBucket, Instant};
use awsmp_marketplace_sim::throttle::TokenBucket;
use awsmp_marketplace_sim::{IdenticalRetryStatus, ThrottleConfig};
use chrono::Duration;

use crate::marketplace::{MarketplaceError, SimMarketplace};

/// How the submitter is scheduled.
#[derive(Debug, Clone, Copy)]
pub struct Schedule {
    /// What to call it in the figures.
    pub name: &'static str,
    /// Seconds between ticks.
    pub period_seconds: i64,
    /// The Lambda timeout.
    pub timeout_seconds: i64,
    /// The budget of a run: (tick, start, the invocation's own budget) -> budget.
    pub budget: fn(Instant, Instant, Budget) -> Budget,
}

impl Schedule {
    /// Today's: `rate(1 minute)`, each run stopping before the next tick
    /// ([`schedule::run_budget`], what the handler does).
    pub fn current() -> Self {
        Schedule {
            name: "rate(1 minute), runs until 2 s before the next tick",
            period_seconds: schedule::PERIOD_SECONDS,
            timeout_seconds: schedule::TIMEOUT_SECONDS,
            budget: schedule::run_budget,
        }
    }

    /// The schedule before it: `rate(5 minutes)`, 240 s timeout, 20 s margin.
    pub fn five_minutes() -> Self {
        Schedule {
            name: "rate(5 minutes), 240 s timeout (before)",
            period_seconds: 300,
            timeout_seconds: 240,
            budget: |_, _, invocation| invocation,
        }
    }
}

/// One backlog to drain.
#[derive(Debug, Clone, Copy)]
pub struct Backlog {
    /// Stacks sharing the quota (each its own product, tables and submitter).
    pub stacks: usize,
    /// Pending records per stack, in the completed hours before the start.
    pub records_per_stack: usize,
    /// Each run's start-up before its first call (the invocation, the first queries).
    pub startup_ms: i64,
}

/// One stack's runs.
#[derive(Debug, Clone, Default)]
pub struct StackFigures {
    /// Records billed.
    pub billed: usize,
    /// Runs.
    pub runs: usize,
    /// Seconds from the start until its last record was billed.
    pub drained_after_seconds: f64,
    /// Runs still going when the next tick fired (in AWS: a throttled tick).
    pub runs_past_next_tick: usize,
    /// `BatchMeterUsage` calls refused by the quota.
    pub throttled_calls: usize,
}

/// What draining the backlog came to.
#[derive(Debug, Clone, Default)]
pub struct CeilingFigures {
    /// Per stack.
    pub stacks: Vec<StackFigures>,
    /// Seconds until every stack was drained.
    pub drained_after_seconds: f64,
    /// Records billed per hour, all stacks together, while draining.
    pub records_per_hour: f64,
    /// As a share of the quota's 900,000 records per hour.
    pub share_of_quota: f64,
    /// Broken promises (empty when the schedule kept them all).
    pub violations: Vec<String>,
}

/// A clock on tokio's (paused) time, from `origin`.
#[derive(Debug, Clone)]
pub struct PausedClock {
    origin: Instant,
    start: tokio::time::Instant,
}

impl PausedClock {
    /// Now is `origin`.
    pub fn new(origin: Instant) -> Self {
        PausedClock {
            origin,
            start: tokio::time::Instant::now(),
        }
    }
}

#[async_trait]
impl Clock for PausedClock {
    fn now(&self) -> Instant {
        let elapsed = tokio::time::Instant::now() - self.start;
        self.origin + Duration::from_std(elapsed).unwrap_or_default()
    }

    async fn sleep(&self, duration: std::time::Duration) {
        tokio::time::sleep(duration).await;
    }
}

/// The run a call belongs to: (start, invocation end), set while a run is going.
type Window = Arc<Mutex<Option<(Instant, Instant)>>>;

/// The account's quota: the simulator's token bucket on the simulation's time (a real
/// instant standing for the start, the elapsed simulated time added to it).
struct Quota {
    bucket: TokenBucket,
    real_start: std::time::Instant,
    start: Instant,
}

impl Quota {
    fn new(start: Instant) -> Self {
        let real_start = std::time::Instant::now();
        Quota {
            bucket: TokenBucket::new(ThrottleConfig::default(), real_start),
            real_start,
            start,
        }
    }

    /// Takes one call's token at simulated time `at`.
    fn try_take(&mut self, at: Instant) -> bool {
        let elapsed = (at - self.start).to_std().unwrap_or_default();
        self.bucket.try_take(self.real_start + elapsed)
    }
}

/// The Marketplace as one stack calls it: under the account's quota; notes each call
/// outside its run's invocation, and each throttled call.
struct Watched {
    inner: SimMarketplace,
    quota: Arc<Mutex<Quota>>,
    clock: Arc<dyn Clock>,
    window: Window,
    outside: Arc<Mutex<Vec<String>>>,
    throttled: Arc<Mutex<usize>>,
}

#[async_trait]
impl MeteringApi for Watched {
    async fn batch_meter_usage(
        &self,
        records: &[MeteringRecord],
    ) -> Result<Vec<RecordVerdict>, MeteringError> {
        let at = self.clock.now();
        let window = *self.window.lock().unwrap_or_else(PoisonError::into_inner);
        match window {
            Some((start, end)) if at >= start && at <= end => {}
            other => self
                .outside
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(format!("a call at {at} outside its run {other:?}")),
        }
        let allowed = self
            .quota
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .try_take(at);
        if !allowed {
            *self
                .throttled
                .lock()
                .unwrap_or_else(PoisonError::into_inner) += 1;
            return Err(answer::refusal(
                "ThrottlingException",
                "Rate exceeded: BatchMeterUsage allows 10 requests/second (burst 10)",
            ));
        }
        self.inner.batch_meter_usage(records).await
    }
}

const ACCOUNT: &str = "111122223333";
const DIMENSIONS: [&str; 2] = ["requests", "storage"];
/// Hours the backlog spreads over (completed hours before the start, all inside the
/// window).
const BACKLOG_HOURS: i64 = 20;

/// Drains `backlog` on `schedule`, starting at `start` (a tick, at least a day after a
/// month's start). Call it inside a paused tokio runtime (`start_paused`).
pub async fn drain(
    schedule: Schedule,
    backlog: Backlog,
    start: Instant,
) -> Result<CeilingFigures, MarketplaceError> {
    let clock = Arc::new(PausedClock::new(start));
    let shared_clock: Arc<dyn Clock> = clock.clone();
    let share = u32::try_from(10 / backlog.stacks.max(1))
        .unwrap_or(1)
        .max(1);
    let mut tasks = Vec::new();
    let mut marketplaces = Vec::new();
    // One account and Region: one quota; each stack its own product.
    let quota = Arc::new(Mutex::new(Quota::new(start)));
    for index in 0..backlog.stacks {
        let product = format!("prod-ceiling-{index}");
        let marketplace = SimMarketplace::on_clock(
            &product,
            &DIMENSIONS,
            shared_clock.clone(),
            7 + index as u64,
            IdenticalRetryStatus::default(),
        )?;
        // Pages of the pending index as large as the submitter asks DynamoDB for.
        let tables = MemoryTables::with_page_size(PENDING_PAGE_RECORDS);
        let licenses = backlog
            .records_per_stack
            .div_ceil(DIMENSIONS.len() * BACKLOG_HOURS as usize);
        let mut written = 0;
        'fill: for hour_back in (2..2 + BACKLOG_HOURS).rev() {
            let hour = HourBucket::containing(start - Duration::hours(hour_back));
            for l in 0..licenses {
                let license =
                    format!("arn:aws:license-manager::123456789012:license:l-{index:02}{l:014}");
                if hour_back == 1 + BACKLOG_HOURS {
                    marketplace.entitle(&license, ACCOUNT)?;
                }
                for dimension in DIMENSIONS {
                    if written == backlog.records_per_stack {
                        break 'fill;
                    }
                    let key = GroupKey {
                        license_arn: license.clone(),
                        customer_aws_account_id: ACCOUNT.to_string(),
                        dimension: dimension.to_string(),
                        hour,
                    };
                    tables.insert_aggregated(pending_record(key, &product, 3, 1), start);
                    written += 1;
                }
            }
        }
        let window: Window = Arc::new(Mutex::new(None));
        let outside = Arc::new(Mutex::new(Vec::new()));
        let throttled = Arc::new(Mutex::new(0));
        let ports = SubmitPorts {
            aggregated: Arc::new(tables.aggregated_store()),
            subscribers: Arc::new(MemorySubscriberStore::new()),
            metering: Arc::new(Watched {
                inner: marketplace.clone(),
                quota: quota.clone(),
                clock: shared_clock.clone(),
                window: window.clone(),
                outside: outside.clone(),
                throttled: throttled.clone(),
            }),
            metrics: Arc::new(RecordingMetrics::default()),
            clock: shared_clock.clone(),
        };
        let mut settings = SubmitSettings::new(
            product.clone(),
            MeteringMode::Live,
            ZeroQuantityPolicy::Defer,
            DeploymentMode::Full,
        );
        settings.min_call_interval = std::time::Duration::from_millis(1000 / u64::from(share));
        marketplaces.push(marketplace);
        tasks.push(run_stack(
            schedule,
            backlog.startup_ms,
            start,
            tables,
            ports,
            settings,
            window,
            outside,
            throttled,
        ));
    }
    let results = futures_util::future::join_all(tasks).await;

    let mut figures = CeilingFigures::default();
    let mut billed_total = 0usize;
    for (stack, violations) in results {
        billed_total += stack.billed;
        figures.drained_after_seconds = figures
            .drained_after_seconds
            .max(stack.drained_after_seconds);
        figures.violations.extend(violations);
        figures.stacks.push(stack);
    }
    // Nothing billed twice or left out: Marketplace's ledger holds one entry per
    // record the stack marked Success, and every record of the backlog.
    for (index, (marketplace, stack)) in marketplaces.iter().zip(&figures.stacks).enumerate() {
        let in_ledger = marketplace.ledger().len();
        if in_ledger != stack.billed || stack.billed != backlog.records_per_stack {
            figures.violations.push(format!(
                "stack {index}: {} of {} records Success, {in_ledger} in Marketplace's ledger",
                stack.billed, backlog.records_per_stack
            ));
        }
    }
    if figures.drained_after_seconds > 0.0 {
        figures.records_per_hour = billed_total as f64 * 3600.0 / figures.drained_after_seconds;
        figures.share_of_quota =
            figures.records_per_hour / schedule::quota_records_per_hour(10) as f64;
    }
    Ok(figures)
}

/// One stack's submitter on `schedule` until nothing is pending; its figures and the
/// promises it broke.
#[allow(clippy::too_many_arguments)]
async fn run_stack(
    schedule: Schedule,
    startup_ms: i64,
    start: Instant,
    tables: MemoryTables,
    ports: SubmitPorts,
    settings: SubmitSettings,
    window: Window,
    outside: Arc<Mutex<Vec<String>>>,
    throttled: Arc<Mutex<usize>>,
) -> (StackFigures, Vec<String>) {
    let clock = ports.clock.clone();
    let period = Duration::seconds(schedule.period_seconds);
    let mut figures = StackFigures::default();
    let mut violations = Vec::new();
    let mut tick = start;
    let mut last_billed_at = start;
    // A day of runs at most: a schedule that cannot drain says so.
    while clock.now() < start + Duration::hours(24) {
        let now = clock.now();
        if now < tick {
            clock.sleep((tick - now).to_std().unwrap_or_default()).await;
        }
        // The invocation starts, then the run's own start-up.
        let invoked = clock.now();
        clock
            .sleep(std::time::Duration::from_millis(
                u64::try_from(startup_ms).unwrap_or(0),
            ))
            .await;
        let started = clock.now();
        let end = invoked + Duration::seconds(schedule.timeout_seconds);
        let budget = (schedule.budget)(
            tick,
            started,
            Budget::before(end, Duration::seconds(schedule::DEADLINE_MARGIN_SECONDS)),
        );
        *window.lock().unwrap_or_else(PoisonError::into_inner) = Some((started, end));
        let report = submit(tick, &settings, &ports, budget).await;
        *window.lock().unwrap_or_else(PoisonError::into_inner) = None;
        let ended = clock.now();
        figures.runs += 1;
        if let Ok(report) = &report
            && report.success > 0
        {
            figures.billed += report.success;
            last_billed_at = ended;
        }
        if ended > end {
            violations.push(format!(
                "a run from {started} ended at {ended}, after its invocation's end {end}"
            ));
        }
        let records = tables.aggregated_records();
        for record in &records {
            if record.in_flight_until.is_some_and(|until| until > end) {
                violations.push(format!(
                    "{} claimed until {:?}, past its run's end {end}",
                    record.key.license_arn, record.in_flight_until
                ));
            }
        }
        let next_tick = tick + period;
        if ended > next_tick {
            figures.runs_past_next_tick += 1;
        }
        if !records
            .iter()
            .any(|r| r.status == AggregatedStatus::Pending)
        {
            break;
        }
        // The next tick; one that fired during this run waits (throttled) and runs
        // now, unless it is over a minute old (its event is dropped).
        tick = next_tick;
        while ended - tick > Duration::seconds(60) {
            tick += period;
        }
    }
    figures.drained_after_seconds = (last_billed_at - start).num_milliseconds() as f64 / 1000.0;
    figures.throttled_calls = *throttled.lock().unwrap_or_else(PoisonError::into_inner);
    violations.extend(
        outside
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain(..),
    );
    let pending = tables
        .aggregated_records()
        .iter()
        .filter(|r| r.status == AggregatedStatus::Pending)
        .count();
    if pending > 0 {
        violations.push(format!(
            "{pending} records still pending after a day of runs"
        ));
    }
    (figures, violations)
}

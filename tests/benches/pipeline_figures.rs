//! Pipeline figures (prints numbers; asserts nothing):
//!
//! 1. Submitter throughput against the Marketplace simulator with its 10 requests/s
//!    quota and 30 ms latency, as a fraction of the 250 records/s ceiling (10 calls of
//!    25 records), over 2,500 records of 25 licenses in 4 hours, with the DynamoDB
//!    requests each `BatchMeterUsage` call costs. Measured with the aggregated table in
//!    memory (the submitter's own pacing and protocol cost), on moto (plus DynamoDB
//!    claims and outcomes), and on moto with 1% poison records (bisection shown apart).
//! 2. DynamoDB requests per raw row end to end (discoverer -> aggregator -> cleanup
//!    -> submitter), counted through wrappers around the store ports, for several
//!    rows-per-group shapes.
//!
//! Run: `make bench` (or `cargo bench -p awsmp-e2e --bench pipeline_figures`). Words
//! after `--` pick figures by their label: `-- moto` prints only those whose label says
//! moto, `-- submitter` only the submitter's.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;
use std::time::Instant as WallClock;

use awsmp_core::aggregate::ZeroQuantityPolicy;
use awsmp_core::memory::MemoryTables;
use awsmp_core::memory::fixtures::pending_record;
use awsmp_core::model::GroupKey;
use awsmp_core::ports::{
    AggregatedStore, MeteringApi, MeteringError, MeteringRecord, RecordVerdict,
};
use awsmp_core::time::{Instant, format_instant, parse_usage_timestamp};
use awsmp_e2e::counting::{CountingAggregated, OpCounts};
use awsmp_e2e::{Stack, StackOptions, license, wanted};

const NOW: &str = "2026-11-30T10:30:00Z";
const ACCOUNT: &str = "111122223333";
const CEILING: f64 = 250.0;

fn at(text: &str) -> Instant {
    parse_usage_timestamp(text).expect("instant")
}

fn dimensions(n: usize) -> Vec<String> {
    (0..n).map(|d| format!("dim{d:03}")).collect()
}

async fn stack(dims: usize, latency_ms: u64) -> Stack {
    let mut options = StackOptions::at(at(NOW));
    options.dimensions = dimensions(dims);
    options.sim_latency_ms = latency_ms;
    options.zero_policy = ZeroQuantityPolicy::Submit;
    Stack::start(options).await.expect("stack")
}

/// Completed hours the seeded records are spread over (all inside the 24-hour window).
const HOURS: [&str; 4] = [
    "2026-11-30T06",
    "2026-11-30T07",
    "2026-11-30T08",
    "2026-11-30T09",
];

/// Pending records for `licenses` x `dims` groups spread over [`HOURS`], written through
/// `store`; every `poison_every`-th record (0: none) names a dimension the catalog lacks.
async fn seed_records(
    stack: &Stack,
    store: &dyn AggregatedStore,
    licenses: u32,
    dims: usize,
    poison_every: usize,
) -> (usize, usize) {
    let mut n = 0;
    let mut poison = 0;
    for l in 1..=licenses {
        let arn = license(l);
        stack.license_updated(&arn, ACCOUNT).await.unwrap();
        for (d, dimension) in dimensions(dims).into_iter().enumerate() {
            let dimension = if poison_every > 0 && (n + 1) % poison_every == 0 {
                poison += 1;
                format!("undefined{d:03}")
            } else {
                dimension
            };
            let record = pending_record(
                GroupKey {
                    license_arn: arn.clone(),
                    customer_aws_account_id: ACCOUNT.to_string(),
                    dimension,
                    hour: HOURS[d % HOURS.len()].parse().unwrap(),
                },
                &stack.options.product_code,
                7,
                1,
            );
            store.put_direct(&record, stack.now()).await.unwrap();
            n += 1;
        }
    }
    (n, poison)
}

/// Times every call: how long calls take and how far apart they start.
struct Timed {
    inner: Arc<dyn MeteringApi>,
    starts: std::sync::Mutex<Vec<(WallClock, std::time::Duration)>>,
}

#[async_trait::async_trait]
impl MeteringApi for Timed {
    async fn batch_meter_usage(
        &self,
        records: &[MeteringRecord],
    ) -> Result<Vec<RecordVerdict>, MeteringError> {
        let start = WallClock::now();
        let result = self.inner.batch_meter_usage(records).await;
        self.starts.lock().unwrap().push((start, start.elapsed()));
        result
    }
}

/// Where the submitter's aggregated table lives in a throughput run.
#[derive(Clone, Copy)]
enum Table {
    /// In memory, answering at once: the submitter's own pacing and protocol cost.
    Memory,
    /// In memory behind a server that answers one request at a time, this many ms each.
    Serial(u64),
    /// On moto.
    Moto,
}

async fn throughput(label: &str, table: Table, poison_every: usize) {
    if !wanted(&format!("submitter throughput [{label}]")) {
        return;
    }
    let licenses = 25;
    let dims = 100;
    let mut stack = stack(dims, 30).await;
    let latency = match table {
        Table::Memory => None,
        Table::Serial(ms) => Some(ms),
        Table::Moto => None,
    };
    let counts = match latency {
        Some(ms) => OpCounts::serial(std::time::Duration::from_millis(ms)),
        None if matches!(table, Table::Moto) => stack.counts.clone(),
        None => OpCounts::new(),
    };
    // Records are written through `seeder`: for the in-memory tables, straight into them
    // (no modelled latency: seeding is not what is measured).
    let mut seeder = stack.submitter.ports.aggregated.clone();
    if !matches!(table, Table::Moto) {
        // Pages of 1,000 records, about what a 1 MB DynamoDB query page holds.
        let memory = Arc::new(MemoryTables::with_page_size(1000).aggregated_store());
        seeder = memory.clone();
        let store: Arc<dyn AggregatedStore> = Arc::new(CountingAggregated {
            inner: memory,
            counts: counts.clone(),
        });
        stack.submitter.ports.aggregated = store;
    }
    let timed = Arc::new(Timed {
        inner: stack.submitter.ports.metering.clone(),
        starts: std::sync::Mutex::new(Vec::new()),
    });
    stack.submitter.ports.metering = timed.clone();
    let (records, poison) =
        seed_records(&stack, seeder.as_ref(), licenses, dims, poison_every).await;
    counts.reset();
    let started = WallClock::now();
    let report = stack.run_submitter().await.unwrap();
    let finished = WallClock::now();
    let seconds = (finished - started).as_secs_f64();
    let rate = report.success as f64 / seconds;
    let stats = stack.sim.handle().stats();
    let calls = timed.starts.lock().unwrap().clone();
    // What the run spends outside the calls' span: reads and the first claim before
    // the first call; the last write-back and the age-out sweep after the last.
    let (before_ms, after_ms) = match (calls.first(), calls.last()) {
        (Some(first), Some(last)) => (
            (first.0 - started).as_secs_f64() * 1000.0,
            (finished - (last.0 + last.1)).as_secs_f64() * 1000.0,
        ),
        _ => (0.0, 0.0),
    };
    let mean_call_ms = calls.iter().map(|(_, d)| d.as_secs_f64()).sum::<f64>() * 1000.0
        / calls.len().max(1) as f64;
    let gaps: Vec<f64> = calls
        .windows(2)
        .map(|w| (w[1].0 - w[0].0).as_secs_f64() * 1000.0)
        .collect();
    let mean_gap_ms = gaps.iter().sum::<f64>() / gaps.len().max(1) as f64;
    let min_gap_ms = gaps.iter().copied().fold(f64::INFINITY, f64::min);
    let requests = counts.total_calls();
    let per_call = requests as f64 / report.api_calls.max(1) as f64;
    let breakdown: Vec<String> = counts
        .snapshot()
        .iter()
        .filter(|(k, _)| !k.starts_with("items."))
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    println!(
        "submitter throughput [{label}]: {} of {records} records billed ({poison} poison closed Error: {}) \
         in {seconds:.2} s over {} BatchMeterUsage calls ({} throttled by the quota; call {mean_call_ms:.1} ms, \
         start-to-start mean {mean_gap_ms:.1} ms, min {min_gap_ms:.1} ms; {before_ms:.0} ms before the first \
         call, {after_ms:.0} ms after the last) = {rate:.1} records/s = \
         {:.1}% of the {CEILING} records/s ceiling (goal >= 95%); DynamoDB: {requests} requests = \
         {per_call:.2} per BatchMeterUsage call ({})",
        report.success,
        report.errors,
        report.api_calls,
        stats.throttled,
        100.0 * rate / CEILING,
        breakdown.join(", ")
    );
    if poison > 0 {
        // Bisection: each poison record costs the calls that isolate it.
        let clean_calls = records.div_ceil(25);
        let extra = report.api_calls.saturating_sub(clean_calls as u64);
        // The extra calls' share of the run at the quota's spacing, taken out: the rate
        // at which the rest of the run gave records their verdict (billed or Error).
        let extra_seconds = extra as f64 * 0.1;
        let verdicts = (report.success + report.errors) as f64;
        let rest_rate = verdicts / (seconds - extra_seconds).max(f64::EPSILON);
        println!(
            "  bisection cost [{label}]: {} calls for {records} records with {poison} poison, \
             {extra} more than the {clean_calls} a clean run needs = {:.1} extra calls per poison record \
             = {extra_seconds:.1} s at 10 calls/s; without them {rest_rate:.1} records/s given their verdict = {:.1}% of the ceiling",
            report.api_calls,
            extra as f64 / poison as f64,
            100.0 * rest_rate / CEILING
        );
    }
}

async fn ops_per_row(rows_per_group: usize, licenses: u32) {
    if !wanted(&format!(
        "DynamoDB requests per raw row [{rows_per_group} rows per group-hour]"
    )) {
        return;
    }
    let stack = stack(3, 0).await;
    let mut rows = 0usize;
    for l in 1..=licenses {
        let arn = license(l);
        stack.license_updated(&arn, ACCOUNT).await.unwrap();
        for dimension in dimensions(3) {
            for hour in 7..10 {
                for i in 0..rows_per_group {
                    let second = (i * 3600 / rows_per_group) as i64;
                    let ts = at(&format!("2026-11-30T{hour:02}:00:00Z"))
                        + chrono::Duration::seconds(second);
                    stack
                        .put_usage(&arn, ACCOUNT, &dimension, &format_instant(ts), 1)
                        .await
                        .unwrap();
                    rows += 1;
                }
            }
        }
    }
    stack.counts.reset();
    let started = WallClock::now();
    let report = stack.run_pipeline().await.unwrap();
    let seconds = started.elapsed().as_secs_f64();
    assert_eq!(report.success, (licenses as usize) * 3 * 3);
    let total = stack.counts.total_calls();
    let cost = Cost::of(&stack.counts.snapshot(), rows, report.success, seconds);
    let breakdown: Vec<String> = stack
        .counts
        .snapshot()
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let per_row = total as f64 / rows as f64;
    let goal = if rows_per_group == 1 {
        Some(5.0)
    } else if rows_per_group == 12 {
        Some(0.5)
    } else {
        None
    };
    let ratio = goal.map_or(String::new(), |g| {
        format!(" = {:.0}% of the goal of at most {g}", 100.0 * per_row / g)
    });
    println!(
        "DynamoDB requests per raw row [{rows_per_group} rows per group-hour, {rows} rows, {} groups]: \
         {total} requests = {per_row:.2} per row{ratio} ({})",
        licenses * 9,
        breakdown.join(", ")
    );
    println!("  cost [{rows_per_group} rows per group-hour]: {cost}");
}

/// Prices used by the cost model (us-east-1, on-demand, as published in 2025; check
/// the pricing pages before quoting them).
const USD_PER_MILLION_WRU: f64 = 0.625;
const USD_PER_MILLION_RRU: f64 = 0.125;
const USD_PER_GB_SECOND_ARM64: f64 = 0.000_013_333_4;
const USD_PER_MILLION_LAMBDA_REQUESTS: f64 = 0.20;
const USD_PER_MILLION_SQS_REQUESTS: f64 = 0.40;
/// Every function's `MemorySize` in template-main.yaml.
const LAMBDA_GB: f64 = 0.25;

/// The cost model of one pipeline run, from its counted requests: WRU and RRU per raw
/// row and per billed record, and dollars per million raw rows.
///
/// Units: a write of an item up to 1 KB is 1 WRU, 2 inside a transaction (the commit,
/// claims and outcome write-backs are transactions); a read (eventually consistent) of
/// up to 4 KB is 0.5 RRU (every query page here is smaller). Lambda: the run's wall
/// time at 256 MB, an upper bound (moto answers far slower than DynamoDB), and one
/// invocation per SQS message plus the scheduled runs. SQS: a send, a receive and a
/// delete per message (batching would make it less).
struct Cost {
    wru_per_row: f64,
    rru_per_row: f64,
    wru_per_record: f64,
    usd_per_million_rows: f64,
    usd_dynamodb: f64,
    usd_lambda: f64,
    usd_sqs: f64,
}

impl Cost {
    fn of(
        counts: &std::collections::BTreeMap<&'static str, u64>,
        rows: usize,
        records: usize,
        seconds: f64,
    ) -> Cost {
        let get = |k: &str| counts.get(k).copied().unwrap_or(0) as f64;
        let transactional_items =
            get("items.commit_writes") + get("items.claim_writes") + get("items.record_writes");
        let single_writes = get("usage.finalize")
            + get("aggregated.reject_malformed")
            + get("usage.repair_pending");
        let wru = 2.0 * transactional_items + single_writes;
        let reads = get("aggregated.get")
            + get("aggregated.query_pending")
            + get("aggregated.scan_pending")
            + get("usage.query_group")
            + get("usage.query_pending")
            + get("usage.scan_pending")
            + get("usage.get")
            + get("subscribers.get")
            + get("subscribers.deprovisioning")
            // The discoverer's unpriced-dimension check: one batch per page of groups,
            // each buyer read once a run (a few items per call here).
            + get("subscribers.get_many");
        let rru = 0.5 * reads;
        // Messages: one aggregation message per group commit attempt, at most.
        let messages = get("aggregated.commit");
        let lambda_requests = messages + 4.0;
        let per_million = 1_000_000.0 / rows as f64;
        let usd_dynamodb =
            (wru * USD_PER_MILLION_WRU + rru * USD_PER_MILLION_RRU) / 1e6 * per_million;
        let usd_lambda = (seconds * LAMBDA_GB * USD_PER_GB_SECOND_ARM64
            + lambda_requests * USD_PER_MILLION_LAMBDA_REQUESTS / 1e6)
            * per_million;
        let usd_sqs = 3.0 * messages * USD_PER_MILLION_SQS_REQUESTS / 1e6 * per_million;
        Cost {
            wru_per_row: wru / rows as f64,
            rru_per_row: rru / rows as f64,
            wru_per_record: wru / records.max(1) as f64,
            usd_per_million_rows: usd_dynamodb + usd_lambda + usd_sqs,
            usd_dynamodb,
            usd_lambda,
            usd_sqs,
        }
    }
}

impl std::fmt::Display for Cost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:.2} WRU + {:.2} RRU per raw row, {:.1} WRU per billed record; ${:.2} per million raw rows \
             (DynamoDB ${:.2}, Lambda <= ${:.2}, SQS ${:.2})",
            self.wru_per_row,
            self.rru_per_row,
            self.wru_per_record,
            self.usd_per_million_rows,
            self.usd_dynamodb,
            self.usd_lambda,
            self.usd_sqs
        )
    }
}

/// The labels asked for after `--` (none: every figure).
fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        throughput("aggregated table in memory", Table::Memory, 0).await;
        // A DynamoDB table whose requests queue behind each other (a hot partition, a
        // throttled table): what the submitter's speed depends on is its request count.
        throughput(
            "aggregated table in memory, one request at a time, 20 ms each",
            Table::Serial(20),
            0,
        )
        .await;
        throughput(
            "aggregated table in memory, one request at a time, 20 ms each, 1% poison",
            Table::Serial(20),
            100,
        )
        .await;
        throughput("aggregated table on moto", Table::Moto, 0).await;
        throughput("aggregated table on moto, 1% poison", Table::Moto, 100).await;
        // Fewer licenses for the busiest shape: moto's index queries slow down with
        // table size, and the figure is per row either way.
        for (rows_per_group, licenses) in [(1, 8), (12, 8), (60, 2)] {
            ops_per_row(rows_per_group, licenses).await;
        }
    });
}

//! Pipeline figures (prints numbers; asserts nothing):
//!
//! 1. Submitter throughput against the Marketplace simulator with its 10 requests/s
//!    quota and 30 ms latency, as a fraction of the 250 records/s ceiling (10 calls of
//!    25 records). Measured twice: with the aggregated table in memory (the submitter's
//!    own pacing and protocol cost) and on moto (plus DynamoDB claims and outcomes).
//! 2. DynamoDB operations per raw row end to end (discoverer -> aggregator -> cleanup
//!    -> submitter), counted through wrappers around the store ports, for several
//!    rows-per-group shapes.
//!
//! Run: `cargo bench -p awsmp-e2e --bench pipeline_figures`.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;
use std::time::Instant as WallClock;

use awsmp_core::aggregate::ZeroQuantityPolicy;
use awsmp_core::memory::MemoryTables;
use awsmp_core::model::{AggregatedRecord, AggregatedStatus, GroupKey};
use awsmp_core::ports::{
    AggregatedStore, MeteringApi, MeteringError, MeteringRecord, RecordVerdict,
};
use awsmp_core::time::{Instant, format_instant, parse_usage_timestamp};
use awsmp_e2e::counting::{CountingAggregated, OpCounts};
use awsmp_e2e::{Stack, StackOptions, license};

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

/// Pending records for `licenses` x `dims` groups in hour 09, written through `store`.
async fn seed_records(
    stack: &Stack,
    store: &dyn AggregatedStore,
    licenses: u32,
    dims: usize,
) -> usize {
    let mut n = 0;
    for l in 1..=licenses {
        let arn = license(l);
        stack.license_updated(&arn, ACCOUNT).await.unwrap();
        for dimension in dimensions(dims) {
            let record = AggregatedRecord {
                key: GroupKey {
                    license_arn: arn.clone(),
                    customer_aws_account_id: ACCOUNT.to_string(),
                    dimension,
                    hour: "2026-11-30T09".parse().unwrap(),
                },
                product_code: stack.options.product_code.clone(),
                quantity: 7,
                allocations: None,
                status: AggregatedStatus::Pending,
                status_reason: None,
                metering_record_id: None,
                attempt_count: 0,
                version: 1,
                in_flight_until: None,
                claim_id: None,
                sent_quantity: None,
                folding: false,
            };
            store.put_direct(&record, stack.now()).await.unwrap();
            n += 1;
        }
    }
    n
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

async fn throughput(label: &str, in_memory: bool) {
    let licenses = 25;
    let dims = 100;
    let mut stack = stack(dims, 30).await;
    if in_memory {
        // Pages of 1,000 records, about what a 1 MB DynamoDB query page holds.
        let store: Arc<dyn AggregatedStore> = Arc::new(CountingAggregated {
            inner: MemoryTables::with_page_size(1000).aggregated_store(),
            counts: OpCounts::new(),
        });
        stack.submitter.aggregated = store;
    }
    let timed = Arc::new(Timed {
        inner: stack.submitter.metering.clone(),
        starts: std::sync::Mutex::new(Vec::new()),
    });
    stack.submitter.metering = timed.clone();
    let store = stack.submitter.aggregated.clone();
    let records = seed_records(&stack, store.as_ref(), licenses, dims).await;
    let started = WallClock::now();
    let report = stack.run_submitter().await.unwrap();
    let seconds = started.elapsed().as_secs_f64();
    let rate = report.success as f64 / seconds;
    let stats = stack.sim.handle().stats();
    let calls = timed.starts.lock().unwrap().clone();
    let mean_call_ms = calls.iter().map(|(_, d)| d.as_secs_f64()).sum::<f64>() * 1000.0
        / calls.len().max(1) as f64;
    let gaps: Vec<f64> = calls
        .windows(2)
        .map(|w| (w[1].0 - w[0].0).as_secs_f64() * 1000.0)
        .collect();
    let mean_gap_ms = gaps.iter().sum::<f64>() / gaps.len().max(1) as f64;
    let min_gap_ms = gaps.iter().copied().fold(f64::INFINITY, f64::min);
    // While sending: from the first call's start to the last call's end.
    let sending = match (calls.first(), calls.last()) {
        (Some((first, _)), Some((last, took))) => (*last - *first + *took).as_secs_f64(),
        _ => seconds,
    };
    let sending_rate = report.success as f64 / sending;
    println!(
        "submitter throughput [{label}]: {} of {records} records billed in {seconds:.2} s over {} calls \
         ({} throttled by the quota; call {mean_call_ms:.1} ms, start-to-start mean {mean_gap_ms:.1} ms, \
         min {min_gap_ms:.1} ms) = {rate:.1} records/s = {:.1}% of {CEILING} records/s over the whole run, \
         {sending_rate:.1} records/s = {:.1}% while sending",
        report.success,
        report.api_calls,
        stats.throttled,
        100.0 * rate / CEILING,
        100.0 * sending_rate / CEILING
    );
}

async fn ops_per_row(rows_per_group: usize, licenses: u32) {
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
    let report = stack.run_pipeline().await.unwrap();
    assert_eq!(report.success, (licenses as usize) * 3 * 3);
    let total = stack.counts.total_calls();
    let breakdown: Vec<String> = stack
        .counts
        .snapshot()
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    println!(
        "DynamoDB operations per raw row [{rows_per_group} rows per group-hour, {rows} rows, {} groups]: \
         {total} calls = {:.2} per row ({})",
        licenses * 9,
        total as f64 / rows as f64,
        breakdown.join(", ")
    );
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        throughput("aggregated table in memory", true).await;
        throughput("aggregated table on moto", false).await;
        // Fewer licenses for the busiest shape: moto's index queries slow down with
        // table size, and the figure is per row either way.
        for (rows_per_group, licenses) in [(1, 8), (12, 8), (60, 2)] {
            ops_per_row(rows_per_group, licenses).await;
        }
    });
}

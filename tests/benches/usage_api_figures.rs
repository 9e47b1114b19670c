//! Usage API figures (prints numbers; asserts only that the batches were accepted):
//!
//! 1. DynamoDB requests and write request units per event, accepted and repeated,
//!    counted through a wrapper around the usage store the real handler writes through,
//!    with the items' sizes as DynamoDB sizes them (`awsmp_core::items::size`), and the
//!    dollars per million events beside a direct DynamoDB write.
//! 2. Events per second one function instance takes: the real handler on batches of
//!    100 events, over the in-memory store (its own CPU cost) and over moto (every
//!    write a real HTTP round trip to a local DynamoDB).
//!
//! Run: `make bench` (or `cargo bench -p awsmp-e2e --bench usage_api_figures`).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant as WallClock;

use aws_lambda_events::apigw::ApiGatewayProxyRequest;
use aws_lambda_events::encodings::Body;
use awsmp_core::clock::ManualClock;
use awsmp_core::guardrails::GuardrailContext;
use awsmp_core::guardrails::write::check_row;
use awsmp_core::items::size::raw_row_size;
use awsmp_core::memory::MemoryTables;
use awsmp_core::ports::UsageStore;
use awsmp_core::submit::DeploymentMode;
use awsmp_core::time::{Instant, parse_usage_timestamp};
use awsmp_core::usage_api::envelope::PostedUsage;
use awsmp_e2e::counting::{Counting, OpCounts};
use awsmp_e2e::{Stack, StackOptions, license, wanted};
use serde_json::{Value, json};

const NOW: &str = "2026-11-30T10:30:00Z";
const ACCOUNT: &str = "111122223333";
/// DynamoDB on-demand, us-east-1 (since November 2024): dollars per million write
/// request units.
const DOLLARS_PER_MILLION_WRU: f64 = 0.625;
/// API Gateway HTTP API: dollars per million requests (the first 300 million a month).
const DOLLARS_PER_MILLION_HTTP_REQUESTS: f64 = 1.00;
/// Lambda arm64: dollars per GB-second and per million requests.
const DOLLARS_PER_GB_SECOND: f64 = 0.000_013_333_4;
const DOLLARS_PER_MILLION_INVOCATIONS: f64 = 0.20;
/// The function's memory (template-main.yaml, UsageApiFunction).
const FUNCTION_GB: f64 = 0.25;

fn at(text: &str) -> Instant {
    parse_usage_timestamp(text).expect("instant")
}

/// One event as a seller's service sends it: a UUID-long id, the catalog's dimension.
fn event(n: usize, batch: usize) -> Value {
    json!({
        "id": format!("9b2f3c1e-7d4a-4e8b-a1c2-{batch:06}{n:06}"),
        "licenseArn": license(1 + (n % 4) as u32),
        "customerAWSAccountId": ACCOUNT,
        "dimension": "api_calls",
        "quantity": 1 + n % 7,
    })
}

fn batch(index: usize) -> ApiGatewayProxyRequest {
    let events: Vec<Value> = (0..100).map(|n| event(n, index)).collect();
    let mut request = ApiGatewayProxyRequest::default();
    request.http_method = "POST".parse().unwrap();
    request.path = Some("/usage/events".into());
    request
        .headers
        .insert("content-type", "application/json".parse().unwrap());
    request.body = Some(json!({ "events": events }).to_string());
    request
}

async fn post(state: &awsmp_usage_api::State, request: ApiGatewayProxyRequest) -> Value {
    let response = awsmp_usage_api::handle(state, request).await;
    let Some(Body::Text(text)) = &response.body else {
        panic!("no body");
    };
    assert_eq!(response.status_code, 200, "{text}");
    serde_json::from_str(text).unwrap()
}

fn memory_state(tables: &MemoryTables, counts: &Arc<OpCounts>) -> awsmp_usage_api::State {
    awsmp_usage_api::State {
        config: Arc::new(awsmp_usage_api::Config {
            usage_table: "usage".into(),
            aggregated_table: "aggregated".into(),
            product_code: "prod-e2e".into(),
            deployment_mode: DeploymentMode::Full,
            read_scope: None,
            subscribers_table: "subscribers".into(),
            subscribers_table_region: "us-east-1".into(),
        }),
        subscribers: Arc::new(awsmp_core::memory::MemorySubscriberStore::new()),
        usage: Arc::new(Counting {
            inner: Arc::new(tables.usage_store()) as Arc<dyn UsageStore>,
            counts: counts.clone(),
        }),
        aggregated: Arc::new(tables.aggregated_store()),
        clock: Arc::new(ManualClock::new(at(NOW))),
    }
}

/// Write request units of one ingestion write: a transactional write costs 2 per KB
/// (rounded up) of each item.
fn write_units() -> (usize, usize, u64) {
    let usage = PostedUsage {
        license_arn: license(1),
        account: ACCOUNT.into(),
        dimension: "api_calls".into(),
        quantity: 3,
        timestamp: None,
        allocations: None,
    };
    let row = usage.to_row("9b2f3c1e-7d4a-4e8b-a1c2-000001000001", at(NOW));
    let write = check_row(&row, &GuardrailContext::new(at(NOW), "prod-e2e"), at(NOW)).unwrap();
    let (row_bytes, marker_bytes) = (raw_row_size(&write.row), raw_row_size(&write.marker));
    let units = [row_bytes, marker_bytes]
        .iter()
        .map(|bytes| 2 * bytes.div_ceil(1024) as u64)
        .sum();
    (row_bytes, marker_bytes, units)
}

fn per_event(counts: &BTreeMap<&'static str, u64>, events: usize) -> String {
    counts
        .iter()
        .map(|(k, v)| format!("{k} {:.2}", *v as f64 / events as f64))
        .collect::<Vec<_>>()
        .join(", ")
}

async fn requests_and_units() {
    if !wanted("DynamoDB requests per usage API event") {
        return;
    }
    let tables = MemoryTables::new();
    let counts = OpCounts::new();
    let state = memory_state(&tables, &counts);
    let batches = 10;
    for i in 0..batches {
        let answer = post(&state, batch(i)).await;
        assert_eq!(answer["summary"]["accepted"], 100, "{answer}");
    }
    let accepted = counts.snapshot();
    counts.reset();
    for i in 0..batches {
        let answer = post(&state, batch(i)).await;
        assert_eq!(answer["summary"]["duplicate"], 100, "{answer}");
    }
    let repeated = counts.snapshot();
    let events = batches * 100;
    let (row_bytes, marker_bytes, units) = write_units();
    println!("DynamoDB requests per usage API event ({events} events in batches of 100):");
    println!(
        "  accepted: {} (one TransactWriteItems of the row and its marker: {row_bytes} + {marker_bytes} bytes, {units} write request units)",
        per_event(&accepted, events)
    );
    println!(
        "  repeated (a retried batch): {} (the canceled transaction, then the marker and the row read back for `recorded`)",
        per_event(&repeated, events)
    );
    let dynamodb = units as f64 * DOLLARS_PER_MILLION_WRU;
    let api = DOLLARS_PER_MILLION_HTTP_REQUESTS / 100.0;
    // One invocation per batch; 100 ms of a 256 MB function per batch as the paper
    // figure (in AWS each batch waits for its DynamoDB round trips, 16 at a time).
    let lambda =
        (DOLLARS_PER_MILLION_INVOCATIONS + 1e6 * FUNCTION_GB * 0.1 * DOLLARS_PER_GB_SECOND) / 100.0;
    println!(
        "  dollars per million accepted events, batches of 100: DynamoDB ${dynamodb:.2} + API Gateway ${api:.3} + Lambda ${lambda:.3} = ${:.2}",
        dynamodb + api + lambda
    );
    println!(
        "  beside a direct write of the same idempotent row and marker (awsmp-usage, awsmp usage put): ${dynamodb:.2}; a bare PutItem without idempotency: ${:.3}; one event per request adds ${:.2} (API Gateway) + ${:.2} (Lambda)",
        DOLLARS_PER_MILLION_WRU,
        DOLLARS_PER_MILLION_HTTP_REQUESTS,
        DOLLARS_PER_MILLION_INVOCATIONS + 1e6 * FUNCTION_GB * 0.02 * DOLLARS_PER_GB_SECOND
    );
}

async fn events_per_second(label: &str, state: &awsmp_usage_api::State, batches: usize) {
    let started = WallClock::now();
    for i in 0..batches {
        let answer = post(state, batch(1000 + i)).await;
        assert_eq!(answer["summary"]["accepted"], 100, "{answer}");
    }
    let seconds = started.elapsed().as_secs_f64();
    let events = batches * 100;
    println!(
        "usage API events per second, one instance, {label}: {:.0} ({events} events in {seconds:.2} s, {:.1} ms per batch of 100)",
        events as f64 / seconds,
        1000.0 * seconds / batches as f64
    );
}

async fn throughput() {
    if wanted("usage API events per second, one instance, in-memory store") {
        let tables = MemoryTables::new();
        let state = memory_state(&tables, &OpCounts::new());
        events_per_second("in-memory store (the handler's own CPU)", &state, 200).await;
    }
    if wanted("usage API events per second, one instance, moto") {
        let stack = Stack::start(StackOptions::at(at(NOW))).await.unwrap();
        let state = stack.usage_api().unwrap();
        events_per_second("moto (a local DynamoDB over HTTP)", &state, 10).await;
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        requests_and_units().await;
        throughput().await;
    });
}

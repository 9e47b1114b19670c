//! Shared set-up for the simulator's tests: a simulator on a free port with a fixed
//! clock and a seeded product/entitlement, and the REAL `aws-sdk-marketplacemetering`
//! client pointed at it (static credentials, us-east-1, no retries).

#![allow(dead_code, clippy::expect_used, clippy::unwrap_used)]

pub mod agreement;

use aws_sdk_marketplacemetering as mm;
use awsmp_marketplace_sim::{
    ClockSetting, EntitlementSeed, FaultKind, FaultSpec, FaultTarget, ProductSeed, RunningSim,
    SimConfig, Simulator, ThrottleConfig,
};
use chrono::{DateTime, TimeDelta, Utc};
use mm::error::SdkError;
use mm::operation::batch_meter_usage::{BatchMeterUsageError, BatchMeterUsageOutput};
use mm::operation::resolve_customer::{ResolveCustomerError, ResolveCustomerOutput};
use mm::primitives::DateTime as SdkDateTime;
use mm::types::{Tag, UsageAllocation, UsageRecord, UsageRecordResultStatus};
use serde_json::Value;

/// The seeded product.
pub const PRODUCT: &str = "prodsim1234567890abcdef";
/// Its dimensions.
pub const DIMENSIONS: [&str; 2] = ["requests", "storage_gb"];
/// The seeded, entitled license.
pub const LICENSE: &str =
    "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef";
/// A second license of the same product, entitled to ACCOUNT_2.
pub const LICENSE_2: &str =
    "arn:aws:license-manager::123456789012:license:l-fedcba9876543210fedcba9876543210";
/// The buyer of LICENSE.
pub const ACCOUNT: &str = "111122223333";
/// The buyer of LICENSE_2.
pub const ACCOUNT_2: &str = "444455556666";
/// The fixed sim time the tests start at.
pub const NOW: &str = "2026-03-15T12:30:00Z";

/// The sim time the tests start at.
pub fn now() -> DateTime<Utc> {
    NOW.parse().expect("valid NOW")
}

/// A fixed clock at NOW, the quota off (tests that need it turn it on), one product
/// with two dimensions, two entitled licenses.
pub fn config() -> SimConfig {
    SimConfig {
        clock: ClockSetting::Fixed { at: now() },
        throttle: ThrottleConfig {
            enabled: false,
            ..ThrottleConfig::default()
        },
        products: vec![ProductSeed {
            product_code: PRODUCT.to_owned(),
            dimensions: DIMENSIONS.iter().map(|d| (*d).to_owned()).collect(),
        }],
        entitlements: vec![
            EntitlementSeed {
                license_arn: LICENSE.to_owned(),
                customer_aws_account_id: ACCOUNT.to_owned(),
                product_code: PRODUCT.to_owned(),
            },
            EntitlementSeed {
                license_arn: LICENSE_2.to_owned(),
                customer_aws_account_id: ACCOUNT_2.to_owned(),
                product_code: PRODUCT.to_owned(),
            },
        ],
        ..SimConfig::default()
    }
}

/// Starts a simulator with `config`.
pub async fn start(config: SimConfig) -> RunningSim {
    Simulator::start(config).await.expect("simulator starts")
}

/// Starts a simulator of `config()` with no entitlement seeded.
pub async fn start_unentitled() -> RunningSim {
    start(SimConfig {
        entitlements: vec![],
        ..config()
    })
    .await
}

/// The real SDK client for the simulator at `endpoint`: static credentials,
/// us-east-1, retries disabled so every error surfaces.
pub async fn client_for(endpoint: &str) -> mm::Client {
    let shared = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(mm::config::Credentials::new(
            "AKIDSIMULATOR",
            "simulator-secret",
            None,
            None,
            "static",
        ))
        .endpoint_url(endpoint)
        .retry_config(aws_config::retry::RetryConfig::disabled())
        .load()
        .await;
    mm::Client::new(&shared)
}

/// The real SDK client for `sim`.
pub async fn client(sim: &RunningSim) -> mm::Client {
    client_for(&sim.endpoint_url()).await
}

/// Epoch seconds of `at` as the SDK's timestamp.
pub fn sdk_time(at: DateTime<Utc>) -> SdkDateTime {
    SdkDateTime::from_secs(at.timestamp())
}

/// A record for (LICENSE, ACCOUNT) `minutes_ago` before NOW.
pub fn record(minutes_ago: i64, dimension: &str, quantity: i32) -> UsageRecord {
    record_for(
        LICENSE,
        ACCOUNT,
        now() - TimeDelta::minutes(minutes_ago),
        dimension,
        quantity,
    )
}

/// A record for (LICENSE, ACCOUNT) stamped `at`.
pub fn record_at(at: DateTime<Utc>, dimension: &str, quantity: i32) -> UsageRecord {
    record_for(LICENSE, ACCOUNT, at, dimension, quantity)
}

/// A record with every field given.
pub fn record_for(
    license: &str,
    account: &str,
    at: DateTime<Utc>,
    dimension: &str,
    quantity: i32,
) -> UsageRecord {
    UsageRecord::builder()
        .timestamp(sdk_time(at))
        .customer_aws_account_id(account)
        .license_arn(license)
        .dimension(dimension)
        .quantity(quantity)
        .build()
        .expect("complete record")
}

/// An allocation of `quantity` with `tags` (key, value).
pub fn allocation(quantity: i32, tags: &[(&str, &str)]) -> UsageAllocation {
    let mut builder = UsageAllocation::builder().allocated_usage_quantity(quantity);
    for (key, value) in tags {
        builder = builder.tags(Tag::builder().key(*key).value(*value).build().expect("tag"));
    }
    builder.build().expect("allocation")
}

/// Sends `records` through the SDK.
pub async fn meter(
    client: &mm::Client,
    records: Vec<UsageRecord>,
) -> Result<BatchMeterUsageOutput, SdkError<BatchMeterUsageError>> {
    client
        .batch_meter_usage()
        .set_usage_records(Some(records))
        .send()
        .await
}

/// Sends `records` through the SDK; the call must succeed.
pub async fn meter_ok(client: &mm::Client, records: Vec<UsageRecord>) -> BatchMeterUsageOutput {
    meter(client, records).await.expect("the call must succeed")
}

/// The status of the first record's result.
pub fn first_status(out: &BatchMeterUsageOutput) -> Option<&UsageRecordResultStatus> {
    out.results()[0].status()
}

/// The status of every record's result, in order.
pub fn statuses(out: &BatchMeterUsageOutput) -> Vec<Option<UsageRecordResultStatus>> {
    out.results().iter().map(|r| r.status().cloned()).collect()
}

/// ResolveCustomer for `token` through the SDK.
pub async fn resolve(
    client: &mm::Client,
    token: &str,
) -> Result<ResolveCustomerOutput, SdkError<ResolveCustomerError>> {
    client
        .resolve_customer()
        .registration_token(token)
        .send()
        .await
}

/// Queues `count` faults of `kind` for `operation`.
pub fn inject(sim: &RunningSim, kind: FaultKind, count: u32, operation: FaultTarget) {
    sim.handle()
        .inject_fault(FaultSpec {
            kind,
            count,
            operation,
        })
        .expect("fault queued");
}

/// POSTs `body` as JSON to `url`: the status and the JSON answer.
pub async fn post_json(url: &str, body: &Value) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(url)
        .json(body)
        .send()
        .await
        .expect("reachable");
    let status = response.status().as_u16();
    (status, response.json().await.expect("JSON answer"))
}

/// GETs `url` as JSON, whatever the status.
pub async fn get_json(url: &str) -> Value {
    reqwest::get(url)
        .await
        .expect("reachable")
        .json()
        .await
        .expect("JSON answer")
}

/// Asserts an admin answer is `status` with an `error` text containing `reason`.
pub fn assert_admin_error((status, body): &(u16, Value), expected: u16, reason: &str) {
    assert_eq!(*status, expected, "{body}");
    let error = body["error"].as_str().expect("error text");
    assert!(error.contains(reason), "{error}");
}

/// The modeled service error and HTTP status of a failed call.
pub fn service_error<E: std::fmt::Debug>(err: SdkError<E>) -> (E, u16) {
    match err {
        SdkError::ServiceError(service) => {
            let status = service.raw().status().as_u16();
            (service.into_err(), status)
        }
        other => panic!("expected a service error, got {other:?}"),
    }
}

/// Asserts the call failed with a modeled error and returns it, with its status.
pub async fn meter_err(
    client: &mm::Client,
    records: Vec<UsageRecord>,
) -> (BatchMeterUsageError, u16) {
    let err = meter(client, records)
        .await
        .expect_err("the call must fail");
    service_error(err)
}

//! Request-level exceptions through the real SDK client: each fails the WHOLE batch
//! (the valid record sent alongside is not billed) with the modeled error type, or
//! `ValidationException` where the model has none.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use aws_sdk_marketplacemetering as mm;
use aws_sdk_marketplacemetering::error::ProvideErrorMetadata;
use aws_sdk_marketplacemetering::operation::batch_meter_usage::BatchMeterUsageError;
use aws_sdk_marketplacemetering::types::builders::UsageRecordBuilder;
use aws_sdk_marketplacemetering::types::{UsageAllocation, UsageRecord, UsageRecordResultStatus};
use awsmp_marketplace_sim::{ClockSetting, RunningSim, SimConfig};
use chrono::{DateTime, TimeDelta, Utc};
use common::*;

/// Sends `bad` after a valid record to a fresh simulator and checks that the call
/// failed with HTTP 400 and that nothing was billed. Returns the error.
async fn whole_batch_refused(bad: UsageRecord) -> BatchMeterUsageError {
    let sim = start(config()).await;
    let client = client(&sim).await;
    let (err, status) = meter_err(&client, vec![record(1, "requests", 5), bad]).await;
    assert_eq!(status, 400, "{err:?}");
    assert!(
        sim.handle().ledger().records.is_empty(),
        "nothing of a refused batch is billed"
    );
    let rejected = sim.handle().ledger().rejected_requests;
    assert_eq!(rejected.len(), 1);
    assert_eq!(rejected[0].error_type, err.code().expect("code"));
    assert_eq!(rejected[0].record_count, 2);
    err
}

/// [`whole_batch_refused`], then: the error is the one `is` tells, and its message
/// contains `reason`.
async fn refused_with(bad: UsageRecord, is: fn(&BatchMeterUsageError) -> bool, reason: &str) {
    let err = whole_batch_refused(bad).await;
    assert!(is(&err), "{err:?}");
    let message = err.message().expect("message");
    assert!(message.contains(reason), "{message}");
}

/// [`refused_with`] a `storage_gb` record stamped `at`, outside the timestamp window.
async fn out_of_window(at: DateTime<Utc>, reason: &str) {
    refused_with(
        record_at(at, "storage_gb", 1),
        BatchMeterUsageError::is_timestamp_out_of_bounds_exception,
        reason,
    )
    .await;
}

/// [`refused_with`] a record of `license` (for ACCOUNT): an invalid license.
async fn invalid_license(license: &str, reason: &str) {
    refused_with(
        record_for(license, ACCOUNT, now(), "requests", 1),
        BatchMeterUsageError::is_invalid_license_exception,
        reason,
    )
    .await;
}

/// The error the model has no type for.
fn is_validation(err: &BatchMeterUsageError) -> bool {
    err.code() == Some("ValidationException")
}

fn at(s: &str) -> DateTime<Utc> {
    s.parse().expect("valid RFC 3339")
}

fn with_allocations(quantity: i32, allocations: Vec<UsageAllocation>) -> UsageRecord {
    UsageRecord::builder()
        .timestamp(sdk_time(now() - TimeDelta::minutes(1)))
        .customer_aws_account_id(ACCOUNT)
        .license_arn(LICENSE)
        .dimension("storage_gb")
        .quantity(quantity)
        .set_usage_allocations(Some(allocations))
        .build()
        .expect("record")
}

/// One `requests` at NOW, with neither account nor license yet.
fn unaddressed() -> UsageRecordBuilder {
    UsageRecord::builder()
        .timestamp(sdk_time(now()))
        .dimension("requests")
        .quantity(1)
}

#[tokio::test]
async fn a_record_24_hours_old_fails_the_batch() {
    out_of_window(now() - TimeDelta::hours(24), "UsageRecords[1]").await;
}

#[tokio::test]
async fn a_record_just_inside_24_hours_is_accepted() {
    let sim = start(config()).await;
    let client = client(&sim).await;
    let ok = record_at(
        now() - TimeDelta::hours(24) + TimeDelta::seconds(1),
        "requests",
        1,
    );
    let out = meter_ok(&client, vec![ok]).await;
    assert_eq!(first_status(&out), Some(&UsageRecordResultStatus::Success));
}

#[tokio::test]
async fn a_future_record_fails_the_batch() {
    out_of_window(now() + TimeDelta::seconds(60), "future").await;
}

#[tokio::test]
async fn previous_month_usage_is_accepted_until_six_on_the_first() {
    let sim = start(config()).await;
    let client = client(&sim).await;
    let march_31 = at("2026-03-31T23:00:00Z");
    let send = |dimension: &'static str| {
        let client = client.clone();
        async move { meter(&client, vec![record_at(march_31, dimension, 1)]).await }
    };

    sim.handle().set_clock(ClockSetting::Fixed {
        at: at("2026-04-01T05:59:59Z"),
    });
    let in_grace = send("requests").await.expect("inside the grace period");
    assert_eq!(
        first_status(&in_grace),
        Some(&UsageRecordResultStatus::Success)
    );

    sim.handle().set_clock(ClockSetting::Fixed {
        at: at("2026-04-01T06:00:00Z"),
    });
    let (err, status) = service_error(send("storage_gb").await.expect_err("month closed"));
    assert_eq!(status, 400);
    assert!(err.is_timestamp_out_of_bounds_exception(), "{err:?}");
    assert!(
        err.message()
            .expect("message")
            .contains("previous billing month")
    );
    assert_eq!(sim.handle().ledger().records.len(), 1);
}

#[tokio::test]
async fn a_license_arn_off_the_model_pattern_is_an_invalid_license() {
    // The EventBridge docs' example ARN has no `arn:` prefix.
    invalid_license(
        "aws:license-manager:us-east-1:123456789012:l-e52ca6f38bf84d0fafb8802ca15ac11x",
        "pattern",
    )
    .await;
}

#[tokio::test]
async fn a_license_unknown_to_a_seeded_simulator_is_an_invalid_license() {
    invalid_license(
        "arn:aws:license-manager::123456789012:license:l-00000000000000000000000000000000",
        "not a license known",
    )
    .await;
}

#[tokio::test]
async fn dimensions_are_per_product_and_case_sensitive() {
    let err = whole_batch_refused(record(1, "Requests", 1)).await;
    assert!(err.is_invalid_usage_dimension_exception(), "{err:?}");
    let message = err.message().expect("message");
    assert!(
        message.contains("\"Requests\"") && message.contains(PRODUCT),
        "{message}"
    );
}

#[tokio::test]
async fn more_than_five_tags_is_an_invalid_tag() {
    let tags = [
        ("a", "1"),
        ("b", "2"),
        ("c", "3"),
        ("d", "4"),
        ("e", "5"),
        ("f", "6"),
    ];
    let bad = with_allocations(1, vec![allocation(1, &tags)]);
    let err = whole_batch_refused(bad).await;
    assert!(err.is_invalid_tag_exception(), "{err:?}");
}

#[tokio::test]
async fn tag_characters_and_lengths_follow_the_model() {
    for (key, value) in [
        ("team>x".to_owned(), "a".to_owned()),
        ("team".to_owned(), "a~b".to_owned()),
        ("k".repeat(101), "a".to_owned()),
        ("team".to_owned(), "v".repeat(257)),
    ] {
        let bad = with_allocations(1, vec![allocation(1, &[(key.as_str(), value.as_str())])]);
        let err = whole_batch_refused(bad).await;
        assert!(err.is_invalid_tag_exception(), "{key:?}={value:?}: {err:?}");
    }
    // The longest key and value are fine.
    let sim = start(config()).await;
    let client = client(&sim).await;
    let (key, value) = ("k".repeat(100), "v".repeat(256));
    let ok = with_allocations(1, vec![allocation(1, &[(key.as_str(), value.as_str())])]);
    meter(&client, vec![ok])
        .await
        .expect("longest tag accepted");
}

#[tokio::test]
async fn allocations_must_add_up_to_the_quantity() {
    refused_with(
        with_allocations(
            10,
            vec![allocation(4, &[("team", "a")]), allocation(5, &[])],
        ),
        BatchMeterUsageError::is_invalid_usage_allocations_exception,
        "sum to 9",
    )
    .await;
}

#[tokio::test]
async fn more_than_2500_allocations_is_invalid() {
    refused_with(
        with_allocations(2501, (0..2501).map(|_| allocation(1, &[])).collect()),
        BatchMeterUsageError::is_invalid_usage_allocations_exception,
        "2501 allocations",
    )
    .await;
}

/// Sends one record with a request-level `product_code` (which a LicenseArn call must
/// not carry): the call fails with HTTP 400 and is counted as such.
async fn refused_with_product_code(product_code: &str) -> (RunningSim, BatchMeterUsageError) {
    let sim = start(config()).await;
    let client = client(&sim).await;
    let err = client
        .batch_meter_usage()
        .product_code(product_code)
        .usage_records(record(1, "requests", 1))
        .send()
        .await
        .expect_err("refused");
    let (err, status) = service_error(err);
    assert_eq!(status, 400);
    assert_eq!(sim.handle().stats().product_code_with_license_arn, 1);
    (sim, err)
}

#[tokio::test]
async fn a_request_product_code_of_another_product_is_invalid() {
    let (_sim, err) = refused_with_product_code("someotherproduct").await;
    assert!(err.is_invalid_product_code_exception(), "{err:?}");
}

#[tokio::test]
async fn product_code_with_license_arn_records_is_flagged_as_double_billing() {
    let (sim, err) = refused_with_product_code(PRODUCT).await;
    assert_eq!(err.code(), Some("ValidationException"));
    assert!(err.message().expect("message").contains("double billing"));
    assert!(sim.handle().ledger().records.is_empty());
}

/// Sends `records` alone: the call fails with HTTP 400 as a `ValidationException`
/// whose message contains `reason`, and bills nothing.
async fn invalid_call(
    client: &mm::Client,
    sim: &RunningSim,
    records: Vec<UsageRecord>,
    reason: &str,
) {
    let (err, status) = meter_err(client, records).await;
    assert_eq!(status, 400);
    assert_eq!(err.code(), Some("ValidationException"));
    assert!(err.message().expect("message").contains(reason));
    assert!(sim.handle().ledger().records.is_empty());
}

#[tokio::test]
async fn more_than_25_records_is_a_validation_error() {
    let sim = start(config()).await;
    let client = client(&sim).await;
    let records = (0..26).map(|i| record(i, "requests", 1)).collect();
    invalid_call(&client, &sim, records, "26 records").await;

    // 25 is the limit, not over it.
    let records = (0..25).map(|i| record(i, "requests", 1)).collect();
    meter(&client, records).await.expect("25 records accepted");
}

#[tokio::test]
async fn a_body_over_1_mb_is_a_validation_error() {
    let sim = start(config()).await;
    let client = client(&sim).await;
    let huge = record(1, &"d".repeat(1024 * 1024 + 1), 1);
    invalid_call(&client, &sim, vec![huge], "1 MB").await;
}

#[tokio::test]
async fn a_negative_quantity_is_a_validation_error() {
    refused_with(record(1, "storage_gb", -1), is_validation, "Quantity").await;
}

#[tokio::test]
async fn records_without_account_or_license_are_validation_errors() {
    let no_account = unaddressed().license_arn(LICENSE);
    let no_license = unaddressed().customer_aws_account_id(ACCOUNT);
    for (bad, reason) in [
        (no_account, "CustomerAWSAccountId is required"),
        (no_license, "LicenseArn is required"),
    ] {
        refused_with(bad.build().expect("record"), is_validation, reason).await;
    }
}

#[tokio::test]
async fn a_customer_identifier_with_an_account_is_a_validation_error() {
    let both = unaddressed()
        .customer_identifier("legacy-customer")
        .customer_aws_account_id(ACCOUNT)
        .license_arn(LICENSE)
        .build()
        .expect("record");
    refused_with(both, is_validation, "mutually exclusive").await;
}

#[tokio::test]
async fn the_first_failing_check_decides_and_later_records_do_not_matter() {
    // Record 0 has a bad tag, record 1 a bad timestamp: the timestamp window is
    // checked before tags, across all records.
    let sim = start(SimConfig { ..config() }).await;
    let client = client(&sim).await;
    let bad_tag = with_allocations(1, vec![allocation(1, &[("bad>key", "v")])]);
    let old = record_at(now() - TimeDelta::hours(30), "requests", 1);
    let (err, _) = meter_err(&client, vec![bad_tag, old]).await;
    assert!(err.is_timestamp_out_of_bounds_exception(), "{err:?}");
}

//! Request-level exceptions through the real SDK client: each fails the WHOLE batch
//! (the valid record sent alongside is not billed) with the modeled error type, or
//! `ValidationException` where the model has none.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use aws_sdk_marketplacemetering::error::ProvideErrorMetadata;
use aws_sdk_marketplacemetering::operation::batch_meter_usage::BatchMeterUsageError;
use aws_sdk_marketplacemetering::types::{UsageAllocation, UsageRecord, UsageRecordResultStatus};
use awsmp_marketplace_sim::{ClockSetting, RunningSim, SimConfig};
use chrono::{DateTime, TimeDelta, Utc};
use common::*;

/// Sends `bad` after a valid record and checks that the call failed with HTTP 400
/// and that nothing was billed. Returns the error.
async fn whole_batch_refused(sim: &RunningSim, bad: UsageRecord) -> BatchMeterUsageError {
    let client = client(sim).await;
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

#[tokio::test]
async fn a_record_24_hours_old_fails_the_batch() {
    let sim = start(config()).await;
    let bad = record_for(
        LICENSE,
        ACCOUNT,
        now() - TimeDelta::hours(24),
        "storage_gb",
        1,
    );
    let err = whole_batch_refused(&sim, bad).await;
    assert!(err.is_timestamp_out_of_bounds_exception(), "{err:?}");
    assert!(err.message().expect("message").contains("UsageRecords[1]"));
}

#[tokio::test]
async fn a_record_just_inside_24_hours_is_accepted() {
    let sim = start(config()).await;
    let client = client(&sim).await;
    let ok = record_for(
        LICENSE,
        ACCOUNT,
        now() - TimeDelta::hours(24) + TimeDelta::seconds(1),
        "requests",
        1,
    );
    let out = meter(&client, vec![ok]).await.expect("accepted");
    assert_eq!(
        out.results()[0].status(),
        Some(&UsageRecordResultStatus::Success)
    );
}

#[tokio::test]
async fn a_future_record_fails_the_batch() {
    let sim = start(config()).await;
    let bad = record_for(
        LICENSE,
        ACCOUNT,
        now() + TimeDelta::seconds(60),
        "storage_gb",
        1,
    );
    let err = whole_batch_refused(&sim, bad).await;
    assert!(err.is_timestamp_out_of_bounds_exception(), "{err:?}");
    assert!(err.message().expect("message").contains("future"));
}

#[tokio::test]
async fn previous_month_usage_is_accepted_until_six_on_the_first() {
    let sim = start(config()).await;
    let client = client(&sim).await;
    let march_31 = at("2026-03-31T23:00:00Z");
    let send = |dimension: &'static str| {
        let client = client.clone();
        async move {
            meter(
                &client,
                vec![record_for(LICENSE, ACCOUNT, march_31, dimension, 1)],
            )
            .await
        }
    };

    sim.handle().set_clock(ClockSetting::Fixed {
        at: at("2026-04-01T05:59:59Z"),
    });
    let in_grace = send("requests").await.expect("inside the grace period");
    assert_eq!(
        in_grace.results()[0].status(),
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
    let sim = start(config()).await;
    // The EventBridge docs' example ARN has no `arn:` prefix.
    let bad = record_for(
        "aws:license-manager:us-east-1:123456789012:l-e52ca6f38bf84d0fafb8802ca15ac11x",
        ACCOUNT,
        now(),
        "requests",
        1,
    );
    let err = whole_batch_refused(&sim, bad).await;
    assert!(err.is_invalid_license_exception(), "{err:?}");
    assert!(err.message().expect("message").contains("pattern"));
}

#[tokio::test]
async fn a_license_unknown_to_a_seeded_simulator_is_an_invalid_license() {
    let sim = start(config()).await;
    let bad = record_for(
        "arn:aws:license-manager::123456789012:license:l-00000000000000000000000000000000",
        ACCOUNT,
        now(),
        "requests",
        1,
    );
    let err = whole_batch_refused(&sim, bad).await;
    assert!(err.is_invalid_license_exception(), "{err:?}");
    assert!(
        err.message()
            .expect("message")
            .contains("not a license known")
    );
}

#[tokio::test]
async fn dimensions_are_per_product_and_case_sensitive() {
    let sim = start(config()).await;
    let err = whole_batch_refused(&sim, record(1, "Requests", 1)).await;
    assert!(err.is_invalid_usage_dimension_exception(), "{err:?}");
    let message = err.message().expect("message");
    assert!(
        message.contains("\"Requests\"") && message.contains(PRODUCT),
        "{message}"
    );
}

#[tokio::test]
async fn more_than_five_tags_is_an_invalid_tag() {
    let sim = start(config()).await;
    let tags = [
        ("a", "1"),
        ("b", "2"),
        ("c", "3"),
        ("d", "4"),
        ("e", "5"),
        ("f", "6"),
    ];
    let bad = with_allocations(1, vec![allocation(1, &tags)]);
    let err = whole_batch_refused(&sim, bad).await;
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
        let sim = start(config()).await;
        let bad = with_allocations(1, vec![allocation(1, &[(key.as_str(), value.as_str())])]);
        let err = whole_batch_refused(&sim, bad).await;
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
    let sim = start(config()).await;
    let bad = with_allocations(
        10,
        vec![allocation(4, &[("team", "a")]), allocation(5, &[])],
    );
    let err = whole_batch_refused(&sim, bad).await;
    assert!(err.is_invalid_usage_allocations_exception(), "{err:?}");
    assert!(err.message().expect("message").contains("sum to 9"));
}

#[tokio::test]
async fn more_than_2500_allocations_is_invalid() {
    let sim = start(config()).await;
    let bad = with_allocations(2501, (0..2501).map(|_| allocation(1, &[])).collect());
    let err = whole_batch_refused(&sim, bad).await;
    assert!(err.is_invalid_usage_allocations_exception(), "{err:?}");
    assert!(err.message().expect("message").contains("2501 allocations"));
}

#[tokio::test]
async fn a_request_product_code_of_another_product_is_invalid() {
    let sim = start(config()).await;
    let client = client(&sim).await;
    let err = client
        .batch_meter_usage()
        .product_code("someotherproduct")
        .usage_records(record(1, "requests", 1))
        .send()
        .await
        .expect_err("refused");
    let (err, status) = service_error(err);
    assert_eq!(status, 400);
    assert!(err.is_invalid_product_code_exception(), "{err:?}");
    assert_eq!(sim.handle().stats().product_code_with_license_arn, 1);
}

#[tokio::test]
async fn product_code_with_license_arn_records_is_flagged_as_double_billing() {
    let sim = start(config()).await;
    let client = client(&sim).await;
    let err = client
        .batch_meter_usage()
        .product_code(PRODUCT)
        .usage_records(record(1, "requests", 1))
        .send()
        .await
        .expect_err("refused");
    let (err, status) = service_error(err);
    assert_eq!(status, 400);
    assert_eq!(err.code(), Some("ValidationException"));
    assert!(err.message().expect("message").contains("double billing"));
    assert_eq!(sim.handle().stats().product_code_with_license_arn, 1);
    assert!(sim.handle().ledger().records.is_empty());
}

#[tokio::test]
async fn more_than_25_records_is_a_validation_error() {
    let sim = start(config()).await;
    let client = client(&sim).await;
    let records = (0..26).map(|i| record(i, "requests", 1)).collect();
    let (err, status) = meter_err(&client, records).await;
    assert_eq!(status, 400);
    assert_eq!(err.code(), Some("ValidationException"));
    assert!(err.message().expect("message").contains("26 records"));
    assert!(sim.handle().ledger().records.is_empty());

    // 25 is the limit, not over it.
    let records = (0..25).map(|i| record(i, "requests", 1)).collect();
    meter(&client, records).await.expect("25 records accepted");
}

#[tokio::test]
async fn a_body_over_1_mb_is_a_validation_error() {
    let sim = start(config()).await;
    let client = client(&sim).await;
    let huge = record(1, &"d".repeat(1024 * 1024 + 1), 1);
    let (err, status) = meter_err(&client, vec![huge]).await;
    assert_eq!(status, 400);
    assert_eq!(err.code(), Some("ValidationException"));
    assert!(err.message().expect("message").contains("1 MB"));
    assert!(sim.handle().ledger().records.is_empty());
}

#[tokio::test]
async fn a_negative_quantity_is_a_validation_error() {
    let sim = start(config()).await;
    let err = whole_batch_refused(&sim, record(1, "storage_gb", -1)).await;
    assert_eq!(err.code(), Some("ValidationException"));
    assert!(err.message().expect("message").contains("Quantity"));
}

#[tokio::test]
async fn records_without_account_or_license_are_validation_errors() {
    let sim = start(config()).await;
    let no_account = UsageRecord::builder()
        .timestamp(sdk_time(now()))
        .license_arn(LICENSE)
        .dimension("requests")
        .quantity(1)
        .build()
        .expect("record");
    let err = whole_batch_refused(&sim, no_account).await;
    assert_eq!(err.code(), Some("ValidationException"));
    assert!(
        err.message()
            .expect("message")
            .contains("CustomerAWSAccountId is required")
    );

    let sim = start(config()).await;
    let no_license = UsageRecord::builder()
        .timestamp(sdk_time(now()))
        .customer_aws_account_id(ACCOUNT)
        .dimension("requests")
        .quantity(1)
        .build()
        .expect("record");
    let err = whole_batch_refused(&sim, no_license).await;
    assert_eq!(err.code(), Some("ValidationException"));
    assert!(
        err.message()
            .expect("message")
            .contains("LicenseArn is required")
    );
}

#[tokio::test]
async fn a_customer_identifier_with_an_account_is_a_validation_error() {
    let sim = start(config()).await;
    let both = UsageRecord::builder()
        .timestamp(sdk_time(now()))
        .customer_identifier("legacy-customer")
        .customer_aws_account_id(ACCOUNT)
        .license_arn(LICENSE)
        .dimension("requests")
        .quantity(1)
        .build()
        .expect("record");
    let err = whole_batch_refused(&sim, both).await;
    assert_eq!(err.code(), Some("ValidationException"));
    assert!(
        err.message()
            .expect("message")
            .contains("mutually exclusive")
    );
}

#[tokio::test]
async fn the_first_failing_check_decides_and_later_records_do_not_matter() {
    // Record 0 has a bad tag, record 1 a bad timestamp: the timestamp window is
    // checked before tags, across all records.
    let sim = start(SimConfig { ..config() }).await;
    let client = client(&sim).await;
    let bad_tag = with_allocations(1, vec![allocation(1, &[("bad>key", "v")])]);
    let old = record_for(
        LICENSE,
        ACCOUNT,
        now() - TimeDelta::hours(30),
        "requests",
        1,
    );
    let (err, _) = meter_err(&client, vec![bad_tag, old]).await;
    assert!(err.is_timestamp_out_of_bounds_exception(), "{err:?}");
}

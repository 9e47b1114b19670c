//! The metering pipeline end to end: the real discoverer, aggregator, cleanup and
//! submitter handlers, called with real event JSON, against moto (DynamoDB + SQS) and
//! the Marketplace simulator, with time driven explicitly. Each test tells one story
//! from issue 4's proof list.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use awsmp_core::model::{ReasonCode, attr};
use awsmp_core::ports::metric;
use awsmp_e2e::common::*;
use awsmp_e2e::views::AggregatedView;
use awsmp_e2e::{QueueKind, Stack, license};
use awsmp_marketplace_sim::FaultKind;

const NOW: &str = "2026-11-30T10:30:00Z";

/// Asserts the status of the raw row with this sort key.
async fn assert_raw_status(stack: &Stack, sort_key: &str, status: &str) {
    let row = stack.raw_row(sort_key).await.unwrap();
    assert_eq!(
        row.status.as_deref(),
        Some(status),
        "status of raw row {sort_key}: {row:?}"
    );
}

/// Puts raw usage rows, each `(license, account, dimension, timestamp, quantity)`, in order.
async fn put_usage_rows(stack: &Stack, rows: &[(&str, &str, &str, &str, i64)]) {
    for &(license_arn, account, dimension, timestamp, quantity) in rows {
        stack
            .put_usage(license_arn, account, dimension, timestamp, quantity)
            .await
            .unwrap();
    }
}

/// The first aggregated record that `wanted` picks.
async fn record_where(stack: &Stack, wanted: impl Fn(&AggregatedView) -> bool) -> AggregatedView {
    stack
        .aggregated_rows()
        .await
        .unwrap()
        .into_iter()
        .find(|r| wanted(r))
        .expect("a record it picks")
}

/// 1. Several licenses (two on one account), dimensions and hours are billed exactly
/// their per-group sums; raw rows end `Aggregated`, records `Success` with an id.
#[tokio::test]
async fn happy_path_bills_each_group_its_sum() {
    let stack = stack(NOW).await;
    let (l1, l2, l3) = (license(1), license(2), license(3));
    let mut expected = Vec::new();
    for (l, account) in [(&l1, ACCOUNT_A), (&l2, ACCOUNT_A), (&l3, ACCOUNT_B)] {
        stack.license_updated(l, account).await.unwrap();
        for hour in ["07", "08", "09"] {
            for minute in [0, 17, 59] {
                let q = 3 + minute;
                stack
                    .put_usage(
                        l,
                        account,
                        "requests",
                        &format!("2026-11-30T{hour}:{minute:02}:00Z"),
                        q,
                    )
                    .await
                    .unwrap();
                expected.push((
                    key(l, account, "requests", &format!("2026-11-30T{hour}")),
                    q,
                ));
            }
            stack
                .put_usage(
                    l,
                    account,
                    "storage",
                    &format!("2026-11-30T{hour}:30:00"),
                    7,
                )
                .await
                .unwrap();
            expected.push((key(l, account, "storage", &format!("2026-11-30T{hour}")), 7));
        }
    }
    // The open hour is not metered yet.
    let open = stack
        .put_usage(&l1, ACCOUNT_A, "requests", "2026-11-30T10:05:00Z", 5)
        .await
        .unwrap();

    let report = stack.run_pipeline().await.unwrap();

    assert_eq!(report.success, 18);
    assert_eq!(stack.billed(), sums(&expected));
    for row in stack.raw_rows().await.unwrap() {
        if row.sort_key == open {
            assert!(row.pending && row.status.is_none());
        } else {
            assert_eq!(row.status.as_deref(), Some("Aggregated"), "{row:?}");
            assert!(!row.pending);
        }
    }
    for record in stack.aggregated_rows().await.unwrap() {
        assert_eq!(record.status, "Success");
        assert!(record.metering_record_id.is_some());
        assert!(!record.pending && !record.in_flight);
    }
    assert_conserved(&stack, false).await;

    // An hour later the open hour has completed and bills too.
    stack.advance(chrono::Duration::hours(1));
    let open_hour = key(&l1, ACCOUNT_A, "requests", "2026-11-30T10");
    run_pipeline_and_assert_billed(&stack, &open_hour, 5, true).await;
}

/// 2. Every client-side reason code reaches `RejectedClientSide` and is never billed,
/// while valid rows of the same hour (even of the same group) bill.
#[tokio::test]
async fn every_reason_code_is_rejected_and_never_billed() {
    let stack = stack(NOW).await;
    let l = active_license(&stack, 1, ACCOUNT_A).await;
    let l3 = active_license(&stack, 3, ACCOUNT_B).await;
    let good = awsmp_e2e::Stack::usage_item;
    let mut expected_reason: HashMap<String, ReasonCode> = HashMap::new();
    let mut put = |item: HashMap<String, AttributeValue>, reason: ReasonCode| {
        let sort_key = item[attr::USAGE_SORT_KEY].as_s().unwrap().clone();
        expected_reason.insert(sort_key, reason);
        item
    };
    let hour = "2026-11-30T09";
    let s = |v: &str| AttributeValue::S(v.to_string());
    let n = |v: &str| AttributeValue::N(v.to_string());

    let mut items = Vec::new();
    // Valid rows of the busiest group, and of another group in the same hour.
    items.push(good(&l, ACCOUNT_A, "requests", "2026-11-30T09:00:00Z", 10));
    items.push(good(&l, ACCOUNT_A, "requests", "2026-11-30T09:01:00Z", 5));
    items.push(good(&l3, ACCOUNT_B, "storage", "2026-11-30T09:02:00Z", 8));

    let mut i = good(&l, ACCOUNT_A, "requests", "2026-11-30T09:03:00Z", 1);
    i.insert(attr::USAGE_SORT_KEY.into(), s("111122223333#requests"));
    items.push(put(i, ReasonCode::MalformedSortKey));
    let mut i = good(&l, ACCOUNT_A, "requests", "2026-11-30T09:04:00Z", 1);
    i.insert(attr::DIMENSION.into(), s("storage"));
    items.push(put(i, ReasonCode::SortKeyMismatch));
    let mut i = good(&l, ACCOUNT_A, "requests", "2026-11-30 09:05:00", 1);
    i.insert(attr::METERING_PENDING.into(), s(hour));
    items.push(put(i, ReasonCode::MalformedTimestamp));
    let mut i = good(&l, ACCOUNT_A, "requests", "2026-11-30T09:06:00Z", 1);
    i.insert(attr::QUANTITY.into(), s("ten"));
    items.push(put(i, ReasonCode::NonNumericQuantity));
    let mut i = good(&l, ACCOUNT_A, "requests", "2026-11-30T09:07:00Z", 1);
    i.insert(attr::QUANTITY.into(), n("1.5"));
    items.push(put(i, ReasonCode::NonIntegerQuantity));
    items.push(put(
        good(&l, ACCOUNT_A, "requests", "2026-11-30T09:08:00Z", -3),
        ReasonCode::NegativeQuantity,
    ));
    items.push(put(
        good(
            &l,
            ACCOUNT_A,
            "requests",
            "2026-11-30T09:09:00Z",
            2_147_483_648,
        ),
        ReasonCode::QuantityTooLarge,
    ));
    let mut i = good(&l, ACCOUNT_A, "requests", "2026-11-30T09:10:00Z", 1);
    i.remove(attr::DIMENSION);
    items.push(put(i, ReasonCode::MissingDimension));
    let mut i = good(&l, ACCOUNT_A, "requests", "2026-11-30T11:00:00Z", 1);
    i.insert(attr::METERING_PENDING.into(), s(hour));
    items.push(put(i, ReasonCode::TimestampInFuture));
    let mut i = good(&l, ACCOUNT_A, "requests", "2026-11-29T09:11:00Z", 1);
    i.insert(attr::METERING_PENDING.into(), s(hour));
    items.push(put(i, ReasonCode::TimestampOutOfWindow));
    items.push(put(
        good(
            "not-a-license-arn",
            ACCOUNT_A,
            "requests",
            "2026-11-30T09:12:00Z",
            1,
        ),
        ReasonCode::InvalidLicenseArn,
    ));
    items.push(put(
        good(&l, "12345", "requests", "2026-11-30T09:13:00Z", 1),
        ReasonCode::MissingCustomerAWSAccountId,
    ));
    let mut i = good(&l, ACCOUNT_A, "requests", "2026-11-30T09:14:00Z", 1);
    i.insert(attr::USAGE_ALLOCATIONS.into(), s("team=red"));
    items.push(put(i, ReasonCode::MalformedAllocations));
    let mut i = good(&l, ACCOUNT_A, "requests", "2026-11-30T09:15:00Z", 1);
    i.insert(
        attr::USAGE_ALLOCATIONS.into(),
        allocations(&[(2, &[("team", "a")]), (-1, &[("team", "b")])]),
    );
    items.push(put(i, ReasonCode::NegativeOrNonIntegerAllocation));
    let mut i = good(&l, ACCOUNT_A, "requests", "2026-11-30T09:16:00Z", 1);
    i.insert(
        attr::USAGE_ALLOCATIONS.into(),
        allocations(&[(1, &[("team", "")])]),
    );
    items.push(put(i, ReasonCode::MissingTagKeyOrValue));
    let mut i = good(&l, ACCOUNT_A, "requests", "2026-11-30T09:17:00Z", 1);
    i.insert(
        attr::USAGE_ALLOCATIONS.into(),
        allocations(&[(1, &[("bad{key", "x")])]),
    );
    items.push(put(i, ReasonCode::InvalidTag));
    let mut i = good(&l, ACCOUNT_A, "requests", "2026-11-30T09:18:00Z", 1);
    let six: Vec<(String, String)> = (0..6).map(|k| (format!("k{k}"), "v".to_string())).collect();
    let six_refs: Vec<(&str, &str)> = six.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    i.insert(
        attr::USAGE_ALLOCATIONS.into(),
        allocations(&[(1, &six_refs)]),
    );
    items.push(put(i, ReasonCode::TooManyTags));
    let mut i = good(&l, ACCOUNT_A, "requests", "2026-11-30T09:19:00Z", 5);
    i.insert(
        attr::USAGE_ALLOCATIONS.into(),
        allocations(&[(3, &[("team", "a")])]),
    );
    items.push(put(i, ReasonCode::AllocationSumMismatch));
    let mut i = good(&l, ACCOUNT_A, "requests", "2026-11-30T09:20:00Z", 1);
    i.insert(attr::PRODUCT_CODE.into(), s("prod-other"));
    items.push(put(i, ReasonCode::ProductCodeMismatch));
    // The pipeline's own retention attribute, written by the seller.
    let mut i = good(&l, ACCOUNT_A, "requests", "2026-11-30T09:26:00Z", 1);
    i.insert(
        attr::EXPIRES_AT.into(),
        aws_sdk_dynamodb::types::AttributeValue::N("4102444800".into()),
    );
    items.push(put(i, ReasonCode::ReservedAttribute));
    // Group checks, each in a group of its own.
    let values: Vec<String> = (0..2501).map(|v| format!("t{v}")).collect();
    let many: Vec<(i64, Vec<(&str, &str)>)> = values
        .iter()
        .map(|v| (1, vec![("tenant", v.as_str())]))
        .collect();
    let many_refs: Vec<(i64, &[(&str, &str)])> =
        many.iter().map(|(q, t)| (*q, t.as_slice())).collect();
    let mut i = good(&l, ACCOUNT_A, "users", "2026-11-30T09:21:00Z", 2501);
    i.insert(attr::USAGE_ALLOCATIONS.into(), allocations(&many_refs));
    items.push(put(i, ReasonCode::TooManyAllocations));
    let mut tagged = good(&l3, ACCOUNT_B, "users", "2026-11-30T09:22:00Z", 4);
    tagged.insert(
        attr::USAGE_ALLOCATIONS.into(),
        allocations(&[(4, &[("team", "a")])]),
    );
    items.push(put(tagged, ReasonCode::MixedAllocatedAndUnallocated));
    items.push(put(
        good(&l3, ACCOUNT_B, "users", "2026-11-30T09:23:00Z", 6),
        ReasonCode::MixedAllocatedAndUnallocated,
    ));
    // 170 allocations of five maximal tags (~1.9 KB each): a record holding them would
    // pass 300 KB of allocations, so the row that brings them cannot be counted.
    let heavy: Vec<Vec<(String, String)>> = (0..170)
        .map(|n| {
            (0..5)
                .map(|k| {
                    (
                        format!("{k}{}", "k".repeat(99)),
                        format!("{n:08}{}", "v".repeat(248)),
                    )
                })
                .collect()
        })
        .collect();
    let heavy_refs: Vec<Vec<(&str, &str)>> = heavy
        .iter()
        .map(|tags| tags.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect())
        .collect();
    let heavy_allocations: Vec<(i64, &[(&str, &str)])> =
        heavy_refs.iter().map(|t| (1, t.as_slice())).collect();
    let mut i = good(&l, ACCOUNT_A, "storage", "2026-11-30T09:24:00Z", 170);
    i.insert(
        attr::USAGE_ALLOCATIONS.into(),
        allocations(&heavy_allocations),
    );
    items.push(put(i, ReasonCode::RecordTooLarge));
    // A row filed under a marker that is not an hour (as other samples write), whose
    // timestamp cannot place it either: found by the index sweep, rejected.
    let mut i = good(&l, ACCOUNT_A, "requests", "2026-11-30T09:25:00Z", 1);
    i.insert(attr::TIMESTAMP.into(), s("yesterday"));
    i.insert(
        attr::USAGE_SORT_KEY.into(),
        s(&format!("{ACCOUNT_A}#requests#yesterday")),
    );
    i.insert(attr::METERING_PENDING.into(), s("true"));
    items.push(put(i, ReasonCode::MalformedMeteringPending));
    for item in items {
        stack.put_item(item).await.unwrap();
    }

    stack.run_pipeline().await.unwrap();
    // A late row for the hour that was just billed.
    let late = stack
        .put_usage(&l, ACCOUNT_A, "requests", "2026-11-30T09:45:00Z", 99)
        .await
        .unwrap();
    expected_reason.insert(late.clone(), ReasonCode::HourAlreadySubmitted);
    stack.run_pipeline().await.unwrap();

    // THEN each bad row carries its reason, every code is covered, none was billed
    let statuses = raw_statuses(&stack).await;
    for (sort_key, reason) in &expected_reason {
        assert_eq!(
            statuses[sort_key],
            (
                Some("RejectedClientSide".to_string()),
                Some(reason.as_str().to_string())
            ),
            "{sort_key}"
        );
    }
    let covered: std::collections::BTreeSet<&ReasonCode> = expected_reason.values().collect();
    assert_eq!(
        covered.len(),
        ReasonCode::ALL.len(),
        "every reason code is exercised"
    );
    assert_eq!(
        stack.billed(),
        sums(&[
            (key(&l, ACCOUNT_A, "requests", hour), 15),
            (key(&l3, ACCOUNT_B, "storage", hour), 8),
        ])
    );
    assert_eq!(
        stack.metrics.total(metric::USAGE_RECORD_REJECTED),
        expected_reason.len() as u64
    );
    assert_eq!(
        stack
            .metrics
            .get(metric::USAGE_RECORD_REJECTED, &[("Reason", "TooManyTags")]),
        1
    );
    assert_eq!(stack.metrics.total(metric::LATE_USAGE_AFTER_SUBMISSION), 1);
    assert!(
        stack
            .aggregated_rows()
            .await
            .unwrap()
            .iter()
            .all(|r| r.status != "RejectedClientSide")
    );
    assert_conserved(&stack, true).await;
}

/// 3. One undefined dimension among 25 groups: bisection isolates it; 24 bill.
#[tokio::test]
async fn one_undefined_dimension_among_25_groups() {
    let stack = stack_with(NOW, |o| {
        o.dimensions = (0..24).map(|d| format!("dim{d:02}")).collect();
    })
    .await;
    let l = active_license(&stack, 1, ACCOUNT_A).await;
    for d in 0..25 {
        stack
            .put_usage(
                &l,
                ACCOUNT_A,
                &format!("dim{d:02}"),
                "2026-11-30T09:10:00Z",
                d + 1,
            )
            .await
            .unwrap();
    }
    let report = stack.run_pipeline().await.unwrap();
    assert_eq!((report.success, report.errors), (24, 1));
    let records = stack.aggregated_rows().await.unwrap();
    let bad: Vec<_> = records.iter().filter(|r| r.status == "Error").collect();
    assert_eq!(bad.len(), 1);
    assert_eq!(bad[0].dimension, "dim24");
    assert_eq!(
        bad[0].reason.as_deref(),
        Some("InvalidUsageDimensionException")
    );
    assert_eq!(stack.billed().len(), 24);
    assert!(
        !stack
            .billed()
            .contains_key(&key(&l, ACCOUNT_A, "dim24", "2026-11-30T09"))
    );
    assert_eq!(
        stack.metrics.get(
            metric::BATCH_METER_USAGE_EXCEPTION,
            &[("Exception", "InvalidUsageDimensionException")]
        ),
        1
    );
    assert_conserved(&stack, true).await;
}

/// 4. Re-running every stage and redelivering every message changes nothing.
#[tokio::test]
async fn rerunning_and_redelivering_changes_nothing() {
    let stack = stack(NOW).await;
    for n in 1..=3 {
        let l = active_license(&stack, n, ACCOUNT_A).await;
        for m in 0..4 {
            stack
                .put_usage(
                    &l,
                    ACCOUNT_A,
                    "requests",
                    &format!("2026-11-30T0{}:{:02}:00Z", 7 + m % 3, m * 11),
                    10 + m,
                )
                .await
                .unwrap();
        }
    }
    stack.run_pipeline().await.unwrap();
    let ledger = stack.ledger();
    let raw = raw_statuses(&stack).await;
    let records = stack.aggregated_rows().await.unwrap();
    let calls = stack.sim.handle().stats().batch_meter_usage_calls;

    // Every message of every queue again, and every stage again, twice.
    for _ in 0..2 {
        let redelivered = stack.redeliver_everything().await.unwrap();
        assert!(redelivered > 0);
        stack.run_pipeline().await.unwrap();
    }

    assert_eq!(stack.ledger().records, ledger.records);
    assert!(stack.ledger().conflicts.is_empty());
    assert_eq!(raw_statuses(&stack).await, raw);
    let after = stack.aggregated_rows().await.unwrap();
    assert_eq!(
        after
            .iter()
            .map(|r| (&r.sort_key, r.quantity, &r.status))
            .collect::<Vec<_>>(),
        records
            .iter()
            .map(|r| (&r.sort_key, r.quantity, &r.status))
            .collect::<Vec<_>>()
    );
    assert_eq!(
        stack.sim.handle().stats().batch_meter_usage_calls,
        calls,
        "nothing is sent twice"
    );
    assert_conserved(&stack, true).await;
}

/// 5. Throttling and UnprocessedRecords: everything bills exactly once after further runs.
#[tokio::test]
async fn throttling_and_unprocessed_records_bill_exactly_once_eventually() {
    let stack = stack(NOW).await;
    let mut expected = Vec::new();
    for n in 1..=4 {
        let l = active_license(&stack, n, ACCOUNT_A).await;
        for d in ["requests", "storage", "users"] {
            for h in 5..10 {
                let ts = format!("2026-11-30T{h:02}:15:00Z");
                stack
                    .put_usage(&l, ACCOUNT_A, d, &ts, h + n as i64)
                    .await
                    .unwrap();
                expected.push((
                    key(&l, ACCOUNT_A, d, &format!("2026-11-30T{h:02}")),
                    h + n as i64,
                ));
            }
        }
    }
    discover_and_aggregate(&stack).await;
    fail_batch_meter_usage(&stack, FaultKind::Throttling, 2);
    fail_batch_meter_usage(&stack, FaultKind::Unprocessed { records: 2 }, 4);
    fail_batch_meter_usage(&stack, FaultKind::InternalError, 1);

    let first = stack.run_submitter().await.unwrap();
    assert!(
        first.success < 60,
        "faults left work for later runs: {first:?}"
    );
    let mut runs = 1;
    while stack
        .aggregated_rows()
        .await
        .unwrap()
        .iter()
        .any(|r| r.status == "Pending")
    {
        stack.advance(chrono::Duration::minutes(5));
        stack.run_submitter().await.unwrap();
        runs += 1;
        assert!(runs < 10, "records never drained");
    }
    assert!(stack.sim.handle().pending_faults().is_empty());
    assert_eq!(stack.billed(), sums(&expected));
    assert!(stack.ledger().conflicts.is_empty());
    assert!(stack.metrics.total(metric::USAGE_RECORD_UNPROCESSED) >= 1);
    assert_conserved(&stack, true).await;
}

/// 6. Raw rows and aggregated records age out; previous-month usage is accepted until
/// 06:00 on the 1st and ages out after, though less than 24 h old.
#[tokio::test]
async fn age_out_of_both_kinds_and_the_month_boundary_grace() {
    let stack = stack_with("2026-12-01T03:30:00Z", |o| {
        o.lock = awsmp_core::time::MeteringLockHours::new(3).unwrap();
    })
    .await;
    let l = active_license(&stack, 1, ACCOUNT_A).await;
    // A day-old row nobody discovered in time.
    let lost = stack
        .put_usage(&l, ACCOUNT_A, "requests", "2026-11-30T02:40:00Z", 4)
        .await
        .unwrap();
    // Last month's final hour: the 3-hour lock drops at 03:00 on the 1st.
    stack
        .put_usage(&l, ACCOUNT_A, "requests", "2026-11-30T23:10:00Z", 6)
        .await
        .unwrap();
    // This month's first hour is still locked.
    let locked = stack
        .put_usage(&l, ACCOUNT_A, "requests", "2026-12-01T01:10:00Z", 2)
        .await
        .unwrap();

    stack.run_pipeline().await.unwrap();
    assert_raw_status(&stack, &lost, "AggregationExpired").await;
    assert_billed(&stack, &key(&l, ACCOUNT_A, "requests", "2026-11-30T23"), 6);
    assert!(stack.raw_row(&locked).await.unwrap().pending);
    assert_eq!(stack.metrics.total(metric::USAGE_AGGREGATION_EXPIRED), 1);

    // Previous-month rows: one aggregated but not submitted before 06:00, one never
    // discovered before 06:00.
    let unsubmitted = stack
        .put_usage(&l, ACCOUNT_A, "storage", "2026-11-30T22:20:00Z", 3)
        .await
        .unwrap();
    stack.set_now(at("2026-12-01T05:50:00Z"));
    discover_and_aggregate(&stack).await;
    assert_raw_status(&stack, &unsubmitted, "Aggregated").await;
    let undiscovered = stack
        .put_usage(&l, ACCOUNT_A, "users", "2026-11-30T21:15:00Z", 5)
        .await
        .unwrap();

    stack.set_now(at("2026-12-01T06:05:00Z"));
    stack.run_pipeline().await.unwrap();

    let record = record_where(&stack, |r| r.dimension == "storage").await;
    assert_eq!(record.status, "SubmissionExpired");
    assert!(!record.pending);
    assert_raw_status(&stack, &undiscovered, "AggregationExpired").await;
    assert_eq!(stack.metrics.total(metric::USAGE_SUBMISSION_EXPIRED), 1);
    assert_eq!(stack.metrics.total(metric::USAGE_AGGREGATION_EXPIRED), 2);
    // This month's hour bills normally once its lock passes.
    let locked_hour = key(&l, ACCOUNT_A, "requests", "2026-12-01T01");
    run_pipeline_and_assert_billed(&stack, &locked_hour, 2, true).await;
}

/// 7. CustomerNotSubscribed before License Updated stays pending and bills after
/// activation; a license never activated ages out as SubmissionExpired.
#[tokio::test]
async fn customer_not_subscribed_before_activation_then_billed_or_expired() {
    let stack = stack(NOW).await;
    let early = license(7);
    let never = license(8);
    // Both bought and registered; License Updated has not arrived for either.
    stack.registered_only(&early, ACCOUNT_A).unwrap();
    stack.registered_only(&never, ACCOUNT_B).unwrap();
    put_usage_rows(
        &stack,
        &[
            (&early, ACCOUNT_A, "requests", "2026-11-30T09:10:00Z", 12),
            (&never, ACCOUNT_B, "requests", "2026-11-30T09:10:00Z", 5),
        ],
    )
    .await;

    let report = stack.run_pipeline().await.unwrap();
    assert_eq!(report.awaiting_subscription, 2);
    assert!(stack.billed().is_empty());
    assert!(
        stack
            .aggregated_rows()
            .await
            .unwrap()
            .iter()
            .all(|r| r.status == "Pending" && !r.in_flight)
    );

    // License Updated arrives for one of them.
    stack.advance(chrono::Duration::minutes(20));
    stack.license_updated(&early, ACCOUNT_A).await.unwrap();
    stack.run_submitter().await.unwrap();
    assert_billed(
        &stack,
        &key(&early, ACCOUNT_A, "requests", "2026-11-30T09"),
        12,
    );

    // The other never does: retried until the window closes, then SubmissionExpired.
    stack.set_now(at("2026-12-01T09:30:00Z"));
    stack.run_submitter().await.unwrap();
    stack.set_now(at("2026-12-01T10:00:00Z"));
    stack.run_submitter().await.unwrap();
    let record = record_where(&stack, |r| r.license_arn == never).await;
    assert_eq!(record.status, "SubmissionExpired");
    assert_eq!(stack.metrics.total(metric::CUSTOMER_NOT_SUBSCRIBED), 0);
    assert_conserved(&stack, true).await;
}

/// An ended agreement answers CustomerNotSubscribed, final once the subscriber row exists.
#[tokio::test]
async fn customer_not_subscribed_after_the_agreement_ended_is_final() {
    let stack = stack(NOW).await;
    let l = active_license(&stack, 4, ACCOUNT_A).await;
    stack.revoke(&l, ACCOUNT_A).unwrap();
    stack
        .put_usage(&l, ACCOUNT_A, "requests", "2026-11-30T09:10:00Z", 3)
        .await
        .unwrap();
    let report = stack.run_pipeline().await.unwrap();
    assert_eq!(report.not_subscribed, 1);
    assert_eq!(first_record(&stack).await.status, "CustomerNotSubscribed");
    assert_eq!(stack.metrics.total(metric::CUSTOMER_NOT_SUBSCRIBED), 1);
    assert_conserved(&stack, true).await;
}

/// A deprovisioning license's final usage, the open hour included, is flushed first
/// and billed before its window closes.
#[tokio::test]
async fn deprovisioning_flush_bills_the_open_hour_before_the_window_closes() {
    let stack = stack(NOW).await;
    let leaving = active_license(&stack, 5, ACCOUNT_A).await;
    let staying = active_license(&stack, 6, ACCOUNT_B).await;
    stack
        .put_subscriber(
            &leaving,
            ACCOUNT_A,
            awsmp_core::model::SubscriptionStatus::Deprovisioning,
            Some(at("2026-11-30T10:35:00Z")),
        )
        .await
        .unwrap();
    put_usage_rows(
        &stack,
        &[
            (&leaving, ACCOUNT_A, "requests", "2026-11-30T09:50:00Z", 4),
            (&leaving, ACCOUNT_A, "requests", "2026-11-30T10:20:00Z", 6),
            (&staying, ACCOUNT_B, "requests", "2026-11-30T10:20:00Z", 9),
        ],
    )
    .await;

    let discovered = stack.run_discoverer().await.unwrap();
    assert_eq!(discovered.flush_groups, 2);
    assert_eq!(stack.peek(QueueKind::Deprovision).await.unwrap().len(), 2);
    stack.drain_aggregator().await.unwrap();
    stack.drain_cleanup().await.unwrap();
    stack.run_submitter().await.unwrap();

    assert_billed(
        &stack,
        &key(&leaving, ACCOUNT_A, "requests", "2026-11-30T10"),
        6,
    );
    assert_billed(
        &stack,
        &key(&leaving, ACCOUNT_A, "requests", "2026-11-30T09"),
        4,
    );
    assert!(
        !stack
            .billed()
            .contains_key(&key(&staying, ACCOUNT_B, "requests", "2026-11-30T10"))
    );
    assert_conserved(&stack, false).await;
}

/// Malformed SQS bodies are reported as failures by message id; the rest of the batch
/// is processed.
#[tokio::test]
async fn malformed_messages_fail_alone() {
    let stack = stack(NOW).await;
    let l = active_license(&stack, 1, ACCOUNT_A).await;
    stack
        .put_usage(&l, ACCOUNT_A, "requests", "2026-11-30T09:10:00Z", 3)
        .await
        .unwrap();
    stack.run_discoverer().await.unwrap();
    stack.send_raw(QueueKind::Work, "{not json").await.unwrap();
    stack
        .send_raw(QueueKind::Cleanup, r#"{"kind":"aggregate","group":{}}"#)
        .await
        .unwrap();
    let aggregated = stack.drain_aggregator().await.unwrap();
    assert_eq!((aggregated.succeeded, aggregated.failed), (1, 1));
    // Cleanup has only the malformed message (the commit finalized the good row).
    let cleaned = stack.drain_cleanup().await.unwrap();
    assert_eq!((cleaned.succeeded, cleaned.failed), (0, 1));
    stack.run_submitter().await.unwrap();
    assert_eq!(stack.billed().len(), 1);
}

/// Dry run: never calls BatchMeterUsage; test accounts' records become DryRunSubmitted.
#[tokio::test]
async fn dry_run_marks_test_accounts_and_never_calls_marketplace() {
    let stack = stack_with(NOW, |o| {
        o.mode = awsmp_core::submit::MeteringMode::from_parts("dry-run", &[ACCOUNT_A.to_string()])
            .unwrap();
    })
    .await;
    let l1 = active_license(&stack, 1, ACCOUNT_A).await;
    let l2 = active_license(&stack, 2, ACCOUNT_B).await;
    put_usage_rows(
        &stack,
        &[
            (&l1, ACCOUNT_A, "requests", "2026-11-30T09:10:00Z", 3),
            (&l2, ACCOUNT_B, "requests", "2026-11-30T09:10:00Z", 3),
        ],
    )
    .await;
    let report = stack.run_pipeline().await.unwrap();
    assert_eq!((report.dry_run_submitted, report.dry_run_skipped), (1, 1));
    assert_eq!(stack.sim.handle().stats().batch_meter_usage_calls, 0);
    let statuses: Vec<String> = stack
        .aggregated_rows()
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.status)
        .collect();
    assert!(
        statuses.contains(&"DryRunSubmitted".to_string())
            && statuses.contains(&"Pending".to_string())
    );
}

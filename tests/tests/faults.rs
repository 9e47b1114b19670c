//! Faults the stage-by-stage tests never produce, end to end against moto and the
//! Marketplace simulator: a `BatchMeterUsage` answer lost after the call billed, a
//! submitter run while a large group is half folded, seller rows that cannot be read
//! or are filed under a non-hour marker, and a Region that never meters.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use aws_sdk_dynamodb::types::AttributeValue;
use awsmp_core::aggregate::plan_aggregation;
use awsmp_core::guardrails::GuardrailContext;
use awsmp_core::model::{GroupKey, attr};
use awsmp_core::ports::{CommitOutcome, metric};
use awsmp_e2e::common::*;
use awsmp_e2e::{AGGREGATED_TABLE, Stack};
use awsmp_marketplace_sim::{FaultKind, LossMode};

const NOW: &str = "2026-11-30T10:30:00Z";

fn group(license_arn: &str, account: &str, dimension: &str, hour: &str) -> GroupKey {
    GroupKey {
        license_arn: license_arn.to_string(),
        customer_aws_account_id: account.to_string(),
        dimension: dimension.to_string(),
        hour: hour.parse().unwrap(),
    }
}

/// A stack at `NOW` where license 1, active on account A, used 5 `requests` at 09:05.
async fn five_requests_at_nine() -> (Stack, String) {
    let stack = stack(NOW).await;
    let l = active_license(&stack, 1, ACCOUNT_A).await;
    stack
        .put_usage(&l, ACCOUNT_A, "requests", "2026-11-30T09:05:00Z", 5)
        .await
        .unwrap();
    (stack, l)
}

/// A response lost after the call billed (HTTP 500 or a dropped connection), or an
/// answer that leaves the record unclear (missing from both lists, an unknown status, a
/// result echoing another quantity): the record keeps the quantity it was sent with,
/// later rows for the hour are late usage, and the re-send carries exactly the billed
/// quantity, so nothing is lost unseen and nothing is billed twice or with a second
/// quantity.
#[tokio::test]
async fn a_response_lost_after_billing_is_resent_with_exactly_the_billed_quantity() {
    for mode in [
        FaultKind::LoseResponse {
            mode: LossMode::Http500,
        },
        FaultKind::LoseResponse {
            mode: LossMode::Drop,
        },
        FaultKind::OmitResults { records: 1 },
        FaultKind::UnknownStatus { records: 1 },
        FaultKind::WrongEcho { records: 1 },
    ] {
        let (stack, l) = five_requests_at_nine().await;
        discover_and_aggregate(&stack).await;

        // GIVEN the simulator bills the call and then loses or garbles the answer
        fail_batch_meter_usage(&stack, mode, 1);
        let first = stack.run_submitter().await.unwrap();
        assert_eq!(first.success, 0, "{mode:?}");
        let hour = key(&l, ACCOUNT_A, "requests", "2026-11-30T09");
        assert_eq!(stack.billed()[&hour], 5, "{mode:?}: the call did bill");
        let record = first_record(&stack).await;
        assert_eq!(
            (record.status.as_str(), record.pending),
            ("Pending", true),
            "{mode:?}"
        );
        assert_eq!(stack.metrics.total(metric::AMBIGUOUS_SUBMISSION), 1);

        // WHEN more usage arrives for that hour and the pipeline runs again
        let late = stack
            .put_usage(&l, ACCOUNT_A, "requests", "2026-11-30T09:50:00Z", 7)
            .await
            .unwrap();
        stack.advance(chrono::Duration::minutes(5));
        stack.run_pipeline().await.unwrap();

        // THEN the re-send carried 5, the duplicate closes the record as billed by us,
        // and the late row is reported, not silently lost or billed as a second quantity
        let record = first_record(&stack).await;
        assert_eq!(record.status, "DuplicateRecord", "{mode:?}");
        assert_eq!(record.reason.as_deref(), Some("BilledByEarlierAttempt"));
        assert_eq!(record.quantity, 5);
        assert_billed(&stack, &hour, 5);
        assert_eq!(stack.metrics.total(metric::UNEXPECTED_DUPLICATE_RECORD), 0);
        let late_row = stack.raw_row(&late).await.unwrap();
        assert_eq!(late_row.reason.as_deref(), Some("HourAlreadySubmitted"));
        assert_eq!(stack.metrics.total(metric::LATE_USAGE_AFTER_SUBMISSION), 1);
        assert_conserved(&stack, false).await;
    }
}

/// A group of more than 99 rows is folded in several transactions; a submitter that
/// runs between them must not bill the part already folded.
#[tokio::test]
async fn a_submitter_run_while_a_large_group_is_half_folded_bills_nothing_of_it() {
    let stack = stack(NOW).await;
    let l = active_license(&stack, 1, ACCOUNT_A).await;
    for i in 0..150 {
        stack
            .put_usage(
                &l,
                ACCOUNT_A,
                "requests",
                &format!("2026-11-30T09:{:02}:{:02}Z", i / 60, i % 60),
                1,
            )
            .await
            .unwrap();
    }
    // GIVEN the aggregator applied the first of the group's two commits, then stalled
    let target = group(&l, ACCOUNT_A, "requests", "2026-11-30T09");
    let rows = stack
        .aggregator
        .ports
        .usage
        .group_rows(&target)
        .await
        .unwrap();
    let ctx = GuardrailContext::new(at(NOW), "prod-e2e");
    let plan = plan_aggregation(&target, &rows, None, &ctx).unwrap();
    assert_eq!(plan.commits.len(), 2);
    assert_eq!(
        stack
            .aggregator
            .ports
            .aggregated
            .commit(&plan.commits[0])
            .await
            .unwrap(),
        CommitOutcome::Committed
    );

    // WHEN the submitter runs
    let report = stack.run_submitter().await.unwrap();

    // THEN nothing of the half-folded hour is sent
    assert_eq!(report.api_calls, 0);
    assert!(stack.billed().is_empty());

    // AND once the fold resumes and completes, the whole hour bills once
    stack.run_pipeline().await.unwrap();
    assert_billed(
        &stack,
        &key(&l, ACCOUNT_A, "requests", "2026-11-30T09"),
        150,
    );
    let statuses = raw_statuses(&stack).await;
    assert!(
        statuses
            .values()
            .all(|(status, _)| status.as_deref() == Some("Aggregated")),
        "{statuses:?}"
    );
    assert_conserved(&stack, false).await;
}

/// Direct-submit rows a seller wrote badly: each gets `Error` with what is wrong and a
/// metric; the good records of the same hour and the newer hours still bill.
#[tokio::test]
async fn malformed_direct_submit_rows_are_closed_and_never_stop_the_rest() {
    let stack = stack(NOW).await;
    let l = active_license(&stack, 1, ACCOUNT_A).await;
    let put = |sort_key: String, quantity: AttributeValue, pending: &str| {
        stack
            .dynamodb
            .put_item()
            .table_name(AGGREGATED_TABLE)
            .item(attr::LICENSE_ARN, AttributeValue::S(l.clone()))
            .item(attr::AGGREGATED_SORT_KEY, AttributeValue::S(sort_key))
            .item(attr::CUSTOMER_ACCOUNT, AttributeValue::S(ACCOUNT_A.into()))
            .item(attr::DIMENSION, AttributeValue::S("requests".into()))
            .item(
                attr::HOUR_BUCKET,
                AttributeValue::S(pending.chars().take(13).collect()),
            )
            .item(attr::QUANTITY, quantity)
            .item(attr::METERING_PENDING, AttributeValue::S(pending.into()))
            .send()
    };
    let n = |v: &str| AttributeValue::N(v.to_string());
    // GIVEN a good hourly total in each of two hours, an unreadable one, and one whose
    // sort key names another dimension than its attributes
    put(
        format!("{ACCOUNT_A}#requests#2026-11-30T08"),
        n("4"),
        "2026-11-30T08",
    )
    .await
    .unwrap();
    put(
        format!("{ACCOUNT_A}#requests#2026-11-30T09"),
        n("6"),
        "2026-11-30T09",
    )
    .await
    .unwrap();
    let unreadable = format!("{ACCOUNT_A}#storage#2026-11-30T08");
    put(
        unreadable.clone(),
        AttributeValue::S("lots".into()),
        "2026-11-30T08",
    )
    .await
    .unwrap();
    let mismatched = format!("{ACCOUNT_A}#requestz#2026-11-30T08");
    put(mismatched.clone(), n("3"), "2026-11-30T08")
        .await
        .unwrap();

    // WHEN the submitter runs
    let report = stack.run_submitter().await.unwrap();

    // THEN the good totals bill and each bad row is closed Error with its reason
    assert_eq!(report.success, 2);
    assert_eq!(report.malformed, 2);
    let rows = stack.aggregated_rows().await.unwrap();
    for sort_key in [&unreadable, &mismatched] {
        let row = rows.iter().find(|r| &r.sort_key == sort_key).unwrap();
        assert_eq!(row.status, "Error", "{row:?}");
        assert!(!row.pending);
        assert!(
            row.reason
                .as_deref()
                .is_some_and(|r| r.starts_with("MalformedItem: ")),
            "{row:?}"
        );
    }
    assert_eq!(
        stack
            .metrics
            .get(metric::MALFORMED_ITEM, &[("Table", "aggregated")]),
        2
    );
}

/// Rows written with `meteringPending = "true"` (as AWS's sample writer does) are found
/// by the index sweep, filed under their hour and billed.
#[tokio::test]
async fn rows_filed_under_a_non_hour_marker_are_refiled_and_billed() {
    let stack = stack(NOW).await;
    let l = active_license(&stack, 1, ACCOUNT_A).await;
    let mut item =
        awsmp_e2e::Stack::usage_item(&l, ACCOUNT_A, "requests", "2026-11-30T09:05:00Z", 8);
    item.insert(
        attr::METERING_PENDING.into(),
        AttributeValue::S("true".into()),
    );
    stack.put_item(item).await.unwrap();

    let first = stack.run_discoverer().await.unwrap();
    assert_eq!(first.refiled_rows, 1);
    let hour = key(&l, ACCOUNT_A, "requests", "2026-11-30T09");
    run_pipeline_and_assert_billed(&stack, &hour, 8, false).await;
}

/// A Region that never meters (`DisabledApiException` on every call) still ends every
/// record once its hour leaves the window: `SubmissionExpired`, with the reason.
#[tokio::test]
async fn a_permanently_disabled_region_still_ages_records_out() {
    let (stack, _) = five_requests_at_nine().await;
    fail_batch_meter_usage(&stack, FaultKind::Disabled, 1000);
    stack.run_pipeline().await.unwrap();
    // A day later, with the Region still refusing.
    stack.advance(chrono::Duration::hours(24));
    let report = stack.run_submitter().await.unwrap();
    assert_eq!(report.expired, 1);
    let record = first_record(&stack).await;
    assert_eq!(record.status, "SubmissionExpired");
    assert!(!record.pending);
    assert!(stack.billed().is_empty());
}

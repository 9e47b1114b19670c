//! BatchMeterUsage record semantics through the real SDK client: billing, the
//! ledger, first-write-wins dedup per (account, license, dimension, hour), conflicts,
//! CustomerNotSubscribed from entitlement state, and injected UnprocessedRecords.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use aws_sdk_marketplacemetering::types::{UsageRecord, UsageRecordResultStatus};
use awsmp_marketplace_sim::{
    Allocation, AllocationTag, EntitlementKey, FaultKind, FaultTarget, IdenticalRetryStatus,
    SimConfig,
};
use chrono::TimeDelta;
use common::*;

#[tokio::test]
async fn a_record_is_billed_echoed_and_listed_in_the_ledger() {
    let sim = start(config()).await;
    let client = client(&sim).await;
    let sent = UsageRecord::builder()
        .timestamp(sdk_time(now() - TimeDelta::minutes(10)))
        .customer_aws_account_id(ACCOUNT)
        .license_arn(LICENSE)
        .dimension("requests")
        .quantity(42)
        .usage_allocations(allocation(40, &[("team", "a")]))
        .usage_allocations(allocation(2, &[]))
        .build()
        .expect("record");

    let out = meter_ok(&client, vec![sent.clone()]).await;

    let results = out.results();
    assert_eq!(results.len(), 1);
    assert!(out.unprocessed_records().is_empty());
    let result = &results[0];
    assert_eq!(result.status(), Some(&UsageRecordResultStatus::Success));
    let echoed = result.usage_record().expect("echo");
    assert_eq!(echoed.license_arn(), Some(LICENSE));
    assert_eq!(echoed.customer_aws_account_id(), Some(ACCOUNT));
    assert_eq!(echoed.dimension(), "requests");
    assert_eq!(echoed.quantity(), Some(42));
    assert_eq!(echoed.timestamp(), sent.timestamp());
    assert_eq!(echoed.usage_allocations().len(), 2);
    let id = result.metering_record_id().expect("id").to_owned();

    let ledger = sim.handle().ledger();
    assert_eq!(ledger.records.len(), 1);
    let billed = &ledger.records[0];
    assert_eq!(billed.customer_aws_account_id, ACCOUNT);
    assert_eq!(billed.license_arn, LICENSE);
    assert_eq!(billed.product_code, PRODUCT);
    assert_eq!(billed.dimension, "requests");
    assert_eq!(billed.quantity, 42);
    assert_eq!(
        billed.hour,
        "2026-03-15T12:00:00Z"
            .parse::<chrono::DateTime<chrono::Utc>>()
            .expect("hour")
    );
    assert_eq!(billed.timestamp, now() - TimeDelta::minutes(10));
    assert_eq!(billed.metering_record_id, id);
    assert_eq!(billed.billed_at, now());
    assert_eq!(
        billed.allocations,
        vec![
            Allocation {
                allocated_usage_quantity: 2,
                tags: vec![]
            },
            Allocation {
                allocated_usage_quantity: 40,
                tags: vec![AllocationTag {
                    key: "team".into(),
                    value: "a".into()
                }]
            },
        ]
    );
    assert!(ledger.conflicts.is_empty());
    assert!(ledger.rejected_requests.is_empty());
    let stats = sim.handle().stats();
    assert_eq!(stats.batch_meter_usage_calls, 1);
    assert_eq!(stats.records_by_status.get("Success"), Some(&1));
}

#[tokio::test]
async fn an_identical_retry_is_a_duplicate_and_bills_nothing_more() {
    let sim = start(config()).await;
    let client = client(&sim).await;
    let first = meter_ok(&client, vec![record(5, "requests", 7)]).await;
    let original_id = first.results()[0]
        .metering_record_id()
        .expect("id")
        .to_owned();

    // Same account, license, dimension and hour (another minute of it), same quantity.
    let retry = meter_ok(&client, vec![record(20, "requests", 7)]).await;

    let result = &retry.results()[0];
    assert_eq!(
        result.status(),
        Some(&UsageRecordResultStatus::DuplicateRecord)
    );
    assert_eq!(result.metering_record_id(), Some(original_id.as_str()));
    let ledger = sim.handle().ledger();
    assert_eq!(ledger.records.len(), 1);
    assert_eq!(ledger.records[0].quantity, 7);
    assert!(ledger.conflicts.is_empty(), "identical is not a conflict");
}

#[tokio::test]
async fn a_conflicting_quantity_is_refused_and_recorded_as_a_conflict() {
    let sim = start(config()).await;
    let client = client(&sim).await;
    meter_ok(&client, vec![record(5, "requests", 7)]).await;

    let second = meter_ok(&client, vec![record(5, "requests", 9)]).await;

    assert_eq!(
        first_status(&second),
        Some(&UsageRecordResultStatus::DuplicateRecord)
    );
    let ledger = sim.handle().ledger();
    assert_eq!(ledger.records.len(), 1);
    assert_eq!(ledger.records[0].quantity, 7, "first write wins");
    assert_eq!(ledger.conflicts.len(), 1);
    let conflict = &ledger.conflicts[0];
    assert_eq!(conflict.billed_quantity, 7);
    assert_eq!(conflict.attempted_quantity, 9);
    assert_eq!(conflict.license_arn, LICENSE);
    assert_eq!(conflict.dimension, "requests");
    assert_eq!(
        conflict.original_metering_record_id,
        ledger.records[0].metering_record_id
    );
    assert_eq!(sim.handle().stats().conflicts, 1);
}

#[tokio::test]
async fn dedup_scope_is_account_license_dimension_and_utc_hour() {
    let sim = start(config()).await;
    let client = client(&sim).await;
    let base = now() - TimeDelta::minutes(30); // 12:00
    let records = vec![
        record_for(LICENSE, ACCOUNT, base, "requests", 1),
        // Same hour, another dimension.
        record_for(LICENSE, ACCOUNT, base, "storage_gb", 1),
        // Previous hour.
        record_for(
            LICENSE,
            ACCOUNT,
            base - TimeDelta::seconds(1),
            "requests",
            1,
        ),
        // Another license and account.
        record_for(LICENSE_2, ACCOUNT_2, base, "requests", 1),
        // Same key as the first, inside the same batch.
        record_for(
            LICENSE,
            ACCOUNT,
            base + TimeDelta::minutes(29),
            "requests",
            1,
        ),
    ];

    let out = meter_ok(&client, records).await;

    use UsageRecordResultStatus::{DuplicateRecord, Success};
    assert_eq!(
        statuses(&out),
        vec![
            Some(Success),
            Some(Success),
            Some(Success),
            Some(Success),
            Some(DuplicateRecord)
        ]
    );
    assert_eq!(sim.handle().ledger().records.len(), 4);
}

#[tokio::test]
async fn identical_retry_can_be_configured_to_answer_success() {
    let sim = start(SimConfig {
        identical_retry_status: IdenticalRetryStatus::Success,
        ..config()
    })
    .await;
    let client = client(&sim).await;
    let first = meter_ok(&client, vec![record(5, "requests", 3)]).await;
    let retry = meter_ok(&client, vec![record(5, "requests", 3)]).await;
    let conflict = meter_ok(&client, vec![record(5, "requests", 4)]).await;

    assert_eq!(
        first_status(&retry),
        Some(&UsageRecordResultStatus::Success)
    );
    assert_eq!(
        retry.results()[0].metering_record_id(),
        first.results()[0].metering_record_id()
    );
    assert_eq!(
        first_status(&conflict),
        Some(&UsageRecordResultStatus::DuplicateRecord)
    );
    assert_eq!(sim.handle().ledger().records.len(), 1);
}

#[tokio::test]
async fn customer_not_subscribed_without_an_active_entitlement() {
    let sim = start(config()).await;
    let client = client(&sim).await;
    sim.handle()
        .revoke(&EntitlementKey {
            license_arn: LICENSE_2.to_owned(),
            customer_aws_account_id: ACCOUNT_2.to_owned(),
        })
        .expect("revoked");
    let at = now() - TimeDelta::minutes(1);
    let records = vec![
        // Entitled.
        record_for(LICENSE, ACCOUNT, at, "requests", 1),
        // Known license, but not this account's.
        record_for(LICENSE, ACCOUNT_2, at, "requests", 1),
        // Revoked.
        record_for(LICENSE_2, ACCOUNT_2, at, "requests", 1),
    ];

    let out = meter_ok(&client, records).await;

    use UsageRecordResultStatus::{CustomerNotSubscribed, Success};
    assert_eq!(
        statuses(&out),
        vec![
            Some(Success),
            Some(CustomerNotSubscribed),
            Some(CustomerNotSubscribed)
        ]
    );
    assert_eq!(out.results()[1].metering_record_id(), None);
    let ledger = sim.handle().ledger();
    assert_eq!(ledger.records.len(), 1);
    assert_eq!(
        sim.handle()
            .stats()
            .records_by_status
            .get("CustomerNotSubscribed"),
        Some(&2)
    );
}

#[tokio::test]
async fn entitling_later_lets_the_customer_be_billed() {
    let sim = start_unentitled().await;
    let client = client(&sim).await;
    // A simulator that knows no licenses judges a well-formed ARN by entitlement only.
    let before = meter_ok(&client, vec![record(1, "requests", 1)]).await;
    assert_eq!(
        first_status(&before),
        Some(&UsageRecordResultStatus::CustomerNotSubscribed)
    );

    sim.handle()
        .entitle(awsmp_marketplace_sim::EntitlementSeed {
            license_arn: LICENSE.to_owned(),
            customer_aws_account_id: ACCOUNT.to_owned(),
            product_code: PRODUCT.to_owned(),
        })
        .expect("entitled");
    let after = meter_ok(&client, vec![record(1, "requests", 1)]).await;

    assert_eq!(
        first_status(&after),
        Some(&UsageRecordResultStatus::Success)
    );
}

#[tokio::test]
async fn injected_unprocessed_records_are_returned_unbilled_and_can_be_resent() {
    let sim = start(config()).await;
    let client = client(&sim).await;
    inject(
        &sim,
        FaultKind::Unprocessed { records: 2 },
        1,
        FaultTarget::BatchMeterUsage,
    );
    let records = vec![
        record(1, "requests", 1),
        record(1, "storage_gb", 2),
        record(61, "requests", 3),
    ];

    let out = meter_ok(&client, records).await;

    assert_eq!(out.results().len(), 1);
    assert_eq!(out.unprocessed_records().len(), 2);
    assert_eq!(out.unprocessed_records()[0].dimension(), "storage_gb");
    assert_eq!(out.unprocessed_records()[1].quantity(), Some(3));
    assert_eq!(sim.handle().ledger().records.len(), 1);
    assert_eq!(
        sim.handle().stats().records_by_status.get("Unprocessed"),
        Some(&2)
    );
    assert!(
        sim.handle().pending_faults().is_empty(),
        "the fault was used up"
    );

    let resent = meter_ok(&client, out.unprocessed_records().to_vec()).await;

    assert!(resent.unprocessed_records().is_empty());
    assert!(
        resent
            .results()
            .iter()
            .all(|r| r.status() == Some(&UsageRecordResultStatus::Success))
    );
    assert_eq!(sim.handle().ledger().records.len(), 3);
}

#[tokio::test]
async fn an_empty_batch_succeeds_with_no_results() {
    let sim = start(config()).await;
    let client = client(&sim).await;
    let out = meter_ok(&client, vec![]).await;
    assert!(out.results().is_empty());
    assert!(out.unprocessed_records().is_empty());
}

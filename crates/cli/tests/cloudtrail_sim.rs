//! CloudTrail `LookupEvents` of the Marketplace simulator, through the REAL
//! `aws-sdk-cloudtrail` client: usage billed through our SDK metering adapter
//! appears as CloudTrail events in the shape AWS records them, newest first, paged,
//! time-filtered, regional, with the API's errors; then `awsmp trail` and
//! `awsmp reconcile` against that trail agree with our table, and a tampered table
//! shows every discrepancy.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use aws_sdk_cloudtrail as ct;
use awsmp_aws::SdkMeteringApi;
use awsmp_cli::cloudtrail::SdkTrailEvents;
use awsmp_cli::commands::reconcile::{AwsRecords, ReconcileArgs, reconcile_report};
use awsmp_cli::commands::trail::{Report, TrailArgs, trail_report};
use awsmp_core::memory::MemoryTables;
use awsmp_core::model::{AggregatedStatus, GroupKey};
use awsmp_core::ports::{MalformedItem, MeteringApi, MeteringRecord, RecordVerdict};
use awsmp_core::time::Instant;
use awsmp_local_aws::SimServer;
use awsmp_marketplace_sim::{
    ClockSetting, EntitlementSeed, ProductSeed, SimConfig, ThrottleConfig,
};
use awsmp_operate::reconcile::{
    EVENT_SOURCE, OurRecord, TrailEvents, TrailOutcome, TrailStatus, parse_cloudtrail_event,
    read_trail,
};
use chrono::{DateTime, Duration, Utc};
use common::*;
use ct::error::ProvideErrorMetadata;
use ct::operation::lookup_events::LookupEventsError;
use ct::operation::lookup_events::builders::LookupEventsFluentBuilder;
use ct::primitives::DateTime as SdkDateTime;
use ct::types::{LookupAttribute, LookupAttributeKey};

fn at(s: &str) -> Instant {
    s.parse::<DateTime<Utc>>().unwrap()
}

/// `at` as the SDK's timestamp (whole seconds).
fn sdk_time(at: Instant) -> SdkDateTime {
    SdkDateTime::from_secs(at.timestamp())
}

fn start_time() -> Instant {
    at("2026-03-15T12:30:00Z")
}

async fn sim() -> SimServer {
    SimServer::start(SimConfig {
        clock: ClockSetting::Fixed { at: start_time() },
        throttle: ThrottleConfig {
            enabled: false,
            ..ThrottleConfig::default()
        },
        products: vec![ProductSeed {
            product_code: PRODUCT.into(),
            dimensions: vec!["requests".into(), "storage_gb".into()],
        }],
        entitlements: vec![
            EntitlementSeed {
                license_arn: LICENSE.into(),
                customer_aws_account_id: ACCOUNT.into(),
                product_code: PRODUCT.into(),
            },
            EntitlementSeed {
                license_arn: LICENSE_2.into(),
                customer_aws_account_id: ACCOUNT_2.into(),
                product_code: PRODUCT.into(),
            },
        ],
        ..SimConfig::default()
    })
    .await
    .unwrap()
}

fn metering(key: &GroupKey, quantity: i64) -> MeteringRecord {
    MeteringRecord {
        key: key.clone(),
        product_code: PRODUCT.into(),
        quantity,
        allocations: None,
    }
}

fn trail_client(server: &SimServer, region: &str) -> ct::Client {
    let config = server.sdk_config();
    let conf = ct::config::Builder::from(&config)
        .region(ct::config::Region::new(region.to_string()))
        .build();
    ct::Client::from_conf(conf)
}

fn by_name() -> LookupAttribute {
    LookupAttribute::builder()
        .attribute_key(LookupAttributeKey::EventName)
        .attribute_value("BatchMeterUsage")
        .build()
        .unwrap()
}

/// The error LookupEvents refuses `request` with, which must be one of the API's own.
async fn refusal(request: LookupEventsFluentBuilder) -> LookupEventsError {
    let err = request.send().await.unwrap_err();
    assert!(err.as_service_error().is_some(), "{err:?}");
    err.into_service_error()
}

/// `awsmp reconcile` of `ours` against the trail, which must answer.
async fn reconciled(
    trail: &SdkTrailEvents,
    ours: &[OurRecord],
    malformed: &[MalformedItem],
    args: &ReconcileArgs,
    now: Instant,
) -> Report {
    reconcile_report(AwsRecords::CloudTrail(trail), ours, malformed, args, now)
        .await
        .unwrap()
}

/// Bills through our SDK adapter: three calls a minute apart (sim clock), the last
/// one refused as a whole, and returns our table as the submitter would leave it.
async fn bill(server: &SimServer) -> (MemoryTables, Vec<GroupKey>) {
    let api = SdkMeteringApi::new(server.metering_client());
    let a = group(LICENSE, ACCOUNT, "requests", "2026-03-15T11");
    let b = group(LICENSE, ACCOUNT, "storage_gb", "2026-03-15T11");
    let c = group(LICENSE_2, ACCOUNT_2, "requests", "2026-03-15T11");
    let d = group(LICENSE, ACCOUNT, "requests", "2026-03-15T10");
    let tables = MemoryTables::new();
    let store = |key: &GroupKey, quantity: i64, verdict: &RecordVerdict| {
        let (status, id) = match verdict {
            RecordVerdict::Success { metering_record_id } => {
                (AggregatedStatus::Success, Some(metering_record_id.clone()))
            }
            RecordVerdict::DuplicateRecord { metering_record_id } => (
                AggregatedStatus::DuplicateRecord,
                metering_record_id.clone(),
            ),
            other => panic!("unexpected verdict {other:?}"),
        };
        tables.insert_aggregated(sent(key.clone(), quantity, status, id), start_time());
    };
    let first = api
        .batch_meter_usage(&[metering(&a, 42), metering(&b, 5), metering(&c, 7)])
        .await
        .unwrap();
    store(&a, 42, &first[0]);
    store(&b, 5, &first[1]);
    store(&c, 7, &first[2]);
    server.handle().advance_clock(60);
    // A lost answer re-sent: DuplicateRecord with the original id.
    let again = api
        .batch_meter_usage(&[metering(&b, 5), metering(&d, 3)])
        .await
        .unwrap();
    store(&b, 5, &again[0]);
    store(&d, 3, &again[1]);
    server.handle().advance_clock(60);
    let refused = group(LICENSE, ACCOUNT, "Requests", "2026-03-15T11");
    assert!(
        api.batch_meter_usage(&[metering(&refused, 1)])
            .await
            .is_err()
    );
    (tables, vec![a, b, c, d])
}

#[tokio::test]
async fn the_real_cloudtrail_client_reads_the_calls_the_simulator_received() {
    let server = sim().await;
    bill(&server).await;
    let client = trail_client(&server, "us-east-1");

    // GIVEN three calls; WHEN paged two at a time by the SDK's own paginator
    let pages: Vec<_> = client
        .lookup_events()
        .lookup_attributes(by_name())
        .max_results(2)
        .into_paginator()
        .send()
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_, _>>()
        .unwrap();
    // THEN every call, newest first, in CloudTrail's record shape
    assert_eq!(pages.len(), 2);
    let events: Vec<_> = pages.iter().flat_map(|p| p.events().to_vec()).collect();
    assert_eq!(events.len(), 3);
    let times: Vec<i64> = events
        .iter()
        .map(|e| e.event_time().unwrap().secs())
        .collect();
    assert_eq!(
        times,
        [
            start_time() + Duration::minutes(2),
            start_time() + Duration::minutes(1),
            start_time()
        ]
        .map(|t| t.timestamp())
    );
    for e in &events {
        assert_eq!(e.event_name(), Some("BatchMeterUsage"));
        assert_eq!(e.event_source(), Some(EVENT_SOURCE));
        assert_eq!(e.read_only(), Some("false"));
    }
    let parsed: Vec<_> = events
        .iter()
        .map(|e| parse_cloudtrail_event(e.cloud_trail_event().unwrap()).unwrap())
        .collect();
    assert!(parsed.iter().all(|p| p.problems.is_empty()), "{parsed:#?}");
    assert_eq!(
        parsed[0].error.as_ref().unwrap().code,
        "InvalidUsageDimensionException"
    );
    assert_eq!(
        parsed[0].records[0].outcome.label(),
        "InvalidUsageDimensionException"
    );
    assert_eq!(parsed[1].records[0].outcome.label(), "DuplicateRecord");
    let first = &parsed[2];
    assert_eq!(first.region.as_deref(), Some("us-east-1"));
    assert_eq!(
        first.product_code, None,
        "LicenseArn calls send no ProductCode"
    );
    assert_eq!(first.records.len(), 3);
    let record = &first.records[0];
    assert_eq!(record.submitted.license_arn.as_deref(), Some(LICENSE));
    assert_eq!(
        record.submitted.customer_aws_account_id.as_deref(),
        Some(ACCOUNT)
    );
    assert_eq!(record.submitted.timestamp, at("2026-03-15T11:00:00Z"));
    assert!(matches!(
        &record.outcome,
        TrailOutcome::Result {
            status: TrailStatus::Success,
            metering_record_id: Some(_)
        }
    ));
    let raw: serde_json::Value =
        serde_json::from_str(events[2].cloud_trail_event().unwrap()).unwrap();
    assert_eq!(
        raw["requestParameters"]["usageRecords"][0]["timestamp"], "Mar 15, 2026 11:00:00 AM",
        "CloudTrail writes record timestamps as text"
    );
    // The simulator's ledger and the trail agree on the record id.
    let ledger = server.handle().ledger();
    let TrailOutcome::Result {
        metering_record_id: Some(id),
        ..
    } = &record.outcome
    else {
        unreachable!()
    };
    assert!(ledger.records.iter().any(|r| &r.metering_record_id == id));

    // Time filters: only the calls from one minute after the first.
    let later = client
        .lookup_events()
        .start_time(sdk_time(start_time() + Duration::seconds(30)))
        .send()
        .await
        .unwrap();
    assert_eq!(later.events().len(), 2);
    let window = client
        .lookup_events()
        .start_time(sdk_time(start_time()))
        .end_time(sdk_time(start_time() + Duration::seconds(90)))
        .send()
        .await
        .unwrap();
    assert_eq!(window.events().len(), 2);

    // Event History is regional: another Region saw none of these calls.
    let elsewhere = trail_client(&server, "eu-west-1")
        .lookup_events()
        .send()
        .await
        .unwrap();
    assert!(elsewhere.events().is_empty());

    // The source filter matches the documented source only.
    let by_model_source = client
        .lookup_events()
        .lookup_attributes(
            LookupAttribute::builder()
                .attribute_key(LookupAttributeKey::EventSource)
                .attribute_value("marketplacemetering.amazonaws.com")
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    assert!(by_model_source.events().is_empty());

    // Our adapter reads all of it.
    let adapter = SdkTrailEvents::new(client.clone());
    let log = read_trail(
        &adapter,
        start_time() - Duration::hours(1),
        start_time() + Duration::hours(1),
        |_| {},
    )
    .await
    .unwrap();
    assert_eq!(log.events.len(), 3);
    assert!(log.unreadable.is_empty());

    // Two calls per second at most: the adapter spaces its pages.
    let started = std::time::Instant::now();
    for _ in 0..3 {
        adapter
            .lookup(start_time() - Duration::hours(1), start_time(), None)
            .await
            .unwrap();
    }
    assert!(started.elapsed() >= awsmp_cli::cloudtrail::MIN_CALL_INTERVAL * 2);
}

#[tokio::test]
async fn lookup_events_refuses_what_cloudtrail_refuses() {
    let server = sim().await;
    bill(&server).await;
    let client = trail_client(&server, "us-east-1");
    let code = |e: &dyn ProvideErrorMetadata| e.code().map(str::to_string);

    let err = refusal(client.lookup_events().max_results(51)).await;
    assert!(err.is_invalid_max_results_exception(), "{err:?}");

    let err = refusal(
        client
            .lookup_events()
            .lookup_attributes(by_name())
            .lookup_attributes(by_name()),
    )
    .await;
    assert!(err.is_invalid_lookup_attributes_exception(), "{err:?}");

    let err = refusal(
        client
            .lookup_events()
            .start_time(sdk_time(start_time()))
            .end_time(sdk_time(start_time() - Duration::hours(1))),
    )
    .await;
    assert!(err.is_invalid_time_range_exception(), "{err:?}");

    // A token is bound to the parameters it came with.
    let first = client.lookup_events().max_results(1).send().await.unwrap();
    let token = first.next_token().unwrap().to_string();
    let err = refusal(
        client
            .lookup_events()
            .max_results(1)
            .lookup_attributes(by_name())
            .next_token(token.clone()),
    )
    .await;
    assert!(err.is_invalid_next_token_exception(), "{:?}", code(&err));
    let second = client
        .lookup_events()
        .max_results(1)
        .next_token(token)
        .send()
        .await
        .unwrap();
    assert_eq!(second.events().len(), 1);
    assert_ne!(second.events()[0].event_id(), first.events()[0].event_id());

    // Event History keeps 90 days: a call older than that is gone.
    server.handle().advance_clock(91 * 24 * 3600);
    assert!(
        client
            .lookup_events()
            .send()
            .await
            .unwrap()
            .events()
            .is_empty()
    );
}

#[tokio::test]
async fn trail_and_reconcile_agree_with_our_table_and_find_what_was_tampered() {
    let server = sim().await;
    let (tables, keys) = bill(&server).await;
    let trail = SdkTrailEvents::in_region(&server.sdk_config(), "us-east-1");
    // Late enough that Event History shows every call (about 15 minutes behind).
    let now = start_time() + Duration::minutes(30);
    let trail_args = TrailArgs {
        since: Some(start_time() - Duration::hours(1)),
        region: "us-east-1".into(),
        ..TrailArgs::default()
    };

    // GIVEN our table as the submitter left it: WHEN trail and reconcile run
    let shown = trail_report(&trail, &tables.aggregated_store(), &trail_args, now)
        .await
        .unwrap();
    // THEN every answer agrees with our records (the refused call billed nothing)
    let lines: Vec<&str> = shown.text.lines().collect();
    assert!(!shown.attention, "{}", shown.text);
    assert_eq!(
        lines.iter().filter(|l| l.contains("| ok ")).count(),
        6,
        "{}",
        shown.text
    );
    assert!(
        shown.text.contains("InvalidUsageDimensionException"),
        "{}",
        shown.text
    );

    let args = march_as_json();
    let (ours, malformed) = our_records(&tables).await;
    assert_eq!(ours.len(), 4);
    let clean = reconciled(&trail, &ours, &malformed, &args, now).await;
    assert!(!clean.attention, "{}", clean.text);
    let doc = json_of(&clean);
    assert_eq!(doc["reconciliation"]["agreed"], 4);
    assert_eq!(count(&doc["reconciliation"]["discrepancies"]), 0);

    // WHEN our table is tampered: one quantity changed, one record we claim billed
    // that never was, one billed record gone from our table
    let mut changed = tables
        .aggregated_records()
        .into_iter()
        .find(|r| r.key == keys[0])
        .unwrap();
    changed.quantity = 40;
    changed.sent_quantity = Some(40);
    tables.insert_aggregated(changed, now);
    let mut invented = tables
        .aggregated_records()
        .into_iter()
        .find(|r| r.key == keys[3])
        .unwrap();
    invented.key = group(LICENSE, ACCOUNT, "storage_gb", "2026-03-15T09");
    invented.metering_record_id = Some("never-sent".into());
    tables.insert_aggregated(invented, now);
    let (ours, malformed) = our_records(&tables).await;
    let without_c: Vec<_> = ours
        .into_iter()
        .filter(|o| o.record.key != keys[2])
        .collect();

    let tampered = reconciled(&trail, &without_c, &malformed, &args, now).await;
    // THEN each shows up as its kind, with totals
    assert!(tampered.attention);
    let doc = json_of(&tampered);
    let r = &doc["reconciliation"];
    let kinds: Vec<(String, String, String)> = r["discrepancies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["kind"].as_str().unwrap().to_string(),
                d["key"]["dimension"].as_str().unwrap().to_string(),
                format!("{}/{}", d["ours"], d["aws"]),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            (
                "QuantityDiffers".to_string(),
                "requests".to_string(),
                "\"40\"/\"42\"".to_string()
            ),
            (
                "MissingOnAws".into(),
                "storage_gb".into(),
                "\"3\"/null".into()
            ),
            ("ExtraOnAws".into(), "requests".into(), "null/\"7\"".into()),
        ]
    );
    assert_eq!(r["totals"]["QuantityDiffers"]["count"], 1);
    assert_eq!(r["totals"]["MissingOnAws"]["count"], 1);
    assert_eq!(r["totals"]["ExtraOnAws"]["aws"], "7");
    assert_eq!(r["agreed"], 2);

    // The table form says the same for people.
    let human = reconciled(
        &trail,
        &without_c,
        &malformed,
        &ReconcileArgs {
            json: false,
            ..args.clone()
        },
        now,
    )
    .await;
    for needle in [
        "different quantity",
        "missing on AWS",
        "extra on AWS",
        "l-0123456789abcdef0123456789abcdef",
    ] {
        assert!(human.text.contains(needle), "{needle}: {}", human.text);
    }
    let shown = trail_report(&trail, &tables.aggregated_store(), &trail_args, now)
        .await
        .unwrap();
    assert!(shown.attention);
    assert!(
        shown.text.contains("AWS billed 42; our table says 40"),
        "{}",
        shown.text
    );
}

#[tokio::test]
async fn a_call_made_minutes_ago_is_not_yet_visible_and_not_called_missing() {
    let server = sim().await;
    let (tables, _) = bill(&server).await;
    // Event History is about 15 minutes behind: the simulator too, when asked.
    server
        .handle()
        .set_cloudtrail_lag(chrono::TimeDelta::minutes(15));
    let trail = SdkTrailEvents::in_region(&server.sdk_config(), "us-east-1");
    let (mut ours, malformed) = our_records(&tables).await;
    let now = start_time() + Duration::minutes(5);
    for o in &mut ours {
        o.recorded_at = Some(start_time());
    }
    let args = march_as_json();
    let report = reconciled(&trail, &ours, &malformed, &args, now).await;
    let doc = json_of(&report);
    assert_eq!(
        count(&doc["reconciliation"]["discrepancies"]),
        0,
        "{}",
        report.text
    );
    assert_eq!(count(&doc["reconciliation"]["not_yet_visible"]), 4);
}

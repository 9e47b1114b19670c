//! Entitlements driven by the EventBridge lifecycle events the events stack consumes,
//! posted to `POST /admin/lifecycle-events`, checked with the real SDK client:
//! License Updated entitles; License Deprovisioned leaves one hour of sim time.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use aws_sdk_marketplacemetering::types::UsageRecordResultStatus;
use chrono::TimeDelta;
use common::*;
use serde_json::{Value, json};

const EVENT_LICENSE: &str =
    "arn:aws:license-manager::123456789012:license:l-e52ca6f38bf84d0fafb8802ca15ac11x";
const BUYER: &str = "845735284135";

/// AWS's documented example event `name`: the fixtures the subscription crate's
/// tests read too.
fn documented(name: &str) -> Value {
    let path = format!(
        "{}/../../functions/subscription/tests/fixtures/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_str(&std::fs::read_to_string(&path).expect("fixture readable"))
        .expect("fixture is JSON")
}

/// The documented `License Updated - Manufacturer` example as `detail_type`, for the
/// seeded product and with a License Manager ARN.
fn license_event(detail_type: &str) -> Value {
    let mut event = documented("license-updated-manufacturer");
    event["detail-type"] = json!(detail_type);
    event["detail"]["product"]["code"] = json!(PRODUCT);
    event["detail"]["license"]["arn"] = json!(EVENT_LICENSE);
    event
}

async fn post_event(endpoint: &str, event: &Value) -> (u16, Value) {
    post_json(&format!("{endpoint}/admin/lifecycle-events"), event).await
}

/// Meters one record of the event's license stamped `minutes_ago` before the sim's now.
async fn meter_event_license(
    sim: &awsmp_marketplace_sim::RunningSim,
    client: &aws_sdk_marketplacemetering::Client,
    minutes_ago: i64,
) -> UsageRecordResultStatus {
    let at = sim.handle().now() - TimeDelta::minutes(minutes_ago);
    let out = meter_ok(
        client,
        vec![record_for(EVENT_LICENSE, BUYER, at, "requests", 1)],
    )
    .await;
    first_status(&out).cloned().expect("status")
}

#[tokio::test]
async fn license_updated_entitles_and_deprovisioned_ends_after_one_hour() {
    let sim = start_unentitled().await;
    let client = client(&sim).await;
    let endpoint = sim.endpoint_url();

    // GIVEN License Updated for the buyer
    let (status, outcome) =
        post_event(&endpoint, &license_event("License Updated - Manufacturer")).await;
    assert_eq!(status, 200, "{outcome}");
    assert_eq!(outcome["outcome"], "entitled");
    assert_eq!(outcome["entitlement"]["status"], "active");
    // THEN usage is billed
    assert_eq!(
        meter_event_license(&sim, &client, 5).await,
        UsageRecordResultStatus::Success
    );

    // WHEN License Deprovisioned arrives
    let (status, outcome) = post_event(
        &endpoint,
        &license_event("License Deprovisioned - Manufacturer"),
    )
    .await;
    assert_eq!(status, 200, "{outcome}");
    assert_eq!(outcome["outcome"], "deprovisioning");
    assert_eq!(outcome["entitlement"]["status"], "deprovisioning");
    assert_eq!(outcome["entitlement"]["ends_at"], "2026-03-15T13:30:00Z");

    // THEN final usage is still billed within the hour (a repeated event does not extend it)
    sim.handle()
        .advance_clock(TimeDelta::minutes(59).num_seconds());
    post_event(
        &endpoint,
        &license_event("License Deprovisioned - Manufacturer"),
    )
    .await;
    assert_eq!(
        meter_event_license(&sim, &client, 1).await,
        UsageRecordResultStatus::Success
    );

    // AND refused once the hour is over
    sim.handle().advance_clock(60);
    assert_eq!(
        meter_event_license(&sim, &client, 2).await,
        UsageRecordResultStatus::CustomerNotSubscribed
    );
    assert_eq!(sim.handle().ledger().records.len(), 2);
}

#[tokio::test]
async fn agreement_events_change_no_entitlement() {
    let sim = start(config()).await;
    let before = sim.handle().entitlements();
    let ended = documented("purchase-agreement-ended-proposer");

    let (status, outcome) = post_event(&sim.endpoint_url(), &ended).await;

    assert_eq!(status, 200, "{outcome}");
    assert_eq!(outcome["outcome"], "ignored");
    assert_eq!(
        outcome["detail_type"],
        "Purchase Agreement Ended - Proposer"
    );
    assert_eq!(sim.handle().entitlements(), before);
}

#[tokio::test]
async fn malformed_events_are_refused_with_the_reason() {
    let sim = start(config()).await;
    let mut no_acceptor = license_event("License Updated - Manufacturer");
    no_acceptor["detail"]
        .as_object_mut()
        .expect("object")
        .remove("acceptor");

    assert_admin_error(
        &post_event(&sim.endpoint_url(), &no_acceptor).await,
        400,
        "detail.acceptor.accountId",
    );
    assert_admin_error(
        &post_event(
            &sim.endpoint_url(),
            &json!({"source": "aws.agreement-marketplace"}),
        )
        .await,
        400,
        "detail-type",
    );
}

#[tokio::test]
async fn deprovisioned_for_an_unknown_entitlement_starts_its_final_hour() {
    let sim = start_unentitled().await;
    let outcome = sim
        .handle()
        .apply_lifecycle_event(&license_event("License Deprovisioned - Manufacturer"))
        .expect("applied");
    assert!(matches!(
        outcome,
        awsmp_marketplace_sim::LifecycleOutcome::Deprovisioning { .. }
    ));
    let client = client(&sim).await;
    assert_eq!(
        meter_event_license(&sim, &client, 1).await,
        UsageRecordResultStatus::Success
    );
}

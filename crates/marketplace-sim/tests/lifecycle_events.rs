//! Entitlements driven by the EventBridge lifecycle events the events stack consumes,
//! posted to `POST /admin/lifecycle-events`, checked with the real SDK client:
//! License Updated entitles; License Deprovisioned leaves one hour of sim time.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use aws_sdk_marketplacemetering::types::UsageRecordResultStatus;
use awsmp_marketplace_sim::SimConfig;
use chrono::TimeDelta;
use common::*;
use serde_json::{Value, json};

const EVENT_LICENSE: &str =
    "arn:aws:license-manager::123456789012:license:l-e52ca6f38bf84d0fafb8802ca15ac11x";
const BUYER: &str = "845735284135";

/// The documented `License Updated - Manufacturer` example, with a License Manager ARN.
fn license_event(detail_type: &str) -> Value {
    json!({
        "version": "0",
        "id": "12345678-1234-1234-1234-123456789012",
        "detail-type": detail_type,
        "source": "aws.agreement-marketplace",
        "account": "123456512334",
        "time": "2024-08-30T21:36:03Z",
        "region": "us-east-1",
        "resources": ["arn:aws:aws-marketplace::aws:agreement:agmt-4mwg1nevbokzw95eca5797ixs"],
        "detail": {
            "requestId": "3d4c9f9b-b809-4f5e-9fac-a9ae98b05cbb",
            "catalog": "AWSMarketplace",
            "agreement": {"id": "agmt-4mwg1nevbokzw95eca5797ixs"},
            "product": {"code": PRODUCT, "id": "prod-qtwveEXAMPLE"},
            "license": {"arn": EVENT_LICENSE},
            "acceptor": {"accountId": BUYER},
            "proposer": {"accountId": "123456512334"},
            "offer": {"id": "8kkr91jo647j3qxlcjhlqce7y"}
        }
    })
}

async fn post_event(endpoint: &str, event: &Value) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(format!("{endpoint}/admin/lifecycle-events"))
        .json(event)
        .send()
        .await
        .expect("admin reachable");
    let status = response.status().as_u16();
    (status, response.json().await.expect("JSON answer"))
}

/// Meters one record of the event's license stamped `minutes_ago` before the sim's now.
async fn meter_event_license(
    sim: &awsmp_marketplace_sim::RunningSim,
    client: &aws_sdk_marketplacemetering::Client,
    minutes_ago: i64,
) -> UsageRecordResultStatus {
    let at = sim.handle().now() - TimeDelta::minutes(minutes_ago);
    let out = meter(
        client,
        vec![record_for(EVENT_LICENSE, BUYER, at, "requests", 1)],
    )
    .await
    .expect("accepted");
    out.results()[0].status().cloned().expect("status")
}

#[tokio::test]
async fn license_updated_entitles_and_deprovisioned_ends_after_one_hour() {
    let sim = start(SimConfig {
        entitlements: vec![],
        ..config()
    })
    .await;
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
    let ended = json!({
        "version": "0",
        "id": "12345678-1234-1234-1234-123456789012",
        "detail-type": "Purchase Agreement Ended - Proposer",
        "source": "aws.agreement-marketplace",
        "account": "123456512334",
        "time": "2024-08-30T21:36:03Z",
        "region": "us-east-1",
        "resources": ["arn:aws:aws-marketplace::aws:agreement:agmt-4mwg1nevbokzw95eca5797ixs"],
        "detail": {
            "requestId": "3d4c9f9b-b809-4f5e-9fac-a9ae98b05cbb",
            "catalog": "AWSMarketplace",
            "agreement": {"id": "agmt-4mwg1nevbokzw95eca5797ixs", "status": "CANCELLED"},
            "resaleAuthorization": {"id": null},
            "acceptor": {"accountId": BUYER},
            "proposer": {"accountId": "123456512334"},
            "offer": {"id": "offer-1234567890123"}
        }
    });

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

    let (status, body) = post_event(&sim.endpoint_url(), &no_acceptor).await;

    assert_eq!(status, 400);
    let reason = body["error"].as_str().expect("error text");
    assert!(reason.contains("detail.acceptor.accountId"), "{reason}");

    let (status, body) = post_event(
        &sim.endpoint_url(),
        &json!({"source": "aws.agreement-marketplace"}),
    )
    .await;
    assert_eq!(status, 400);
    assert!(
        body["error"]
            .as_str()
            .expect("error")
            .contains("detail-type"),
        "{body}"
    );
}

#[tokio::test]
async fn deprovisioned_for_an_unknown_entitlement_starts_its_final_hour() {
    let sim = start(SimConfig {
        entitlements: vec![],
        ..config()
    })
    .await;
    let outcome = sim
        .handle()
        .apply_lifecycle_event(&license_event("License Deprovisioned - Manufacturer"))
        .expect("applied");
    assert!(matches!(
        outcome,
        awsmp_marketplace_sim::LifecycleOutcome::Deprovisioning { .. }
    ));
    let client = client(&sim).await;
    let at = now() - TimeDelta::minutes(1);
    let out = meter(
        &client,
        vec![record_for(EVENT_LICENSE, BUYER, at, "requests", 1)],
    )
    .await
    .expect("accepted");
    assert_eq!(
        out.results()[0].status(),
        Some(&UsageRecordResultStatus::Success)
    );
}

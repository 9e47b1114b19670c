//! `awsmp subscribers reconcile`, the shipped binary against moto (the subscribers
//! table, the main stack's outputs) and the Marketplace simulator's Agreement API (RPC
//! v2 CBOR, through the real SDK client): a lost License Updated found and repaired
//! (a dry run first, which writes nothing), a lost deprovisioning repaired with the
//! window the event would have opened, a second run finding nothing, and bad arguments
//! refused before any call.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use aws_sdk_dynamodb::types::AttributeValue;
use awsmp_local_aws::tables::{
    create_aggregated_table, create_subscribers_table, create_usage_table,
};
use awsmp_local_aws::{MotoServer, SimServer};
use awsmp_marketplace_sim::{
    AgreementEnd, AgreementSeed, AgreementStatus, ClockSetting, SimConfig, ThrottleConfig,
};
use chrono::{TimeDelta, Timelike, Utc};
use common::binary::{Ran, awsmp_env};

const LICENSE: &str = "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0";
const LICENSE_2: &str = "arn:aws:license-manager::123456789012:license:l-0123456789abcdef1";
const ACCOUNT: &str = "111122223333";
const SUBSCRIBERS: &str = "awsmp-subscribers-test";
const PRODUCT_ID: &str = "prod-reconcile1234";

/// A main stack `awsmp-main-prod-test` with its tables, and the subscribers table.
async fn deployed(moto: &MotoServer) {
    let config = moto.sdk_config_in("us-east-1");
    let db = aws_sdk_dynamodb::Client::new(&config);
    create_usage_table(&db, "awsmp-prod-usage-test")
        .await
        .unwrap();
    create_aggregated_table(&db, "awsmp-prod-aggregated-usage-test")
        .await
        .unwrap();
    create_subscribers_table(&db, SUBSCRIBERS).await.unwrap();
    let body = serde_json::json!({
        "Resources": {"Marker": {"Type": "AWS::CloudFormation::WaitConditionHandle"}},
        "Outputs": {
            "UsageTableName": {"Value": "awsmp-prod-usage-test"},
            "AggregatedUsageTableName": {"Value": "awsmp-prod-aggregated-usage-test"},
        },
    });
    aws_sdk_cloudformation::Client::new(&config)
        .create_stack()
        .stack_name("awsmp-main-prod-test")
        .template_body(body.to_string())
        .send()
        .await
        .unwrap();
}

fn agreement(id: &str, license: &str, start: chrono::DateTime<Utc>) -> AgreementSeed {
    awsmp_e2e::agreement_seed(id, license, ACCOUNT, ("prod", PRODUCT_ID), start)
}

struct Setup {
    moto: MotoServer,
    sim: SimServer,
}

impl Setup {
    async fn awsmp(&self, tail: &[&str]) -> Ran {
        let home = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("awsmp-subscribers-home");
        let mut args = vec![
            "--stage",
            "test",
            "--product-code",
            "prod",
            "--subscribers-table",
            SUBSCRIBERS,
        ];
        args.extend_from_slice(tail);
        let sim = self.sim.endpoint();
        awsmp_env(
            self.moto.endpoint(),
            &home,
            &args,
            &[("AWS_ENDPOINT_URL_MARKETPLACE_AGREEMENT", sim.as_str())],
        )
        .await
    }

    async fn row(
        &self,
        license: &str,
    ) -> Option<std::collections::HashMap<String, AttributeValue>> {
        self.moto
            .dynamodb()
            .get_item()
            .table_name(SUBSCRIBERS)
            .key("licenseArn", AttributeValue::S(license.into()))
            .key("customerAWSAccountId", AttributeValue::S(ACCOUNT.into()))
            .consistent_read(true)
            .send()
            .await
            .unwrap()
            .item
    }
}

fn s<'a>(item: &'a std::collections::HashMap<String, AttributeValue>, name: &str) -> &'a str {
    item.get(name)
        .and_then(|v| v.as_s().ok())
        .map_or("", String::as_str)
}

fn json(ran: &Ran) -> serde_json::Value {
    serde_json::from_str(&ran.stdout)
        .unwrap_or_else(|e| panic!("{e}: {} / {}", ran.stdout, ran.stderr))
}

#[tokio::test]
async fn lost_events_are_found_in_the_agreement_api_and_repaired_once() {
    let moto = MotoServer::start().await.unwrap();
    deployed(&moto).await;
    let now = Utc::now().with_nanosecond(0).unwrap();
    let sim = SimServer::start(SimConfig {
        throttle: ThrottleConfig {
            enabled: false,
            ..ThrottleConfig::default()
        },
        clock: ClockSetting::Fixed { at: now },
        ..SimConfig::default()
    })
    .await
    .unwrap();
    let start = now - TimeDelta::days(3);
    sim.handle()
        .seed_agreement(
            agreement("agmt-1", LICENSE, start)
                .priced(&[("requests", "0.0025"), ("storage_gb", "0.5")])
                .unwrap(),
        )
        .unwrap();
    sim.handle()
        .seed_agreement(agreement("agmt-2", LICENSE_2, start))
        .unwrap();
    let setup = Setup { moto, sim };

    // A dry run says what it would repair and writes nothing.
    let dry = setup
        .awsmp(&[
            "--json",
            "subscribers",
            "reconcile",
            "--product-id",
            PRODUCT_ID,
            "--dry-run",
        ])
        .await;
    assert_eq!(dry.code, 0, "{} / {}", dry.stdout, dry.stderr);
    let report = json(&dry);
    assert_eq!(report["agreements"], 2, "{report}");
    let actions: Vec<_> = report["drifts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["action"].clone())
        .collect();
    assert_eq!(actions, vec!["wouldRepair", "wouldRepair"], "{report}");
    assert_eq!(report["drifts"][0]["kind"], "licenseUpdatedLost");
    assert_eq!(
        report["rateCards"]["refreshed"], 0,
        "no row yet, so no card to keep: {report}"
    );
    assert!(setup.row(LICENSE).await.is_none());

    let live = setup
        .awsmp(&["subscribers", "reconcile", "--product-id", PRODUCT_ID])
        .await;
    assert_eq!(live.code, 0, "{} / {}", live.stdout, live.stderr);
    assert!(live.stdout.contains("repaired"), "{}", live.stdout);
    assert!(
        live.stdout
            .contains("rate cards: 0 current, 2 read and kept, 0 left for the next run, 0 failed"),
        "{}",
        live.stdout
    );
    let row = setup.row(LICENSE).await.unwrap();
    assert_eq!(s(&row, "subscriptionStatus"), "active");
    assert_eq!(s(&row, "agreementId"), "agmt-1");
    assert_eq!(s(&row, "productCode"), "prod");
    // The agreement's prices, read over the SDK's wire protocol, kept on the row.
    let card = row["rateCard"].as_m().unwrap();
    let prices = card["prices"].as_m().unwrap();
    assert_eq!(prices["requests"].as_s().unwrap(), "0.0025");
    assert_eq!(prices["storage_gb"].as_s().unwrap(), "0.5");
    assert_eq!(card["currency"].as_s().unwrap(), "USD");
    assert_eq!(card["agreementId"].as_s().unwrap(), "agmt-1");

    // The second buyer cancels and its License Deprovisioned is lost too.
    setup.sim.handle().advance_clock(600);
    setup
        .sim
        .handle()
        .end_agreement(&AgreementEnd {
            agreement_id: "agmt-2".into(),
            status: AgreementStatus::Cancelled,
        })
        .unwrap();
    let ended = now + TimeDelta::seconds(600);
    let live = setup
        .awsmp(&[
            "--json",
            "subscribers",
            "reconcile",
            "--product-id",
            PRODUCT_ID,
        ])
        .await;
    let report = json(&live);
    assert_eq!(
        report["drifts"][0]["kind"], "deprovisioningLost",
        "{report}"
    );
    let row = setup.row(LICENSE_2).await.unwrap();
    assert_eq!(s(&row, "subscriptionStatus"), "deprovisioning");
    assert_eq!(
        s(&row, "deprovisioningExpiry"),
        awsmp_core::time::format_instant(ended + TimeDelta::hours(1)),
        "the window the event would have opened, from when the agreement ended"
    );

    let again = setup
        .awsmp(&["subscribers", "reconcile", "--product-id", PRODUCT_ID])
        .await;
    assert_eq!(again.code, 0);
    assert!(again.stdout.contains("no drift"), "{}", again.stdout);
    assert!(
        again
            .stdout
            .contains("rate cards: 1 current, 0 read and kept"),
        "a kept card is not read again: {}",
        again.stdout
    );
}

#[tokio::test]
async fn bad_arguments_are_refused_before_any_call() {
    let home = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("awsmp-subscribers-args");
    // Nothing listens there: a refusal must come before any call.
    let endpoint = "http://127.0.0.1:1";
    let ran = awsmp_env(
        endpoint,
        &home,
        &[
            "--stage",
            "test",
            "subscribers",
            "reconcile",
            "--product-id",
            PRODUCT_ID,
        ],
        &[],
    )
    .await;
    assert_eq!(ran.code, 2, "{}", ran.stderr);
    assert!(ran.stderr.contains("--product-code"), "{}", ran.stderr);
    let ran = awsmp_env(
        endpoint,
        &home,
        &[
            "--stage",
            "test",
            "--product-code",
            "prod",
            "subscribers",
            "reconcile",
            "--product-id",
            "prod",
        ],
        &[],
    )
    .await;
    assert_eq!(ran.code, 2, "{}", ran.stderr);
    assert!(ran.stderr.contains("starts with prod-"), "{}", ran.stderr);
}

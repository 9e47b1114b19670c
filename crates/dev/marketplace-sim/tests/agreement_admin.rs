//! The Agreement side's admin API over HTTP (seeding and ending agreements, the
//! event outbox, failing adjustments, reset) and the awsJson 1.0 protocol (boto3's
//! and the CLI's) with raw requests.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use common::agreement::AGREEMENT;
use common::{
    ACCOUNT, LICENSE, PRODUCT, assert_admin_error, config, get_json, meter_ok, now, post_json,
    record, start, start_unentitled,
};
use serde_json::{Value, json};

fn seed_json() -> Value {
    json!({
        "agreement_id": AGREEMENT,
        "license_arn": LICENSE,
        "product_code": PRODUCT,
        "customer_aws_account_id": ACCOUNT,
        "proposer_account_id": "123456789012",
        "offer_id": "offer-aaaaaaaaaaaaa",
        "resale_authorization_id": "resaleauthz-1",
        "start_time": "2026-03-01T00:00:00Z",
        "currency_code": "USD",
        "rate_card": [{"dimension_key": "requests", "price": "0.001"}],
        "free_trial": {"duration_days": 7, "grants": [{"dimension_key": "requests"}]}
    })
}

async fn json10(url: &str, operation: &str, body: &Value) -> (u16, Option<String>, Value) {
    let response = reqwest::Client::new()
        .post(format!("{url}/"))
        .header(
            "x-amz-target",
            format!("AWSMPCommerceService_v20200301.{operation}"),
        )
        .header("content-type", "application/x-amz-json-1.0")
        .body(body.to_string())
        .send()
        .await
        .expect("reachable");
    let status = response.status().as_u16();
    let error_type = response
        .headers()
        .get("x-amzn-errortype")
        .map(|v| v.to_str().unwrap().to_owned());
    assert_eq!(
        response.headers()["content-type"],
        "application/x-amz-json-1.0"
    );
    (status, error_type, response.json().await.expect("JSON"))
}

#[tokio::test]
async fn seeding_an_agreement_entitles_its_license_and_emits_its_events() {
    let sim = start_unentitled().await;
    let url = sim.endpoint_url();
    let (status, agreement) = post_json(&format!("{url}/admin/agreements"), &seed_json()).await;
    assert_eq!(status, 200, "{agreement}");
    assert_eq!(agreement["status"], "ACTIVE");
    assert_eq!(agreement["rate_card"][0]["price"], "0.001");
    assert_eq!(
        get_json(&format!("{url}/admin/agreements")).await[0]["agreement_id"],
        AGREEMENT
    );
    // The agreement entitled the license: metering succeeds.
    let metering = common::client(&sim).await;
    let out = meter_ok(&metering, vec![record(5, "requests", 3)]).await;
    assert_eq!(common::first_status(&out).unwrap().as_str(), "Success");

    let events = get_json(&format!("{url}/admin/agreement-events")).await;
    let kinds: Vec<&str> = events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["detail-type"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "Purchase Agreement Created - Proposer",
            "Purchase Agreement Created - Manufacturer",
            "License Updated - Manufacturer"
        ]
    );
    let created = &events[0];
    assert_eq!(created["source"], "aws.agreement-marketplace");
    assert_eq!(created["region"], "us-east-1");
    assert_eq!(created["detail"]["agreement"]["intent"], "NEW");
    assert_eq!(
        created["detail"]["resaleAuthorization"]["id"],
        "resaleauthz-1"
    );
    assert_eq!(
        created["resources"][0],
        format!("arn:aws:aws-marketplace::aws:agreement:{AGREEMENT}")
    );
    // The License Updated event is the one the simulator itself reads.
    let (status, outcome) = post_json(&format!("{url}/admin/lifecycle-events"), &events[2]).await;
    assert_eq!(status, 200, "{outcome}");
    assert_eq!(outcome["outcome"], "entitled");

    // Ending it: Ended events, License Deprovisioned, the final metering hour.
    let (status, ended) = post_json(
        &format!("{url}/admin/agreements/end"),
        &json!({"agreement_id": AGREEMENT, "status": "CANCELLED"}),
    )
    .await;
    assert_eq!(status, 200, "{ended}");
    let entitlements = get_json(&format!("{url}/admin/entitlements")).await;
    assert_eq!(entitlements[0]["status"], "deprovisioning");
    let events = get_json(&format!("{url}/admin/agreement-events")).await;
    assert_eq!(
        events[5]["detail-type"],
        "License Deprovisioned - Manufacturer"
    );
    assert_eq!(events[3]["detail"]["agreement"]["status"], "CANCELLED");

    reqwest::Client::new()
        .delete(format!("{url}/admin/agreement-events"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        get_json(&format!("{url}/admin/agreement-events")).await,
        json!([])
    );
}

#[tokio::test]
async fn the_admin_api_refuses_bad_agreements_by_name() {
    let sim = start(config()).await;
    let url = format!("{}/admin/agreements", sim.endpoint_url());
    let mut bad = seed_json();
    bad["rate_card"][0]["price"] = json!(0.001);
    assert_admin_error(&post_json(&url, &bad).await, 400, "price");
    let mut bad = seed_json();
    bad["agreement_id"] = json!("no spaces allowed");
    assert_admin_error(&post_json(&url, &bad).await, 400, "agreement_id");
    let mut bad = seed_json();
    bad["free_trial"]["duration_days"] = json!(40);
    assert_admin_error(&post_json(&url, &bad).await, 400, "duration_days");
    let end = format!("{}/admin/agreements/end", sim.endpoint_url());
    assert_admin_error(
        &post_json(
            &end,
            &json!({"agreement_id": "agmt-none", "status": "EXPIRED"}),
        )
        .await,
        404,
        "agmt-none",
    );
    let fail = format!("{}/admin/billing-adjustments/fail", sim.endpoint_url());
    assert_admin_error(
        &post_json(
            &fail,
            &json!({"billing_adjustment_request_id": "ba-none", "status_message": "x"}),
        )
        .await,
        404,
        "ba-none",
    );
}

#[tokio::test]
async fn aws_json_1_0_serves_the_same_operations() {
    let sim = start(config()).await;
    let url = sim.endpoint_url();
    post_json(&format!("{url}/admin/agreements"), &seed_json()).await;
    let (status, _, described) = json10(
        &url,
        "DescribeAgreement",
        &json!({"agreementId": AGREEMENT}),
    )
    .await;
    assert_eq!(status, 200, "{described}");
    assert_eq!(described["agreementId"], AGREEMENT);
    assert_eq!(described["acceptor"]["accountId"], ACCOUNT);
    assert_eq!(
        described["startTime"],
        json!(
            "2026-03-01T00:00:00Z"
                .parse::<chrono::DateTime<chrono::Utc>>()
                .unwrap()
                .timestamp()
        ),
        "timestamps are epoch seconds in JSON"
    );

    let (_, _, terms) = json10(
        &url,
        "GetAgreementTerms",
        &json!({"agreementId": AGREEMENT}),
    )
    .await;
    let usage = terms["acceptedTerms"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|t| t.get("usageBasedPricingTerm"))
        .expect("a usage term");
    assert_eq!(usage["rateCards"][0]["rateCard"][0]["price"], "0.001");

    let (status, _, found) = json10(
        &url,
        "SearchAgreements",
        &json!({"catalog": "AWSMarketplace", "filters": [
            {"name": "AgreementType", "values": ["PurchaseAgreement"]},
            {"name": "AfterStartTime", "values": ["2026-02-01T00:00:00Z"]}
        ]}),
    )
    .await;
    assert_eq!(status, 200, "{found}");
    assert_eq!(found["agreementViewSummaries"][0]["agreementId"], AGREEMENT);

    let (status, error_type, body) = json10(
        &url,
        "DescribeAgreement",
        &json!({"agreementId": "agmt-none"}),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(error_type.as_deref(), Some("ResourceNotFoundException"));
    assert_eq!(body["__type"], "ResourceNotFoundException");
    assert_eq!(body["resourceId"], "agmt-none");
    assert_eq!(body["resourceType"], "Agreement");

    let (status, _, body) = json10(&url, "DescribeAgreement", &json!({})).await;
    assert_eq!(status, 400);
    assert_eq!(body["__type"], "ValidationException");
    assert_eq!(body["reason"], "MISSING_AGREEMENT_ID");
    assert_eq!(body["fields"][0]["name"], "agreementId");

    let (_, _, body) = json10(&url, "CancelAgreement", &json!({})).await;
    assert_eq!(body["__type"], "UnknownOperationException");
    let (_, _, body) = json10(&url, "DescribeAgreement", &json!({"agreementId": 7})).await;
    assert_eq!(body["__type"], "SerializationException");
}

#[tokio::test]
async fn a_reset_returns_to_the_configured_agreements() {
    let mut config = config();
    config.agreements = vec![common::agreement::agreement("agmt-configured")];
    let sim = start(config).await;
    let h = sim.handle();
    h.seed_agreement(common::agreement::agreement("agmt-later"))
        .unwrap();
    assert_eq!(h.agreements().len(), 2);
    h.reset().unwrap();
    let ids: Vec<String> = h
        .agreements()
        .into_iter()
        .map(|a| a.seed.agreement_id)
        .collect();
    assert_eq!(ids, ["agmt-configured"]);
    assert_eq!(
        h.agreements()[0].seed.start_time,
        Some(now() - chrono::TimeDelta::days(30))
    );
}

//! CloudTrail `LookupEvents` on the wire (raw JSON 1.1, botocore's target spelling):
//! what the simulator records of each BatchMeterUsage call, including the calls
//! whose answer was lost, whose records were left unprocessed, or that were refused,
//! and the Event History lag. The real `aws-sdk-cloudtrail` client is exercised in
//! `crates/cli/tests/cloudtrail_sim.rs`.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use awsmp_marketplace_sim::{FaultKind, FaultTarget, LossMode};
use chrono::TimeDelta;
use common::*;
use serde_json::{Value, json};

/// botocore / AWS CLI spelling of the target (the Rust SDK omits the prefix).
const TARGET: &str = "com.amazonaws.cloudtrail.v20131101.CloudTrail_20131101.LookupEvents";

async fn lookup(endpoint: &str, body: Value) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(format!("{endpoint}/"))
        .header("x-amz-target", TARGET)
        .header("content-type", "application/x-amz-json-1.1")
        .header(
            "authorization",
            "AWS4-HMAC-SHA256 Credential=AKIDSIMULATOR/20260315/us-east-1/cloudtrail/aws4_request, SignedHeaders=host, Signature=x",
        )
        .body(body.to_string())
        .send()
        .await
        .expect("answered");
    let status = response.status().as_u16();
    (status, response.json().await.expect("JSON"))
}

fn records(event: &Value) -> Value {
    serde_json::from_str(event["CloudTrailEvent"].as_str().expect("record")).expect("JSON record")
}

#[tokio::test]
async fn cloudtrail_records_what_the_service_did_even_when_the_answer_was_lost() {
    let sim = start(config()).await;
    let client = client(&sim).await;
    // GIVEN a call billed whose answer is lost, one with a record left unprocessed,
    // and one refused by an injected throttle
    inject(
        &sim,
        FaultKind::LoseResponse {
            mode: LossMode::Http500,
        },
        1,
        FaultTarget::BatchMeterUsage,
    );
    assert!(
        meter(&client, vec![record(10, "requests", 4)])
            .await
            .is_err()
    );
    sim.handle().advance_clock(60);
    inject(
        &sim,
        FaultKind::Unprocessed { records: 1 },
        1,
        FaultTarget::BatchMeterUsage,
    );
    meter(
        &client,
        vec![record(70, "requests", 1), record(70, "storage_gb", 2)],
    )
    .await
    .unwrap();
    sim.handle().advance_clock(60);
    inject(&sim, FaultKind::Throttling, 1, FaultTarget::BatchMeterUsage);
    assert!(
        meter(&client, vec![record(10, "storage_gb", 9)])
            .await
            .is_err()
    );

    // WHEN Event History is read
    let (status, page) = lookup(&sim.endpoint_url(), json!({})).await;
    assert_eq!(status, 200, "{page}");
    let events = page["Events"].as_array().unwrap();
    assert_eq!(events.len(), 3);

    // THEN newest first: the throttled call with its errorCode and no response
    let throttled = records(&events[0]);
    assert_eq!(throttled["errorCode"], "ThrottlingException");
    assert_eq!(throttled["responseElements"], Value::Null);
    assert_eq!(
        throttled["requestParameters"]["usageRecords"][0]["quantity"],
        9
    );
    // the unprocessed record in unprocessedRecords, the other in results
    let partial = records(&events[1]);
    assert_eq!(
        partial["responseElements"]["results"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        partial["responseElements"]["unprocessedRecords"][0]["dimension"],
        "storage_gb"
    );
    // and the lost answer's call as billed: Success with the ledger's record id
    let lost = records(&events[2]);
    assert!(lost.get("errorCode").is_none(), "{lost}");
    let result = &lost["responseElements"]["results"][0];
    assert_eq!(result["status"], "Success");
    assert_eq!(
        result["meteringRecordId"].as_str(),
        Some(sim.handle().ledger().records[0].metering_record_id.as_str())
    );
    assert_eq!(result["usageRecord"]["customerAWSAccountId"], ACCOUNT);
    assert_eq!(result["usageRecord"]["licenseArn"], LICENSE);
    assert_eq!(lost["eventSource"], "metering-marketplace.amazonaws.com");
    assert_eq!(lost["awsRegion"], "us-east-1");
    assert_eq!(events[2]["EventTime"], now().timestamp());
}

#[tokio::test]
async fn events_appear_after_the_event_history_lag() {
    let sim = start(config()).await;
    let client = client(&sim).await;
    sim.handle().set_cloudtrail_lag(TimeDelta::minutes(15));
    meter(&client, vec![record(10, "requests", 1)])
        .await
        .unwrap();
    assert_eq!(sim.handle().cloudtrail_event_count(), 1);

    let (_, page) = lookup(&sim.endpoint_url(), json!({})).await;
    assert!(page["Events"].as_array().unwrap().is_empty(), "{page}");
    sim.handle().advance_clock(15 * 60);
    let (_, page) = lookup(&sim.endpoint_url(), json!({})).await;
    assert_eq!(page["Events"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn bad_lookups_get_cloudtrail_exceptions() {
    let sim = start(config()).await;
    let cases = [
        (json!({"MaxResults": 0}), "InvalidMaxResultsException"),
        (
            json!({"LookupAttributes": [{"AttributeKey": "Colour", "AttributeValue": "x"}]}),
            "InvalidLookupAttributesException",
        ),
        (
            json!({"StartTime": 2000, "EndTime": 1000}),
            "InvalidTimeRangeException",
        ),
        (json!({"NextToken": "made-up"}), "InvalidNextTokenException"),
        (
            json!({"EventCategory": "data"}),
            "InvalidEventCategoryException",
        ),
        (json!({"MaxResults": "ten"}), "SerializationException"),
    ];
    for (body, expected) in cases {
        let (status, answer) = lookup(&sim.endpoint_url(), body.clone()).await;
        assert_eq!(status, 400, "{body}");
        assert_eq!(answer["__type"], expected, "{body}: {answer}");
    }
}

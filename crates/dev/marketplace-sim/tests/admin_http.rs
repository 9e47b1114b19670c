//! The admin HTTP API (seeding, clock, faults, quota, latency, reset, ledger, stats)
//! driven with plain HTTP, and wire-protocol details checked on raw requests
//! (headers, error bodies, fractional timestamps, values the SDK cannot send).

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use aws_sdk_marketplacemetering::types::UsageRecordResultStatus;
use awsmp_marketplace_sim::{ClockSetting, SimConfig};
use common::*;
use serde_json::{Value, json};

struct Admin {
    http: reqwest::Client,
    endpoint: String,
}

impl Admin {
    fn new(endpoint: String) -> Self {
        Self {
            http: reqwest::Client::new(),
            endpoint,
        }
    }

    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        post_json(&format!("{}{path}", self.endpoint), &body).await
    }

    /// Queues faults; the answer must be 200: the faults now pending.
    async fn queue_faults(&self, body: Value) -> Value {
        ok(self.post("/admin/faults", body).await)
    }

    async fn get(&self, path: &str) -> Value {
        let response = self
            .http
            .get(format!("{}{path}", self.endpoint))
            .send()
            .await
            .expect("reachable");
        assert_eq!(response.status().as_u16(), 200, "GET {path}");
        response.json().await.expect("JSON answer")
    }

    async fn delete(&self, path: &str) -> u16 {
        self.http
            .delete(format!("{}{path}", self.endpoint))
            .send()
            .await
            .expect("reachable")
            .status()
            .as_u16()
    }

    /// A raw BatchMeterUsage of one `requests` record ([`record_json`]).
    async fn meter_raw(
        &self,
        timestamp: &str,
        quantity: &str,
    ) -> (u16, reqwest::header::HeaderMap, Value) {
        self.wire(
            Some("AWSMPMeteringService.BatchMeterUsage"),
            &record_json(timestamp, quantity),
        )
        .await
    }

    /// A raw wire call: POST / with the given target and body text.
    async fn wire(
        &self,
        target: Option<&str>,
        body: &str,
    ) -> (u16, reqwest::header::HeaderMap, Value) {
        let mut request = self
            .http
            .post(format!("{}/", self.endpoint))
            .header("content-type", "application/x-amz-json-1.1")
            .body(body.to_owned());
        if let Some(target) = target {
            request = request.header("x-amz-target", target);
        }
        let response = request.send().await.expect("reachable");
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        (status, headers, response.json().await.expect("JSON answer"))
    }
}

fn ok(answer: (u16, Value)) -> Value {
    assert_eq!(answer.0, 200, "{}", answer.1);
    answer.1
}

#[tokio::test]
async fn seeding_over_http_drives_what_the_sdk_sees() {
    // A bare simulator: real clock, nothing seeded.
    let sim = start(SimConfig::default()).await;
    let admin = Admin::new(sim.endpoint_url());
    ok(admin
        .post("/admin/clock", json!({"mode": "fixed", "at": NOW}))
        .await);
    ok(admin
        .post(
            "/admin/products",
            json!({"product_code": PRODUCT, "dimensions": ["requests"]}),
        )
        .await);
    let entitlement = ok(admin
        .post(
            "/admin/entitlements",
            json!({"license_arn": LICENSE, "customer_aws_account_id": ACCOUNT, "product_code": PRODUCT}),
        )
        .await);
    assert_eq!(entitlement["status"], "active");
    ok(admin
        .post(
            "/admin/tokens",
            json!({"token": "tok-1", "license_arn": LICENSE, "customer_aws_account_id": ACCOUNT,
                   "product_code": PRODUCT, "issued_at": "2026-03-15T10:00:00Z"}),
        )
        .await);
    let client = client(&sim).await;

    let resolved = resolve(&client, "tok-1").await.expect("resolved");
    assert_eq!(resolved.license_arn(), Some(LICENSE));
    let out = meter_ok(&client, vec![record(3, "requests", 11)]).await;
    assert_eq!(first_status(&out), Some(&UsageRecordResultStatus::Success));

    let ledger = admin.get("/admin/ledger").await;
    let billed = &ledger["records"][0];
    assert_eq!(billed["customer_aws_account_id"], ACCOUNT);
    assert_eq!(billed["license_arn"], LICENSE);
    assert_eq!(billed["product_code"], PRODUCT);
    assert_eq!(billed["dimension"], "requests");
    assert_eq!(billed["hour"], "2026-03-15T12:00:00Z");
    assert_eq!(billed["quantity"], 11);
    assert_eq!(billed["allocations"], json!([]));
    assert_eq!(billed["billed_at"], "2026-03-15T12:30:00Z");
    assert_eq!(
        billed["metering_record_id"],
        out.results()[0].metering_record_id().expect("id")
    );
    assert_eq!(ledger["conflicts"], json!([]));
    assert_eq!(ledger["rejected_requests"], json!([]));

    ok(admin
        .post(
            "/admin/entitlements/revoke",
            json!({"license_arn": LICENSE, "customer_aws_account_id": ACCOUNT}),
        )
        .await);
    let entitlements = admin.get("/admin/entitlements").await;
    assert_eq!(entitlements[0]["status"], "revoked");
    let out = meter_ok(&client, vec![record(3, "requests", 11)]).await;
    assert_eq!(
        first_status(&out),
        Some(&UsageRecordResultStatus::CustomerNotSubscribed)
    );

    let stats = admin.get("/admin/stats").await;
    assert_eq!(stats["batch_meter_usage_calls"], 2);
    assert_eq!(stats["resolve_customer_calls"], 1);
    assert_eq!(stats["records_by_status"]["Success"], 1);
    assert_eq!(stats["records_by_status"]["CustomerNotSubscribed"], 1);
    assert_eq!(stats["throttled"], 0);
}

#[tokio::test]
async fn the_clock_can_be_fixed_offset_and_advanced() {
    let sim = start(SimConfig::default()).await;
    let admin = Admin::new(sim.endpoint_url());

    let fixed = ok(admin
        .post("/admin/clock", json!({"mode": "fixed", "at": NOW}))
        .await);
    assert_eq!(fixed["now"], "2026-03-15T12:30:00Z");
    let advanced = ok(admin
        .post("/admin/clock/advance", json!({"seconds": 5400}))
        .await);
    assert_eq!(advanced["now"], "2026-03-15T14:00:00Z");
    assert_eq!(admin.get("/admin/clock").await["setting"]["mode"], "fixed");

    let offset = ok(admin
        .post("/admin/clock", json!({"mode": "offset", "seconds": -86400}))
        .await);
    assert_eq!(
        offset["setting"],
        json!({"mode": "offset", "seconds": -86400})
    );
    assert_eq!(
        sim.handle().clock_setting(),
        ClockSetting::Offset { seconds: -86400 }
    );
    assert_admin_error(
        &admin
            .post("/admin/clock", json!({"mode": "sideways"}))
            .await,
        400,
        "sideways",
    );
}

#[tokio::test]
async fn faults_quota_and_latency_are_set_over_http() {
    let sim = start(config()).await;
    let admin = Admin::new(sim.endpoint_url());
    let client = client(&sim).await;

    let pending = admin
        .queue_faults(json!({"kind": "unprocessed", "records": 1}))
        .await;
    assert_eq!(
        pending,
        json!([{"kind": "unprocessed", "records": 1, "count": 1, "operation": "batch_meter_usage"}])
    );
    let out = meter_ok(
        &client,
        vec![record(1, "requests", 1), record(1, "storage_gb", 1)],
    )
    .await;
    assert_eq!(out.unprocessed_records().len(), 1);

    admin
        .queue_faults(json!({"kind": "internal_error", "count": 3}))
        .await;
    assert_eq!(admin.get("/admin/faults").await[0]["count"], 3);
    let (err, status) = meter_err(&client, vec![record(2, "requests", 1)]).await;
    assert!(err.is_internal_service_error_exception());
    assert_eq!(status, 500);
    assert_eq!(admin.get("/admin/faults").await[0]["count"], 2);
    assert_eq!(admin.delete("/admin/faults").await, 200);
    assert_eq!(admin.get("/admin/faults").await, json!([]));

    let quota = ok(admin
        .post(
            "/admin/throttle",
            json!({"enabled": true, "burst": 1, "rate_per_second": 0.0001}),
        )
        .await);
    assert_eq!(quota["burst"], 1);
    meter(&client, vec![record(3, "requests", 1)])
        .await
        .expect("the one token");
    let (err, _) = meter_err(&client, vec![record(3, "requests", 1)]).await;
    assert!(err.is_throttling_exception());
    let (status, _) = admin.post("/admin/throttle", json!({"burst": 0})).await;
    assert_eq!(status, 400);

    let latency = ok(admin.post("/admin/latency", json!({"ms": 15})).await);
    assert_eq!(latency["ms"], 15);
    assert_eq!(admin.get("/admin/latency").await["ms"], 15);
}

#[tokio::test]
async fn reset_restores_the_startup_state() {
    let sim = start(config()).await;
    let admin = Admin::new(sim.endpoint_url());
    let client = client(&sim).await;
    meter_ok(&client, vec![record(1, "requests", 1)]).await;
    ok(admin
        .post(
            "/admin/entitlements/revoke",
            json!({"license_arn": LICENSE, "customer_aws_account_id": ACCOUNT}),
        )
        .await);
    ok(admin
        .post("/admin/clock/advance", json!({"seconds": 3600}))
        .await);
    admin.queue_faults(json!({"kind": "disabled"})).await;

    ok(admin.post("/admin/reset", json!({})).await);

    assert_eq!(admin.get("/admin/ledger").await["records"], json!([]));
    assert_eq!(
        admin.get("/admin/stats").await["batch_meter_usage_calls"],
        0
    );
    assert_eq!(admin.get("/admin/faults").await, json!([]));
    assert_eq!(
        admin.get("/admin/clock").await["now"],
        "2026-03-15T12:30:00Z"
    );
    let out = meter_ok(&client, vec![record(1, "requests", 1)]).await;
    assert_eq!(
        first_status(&out),
        Some(&UsageRecordResultStatus::Success),
        "the seeded entitlement is back"
    );
}

#[tokio::test]
async fn admin_errors_are_json_with_a_reason() {
    let sim = start(config()).await;
    let admin = Admin::new(sim.endpoint_url());

    let cases = [
        (
            "/admin/entitlements/revoke",
            json!({"license_arn": "arn:aws:license-manager::1:license:l-nope", "customer_aws_account_id": ACCOUNT}),
            404,
            "no entitlement",
        ),
        (
            "/admin/products",
            json!({"product_code": PRODUCT}),
            400,
            "dimensions",
        ),
        (
            "/admin/entitlements",
            json!({"license_arn": LICENSE, "customer_aws_account_id": ACCOUNT, "product_code": "other"}),
            400,
            "already known for product",
        ),
    ];
    for (path, body, status, reason) in cases {
        assert_admin_error(&admin.post(path, body).await, status, reason);
    }
    assert_eq!(admin.get("/admin/health").await["ok"], true);
}

#[tokio::test]
async fn wire_errors_carry_type_message_status_and_content_type() {
    let sim = start(config()).await;
    let admin = Admin::new(sim.endpoint_url());

    let (status, headers, body) = admin.wire(None, "{}").await;
    assert_eq!(status, 400);
    assert_eq!(headers["content-type"], "application/x-amz-json-1.1");
    assert_eq!(body["__type"], "UnknownOperationException");
    assert!(
        body["message"]
            .as_str()
            .expect("message")
            .contains("X-Amz-Target")
    );

    let (status, _, body) = admin
        .wire(Some("AWSMPMeteringService.MeterUsage"), "{}")
        .await;
    assert_eq!(status, 400);
    assert_eq!(body["__type"], "UnknownOperationException");

    let (status, headers, body) = admin
        .wire(Some("AWSMPMeteringService.BatchMeterUsage"), "{not json")
        .await;
    assert_eq!(status, 400);
    assert_eq!(headers["x-amzn-errortype"], "SerializationException");
    assert_eq!(body["__type"], "SerializationException");

    let stats = sim.handle().stats();
    assert_eq!(stats.unknown_operation_calls, 2);
    assert_eq!(sim.handle().ledger().rejected_requests.len(), 3);
}

/// The body of a BatchMeterUsage of one `requests` record, both numbers as written.
fn record_json(timestamp: &str, quantity: &str) -> String {
    format!(
        r#"{{"UsageRecords":[{{"Timestamp":{timestamp},"CustomerIdentifier":"","Dimension":"requests",
            "Quantity":{quantity},"CustomerAWSAccountId":"{ACCOUNT}","LicenseArn":"{LICENSE}"}}]}}"#
    )
}

#[tokio::test]
async fn raw_wire_accepts_fractional_timestamps_and_no_signature() {
    let sim = start(config()).await;
    let admin = Admin::new(sim.endpoint_url());
    // 12:29:59.5 on the sim clock; no Authorization header at all.
    let ts = (now().timestamp() - 1).to_string() + ".5";

    let (status, headers, body) = admin.meter_raw(&ts, "4").await;

    assert_eq!(status, 200, "{body}");
    assert_eq!(headers["content-type"], "application/x-amz-json-1.1");
    assert_eq!(body["Results"][0]["Status"], "Success");
    assert_eq!(
        body["Results"][0]["UsageRecord"]["Timestamp"].to_string(),
        ts
    );
    assert_eq!(body["UnprocessedRecords"], json!([]));
    assert_eq!(
        sim.handle().ledger().records[0]
            .timestamp
            .timestamp_subsec_millis(),
        500
    );
}

#[tokio::test]
async fn raw_wire_refuses_quantities_the_sdk_cannot_send() {
    let sim = start(config()).await;
    let admin = Admin::new(sim.endpoint_url());
    let ts = now().timestamp().to_string();
    for (quantity, reason) in [("2147483648", "outside"), ("1.5", "not an integer")] {
        let (status, _, body) = admin.meter_raw(&ts, quantity).await;
        assert_eq!(status, 400, "{body}");
        assert_eq!(body["__type"], "ValidationException");
        assert!(
            body["message"].as_str().expect("message").contains(reason),
            "{body}"
        );
    }
    let (status, _, body) = admin.meter_raw(&ts, "2147483647").await;
    assert_eq!(status, 200, "{body}");
    assert!(sim.handle().ledger().records[0].quantity == 2_147_483_647);
}

#[tokio::test]
async fn lost_responses_are_injected_over_http() {
    let sim = start(config()).await;
    let admin = Admin::new(sim.endpoint_url());
    let client = client(&sim).await;

    let pending = admin
        .queue_faults(json!({"kind": "lose_response", "mode": "drop", "count": 2}))
        .await;
    assert_eq!(
        pending,
        json!([{"kind": "lose_response", "mode": "drop", "count": 2, "operation": "batch_meter_usage"}])
    );
    assert_eq!(admin.delete("/admin/faults").await, 200);
    // `500` is accepted for `http_500`, the default mode.
    admin
        .queue_faults(json!({"kind": "lose_response", "mode": "500"}))
        .await;
    let pending = admin.queue_faults(json!({"kind": "lose_response"})).await;
    assert_eq!(pending[0]["mode"], "http_500");
    assert_eq!(pending[1]["mode"], "http_500");
    let (status, body) = admin
        .post(
            "/admin/faults",
            json!({"kind": "lose_response", "mode": "sometimes"}),
        )
        .await;
    assert_eq!(status, 400, "{body}");

    let (err, status) = meter_err(&client, vec![record(1, "requests", 4)]).await;
    assert!(err.is_internal_service_error_exception(), "{err:?}");
    assert_eq!(status, 500);
    assert_eq!(
        admin.get("/admin/ledger").await["records"][0]["quantity"],
        4
    );
    assert_eq!(admin.get("/admin/stats").await["lost_responses"], 1);
}

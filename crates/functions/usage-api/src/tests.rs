use std::collections::HashMap;

use aws_lambda_events::encodings::Body;
use aws_lambda_events::query_map::QueryMap;
use awsmp_core::memory::{ManualClock, MemorySubscriberStore, MemoryTables, StoreOp};
use awsmp_core::time::parse_usage_timestamp;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;

use super::*;

const LICENSE: &str = "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0";

fn state(tables: &MemoryTables, mode: DeploymentMode) -> State {
    state_with(tables, mode, Arc::new(MemorySubscriberStore::default()))
}

fn state_with(
    tables: &MemoryTables,
    mode: DeploymentMode,
    subscribers: Arc<MemorySubscriberStore>,
) -> State {
    State {
        config: Arc::new(Config {
            usage_table: "usage".into(),
            aggregated_table: "aggregated".into(),
            product_code: "prod".into(),
            deployment_mode: mode,
            read_scope: None,
            subscribers_table: "subscribers".into(),
            subscribers_table_region: "us-east-1".into(),
        }),
        usage: Arc::new(tables.usage_store()),
        aggregated: Arc::new(tables.aggregated_store()),
        subscribers,
        clock: Arc::new(ManualClock::new(
            parse_usage_timestamp("2026-12-03T10:30:00Z").unwrap(),
        )),
    }
}

fn request(
    method: Method,
    path: &str,
    content_type: Option<&str>,
    body: &str,
) -> ApiGatewayProxyRequest {
    let mut request = ApiGatewayProxyRequest::default();
    request.http_method = method;
    request.path = Some(path.to_string());
    if let Some(content_type) = content_type {
        request
            .headers
            .insert("content-type", HeaderValue::from_str(content_type).unwrap());
    }
    request.body = Some(body.to_string());
    request
}

fn post(body: &Value) -> ApiGatewayProxyRequest {
    request(
        Method::POST,
        "/usage/events",
        Some("application/json"),
        &body.to_string(),
    )
}

fn get(id: &str, license: Option<&str>) -> ApiGatewayProxyRequest {
    let mut request = request(Method::GET, &format!("/usage/events/{id}"), None, "");
    if let Some(license) = license {
        request.query_string_parameters = QueryMap::from(HashMap::from([(
            "licenseArn".to_string(),
            license.to_string(),
        )]));
    }
    request
}

fn answer(response: &ApiGatewayProxyResponse) -> (i64, Value) {
    let body = match &response.body {
        Some(Body::Text(text)) => serde_json::from_str(text).unwrap(),
        other => panic!("{other:?}"),
    };
    (response.status_code, body)
}

fn events(quantity: i64) -> Value {
    json!({"events": [
        {"id": "e-1", "licenseArn": LICENSE, "customerAWSAccountId": "111122223333",
         "dimension": "api_calls", "quantity": quantity},
        {"id": "e-2", "licenseArn": "l-bad", "customerAWSAccountId": "111122223333",
         "dimension": "api_calls", "quantity": 1},
    ]})
}

#[tokio::test]
async fn a_batch_gets_a_verdict_per_event_and_its_retry_writes_nothing() {
    let tables = MemoryTables::new();
    let state = state(&tables, DeploymentMode::Full);
    let (status, body) = answer(&handle(&state, post(&events(3))).await);
    assert_eq!(status, 200);
    assert_eq!(
        body["results"][0],
        json!({"id": "e-1", "status": "accepted"})
    );
    assert_eq!(body["results"][1]["status"], "rejected");
    assert_eq!(body["results"][1]["reason"], "InvalidLicenseArn");
    assert_eq!(
        body["results"][1]["serverSideException"],
        "InvalidLicenseException"
    );
    assert_eq!(
        body["summary"],
        json!({"accepted": 1, "duplicate": 0, "conflict": 0, "rejected": 1})
    );
    let (_, again) = answer(&handle(&state, post(&events(3))).await);
    assert_eq!(again["results"][0]["status"], "duplicate");
    assert_eq!(again["results"][0]["recorded"]["quantity"], 3);
    let (_, other) = answer(&handle(&state, post(&events(4))).await);
    assert_eq!(other["results"][0]["status"], "conflict");
    assert_eq!(tables.raw_rows().len(), 2, "one row and its marker");

    // Delivered base64-encoded, as API Gateway does for binary media types.
    let mut encoded = post(&json!({"events": [{"id": "e-3", "licenseArn": LICENSE,
        "customerAWSAccountId": "111122223333", "dimension": "api_calls", "quantity": 1}]}));
    encoded.body = encoded.body.map(|b| BASE64.encode(b));
    encoded.is_base64_encoded = true;
    let (_, decoded) = answer(&handle(&state, encoded).await);
    assert_eq!(decoded["results"][0]["status"], "accepted");
}

#[tokio::test]
async fn an_envelope_it_cannot_read_is_refused_whole_with_a_status_that_says_why() {
    let tables = MemoryTables::new();
    let state = state(&tables, DeploymentMode::Full);
    let body = events(1).to_string();
    let cases = [
        (
            request(Method::POST, "/usage/events", None, &body),
            415,
            "UnsupportedMediaType",
        ),
        (
            request(Method::POST, "/usage/events", Some("text/plain"), &body),
            415,
            "UnsupportedMediaType",
        ),
        (
            request(Method::POST, "/usage/events", Some("application/json"), "{"),
            400,
            "MalformedBatch",
        ),
        (
            request(
                Method::POST,
                "/usage/events",
                Some("application/json"),
                &" ".repeat(1024 * 1024 + 1),
            ),
            413,
            "BatchTooLarge",
        ),
        (
            request(Method::GET, "/usage/events", None, ""),
            405,
            "MethodNotAllowed",
        ),
        (
            request(Method::DELETE, "/usage/events/e-1", None, ""),
            405,
            "MethodNotAllowed",
        ),
        (
            request(Method::POST, "/usage", Some("application/json"), &body),
            404,
            "NotFound",
        ),
        (get("e-1", None), 400, "MissingLicenseArn"),
        (get("e-1", Some(LICENSE)), 404, "UnknownEvent"),
    ];
    for (request, want_status, want_code) in cases {
        let response = handle(&state, request).await;
        let (status, body) = answer(&response);
        assert_eq!(
            (status, body["code"].as_str().unwrap()),
            (want_status, want_code),
            "{body}"
        );
        assert!(!body["message"].as_str().unwrap().is_empty());
        if status == 405 {
            assert!(response.headers.contains_key("allow"));
        }
    }
    assert!(tables.raw_rows().is_empty());
}

#[tokio::test]
async fn a_throttled_table_answers_503_with_retry_after_and_a_direct_submit_stack_409() {
    let tables = MemoryTables::new();
    tables.fail_next(
        StoreOp::UsagePutRow,
        PortError::Transient {
            operation: "put_row",
            message: "throttled".into(),
        },
    );
    let mut throttled = post(&events(1));
    throttled.request_context.request_id = Some("req-7".into());
    let response = handle(&state(&tables, DeploymentMode::Full), throttled).await;
    let (status, body) = answer(&response);
    assert_eq!(status, 503);
    assert_eq!(response.headers["retry-after"], "1");
    // The store's message stays in the log; the answer names the request instead.
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains("req-7") && !message.contains("throttled"),
        "{message}"
    );
    let direct = state(&tables, DeploymentMode::DirectSubmit);
    let (status, body) = answer(&handle(&direct, post(&events(1))).await);
    assert_eq!(
        (status, body["code"].as_str().unwrap()),
        (409, "DirectSubmitStack")
    );
    assert!(body["message"].as_str().unwrap().contains("direct-submit"));
    assert_eq!(
        answer(&handle(&direct, get("e-1", Some(LICENSE))).await).0,
        409
    );
    assert!(tables.raw_rows().is_empty());
}

/// A store failure the caller cannot fix answers 500 without the store's message, which
/// names the table, key and role (the log keeps it, with the request id).
#[tokio::test]
async fn a_failed_store_answers_500_without_its_message() {
    let tables = MemoryTables::new();
    let secret = "User: arn:aws:sts::123456789012:assumed-role/awsmp-usage-api/x is not authorized \
                  on table/awsmp-prod-usage with key arn:aws:kms:us-east-1:123456789012:key/k";
    tables.fail_next(
        StoreOp::UsagePutRow,
        PortError::Failed {
            operation: "put_row",
            message: secret.into(),
        },
    );
    let mut failing = post(&events(1));
    failing.request_context.request_id = Some("req-9".into());
    let (status, body) = answer(&handle(&state(&tables, DeploymentMode::Full), failing).await);
    assert_eq!(
        (status, body["code"].as_str().unwrap()),
        (500, "StoreFailed")
    );
    let message = body["message"].as_str().unwrap();
    assert!(message.contains("req-9"), "{message}");
    for leaked in ["arn:aws", "awsmp-prod-usage", "not authorized"] {
        assert!(!message.contains(leaked), "{message}");
    }
}

/// With JWT authorization a POST reusing an id answers what that id recorded only to a
/// token with the read scope: the write scope alone does not read usage back.
#[tokio::test]
async fn a_post_answers_what_an_id_recorded_only_to_a_token_with_the_read_scope() {
    let tables = MemoryTables::new();
    let mut state = state(&tables, DeploymentMode::Full);
    state.config = Arc::new(Config {
        read_scope: Some("awsmp/usage.read".into()),
        ..(*state.config).clone()
    });
    handle(&state, post(&events(3))).await;
    let with_scopes = |scopes: Value, claims: Value| {
        let mut request = post(&events(3));
        request
            .request_context
            .authorizer
            .fields
            .insert("scopes".into(), scopes);
        request
            .request_context
            .authorizer
            .fields
            .insert("claims".into(), claims);
        request
    };
    let writer = with_scopes(json!(["awsmp/usage.write"]), json!({"sub": "svc"}));
    let (status, body) = answer(&handle(&state, writer).await);
    assert_eq!(status, 200);
    assert_eq!(body["results"][0]["status"], "duplicate");
    assert_eq!(body["results"][0]["recorded"], Value::Null, "{body}");
    for reader in [
        with_scopes(json!(["awsmp/usage.write", "awsmp/usage.read"]), json!({})),
        with_scopes(
            Value::Null,
            json!({"scope": "awsmp/usage.write awsmp/usage.read"}),
        ),
    ] {
        let (_, body) = answer(&handle(&state, reader).await);
        assert_eq!(body["results"][0]["recorded"]["quantity"], 3, "{body}");
    }
    // A scope that merely contains the read scope's name is not it.
    let near = with_scopes(json!(["awsmp/usage.read.extra"]), json!({}));
    let (_, body) = answer(&handle(&state, near).await);
    assert_eq!(body["results"][0]["recorded"], Value::Null, "{body}");
}

#[tokio::test]
async fn an_event_is_read_back_by_its_id_and_license() {
    let tables = MemoryTables::new();
    let state = state(&tables, DeploymentMode::Full);
    handle(&state, post(&events(3))).await;
    // An id with characters a path must escape.
    let odd = json!({"events": [{"id": "order 7/a+b", "licenseArn": LICENSE,
        "customerAWSAccountId": "111122223333", "dimension": "api_calls", "quantity": 2}]});
    handle(&state, post(&odd)).await;
    let (status, body) = answer(&handle(&state, get("e-1", Some(LICENSE))).await);
    assert_eq!(status, 200);
    assert_eq!(body["id"], "e-1");
    assert_eq!(body["fate"]["state"], "pending");
    assert_eq!(body["usage"]["quantity"], 3);
    assert_eq!(body["usage"]["timestamp"], "2026-12-03T10:30:00Z");
    let mut escaped = get("order%207%2Fa+b", Some(LICENSE));
    escaped.path_parameters = HashMap::from([("id".to_string(), "order 7/a+b".to_string())]);
    let (status, body) = answer(&handle(&state, escaped).await);
    assert_eq!((status, body["usage"]["quantity"].as_i64()), (200, Some(2)));
    // Without API Gateway's decoded parameter (the local stand-in), from the path.
    let (status, _) = answer(&handle(&state, get("order%207%2Fa+b", Some(LICENSE))).await);
    assert_eq!(status, 200);
}

/// The usage API answers with the same security headers as every function behind API
/// Gateway (`awsmp_lambda::http::SECURITY_HEADERS`), its errors too.
#[tokio::test]
async fn every_answer_carries_the_shared_security_headers() {
    let tables = MemoryTables::new();
    let state = state(&tables, DeploymentMode::Full);
    let answers = [
        handle(&state, post(&events(1))).await,
        handle(&state, get("e-1", Some(LICENSE))).await,
        handle(&state, get("e-unknown", Some(LICENSE))).await,
        handle(&state, request(Method::DELETE, "/usage/events", None, "")).await,
        handle(&state, request(Method::GET, "/elsewhere", None, "")).await,
    ];
    let statuses: Vec<i64> = answers.iter().map(|a| a.status_code).collect();
    assert_eq!(statuses, [200, 200, 404, 405, 404]);
    for answer in &answers {
        for (name, value) in awsmp_lambda::http::SECURITY_HEADERS {
            assert_eq!(
                answer.headers.get(*name).and_then(|v| v.to_str().ok()),
                Some(*value),
                "{name} on {}",
                answer.status_code
            );
        }
        assert_eq!(
            answer.headers["content-type"],
            "application/json; charset=utf-8"
        );
    }
}

#[test]
fn reads_exactly_its_declared_variables() {
    let asked = std::cell::RefCell::new(Vec::new());
    let config = Config::from_lookup(&|n| {
        asked.borrow_mut().push(n.to_string());
        Some(match n {
            "DEPLOYMENT_MODE" => "direct-submit".to_string(),
            "PRODUCT_CODE" => "abc123".to_string(),
            _ => format!("table-{n}"),
        })
    })
    .unwrap();
    assert_eq!(asked.into_inner(), ENV_VARS);
    assert_eq!(config.deployment_mode, DeploymentMode::DirectSubmit);
    assert_eq!(config.usage_table, "table-USAGE_TABLE");
    assert_eq!(
        config.read_scope.as_deref(),
        Some("table-USAGE_API_READ_SCOPE")
    );
    let err = Config::from_lookup(&|n| (n == "DEPLOYMENT_MODE").then(|| "partial".to_string()))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("USAGE_TABLE is not set") && err.contains("\"partial\""),
        "{err}"
    );
}

fn state_at(tables: &MemoryTables, clock: &ManualClock) -> State {
    State {
        clock: Arc::new(clock.clone()),
        ..state(tables, DeploymentMode::Full)
    }
}

fn cloud_post(events: &Value) -> ApiGatewayProxyRequest {
    request(
        Method::POST,
        "/usage/events",
        Some("application/cloudevents-batch+json"),
        &events.to_string(),
    )
}

fn cloud_event(source: &str, id: &str, quantity: i64) -> Value {
    json!({"specversion": "1.0", "id": id, "source": source, "type": "com.example.usage",
           "data": {"licenseArn": LICENSE, "customerAWSAccountId": "111122223333",
                    "dimension": "api_calls", "quantity": quantity}})
}

fn statuses_of(body: &Value) -> Vec<String> {
    body["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn two_cloudevents_producers_sharing_ids_are_two_events_each_read_back_by_its_source() {
    let tables = MemoryTables::new();
    let state = state(&tables, DeploymentMode::Full);
    let batch = json!([cloud_event("/svc/a", "1", 2), cloud_event("/svc/b", "1", 5)]);
    let (status, body) = answer(&handle(&state, cloud_post(&batch)).await);
    assert_eq!(status, 200);
    assert_eq!(statuses_of(&body), ["accepted", "accepted"], "{body}");
    let (_, again) = answer(&handle(&state, cloud_post(&batch)).await);
    assert_eq!(statuses_of(&again), ["duplicate", "duplicate"]);
    for (source, quantity) in [("/svc/a", 2), ("/svc/b", 5)] {
        let mut read = get("1", Some(LICENSE));
        read.query_string_parameters = QueryMap::from(HashMap::from([
            ("licenseArn".to_string(), LICENSE.to_string()),
            ("source".to_string(), source.to_string()),
        ]));
        let (status, body) = answer(&handle(&state, read).await);
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["id"], "1");
        assert_eq!(body["usage"]["quantity"], quantity);
    }
    // Without its source, id 1 names no event of the native format.
    let (status, body) = answer(&handle(&state, get("1", Some(LICENSE))).await);
    assert_eq!((status, body["code"].as_str()), (404, Some("UnknownEvent")));
}

#[tokio::test]
async fn a_retry_after_the_window_closed_answers_duplicate_not_rejected() {
    let tables = MemoryTables::new();
    let clock = ManualClock::new(parse_usage_timestamp("2026-11-30T23:59:55Z").unwrap());
    let state = state_at(&tables, &clock);
    let batch = json!({"events": [{"id": "e-1", "licenseArn": LICENSE,
        "customerAWSAccountId": "111122223333", "dimension": "api_calls", "quantity": 3,
        "timestamp": "2026-11-30T23:59:50Z"}]});
    let (_, first) = answer(&handle(&state, post(&batch)).await);
    assert_eq!(statuses_of(&first), ["accepted"]);
    clock.set(parse_usage_timestamp("2026-12-01T06:00:05Z").unwrap());
    let (status, again) = answer(&handle(&state, post(&batch)).await);
    assert_eq!(status, 200);
    assert_eq!(statuses_of(&again), ["duplicate"], "{again}");
    assert_eq!(again["results"][0]["recorded"]["quantity"], 3);
    assert_eq!(tables.raw_rows().len(), 2);
}

#[tokio::test]
async fn usage_whose_hours_record_can_no_longer_be_sent_is_rejected_saying_why() {
    let tables = MemoryTables::new();
    let state = state(&tables, DeploymentMode::Full);
    // Posted at 10:30: 10:50 yesterday is inside 24 h, its record (10:00) is not.
    let batch = json!({"events": [{"id": "e-1", "licenseArn": LICENSE,
        "customerAWSAccountId": "111122223333", "dimension": "api_calls", "quantity": 3,
        "timestamp": "2026-12-02T10:50:00Z"}]});
    let (status, body) = answer(&handle(&state, post(&batch)).await);
    assert_eq!(status, 200);
    let result = &body["results"][0];
    assert_eq!(result["status"], "rejected", "{body}");
    assert_eq!(result["reason"], "TimestampOutOfWindow");
    assert!(
        result["message"]
            .as_str()
            .unwrap()
            .contains("2026-12-02T10:00:00Z"),
        "{result}"
    );
    assert!(tables.raw_rows().is_empty());
}

#[tokio::test]
async fn an_id_too_long_for_dynamodb_is_refused_alone_the_others_answered() {
    let tables = MemoryTables::new();
    let state = state(&tables, DeploymentMode::Full);
    let event = |id: &str| {
        json!({"id": id, "licenseArn": LICENSE, "customerAWSAccountId": "111122223333",
               "dimension": "api_calls", "quantity": 1})
    };
    let batch = json!({"events": [event("e-1"), event(&"x".repeat(1100)), event("e-2")]});
    for _ in 0..2 {
        let (status, body) = answer(&handle(&state, post(&batch)).await);
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["results"][1]["status"], "rejected");
        assert_eq!(body["results"][1]["reason"], "Unwritable");
    }
    assert_eq!(tables.raw_rows().len(), 4, "e-1, e-2 and their markers");
}

fn get_subscription(license: &str, account: Option<&str>) -> ApiGatewayProxyRequest {
    let encoded: String = license
        .bytes()
        .map(|b| match b {
            b':' => "%3A".to_string(),
            b'/' => "%2F".to_string(),
            other => (other as char).to_string(),
        })
        .collect();
    let mut request = request(Method::GET, &format!("/subscriptions/{encoded}"), None, "");
    if let Some(account) = account {
        request.query_string_parameters = QueryMap::from(HashMap::from([(
            "customerAWSAccountId".to_string(),
            account.to_string(),
        )]));
    }
    request
}

#[tokio::test]
async fn the_entitlement_answer_is_one_read_of_the_subscribers_row() {
    use awsmp_core::model::{Subscriber, SubscriptionStatus};
    let tables = MemoryTables::new();
    let subscribers = Arc::new(MemorySubscriberStore::default());
    let now = parse_usage_timestamp("2026-12-03T10:30:00Z").unwrap();
    let mut row = Subscriber::new(LICENSE, "111122223333");
    row.subscription_status = Some(SubscriptionStatus::Deprovisioning);
    row.deprovisioning_expiry = Some(parse_usage_timestamp("2026-12-03T11:00:00Z").unwrap());
    row.agreement_id = Some("agmt-1".into());
    subscribers.put_lifecycle(&row, now).await.unwrap();
    let state = state_with(&tables, DeploymentMode::Full, subscribers);

    let (status, body) =
        answer(&handle(&state, get_subscription(LICENSE, Some("111122223333"))).await);
    assert_eq!(status, 200);
    assert_eq!(body["licenseArn"], LICENSE);
    assert_eq!(body["subscriptionStatus"], "deprovisioning");
    assert_eq!(body["usage"], "billedUntil");
    assert_eq!(body["writeBy"], "2026-12-03T10:40:00Z");
    assert_eq!(body["deprovisioningEndsAt"], "2026-12-03T11:00:00Z");
    // Without the account: the license's only buyer.
    let (_, by_license) = answer(&handle(&state, get_subscription(LICENSE, None)).await);
    assert_eq!(by_license, body);

    let (status, unknown) =
        answer(&handle(&state, get_subscription(LICENSE, Some("444455556666"))).await);
    assert_eq!(status, 404);
    assert_eq!(unknown["code"], "UnknownSubscription");
    let (status, bad) = answer(&handle(&state, get_subscription(LICENSE, Some("12-34"))).await);
    assert_eq!(status, 400);
    assert_eq!(bad["code"], "InvalidCustomerAWSAccountId");
    let post = request(Method::POST, "/subscriptions/x", None, "");
    assert_eq!(handle(&state, post).await.status_code, 405);
}

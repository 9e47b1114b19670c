//! The usage API's OpenAPI document (`docs/usage-api.openapi.yaml`) against the function
//! itself: [`handle`] over the in-memory tables is driven through every documented
//! (operation, status) pair it produces, and every answer is validated against the
//! document's schema for its operation, status and media type, together with the
//! well-formed requests (which must match the request schemas), the document's own
//! examples, and renamed-field copies of the answers (which must not match: the schemas
//! are strict enough to catch a wrong field name).
//!
//! Both directions are checked: each documented status is answered by at least one case
//! (so the document cannot list a status the function never gives) and each answered
//! status is documented for its operation (so the function cannot answer an undocumented
//! one). `401`, `403` and `429` come from API Gateway itself: they are only checked to be
//! documented as such.
//!
//! Validation runs in the project's venv (`AWSMP_VENV`, default `<workspace>/.venv`,
//! `make venv`): jsonschema (Draft 2020-12) for the instances, openapi-spec-validator for
//! the document, all in one Python process.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

use aws_lambda_events::apigw::{ApiGatewayProxyRequest, ApiGatewayProxyResponse};
use aws_lambda_events::encodings::Body;
use aws_lambda_events::http::Method;
use aws_lambda_events::http::header::HeaderValue;
use aws_lambda_events::query_map::QueryMap;
use awsmp_core::memory::{
    INGESTION_MARKER_ROW, ManualClock, MemorySubscriberStore, MemoryTables, StoreOp,
    ingestion_marker_sort_key,
};
use awsmp_core::model::{
    AggregatedRecord, AggregatedStatus, AgreementStatus, Attr, GroupKey, ReasonCode, Subscriber,
    SubscriptionStatus, attr,
};
use awsmp_core::ports::PortError;
use awsmp_core::submit::DeploymentMode;
use awsmp_core::time::{HourBucket, parse_usage_timestamp};
use awsmp_usage_api::{Config, RETRY_AFTER_SECONDS, State, handle};
use serde_json::{Map, Value, json};

const LICENSE: &str = "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0";
const ACCOUNT: &str = "111122223333";
const NOW: &str = "2026-12-03T10:30:00Z";
const PRODUCT: &str = "prod";

/// Statuses API Gateway answers itself (authorization, throttling): documented, never
/// produced by the function.
const GATEWAY_STATUSES: &[&str] = &["401", "403", "429"];

/// The `rejected` reasons only a request can get wrong (besides the aggregator's codes).
const API_REASONS: &[&str] = &[
    "MissingId",
    "MissingSource",
    "MalformedEvent",
    "Unwritable",
    "DirectSubmitStack",
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../..")
        .canonicalize()
        .unwrap()
}

fn python() -> PathBuf {
    std::env::var_os("AWSMP_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join(".venv"))
        .join("bin/python")
}

fn state(tables: &MemoryTables, mode: DeploymentMode) -> State {
    state_with(tables, mode, Arc::new(MemorySubscriberStore::new()))
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
            product_code: PRODUCT.into(),
            deployment_mode: mode,
            read_scope: None,
            subscribers_table: "subscribers".into(),
            subscribers_table_region: "us-east-1".into(),
        }),
        usage: Arc::new(tables.usage_store()),
        aggregated: Arc::new(tables.aggregated_store()),
        subscribers,
        clock: Arc::new(ManualClock::new(parse_usage_timestamp(NOW).unwrap())),
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

fn get(id: &str, license: Option<&str>) -> ApiGatewayProxyRequest {
    let mut request = request(Method::GET, &format!("/usage/events/{id}"), None, "");
    request.path_parameters = HashMap::from([("id".to_string(), id.to_string())]);
    if let Some(license) = license {
        request.query_string_parameters = QueryMap::from(HashMap::from([(
            "licenseArn".to_string(),
            license.to_string(),
        )]));
    }
    request
}

fn event(id: &str, dimension: &str, quantity: i64) -> Value {
    json!({"id": id, "licenseArn": LICENSE, "customerAWSAccountId": ACCOUNT,
           "dimension": dimension, "quantity": quantity})
}

/// Which documented operation a request is for: `(path, method)`, or `None` for a
/// request outside both (answered per `x-unrouted-responses`).
type Operation = Option<(&'static str, &'static str)>;
const POST: Operation = Some(("/usage/events", "post"));
const GET: Operation = Some(("/usage/events/{id}", "get"));
const SUBSCRIPTION: Operation = Some(("/subscriptions/{licenseArn}", "get"));

/// `GET /subscriptions/{licenseArn}`'s cases.
#[path = "openapi/subscriptions.rs"]
mod subscriptions;

/// A request body to check against the request schema: its media type, the body, and
/// whether a well-formed client sends it (the function also reads what is not).
struct RequestCheck {
    media: &'static str,
    body: Value,
    well_formed: bool,
}

/// One answered request.
struct Answered {
    label: String,
    operation: Operation,
    status: String,
    content_type: String,
    headers: BTreeMap<String, String>,
    body: Value,
    request: Option<RequestCheck>,
}

struct Cases {
    answered: Vec<Answered>,
}

impl Cases {
    async fn run(
        &mut self,
        state: &State,
        label: &str,
        operation: Operation,
        request: ApiGatewayProxyRequest,
        check: Option<RequestCheck>,
    ) -> Value {
        let response: ApiGatewayProxyResponse = handle(state, request).await;
        let body: Value = match &response.body {
            Some(Body::Text(text)) => serde_json::from_str(text).unwrap(),
            other => panic!("{label}: {other:?}"),
        };
        let headers = response
            .headers
            .iter()
            .map(|(k, v)| (k.as_str().to_string(), v.to_str().unwrap().to_string()))
            .collect::<BTreeMap<_, _>>();
        self.answered.push(Answered {
            label: label.to_string(),
            operation,
            status: response.status_code.to_string(),
            content_type: headers.get("content-type").cloned().unwrap_or_default(),
            headers,
            body: body.clone(),
            request: check,
        });
        body
    }

    /// `POST /usage/events` with `body` as `media`.
    async fn post(
        &mut self,
        state: &State,
        label: &str,
        media: &'static str,
        body: Value,
        well_formed: bool,
    ) -> Value {
        let request = request(
            Method::POST,
            "/usage/events",
            Some(media),
            &body.to_string(),
        );
        let check = RequestCheck {
            media,
            body,
            well_formed,
        };
        self.run(state, label, POST, request, Some(check)).await
    }
}

/// The stored row event `id` wrote, changed by `change`.
fn change_row(tables: &MemoryTables, id: &str, change: impl FnOnce(&mut BTreeMap<String, Attr>)) {
    let marker = tables
        .raw_row(LICENSE, &ingestion_marker_sort_key(id))
        .unwrap();
    let row_key = marker.attrs[INGESTION_MARKER_ROW]
        .as_s()
        .unwrap()
        .to_string();
    let mut row = tables.raw_row(LICENSE, &row_key).unwrap();
    change(&mut row.attrs);
    tables.insert_raw_row(row);
}

fn set_status(tables: &MemoryTables, id: &str, status: &str, reason: Option<&str>) {
    change_row(tables, id, |attrs| {
        attrs.insert(attr::METERING_STATUS.into(), Attr::S(status.into()));
        if let Some(reason) = reason {
            attrs.insert(attr::METERING_STATUS_REASON.into(), Attr::S(reason.into()));
        }
    });
}

/// An aggregated record of `dimension`'s group for the hour of [`NOW`].
fn record(
    tables: &MemoryTables,
    dimension: &str,
    quantity: i64,
    change: impl FnOnce(&mut AggregatedRecord),
) {
    let now = parse_usage_timestamp(NOW).unwrap();
    let key = GroupKey {
        license_arn: LICENSE.into(),
        customer_aws_account_id: ACCOUNT.into(),
        dimension: dimension.into(),
        hour: HourBucket::containing(now),
    };
    let mut record = AggregatedRecord::pending(key, PRODUCT, quantity);
    change(&mut record);
    tables.insert_aggregated(record, now);
}

fn transient() -> PortError {
    PortError::Transient {
        operation: "put_row",
        message: "ProvisionedThroughputExceededException".into(),
    }
}

fn failed() -> PortError {
    PortError::Failed {
        operation: "put_row",
        message: "AccessDeniedException".into(),
    }
}

/// Every request the function answers differently, in one world.
async fn answer_everything() -> Vec<Answered> {
    let mut cases = Cases {
        answered: Vec::new(),
    };
    let tables = MemoryTables::new();
    let full = state(&tables, DeploymentMode::Full);
    let direct = state(&tables, DeploymentMode::DirectSubmit);
    const JSON: &str = "application/json";
    const CLOUDEVENTS: &str = "application/cloudevents-batch+json";

    // POST 200: every verdict.
    let mut tagged = event("e-tags", "api_calls", 2);
    tagged["tags"] = json!({"team": "search", "env": "prod"});
    tagged["timestamp"] = json!("2026-12-03T10:15:00Z");
    let mut split = event("e-split", "storage_gb", 3);
    split["usageAllocations"] = json!([
        {"allocatedUsageQuantity": 2, "tags": [{"key": "team", "value": "a"}]},
        {"allocatedUsageQuantity": 1, "tags": []},
    ]);
    let good = json!({"events": [event("e-1", "api_calls", 3), tagged, split]});
    let body = cases
        .post(&full, "POST accepted", JSON, good.clone(), true)
        .await;
    assert_eq!(body["summary"]["accepted"], 3, "{body}");
    let body = cases.post(&full, "POST duplicate", JSON, good, true).await;
    assert_eq!(body["summary"]["duplicate"], 3, "{body}");
    let body = cases
        .post(
            &full,
            "POST conflict",
            JSON,
            json!({"events": [event("e-1", "api_calls", 4)]}),
            true,
        )
        .await;
    assert_eq!(body["results"][0]["status"], "conflict", "{body}");
    let mut no_id = event("x", "api_calls", 1);
    no_id.as_object_mut().unwrap().remove("id");
    let mut bad_license = event("e-bad-license", "api_calls", 1);
    bad_license["licenseArn"] = json!("l-0123");
    let mut typo = event("e-typo", "api_calls", 1);
    typo["quantitiy"] = json!(1);
    let refused = json!({"events": [
        bad_license,
        no_id,
        event("e#hash", "api_calls", 1),
        typo,
        event("e-2", "api_calls", 5),
    ]});
    let body = cases
        .post(&full, "POST rejected", JSON, refused, false)
        .await;
    assert_eq!(
        body["summary"],
        json!({"accepted": 1, "duplicate": 0, "conflict": 0, "rejected": 4})
    );
    assert_eq!(
        body["results"][0]["serverSideException"],
        "InvalidLicenseException"
    );
    assert_eq!(body["results"][1]["id"], Value::Null);
    assert_eq!(body["results"][2]["reason"], "Unwritable");
    assert!(body["results"][2].get("serverSideException").is_none());

    // POST 200 from a CloudEvents batch, well-formed and not.
    let cloud = |id: &str, quantity: i64| {
        json!({
            "specversion": "1.0", "id": id, "source": "/billing/api", "type": "com.example.usage",
            "time": "2026-12-03T10:00:05Z", "datacontenttype": "application/json",
            "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "data": {"licenseArn": LICENSE, "customerAWSAccountId": ACCOUNT,
                     "dimension": "api_calls", "quantity": quantity},
        })
    };
    let body = cases
        .post(
            &full,
            "POST CloudEvents",
            CLOUDEVENTS,
            json!([cloud("ce-1", 2), cloud("ce-2", 1)]),
            true,
        )
        .await;
    assert_eq!(body["summary"]["accepted"], 2, "{body}");
    let body = cases
        .post(
            &full,
            "POST CloudEvents rejected",
            CLOUDEVENTS,
            json!([cloud("ce-1", 2), {"specversion": "0.3", "id": "ce-3", "data": {}}]),
            false,
        )
        .await;
    assert_eq!(body["summary"]["duplicate"], 1, "{body}");
    assert_eq!(body["results"][1]["reason"], "MalformedEvent", "{body}");
    // Another producer's ce-1 is another event; one without its source has no key.
    let mut other = cloud("ce-1", 5);
    other["source"] = json!("/billing/batch");
    let mut sourceless = cloud("ce-5", 1);
    sourceless.as_object_mut().unwrap().remove("source");
    let body = cases
        .post(
            &full,
            "POST CloudEvents of two producers",
            CLOUDEVENTS,
            json!([other, sourceless]),
            false,
        )
        .await;
    assert_eq!(body["results"][0]["status"], "accepted", "{body}");
    assert_eq!(body["results"][1]["reason"], "MissingSource", "{body}");

    // POST: the envelope refused.
    let one = json!({"events": [event("e-9", "api_calls", 1)]});
    let post_raw =
        |media: Option<&str>, body: &str| request(Method::POST, "/usage/events", media, body);
    cases
        .run(
            &full,
            "POST not JSON",
            POST,
            post_raw(Some(JSON), "{\"events\": ["),
            None,
        )
        .await;
    cases
        .post(&full, "POST no event", JSON, json!({"events": []}), false)
        .await;
    cases
        .run(
            &full,
            "POST over 1 MB",
            POST,
            post_raw(Some(JSON), &" ".repeat(1024 * 1024 + 1)),
            None,
        )
        .await;
    let many: Vec<Value> = (0..101)
        .map(|i| event(&format!("m-{i}"), "api_calls", 1))
        .collect();
    cases
        .post(
            &full,
            "POST 101 events",
            JSON,
            json!({ "events": many }),
            false,
        )
        .await;
    cases
        .run(
            &full,
            "POST text/plain",
            POST,
            post_raw(Some("text/plain"), &one.to_string()),
            None,
        )
        .await;
    cases
        .post(&direct, "POST direct-submit", JSON, one.clone(), true)
        .await;
    tables.fail_next(StoreOp::UsagePutRow, failed());
    cases
        .post(&full, "POST store failed", JSON, one.clone(), true)
        .await;
    tables.fail_next(StoreOp::UsagePutRow, transient());
    cases.post(&full, "POST throttled", JSON, one, true).await;

    // GET 200: every fate. e-1 stays pending; the others' rows and records are set as
    // the aggregator and the submitter leave them.
    for (id, dimension) in [
        ("f-rejected", "d-rejected"),
        ("f-rejected-bare", "d-rejected-bare"),
        ("f-expired", "d-expired"),
        ("f-gone-record", "d-gone-record"),
        ("f-gone-row", "d-gone-row"),
        ("f-error", "d-error"),
    ] {
        cases
            .post(
                &full,
                &format!("POST {id}"),
                JSON,
                json!({"events": [event(id, dimension, 1)]}),
                true,
            )
            .await;
    }
    set_status(&tables, "e-tags", "Aggregated", None);
    record(&tables, "api_calls", 2, |_| {});
    set_status(&tables, "e-split", "Aggregated", None);
    record(&tables, "storage_gb", 3, |r| {
        r.status = AggregatedStatus::Success;
        r.metering_record_id = Some("6c0e3d4e-8f3b-4b8e-9a51-0123456789ab".into());
        r.attempt_count = 1;
    });
    set_status(&tables, "f-error", "Aggregated", None);
    record(&tables, "d-error", 1, |r| {
        r.status = AggregatedStatus::Error;
        r.status_reason = Some("InvalidEndpointRegionException".into());
        r.attempt_count = 1;
    });
    set_status(
        &tables,
        "f-rejected",
        "RejectedClientSide",
        Some("TimestampOutOfWindow"),
    );
    set_status(&tables, "f-rejected-bare", "RejectedClientSide", None);
    set_status(&tables, "f-expired", "AggregationExpired", None);
    set_status(&tables, "f-gone-record", "Aggregated", None);
    let marker_key = ingestion_marker_sort_key("f-gone-row");
    let mut marker = tables.raw_row(LICENSE, &marker_key).unwrap();
    marker.attrs.insert(
        INGESTION_MARKER_ROW.into(),
        Attr::S(format!("{ACCOUNT}#gone")),
    );
    tables.insert_raw_row(marker);
    for (id, state) in [
        ("e-1", "pending"),
        ("e-tags", "counted"),
        ("e-split", "counted"),
        ("f-error", "counted"),
        ("f-rejected", "rejected"),
        ("f-rejected-bare", "rejected"),
        ("f-expired", "expired"),
        ("f-gone-record", "deleted"),
        ("f-gone-row", "deleted"),
    ] {
        let body = cases
            .run(
                &full,
                &format!("GET {id}"),
                GET,
                get(id, Some(LICENSE)),
                None,
            )
            .await;
        assert_eq!(body["fate"]["state"], state, "{id}: {body}");
    }

    // GET: refused.
    cases
        .run(&full, "GET no licenseArn", GET, get("e-1", None), None)
        .await;
    cases
        .run(&full, "GET unknown", GET, get("never", Some(LICENSE)), None)
        .await;
    cases
        .run(
            &direct,
            "GET direct-submit",
            GET,
            get("e-1", Some(LICENSE)),
            None,
        )
        .await;
    tables.fail_next(StoreOp::UsageGetRow, failed());
    cases
        .run(
            &full,
            "GET store failed",
            GET,
            get("e-1", Some(LICENSE)),
            None,
        )
        .await;
    tables.fail_next(StoreOp::UsageGetRow, transient());
    cases
        .run(&full, "GET throttled", GET, get("e-1", Some(LICENSE)), None)
        .await;

    subscriptions::answer_every_entitlement(&mut cases, &tables).await;

    // Outside the operations (a proxy that forwards everything).
    cases
        .run(
            &full,
            "POST /usage",
            None,
            request(Method::POST, "/usage", Some(JSON), "{}"),
            None,
        )
        .await;
    cases
        .run(
            &full,
            "GET /usage/events",
            None,
            request(Method::GET, "/usage/events", None, ""),
            None,
        )
        .await;
    cases
        .run(
            &full,
            "DELETE /usage/events/e-1",
            None,
            request(Method::DELETE, "/usage/events/e-1", None, ""),
            None,
        )
        .await;
    cases.answered
}

/// `value` with every `$ref` (local, `#/...`) replaced by what it points to; a `$ref`'s
/// sibling keywords are kept where the target has none of its own.
fn resolve(doc: &Value, value: &Value, depth: usize) -> Value {
    assert!(depth < 64, "a $ref cycle");
    match value {
        Value::Object(map) => match map.get("$ref") {
            Some(Value::String(reference)) => {
                let target = reference
                    .strip_prefix('#')
                    .and_then(|pointer| doc.pointer(pointer))
                    .unwrap_or_else(|| panic!("unresolvable $ref {reference}"));
                let mut resolved = resolve(doc, target, depth + 1);
                if let Value::Object(out) = &mut resolved {
                    for (key, sibling) in map.iter().filter(|(k, _)| *k != "$ref") {
                        out.entry(key.clone())
                            .or_insert_with(|| resolve(doc, sibling, depth + 1));
                    }
                }
                resolved
            }
            _ => Value::Object(
                map.iter()
                    .map(|(k, v)| (k.clone(), resolve(doc, v, depth)))
                    .collect(),
            ),
        },
        Value::Array(items) => Value::Array(items.iter().map(|v| resolve(doc, v, depth)).collect()),
        other => other.clone(),
    }
}

/// The documented responses of an operation (or of the unrouted requests), resolved.
fn responses(doc: &Value, operation: Operation) -> Map<String, Value> {
    let responses = match operation {
        Some((path, method)) => &doc["paths"][path][method]["responses"],
        None => &doc["x-unrouted-responses"]["responses"],
    };
    let Value::Object(map) = resolve(doc, responses, 0) else {
        panic!("{operation:?} documents no responses");
    };
    map
}

fn operation_name(operation: Operation) -> String {
    match operation {
        Some((path, method)) => format!("{} {path}", method.to_uppercase()),
        None => "unrouted".to_string(),
    }
}

/// `value` with the first object key named `from` (depth first) renamed to `to`.
fn renamed(value: &Value, from: &str, to: &str) -> Option<Value> {
    match value {
        Value::Object(map) if map.contains_key(from) => {
            let mut map = map.clone();
            let moved = map.remove(from)?;
            map.insert(to.to_string(), moved);
            Some(Value::Object(map))
        }
        Value::Object(map) => map.iter().find_map(|(key, inner)| {
            let changed = renamed(inner, from, to)?;
            let mut map = map.clone();
            map.insert(key.clone(), changed);
            Some(Value::Object(map))
        }),
        Value::Array(items) => items.iter().enumerate().find_map(|(i, inner)| {
            let changed = renamed(inner, from, to)?;
            let mut items = items.clone();
            items[i] = changed;
            Some(Value::Array(items))
        }),
        _ => None,
    }
}

/// Validates every check in the venv's Python (one process); the failures.
fn validate(document: &Value, checks: &[Value]) -> String {
    const SCRIPT: &str = r#"
import json, sys
from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match
from openapi_spec_validator import validate
given = json.load(sys.stdin)
failures = []
try:
    validate(given["document"])
except Exception as e:
    failures.append(f"the document is not valid OpenAPI: {e}")
for check in given["checks"]:
    Draft202012Validator.check_schema(check["schema"])
    errors = list(Draft202012Validator(check["schema"]).iter_errors(check["instance"]))
    if check["valid"] and errors:
        for e in errors:
            where = "/".join(str(p) for p in e.absolute_path) or "(document)"
            deepest = best_match(e.context) if e.context else None
            why = f" (deepest: {deepest.message})" if deepest else ""
            failures.append(f"{check['label']}: {where}: {e.message[:200]}{why}")
    elif not check["valid"] and not errors:
        failures.append(f"{check['label']}: matches its schema, but must not")
print(f"checked {len(given['checks'])}")
for failure in failures:
    print(failure)
sys.exit(1 if failures else 0)
"#;
    let python = python();
    let mut child = Command::new(&python)
        .args(["-c", SCRIPT])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "{} runs ({e}): make venv, or set AWSMP_VENV",
                python.display()
            )
        });
    let input = json!({"document": document, "checks": checks}).to_string();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        stdout.starts_with(&format!("checked {}", checks.len())),
        "the validator did not run:\n{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() {
        String::new()
    } else {
        format!("{stdout}{}", String::from_utf8_lossy(&out.stderr))
    }
}

fn check(label: impl Into<String>, schema: &Value, instance: &Value, valid: bool) -> Value {
    json!({"label": label.into(), "schema": schema, "instance": instance, "valid": valid})
}

fn string_set(value: &Value) -> BTreeSet<String> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {value}"))
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn every_answer_matches_the_openapi_document_and_every_documented_status_is_answered() {
    let path = root().join("docs/usage-api.openapi.yaml");
    let doc: Value = serde_norway::from_str(&std::fs::read_to_string(&path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(doc["openapi"], "3.1.0");
    let documented_operations: BTreeSet<(String, String)> = doc["paths"]
        .as_object()
        .unwrap()
        .iter()
        .flat_map(|(path, item)| {
            let methods = [
                "get", "put", "post", "delete", "options", "head", "patch", "trace",
            ];
            methods
                .into_iter()
                .filter(|m| item.get(*m).is_some())
                .map(|m| (path.clone(), m.to_string()))
                .collect::<Vec<_>>()
        })
        .collect();
    let operations: BTreeSet<(String, String)> = [POST, GET, SUBSCRIPTION]
        .into_iter()
        .flatten()
        .map(|(path, method)| (path.to_string(), method.to_string()))
        .collect();
    assert_eq!(
        documented_operations, operations,
        "the function answers exactly these operations"
    );
    let answered = answer_everything().await;

    let mut problems: Vec<String> = Vec::new();
    let mut checks: Vec<Value> = Vec::new();
    let mut covered: BTreeSet<(String, String)> = BTreeSet::new();
    for a in &answered {
        let name = format!(
            "{} ({}, {})",
            a.label,
            operation_name(a.operation),
            a.status
        );
        covered.insert((operation_name(a.operation), a.status.clone()));
        let documented = responses(&doc, a.operation);
        let Some(response) = documented.get(&a.status) else {
            problems.push(format!("{name}: status {} is not documented", a.status));
            continue;
        };
        let media = a.content_type.split(';').next().unwrap_or("").trim();
        let Some(schema) = response["content"].get(media).map(|m| &m["schema"]) else {
            problems.push(format!("{name}: media type {media:?} is not documented"));
            continue;
        };
        checks.push(check(name.clone(), schema, &a.body, true));
        // A renamed field anywhere in the answer breaks its schema.
        for (from, to) in [
            ("customerAWSAccountId", "customerAwsAccountId"),
            ("allocatedUsageQuantity", "allocatedQuantity"),
            ("serverSideException", "serverSideError"),
            ("meteringStatus", "status"),
            ("hourBucket", "hour"),
            ("accepted", "acepted"),
            ("code", "error"),
            ("state", "status"),
            ("tags", "tag"),
        ] {
            if let Some(broken) = renamed(&a.body, from, to) {
                checks.push(check(
                    format!("{name} with {from} renamed {to}"),
                    schema,
                    &broken,
                    false,
                ));
            }
        }
        if let Some(headers) = response.get("headers").and_then(Value::as_object) {
            for (header, spec) in headers {
                if spec["required"] == true && !a.headers.contains_key(&header.to_ascii_lowercase())
                {
                    problems.push(format!("{name}: documented header {header} is missing"));
                }
            }
        }
        if let Some(request) = &a.request {
            let (path, method) = a.operation.unwrap();
            let schema = resolve(
                &doc,
                &doc["paths"][path][method]["requestBody"]["content"][request.media]["schema"],
                0,
            );
            checks.push(check(
                format!("{} request", a.label),
                &schema,
                &request.body,
                request.well_formed,
            ));
        }
    }

    // Both directions: every documented status is answered, by the function or (401,
    // 403, 429) by API Gateway, documented as such.
    let operations = [POST, GET, None];
    for operation in operations {
        for (status, response) in responses(&doc, operation) {
            let description = response["description"].as_str().unwrap_or("");
            if GATEWAY_STATUSES.contains(&status.as_str()) {
                assert!(operation.is_some(), "{status} is answered by API Gateway");
                assert!(
                    description.starts_with("From API Gateway"),
                    "{} {status}: {description:?} must say it comes from API Gateway",
                    operation_name(operation)
                );
                let schema = &response["content"]["application/json"]["schema"];
                assert_eq!(
                    schema,
                    &resolve(&doc, &doc["components"]["schemas"]["GatewayError"], 0)
                );
            } else if !covered.contains(&(operation_name(operation), status.clone())) {
                problems.push(format!(
                    "{} {status} is documented but no case answers it",
                    operation_name(operation)
                ));
            }
        }
    }
    for operation in [POST, GET] {
        let documented = responses(&doc, operation);
        for status in ["403", "429"] {
            assert!(
                documented.contains_key(status),
                "{operation:?} documents {status}"
            );
        }
        let (path, method) = operation.unwrap();
        let security = &doc["paths"][path][method]["security"];
        assert_eq!(
            security,
            &json!([{"sigv4": []}, {"jwt": []}]),
            "{path}: either scheme"
        );
    }
    let allow: BTreeSet<&str> = answered
        .iter()
        .filter(|a| a.status == "405")
        .map(|a| a.headers["allow"].as_str())
        .collect();
    assert_eq!(allow, BTreeSet::from(["GET", "POST"]));
    for a in answered.iter().filter(|a| a.status == "503") {
        assert_eq!(a.headers["retry-after"], RETRY_AFTER_SECONDS.to_string());
    }

    // Every verdict and every fate was answered and validated.
    let schemas = &doc["components"]["schemas"];
    let mapping_keys = |schema: &str| -> BTreeSet<String> {
        schemas[schema]["discriminator"]["mapping"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect()
    };
    let verdicts: BTreeSet<String> = answered
        .iter()
        .filter(|a| a.operation == POST && a.status == "200")
        .flat_map(|a| a.body["results"].as_array().unwrap().clone())
        .map(|v| v["status"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(verdicts, mapping_keys("Verdict"));
    let fates: BTreeSet<String> = answered
        .iter()
        .filter(|a| a.operation == GET && a.status == "200")
        .map(|a| a.body["fate"]["state"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(fates, mapping_keys("Fate"));
    let usage: BTreeSet<String> = answered
        .iter()
        .filter(|a| a.operation == SUBSCRIPTION && a.status == "200")
        .map(|a| a.body["usage"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        usage,
        string_set(&schemas["Entitlement"]["properties"]["usage"]["enum"]),
        "every entitlement answer is answered"
    );
    let codes: BTreeSet<String> = answered
        .iter()
        .filter_map(|a| a.body["code"].as_str().map(str::to_string))
        .collect();
    assert_eq!(
        codes,
        string_set(&schemas["Error"]["properties"]["code"]["enum"])
    );

    // The document's lists are the code's.
    let reasons: BTreeSet<String> = ReasonCode::ALL
        .iter()
        .map(|c| c.as_str())
        .chain(API_REASONS.iter().copied())
        .map(str::to_string)
        .collect();
    assert_eq!(
        reasons,
        string_set(&schemas["Rejected"]["properties"]["reason"]["enum"])
    );
    let exceptions: BTreeSet<String> = ReasonCode::ALL
        .iter()
        .filter_map(|c| awsmp_core::remedy::server_side_pair(*c))
        .map(str::to_string)
        .collect();
    assert_eq!(
        exceptions,
        string_set(&schemas["Rejected"]["properties"]["serverSideException"]["enum"])
    );
    let statuses: BTreeSet<String> = AggregatedStatus::ALL
        .iter()
        .map(|s| s.as_str().to_string())
        .collect();
    assert_eq!(
        statuses,
        string_set(&schemas["RecordView"]["properties"]["meteringStatus"]["enum"])
    );
    assert_eq!(
        schemas["LicenseArn"]["pattern"],
        awsmp_core::guardrails::LICENSE_ARN_PATTERN
    );
    let max = awsmp_core::usage_api::MAX_EVENTS;
    assert_eq!(
        schemas["EventBatch"]["properties"]["events"]["maxItems"],
        max
    );
    assert_eq!(schemas["CloudEventsBatch"]["maxItems"], max);

    // The document's own examples match their schemas.
    for operation in [POST, GET] {
        let (path, method) = operation.unwrap();
        let mut media_types: Vec<(String, Value)> = Vec::new();
        let body = resolve(
            &doc,
            &doc["paths"][path][method]["requestBody"]["content"],
            0,
        );
        if let Some(content) = body.as_object() {
            media_types.extend(
                content
                    .iter()
                    .map(|(m, v)| (format!("request {m}"), v.clone())),
            );
        }
        for (status, response) in responses(&doc, operation) {
            if let Some(content) = response["content"].as_object() {
                media_types.extend(
                    content
                        .iter()
                        .map(|(m, v)| (format!("{status} {m}"), v.clone())),
                );
            }
        }
        for (what, media) in media_types {
            for (name, example) in media["examples"].as_object().into_iter().flatten() {
                checks.push(check(
                    format!("example {name} of {} {what}", operation_name(operation)),
                    &media["schema"],
                    &example["value"],
                    true,
                ));
            }
        }
    }

    let failures = validate(&doc, &checks);
    if !failures.is_empty() {
        problems.push(failures);
    }
    assert!(
        problems.is_empty(),
        "{} disagrees with the function:\n{}",
        path.display(),
        problems.join("\n")
    );
}

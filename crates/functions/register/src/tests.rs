//! Handler tests over the in-memory ports, starting from a real API Gateway REST proxy
//! event (`tests/fixtures`). The same responses are checked against moto and the
//! Marketplace simulator in `tests/moto_sim.rs`.

use std::sync::Arc;

use aws_lambda_events::apigw::{ApiGatewayProxyRequest, ApiGatewayProxyResponse};
use aws_lambda_events::encodings::Body;
use aws_lambda_events::http::{HeaderValue, Method};
use awsmp_core::memory::{
    ManualClock, MemoryCustomerResolver, MemoryProfileStore, MemorySubscriberStore, StoreOp,
};
use awsmp_core::ports::{PortError, ResolveError, ResolvedCustomer};
use awsmp_core::time::parse_usage_timestamp;
use base64::Engine as _;
use serde_json::Value;

use super::*;

const FIXTURE: &str = include_str!("../tests/fixtures/apigw-register-urlencoded.json");
const LICENSE: &str =
    "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef";
const ACCOUNT: &str = "845735284135";
const PRODUCT: &str = "prod-abc123";
const TOKEN: &str = "tok-valid+/=";

struct Harness {
    state: State,
    resolver: MemoryCustomerResolver,
    subscribers: MemorySubscriberStore,
    profiles: MemoryProfileStore,
    metrics: awsmp_core::memory::RecordingMetrics,
}

fn config(profile_table: Option<&str>) -> Config {
    let vars = [
        ("PRODUCT_CODE", PRODUCT),
        ("SUBSCRIBERS_TABLE", "awsmp-subscribers-test"),
        ("SUBSCRIBERS_TABLE_REGION", "us-east-1"),
        (
            "ALLOWED_REGISTRATION_FIELDS",
            "companyName,contactName,contactEmail",
        ),
        ("RESOLVE_CUSTOMER_REGION", "us-east-1"),
        (
            "REGISTRATION_PAGE_URL",
            "https://register.example.com/index.html",
        ),
        ("ALLOWED_ORIGIN", "https://register.example.com"),
        ("AWS_REGION", "us-west-2"),
        ("STAGE", "test"),
    ];
    Config::from_lookup(&|k| {
        if k == "CUSTOMER_PROFILE_TABLE" {
            return profile_table.map(str::to_string);
        }
        vars.iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.to_string())
    })
    .unwrap()
}

fn harness_with(config: Config) -> Harness {
    let resolver = MemoryCustomerResolver::new();
    resolver.insert(
        TOKEN,
        Ok(ResolvedCustomer {
            license_arn: LICENSE.into(),
            customer_aws_account_id: ACCOUNT.into(),
            product_code: PRODUCT.into(),
        }),
    );
    let subscribers = MemorySubscriberStore::new();
    let profiles = MemoryProfileStore::new();
    let clock = ManualClock::new(parse_usage_timestamp("2026-11-30T10:15:42Z").unwrap());
    let metrics = awsmp_core::memory::RecordingMetrics::new();
    let state = State {
        profiles: config
            .customer_profile_table
            .as_ref()
            .map(|_| Arc::new(profiles.clone()) as Arc<dyn ProfileStore>),
        config: Arc::new(config),
        resolver: Arc::new(resolver.clone()),
        subscribers: Arc::new(subscribers.clone()),
        clock: Arc::new(clock),
        metrics: Arc::new(metrics.clone()),
    };
    Harness {
        state,
        resolver,
        subscribers,
        profiles,
        metrics,
    }
}

fn harness() -> Harness {
    harness_with(config(Some("awsmp-prod-abc123-customer-profile")))
}

fn fixture() -> ApiGatewayProxyRequest {
    serde_json::from_str(FIXTURE).unwrap()
}

fn with_body(body: &str) -> ApiGatewayProxyRequest {
    let mut request = fixture();
    request.body = Some(body.to_string());
    request
}

fn fulfillment(body: Option<&str>) -> ApiGatewayProxyRequest {
    let mut request = fixture();
    request.resource = Some("/fulfillment".into());
    request.path = Some("/fulfillment".into());
    request.body = body.map(str::to_string);
    request
        .headers
        .insert("origin", HeaderValue::from_static("https://aws.amazon.com"));
    request
}

fn body_json(response: &ApiGatewayProxyResponse) -> Value {
    match &response.body {
        Some(Body::Text(text)) => serde_json::from_str(text).unwrap(),
        other => panic!("expected a JSON text body, got {other:?}"),
    }
}

fn header<'a>(response: &'a ApiGatewayProxyResponse, name: &str) -> &'a str {
    response
        .headers
        .get(name)
        .unwrap_or_else(|| panic!("no {name} header"))
        .to_str()
        .unwrap()
}

fn assert_security_headers(response: &ApiGatewayProxyResponse) {
    assert_eq!(header(response, "cache-control"), "no-store");
    assert_eq!(header(response, "x-content-type-options"), "nosniff");
    assert_eq!(header(response, "x-frame-options"), "DENY");
    assert!(header(response, "strict-transport-security").starts_with("max-age="));
    assert_eq!(header(response, "referrer-policy"), "no-referrer");
}

#[path = "../../subscription/tests/support/logs.rs"]
mod logs;
use logs::capture_logs;

#[tokio::test]
async fn registration_writes_the_profile_in_region_and_only_identity_cross_region() {
    let h = harness();
    let response = handle(&h.state, fixture()).await;
    assert_eq!(response.status_code, 200, "{:?}", response.body);
    assert_eq!(body_json(&response)["code"], "registered");
    assert_security_headers(&response);
    assert_eq!(
        header(&response, "access-control-allow-origin"),
        "https://register.example.com"
    );

    // The profile holds the allowlisted fields; `password` was not allowlisted.
    let profile = h.profiles.get(LICENSE, ACCOUNT).unwrap();
    assert_eq!(profile.product_code, PRODUCT);
    assert_eq!(
        profile.fields.into_iter().collect::<Vec<_>>(),
        vec![
            ("companyName".to_string(), "Example Corp".to_string()),
            ("contactEmail".to_string(), "jane@example.com".to_string()),
        ]
    );
    // The subscriber row gets the product code and the Region, never a lifecycle status.
    let rows = h.subscribers.rows();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].registered_regions, ["us-west-2"]);
    assert_eq!(rows[0].product_code.as_deref(), Some(PRODUCT));
    assert_eq!(rows[0].subscription_status, None);
    assert_eq!(rows[0].agreement_status, None);
    assert_eq!(rows[0].version, 0);
    assert_eq!(h.resolver.calls(), 1);

    // The token is reusable until it expires: registering again is idempotent.
    assert_eq!(
        h.metrics
            .total(awsmp_core::ports::metric::REGISTRATION_REPEATED),
        0
    );
    let again = handle(&h.state, fixture()).await;
    assert_eq!(again.status_code, 200);
    assert_eq!(h.subscribers.rows()[0].registered_regions, ["us-west-2"]);
    assert_eq!(
        h.metrics
            .total(awsmp_core::ports::metric::REGISTRATION_REPEATED),
        1
    );
}

/// Whoever holds the buyer's link (valid for hours) can post again; the first
/// registration's contact fields stand, and the repeat is counted.
#[tokio::test]
async fn a_second_registration_cannot_replace_the_first_ones_contact_fields() {
    let h = harness();
    let first = handle(
        &h.state,
        with_body("x-amzn-marketplace-token=tok-valid%2B%2F%3D&companyName=Acme&contactEmail=jane%40acme.example"),
    )
    .await;
    assert_eq!(first.status_code, 200);
    let second = handle(
        &h.state,
        with_body("x-amzn-marketplace-token=tok-valid%2B%2F%3D&companyName=Evil&contactEmail=mallory%40evil.example&contactName=Mallory"),
    )
    .await;
    assert_eq!(second.status_code, 200, "the buyer sees no difference");
    let profile = h.profiles.get(LICENSE, ACCOUNT).unwrap();
    assert_eq!(profile.fields["companyName"], "Acme");
    assert_eq!(profile.fields["contactEmail"], "jane@acme.example");
    // A field the first registration left empty is filled.
    assert_eq!(profile.fields["contactName"], "Mallory");
    assert_eq!(
        h.metrics
            .total(awsmp_core::ports::metric::REGISTRATION_REPEATED),
        1
    );
}

#[tokio::test]
async fn zero_fields_still_writes_the_identity_row() {
    let h = harness();
    let response = handle(
        &h.state,
        with_body("x-amzn-marketplace-token=tok-valid%2B%2F%3D"),
    )
    .await;
    assert_eq!(response.status_code, 200);
    let profile = h.profiles.get(LICENSE, ACCOUNT).unwrap();
    assert!(profile.fields.is_empty());
}

#[tokio::test]
async fn a_field_the_allowlist_lacks_is_dropped_and_counted() {
    let h = harness();
    let response = handle(
        &h.state,
        with_body("x-amzn-marketplace-token=tok-valid%2B%2F%3D&companyName=Acme&contactPhone=555"),
    )
    .await;
    assert_eq!(response.status_code, 200);
    let profile = h.profiles.get(LICENSE, ACCOUNT).unwrap();
    assert_eq!(profile.fields.len(), 1, "{:?}", profile.fields);
    assert_eq!(
        h.metrics
            .total(awsmp_core::ports::metric::REGISTRATION_FIELD_DROPPED),
        1
    );
}

/// One source of truth for the fields: what the default page (web/config.js) asks the
/// buyer for is exactly what the template keeps by default.
#[test]
fn the_default_allowlist_keeps_every_field_the_default_page_asks_for() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../..");
    let page = std::fs::read_to_string(root.join("web/config.js")).unwrap();
    let fields_block = page
        .split("fields: [")
        .nth(1)
        .unwrap()
        .split("],")
        .next()
        .unwrap();
    let mut asked: Vec<String> = fields_block
        .split("name: \"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next().map(str::to_string))
        .collect();
    let template =
        awsmp_local_aws::cfn::StackTemplate::load(&root.join("template-main.yaml"), &[]).unwrap();
    let mut kept: Vec<String> = template
        .parameter("AllowedRegistrationFields")
        .unwrap()
        .split(',')
        .map(str::to_string)
        .collect();
    asked.sort();
    kept.sort();
    assert!(!asked.is_empty());
    assert_eq!(
        asked, kept,
        "web/config.js fields vs AllowedRegistrationFields default"
    );
}

#[tokio::test]
async fn base64_multipart_posts_register_too() {
    let h = harness();
    let multipart = "--b0undary\r\nContent-Disposition: form-data; name=\"x-amzn-marketplace-token\"\r\n\r\ntok-valid+/=\r\n--b0undary\r\nContent-Disposition: form-data; name=\"contactName\"\r\n\r\nJane Buyer\r\n--b0undary--\r\n";
    let mut request = fixture();
    request.headers.insert(
        "content-type",
        HeaderValue::from_static("multipart/form-data; boundary=b0undary"),
    );
    request.body = Some(base64::engine::general_purpose::STANDARD.encode(multipart));
    request.is_base64_encoded = true;
    let response = handle(&h.state, request).await;
    assert_eq!(response.status_code, 200, "{:?}", response.body);
    assert_eq!(
        h.profiles.get(LICENSE, ACCOUNT).unwrap().fields["contactName"],
        "Jane Buyer"
    );
}

/// Every refusal: status, code, and that nothing was written.
#[tokio::test]
async fn refusals_are_specific_and_write_nothing() {
    let long = "x".repeat(1001);
    let many: String = (0..60).map(|i| format!("f{i}=1&")).collect();
    let cases: Vec<(&str, ApiGatewayProxyRequest, u16, &str)> = vec![
        ("no token", with_body("companyName=x"), 400, "missing-token"),
        (
            "unknown token",
            with_body("x-amzn-marketplace-token=tok-unknown"),
            400,
            "invalid-token",
        ),
        (
            "field too long",
            with_body(&format!(
                "x-amzn-marketplace-token=tok-valid%2B%2F%3D&companyName={long}"
            )),
            400,
            "field-too-long",
        ),
        ("too many fields", with_body(&many), 400, "too-many-fields"),
        (
            "duplicate field",
            with_body("x-amzn-marketplace-token=tok-valid%2B%2F%3D&companyName=a&companyName=b"),
            400,
            "duplicate-field",
        ),
        (
            "control characters",
            with_body("x-amzn-marketplace-token=tok-valid%2B%2F%3D&companyName=a%07"),
            400,
            "invalid-field-value",
        ),
        (
            "json body",
            {
                let mut r = with_body("{}");
                r.headers
                    .insert("content-type", HeaderValue::from_static("application/json"));
                r
            },
            415,
            "unsupported-content-type",
        ),
        (
            "other origin",
            {
                let mut r = fixture();
                r.headers
                    .insert("origin", HeaderValue::from_static("https://evil.example"));
                r
            },
            403,
            "origin-not-allowed",
        ),
    ];
    for (name, request, status, code) in cases {
        let h = harness();
        let response = handle(&h.state, request).await;
        assert_eq!(response.status_code, i64::from(status), "{name}");
        let body = body_json(&response);
        assert_eq!(body["code"], code, "{name}");
        assert!(
            body["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{name}"
        );
        assert_security_headers(&response);
        assert!(h.profiles.all().is_empty(), "{name}");
        assert!(h.subscribers.rows().is_empty(), "{name}");
    }
}

#[tokio::test]
async fn field_errors_name_the_field_for_the_page() {
    let h = harness();
    let long = "x".repeat(1001);
    let response = handle(
        &h.state,
        with_body(&format!("x-amzn-marketplace-token=t&contactName={long}")),
    )
    .await;
    let body = body_json(&response);
    assert_eq!(body["field"], "contactName");
    // The token is not resolved when the form itself is wrong.
    assert_eq!(h.resolver.calls(), 0);
}

#[tokio::test]
async fn token_errors_tell_the_buyer_to_go_back_to_marketplace() {
    let h = harness();
    h.resolver
        .insert("tok-expired", Err(ResolveError::ExpiredToken));
    h.resolver.insert(
        "tok-other-product",
        Ok(ResolvedCustomer {
            license_arn: LICENSE.into(),
            customer_aws_account_id: ACCOUNT.into(),
            product_code: "prod-someone-else".into(),
        }),
    );
    let expired = handle(&h.state, with_body("x-amzn-marketplace-token=tok-expired")).await;
    assert_eq!(expired.status_code, 400);
    let body = body_json(&expired);
    assert_eq!(body["code"], "expired-token");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("Return to AWS Marketplace and choose Set up your account again")
    );
    assert_eq!(body["marketplaceUrl"], MARKETPLACE_LIBRARY_URL);

    let other = handle(
        &h.state,
        with_body("x-amzn-marketplace-token=tok-other-product"),
    )
    .await;
    assert_eq!(other.status_code, 400);
    assert_eq!(body_json(&other)["code"], "wrong-product");
    assert!(h.profiles.all().is_empty());
    assert!(h.subscribers.rows().is_empty());
}

#[tokio::test]
async fn service_failures_are_5xx_without_internals() {
    let h = harness();
    h.resolver.insert(
        "tok-throttled",
        Err(ResolveError::Unavailable(
            "ThrottlingException: Rate exceeded".into(),
        )),
    );
    h.resolver
        .insert("tok-legacy", Err(ResolveError::Incomplete));
    let throttled = handle(
        &h.state,
        with_body("x-amzn-marketplace-token=tok-throttled"),
    )
    .await;
    assert_eq!(throttled.status_code, 503);
    assert_eq!(body_json(&throttled)["code"], "temporarily-unavailable");
    assert!(
        !body_json(&throttled)["message"]
            .as_str()
            .unwrap()
            .contains("Throttling")
    );

    let legacy = handle(&h.state, with_body("x-amzn-marketplace-token=tok-legacy")).await;
    assert_eq!(legacy.status_code, 500);
    assert_eq!(body_json(&legacy)["code"], "internal-error");

    // The profile write fails: the subscriber row is not touched either.
    h.profiles.fail_next(PortError::Failed {
        operation: "UpdateItem",
        message: "AccessDeniedException: not authorized on arn:aws:dynamodb:secret".into(),
    });
    let denied = handle(&h.state, fixture()).await;
    assert_eq!(denied.status_code, 500);
    assert!(
        !body_json(&denied)["message"]
            .as_str()
            .unwrap()
            .contains("arn:")
    );
    assert!(h.subscribers.rows().is_empty());

    // The cross-Region write is throttled: 503, and a retry completes the registration.
    h.subscribers.fail_next(
        StoreOp::SubscriberAddRegisteredRegion,
        PortError::Transient {
            operation: "UpdateItem",
            message: "ProvisionedThroughputExceededException".into(),
        },
    );
    let throttled = handle(&h.state, fixture()).await;
    assert_eq!(throttled.status_code, 503);
    let retried = handle(&h.state, fixture()).await;
    assert_eq!(retried.status_code, 200);
    assert_eq!(h.subscribers.rows()[0].registered_regions, ["us-west-2"]);
}

#[test]
fn unset_customer_profile_table_fails_loud_per_request() {
    let h = harness_with(config(None));
    let (response, logs) = capture_logs(handle(&h.state, fixture()));
    assert_eq!(response.status_code, 500);
    let body = body_json(&response);
    assert_eq!(body["code"], "registration-store-not-configured");
    assert_eq!(body["message"], "Registration store not configured");
    assert!(
        logs.contains("\"message\":\"CUSTOMER_PROFILE_TABLE not configured\""),
        "{logs}"
    );
    assert!(logs.contains("ERROR"), "{logs}");
    // Nothing was resolved or written.
    assert_eq!(h.resolver.calls(), 0);
    assert!(h.subscribers.rows().is_empty());
}

#[test]
fn neither_the_token_nor_form_values_are_ever_logged() {
    let h = harness();
    h.resolver
        .insert("tok-expired-secret", Err(ResolveError::ExpiredToken));
    let requests = vec![
        fixture(),
        with_body("x-amzn-marketplace-token=tok-expired-secret&companyName=Example+Corp"),
        fulfillment(Some("x-amzn-marketplace-token=tok-valid%2B%2F%3D")),
        with_body(&format!(
            "x-amzn-marketplace-token=tok-valid%2B%2F%3D&companyName={}",
            "Example".repeat(200)
        )),
    ];
    let (_, logs) = capture_logs(async {
        for request in requests {
            handle(&h.state, request).await;
        }
    });
    assert!(logs.contains("buyer registered"), "{logs}");
    for secret in [
        "tok-valid",
        "tok-expired-secret",
        "Example Corp",
        "ExampleExample",
        "jane@example.com",
        "hunter2",
    ] {
        assert!(
            !logs.contains(secret),
            "{secret:?} leaked into the logs:\n{logs}"
        );
    }
}

#[tokio::test]
async fn fulfillment_redirects_with_the_token_in_the_fragment() {
    let h = harness();
    let response = handle(
        &h.state,
        fulfillment(Some("x-amzn-marketplace-token=tok+with%2Fodd%3Dchars%26more&x-amzn-marketplace-offer-type=free-trial")),
    )
    .await;
    assert_eq!(response.status_code, 303);
    assert_eq!(
        header(&response, "location"),
        "https://register.example.com/index.html#token=tok+with%2Fodd%3Dchars%26more"
    );
    assert_eq!(header(&response, "referrer-policy"), "no-referrer");
    assert_security_headers(&response);
    // The redirect resolves and stores nothing: the page posts to /register.
    assert_eq!(h.resolver.calls(), 0);
    assert!(h.profiles.all().is_empty());

    let multipart = "--m\r\nContent-Disposition: form-data; name=\"x-amzn-marketplace-token\"\r\n\r\nabc\r\n--m--\r\n";
    let mut request = fulfillment(Some(
        &base64::engine::general_purpose::STANDARD.encode(multipart),
    ));
    request.is_base64_encoded = true;
    request.headers.insert(
        "content-type",
        HeaderValue::from_static("multipart/form-data; boundary=m"),
    );
    let response = handle(&h.state, request).await;
    assert_eq!(
        header(&response, "location"),
        "https://register.example.com/index.html#token=abc"
    );
}

#[tokio::test]
async fn fulfillment_without_a_token_sends_the_buyer_to_the_page_with_an_error() {
    let h = harness();
    for request in [
        fulfillment(None),
        fulfillment(Some("x-amzn-marketplace-offer-type=free-trial")),
        {
            let mut r = fulfillment(None);
            r.http_method = Method::GET;
            r
        },
    ] {
        let response = handle(&h.state, request).await;
        assert_eq!(response.status_code, 303);
        assert_eq!(
            header(&response, "location"),
            "https://register.example.com/index.html#error=missing-token"
        );
    }
    let too_long = format!("x-amzn-marketplace-token={}", "t".repeat(5000));
    let response = handle(&h.state, fulfillment(Some(&too_long))).await;
    assert_eq!(
        header(&response, "location"),
        "https://register.example.com/index.html#error=invalid-token"
    );
    // Fulfillment does not need the profile table: it works even when it is unset.
    let unconfigured = harness_with(config(None));
    let response = handle(
        &unconfigured.state,
        fulfillment(Some("x-amzn-marketplace-token=a")),
    )
    .await;
    assert_eq!(response.status_code, 303);
}

#[tokio::test]
async fn cors_preflight_only_for_the_page_origin() {
    let h = harness();
    let mut preflight = fixture();
    preflight.http_method = Method::OPTIONS;
    preflight.body = None;
    let response = handle(&h.state, preflight.clone()).await;
    assert_eq!(response.status_code, 204);
    assert_eq!(
        header(&response, "access-control-allow-origin"),
        "https://register.example.com"
    );
    assert_eq!(
        header(&response, "access-control-allow-methods"),
        "POST, OPTIONS"
    );
    assert_eq!(header(&response, "vary"), "Origin");

    preflight
        .headers
        .insert("origin", HeaderValue::from_static("https://evil.example"));
    let response = handle(&h.state, preflight).await;
    assert_eq!(response.status_code, 403);
}

#[tokio::test]
async fn unknown_routes_and_methods() {
    let h = harness();
    let mut request = fixture();
    request.resource = Some("/admin".into());
    request.path = Some("/admin".into());
    let response = handle(&h.state, request).await;
    assert_eq!(response.status_code, 404);
    assert_eq!(body_json(&response)["code"], "not-found");

    let mut request = fixture();
    request.http_method = Method::DELETE;
    let response = handle(&h.state, request).await;
    assert_eq!(response.status_code, 405);
    assert_eq!(header(&response, "allow"), "POST, OPTIONS");

    // A custom domain's base path in front of the resource still routes.
    let mut request = fixture();
    request.resource = Some("/{proxy+}".into());
    request.path = Some("/v1/register/".into());
    assert_eq!(handle(&h.state, request).await.status_code, 200);
}

#[tokio::test]
async fn lambda_entry_point_takes_the_fixture_event() {
    let h = harness();
    let event = LambdaEvent::new(fixture(), lambda_runtime::Context::default());
    let response = handler(&h.state, event).await.unwrap();
    assert_eq!(response.status_code, 200);
}

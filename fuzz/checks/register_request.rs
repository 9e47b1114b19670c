//! Target `register_request`: a whole API Gateway proxy request through the register
//! Lambda's handler ([`awsmp_register::handle`]) over the in-memory ports: route,
//! method, `Origin`, `Content-Type`, base64 flag and body all come from the input.
//! The resolver knows one token ([`TOKEN`]), so the registration path is reachable.
//!
//! Input layout: byte 0 picks the route (bits 0..=1, one choice reading the path from
//! the first input line), whether the `resource` is set (bit 2), and the `Origin`
//! (bits 3..=4); byte 1 picks the method (bits 0..=2); byte 2 is the form flag byte of
//! [`super::register_form`]; then the body.
//!
//! Properties: nothing panics; the answer is 200 (registered), 204 (preflight), 303
//! (the fulfillment redirect) or a 4xx, never a 5xx (the in-memory stores do not
//! fail), and every JSON answer carries a `code`.

use std::sync::Arc;

use aws_lambda_events::apigw::ApiGatewayProxyRequest;
use aws_lambda_events::encodings::Body;
use aws_lambda_events::http::{HeaderValue, Method};
use awsmp_core::clock::ManualClock;
use awsmp_core::memory::{MemoryCustomerResolver, MemoryProfileStore, MemorySubscriberStore};
use awsmp_core::ports::{ProfileStore, ResolvedCustomer};
use awsmp_register::{Config, State, handle};

use super::input::Reader;
use super::register_form::content_type;
use super::{ACCOUNT, LICENSE, PRODUCT};

/// The one token the resolver knows.
pub const TOKEN: &str = "tok-valid+/=";
/// `ALLOWED_ORIGIN` of the checks.
pub const ORIGIN: &str = "https://register.example.com";

fn config() -> Config {
    let vars = [
        ("PRODUCT_CODE", PRODUCT),
        ("SUBSCRIBERS_TABLE", "awsmp-subscribers-fuzz"),
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
        ("ALLOWED_ORIGIN", ORIGIN),
        ("AWS_REGION", "us-west-2"),
        ("STAGE", "fuzz"),
        (
            "CUSTOMER_PROFILE_TABLE",
            "awsmp-prod-abc123-customer-profile",
        ),
    ];
    Config::from_lookup(&|k| {
        vars.iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.to_string())
    })
    .expect("the fixed register configuration is valid")
}

fn state() -> State {
    let resolver = MemoryCustomerResolver::new();
    resolver.insert(
        TOKEN,
        Ok(ResolvedCustomer {
            license_arn: LICENSE.into(),
            customer_aws_account_id: ACCOUNT.into(),
            product_code: PRODUCT.into(),
        }),
    );
    State {
        config: Arc::new(config()),
        resolver: Arc::new(resolver),
        subscribers: Arc::new(MemorySubscriberStore::new()),
        profiles: Some(Arc::new(MemoryProfileStore::new()) as Arc<dyn ProfileStore>),
        clock: Arc::new(ManualClock::new(super::now())),
        metrics: Arc::new(awsmp_core::memory::RecordingMetrics::new()),
    }
}

/// Checks one request.
pub fn check(data: &[u8]) {
    let mut reader = Reader::new(data);
    let routing = reader.byte();
    let method = reader.byte();
    let flags = reader.byte();
    let path = match routing & 0b11 {
        0 => "/register".to_string(),
        1 => "/fulfillment".to_string(),
        2 => "/prod/register/".to_string(),
        _ => reader.line(),
    };
    let content_type = content_type(flags, &mut reader);
    let mut request = ApiGatewayProxyRequest::default();
    request.path = Some(path.clone());
    request.resource = (routing & 0b100 != 0).then(|| path.clone());
    request.http_method = match method & 0b111 {
        0 | 5 => Method::POST,
        1 => Method::OPTIONS,
        2 => Method::GET,
        3 => Method::PUT,
        4 => Method::DELETE,
        _ => Method::HEAD,
    };
    let origin = match (routing >> 3) & 0b11 {
        0 => None,
        1 => Some(ORIGIN.to_string()),
        2 => Some("https://evil.example.com".to_string()),
        _ => Some(reader.line()),
    };
    for (name, value) in [("content-type", content_type), ("origin", origin)] {
        // A header value API Gateway could not have delivered is simply absent.
        if let Some(value) = value.and_then(|v| HeaderValue::from_str(&v).ok()) {
            request.headers.insert(name, value);
        }
    }
    request.is_base64_encoded = flags & 1 != 0;
    let body = reader.rest();
    request.body = (flags & 0x80 == 0).then(|| String::from_utf8_lossy(body).into_owned());

    let response = super::block_on(handle(&state(), request));
    let status = response.status_code;
    assert!(
        matches!(status, 200 | 204 | 303 | 400..=499),
        "answered {status}: {response:?}"
    );
    if let Some(Body::Text(text)) = &response.body {
        let json: serde_json::Value =
            serde_json::from_str(text).expect("every register answer body is JSON");
        assert!(json["code"].is_string(), "{json}");
    }
}

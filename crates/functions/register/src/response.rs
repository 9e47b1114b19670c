//! Building the proxy responses: JSON answers, the fulfillment redirect and the CORS
//! preflight, each with the same security headers (no caching, no sniffing, no
//! framing, HSTS, no referrer).

use aws_lambda_events::apigw::ApiGatewayProxyResponse;
use aws_lambda_events::encodings::Body;
use aws_lambda_events::http::header::{HeaderName, HeaderValue};
use serde_json::Value;

/// The headers every response carries.
pub const SECURITY_HEADERS: &[(&str, &str)] = &[
    ("cache-control", "no-store"),
    ("x-content-type-options", "nosniff"),
    ("x-frame-options", "DENY"),
    (
        "strict-transport-security",
        "max-age=63072000; includeSubDomains",
    ),
    ("referrer-policy", "no-referrer"),
    (
        "content-security-policy",
        "default-src 'none'; frame-ancestors 'none'",
    ),
];

/// How long a browser may cache the CORS preflight answer, in seconds.
pub const PREFLIGHT_MAX_AGE_SECONDS: u32 = 600;

fn base(status: u16) -> ApiGatewayProxyResponse {
    let mut response = ApiGatewayProxyResponse::default();
    response.status_code = i64::from(status);
    for (name, value) in SECURITY_HEADERS {
        response.headers.insert(
            HeaderName::from_static(name),
            HeaderValue::from_static(value),
        );
    }
    response
}

/// Adds the CORS headers naming the one allowed origin (never `*`, never reflected).
fn allow_origin(response: &mut ApiGatewayProxyResponse, allowed_origin: &str) {
    if let Ok(origin) = HeaderValue::from_str(allowed_origin) {
        response
            .headers
            .insert("access-control-allow-origin", origin);
    }
    response
        .headers
        .insert("vary", HeaderValue::from_static("Origin"));
}

/// A JSON answer with CORS for `allowed_origin`.
pub fn json(status: u16, body: &Value, allowed_origin: &str) -> ApiGatewayProxyResponse {
    let mut response = base(status);
    response.headers.insert(
        "content-type",
        HeaderValue::from_static("application/json; charset=utf-8"),
    );
    allow_origin(&mut response, allowed_origin);
    response.body = Some(Body::Text(body.to_string()));
    response
}

/// `303 See Other` to `location` (which may carry the token in its fragment: the
/// no-referrer policy keeps the fulfillment URL out of the page's requests).
pub fn see_other(location: &str) -> ApiGatewayProxyResponse {
    let mut response = base(303);
    match HeaderValue::from_str(location) {
        Ok(value) => {
            response.headers.insert("location", value);
        }
        // A Url always serializes to valid header text; this arm keeps the function total.
        Err(_) => {
            response.status_code = 500;
        }
    }
    response
}

/// The CORS preflight answer for an allowed origin.
pub fn preflight(allowed_origin: &str) -> ApiGatewayProxyResponse {
    let mut response = base(204);
    allow_origin(&mut response, allowed_origin);
    response.headers.insert(
        "access-control-allow-methods",
        HeaderValue::from_static("POST, OPTIONS"),
    );
    response.headers.insert(
        "access-control-allow-headers",
        HeaderValue::from_static("Content-Type"),
    );
    if let Ok(age) = HeaderValue::from_str(&PREFLIGHT_MAX_AGE_SECONDS.to_string()) {
        response.headers.insert("access-control-max-age", age);
    }
    response
}

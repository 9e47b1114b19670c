//! CORS for the registration page's one origin (`ALLOWED_ORIGIN`): the headers every
//! JSON answer of `/register` carries, and the preflight answer. The answers themselves,
//! with their security headers, are the shared skeleton's ([`awsmp_lambda::http`]).

use aws_lambda_events::apigw::ApiGatewayProxyResponse;
use aws_lambda_events::http::header::HeaderValue;

/// How long a browser may cache the CORS preflight answer, in seconds.
pub const PREFLIGHT_MAX_AGE_SECONDS: u32 = 600;

/// `response` with the CORS headers naming the one allowed origin (never `*`, never
/// reflected).
pub fn allow_origin(
    mut response: ApiGatewayProxyResponse,
    allowed_origin: &str,
) -> ApiGatewayProxyResponse {
    if let Ok(origin) = HeaderValue::from_str(allowed_origin) {
        response
            .headers
            .insert("access-control-allow-origin", origin);
    }
    response
        .headers
        .insert("vary", HeaderValue::from_static("Origin"));
    response
}

/// The CORS preflight answer for an allowed origin.
pub fn preflight(allowed_origin: &str) -> ApiGatewayProxyResponse {
    let mut response = allow_origin(awsmp_lambda::http::response(204), allowed_origin);
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

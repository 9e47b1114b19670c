//! The HTTP skeleton of the functions behind API Gateway (register, usage-api): the
//! route of a proxy request (method and path, path parameters, whatever base path a
//! custom domain puts in front), its headers (by name, in any case), its body (decoded
//! from base64 when API Gateway flagged it), percent-decoding of paths and forms, and
//! the answers: every one starts from [`response`], which puts the one list of
//! [`SECURITY_HEADERS`] on it, and every error is the same JSON `{"code", "message"}`
//! ([`error`]).

use aws_lambda_events::apigw::{ApiGatewayProxyRequest, ApiGatewayProxyResponse};
use aws_lambda_events::encodings::Body;
use aws_lambda_events::http::Method;
use aws_lambda_events::http::header::{self, HeaderName, HeaderValue};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Map, Value};

/// The headers every answer carries, success or error, JSON or not: no caching, no
/// content sniffing, no framing, HSTS, no referrer (a redirect may carry a token in its
/// URL), and a policy that lets a response load nothing.
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

/// The `content-type` of every JSON answer.
pub const JSON_CONTENT_TYPE: &str = "application/json; charset=utf-8";

/// One route of a function: which requests it answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route<K> {
    /// What the function calls the route (what [`route`] hands back).
    pub key: K,
    /// Its path, `/`-separated literal segments and `{name}` parameters (`/usage/events/{id}`).
    /// It matches the end of the request's path, so a base path in front does not matter.
    pub pattern: &'static str,
    /// The methods it answers, in the order an `allow` header lists them.
    pub methods: &'static [Method],
}

/// The parameters a route's pattern bound, each decoded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PathParams(Vec<(&'static str, String)>);

impl PathParams {
    /// The value of the parameter `name` (`id` for `{id}`).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Where a request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Routed<K> {
    /// A route answers the path with this method.
    Found {
        /// The route's key.
        key: K,
        /// Its path parameters.
        params: PathParams,
    },
    /// Routes answer the path, none with this method: these are the ones they answer.
    MethodNotAllowed {
        /// The methods the path's routes answer (the `allow` header, [`set_allow`]).
        allow: Vec<Method>,
    },
    /// No route answers the path.
    NotFound {
        /// The path that was routed on ([`route_path`]).
        path: String,
    },
}

/// The path a request is routed on: the API Gateway resource when it is a literal path
/// (REST: the API's own resource, whatever base path the custom domain adds), else the
/// request path (a resource with parameters, `/{proxy+}`, or none).
pub fn route_path(request: &ApiGatewayProxyRequest) -> &str {
    request
        .resource
        .as_deref()
        .filter(|resource| !resource.contains('{'))
        .or(request.path.as_deref())
        .unwrap_or("/")
}

/// Routes `request` through `routes`, in order: the first route whose pattern matches
/// the end of the path and that answers the method. A parameter's value is the one API
/// Gateway decoded (`pathParameters`), else the path segment percent-decoded.
pub fn route<K: Copy>(routes: &[Route<K>], request: &ApiGatewayProxyRequest) -> Routed<K> {
    let path = route_path(request);
    let segments: Vec<&str> = path.trim_end_matches('/').split('/').collect();
    let mut allow: Vec<Method> = Vec::new();
    for route in routes {
        let Some(params) = match_pattern(route.pattern, &segments, request) else {
            continue;
        };
        if route.methods.contains(&request.http_method) {
            return Routed::Found {
                key: route.key,
                params,
            };
        }
        for method in route.methods {
            if !allow.contains(method) {
                allow.push(method.clone());
            }
        }
    }
    if allow.is_empty() {
        Routed::NotFound {
            path: path.to_string(),
        }
    } else {
        Routed::MethodNotAllowed { allow }
    }
}

/// The parameters `pattern` binds on the last segments of the path, if it matches.
fn match_pattern(
    pattern: &'static str,
    segments: &[&str],
    request: &ApiGatewayProxyRequest,
) -> Option<PathParams> {
    let wanted: Vec<&'static str> = pattern.trim_matches('/').split('/').collect();
    let start = segments.len().checked_sub(wanted.len())?;
    let mut params = Vec::new();
    for (want, got) in wanted.iter().zip(&segments[start..]) {
        match want.strip_prefix('{').and_then(|w| w.strip_suffix('}')) {
            Some(name) => {
                let value = request
                    .path_parameters
                    .get(name)
                    .cloned()
                    .unwrap_or_else(|| decode_path_segment(got));
                params.push((name, value));
            }
            None if want == got => {}
            None => return None,
        }
    }
    Some(PathParams(params))
}

/// The value of the request header `name`, whatever the case of either (header names
/// are case-insensitive); `None` if absent or not visible ASCII.
pub fn header<'a>(request: &'a ApiGatewayProxyRequest, name: &str) -> Option<&'a str> {
    request.headers.get(name).and_then(|v| v.to_str().ok())
}

/// Why a request's body cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BodyError {
    /// The body, decoded, is larger than the caller's limit.
    #[error("the body is larger than {limit} bytes")]
    TooLarge {
        /// The limit, in decoded bytes.
        limit: usize,
    },
    /// `isBase64Encoded` is set but the body is not base64.
    #[error("the body is not valid base64: {0}")]
    NotBase64(#[from] base64::DecodeError),
}

/// The body's bytes: the text as API Gateway delivered it (UTF-8), or, when it flagged
/// the body base64 (a binary media type), the decoded bytes. No body is no bytes. With
/// a `limit`, a larger body is refused, a base64 one before it is decoded.
pub fn body(request: &ApiGatewayProxyRequest, limit: Option<usize>) -> Result<Vec<u8>, BodyError> {
    decode_body(request.body.as_deref(), request.is_base64_encoded, limit)
}

/// [`body`] on the event's `body` and `isBase64Encoded` fields themselves. Whitespace
/// around base64 text is ignored.
pub fn decode_body(
    body: Option<&str>,
    is_base64: bool,
    limit: Option<usize>,
) -> Result<Vec<u8>, BodyError> {
    let raw = match body {
        None => Vec::new(),
        Some(text) if is_base64 => {
            // base64 is 4/3 of the bytes: refuse before decoding anything huge.
            if let Some(limit) = limit
                && text.len() > limit.div_ceil(3) * 4 + 4
            {
                return Err(BodyError::TooLarge { limit });
            }
            BASE64.decode(text.trim().as_bytes())?
        }
        Some(text) => text.as_bytes().to_vec(),
    };
    match limit {
        Some(limit) if raw.len() > limit => Err(BodyError::TooLarge { limit }),
        _ => Ok(raw),
    }
}

/// A path segment with its `%XX` escapes decoded (`+` stays `+`: this is a path, not a
/// form; a `%` without two hex digits stays as written). A segment whose escapes do not
/// decode to UTF-8 is kept as written.
pub fn decode_path_segment(segment: &str) -> String {
    percent_encoding::percent_decode_str(segment)
        .decode_utf8()
        .map_or_else(|_| segment.to_string(), |decoded| decoded.into_owned())
}

/// A name or value of an `application/x-www-form-urlencoded` body, decoded as browsers
/// encode it: `+` is a space, then `%XX` escapes (a `%` without two hex digits stays
/// as written). The bytes are kept as sent, so the caller decides what text that is not
/// UTF-8 means.
pub fn decode_form_component(input: &[u8]) -> Vec<u8> {
    let spaced: Vec<u8> = input
        .iter()
        .map(|b| if *b == b'+' { b' ' } else { *b })
        .collect();
    percent_encoding::percent_decode(&spaced).collect()
}

/// The start of every answer: `status` with [`SECURITY_HEADERS`]. Every other answer
/// here is built on it, and a function adds its own headers and body to it.
pub fn response(status: u16) -> ApiGatewayProxyResponse {
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

/// A JSON answer: [`response`] with `body` and [`JSON_CONTENT_TYPE`].
pub fn json(status: u16, body: &Value) -> ApiGatewayProxyResponse {
    let mut response = response(status);
    response.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(JSON_CONTENT_TYPE),
    );
    response.body = Some(Body::Text(body.to_string()));
    response
}

/// The error answer every function gives: JSON `{"code", "message"}`.
pub fn error(status: u16, code: &str, message: &str) -> ApiGatewayProxyResponse {
    error_with(status, code, message, &[])
}

/// [`error`] with more fields beside `code` and `message` (which field of a form the
/// error is about, where to go next).
pub fn error_with(
    status: u16,
    code: &str,
    message: &str,
    details: &[(&str, Value)],
) -> ApiGatewayProxyResponse {
    let mut body = Map::new();
    body.insert("code".to_string(), Value::from(code));
    body.insert("message".to_string(), Value::from(message));
    for (name, value) in details {
        body.insert((*name).to_string(), value.clone());
    }
    json(status, &Value::Object(body))
}

/// `303 See Other` to `location`; a location that is no valid header text (never a
/// serialized URL) answers `500` instead, so the function stays total.
pub fn see_other(location: &str) -> ApiGatewayProxyResponse {
    let mut response = response(303);
    match HeaderValue::from_str(location) {
        Ok(value) => {
            response.headers.insert(header::LOCATION, value);
        }
        Err(_) => {
            response.status_code = 500;
        }
    }
    response
}

/// Sets the `allow` header of a `405` answer to `methods` (`POST, OPTIONS`).
pub fn set_allow(response: &mut ApiGatewayProxyResponse, methods: &[Method]) {
    let listed: Vec<&str> = methods.iter().map(Method::as_str).collect();
    if let Ok(value) = HeaderValue::from_str(&listed.join(", ")) {
        response.headers.insert(header::ALLOW, value);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Key {
        Events,
        Event,
        Register,
    }

    const ROUTES: &[Route<Key>] = &[
        Route {
            key: Key::Events,
            pattern: "/usage/events",
            methods: &[Method::POST],
        },
        Route {
            key: Key::Event,
            pattern: "/usage/events/{id}",
            methods: &[Method::GET],
        },
        Route {
            key: Key::Register,
            pattern: "/register",
            methods: &[Method::POST, Method::OPTIONS],
        },
    ];

    fn request(method: Method, path: &str) -> ApiGatewayProxyRequest {
        let mut request = ApiGatewayProxyRequest::default();
        request.http_method = method;
        request.path = Some(path.to_string());
        request
    }

    fn found(routed: Routed<Key>) -> (Key, PathParams) {
        match routed {
            Routed::Found { key, params } => (key, params),
            other => panic!("not found: {other:?}"),
        }
    }

    #[test]
    fn a_path_parameter_is_the_percent_decoded_segment() {
        let arn = "arn%3Aaws%3Alicense-manager%3A%3A123456789012%3Alicense%2Fl-0123";
        let (key, params) = found(route(
            ROUTES,
            &request(Method::GET, &format!("/usage/events/{arn}")),
        ));
        assert_eq!(key, Key::Event);
        assert_eq!(
            params.get("id"),
            Some("arn:aws:license-manager::123456789012:license/l-0123")
        );
        assert_eq!(params.get("other"), None);
    }

    #[test]
    fn a_path_parameter_api_gateway_decoded_is_taken_as_it_is() {
        let mut decoded = request(Method::GET, "/usage/events/a%2Bb");
        decoded
            .path_parameters
            .insert("id".to_string(), "a+b".to_string());
        let (_, params) = found(route(ROUTES, &decoded));
        assert_eq!(params.get("id"), Some("a+b"));
        // Without it, `+` in a path stays `+`; an escape of no UTF-8 stays as written.
        let (_, params) = found(route(
            ROUTES,
            &request(Method::GET, "/usage/events/a+b%20c"),
        ));
        assert_eq!(params.get("id"), Some("a+b c"));
        let (_, params) = found(route(ROUTES, &request(Method::GET, "/usage/events/%FF%zz")));
        assert_eq!(params.get("id"), Some("%FF%zz"));
    }

    #[test]
    fn routes_match_the_end_of_the_path_whatever_base_path_precedes_it() {
        for path in ["/usage/events", "/v1/usage/events/", "usage/events"] {
            assert_eq!(
                found(route(ROUTES, &request(Method::POST, path))).0,
                Key::Events,
                "{path}"
            );
        }
        // A literal resource wins over the path; a resource with parameters does not.
        let mut literal = request(Method::POST, "/prod/v1/register/");
        literal.resource = Some("/register".to_string());
        assert_eq!(found(route(ROUTES, &literal)).0, Key::Register);
        literal.resource = Some("/{proxy+}".to_string());
        assert_eq!(found(route(ROUTES, &literal)).0, Key::Register);
        // One segment too many is another path.
        assert_eq!(
            route(ROUTES, &request(Method::GET, "/usage/events/a/b")),
            Routed::NotFound {
                path: "/usage/events/a/b".to_string()
            }
        );
        assert_eq!(
            route(ROUTES, &ApiGatewayProxyRequest::default()),
            Routed::NotFound {
                path: "/".to_string()
            }
        );
    }

    #[test]
    fn a_known_path_with_another_method_lists_the_methods_it_answers() {
        assert_eq!(
            route(ROUTES, &request(Method::DELETE, "/register")),
            Routed::MethodNotAllowed {
                allow: vec![Method::POST, Method::OPTIONS]
            }
        );
        let mut response = error(405, "MethodNotAllowed", "no");
        set_allow(&mut response, &[Method::POST, Method::OPTIONS]);
        assert_eq!(response.headers["allow"], "POST, OPTIONS");
    }

    #[test]
    fn headers_are_found_whatever_their_case() {
        // As API Gateway sends them, in the case the client wrote.
        let event = json!({
            "httpMethod": "POST",
            "headers": {"Content-Type": "application/json", "X-Amzn-Trace-Id": "Root=1"},
            "requestContext": {"httpMethod": "POST"},
        });
        let request: ApiGatewayProxyRequest = serde_json::from_str(&event.to_string()).unwrap();
        for name in ["content-type", "Content-Type", "CONTENT-TYPE"] {
            assert_eq!(header(&request, name), Some("application/json"), "{name}");
        }
        assert_eq!(header(&request, "x-amzn-trace-id"), Some("Root=1"));
        assert_eq!(header(&request, "origin"), None);
        assert_eq!(header(&request, "not a header name"), None);
    }

    #[test]
    fn a_base64_body_is_decoded_and_a_plain_one_taken_as_its_text() {
        let mut request = request(Method::POST, "/usage/events");
        request.body = Some(BASE64.encode("{\"é\": 1}"));
        request.is_base64_encoded = true;
        assert_eq!(body(&request, None).unwrap(), "{\"é\": 1}".as_bytes());
        request.body = Some(format!(" {}\n", BASE64.encode([0xff, 0x00])));
        assert_eq!(body(&request, None).unwrap(), [0xff, 0x00]);
        request.body = Some("!!!".to_string());
        assert!(matches!(body(&request, None), Err(BodyError::NotBase64(_))));
        request.is_base64_encoded = false;
        assert_eq!(body(&request, None).unwrap(), b"!!!");
        request.body = None;
        assert_eq!(body(&request, Some(0)).unwrap(), b"");
    }

    #[test]
    fn a_body_over_the_limit_is_refused_base64_before_decoding() {
        let too_large = Err(BodyError::TooLarge { limit: 8 });
        assert_eq!(decode_body(Some("123456789"), false, Some(8)), too_large);
        assert_eq!(
            decode_body(Some("12345678"), false, Some(8)).unwrap(),
            b"12345678"
        );
        let nine = BASE64.encode("123456789");
        assert_eq!(decode_body(Some(&nine), true, Some(8)), too_large);
        // Far too long to be within the limit: refused without decoding (not base64 at all).
        assert_eq!(
            decode_body(Some(&"!".repeat(100)), true, Some(8)),
            too_large
        );
    }

    #[test]
    fn form_components_decode_as_browsers_encode() {
        assert_eq!(decode_form_component(b"1+2%2B3"), b"1 2+3");
        assert_eq!(decode_form_component(b"%zz%4"), b"%zz%4");
        assert_eq!(decode_form_component(b"%C3%A9"), "é".as_bytes());
        assert_eq!(decode_form_component(b"%FF"), [0xff]);
        assert_eq!(decode_form_component(b"% 5+"), b"% 5 ");
    }

    fn assert_security_headers(response: &ApiGatewayProxyResponse) {
        assert_eq!(SECURITY_HEADERS.len(), 6);
        for (name, value) in SECURITY_HEADERS {
            assert_eq!(
                response.headers.get(*name).map(|v| v.to_str().unwrap()),
                Some(*value),
                "{name} on a {} answer",
                response.status_code
            );
        }
    }

    #[test]
    fn every_answer_carries_the_security_headers_success_or_error() {
        let ok = json(200, &json!({"results": []}));
        assert_security_headers(&ok);
        assert_eq!(ok.headers["content-type"], JSON_CONTENT_TYPE);

        let refused = error(404, "NotFound", "nothing here");
        assert_security_headers(&refused);
        assert_eq!(refused.status_code, 404);
        assert_eq!(refused.headers["content-type"], JSON_CONTENT_TYPE);
        let Some(Body::Text(text)) = &refused.body else {
            panic!("{refused:?}")
        };
        assert_eq!(
            serde_json::from_str::<Value>(text).unwrap(),
            json!({"code": "NotFound", "message": "nothing here"})
        );

        let detailed = error_with(400, "bad", "fix it", &[("field", json!("companyName"))]);
        assert_security_headers(&detailed);
        let Some(Body::Text(text)) = &detailed.body else {
            panic!("{detailed:?}")
        };
        assert_eq!(
            serde_json::from_str::<Value>(text).unwrap(),
            json!({"code": "bad", "message": "fix it", "field": "companyName"})
        );

        let redirect = see_other("https://example.com/page#token=a%2Bb");
        assert_security_headers(&redirect);
        assert_eq!(
            (redirect.status_code, &redirect.headers["location"]),
            (
                303,
                &HeaderValue::from_static("https://example.com/page#token=a%2Bb")
            )
        );
        let broken = see_other("line\nbreak");
        assert_security_headers(&broken);
        assert_eq!(broken.status_code, 500);

        assert_security_headers(&response(204));
    }
}

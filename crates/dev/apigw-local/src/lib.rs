//! A local stand-in for API Gateway REST APIs (v1 proxy integration): turns an HTTP
//! request into the [`ApiGatewayProxyRequest`] a Lambda handler receives, and the
//! handler's [`ApiGatewayProxyResponse`] back into HTTP, so the real handler code runs
//! behind a local port. Also serves a folder of static files (the registration page).
//! Used by the browser tests and by the local stack (`awsmp local up`).
//!
//! Routes that API Gateway authorizes with IAM (SigV4, service `execute-api`) are served
//! behind [`require_sigv4`]: it recomputes each request's SigV4 signature with one
//! configured credential ([`Sigv4Verifier`]) and refuses unsigned or badly signed
//! requests with API Gateway's 403, so there is no unauthenticated mode locally either
//! (the `sigv4` module's documentation lists what is canonicalized). A verified caller
//! shows in the event's `requestContext.identity` (`accessKey`, `accountId`, `userArn`).
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use aws_lambda_events::apigw::{ApiGatewayProxyRequest, ApiGatewayProxyResponse};
//! let api = awsmp_apigw_local::lambda_router(|request: ApiGatewayProxyRequest| async move {
//!     let mut response = ApiGatewayProxyResponse::default();
//!     response.status_code = 200;
//!     response.body = request.path.map(Into::into);
//!     Ok::<_, std::convert::Infallible>(response)
//! });
//! let server = awsmp_apigw_local::serve(api, awsmp_apigw_local::LOOPBACK_ANY_PORT).await?;
//! println!("handler listening on {}", server.url());
//! # Ok(()) }
//! ```
//!
//! The same handler behind a SigV4 check (what `curl --aws-sigv4
//! "aws:amz:us-east-1:execute-api" --user AKIDLOCAL:local-secret` passes):
//!
//! ```no_run
//! # async fn demo(api: axum::Router) -> std::io::Result<()> {
//! use awsmp_apigw_local::{LOOPBACK_ANY_PORT, Sigv4Verifier, require_sigv4, serve};
//! let verifier = Sigv4Verifier::new("AKIDLOCAL", "local-secret", "us-east-1");
//! let server = serve(require_sigv4(api, verifier), LOOPBACK_ANY_PORT).await?;
//! # Ok(()) }
//! ```

mod sigv4;

pub use sigv4::{
    DEFAULT_SIGV4_SERVICE, LOCAL_ACCOUNT_ID, LOCAL_USER_ARN, MAX_SIGV4_CLOCK_SKEW, Sigv4Error,
    Sigv4Identity, Sigv4Verifier, require_sigv4,
};

use std::collections::HashMap;
use std::fmt::Display;
use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use aws_lambda_events::apigw::{
    ApiGatewayProxyRequest, ApiGatewayProxyRequestContext, ApiGatewayProxyResponse,
};
use aws_lambda_events::encodings::Body as LambdaBody;
use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use axum::http::header::{CONTENT_TYPE, HeaderName};
use axum::http::{HeaderMap, HeaderValue, Response, StatusCode};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use query_map::QueryMap;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tower_http::services::ServeDir;

/// API Gateway's maximum request payload (10 MB); larger bodies are refused with 413.
pub const MAX_PAYLOAD_BYTES: usize = 10 * 1024 * 1024;

/// Content types delivered to the handler base64-encoded (`isBase64Encoded: true`), as a
/// REST API with these `BinaryMediaTypes` does. Multipart form posts are among them so
/// handlers are exercised on the base64 path they meet in AWS.
pub const DEFAULT_BINARY_MEDIA_TYPES: &[&str] =
    &["multipart/form-data", "application/octet-stream", "image/*"];

/// The stage name put in `requestContext.stage`.
pub const LOCAL_STAGE: &str = "local";

/// `127.0.0.1:0`: bind a free loopback port.
pub const LOOPBACK_ANY_PORT: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0));

/// A request that cannot be turned into a proxy event.
#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    /// The body was larger than [`MAX_PAYLOAD_BYTES`] or could not be read.
    #[error("request body unreadable or larger than {MAX_PAYLOAD_BYTES} bytes: {0}")]
    Body(String),
}

/// Builds the REST v1 proxy event for `request`, as API Gateway would for a resource
/// whose path equals the request path. The body is base64-encoded when its content
/// type matches one of `binary_media_types` (`type/*` wildcards allowed) or is not UTF-8.
/// A [`Sigv4Identity`] in the request's extensions (put there by [`require_sigv4`])
/// becomes `requestContext.identity`'s `accessKey`, `accountId` and `userArn`.
pub async fn to_proxy_request(
    request: Request,
    binary_media_types: &[&str],
) -> Result<ApiGatewayProxyRequest, ConvertError> {
    let (parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, MAX_PAYLOAD_BYTES)
        .await
        .map_err(|e| ConvertError::Body(e.to_string()))?;
    let source_ip = parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(addr)| addr.ip().to_string());
    let path = parts.uri.path().to_string();
    let query = parse_query(parts.uri.query().unwrap_or(""));

    let mut event = ApiGatewayProxyRequest::default();
    event.resource = Some(path.clone());
    event.path = Some(path.clone());
    event.http_method = parts.method.clone();
    event.headers = last_value_per_name(&parts.headers);
    event.multi_value_headers = parts.headers.clone();
    event.query_string_parameters = QueryMap::from(query.clone());
    event.multi_value_query_string_parameters = QueryMap::from(query);

    let content_type = parts
        .headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !bytes.is_empty() {
        let text = std::str::from_utf8(&bytes).ok();
        match text {
            Some(text) if !is_binary_media_type(content_type, binary_media_types) => {
                event.body = Some(text.to_string());
                event.is_base64_encoded = false;
            }
            _ => {
                event.body = Some(BASE64.encode(&bytes));
                event.is_base64_encoded = true;
            }
        }
    }

    let mut context = ApiGatewayProxyRequestContext::default();
    context.stage = Some(LOCAL_STAGE.to_string());
    context.request_id = Some(next_request_id());
    context.http_method = parts.method;
    context.path = Some(format!("/{LOCAL_STAGE}{path}"));
    context.resource_path = Some(path);
    context.protocol = Some(format!("{:?}", parts.version));
    context.request_time_epoch = epoch_millis();
    context.identity.source_ip = source_ip;
    context.identity.user_agent = parts
        .headers
        .get(axum::http::header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    if let Some(identity) = parts.extensions.get::<Sigv4Identity>() {
        context.identity.access_key = Some(identity.access_key_id.clone());
        context.identity.account_id = Some(identity.account_id.clone());
        context.identity.user_arn = Some(identity.user_arn.clone());
    }
    event.request_context = context;
    Ok(event)
}

/// Turns a handler's proxy response into HTTP. A status outside 100..=599, or a body
/// flagged base64 that does not decode, becomes API Gateway's own
/// `502 {"message": "Internal server error"}` (what a malformed Lambda response gets).
pub fn to_http_response(response: ApiGatewayProxyResponse) -> Response<Body> {
    let status = u16::try_from(response.status_code)
        .ok()
        .and_then(|code| StatusCode::from_u16(code).ok());
    let Some(status) = status else {
        tracing::error!(
            status_code = response.status_code,
            "handler returned an invalid status"
        );
        return gateway_error();
    };
    let body = match response.body {
        None => Vec::new(),
        Some(LambdaBody::Text(text)) if response.is_base64_encoded => {
            match BASE64.decode(text.as_bytes()) {
                Ok(bytes) => bytes,
                Err(e) => {
                    tracing::error!(error = %e, "handler flagged a body base64 that does not decode");
                    return gateway_error();
                }
            }
        }
        // Text, and any body kind added later: its bytes as they are.
        Some(other) => other.as_ref().to_vec(),
    };
    let mut http = Response::new(Body::from(body));
    *http.status_mut() = status;
    // API Gateway merges both maps; a single-valued header overrides the multi-valued one.
    let headers = http.headers_mut();
    for (name, value) in &response.multi_value_headers {
        headers.append(name.clone(), value.clone());
    }
    for (name, value) in &response.headers {
        headers.insert(name.clone(), value.clone());
    }
    http
}

/// A router that hands every request (any method, any path) to `handler` as a proxy
/// event, with [`DEFAULT_BINARY_MEDIA_TYPES`]. A handler error becomes
/// `502 {"message": "Internal server error"}`, as in API Gateway when the function fails.
pub fn lambda_router<F, Fut, E>(handler: F) -> Router
where
    F: Fn(ApiGatewayProxyRequest) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<ApiGatewayProxyResponse, E>> + Send + 'static,
    E: Display + Send + 'static,
{
    Router::new().fallback(move |request: Request| {
        let handler = handler.clone();
        async move {
            let event = match to_proxy_request(request, DEFAULT_BINARY_MEDIA_TYPES).await {
                Ok(event) => event,
                Err(e) => {
                    tracing::warn!(error = %e, "request refused before the handler");
                    return json_message(StatusCode::PAYLOAD_TOO_LARGE, "Request Too Long");
                }
            };
            match handler(event).await {
                Ok(response) => to_http_response(response),
                Err(e) => {
                    tracing::error!(error = %e, "handler failed");
                    gateway_error()
                }
            }
        }
    })
}

/// A router serving the files under `dir` (`index.html` for directories, 404 for the
/// rest), as S3 + CloudFront serve the registration page. Add routes in front of it
/// to override single files (e.g. a test's own `config.js`).
pub fn serve_static(dir: impl AsRef<Path>) -> Router {
    Router::new()
        .fallback_service(ServeDir::new(dir.as_ref()).append_index_html_on_directories(true))
}

/// The paths the page's CloudFront distribution routes to the register API (its
/// `CacheBehaviors` in template-main.yaml); everything else is the page's files.
pub const PAGE_API_PATHS: [&str; 2] = ["/register", "/fulfillment"];

/// The registration page's origin as its distribution serves it: `api` at each of
/// [`PAGE_API_PATHS`], the files under `dir` for the rest. Add routes in front of it to
/// override single files (the local stack's `config.json`).
pub fn page_origin(dir: impl AsRef<Path>, api: Router) -> Router {
    PAGE_API_PATHS
        .iter()
        .fold(serve_static(dir), |router, path| {
            router.route_service(path, api.clone().into_service())
        })
}

/// A router served on a local port; stops serving when dropped.
#[derive(Debug)]
pub struct LocalServer {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl LocalServer {
    /// The bound address (the real port when bound to port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT` (no trailing slash).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for LocalServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Binds `addr` (use [`LOOPBACK_ANY_PORT`] for a free port) and serves `router` on a
/// background task, with the peer address available to [`to_proxy_request`].
pub async fn serve(router: Router, addr: SocketAddr) -> std::io::Result<LocalServer> {
    serve_on(TcpListener::bind(addr).await?, router)
}

/// Serves `router` on an already bound `listener`: bind first when an address must be
/// known before anything serves on it (the register function's page URL and allowed
/// origin name the page's own origin).
pub fn serve_on(listener: TcpListener, router: Router) -> std::io::Result<LocalServer> {
    let addr = listener.local_addr()?;
    let service = router.into_make_service_with_connect_info::<SocketAddr>();
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, service).await {
            tracing::error!(error = %e, %addr, "local server stopped");
        }
    });
    Ok(LocalServer { addr, task })
}

fn is_binary_media_type(content_type: &str, binary_media_types: &[&str]) -> bool {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    binary_media_types.iter().any(|pattern| {
        let pattern = pattern.to_ascii_lowercase();
        match pattern.strip_suffix("/*") {
            Some(major) => essence.split_once('/').is_some_and(|(m, _)| m == major),
            None => essence == pattern,
        }
    })
}

fn parse_query(query: &str) -> HashMap<String, Vec<String>> {
    let mut map: HashMap<String, Vec<String>> = HashMap::new();
    for (key, value) in url::form_urlencoded::parse(query.as_bytes()) {
        map.entry(key.into_owned())
            .or_default()
            .push(value.into_owned());
    }
    map
}

fn last_value_per_name(headers: &HeaderMap) -> HeaderMap {
    let mut single = HeaderMap::new();
    for name in headers.keys() {
        if let Some(last) = headers.get_all(name).iter().next_back() {
            single.insert(name.clone(), last.clone());
        }
    }
    single
}

fn next_request_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("local-{:x}-{n:08x}", epoch_millis())
}

fn epoch_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

fn json_message(status: StatusCode, message: &str) -> Response<Body> {
    json_error(status, "InternalServerErrorException", message)
}

/// API Gateway's own error response: `{"message": …}` and `x-amzn-ErrorType`.
fn json_error(status: StatusCode, error_type: &'static str, message: &str) -> Response<Body> {
    let body = serde_json::json!({ "message": message }).to_string();
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response.headers_mut().insert(
        HeaderName::from_static("x-amzn-errortype"),
        HeaderValue::from_static(error_type),
    );
    response
}

fn gateway_error() -> Response<Body> {
    json_message(StatusCode::BAD_GATEWAY, "Internal server error")
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use axum::http::Method;

    /// The proxy event of [`request`] with the default binary media types.
    async fn proxy_event(
        method: Method,
        uri: &str,
        content_type: &str,
        body: &'static [u8],
    ) -> ApiGatewayProxyRequest {
        to_proxy_request(
            request(method, uri, content_type, body),
            DEFAULT_BINARY_MEDIA_TYPES,
        )
        .await
        .unwrap()
    }

    /// GET `url`, which must answer.
    async fn get(client: &reqwest::Client, url: String) -> reqwest::Response {
        client.get(url).send().await.unwrap()
    }

    fn request(method: Method, uri: &str, content_type: &str, body: &'static [u8]) -> Request {
        Request::builder()
            .method(method)
            .uri(uri)
            .header(CONTENT_TYPE, content_type)
            .header("x-multi", "one")
            .header("x-multi", "two")
            .body(Body::from(body))
            .unwrap()
    }

    #[tokio::test]
    async fn urlencoded_body_is_text_and_the_event_has_the_rest_v1_shape() {
        let event = proxy_event(
            Method::POST,
            "/register?a=1&a=2&b=x%20y",
            "application/x-www-form-urlencoded",
            b"k=v",
        )
        .await;
        assert_eq!(event.path.as_deref(), Some("/register"));
        assert_eq!(event.resource.as_deref(), Some("/register"));
        assert_eq!(event.http_method, Method::POST);
        assert_eq!(event.body.as_deref(), Some("k=v"));
        assert!(!event.is_base64_encoded);
        assert_eq!(event.headers.get("x-multi").unwrap(), "two");
        assert_eq!(
            event.multi_value_headers.get_all("x-multi").iter().count(),
            2
        );
        assert_eq!(event.query_string_parameters.first("b"), Some("x y"));
        assert_eq!(
            event.multi_value_query_string_parameters.all("a"),
            Some(vec!["1", "2"])
        );
        assert_eq!(event.request_context.stage.as_deref(), Some(LOCAL_STAGE));
        assert!(event.request_context.request_id.is_some());
        // The event serializes as API Gateway sends it (camelCase, isBase64Encoded).
        let json = serde_json::to_value(&event).unwrap();
        assert_eq!(json["httpMethod"], "POST");
        assert_eq!(json["isBase64Encoded"], false);
    }

    #[tokio::test]
    async fn multipart_and_non_utf8_bodies_are_base64() {
        let event = proxy_event(
            Method::POST,
            "/register",
            "multipart/form-data; boundary=xyz",
            b"--xyz--",
        )
        .await;
        assert!(event.is_base64_encoded);
        assert_eq!(BASE64.decode(event.body.unwrap()).unwrap(), b"--xyz--");

        let event = proxy_event(Method::POST, "/x", "text/plain", b"\xff\xfe").await;
        assert!(event.is_base64_encoded);

        let event = proxy_event(Method::POST, "/x", "image/png", b"png").await;
        assert!(event.is_base64_encoded);
    }

    #[tokio::test]
    async fn empty_body_is_absent() {
        let event = proxy_event(Method::GET, "/", "text/plain", b"").await;
        assert_eq!(event.body, None);
    }

    #[test]
    fn response_headers_merge_and_base64_bodies_decode() {
        let mut response = ApiGatewayProxyResponse::default();
        response.status_code = 303;
        response
            .headers
            .insert("location", HeaderValue::from_static("https://example.com/"));
        response
            .multi_value_headers
            .append("set-cookie", HeaderValue::from_static("a=1"));
        response
            .multi_value_headers
            .append("set-cookie", HeaderValue::from_static("b=2"));
        response.body = Some(LambdaBody::Text(BASE64.encode("hello")));
        response.is_base64_encoded = true;
        let http = to_http_response(response);
        assert_eq!(http.status(), StatusCode::SEE_OTHER);
        assert_eq!(
            http.headers().get("location").unwrap(),
            "https://example.com/"
        );
        assert_eq!(http.headers().get_all("set-cookie").iter().count(), 2);
    }

    #[test]
    fn invalid_status_is_a_gateway_error() {
        let mut response = ApiGatewayProxyResponse::default();
        response.status_code = 42;
        assert_eq!(to_http_response(response).status(), StatusCode::BAD_GATEWAY);
    }

    #[test]
    fn binary_media_type_matching() {
        assert!(is_binary_media_type(
            "Multipart/Form-Data; boundary=a",
            &["multipart/form-data"]
        ));
        assert!(is_binary_media_type("image/png", &["image/*"]));
        assert!(!is_binary_media_type(
            "application/json",
            DEFAULT_BINARY_MEDIA_TYPES
        ));
        assert!(!is_binary_media_type("", DEFAULT_BINARY_MEDIA_TYPES));
    }

    #[tokio::test]
    async fn served_handler_and_static_files_answer_over_http() {
        let dir = std::env::temp_dir().join(format!("awsmp-apigw-local-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("index.html"), "<h1>page</h1>").unwrap();

        let api = lambda_router(|request: ApiGatewayProxyRequest| async move {
            if request.path.as_deref() == Some("/fail") {
                return Err("boom");
            }
            let mut response = ApiGatewayProxyResponse::default();
            response.status_code = 201;
            response.body = Some(LambdaBody::Text(format!(
                "{} {} {}",
                request.http_method,
                request.body.unwrap_or_default(),
                request
                    .request_context
                    .identity
                    .source_ip
                    .unwrap_or_default()
            )));
            Ok(response)
        });
        let api = serve(api, LOOPBACK_ANY_PORT).await.unwrap();
        let web = serve(serve_static(&dir), LOOPBACK_ANY_PORT).await.unwrap();
        let client = reqwest::Client::new();

        let answer = client
            .post(format!("{}/echo", api.url()))
            .body("hi")
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 201);
        assert_eq!(answer.text().await.unwrap(), "POST hi 127.0.0.1");

        let failed = get(&client, format!("{}/fail", api.url())).await;
        assert_eq!(failed.status(), 502);
        assert_eq!(
            failed.text().await.unwrap(),
            r#"{"message":"Internal server error"}"#
        );

        let page = get(&client, format!("{}/", web.url())).await;
        assert_eq!(page.status(), 200);
        assert_eq!(page.text().await.unwrap(), "<h1>page</h1>");
        let missing = get(&client, format!("{}/nope.js", web.url())).await;
        assert_eq!(missing.status(), 404);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

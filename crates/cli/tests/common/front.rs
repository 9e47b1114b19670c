//! An HTTP front on moto for what moto does not do: it records every request as it
//! came on the wire (method, path, query, headers), then answers it as a canned AWS
//! answer (a refusal moto cannot produce: IAM, a resource policy, another bucket
//! owner) or forwards it to moto unchanged.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;

/// One request that reached the front.
#[derive(Debug, Clone)]
pub struct Seen {
    /// `GET`, `HEAD`, `POST`, ...
    pub method: String,
    /// The path, as sent.
    pub path: String,
    /// The query string, as sent.
    pub query: String,
    /// Every header, by lower-case name.
    pub headers: BTreeMap<String, String>,
}

impl Seen {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }

    /// The S3 operation of a path-style request (as the client addresses an
    /// emulator), `other` for anything else (a JSON protocol's POST).
    pub fn s3_operation(&self) -> &'static str {
        if self.header("x-amz-target").is_some() {
            return "other";
        }
        let object = self.path.trim_matches('/').contains('/');
        match (self.method.as_str(), object) {
            ("HEAD", false) => "HeadBucket",
            ("GET", false) if self.query.contains("list-type=2") => "ListObjectsV2",
            ("GET", true) => "GetObject",
            _ => "other",
        }
    }

    /// The operation of a JSON-protocol request (`GetItem` for
    /// `DynamoDB_20120810.GetItem`), empty for anything else.
    pub fn json_operation(&self) -> &str {
        self.header("x-amz-target")
            .and_then(|t| t.rsplit_once('.'))
            .map_or("", |(_, op)| op)
    }
}

/// A canned answer: status, content type and body (a HEAD's body is dropped, as AWS
/// sends none).
pub type Canned = (u16, &'static str, String);

/// What the front answers instead of forwarding (`None`: forward to moto).
pub type Answer = dyn Fn(&Seen) -> Option<Canned> + Send + Sync;

/// The requests a front saw, in order.
pub type Log = Arc<Mutex<Vec<Seen>>>;

/// S3's `AccessDenied` error document carrying `message`.
pub fn s3_access_denied(message: &str) -> Canned {
    (
        403,
        "application/xml",
        format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>AccessDenied</Code><Message>{message}</Message><RequestId>denied-1</RequestId></Error>"
        ),
    )
}

/// DynamoDB's `AccessDeniedException` (awsJson 1.0) carrying `message`.
pub fn dynamodb_access_denied(message: &str) -> Canned {
    (
        400,
        "application/x-amz-json-1.0",
        serde_json::json!({
            "__type": "com.amazon.coral.service#AccessDeniedException",
            "message": message,
        })
        .to_string(),
    )
}

/// Starts a front on `upstream` (moto's endpoint); its URL and its log.
pub async fn front(upstream: &str, answer: Box<Answer>) -> (String, Log) {
    let upstream = upstream.to_string();
    let http = reqwest::Client::new();
    let seen: Log = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let answer: Arc<Answer> = answer.into();
    let app = axum::Router::new().fallback(move |request: Request| {
        let upstream = upstream.clone();
        let http = http.clone();
        let log = log.clone();
        let answer = answer.clone();
        async move {
            let path = request.uri().path().to_string();
            let query = request.uri().query().unwrap_or("").to_string();
            let this = Seen {
                method: request.method().to_string(),
                path: path.clone(),
                query: query.clone(),
                headers: request
                    .headers()
                    .iter()
                    .map(|(k, v)| {
                        (
                            k.as_str().to_string(),
                            String::from_utf8_lossy(v.as_bytes()).into_owned(),
                        )
                    })
                    .collect(),
            };
            log.lock().unwrap().push(this.clone());
            if let Some((status, content_type, document)) = answer(&this) {
                let body = if this.method == "HEAD" {
                    Body::empty()
                } else {
                    Body::from(document)
                };
                return Response::builder()
                    .status(status)
                    .header("content-type", content_type)
                    .body(body)
                    .unwrap();
            }
            let method = reqwest::Method::from_bytes(request.method().as_str().as_bytes()).unwrap();
            let mut forward = http.request(method, format!("{upstream}{path}?{query}"));
            for (name, value) in request.headers() {
                if name != "host" {
                    forward = forward.header(name.as_str(), value.as_bytes());
                }
            }
            let body = axum::body::to_bytes(request.into_body(), usize::MAX)
                .await
                .unwrap();
            let answer = forward.body(body.to_vec()).send().await.unwrap();
            let mut response = Response::builder().status(answer.status().as_u16());
            for (name, value) in answer.headers() {
                response = response.header(name.as_str(), value.as_bytes());
            }
            response
                .body(Body::from(answer.bytes().await.unwrap()))
                .unwrap()
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, seen)
}

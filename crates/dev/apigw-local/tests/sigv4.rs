//! The SigV4 check over real HTTP: an echo handler served behind
//! `require_sigv4(lambda_router(..))`, called with requests signed by the AWS SDK's own
//! signer (`aws-sigv4`), by `curl --aws-sigv4` and by botocore's `SigV4Auth` (when they
//! are installed), and with requests that must be refused.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, SystemTime};

use aws_credential_types::Credentials;
use aws_lambda_events::apigw::{ApiGatewayProxyRequest, ApiGatewayProxyResponse};
use aws_lambda_events::encodings::Body as LambdaBody;
use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_sigv4::sign::v4;
use awsmp_apigw_local::{
    LOCAL_USER_ARN, LOOPBACK_ANY_PORT, LocalServer, Sigv4Verifier, lambda_router, require_sigv4,
    serve,
};
use serde_json::{Value, json};

const KEY: &str = "AKIDLOCALTEST";
const SECRET: &str = "local/secret+for-tests";
const REGION: &str = "us-east-1";
const SERVICE: &str = "execute-api";

/// The echo handler behind the check: what the proxy event carried.
async fn serve_echo() -> LocalServer {
    let api = lambda_router(|request: ApiGatewayProxyRequest| async move {
        let identity = &request.request_context.identity;
        let mut query: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (name, value) in request.multi_value_query_string_parameters.iter() {
            query
                .entry(name.to_string())
                .or_default()
                .push(value.to_string());
        }
        let echo = json!({
            "method": request.http_method.as_str(),
            "path": request.path,
            "query": query,
            "body": request.body,
            "accessKey": identity.access_key,
            "userArn": identity.user_arn,
            "accountId": identity.account_id,
        });
        let mut response = ApiGatewayProxyResponse::default();
        response.status_code = 200;
        response.body = Some(LambdaBody::Text(echo.to_string()));
        Ok::<_, std::convert::Infallible>(response)
    });
    let verifier = Sigv4Verifier::new(KEY, SECRET, REGION);
    serve(require_sigv4(api, verifier), LOOPBACK_ANY_PORT)
        .await
        .unwrap()
}

/// How a test request is signed.
struct Signer<'a> {
    key: &'a str,
    secret: &'a str,
    region: &'a str,
    service: &'a str,
    time: SystemTime,
}

impl Default for Signer<'_> {
    fn default() -> Self {
        Self {
            key: KEY,
            secret: SECRET,
            region: REGION,
            service: SERVICE,
            time: SystemTime::now(),
        }
    }
}

impl Signer<'_> {
    /// The headers `aws-sigv4` adds (`authorization`, `x-amz-date`) to sign `method`
    /// `url` with `headers` and `body`, as the AWS SDKs sign.
    fn sign(
        &self,
        method: &str,
        url: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Vec<(String, String)> {
        let identity = Credentials::new(self.key, self.secret, None, None, "test").into();
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(self.region)
            .name(self.service)
            .time(self.time)
            .settings(SigningSettings::default())
            .build()
            .unwrap()
            .into();
        let signable = SignableRequest::new(
            method,
            url,
            headers.iter().copied(),
            SignableBody::Bytes(body),
        )
        .unwrap();
        let (instructions, _signature) = sign(signable, &params).unwrap().into_parts();
        instructions
            .headers()
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect()
    }
}

/// Sends `method url` with `headers`, `body` and the `signed` headers; status and body.
async fn send(
    method: reqwest::Method,
    url: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    signed: &[(String, String)],
) -> (u16, String) {
    let mut request = reqwest::Client::new()
        .request(method, url)
        .body(body.to_vec());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    for (name, value) in signed {
        request = request.header(name, value);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

const JSON: &[(&str, &str)] = &[("content-type", "application/json")];
const BODY: &[u8] = br#"{"customer":"c-1","dimension":"requests","quantity":3}"#;

/// POSTs [`BODY`] to `/usage` signed by `signer`, optionally sending `sent_body` instead.
async fn post(
    server: &LocalServer,
    signer: &Signer<'_>,
    sent_body: Option<&[u8]>,
) -> (u16, String) {
    let url = format!("{}/usage", server.url());
    let signed = signer.sign("POST", &url, JSON, BODY);
    send(
        reqwest::Method::POST,
        &url,
        JSON,
        sent_body.unwrap_or(BODY),
        &signed,
    )
    .await
}

fn assert_refused(answer: &(u16, String), error_start: &str) {
    assert_eq!(answer.0, 403, "{}", answer.1);
    let message: Value = serde_json::from_str(&answer.1).unwrap();
    let message = message["message"].as_str().unwrap();
    assert!(message.starts_with(error_start), "{message}");
}

#[tokio::test]
async fn signed_post_reaches_the_handler_with_body_and_identity() {
    let server = serve_echo().await;
    let (status, body) = post(&server, &Signer::default(), None).await;
    assert_eq!(status, 200, "{body}");
    let echo: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(echo["method"], "POST");
    assert_eq!(echo["path"], "/usage");
    assert_eq!(echo["body"], std::str::from_utf8(BODY).unwrap());
    assert_eq!(echo["accessKey"], KEY);
    assert_eq!(echo["userArn"], LOCAL_USER_ARN);
    assert_eq!(echo["accountId"], "000000000000");
}

#[tokio::test]
async fn signed_get_with_query_and_encoded_path_segments_passes() {
    let server = serve_echo().await;
    for target in [
        "/usage/c%201/a%2Fb?to=2024-01-02T00%3A00%3A00Z&from=x%20y&from=1&flag",
        "/usage/~me/(x)?q=a+b&e=%E2%82%AC",
        "/",
    ] {
        let url = format!("{}{target}", server.url());
        let signed = Signer::default().sign("GET", &url, &[], b"");
        let (status, body) = send(reqwest::Method::GET, &url, &[], b"", &signed).await;
        assert_eq!(status, 200, "{target}: {body}");
    }
    let url = format!("{}/usage/c%201/a%2Fb?b=2&a=x%20y", server.url());
    let signed = Signer::default().sign("GET", &url, &[], b"");
    let (_, body) = send(reqwest::Method::GET, &url, &[], b"", &signed).await;
    let echo: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(echo["path"], "/usage/c%201/a%2Fb");
    assert_eq!(echo["query"], json!({"a": ["x y"], "b": ["2"]}));
}

#[tokio::test]
async fn unsigned_and_badly_signed_requests_are_refused() {
    let server = serve_echo().await;
    let url = format!("{}/usage", server.url());

    let unsigned = send(reqwest::Method::POST, &url, JSON, BODY, &[]).await;
    assert_refused(&unsigned, "Missing Authentication Token");
    assert!(unsigned.1.contains("execute-api"));

    let wrong_secret = Signer {
        secret: "not-the-secret",
        ..Signer::default()
    };
    assert_refused(
        &post(&server, &wrong_secret, None).await,
        "The request signature we calculated does not match",
    );

    let tampered = br#"{"customer":"c-1","dimension":"requests","quantity":3000}"#;
    assert_refused(
        &post(&server, &Signer::default(), Some(tampered)).await,
        "The request signature we calculated does not match",
    );

    let wrong_region = Signer {
        region: "eu-west-1",
        ..Signer::default()
    };
    assert_refused(
        &post(&server, &wrong_region, None).await,
        "Credential should be scoped to a valid region",
    );

    let wrong_service = Signer {
        service: "lambda",
        ..Signer::default()
    };
    assert_refused(
        &post(&server, &wrong_service, None).await,
        "Credential should be scoped to correct service",
    );

    let stale = Signer {
        time: SystemTime::now() - Duration::from_secs(20 * 60),
        ..Signer::default()
    };
    assert_refused(&post(&server, &stale, None).await, "Signature expired");

    let other_key = Signer {
        key: "AKIDSOMEONEELSE",
        ..Signer::default()
    };
    assert_refused(
        &post(&server, &other_key, None).await,
        "The security token included in the request is invalid",
    );

    // A signed request replayed on another path.
    let signed = Signer::default().sign("POST", &url, JSON, BODY);
    let elsewhere = format!("{}/usage/other", server.url());
    assert_refused(
        &send(reqwest::Method::POST, &elsewhere, JSON, BODY, &signed).await,
        "The request signature we calculated does not match",
    );
}

/// `curl`, when on PATH with `--aws-sigv4` (7.75+).
fn curl_with_sigv4() -> bool {
    Command::new("curl")
        .arg("--help")
        .arg("all")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).contains("--aws-sigv4"))
}

/// Runs `curl --aws-sigv4` with `user` (KEY:SECRET) posting [`BODY`] to `url`;
/// status and body.
async fn curl_post(url: String, user: &'static str) -> (u16, String) {
    tokio::task::spawn_blocking(move || {
        let out = Command::new("curl")
            .args(["--silent", "--show-error", "--max-time", "20"])
            .args(["--aws-sigv4", "aws:amz:us-east-1:execute-api"])
            .args(["--user", user])
            .args(["-H", "content-type: application/json"])
            .arg("--data")
            .arg(std::str::from_utf8(BODY).unwrap())
            .args(["--write-out", "\n%{http_code}"])
            .arg(url)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        let (body, status) = text.rsplit_once('\n').unwrap();
        (status.parse().unwrap(), body.to_string())
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn curl_aws_sigv4_is_accepted_and_a_wrong_secret_refused() {
    if !curl_with_sigv4() {
        eprintln!("skipped: no curl with --aws-sigv4 on PATH");
        return;
    }
    let server = serve_echo().await;
    // Query already sorted, path with nothing to encode: curl before 8.x signs the query
    // as written (unsorted) and the path without encoding it again, which AWS refuses too.
    let url = format!("{}/usage/c-1?a=1&b=2", server.url());
    let (status, body) = curl_post(url.clone(), "AKIDLOCALTEST:local/secret+for-tests").await;
    assert_eq!(status, 200, "{body}");
    let echo: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(echo["body"], std::str::from_utf8(BODY).unwrap());
    assert_eq!(echo["accessKey"], KEY);

    let refused = curl_post(url, "AKIDLOCALTEST:wrong-secret").await;
    assert_refused(
        &refused,
        "The request signature we calculated does not match",
    );
}

/// The workspace's Python (`.venv`), when botocore imports there.
fn python_with_botocore() -> Option<PathBuf> {
    let python = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../.venv/bin/python");
    let imports = Command::new(&python)
        .args(["-c", "import botocore.auth"])
        .output()
        .is_ok_and(|out| out.status.success());
    imports.then_some(python)
}

/// Signs with botocore's `SigV4Auth` and sends with urllib; prints the status, then the body.
const BOTOCORE_CLIENT: &str = r#"
import sys, urllib.request, urllib.error
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
url, key, secret, body = sys.argv[1:5]
request = AWSRequest(method="POST", url=url, data=body.encode(), headers={"content-type": "application/json"})
SigV4Auth(Credentials(key, secret), "execute-api", "us-east-1").add_auth(request)
prepared = request.prepare()
sent = urllib.request.Request(prepared.url, data=prepared.body, headers=dict(prepared.headers), method="POST")
try:
    with urllib.request.urlopen(sent, timeout=20) as response:
        status, text = response.status, response.read().decode()
except urllib.error.HTTPError as e:
    status, text = e.code, e.read().decode()
print(status)
print(text, end="")
"#;

async fn botocore_post(python: PathBuf, url: String, secret: &'static str) -> (u16, String) {
    tokio::task::spawn_blocking(move || {
        let out = Command::new(python)
            .args(["-c", BOTOCORE_CLIENT, &url, KEY, secret])
            .arg(std::str::from_utf8(BODY).unwrap())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        let (status, body) = text.split_once('\n').unwrap();
        (status.parse().unwrap(), body.to_string())
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn botocore_sigv4auth_is_accepted_and_a_wrong_secret_refused() {
    let Some(python) = python_with_botocore() else {
        eprintln!("skipped: no botocore in the workspace's .venv");
        return;
    };
    let server = serve_echo().await;
    let url = format!("{}/usage/c%201/a%2Fb?to=x%20y&from=1", server.url());
    let (status, body) = botocore_post(python.clone(), url.clone(), SECRET).await;
    assert_eq!(status, 200, "{body}");
    let echo: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(echo["path"], "/usage/c%201/a%2Fb");
    assert_eq!(echo["accessKey"], KEY);

    let refused = botocore_post(python, url, "wrong-secret").await;
    assert_refused(
        &refused,
        "The request signature we calculated does not match",
    );
}

//! Calls to the local usage API as a seller's service makes them (over HTTP, JSON in
//! and out, signed with SigV4 for `execute-api` as in AWS): the demo posts its usage
//! through it, and the tests read events back.

use std::time::SystemTime;

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_sigv4::sign::v4;
use serde_json::Value;

use crate::LocalError;
use crate::resources::{LOCAL_API_CREDENTIALS, LOCAL_REGION};
use crate::system::LocalSystem;

/// The SigV4 headers (`authorization`, `x-amz-date`) of `method url` with `headers` and
/// `body`, signed with [`LOCAL_API_CREDENTIALS`] for `execute-api` in the local Region.
pub fn signed_headers(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<Vec<(String, String)>, LocalError> {
    let failed =
        |e: &dyn std::fmt::Display| LocalError::Check(format!("signing {method} {url}: {e}"));
    let (key, secret) = LOCAL_API_CREDENTIALS;
    let identity = Credentials::new(key, secret, None, None, "awsmp-local").into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(LOCAL_REGION)
        .name("execute-api")
        .time(SystemTime::now())
        .settings(SigningSettings::default())
        .build()
        .map_err(|e| failed(&e))?
        .into();
    let signable = SignableRequest::new(
        method,
        url,
        headers.iter().copied(),
        SignableBody::Bytes(body),
    )
    .map_err(|e| failed(&e))?;
    let (instructions, _) = sign(signable, &params)
        .map_err(|e| failed(&e))?
        .into_parts();
    Ok(instructions
        .headers()
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect())
}

async fn send(
    method: reqwest::Method,
    url: &str,
    content_type: Option<&str>,
    body: Vec<u8>,
) -> Result<reqwest::Response, LocalError> {
    let headers: Vec<(&str, &str)> = content_type
        .map(|t| ("content-type", t))
        .into_iter()
        .collect();
    let mut request = reqwest::Client::new().request(method.clone(), url);
    for (name, value) in signed_headers(method.as_str(), url, &headers, &body)? {
        request = request.header(name, value);
    }
    for (name, value) in headers {
        request = request.header(name, value);
    }
    request
        .body(body)
        .send()
        .await
        .map_err(|e| LocalError::Check(format!("{method} {url}: {e}")))
}

fn url(system: &LocalSystem, path: &str) -> Result<String, LocalError> {
    let server = system.usage_api.as_ref().ok_or_else(|| {
        LocalError::Wiring("the main stack deploys no usage API (UsageApi=disabled)".into())
    })?;
    Ok(format!("{}{path}", server.url()))
}

async fn answer(response: reqwest::Response, what: &str) -> Result<(u16, Value), LocalError> {
    let status = response.status().as_u16();
    let text = response
        .text()
        .await
        .map_err(|e| LocalError::Check(format!("{what}: {e}")))?;
    let body = serde_json::from_str(&text).map_err(|e| {
        LocalError::Check(format!(
            "{what} answered {status} with no JSON ({e}): {text}"
        ))
    })?;
    Ok((status, body))
}

/// `POST /usage/events` with `body` (`{"events": [...]}`); the answer of a `200`.
pub async fn post_events(system: &LocalSystem, body: &Value) -> Result<Value, LocalError> {
    let response = send(
        reqwest::Method::POST,
        &url(system, "/usage/events")?,
        Some("application/json"),
        body.to_string().into_bytes(),
    )
    .await?;
    match answer(response, "POST /usage/events").await? {
        (200, body) => Ok(body),
        (status, body) => Err(LocalError::Check(format!(
            "POST /usage/events answered {status}: {body}"
        ))),
    }
}

/// `POST /usage/events` without a signature: the status (the API refuses it, 403).
pub async fn post_unsigned(system: &LocalSystem, body: &Value) -> Result<u16, LocalError> {
    let url = url(system, "/usage/events")?;
    let response = reqwest::Client::new()
        .post(&url)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .map_err(|e| LocalError::Check(format!("POST {url}: {e}")))?;
    Ok(response.status().as_u16())
}

/// `GET /usage/events/{id}?licenseArn=`: the status and the answer.
pub async fn get_event(
    system: &LocalSystem,
    id: &str,
    license_arn: &str,
) -> Result<(u16, Value), LocalError> {
    let mut target = reqwest::Url::parse(&url(system, "/usage/events/")?)
        .map_err(|e| LocalError::Check(e.to_string()))?;
    target
        .path_segments_mut()
        .map_err(|()| LocalError::Check("usage API URL has no path".into()))?
        .pop_if_empty()
        .push(id);
    target
        .query_pairs_mut()
        .append_pair("licenseArn", license_arn);
    let response = send(reqwest::Method::GET, target.as_str(), None, Vec::new()).await?;
    answer(response, "GET /usage/events").await
}

/// `GET /subscriptions/{licenseArn}`: the status and the entitlement answer.
pub async fn get_subscription(
    system: &LocalSystem,
    license_arn: &str,
) -> Result<(u16, Value), LocalError> {
    let mut target = reqwest::Url::parse(&url(system, "/subscriptions/")?)
        .map_err(|e| LocalError::Check(e.to_string()))?;
    target
        .path_segments_mut()
        .map_err(|()| LocalError::Check("usage API URL has no path".into()))?
        .pop_if_empty()
        .push(license_arn);
    let response = send(reqwest::Method::GET, target.as_str(), None, Vec::new()).await?;
    answer(response, "GET /subscriptions").await
}

/// Runs the Python client (`examples/usage-api/post_usage.py`, botocore's SigV4 signer)
/// with the venv's Python, posting `events`; its printed answer.
pub fn post_with_python_client(
    system: &LocalSystem,
    root: &std::path::Path,
    events: &Value,
) -> Result<Value, LocalError> {
    let python = awsmp_local_aws::venv_dir().join("bin/python");
    run_client(
        "the Python client",
        &python,
        &root.join("examples/usage-api/post_usage.py"),
        system,
        events,
    )
}

/// Runs the Node.js client (`examples/usage-api/node/post_usage.mjs`, the AWS SDK's
/// SigV4 signer), posting `events`; its printed answer. Installs its pinned packages
/// (`npm ci`) first when `node_modules` is missing there; fails, saying what to install,
/// when Node.js or npm is.
pub fn post_with_node_client(
    system: &LocalSystem,
    root: &std::path::Path,
    events: &Value,
) -> Result<Value, LocalError> {
    const INSTALL: &str = "install Node.js 18+ and npm (apt-get install -y nodejs npm)";
    let dir = root.join("examples/usage-api/node");
    let missing = |tool: &str, e: &dyn std::fmt::Display| {
        LocalError::Setup(format!(
            "the Node.js usage API client needs `{tool}` ({e}): {INSTALL}"
        ))
    };
    let version = std::process::Command::new("node")
        .arg("--version")
        .output()
        .map_err(|e| missing("node", &e))?;
    if !version.status.success() {
        return Err(missing("node", &version.status));
    }
    if !dir.join("node_modules").is_dir() {
        let npm = std::process::Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(&dir)
            .output()
            .map_err(|e| missing("npm", &e))?;
        if !npm.status.success() {
            return Err(LocalError::Setup(format!(
                "npm ci in {} failed ({}): {}{}",
                dir.display(),
                npm.status,
                String::from_utf8_lossy(&npm.stdout),
                String::from_utf8_lossy(&npm.stderr)
            )));
        }
    }
    run_client(
        "the Node.js client",
        std::path::Path::new("node"),
        &dir.join("post_usage.mjs"),
        system,
        events,
    )
}

/// Runs `program script URL events.json` as a seller's service would, with
/// [`LOCAL_API_CREDENTIALS`] in the environment (the default credential chain's first
/// source) and the local Region; the answer it printed, or what it said when it failed.
fn run_client(
    what: &str,
    program: &std::path::Path,
    script: &std::path::Path,
    system: &LocalSystem,
    events: &Value,
) -> Result<Value, LocalError> {
    let server = system
        .usage_api
        .as_ref()
        .ok_or_else(|| LocalError::Wiring("the main stack deploys no usage API".into()))?;
    let file = std::env::temp_dir().join(format!("awsmp-usage-events-{}.json", std::process::id()));
    std::fs::write(&file, events.to_string())
        .map_err(|e| LocalError::Setup(format!("{}: {e}", file.display())))?;
    let (key, secret) = LOCAL_API_CREDENTIALS;
    let output = std::process::Command::new(program)
        .arg(script)
        .arg(server.url())
        .arg(&file)
        .env("AWS_ACCESS_KEY_ID", key)
        .env("AWS_SECRET_ACCESS_KEY", secret)
        .env_remove("AWS_SESSION_TOKEN")
        .env_remove("AWS_PROFILE")
        .env("AWS_REGION", LOCAL_REGION)
        .output()
        .map_err(|e| LocalError::Setup(format!("{what} ({}): {e}", program.display())));
    let _ = std::fs::remove_file(&file);
    let output = output?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(LocalError::Check(format!(
            "{what} failed ({}): {stdout}{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        )));
    }
    serde_json::from_str(stdout.trim())
        .map_err(|e| LocalError::Check(format!("{what} printed no answer ({e}): {stdout}")))
}

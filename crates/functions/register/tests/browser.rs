//! The registration page end to end in headless Chromium: Marketplace's form POST to
//! the fulfillment endpoint, the 303 to the page, the page's post to the register
//! endpoint, and what the buyer sees — a successful registration, validation errors
//! (the page's and the endpoint's), an expired token and a missing one. The register
//! handler runs behind `awsmp-apigw-local` on moto (DynamoDB) and the Marketplace
//! simulator; the page is served from `web/` with its shipped `config.js` pointed at
//! the local endpoint. Screenshots land in `test-artifacts/browser/`.
//!
//! Needs Node.js, the npm driver in `web/test/node_modules` and `/usr/bin/chromium`:
//! `make browser-test` installs them and runs this test (it is behind the
//! `browser-test` feature so the plain workspace run does not need a browser).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use aws_sdk_dynamodb::types::AttributeValue;
use awsmp_apigw_local::{LOOPBACK_ANY_PORT, lambda_router, page_origin, serve_on};
use awsmp_aws::{DynamoProfileStore, DynamoSubscriberStore, SdkCustomerResolver, SystemClock};
use awsmp_core::ports::ProfileStore;
use awsmp_local_aws::marketplace_sim::{SimConfig, TokenSeed};
use awsmp_local_aws::{
    MotoServer, SimServer, create_profile_table, create_subscribers_table, workspace_root,
};
use awsmp_register::{Config, State, handle};
use axum::Json;
use axum::http::{Method, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use serde_json::{Value, json};
use tokio::net::TcpListener;

const SUBSCRIBERS_TABLE: &str = "awsmp-subscribers-browser";
const PROFILE_TABLE: &str = "awsmp-prod-browser-customer-profile";
const PRODUCT: &str = "prod-browser";
const LICENSE: &str =
    "arn:aws:license-manager::123456789012:license:l-0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b";
const ACCOUNT: &str = "845735284135";
const VALID_TOKEN: &str = "tok-browser-valid";
const EXPIRED_TOKEN: &str = "tok-browser-expired";
const LAMBDA_REGION: &str = "us-west-2";
const INSTALL_HINT: &str = "run `make browser-test`, which installs Chromium (scripts/ensure-chromium.sh) and the npm driver (web/test) and then runs this test";

/// The row of our license and account in `table`; `expect` is the failure message
/// when there is none.
async fn our_row(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    expect: &str,
) -> HashMap<String, AttributeValue> {
    client
        .get_item()
        .table_name(table)
        .key("licenseArn", AttributeValue::S(LICENSE.into()))
        .key("customerAWSAccountId", AttributeValue::S(ACCOUNT.into()))
        .send()
        .await
        .unwrap()
        .item
        .expect(expect)
}

fn chromium() -> PathBuf {
    std::env::var_os("AWSMP_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"))
}

/// Fails with the command that installs whatever is missing.
fn check_prerequisites(web: &Path) {
    let node = std::process::Command::new("node").arg("--version").output();
    if !node.is_ok_and(|o| o.status.success()) {
        panic!(
            "Node.js (`node`) is not on PATH: {INSTALL_HINT} (Node.js itself: apt-get install -y nodejs npm)"
        );
    }
    if !web
        .join("test/node_modules/playwright-core/package.json")
        .exists()
    {
        panic!("web/test/node_modules/playwright-core is missing: {INSTALL_HINT}");
    }
    if !chromium().exists() {
        panic!("{} is missing: {INSTALL_HINT}", chromium().display());
    }
}

/// The page's Content-Security-Policy as template-main.yaml's response headers policy
/// sets it, with WafRegisterChallenge or without (`!Sub ["<policy>", {Sdk: !If
/// [ChallengeRegister, "<with>", ""], Logo: ...}]`), and no PageLogoOrigin (the page's
/// logo is its own file or none).
fn page_csp(root: &Path, challenge: bool) -> String {
    let template = std::fs::read_to_string(root.join("template-main.yaml")).unwrap();
    let line = template
        .lines()
        .map(str::trim)
        .find_map(|line| line.strip_prefix("ContentSecurityPolicy: !Sub [\""))
        .expect("template-main.yaml sets the page's ContentSecurityPolicy with !Sub [...]");
    let (policy, variables) = line
        .split_once("\", {Sdk: !If [ChallengeRegister, \"")
        .unwrap();
    let (with, _) = variables.split_once('"').unwrap();
    policy
        .replace("${Sdk}", if challenge { with } else { "" })
        .replace("${Logo}", "")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registration_page_in_headless_chromium() {
    let root = workspace_root();
    let web = root.join("web");
    check_prerequisites(&web);
    let artifacts = root.join("test-artifacts").join("browser");
    if artifacts.exists() {
        std::fs::remove_dir_all(&artifacts).unwrap();
    }

    // Local AWS: moto for DynamoDB (subscribers in us-east-1, profiles in the function's
    // Region) and the Marketplace simulator for ResolveCustomer, with one valid token and
    // one issued 5 hours ago on the simulator's clock (tokens live 4 hours).
    let moto = MotoServer::start().await.unwrap_or_else(|e| panic!("{e}"));
    let east = aws_sdk_dynamodb::Client::new(&moto.sdk_config_in("us-east-1"));
    let west = aws_sdk_dynamodb::Client::new(&moto.sdk_config_in(LAMBDA_REGION));
    create_subscribers_table(&east, SUBSCRIBERS_TABLE)
        .await
        .unwrap();
    create_profile_table(&west, PROFILE_TABLE).await.unwrap();
    let sim = SimServer::start(SimConfig::default()).await.unwrap();
    let sim_now = sim.handle().now();
    for (token, issued_at) in [
        (VALID_TOKEN, sim_now),
        (EXPIRED_TOKEN, sim_now - chrono::Duration::hours(5)),
    ] {
        sim.handle()
            .seed_token(TokenSeed {
                token: token.into(),
                license_arn: LICENSE.into(),
                customer_aws_account_id: ACCOUNT.into(),
                product_code: PRODUCT.into(),
                issued_at: Some(issued_at),
            })
            .unwrap();
    }

    // The port first: the function's page URL and allowed origin name it.
    let web_listener = TcpListener::bind(LOOPBACK_ANY_PORT).await.unwrap();
    let web_url = format!("http://{}", web_listener.local_addr().unwrap());
    let page_url = format!("{web_url}/index.html");

    let config = Config::from_lookup(&|k| {
        Some(match k {
            "PRODUCT_CODE" => PRODUCT.to_string(),
            "SUBSCRIBERS_TABLE" => SUBSCRIBERS_TABLE.to_string(),
            "SUBSCRIBERS_TABLE_REGION" => "us-east-1".to_string(),
            "CUSTOMER_PROFILE_TABLE" => PROFILE_TABLE.to_string(),
            // The fields the shipped config.js shows.
            "ALLOWED_REGISTRATION_FIELDS" => {
                "companyName,contactName,contactEmail,contactPhone".to_string()
            }
            "RESOLVE_CUSTOMER_REGION" => "us-east-1".to_string(),
            "REGISTRATION_PAGE_URL" => page_url.clone(),
            "ALLOWED_ORIGIN" => web_url.clone(),
            "AWS_REGION" => LAMBDA_REGION.to_string(),
            "STAGE" => "test".to_string(),
            _ => return None,
        })
    })
    .unwrap();
    let state = State {
        subscribers: Arc::new(DynamoSubscriberStore::new(east.clone(), SUBSCRIBERS_TABLE)),
        resolver: Arc::new(SdkCustomerResolver::new(sim.metering_client())),
        profiles: Some(
            Arc::new(DynamoProfileStore::new(west.clone(), PROFILE_TABLE)) as Arc<dyn ProfileStore>,
        ),
        clock: Arc::new(SystemClock),
        metrics: std::sync::Arc::new(awsmp_core::memory::RecordingMetrics::new()),
        config: Arc::new(config),
    };
    let api = lambda_router(move |request| {
        let state = state.clone();
        async move { Ok::<_, Infallible>(handle(&state, request).await) }
    });
    // WafRegisterChallenge, as the WebACL applies it: once `challenge` is on, a POST
    // /register without an AWS WAF token gets WAF's 202 challenge, not the function.
    let waf = Waf::default();
    let api = {
        let waf = waf.clone();
        api.layer(axum::middleware::from_fn(
            move |request: axum::extract::Request, next: axum::middleware::Next| {
                let waf = waf.clone();
                async move { waf.filter(request, next).await }
            },
        ))
    };
    // The Content-Security-Policy the distribution adds in AWS, without and with the
    // challenge.
    let csp = [false, true]
        .map(|challenge| axum::http::HeaderValue::from_str(&page_csp(&root, challenge)).unwrap());
    let csp_waf = waf.clone();
    // With the challenge, config.json (what deploy.sh writes) names the WebACL's SDK, here
    // a stand-in on the page's origin whose AwsWafIntegration.fetch adds a token.
    let deployed = {
        let waf = waf.clone();
        let sdk = format!("{web_url}/waf-sdk/");
        move || {
            let on = waf.challenge.load(Ordering::SeqCst);
            let sdk = sdk.clone();
            async move {
                if on {
                    Json(json!({ "wafIntegrationUrl": sdk })).into_response()
                } else {
                    StatusCode::NOT_FOUND.into_response()
                }
            }
        }
    };
    // One origin, as the page's distribution serves it: the shipped web/ (its config.js
    // unchanged: its registerEndpoint is the relative "register") and the two API routes.
    let site = page_origin(&web, api)
        .route("/config.json", get(deployed))
        .route(
            "/waf-sdk/challenge.js",
            get(|| async { ([("content-type", "text/javascript")], FAKE_CHALLENGE_SDK) }),
        );
    let site = site.layer(axum::middleware::map_response(
        move |mut response: axum::response::Response| {
            let csp = csp[usize::from(csp_waf.challenge.load(Ordering::SeqCst))].clone();
            async move {
                response
                    .headers_mut()
                    .insert(axum::http::header::CONTENT_SECURITY_POLICY, csp);
                response
            }
        },
    ));
    let _web_server = serve_on(web_listener, site).unwrap();

    // The buyer, in Chromium.
    let result = buyer(&web, &web_url, &page_url, &artifacts).await;
    let (with_token, without) = waf.posts();
    assert!(
        with_token == 0 && without >= 2,
        "no WAF SDK without the challenge: {with_token} posts with a token, {without} without"
    );

    // 1. Success: the fulfillment answer was a 303 with the token in the fragment and
    // no referrer; the token left the address bar; the success view has focus.
    let success = &result["success"];
    assert_eq!(success["redirect"]["status"], 303, "{result:#}");
    assert_eq!(success["redirect"]["locationHasToken"], true);
    assert_eq!(success["redirect"]["referrerPolicy"], "no-referrer");
    assert_eq!(success["redirect"]["cacheControl"], "no-store");
    assert_eq!(
        success["addressBar"],
        page_url.as_str(),
        "token left in the address bar"
    );
    assert_eq!(success["allInputsLabelled"], true);
    // The page ran under the template's CSP, and it refused nothing: config.json and the
    // post to /register are on the page's own origin (connect-src 'self').
    assert_eq!(
        success["pageCsp"],
        page_csp(&root, false).as_str(),
        "{result:#}"
    );
    assert_eq!(result["cspViolations"], serde_json::json!([]), "{result:#}");
    assert_eq!(success["title"], "You're all set");
    assert_eq!(success["focused"], "success-title");
    // ... and it really registered: the profile in-Region, the Region cross-Region.
    let profile = our_row(&west, PROFILE_TABLE, "profile row written").await;
    assert_eq!(
        profile["companyName"],
        AttributeValue::S("Example Corp".into())
    );
    assert_eq!(
        profile["contactEmail"],
        AttributeValue::S("jane@example.com".into())
    );
    assert!(
        !profile.contains_key("contactPhone"),
        "a blank optional field is not stored"
    );
    let subscriber = our_row(&east, SUBSCRIBERS_TABLE, "subscriber row written").await;
    assert_eq!(
        subscriber["registeredRegions"],
        AttributeValue::Ss(vec![LAMBDA_REGION.into()])
    );

    // 2. Validation: the page's own checks name each field; the endpoint's refusal of an
    // over-long value is shown on that field, and the form stays usable.
    let client = &result["validation"]["client"];
    let invalid: Vec<&str> = client["invalid"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(
        invalid,
        ["companyName", "contactName", "contactEmail"],
        "{result:#}"
    );
    let summary = client["summary"].as_array().unwrap();
    assert_eq!(summary.len(), 3);
    assert!(
        summary
            .iter()
            .any(|s| s.as_str().unwrap().contains("email address"))
    );
    let server = &result["validation"]["server"];
    let field_error = server["fieldError"].as_str().unwrap();
    assert!(
        field_error.starts_with("Company name is too long") && field_error.contains("1000"),
        "{field_error}"
    );
    assert_eq!(server["summaryVisible"], true);
    assert_eq!(server["formStillShown"], true);

    // 3. Expired token: the buyer is told to go back to AWS Marketplace, with the link.
    let expired = &result["expired"];
    assert_eq!(expired["addressBar"], page_url.as_str());
    let message = expired["message"].as_str().unwrap();
    assert!(
        message.contains("expired")
            && message.contains("Return to AWS Marketplace and choose Set up your account again"),
        "{message}"
    );
    assert_eq!(
        expired["marketplaceLink"],
        "https://aws.amazon.com/marketplace/library"
    );
    assert_eq!(expired["focused"], "token-title");

    // 4. No token in Marketplace's POST: straight to the way back, no form.
    let missing = &result["missing"];
    assert_eq!(missing["redirect"]["status"], 303);
    assert_eq!(missing["redirect"]["locationHasError"], true);
    assert_eq!(missing["tokenViewVisible"], true);
    assert_eq!(missing["formVisible"], false);
    assert_eq!(
        missing["marketplaceLink"],
        "https://aws.amazon.com/marketplace/library"
    );

    for shot in [
        "registration-form.png",
        "registration-success.png",
        "validation-client.png",
        "validation-server.png",
        "expired-token.png",
        "missing-token.png",
    ] {
        let size = std::fs::metadata(artifacts.join(shot))
            .map(|m| m.len())
            .unwrap_or(0);
        assert!(size > 1000, "screenshot {shot} missing or empty");
    }

    // 5. WafRegisterChallenge: the page loads the SDK config.json names and posts through
    // it, so every post carries a token and none meets the challenge; same outcomes.
    waf.challenge.store(true, Ordering::SeqCst);
    let before = waf.posts();
    let challenged = buyer(&web, &web_url, &page_url, &artifacts.join("challenge")).await;
    let (with_token, without) = waf.posts();
    assert!(
        with_token - before.0 >= 2 && without == before.1,
        "with the challenge every post carries the SDK's token: {} with, {} without",
        with_token - before.0,
        without - before.1
    );
    assert_eq!(
        challenged["success"]["title"], "You're all set",
        "{challenged:#}"
    );
    assert_eq!(challenged["validation"]["server"]["formStillShown"], true);
    assert_eq!(challenged["expired"]["focused"], "token-title");
    assert_eq!(
        challenged["success"]["pageCsp"],
        page_csp(&root, true).as_str()
    );
    assert_eq!(
        challenged["cspViolations"],
        serde_json::json!([]),
        "{challenged:#}"
    );
}

/// The WebACL's challenge on POST /register, as far as the page meets it: without an
/// `x-aws-waf-token` header WAF answers 202 with `x-amzn-waf-action: challenge`.
#[derive(Clone, Default)]
struct Waf {
    challenge: Arc<AtomicBool>,
    with_token: Arc<AtomicUsize>,
    without: Arc<AtomicUsize>,
}

impl Waf {
    async fn filter(
        &self,
        request: axum::extract::Request,
        next: axum::middleware::Next,
    ) -> axum::response::Response {
        if request.method() == Method::POST && request.uri().path() == "/register" {
            if request.headers().contains_key("x-aws-waf-token") {
                self.with_token.fetch_add(1, Ordering::SeqCst);
            } else {
                self.without.fetch_add(1, Ordering::SeqCst);
                if self.challenge.load(Ordering::SeqCst) {
                    return (
                        StatusCode::ACCEPTED,
                        [("x-amzn-waf-action", "challenge")],
                        "",
                    )
                        .into_response();
                }
            }
        }
        next.run(request).await
    }

    /// POST /register requests so far: (with a token, without).
    fn posts(&self) -> (usize, usize) {
        (
            self.with_token.load(Ordering::SeqCst),
            self.without.load(Ordering::SeqCst),
        )
    }
}

/// A stand-in for the WebACL's integration SDK (`challenge.js`): its
/// `AwsWafIntegration.fetch` is `fetch` with the token header added.
const FAKE_CHALLENGE_SDK: &str = r#"window.AwsWafIntegration = {
  fetch: function (url, options) {
    var init = Object.assign({}, options);
    var headers = new Headers(init.headers || {});
    headers.set("x-aws-waf-token", "local-challenge-token");
    init.headers = headers;
    return window.fetch(url, init);
  }
};
"#;

/// Runs the buyer's scenarios (web/test/registration.mjs) in Chromium against the page
/// at `page_url`; their results.
async fn buyer(web: &Path, web_url: &str, page_url: &str, artifacts: &Path) -> Value {
    let output = tokio::process::Command::new("node")
        .arg(web.join("test/registration.mjs"))
        .env("AWSMP_FULFILLMENT_URL", format!("{web_url}/fulfillment"))
        .env("AWSMP_PAGE_URL", page_url)
        .env("AWSMP_VALID_TOKEN", VALID_TOKEN)
        .env("AWSMP_EXPIRED_TOKEN", EXPIRED_TOKEN)
        .env("AWSMP_ARTIFACTS_DIR", artifacts)
        .env("AWSMP_CHROMIUM", chromium())
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the browser script failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    stdout
        .lines()
        .find_map(|line| line.strip_prefix("RESULT "))
        .map(|json| serde_json::from_str(json).unwrap())
        .unwrap_or_else(|| panic!("no RESULT line:\n{stdout}\n{stderr}"))
}

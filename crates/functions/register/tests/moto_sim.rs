//! Every register response against the real adapters: DynamoDB on moto (the
//! subscribers table in us-east-1, the customer-profile table in the function's own
//! Region, us-west-2) and `ResolveCustomer` on the Marketplace simulator through the
//! real SDK client. Also the PII-free check on what registration writes cross-Region.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use aws_lambda_events::apigw::{ApiGatewayProxyRequest, ApiGatewayProxyResponse};
use aws_lambda_events::encodings::Body;
use aws_lambda_events::http::HeaderValue;
use aws_sdk_dynamodb::types::AttributeValue;
use awsmp_aws::{DynamoProfileStore, DynamoSubscriberStore, SdkCustomerResolver, SystemClock};
use awsmp_core::ports::ProfileStore;
use awsmp_local_aws::marketplace_sim::{FaultKind, FaultSpec, FaultTarget, SimConfig, TokenSeed};
use awsmp_local_aws::{MotoServer, SimServer, create_profile_table, create_subscribers_table};
use awsmp_register::{Config, State, handle};
use serde_json::Value;

const SUBSCRIBERS_TABLE: &str = "awsmp-subscribers-test";
const PROFILE_TABLE: &str = "awsmp-prod-abc123-customer-profile";
const LAMBDA_REGION: &str = "us-west-2";
const LICENSE: &str =
    "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef";
const ACCOUNT: &str = "845735284135";
const PRODUCT: &str = "prod-abc123";
const FIXTURE: &str = include_str!("fixtures/apigw-register-urlencoded.json");

struct Env {
    moto: MotoServer,
    sim: SimServer,
}

impl Env {
    async fn start() -> Env {
        let moto = MotoServer::start().await.unwrap_or_else(|e| panic!("{e}"));
        let east = aws_sdk_dynamodb::Client::new(&moto.sdk_config_in("us-east-1"));
        let west = aws_sdk_dynamodb::Client::new(&moto.sdk_config_in(LAMBDA_REGION));
        create_subscribers_table(&east, SUBSCRIBERS_TABLE)
            .await
            .unwrap();
        create_profile_table(&west, PROFILE_TABLE).await.unwrap();
        let issued = chrono::Utc::now();
        let token = |token: &str, product: &str, issued_at| TokenSeed {
            token: token.into(),
            // The simulator knows each license under one product only.
            license_arn: if product == PRODUCT {
                LICENSE.into()
            } else {
                format!("{LICENSE}ff")
            },
            customer_aws_account_id: ACCOUNT.into(),
            product_code: product.into(),
            issued_at: Some(issued_at),
        };
        let sim = SimServer::start(SimConfig {
            tokens: vec![
                token("tok-valid+/=", PRODUCT, issued),
                token("tok-expired", PRODUCT, issued - chrono::Duration::hours(5)),
                token("tok-other-product", "prod-someone-else", issued),
            ],
            ..SimConfig::default()
        })
        .await
        .unwrap();
        Env { moto, sim }
    }

    fn east(&self) -> aws_sdk_dynamodb::Client {
        aws_sdk_dynamodb::Client::new(&self.moto.sdk_config_in("us-east-1"))
    }

    fn west(&self) -> aws_sdk_dynamodb::Client {
        aws_sdk_dynamodb::Client::new(&self.moto.sdk_config_in(LAMBDA_REGION))
    }

    /// The state `main` builds, on moto and the simulator.
    fn state(&self, profile_table: Option<&str>) -> State {
        let config = Config::from_lookup(&|k| {
            Some(
                match k {
                    "PRODUCT_CODE" => PRODUCT,
                    "SUBSCRIBERS_TABLE" => SUBSCRIBERS_TABLE,
                    "SUBSCRIBERS_TABLE_REGION" => "us-east-1",
                    "CUSTOMER_PROFILE_TABLE" => return profile_table.map(str::to_string),
                    "ALLOWED_REGISTRATION_FIELDS" => "companyName,contactName,contactEmail",
                    "RESOLVE_CUSTOMER_REGION" => "us-east-1",
                    "REGISTRATION_PAGE_URL" => "https://register.example.com/index.html",
                    "ALLOWED_ORIGIN" => "https://register.example.com",
                    "AWS_REGION" => LAMBDA_REGION,
                    "STAGE" => "test",
                    _ => return None,
                }
                .to_string(),
            )
        })
        .unwrap();
        let metering = self.sim.metering_client();
        State {
            subscribers: Arc::new(DynamoSubscriberStore::new(
                self.east(),
                &config.subscribers_table,
            )),
            resolver: Arc::new(SdkCustomerResolver::new(metering)),
            profiles: config.customer_profile_table.as_ref().map(|t| {
                Arc::new(DynamoProfileStore::new(self.west(), t)) as Arc<dyn ProfileStore>
            }),
            clock: Arc::new(SystemClock),
            metrics: std::sync::Arc::new(awsmp_core::memory::RecordingMetrics::new()),
            config: Arc::new(config),
        }
    }
}

fn request(body: &str) -> ApiGatewayProxyRequest {
    let mut request: ApiGatewayProxyRequest = serde_json::from_str(FIXTURE).unwrap();
    request.body = Some(body.to_string());
    request
}

fn answer(response: &ApiGatewayProxyResponse) -> (i64, Value) {
    let body = match &response.body {
        Some(Body::Text(text)) => serde_json::from_str(text).unwrap(),
        other => panic!("expected JSON, got {other:?}"),
    };
    (response.status_code, body)
}

/// The form with nothing but the valid token (`tok-valid+/=`).
const TOKEN_ONLY: &str = "x-amzn-marketplace-token=tok-valid%2B%2F%3D";

/// The handler's answer to the form with nothing but the valid token.
async fn token_only(state: &State) -> (i64, Value) {
    answer(&handle(state, request(TOKEN_ONLY)).await)
}

/// Every item of a table, as attribute name -> value.
async fn scan(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
) -> Vec<BTreeMap<String, AttributeValue>> {
    let out = client.scan().table_name(table).send().await.unwrap();
    out.items
        .unwrap_or_default()
        .into_iter()
        .map(|item| item.into_iter().collect())
        .collect()
}

fn text(value: &AttributeValue) -> String {
    match value {
        AttributeValue::S(s) | AttributeValue::N(s) => s.clone(),
        AttributeValue::Ss(set) => set.join(","),
        other => format!("{other:?}"),
    }
}

#[tokio::test]
async fn registration_on_moto_and_the_simulator() {
    let env = Env::start().await;
    let state = env.state(Some(PROFILE_TABLE));

    // GIVEN a buyer posts the form with their details
    let (status, body) = answer(&handle(&state, request(
        "x-amzn-marketplace-token=tok-valid%2B%2F%3D&companyName=Example+Corp&contactName=Jane+Buyer&contactEmail=jane%40example.com&password=hunter2",
    )).await);
    assert_eq!(
        (status, body["code"].as_str()),
        (200, Some("registered")),
        "{body}"
    );

    // THEN the profile (buyer PII) is in the function's own Region...
    let profiles = scan(&env.west(), PROFILE_TABLE).await;
    assert_eq!(profiles.len(), 1);
    let profile = &profiles[0];
    let names: BTreeSet<&str> = profile.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        BTreeSet::from([
            "licenseArn",
            "customerAWSAccountId",
            "productCode",
            "companyName",
            "contactName",
            "contactEmail",
            "createdAt",
            "updatedAt",
        ])
    );
    assert_eq!(text(&profile["contactEmail"]), "jane@example.com");
    // ... and no profile table exists in us-east-1 at all.
    let east_tables = env.east().list_tables().send().await.unwrap();
    assert_eq!(east_tables.table_names(), [SUBSCRIBERS_TABLE]);

    // AND the cross-Region subscriber row holds identity, registeredRegions and the
    // registration's count, Region and field names only: never a value typed in.
    let rows = scan(&env.east(), SUBSCRIBERS_TABLE).await;
    assert_eq!(rows.len(), 1);
    let names: BTreeSet<&str> = rows[0].keys().map(String::as_str).collect();
    assert_eq!(
        names,
        BTreeSet::from([
            "licenseArn",
            "customerAWSAccountId",
            "productCode",
            "registeredRegions",
            "registrationCount",
            "lastRegisteredRegion",
            "registeredFields",
            "createdAt",
            "updatedAt",
        ])
    );
    let mut fields = rows[0]["registeredFields"].as_ss().unwrap().clone();
    fields.sort();
    assert_eq!(fields, ["companyName", "contactEmail", "contactName"]);
    assert_eq!(rows[0]["registrationCount"], AttributeValue::N("1".into()));
    assert!(
        !format!("{:?}", rows[0]).contains("jane@example.com"),
        "no value typed into the form reaches the PII-free table"
    );
    assert_eq!(
        rows[0]["registeredRegions"],
        AttributeValue::Ss(vec![LAMBDA_REGION.into()])
    );
    for value in rows[0].values() {
        for pii in ["Example Corp", "Jane", "jane@example.com", "hunter2"] {
            assert!(
                !text(value).contains(pii),
                "{pii} reached the subscribers table"
            );
        }
    }

    // A second registration (token reusable for 4 h) with zero fields: still 200, the
    // stored fields are kept, the Region set is unchanged.
    let (status, _) = token_only(&state).await;
    assert_eq!(status, 200);
    let profiles = scan(&env.west(), PROFILE_TABLE).await;
    assert_eq!(text(&profiles[0]["companyName"]), "Example Corp");
    let rows = scan(&env.east(), SUBSCRIBERS_TABLE).await;
    assert_eq!(
        rows[0]["registeredRegions"],
        AttributeValue::Ss(vec![LAMBDA_REGION.into()])
    );
}

#[tokio::test]
async fn every_refusal_on_moto_and_the_simulator() {
    let env = Env::start().await;
    let state = env.state(Some(PROFILE_TABLE));
    let long = "x".repeat(1001);
    let cases: Vec<(&str, ApiGatewayProxyRequest, i64, &str)> = vec![
        (
            "missing token",
            request("companyName=Example"),
            400,
            "missing-token",
        ),
        (
            "unknown token",
            request("x-amzn-marketplace-token=tok-never-issued"),
            400,
            "invalid-token",
        ),
        (
            "expired token",
            request("x-amzn-marketplace-token=tok-expired"),
            400,
            "expired-token",
        ),
        (
            "other product",
            request("x-amzn-marketplace-token=tok-other-product"),
            400,
            "wrong-product",
        ),
        (
            "field too long",
            request(&format!(
                "x-amzn-marketplace-token=tok-valid%2B%2F%3D&contactName={long}"
            )),
            400,
            "field-too-long",
        ),
        (
            "foreign origin",
            {
                let mut r = request(TOKEN_ONLY);
                r.headers.insert(
                    "origin",
                    HeaderValue::from_static("https://attacker.example"),
                );
                r
            },
            403,
            "origin-not-allowed",
        ),
    ];
    for (name, request, status, code) in cases {
        let (got_status, body) = answer(&handle(&state, request).await);
        assert_eq!(
            (got_status, body["code"].as_str()),
            (status, Some(code)),
            "{name}: {body}"
        );
    }
    let (_, expired) =
        answer(&handle(&state, request("x-amzn-marketplace-token=tok-expired")).await);
    assert!(
        expired["message"]
            .as_str()
            .unwrap()
            .contains("Return to AWS Marketplace and choose Set up your account again")
    );
    // Nothing was written by any refusal.
    assert!(scan(&env.west(), PROFILE_TABLE).await.is_empty());
    assert!(scan(&env.east(), SUBSCRIBERS_TABLE).await.is_empty());

    // ResolveCustomer failing past the SDK's retries: 503, no internals.
    env.sim
        .handle()
        .inject_fault(FaultSpec {
            kind: FaultKind::InternalError,
            count: 3,
            operation: FaultTarget::ResolveCustomer,
        })
        .unwrap();
    let (status, body) = token_only(&state).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (503, Some("temporarily-unavailable"))
    );
    assert!(
        !body["message"]
            .as_str()
            .unwrap()
            .contains("InternalServiceError")
    );
    // Once the service recovers, the same token registers.
    let (status, _) = token_only(&state).await;
    assert_eq!(status, 200);

    // The API disabled in the Region: also 503 (the buyer can only retry later).
    env.sim
        .handle()
        .inject_fault(FaultSpec {
            kind: FaultKind::Disabled,
            count: 1,
            operation: FaultTarget::ResolveCustomer,
        })
        .unwrap();
    let (status, _) = token_only(&state).await;
    assert_eq!(status, 503);
}

#[tokio::test]
async fn store_misconfiguration_fails_loud_on_moto() {
    let env = Env::start().await;

    // CUSTOMER_PROFILE_TABLE unset: 500 "Registration store not configured", nothing
    // resolved or written.
    let unconfigured = env.state(None);
    let (status, body) = token_only(&unconfigured).await;
    assert_eq!(status, 500);
    assert_eq!(body["message"], "Registration store not configured");
    assert_eq!(env.sim.handle().stats().resolve_customer_calls, 0);
    assert!(scan(&env.east(), SUBSCRIBERS_TABLE).await.is_empty());

    // A table name that does not exist (a wrong deploy): 500 without the AWS error text.
    let wrong = env.state(Some("awsmp-no-such-table"));
    let (status, body) = token_only(&wrong).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (500, Some("internal-error"))
    );
    assert!(!body.to_string().contains("ResourceNotFound"));
    assert!(scan(&env.east(), SUBSCRIBERS_TABLE).await.is_empty());
}

//! Buyers registering: the registration page posting its form to the register
//! function (retried while the answer is a server error), while usage flows and the
//! lifecycle events land.

use std::sync::Arc;

use aws_lambda_events::apigw::ApiGatewayProxyRequest;
use awsmp_core::memory::{ManualClock, MemoryCustomerResolver, MemoryProfileStore};
use awsmp_core::ports::ResolvedCustomer;
use serde_json::json;

use crate::executor::Task;
use crate::ports::FaultySubscribers;
use crate::scenario::{ACCOUNT, PRODUCT, REGION};
use crate::sim::yield_now;
use crate::stack::{Stack, lock};

/// The registration page's origin.
const PAGE_ORIGIN: &str = "https://register.example.com";

impl Stack {
    /// A buyer posting the registration page for `license_arn`, as the page does: once,
    /// and again (up to three times) while the answer is a server error.
    pub async fn register_buyer(&self, license_arn: &str) {
        let mut status = 0;
        for _ in 0..3 {
            let response =
                awsmp_register::handle(&self.register, register_request(license_arn)).await;
            status = u16::try_from(response.status_code).unwrap_or(0);
            if status < 500 {
                break;
            }
            yield_now().await;
        }
        lock(&self.registrations).push((license_arn.to_string(), status));
    }
}

/// The buyer of `license_arn` registering, as buyer number `n`.
pub fn task<'a>(stack: &'a Stack, n: usize, license_arn: &'a str) -> Task<'a> {
    Task::new(format!("register#{n}"), async move {
        for _ in 0..stack.sim.below(80) {
            yield_now().await;
        }
        stack.register_buyer(license_arn).await;
    })
}

/// The registration token the page carries for `license_arn`.
fn token_of(license_arn: &str) -> String {
    format!("tok-{}", &license_arn[license_arn.len() - 4..])
}

/// The page's form post for the buyer of `license_arn`.
fn register_request(license_arn: &str) -> ApiGatewayProxyRequest {
    let request = json!({
        "resource": "/register",
        "path": "/register",
        "httpMethod": "POST",
        "headers": {
            "content-type": "application/x-www-form-urlencoded",
            "origin": PAGE_ORIGIN
        },
        "multiValueHeaders": {},
        "requestContext": {"httpMethod": "POST", "resourcePath": "/register"},
        "body": format!(
            "x-amzn-marketplace-token={}&companyName=Example+Corp",
            token_of(license_arn)
        ),
        "isBase64Encoded": false
    });
    serde_json::from_value(request).unwrap_or_default()
}

/// The register function's state: `ResolveCustomer` knows every buyer's token; the
/// subscribers table is the faulty one the lifecycle handlers share.
pub fn state(
    licenses: &[&String],
    subscribers: Arc<FaultySubscribers>,
    profiles: &MemoryProfileStore,
    clock: &ManualClock,
) -> awsmp_register::State {
    let resolver = MemoryCustomerResolver::new();
    for license in licenses {
        resolver.insert(
            &token_of(license),
            Ok(ResolvedCustomer {
                license_arn: (*license).clone(),
                customer_aws_account_id: ACCOUNT.to_string(),
                product_code: PRODUCT.to_string(),
            }),
        );
    }
    let vars = [
        ("PRODUCT_CODE", PRODUCT),
        ("SUBSCRIBERS_TABLE", "subscribers"),
        ("SUBSCRIBERS_TABLE_REGION", "us-east-1"),
        ("CUSTOMER_PROFILE_TABLE", "profiles"),
        ("ALLOWED_REGISTRATION_FIELDS", "companyName"),
        ("RESOLVE_CUSTOMER_REGION", "us-east-1"),
        (
            "REGISTRATION_PAGE_URL",
            "https://register.example.com/index.html",
        ),
        ("ALLOWED_ORIGIN", PAGE_ORIGIN),
        ("AWS_REGION", REGION),
        ("STAGE", "dst"),
    ];
    let config = awsmp_register::Config::from_lookup(&|name| {
        vars.iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| (*v).to_string())
    });
    awsmp_register::State {
        // The settings above are valid; a change that breaks them fails every schedule.
        config: Arc::new(config.unwrap_or_else(|e| panic!("register config: {e}"))),
        resolver: Arc::new(resolver),
        subscribers,
        profiles: Some(Arc::new(profiles.clone())),
        clock: Arc::new(clock.clone()),
        metrics: Arc::new(awsmp_core::memory::RecordingMetrics::new()),
    }
}

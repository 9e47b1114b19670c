//! The seller's service gating access on the entitlement answer: it asks the usage
//! API's `GET /subscriptions/{licenseArn}` (its real handler, on the stack's subscribers
//! table) or, one time in two, `awsmp_usage::Entitlements` (the same answer in Rust)
//! about each buyer and about a license no event ever named, now and then without the
//! buyer account, while the pipeline runs under faults and after each settling step. What it was answered ([`Asked`]) is held to
//! [`crate::check::entitlement_answers`].

use std::sync::Mutex;

use awsmp_core::ports::Clock;
use awsmp_core::time::Instant;

use crate::actors::usage_api::get;
use crate::executor::Task;
use crate::scenario::{ACCOUNT, license};
use crate::sim::yield_now;
use crate::stack::{Stack, lock};

/// A license no lifecycle event or registration names: always `404`.
pub fn unknown_license() -> String {
    license(9)
}

/// One question and its answer.
#[derive(Debug, Clone)]
pub struct Asked {
    /// The license asked about.
    pub license: String,
    /// When (the simulation's clock, which the function's reads).
    pub at: Instant,
    /// Asked after a settling step's fault-free reconciliation and pipeline runs.
    pub settled: bool,
    /// Through which surface: `GET /subscriptions` or `awsmp_usage::Entitlements`.
    pub via: &'static str,
    /// The HTTP status.
    pub status: i64,
    /// The JSON answer.
    pub answer: serde_json::Value,
}

/// The gatekeeper of one stack, and everything it was answered.
pub struct Gatekeeper<'a> {
    stack: &'a Stack,
    licenses: Vec<String>,
    asked: Mutex<Vec<Asked>>,
}

impl<'a> Gatekeeper<'a> {
    /// A gatekeeper asking about `licenses` (and [`unknown_license`]) on `stack`.
    pub fn new(stack: &'a Stack, licenses: &[&String]) -> Self {
        let mut licenses: Vec<String> = licenses.iter().map(|l| (*l).clone()).collect();
        licenses.push(unknown_license());
        Gatekeeper {
            stack,
            licenses,
            asked: Mutex::new(Vec::new()),
        }
    }

    /// `GET /subscriptions/{license}` once, with the buyer account or (one time in
    /// three) without it, noted.
    async fn ask(&self, license: &str, settled: bool) {
        let at = self.stack.clock.now();
        let account = (self.stack.sim.below(3) != 0).then_some(ACCOUNT);
        let (via, (status, answer)) = if self.stack.sim.below(2) == 0 {
            (
                "GET /subscriptions",
                get_subscription(self.stack, license, account).await,
            )
        } else {
            (
                "awsmp_usage::Entitlements",
                in_rust(self.stack, license, account, at).await,
            )
        };
        lock(&self.asked).push(Asked {
            license: license.to_string(),
            at,
            settled,
            via,
            status,
            answer,
        });
    }

    /// Questions about random buyers at random moments of a phase under faults.
    pub fn task<'s>(&'s self, name: &str) -> Task<'s> {
        Task::new(name.to_string(), async move {
            for _ in 0..1 + self.stack.sim.below(6) {
                for _ in 0..self.stack.sim.below(40) {
                    yield_now().await;
                }
                let n = self.stack.sim.below(self.licenses.len());
                self.ask(&self.licenses[n], false).await;
            }
        })
    }

    /// After a settling step: one question about every license, fault-free.
    pub fn settled(&self) {
        let tasks = vec![Task::new("gatekeeper", async move {
            for license in &self.licenses {
                self.ask(license, true).await;
            }
        })];
        crate::executor::run(
            &self.stack.sim,
            tasks,
            false,
            crate::scenario::MAX_STEPS,
            &|_| {},
        );
    }

    /// Everything it was answered, in order.
    pub fn answers(&self) -> Vec<Asked> {
        lock(&self.asked).clone()
    }
}

/// `GET /subscriptions/{license}[?customerAWSAccountId=]` on the usage API's handler.
async fn get_subscription(
    stack: &Stack,
    license: &str,
    account: Option<&str>,
) -> (i64, serde_json::Value) {
    let query: Vec<(&str, &str)> = account
        .map(|account| ("customerAWSAccountId", account))
        .into_iter()
        .collect();
    get(
        &stack.usage_api(),
        format!("/subscriptions/{license}"),
        &query,
    )
    .await
}

/// The same question through `awsmp_usage::Entitlements` on the stack's subscribers
/// table, its answer in the route's terms: the JSON answer, or the status and `code`
/// its error is answered with.
async fn in_rust(
    stack: &Stack,
    license: &str,
    account: Option<&str>,
    now: awsmp_core::time::Instant,
) -> (i64, serde_json::Value) {
    use awsmp_usage::EntitlementError;
    let entitlements = awsmp_usage::Entitlements::with_store(stack.subscribers.clone());
    match entitlements.get_at(license, account, now).await {
        Ok(answer) => (200, serde_json::to_value(answer).unwrap_or_default()),
        Err(EntitlementError::Unknown { .. }) => {
            (404, serde_json::json!({"code": "UnknownSubscription"}))
        }
        Err(EntitlementError::Ambiguous { .. }) => {
            (400, serde_json::json!({"code": "AmbiguousLicense"}))
        }
        Err(EntitlementError::Store(e)) => (500, serde_json::json!({"code": e.to_string()})),
    }
}

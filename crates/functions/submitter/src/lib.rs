//! The submitter Lambda (`rate(1 minute)`, reserved concurrency 1): takes "now" from
//! the scheduled event and drains pending aggregated records to `BatchMeterUsage`
//! (or, in dry-run mode, marks test accounts' records `DryRunSubmitted` without
//! calling it) until just before the next tick (`awsmp_core::submit::schedule`). The
//! use case is `awsmp_core::submit`.

use std::sync::Arc;

use aws_config::SdkConfig;
use aws_lambda_events::eventbridge::EventBridgeEvent;
use awsmp_core::aggregate::ZeroQuantityPolicy;
use awsmp_core::retention::Retention;
use awsmp_core::submit::schedule::{DEADLINE_MARGIN_SECONDS, run_budget};
use awsmp_core::submit::{
    DeploymentMode, MeteringMode, PENDING_PAGE_RECORDS, SubmitPorts, SubmitReport, SubmitSettings,
    submit,
};
use awsmp_lambda::{ConfigError, EnvReader, finish_run, invocation_budget, scheduled_now};
use lambda_runtime::LambdaEvent;
use tracing::info;

/// Why an invocation failed (the schedule runs again in a minute): the failure of
/// every scheduled pipeline run.
pub use awsmp_lambda::RunError as HandlerError;

/// Every environment variable this function reads (its template sets exactly these).
pub const ENV_VARS: &[&str] = &[
    "PRODUCT_CODE",
    "SUBSCRIBERS_TABLE",
    "SUBSCRIBERS_TABLE_REGION",
    "AGGREGATED_TABLE",
    "ZERO_QUANTITY_POLICY",
    "METERING_MODE",
    "TEST_ACCOUNT_ALLOWLIST",
    "DEPLOYMENT_MODE",
    "METERING_REQUESTS_PER_SECOND",
    "STAGE",
    "DATA_RETENTION_DAYS",
];

/// The account-and-Region `BatchMeterUsage` quota, requests per second, that every
/// product's submitter in the Region shares.
pub const QUOTA_REQUESTS_PER_SECOND: u32 = 10;

/// The submitter's configuration, read once at init.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `PRODUCT_CODE`.
    pub product_code: String,
    /// `SUBSCRIBERS_TABLE`.
    pub subscribers_table: String,
    /// `SUBSCRIBERS_TABLE_REGION`.
    pub subscribers_table_region: String,
    /// `AGGREGATED_TABLE`.
    pub aggregated_table: String,
    /// `ZERO_QUANTITY_POLICY` (default `defer`).
    pub zero_policy: ZeroQuantityPolicy,
    /// `METERING_MODE` + `TEST_ACCOUNT_ALLOWLIST`, validated together.
    pub mode: MeteringMode,
    /// `DEPLOYMENT_MODE`.
    pub deployment: DeploymentMode,
    /// `METERING_REQUESTS_PER_SECOND` (1..=10, default 10): this stack's share of the
    /// quota; its calls are spaced `1 s / share` apart.
    pub requests_per_second: u32,
    /// `STAGE`: the stack's stage, a dimension of every metric beside the product.
    pub stage: String,
    /// `DATA_RETENTION_DAYS` (0 = keep everything, the default; else at least
    /// `MIN_RETENTION_DAYS`): the `expiresAt` of every item this function makes final.
    pub retention: Retention,
}

impl Config {
    /// Reads the variables through `lookup` (the process environment in Lambda; tests
    /// pass a map); every problem is reported at once, including a live run with a test
    /// allowlist and a dry run without one.
    pub fn from_lookup(lookup: &dyn Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let mut env = EnvReader::new(lookup);
        let product_code = env.product_code();
        let subscribers_table = env.subscribers_table();
        let subscribers_table_region = env.subscribers_table_region();
        let aggregated_table = env.aggregated_table();
        let zero_policy = env.zero_quantity_policy();
        let mode_text = env.required("METERING_MODE");
        let allowlist = env.list("TEST_ACCOUNT_ALLOWLIST");
        let deployment_text = env.required("DEPLOYMENT_MODE");
        let requests_per_second =
            env.parsed_or("METERING_REQUESTS_PER_SECOND", QUOTA_REQUESTS_PER_SECOND);
        let stage = env.stage();
        let retention = env.retention();
        if !(1..=QUOTA_REQUESTS_PER_SECOND).contains(&requests_per_second) {
            env.problem(format!(
                "METERING_REQUESTS_PER_SECOND must be 1..={QUOTA_REQUESTS_PER_SECOND} (this \
                 stack's share of the account's {QUOTA_REQUESTS_PER_SECOND} requests/s in the \
                 Region), got {requests_per_second}"
            ));
        }
        let mode = if mode_text.is_empty() {
            MeteringMode::Live
        } else {
            MeteringMode::from_parts(&mode_text, &allowlist).unwrap_or_else(|e| {
                env.problem(e.to_string());
                MeteringMode::Live
            })
        };
        let deployment = if deployment_text.is_empty() {
            DeploymentMode::Full
        } else {
            deployment_text.parse().unwrap_or_else(
                |e: awsmp_core::submit::InvalidDeploymentMode| {
                    env.problem(e.to_string());
                    DeploymentMode::Full
                },
            )
        };
        env.finish(Config {
            product_code,
            subscribers_table,
            subscribers_table_region,
            aggregated_table,
            zero_policy,
            mode,
            deployment,
            requests_per_second,
            stage,
            retention,
        })
    }

    /// The use case's settings.
    pub fn settings(&self) -> SubmitSettings {
        let mut settings = SubmitSettings::new(
            self.product_code.clone(),
            self.mode.clone(),
            self.zero_policy,
            self.deployment,
        );
        settings.min_call_interval = call_interval(self.requests_per_second);
        settings.retention = self.retention;
        settings
    }
}

/// The spacing of calls for a share of `requests_per_second` (clamped to 1..=10).
pub fn call_interval(requests_per_second: u32) -> std::time::Duration {
    let share = requests_per_second.clamp(1, QUOTA_REQUESTS_PER_SECOND);
    std::time::Duration::from_millis(1000 / u64::from(share))
}

/// Handler state: settings plus the ports, cheap to clone.
#[derive(Clone)]
pub struct State {
    /// Use-case settings.
    pub settings: Arc<SubmitSettings>,
    /// The aggregated table, the subscribers table (cross-Region), `BatchMeterUsage`,
    /// metrics and the clock (pacing, backoff, deadline; fallback "now"):
    /// [`awsmp_aws::SystemClock`] in Lambda, whose milliseconds the 100 ms pacing needs.
    pub ports: SubmitPorts,
}

impl State {
    /// Builds the AWS clients once, on `sdk` (the subscribers table's in its own
    /// Region), for `config`.
    pub fn connect(sdk: &SdkConfig, config: &Config) -> Self {
        let subscribers_sdk = awsmp_aws::in_region(sdk, &config.subscribers_table_region);
        State {
            settings: Arc::new(config.settings()),
            ports: SubmitPorts {
                // The submitter never commits aggregations: no usage table.
                aggregated: Arc::new(
                    awsmp_aws::DynamoAggregatedStore::new(
                        aws_sdk_dynamodb::Client::new(sdk),
                        config.aggregated_table.clone(),
                    )
                    .with_page_limit(i32::try_from(PENDING_PAGE_RECORDS).unwrap_or(i32::MAX)),
                ),
                subscribers: Arc::new(awsmp_aws::DynamoSubscriberStore::new(
                    aws_sdk_dynamodb::Client::new(&subscribers_sdk),
                    config.subscribers_table.clone(),
                )),
                metering: Arc::new(awsmp_aws::SdkMeteringApi::new(awsmp_aws::metering_client(
                    sdk,
                ))),
                metrics: Arc::new(awsmp_aws::EmfMetrics::stdout(
                    &config.product_code,
                    &config.stage,
                )),
                clock: Arc::new(awsmp_aws::SystemClock),
            },
        }
    }
}

/// One scheduled run.
pub async fn handler(
    state: &State,
    event: LambdaEvent<EventBridgeEvent>,
) -> Result<SubmitReport, HandlerError> {
    let now = scheduled_now(&event.payload, state.ports.clock.as_ref());
    let budget = run_budget(
        now,
        state.ports.clock.now(),
        invocation_budget(&event.context, DEADLINE_MARGIN_SECONDS),
    );
    let result = submit(now, &state.settings, &state.ports, budget)
        .await
        .inspect(|report| {
            info!(success = report.success, stopped = ?report.stopped, "submitter run done");
        });
    finish_run("submitter run", result)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&'static str, &str)]) -> HashMap<&'static str, String> {
        let mut base: HashMap<&'static str, String> = [
            ("PRODUCT_CODE", "prod-abc123"),
            ("SUBSCRIBERS_TABLE", "awsmp-subscribers-test"),
            ("SUBSCRIBERS_TABLE_REGION", "us-east-1"),
            (
                "AGGREGATED_TABLE",
                "awsmp-prod-abc123-aggregated-usage-test",
            ),
            ("METERING_MODE", "live"),
            ("DEPLOYMENT_MODE", "full"),
            ("STAGE", "test"),
        ]
        .into_iter()
        .map(|(k, v)| (k, v.to_string()))
        .collect();
        for (k, v) in pairs {
            base.insert(k, v.to_string());
        }
        base
    }

    #[test]
    fn reads_exactly_its_declared_variables() {
        let env = env(&[]);
        let asked = std::cell::RefCell::new(Vec::new());
        let config = Config::from_lookup(&|n| {
            asked.borrow_mut().push(n.to_string());
            env.get(n).cloned()
        })
        .unwrap();
        assert_eq!(config.mode, MeteringMode::Live);
        assert_eq!(config.zero_policy, ZeroQuantityPolicy::Defer);
        let mut asked = asked.into_inner();
        asked.sort();
        let mut declared: Vec<String> = ENV_VARS.iter().map(|s| s.to_string()).collect();
        declared.sort();
        assert_eq!(asked, declared);
    }

    #[test]
    fn refuses_live_with_an_allowlist_and_dry_run_without_one() {
        let live = env(&[("TEST_ACCOUNT_ALLOWLIST", "111122223333")]);
        let err = Config::from_lookup(&|n| live.get(n).cloned()).unwrap_err();
        assert!(err.to_string().contains("refuses to start"), "{err}");
        let dry = env(&[("METERING_MODE", "dry-run")]);
        let err = Config::from_lookup(&|n| dry.get(n).cloned()).unwrap_err();
        assert!(
            err.to_string().contains("requires TEST_ACCOUNT_ALLOWLIST"),
            "{err}"
        );
        let ok = env(&[
            ("METERING_MODE", "dry-run"),
            ("TEST_ACCOUNT_ALLOWLIST", "111122223333, 444455556666"),
        ]);
        let config = Config::from_lookup(&|n| ok.get(n).cloned()).unwrap();
        assert!(
            matches!(config.mode, MeteringMode::DryRun { ref allowlist } if allowlist.len() == 2)
        );
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let bad = env(&[
            ("DEPLOYMENT_MODE", "partial"),
            ("ZERO_QUANTITY_POLICY", "sometimes"),
            ("METERING_MODE", "maybe"),
            ("AGGREGATED_TABLE", ""),
            ("STAGE", "Prod"),
        ]);
        let err = Config::from_lookup(&|n| bad.get(n).cloned()).unwrap_err();
        assert_eq!(err.problems.len(), 5, "{err}");
        assert!(err.to_string().contains("STAGE=\"Prod\""), "{err}");
        let direct = env(&[("DEPLOYMENT_MODE", "direct-submit")]);
        let config = Config::from_lookup(&|n| direct.get(n).cloned()).unwrap();
        assert_eq!(config.deployment, DeploymentMode::DirectSubmit);
    }
}

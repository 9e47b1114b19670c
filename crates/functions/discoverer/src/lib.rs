//! The discoverer Lambda (`rate(15 minutes)`): takes "now" from the scheduled event,
//! walks the completed hours through the sparse `metering_pending` index, and enqueues
//! one aggregation message per group (deprovisioning flushes on their own queue first).
//! The use case is `awsmp_core::discover`; this crate is config and wiring.

use std::sync::Arc;

use aws_config::SdkConfig;
use aws_lambda_events::eventbridge::EventBridgeEvent;
use awsmp_core::discover::{DiscoverPorts, DiscoverReport, DiscoverSettings, discover};
use awsmp_core::retention::Retention;
use awsmp_core::time::MeteringLockHours;
use awsmp_lambda::{ConfigError, EnvReader, finish_run, invocation_budget, scheduled_now};
use lambda_runtime::LambdaEvent;
use tracing::info;

/// Why an invocation failed (the schedule retries on its next tick): the failure of
/// every scheduled pipeline run.
pub use awsmp_lambda::RunError as HandlerError;

/// Every environment variable this function reads (its template sets exactly these).
pub const ENV_VARS: &[&str] = &[
    "PRODUCT_CODE",
    "SUBSCRIBERS_TABLE",
    "SUBSCRIBERS_TABLE_REGION",
    "USAGE_TABLE",
    "WORK_QUEUE_URL",
    "DEPROVISION_WORK_QUEUE_URL",
    "METERING_LOCK_HOURS",
    "FLUSH_MARGIN_MINUTES",
    "STAGE",
    "DATA_RETENTION_DAYS",
    "CUSTOMER_PROFILE_TABLE",
    "PROFILE_RETENTION_DAYS",
];

/// `PROFILE_RETENTION_DAYS`' accepted range (0 = keep profiles for ever).
const PROFILE_RETENTION_RANGE: std::ops::RangeInclusive<i64> = 0..=3653;

/// Stop starting new pages this long before the Lambda deadline.
const DEADLINE_MARGIN_SECONDS: i64 = 10;

/// The flush margin's accepted range in minutes: the final-usage window is one hour.
const FLUSH_MARGIN_RANGE: std::ops::RangeInclusive<i64> = 0..=60;

/// The discoverer's configuration, read once at init.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `PRODUCT_CODE`.
    pub product_code: String,
    /// `SUBSCRIBERS_TABLE`.
    pub subscribers_table: String,
    /// `SUBSCRIBERS_TABLE_REGION` (the subscribers table lives in us-east-1).
    pub subscribers_table_region: String,
    /// `USAGE_TABLE`.
    pub usage_table: String,
    /// `WORK_QUEUE_URL`.
    pub work_queue_url: String,
    /// `DEPROVISION_WORK_QUEUE_URL`.
    pub deprovision_queue_url: String,
    /// `METERING_LOCK_HOURS` (1..=20, default 1).
    pub lock: MeteringLockHours,
    /// `FLUSH_MARGIN_MINUTES` (0..=60, default 6).
    pub flush_margin_minutes: i64,
    /// `STAGE`: the stack's stage, a dimension of every metric beside the product.
    pub stage: String,
    /// `DATA_RETENTION_DAYS` (0 = keep everything, the default; else at least
    /// `MIN_RETENTION_DAYS`): the `expiresAt` of every item this function makes final.
    pub retention: Retention,
    /// `CUSTOMER_PROFILE_TABLE`: where a deprovisioned buyer's profile expiry is set.
    pub customer_profile_table: Option<String>,
    /// `PROFILE_RETENTION_DAYS` (0..=3653, default 0 = never): days a buyer's profile is
    /// kept once the license's deprovisioning window ends. Needs
    /// `CUSTOMER_PROFILE_TABLE`.
    pub profile_retention_days: i64,
}

impl Config {
    /// Reads the variables through `lookup` (the process environment in Lambda; tests
    /// pass a map); every problem is reported at once.
    pub fn from_lookup(lookup: &dyn Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let mut env = EnvReader::new(lookup);
        let config = Config {
            product_code: env.product_code(),
            subscribers_table: env.subscribers_table(),
            subscribers_table_region: env.subscribers_table_region(),
            usage_table: env.usage_table(),
            work_queue_url: env.required("WORK_QUEUE_URL"),
            deprovision_queue_url: env.required("DEPROVISION_WORK_QUEUE_URL"),
            lock: env.metering_lock(),
            flush_margin_minutes: env.parsed_or(
                "FLUSH_MARGIN_MINUTES",
                awsmp_core::discover::DEFAULT_FLUSH_MARGIN_MINUTES,
            ),
            stage: env.stage(),
            retention: env.retention(),
            customer_profile_table: env.optional("CUSTOMER_PROFILE_TABLE"),
            profile_retention_days: env.parsed_or("PROFILE_RETENTION_DAYS", 0),
        };
        if !PROFILE_RETENTION_RANGE.contains(&config.profile_retention_days) {
            env.problem(format!(
                "PROFILE_RETENTION_DAYS={} is outside 0..=3653 (0 keeps profiles)",
                config.profile_retention_days
            ));
        } else if config.profile_retention_days > 0 && config.customer_profile_table.is_none() {
            env.problem(
                "PROFILE_RETENTION_DAYS is set but CUSTOMER_PROFILE_TABLE is not: the profiles to expire are in that table".to_string(),
            );
        }
        if !FLUSH_MARGIN_RANGE.contains(&config.flush_margin_minutes) {
            env.problem(format!(
                "FLUSH_MARGIN_MINUTES={} is outside 0..=60 (the final-usage window is one hour)",
                config.flush_margin_minutes
            ));
        }
        env.finish(config)
    }

    /// The use case's settings.
    pub fn settings(&self) -> DiscoverSettings {
        let mut settings = DiscoverSettings::new(self.product_code.clone(), self.lock);
        settings.flush_margin = chrono::Duration::minutes(self.flush_margin_minutes);
        settings.retention = self.retention;
        settings.profile_retention = (self.profile_retention_days > 0)
            .then(|| chrono::Duration::days(self.profile_retention_days));
        settings
    }
}

/// Handler state: settings plus the ports, cheap to clone.
#[derive(Clone)]
pub struct State {
    /// Use-case settings derived from the config.
    pub settings: Arc<DiscoverSettings>,
    /// The usage table, the subscribers table (cross-Region), the work and
    /// deprovisioning-flush queues, metrics and the clock (fallback "now", deadline
    /// checks).
    pub ports: DiscoverPorts,
}

impl State {
    /// Builds the AWS clients once, on `sdk` (the subscribers table's in its own
    /// Region), for `config`.
    pub fn connect(sdk: &SdkConfig, config: &Config) -> Self {
        let subscribers_sdk = awsmp_aws::in_region(sdk, &config.subscribers_table_region);
        let dynamodb = aws_sdk_dynamodb::Client::new(sdk);
        let sqs = aws_sdk_sqs::Client::new(sdk);
        let profiles = config
            .customer_profile_table
            .as_ref()
            .filter(|_| config.profile_retention_days > 0)
            .map(|table| {
                Arc::new(awsmp_aws::DynamoProfileStore::new(dynamodb.clone(), table))
                    as Arc<dyn awsmp_core::ports::ProfileStore>
            });
        State {
            settings: Arc::new(config.settings()),
            ports: DiscoverPorts {
                usage: Arc::new(awsmp_aws::DynamoUsageStore::new(
                    dynamodb,
                    config.usage_table.clone(),
                )),
                subscribers: Arc::new(awsmp_aws::DynamoSubscriberStore::new(
                    aws_sdk_dynamodb::Client::new(&subscribers_sdk),
                    config.subscribers_table.clone(),
                )),
                work_queue: Arc::new(awsmp_aws::SqsWorkQueue::new(
                    sqs.clone(),
                    config.work_queue_url.clone(),
                )),
                deprovision_queue: Arc::new(awsmp_aws::SqsWorkQueue::new(
                    sqs,
                    config.deprovision_queue_url.clone(),
                )),
                profiles,
                metrics: Arc::new(awsmp_aws::EmfMetrics::stdout(
                    &config.product_code,
                    &config.stage,
                )),
                clock: Arc::new(awsmp_aws::SystemClock),
            },
        }
    }
}

/// One scheduled run: "now" is the event's `time` (else the clock), the budget is the
/// invocation deadline minus a margin.
pub async fn handler(
    state: &State,
    event: LambdaEvent<EventBridgeEvent>,
) -> Result<DiscoverReport, HandlerError> {
    let now = scheduled_now(&event.payload, state.ports.clock.as_ref());
    let budget = invocation_budget(&event.context, DEADLINE_MARGIN_SECONDS);
    info!(now = %now, "discovery run");
    finish_run(
        "discovery",
        discover(now, &state.settings, &state.ports, budget).await,
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn full_env() -> HashMap<&'static str, String> {
        ENV_VARS
            .iter()
            .map(|name| (*name, format!("value-of-{name}")))
            .chain([
                ("METERING_LOCK_HOURS", "2".to_string()),
                ("FLUSH_MARGIN_MINUTES", "15".to_string()),
                ("STAGE", "prod".to_string()),
                ("DATA_RETENTION_DAYS", "7".to_string()),
                ("PROFILE_RETENTION_DAYS", "30".to_string()),
            ])
            .collect()
    }

    #[test]
    fn reads_every_variable_it_declares_and_nothing_else() {
        let env = full_env();
        let asked = std::cell::RefCell::new(Vec::new());
        let lookup = |name: &str| {
            asked.borrow_mut().push(name.to_string());
            env.get(name).cloned()
        };
        let config = Config::from_lookup(&lookup).unwrap();
        assert_eq!(config.lock.hours(), 2);
        assert_eq!(
            config.settings().profile_retention,
            Some(chrono::Duration::days(30))
        );
        assert_eq!(
            config.settings().flush_margin,
            chrono::Duration::minutes(15)
        );
        let mut asked = asked.into_inner();
        asked.sort();
        let mut declared: Vec<String> = ENV_VARS.iter().map(|s| s.to_string()).collect();
        declared.sort();
        assert_eq!(asked, declared);
    }

    #[test]
    fn defaults_apply_when_optional_knobs_are_unset() {
        let mut env = full_env();
        env.remove("METERING_LOCK_HOURS");
        env.remove("FLUSH_MARGIN_MINUTES");
        env.remove("DATA_RETENTION_DAYS");
        env.remove("PROFILE_RETENTION_DAYS");
        env.remove("CUSTOMER_PROFILE_TABLE");
        let config = Config::from_lookup(&|n| env.get(n).cloned()).unwrap();
        assert_eq!(config.settings().profile_retention, None);
        assert_eq!(config.lock, MeteringLockHours::DEFAULT);
        assert_eq!(config.retention, awsmp_core::retention::Retention::FOREVER);
        assert_eq!(config.flush_margin_minutes, 6);
    }

    #[test]
    fn reports_every_problem_at_once() {
        let env: HashMap<&str, String> = [
            ("METERING_LOCK_HOURS", "0".to_string()),
            ("FLUSH_MARGIN_MINUTES", "90".to_string()),
            ("PROFILE_RETENTION_DAYS", "30".to_string()),
        ]
        .into();
        let err = Config::from_lookup(&|n| env.get(n).cloned()).unwrap_err();
        let text = err.to_string();
        for name in [
            "PRODUCT_CODE",
            "USAGE_TABLE",
            "WORK_QUEUE_URL",
            "DEPROVISION_WORK_QUEUE_URL",
            "STAGE",
        ] {
            assert!(text.contains(name), "{text}");
        }
        assert!(text.contains("METERING_LOCK_HOURS"), "{text}");
        assert!(text.contains("FLUSH_MARGIN_MINUTES=90"), "{text}");
        assert!(
            text.contains("PROFILE_RETENTION_DAYS is set but CUSTOMER_PROFILE_TABLE is not"),
            "{text}"
        );
    }
}

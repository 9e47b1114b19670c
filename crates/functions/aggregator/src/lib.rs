//! The aggregator Lambda (SQS, partial batch failures): for each work message, counts
//! the group's pending raw rows into its aggregated record with the atomic commit and
//! enqueues cleanup. The use case is `awsmp_core::aggregate::run`; this crate is
//! config and wiring.

use std::sync::Arc;

use aws_config::SdkConfig;
use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent};
use awsmp_core::aggregate::ZeroQuantityPolicy;
use awsmp_core::aggregate::run::{AggregatePorts, AggregateSettings, aggregate_group};
use awsmp_core::retention::Retention;
use awsmp_core::time::MeteringLockHours;
use awsmp_lambda::{BatchError, ConfigError, EnvReader, invocation_budget, work_batch};
use lambda_runtime::LambdaEvent;
use tracing::info;

/// Why one message was not handled now: the failure of every work-message function.
pub use awsmp_lambda::MessageError;

/// Every environment variable this function reads (its template sets exactly these).
pub const ENV_VARS: &[&str] = &[
    "PRODUCT_CODE",
    "USAGE_TABLE",
    "AGGREGATED_TABLE",
    "CLEANUP_QUEUE_URL",
    "METERING_LOCK_HOURS",
    "ZERO_QUANTITY_POLICY",
    "DATA_RETENTION_DAYS",
];

/// The aggregator's configuration, read once at init.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `PRODUCT_CODE`.
    pub product_code: String,
    /// `USAGE_TABLE`.
    pub usage_table: String,
    /// `AGGREGATED_TABLE`.
    pub aggregated_table: String,
    /// `CLEANUP_QUEUE_URL`.
    pub cleanup_queue_url: String,
    /// `METERING_LOCK_HOURS` (1..=20, default 1).
    pub lock: MeteringLockHours,
    /// `ZERO_QUANTITY_POLICY` (default `defer`).
    pub zero_policy: ZeroQuantityPolicy,
    /// `DATA_RETENTION_DAYS` (0 = keep everything, the default; else at least
    /// `MIN_RETENTION_DAYS`): the `expiresAt` of every item this function makes final.
    pub retention: Retention,
}

impl Config {
    /// Reads the variables through `lookup` (the process environment in Lambda; tests
    /// pass a map); every problem is reported at once.
    pub fn from_lookup(lookup: &dyn Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let mut env = EnvReader::new(lookup);
        let config = Config {
            product_code: env.product_code(),
            usage_table: env.usage_table(),
            aggregated_table: env.aggregated_table(),
            cleanup_queue_url: env.required("CLEANUP_QUEUE_URL"),
            lock: env.metering_lock(),
            zero_policy: env.zero_quantity_policy(),
            retention: env.retention(),
        };
        env.finish(config)
    }

    /// The use case's settings.
    pub fn settings(&self) -> AggregateSettings {
        AggregateSettings {
            product_code: self.product_code.clone(),
            lock: self.lock,
            zero_policy: self.zero_policy,
            retention: self.retention,
        }
    }
}

/// Handler state: settings plus the ports, cheap to clone.
#[derive(Clone)]
pub struct State {
    /// Use-case settings.
    pub settings: Arc<AggregateSettings>,
    /// The usage and aggregated tables, the cleanup queue and the clock ("now" of each
    /// message, backoff sleeps).
    pub ports: AggregatePorts,
}

impl State {
    /// Builds the AWS clients once, on `sdk`, for `config`.
    pub fn connect(sdk: &SdkConfig, config: &Config) -> Self {
        let dynamodb = aws_sdk_dynamodb::Client::new(sdk);
        State {
            settings: Arc::new(config.settings()),
            ports: AggregatePorts {
                usage: Arc::new(awsmp_aws::DynamoUsageStore::new(
                    dynamodb.clone(),
                    config.usage_table.clone(),
                )),
                aggregated: Arc::new(
                    awsmp_aws::DynamoAggregatedStore::new(
                        dynamodb,
                        config.aggregated_table.clone(),
                    )
                    .claiming_rows_of(config.usage_table.clone()),
                ),
                cleanup_queue: Arc::new(awsmp_aws::SqsWorkQueue::new(
                    aws_sdk_sqs::Client::new(sdk),
                    config.cleanup_queue_url.clone(),
                )),
                clock: Arc::new(awsmp_aws::SystemClock),
            },
        }
    }
}

/// No message is started with less than this left before the invocation deadline: a
/// group of many commits, each retried, must finish (or fail cleanly) before Lambda
/// stops the function mid-fold.
pub const DEADLINE_MARGIN_SECONDS: i64 = 30;

/// Handles one SQS batch. Each failed message (malformed body, store failure, record
/// in flight, contention, refused cleanup) is reported by id and redelivered by SQS;
/// the others are deleted. Messages not started before the deadline margin are
/// reported as failures too (redelivered, never lost). A record without a message id
/// fails the whole batch before any message is handled ([`sqs_batch`](awsmp_lambda::sqs_batch)).
pub async fn handler(
    state: &State,
    event: LambdaEvent<SqsEvent>,
) -> Result<SqsBatchResponse, BatchError> {
    let budget = invocation_budget(&event.context, DEADLINE_MARGIN_SECONDS);
    work_batch(
        &event.payload,
        state.ports.clock.as_ref(),
        budget,
        |message, now| async move {
            let report = aggregate_group(&message, now, &state.settings, &state.ports).await?;
            info!(
                counted = report.counted,
                rejected = report.rejected,
                "message done"
            );
            Ok(())
        },
    )
    .await
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn reads_exactly_its_declared_variables() {
        let env: HashMap<&str, String> = ENV_VARS
            .iter()
            .map(|n| (*n, format!("v-{n}")))
            .chain([
                ("METERING_LOCK_HOURS", "4".to_string()),
                ("ZERO_QUANTITY_POLICY", "skip".to_string()),
                ("DATA_RETENTION_DAYS", "7".to_string()),
            ])
            .collect();
        let asked = std::cell::RefCell::new(Vec::new());
        let config = Config::from_lookup(&|n| {
            asked.borrow_mut().push(n.to_string());
            env.get(n).cloned()
        })
        .unwrap();
        assert_eq!(config.zero_policy, ZeroQuantityPolicy::Skip);
        assert_eq!(config.lock.hours(), 4);
        assert_ne!(config.retention, awsmp_core::retention::Retention::FOREVER);
        let mut asked = asked.into_inner();
        asked.sort();
        let mut declared: Vec<String> = ENV_VARS.iter().map(|s| s.to_string()).collect();
        declared.sort();
        assert_eq!(asked, declared);
    }

    #[test]
    fn bad_values_are_reported_together() {
        let env: HashMap<&str, String> = [
            ("METERING_LOCK_HOURS", "21".to_string()),
            ("ZERO_QUANTITY_POLICY", "never".to_string()),
        ]
        .into();
        let err = Config::from_lookup(&|n| env.get(n).cloned()).unwrap_err();
        assert_eq!(err.problems.len(), 6, "{err}");
        assert!(err.to_string().contains("ZERO_QUANTITY_POLICY"));
        assert!(err.to_string().contains("CLEANUP_QUEUE_URL"));
    }
}

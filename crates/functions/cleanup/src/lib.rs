//! The cleanup Lambda (SQS, partial batch failures): finalizes the raw rows an
//! aggregation message names (`Aggregated` only for rows carrying the claim,
//! `RejectedClientSide` with the reason otherwise), retrying throttled writes with
//! jittered backoff. The use case is `awsmp_core::cleanup`.

use std::sync::Arc;

use aws_config::SdkConfig;
use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent};
use awsmp_core::cleanup::{CleanupPorts, finalize_named_rows};
use awsmp_core::pipeline::budget::Budget;
use awsmp_core::retention::Retention;
use awsmp_lambda::{BatchError, ConfigError, EnvReader, work_batch};
use lambda_runtime::LambdaEvent;
use tracing::info;

/// Why one message was not handled now: the failure of every work-message function.
pub use awsmp_lambda::MessageError;

/// Every environment variable this function reads (its template sets exactly these).
pub const ENV_VARS: &[&str] = &[
    "USAGE_TABLE",
    "PRODUCT_CODE",
    "STAGE",
    "DATA_RETENTION_DAYS",
];

/// The cleanup function's configuration, read once at init.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `USAGE_TABLE`.
    pub usage_table: String,
    /// `PRODUCT_CODE` and `STAGE`: the dimensions of every metric (nothing else reads them).
    pub product_code: String,
    /// `STAGE`.
    pub stage: String,
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
            usage_table: env.usage_table(),
            product_code: env.product_code(),
            stage: env.stage(),
            retention: env.retention(),
        };
        env.finish(config)
    }
}

/// Handler state: the ports, cheap to clone.
#[derive(Clone)]
pub struct State {
    /// The usage table, metrics and the clock ("now" of each message, backoff sleeps).
    pub ports: CleanupPorts,
    /// `DATA_RETENTION_DAYS`: the `expiresAt` of the rows it finalizes.
    pub retention: Retention,
}

impl State {
    /// Builds the AWS clients once, on `sdk`, for `config`.
    pub fn connect(sdk: &SdkConfig, config: &Config) -> Self {
        State {
            ports: CleanupPorts {
                usage: Arc::new(awsmp_aws::DynamoUsageStore::new(
                    aws_sdk_dynamodb::Client::new(sdk),
                    config.usage_table.clone(),
                )),
                metrics: Arc::new(awsmp_aws::EmfMetrics::stdout(
                    &config.product_code,
                    &config.stage,
                )),
                clock: Arc::new(awsmp_aws::SystemClock),
            },
            retention: config.retention,
        }
    }
}

/// Handles one SQS batch; failed messages (malformed, wrong kind, store failure after
/// retries) are reported by id for redelivery. A record without a message id fails the
/// whole batch before any message is handled ([`sqs_batch`](awsmp_lambda::sqs_batch)).
pub async fn handler(
    state: &State,
    event: LambdaEvent<SqsEvent>,
) -> Result<SqsBatchResponse, BatchError> {
    // Cleanup's writes are short and idempotent: no deadline margin is kept.
    work_batch(
        &event.payload,
        state.ports.clock.as_ref(),
        Budget::UNLIMITED,
        |message, now| async move {
            let report = finalize_named_rows(&message, now, state.retention, &state.ports).await?;
            info!(
                aggregated = report.aggregated,
                rejected = report.rejected,
                "cleanup done"
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

    #[test]
    fn reads_exactly_its_declared_variables() {
        let asked = std::cell::RefCell::new(Vec::new());
        let config = Config::from_lookup(&|n| {
            asked.borrow_mut().push(n.to_string());
            Some(match n {
                "STAGE" => "test".to_string(),
                "PRODUCT_CODE" => "abc123".to_string(),
                "DATA_RETENTION_DAYS" => "7".to_string(),
                _ => "awsmp-prod-usage-test".to_string(),
            })
        })
        .unwrap();
        assert_eq!(config.usage_table, "awsmp-prod-usage-test");
        assert_eq!(
            (config.product_code.as_str(), config.stage.as_str()),
            ("abc123", "test")
        );
        assert_eq!(asked.into_inner(), ENV_VARS);
        assert_ne!(config.retention, Retention::FOREVER);
        let err = Config::from_lookup(&|_| None).unwrap_err();
        // DATA_RETENTION_DAYS is optional (keep everything when unset).
        for name in ENV_VARS.iter().filter(|n| **n != "DATA_RETENTION_DAYS") {
            assert!(
                err.to_string().contains(&format!("{name} is not set")),
                "{err}"
            );
        }
        let bad_stage =
            Config::from_lookup(&|n| Some(if n == "STAGE" { "Prod" } else { "x" }.to_string()))
                .unwrap_err();
        assert!(
            bad_stage.to_string().contains("STAGE=\"Prod\""),
            "{bad_stage}"
        );
    }
}

//! The deprovision-cleanup Lambda (events stack, `rate(15 minutes)`): runs the use
//! case [`awsmp_core::pipeline::deprovision`] (every subscriber still `deprovisioning`
//! whose `deprovisioningExpiry` has passed is set `subscriptionStatus=inactive`, each
//! write conditional on the version read) and fails the invocation, for the error
//! metric and its alarm, when a row could not be closed. "Now" is the scheduled event's
//! `time`, so any run can be replayed; without one, the clock.

pub mod error;

use std::sync::Arc;

use aws_config::SdkConfig;
use aws_lambda_events::eventbridge::EventBridgeEvent;
use awsmp_aws::lambda::{ConfigError, EnvReader, process_env, scheduled_now};
use awsmp_core::ports::{Clock, SubscriberStore};
use awsmp_core::time::Instant;
use lambda_runtime::LambdaEvent;

pub use awsmp_core::pipeline::deprovision::{
    CleanupReport, MAX_WRITE_ATTEMPTS, RowFailure, close_expired,
};
pub use error::CleanupError;

/// Every variable the template sets for this function.
pub const ENV_VARS: &[&str] = &["SUBSCRIBERS_TABLE"];

/// The deprovision-cleanup function's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `SUBSCRIBERS_TABLE`: the subscribers table.
    pub subscribers_table: String,
}

impl Config {
    /// Reads the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(&process_env)
    }

    /// Reads through `lookup` (tests pass a map).
    pub fn from_lookup(lookup: &dyn Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let mut env = EnvReader::new(lookup);
        let subscribers_table = env.required("SUBSCRIBERS_TABLE");
        env.finish(Config { subscribers_table })
    }
}

/// The handler's dependencies, built once per process.
#[derive(Clone)]
pub struct State {
    /// Settings.
    pub config: Arc<Config>,
    /// The subscribers table.
    pub subscribers: Arc<dyn SubscriberStore>,
    /// Time, when the event carries none, and for the audit stamps.
    pub clock: Arc<dyn Clock>,
}

impl State {
    /// Builds the AWS clients once, on `sdk`, for `config`: the DynamoDB adapter.
    pub fn connect(sdk: &SdkConfig, config: &Config) -> Self {
        State {
            subscribers: Arc::new(awsmp_aws::DynamoSubscriberStore::new(
                aws_sdk_dynamodb::Client::new(sdk),
                &config.subscribers_table,
            )),
            clock: Arc::new(awsmp_aws::SystemClock),
            config: Arc::new(config.clone()),
        }
    }
}

/// The Lambda entry point for the scheduled event.
pub async fn handler(
    state: &State,
    event: LambdaEvent<EventBridgeEvent>,
) -> Result<CleanupReport, CleanupError> {
    run(state, scheduled_now(&event.payload, state.clock.as_ref())).await
}

/// Closes every deprovisioning row whose window ended at or before `now`
/// ([`close_expired`]).
///
/// A failing row does not stop the others; the run then fails with every failure
/// listed (the next run retries them, since they are still in the index).
pub async fn run(state: &State, now: Instant) -> Result<CleanupReport, CleanupError> {
    let (report, failures) = close_expired(state.subscribers.as_ref(), now)
        .await
        .map_err(CleanupError::Index)?;
    if failures.is_empty() {
        tracing::info!(
            now = %report.now,
            deprovisioning = report.deprovisioning,
            closed = report.closed,
            still_open = report.still_open,
            changed_meanwhile = report.changed_meanwhile,
            "deprovision-cleanup run finished"
        );
        Ok(report)
    } else {
        Err(CleanupError::RowsFailed { report, failures })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests;

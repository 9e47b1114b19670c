//! The deprovision-cleanup Lambda (events stack, `rate(15 minutes)`): finds the
//! subscribers still `deprovisioning` through the sparse deprovisioning index (never a
//! scan) and sets `subscriptionStatus=inactive` on those whose `deprovisioningExpiry`
//! has passed ([`awsmp_core::lifecycle::expire_deprovisioning`]). Each write is
//! conditional on the version read, so a concurrent event is never overwritten and a
//! second run finds nothing left to do. "Now" is the scheduled event's `time`, so any
//! run can be replayed; without one, the clock.

pub mod error;

use std::sync::Arc;

use aws_config::SdkConfig;
use aws_lambda_events::eventbridge::EventBridgeEvent;
use awsmp_aws::lambda::{ConfigError, EnvReader, process_env, scheduled_now};
use awsmp_core::lifecycle::expire_deprovisioning;
use awsmp_core::model::Subscriber;
use awsmp_core::ports::{Clock, SubscriberStore};
use awsmp_core::time::{Instant, format_instant};
use lambda_runtime::LambdaEvent;
use serde::Serialize;

pub use error::{CleanupError, RowFailure};

/// Every variable the template sets for this function.
pub const ENV_VARS: &[&str] = &["SUBSCRIBERS_TABLE"];

/// Most write attempts per row when a concurrent writer keeps moving its version.
pub const MAX_WRITE_ATTEMPTS: usize = 3;

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

/// What one run did (the function's response, and its summary log line).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CleanupReport {
    /// The instant the expiries were compared with.
    pub now: String,
    /// Rows found deprovisioning.
    pub deprovisioning: usize,
    /// Rows set to `inactive` by this run.
    pub closed: usize,
    /// Rows whose window is still open.
    pub still_open: usize,
    /// Rows another writer changed meanwhile so that there was nothing left to close.
    pub changed_meanwhile: usize,
}

/// The Lambda entry point for the scheduled event.
pub async fn handler(
    state: &State,
    event: LambdaEvent<EventBridgeEvent>,
) -> Result<CleanupReport, CleanupError> {
    run(state, scheduled_now(&event.payload, state.clock.as_ref())).await
}

/// Closes every deprovisioning row whose window ended at or before `now`.
///
/// A failing row does not stop the others; the run then fails with every failure
/// listed (the next run retries them, since they are still in the index).
pub async fn run(state: &State, now: Instant) -> Result<CleanupReport, CleanupError> {
    let rows = state
        .subscribers
        .deprovisioning()
        .await
        .map_err(CleanupError::Index)?;
    let mut report = CleanupReport {
        now: format_instant(now),
        deprovisioning: rows.len(),
        closed: 0,
        still_open: 0,
        changed_meanwhile: 0,
    };
    let mut failures = Vec::new();
    for row in rows {
        match close_row(state, row, now).await {
            Ok(RowResult::Closed) => report.closed += 1,
            Ok(RowResult::StillOpen) => report.still_open += 1,
            Ok(RowResult::ChangedMeanwhile) => report.changed_meanwhile += 1,
            Err(failure) => failures.push(failure),
        }
    }
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

enum RowResult {
    Closed,
    StillOpen,
    ChangedMeanwhile,
}

async fn close_row(state: &State, row: Subscriber, now: Instant) -> Result<RowResult, RowFailure> {
    let license = row.license_arn.clone();
    let account = row.customer_aws_account_id.clone();
    let failure = |message: String| RowFailure {
        license_arn: license.clone(),
        account: account.clone(),
        message,
    };
    let mut current = row;
    for attempt in 1..=MAX_WRITE_ATTEMPTS {
        let Some(next) = expire_deprovisioning(&current, now) else {
            return Ok(if attempt == 1 {
                RowResult::StillOpen
            } else {
                RowResult::ChangedMeanwhile
            });
        };
        match state.subscribers.put_lifecycle(&next, now).await {
            Ok(true) => {
                tracing::info!(
                    license = %license,
                    account = %account,
                    expiry = next.deprovisioning_expiry.map(format_instant),
                    "final-usage window closed: subscription inactive"
                );
                return Ok(RowResult::Closed);
            }
            Ok(false) => {
                tracing::debug!(license = %license, account = %account, attempt, "version conflict: re-reading the row");
                match state.subscribers.get(&license, &account).await {
                    Ok(Some(fresh)) => current = fresh,
                    Ok(None) => return Ok(RowResult::ChangedMeanwhile),
                    Err(e) => return Err(failure(e.to_string())),
                }
            }
            Err(e) => return Err(failure(e.to_string())),
        }
    }
    Err(failure(format!(
        "the row kept changing under {MAX_WRITE_ATTEMPTS} write attempts"
    )))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests;

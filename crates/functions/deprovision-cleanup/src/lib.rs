//! The deprovision-cleanup Lambda (events stack, `rate(15 minutes)`): runs the use
//! case [`awsmp_core::lifecycle::deprovision`] (every subscriber still `deprovisioning`
//! whose `deprovisioningExpiry` has passed is set `subscriptionStatus=inactive`, each
//! write conditional on the version read) and fails the invocation, for the error
//! metric and its alarm, when a row could not be closed. "Now" is the scheduled event's
//! `time`, so any run can be replayed; without one, the clock.

pub mod error;

use aws_lambda_events::eventbridge::EventBridgeEvent;
use awsmp_core::time::Instant;
use awsmp_lambda::scheduled_now;
use lambda_runtime::LambdaEvent;

pub use awsmp_core::lifecycle::deprovision::{
    DeprovisionReport, MAX_WRITE_ATTEMPTS, RowFailure, close_expired,
};
/// The function's settings (`SUBSCRIBERS_TABLE`), its state (the table and the clock)
/// and the variables its template sets: those of every subscribers-table function.
pub use awsmp_lambda::{
    SUBSCRIBERS_TABLE_ENV_VARS as ENV_VARS, SubscribersTableConfig as Config,
    SubscribersTableState as State,
};
pub use error::CleanupError;

/// The Lambda entry point for the scheduled event.
pub async fn handler(
    state: &State,
    event: LambdaEvent<EventBridgeEvent>,
) -> Result<DeprovisionReport, CleanupError> {
    run(state, scheduled_now(&event.payload, state.clock.as_ref())).await
}

/// Closes every deprovisioning row whose window ended at or before `now`
/// ([`close_expired`]).
///
/// A failing row does not stop the others; the run then fails with every failure
/// listed (the next run retries them, since they are still in the index).
pub async fn run(state: &State, now: Instant) -> Result<DeprovisionReport, CleanupError> {
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

//! The deprovision-cleanup use case (events stack, every 15 minutes): every subscriber
//! still `deprovisioning` (read through the sparse deprovisioning index, never a scan)
//! whose `deprovisioningExpiry` has passed is set `subscriptionStatus=inactive`
//! ([`crate::lifecycle::expire_deprovisioning`]). Each write is conditional on the
//! version read ([`super::subscribers::update_subscriber`]), so a concurrent event is
//! never overwritten and a second run finds nothing left to do.

use serde::Serialize;

use crate::lifecycle::expire_deprovisioning;
use crate::model::Subscriber;
use crate::ports::{PortError, SubscriberStore};
use crate::time::{Instant, format_instant};

use super::subscribers::{Decision, UpdateError, Updated, update_subscriber};

/// Most write attempts per row when a concurrent writer keeps moving its version.
pub const MAX_WRITE_ATTEMPTS: usize = 3;

/// What one run did (the function's response, and its summary log line).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeprovisionReport {
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

/// One row that could not be closed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowFailure {
    /// Partition key.
    pub license_arn: String,
    /// Sort key.
    pub account: String,
    /// What went wrong.
    pub message: String,
}

/// Closes every deprovisioning row whose window ended at or before `now` (also each
/// write's stamp). A failing row does not stop the others: the report comes back with
/// every failure (the next run retries them, since they are still in the index). Fails
/// as a whole only when the index cannot be read (nothing was done).
pub async fn close_expired(
    store: &dyn SubscriberStore,
    now: Instant,
) -> Result<(DeprovisionReport, Vec<RowFailure>), PortError> {
    let rows = store.deprovisioning().await?;
    let mut report = DeprovisionReport {
        now: format_instant(now),
        deprovisioning: rows.len(),
        closed: 0,
        still_open: 0,
        changed_meanwhile: 0,
    };
    let mut failures = Vec::new();
    for row in rows {
        match close_row(store, row, now).await {
            Ok(RowResult::Closed) => report.closed += 1,
            Ok(RowResult::StillOpen) => report.still_open += 1,
            Ok(RowResult::ChangedMeanwhile) => report.changed_meanwhile += 1,
            Err(failure) => failures.push(failure),
        }
    }
    Ok((report, failures))
}

enum RowResult {
    Closed,
    StillOpen,
    ChangedMeanwhile,
}

async fn close_row(
    store: &dyn SubscriberStore,
    row: Subscriber,
    now: Instant,
) -> Result<RowResult, RowFailure> {
    let license = row.license_arn.clone();
    let account = row.customer_aws_account_id.clone();
    let updated = update_subscriber(
        store,
        &|| now,
        &license,
        &account,
        Some(row),
        MAX_WRITE_ATTEMPTS,
        |current: Option<&Subscriber>, attempt| match current
            .and_then(|c| expire_deprovisioning(c, now))
        {
            Some(next) => Decision::Write(next, ()),
            None if attempt == 1 && current.is_some() => Decision::Done(RowResult::StillOpen),
            None => Decision::Done(RowResult::ChangedMeanwhile),
        },
    )
    .await;
    let failure = |message: String| RowFailure {
        license_arn: license.clone(),
        account: account.clone(),
        message,
    };
    match updated {
        Ok(Updated::Written((), next)) => {
            tracing::info!(
                license = %license,
                account = %account,
                expiry = next.deprovisioning_expiry.map(format_instant),
                "final-usage window closed: subscription inactive"
            );
            Ok(RowResult::Closed)
        }
        Ok(Updated::Done(result)) => Ok(result),
        Err(UpdateError::Store(e)) => Err(failure(e.to_string())),
        Err(UpdateError::Contention { attempts }) => Err(failure(format!(
            "the row kept changing under {attempts} write attempts"
        ))),
    }
}

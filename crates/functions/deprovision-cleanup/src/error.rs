//! Failures of a deprovision-cleanup run, mapped to Lambda diagnostics so the
//! function's error metric (and its alarm) sees them; the next run retries.

use awsmp_core::ports::PortError;
use awsmp_lambda::{FunctionError, diagnostic};
use lambda_runtime::Diagnostic;

use crate::{DeprovisionReport, RowFailure};

/// A run that did not finish its work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CleanupError {
    /// The deprovisioning index could not be read: nothing was done.
    #[error("cannot read the deprovisioning index: {0}")]
    Index(PortError),
    /// Some rows could not be closed (the others were); they stay in the index for the
    /// next run.
    #[error(
        "{} of {} deprovisioning rows could not be closed ({} closed this run): {}",
        failures.len(),
        report.deprovisioning,
        report.closed,
        failures.iter().map(|f| format!("{}/{}: {}", f.license_arn, f.account, f.message)).collect::<Vec<_>>().join("; ")
    )]
    RowsFailed {
        /// What the run did manage.
        report: DeprovisionReport,
        /// Every row that failed.
        failures: Vec<RowFailure>,
    },
}

impl FunctionError for CleanupError {
    fn error_type(&self) -> &'static str {
        match self {
            CleanupError::Index(_) => "DeprovisioningIndexUnavailable",
            CleanupError::RowsFailed { .. } => "DeprovisionCleanupIncomplete",
        }
    }
}

impl From<CleanupError> for Diagnostic {
    fn from(error: CleanupError) -> Diagnostic {
        diagnostic(&error)
    }
}

//! What the scheduled pipeline runs share (discoverer, submitter): their outcome, a
//! report or a [`RunError`] (one `errorType` per cause), and [`finish_run`], which fails
//! a run whose deprovisioning flush could not run.

use awsmp_core::discover::DiscoverReport;
use awsmp_core::pipeline::error::PipelineError;
use awsmp_core::submit::SubmitReport;
use lambda_runtime::Diagnostic;

use super::{FunctionError, diagnostic};

/// Why a scheduled run failed (the schedule runs it again on its next tick).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The use case failed part-way; what it did and recorded stands.
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
    /// The run could not do all it must (the subscribers' `deprovisioning` index could
    /// not be read, so the deprovisioning flush did not run): failing the invocation
    /// makes it visible (Lambda `Errors`, beside the `IncompleteRun` metric).
    #[error("run incomplete: {0}")]
    Incomplete(String),
}

impl FunctionError for RunError {
    fn error_type(&self) -> &'static str {
        match self {
            RunError::Pipeline(PipelineError::Port(_)) => "StoreError",
            RunError::Pipeline(PipelineError::QueueRejected { .. }) => "QueueError",
            RunError::Pipeline(_) => "PipelineError",
            RunError::Incomplete(_) => "IncompleteRun",
        }
    }
}

impl From<RunError> for Diagnostic {
    fn from(error: RunError) -> Diagnostic {
        diagnostic(&error)
    }
}

/// The report of a scheduled run that also flushes deprovisioning licenses.
pub trait RunReport {
    /// Why the deprovisioning flush did not run, if it did not.
    fn flush_error(&self) -> Option<&str>;
}

impl RunReport for DiscoverReport {
    fn flush_error(&self) -> Option<&str> {
        self.flush_error.as_deref()
    }
}

impl RunReport for SubmitReport {
    fn flush_error(&self) -> Option<&str> {
        self.flush_error.as_deref()
    }
}

/// The invocation's answer for a run's `result`: the report, unless its deprovisioning
/// flush did not run ([`RunError::Incomplete`]); a failed run is logged as "`what`
/// failed part-way".
pub fn finish_run<R: RunReport>(
    what: &str,
    result: Result<R, PipelineError>,
) -> Result<R, RunError> {
    match result {
        Ok(report) => match report.flush_error() {
            Some(why) => Err(RunError::Incomplete(format!(
                "deprovisioning index unreadable: {why}"
            ))),
            None => Ok(report),
        },
        Err(e) => {
            tracing::error!(error = %e, "{what} failed part-way");
            Err(e.into())
        }
    }
}

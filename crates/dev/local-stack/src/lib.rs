//! awsmp-local-stack: both stacks on one machine, the system `awsmp local up` runs and
//! the end-to-end tests deploy. moto serves DynamoDB and SQS, our simulator serves
//! Marketplace Metering, the queues come from the SAM templates and the tables from
//! `awsmp_local_aws::tables` ([`resources`] deploys both), and every handler runs wired
//! as its template wires it ([`wiring`], [`runtime`], [`streams`]), on a virtual clock so a day of metering takes seconds
//! ([`system`]); [`demo`] is the scripted lifecycle it shows.

pub mod clock;
pub mod demo;
pub mod resources;
pub mod runtime;
pub mod streams;
pub mod system;
pub mod usage_api;
pub mod wiring;

use std::path::Path;

use awsmp_core::time::HourBucket;

/// A local-stack failure, with what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    /// A template could not be read or wired.
    #[error("template: {0}")]
    Template(String),
    /// The emulator or simulator could not be started or answered badly.
    #[error("{0}")]
    Setup(String),
    /// An AWS call to the emulator failed.
    #[error("local AWS call failed: {0}")]
    Aws(String),
    /// A function could not be wired or failed as a whole.
    #[error("function: {0}")]
    Wiring(String),
    /// The demo's own check failed: what was billed differs from what was expected.
    #[error("demo check failed: {0}")]
    Check(String),
}

/// Locks a mutex, recovering the data if a panicking thread poisoned it.
pub(crate) fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A template that cannot be read or wired (the workspace's one template reader,
/// `awsmp_local_aws::cfn::StackTemplate`), as the local stack reports it.
pub(crate) fn template_error(e: awsmp_local_aws::LocalAwsError) -> LocalError {
    LocalError::Template(e.to_string())
}

impl From<awsmp_local_aws::LocalAwsError> for LocalError {
    fn from(e: awsmp_local_aws::LocalAwsError) -> Self {
        LocalError::Setup(e.to_string())
    }
}

/// Where the demo's clock starts when the real clock reads `now`. The story spans
/// about three hours of the stack's clock and ends behind the real clock (serving
/// catches up from there), so it starts four hours before `now`'s hour, five minutes
/// into that hour.
pub fn demo_start(now: awsmp_core::time::Instant) -> awsmp_core::time::Instant {
    HourBucket::containing(now).start() - chrono::Duration::hours(4) + chrono::Duration::minutes(5)
}

/// Creates the project's Python venv (moto) on first use, so a fresh machine needs no
/// manual step; fast when it is already there.
pub fn ensure_venv(root: &Path) -> Result<(), LocalError> {
    let status = std::process::Command::new("bash")
        .arg(root.join("scripts/ensure-venv.sh"))
        .arg(root.join(".venv"))
        .arg(root.join("requirements-dev.txt"))
        .status()
        .map_err(|e| LocalError::Setup(format!("could not run scripts/ensure-venv.sh: {e}")))?;
    if status.success() {
        Ok(())
    } else {
        Err(LocalError::Setup(
            "could not create the Python venv the local emulator needs (.venv, from requirements-dev.txt); the lines above say why".into(),
        ))
    }
}

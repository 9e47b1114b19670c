//! How the submitter is configured: live or dry-run metering (`METERING_MODE`, with its
//! test-account allowlist), the deployment mode, and the run's settings and defaults.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::aggregate::ZeroQuantityPolicy;
use crate::backoff::Backoff;
use crate::random::random_u64;
use crate::retention::Retention;
use crate::submit::batch::BatchLimits;
use crate::submit::pacing::MIN_CALL_INTERVAL;

/// `METERING_MODE` with the test-account allowlist it requires or forbids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MeteringMode {
    /// Bill for real.
    Live,
    /// Never call `BatchMeterUsage`: records of these test accounts become
    /// `DryRunSubmitted`; every other record stays pending (and is logged).
    DryRun {
        /// 12-digit test accounts.
        allowlist: BTreeSet<String>,
    },
}

/// A `METERING_MODE` / `TEST_ACCOUNT_ALLOWLIST` combination that must not run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MeteringModeError {
    /// Not `live` or `dry-run`.
    #[error("METERING_MODE must be \"live\" or \"dry-run\", got {0:?}")]
    UnknownMode(String),
    /// Live billing with a test allowlist set: a half-configured dry run would bill.
    #[error(
        "METERING_MODE=live refuses to start with TEST_ACCOUNT_ALLOWLIST set (unset it to bill, or use dry-run)"
    )]
    LiveWithAllowlist,
    /// Dry run with nobody to "submit" for.
    #[error(
        "METERING_MODE=dry-run requires TEST_ACCOUNT_ALLOWLIST (comma-separated 12-digit test accounts)"
    )]
    DryRunWithoutAllowlist,
    /// An allowlist entry that is not an account id.
    #[error("TEST_ACCOUNT_ALLOWLIST entry {0:?} is not a 12-digit AWS account id")]
    BadAccount(String),
}

impl MeteringMode {
    /// Validates the mode text and the allowlist together.
    pub fn from_parts(mode: &str, allowlist: &[String]) -> Result<Self, MeteringModeError> {
        if let Some(bad) = allowlist
            .iter()
            .find(|a| a.len() != 12 || !a.bytes().all(|b| b.is_ascii_digit()))
        {
            return Err(MeteringModeError::BadAccount(bad.clone()));
        }
        match mode.trim() {
            "live" if allowlist.is_empty() => Ok(MeteringMode::Live),
            "live" => Err(MeteringModeError::LiveWithAllowlist),
            "dry-run" if allowlist.is_empty() => Err(MeteringModeError::DryRunWithoutAllowlist),
            "dry-run" => Ok(MeteringMode::DryRun {
                allowlist: allowlist.iter().cloned().collect(),
            }),
            other => Err(MeteringModeError::UnknownMode(other.to_string())),
        }
    }
}

/// `DEPLOYMENT_MODE`: whether the aggregation stages exist. The submitter behaves the
/// same either way (in direct-submit mode the seller writes the aggregated rows).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeploymentMode {
    /// Discoverer, aggregator and cleanup feed the aggregated table.
    Full,
    /// The seller writes finalized hourly totals into the aggregated table.
    DirectSubmit,
}

impl DeploymentMode {
    /// The configuration text.
    pub fn as_str(&self) -> &'static str {
        match self {
            DeploymentMode::Full => "full",
            DeploymentMode::DirectSubmit => "direct-submit",
        }
    }
}

impl fmt::Display for DeploymentMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A `DEPLOYMENT_MODE` that is not `full` or `direct-submit`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("DEPLOYMENT_MODE must be \"full\" or \"direct-submit\", got {0:?}")]
pub struct InvalidDeploymentMode(pub String);

impl FromStr for DeploymentMode {
    type Err = InvalidDeploymentMode;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "full" => Ok(DeploymentMode::Full),
            "direct-submit" => Ok(DeploymentMode::DirectSubmit),
            other => Err(InvalidDeploymentMode(other.to_string())),
        }
    }
}

/// The submitter's knobs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubmitSettings {
    /// The stack's product code (`PRODUCT_CODE`): batches records that carry none (a
    /// direct-submit row may omit `productCode`). Never sent on the wire.
    pub product_code: String,
    /// Live or dry-run.
    pub mode: MeteringMode,
    /// `ZERO_QUANTITY_POLICY`.
    pub zero_policy: ZeroQuantityPolicy,
    /// `DEPLOYMENT_MODE` (logged; behaviour is the same).
    pub deployment: DeploymentMode,
    /// Batch caps (the service's by default).
    pub limits: BatchLimits,
    /// Spacing of `BatchMeterUsage` calls (100 ms = the 10 requests/s quota).
    pub min_call_interval: Duration,
    /// How long a claim holds a record when the run has no deadline.
    pub claim_lease: chrono::Duration,
    /// Consecutive throttled batches after which the run stops.
    pub max_throttled_batches: u32,
    /// Jittered backoff between retries (unprocessed records, throttling).
    pub backoff: Backoff,
    /// `DATA_RETENTION_DAYS`: the `expiresAt` of every record this run makes final.
    pub retention: Retention,
}

impl SubmitSettings {
    /// Settings with the production defaults (retention off: every item is kept).
    pub fn new(
        product_code: impl Into<String>,
        mode: MeteringMode,
        zero_policy: ZeroQuantityPolicy,
        deployment: DeploymentMode,
    ) -> Self {
        SubmitSettings {
            product_code: product_code.into(),
            mode,
            zero_policy,
            deployment,
            limits: BatchLimits::AWS,
            min_call_interval: MIN_CALL_INTERVAL,
            claim_lease: chrono::Duration::minutes(15),
            max_throttled_batches: 3,
            backoff: Backoff::METERING,
            retention: Retention::FOREVER,
        }
    }

    pub(super) fn backoff(&self, retry: u32) -> Duration {
        self.backoff.delay(retry, random_u64())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::pipeline::testkit::ACCOUNT_A;

    #[test]
    fn metering_mode_refuses_half_configured_runs() {
        let allow = vec![ACCOUNT_A.to_string()];
        assert_eq!(
            MeteringMode::from_parts("live", &[]),
            Ok(MeteringMode::Live)
        );
        assert_eq!(
            MeteringMode::from_parts("live", &allow),
            Err(MeteringModeError::LiveWithAllowlist)
        );
        assert_eq!(
            MeteringMode::from_parts("dry-run", &[]),
            Err(MeteringModeError::DryRunWithoutAllowlist)
        );
        assert!(matches!(
            MeteringMode::from_parts("dry-run", &allow),
            Ok(MeteringMode::DryRun { .. })
        ));
        assert_eq!(
            MeteringMode::from_parts("dry-run", &["12345".to_string()]),
            Err(MeteringModeError::BadAccount("12345".into()))
        );
        assert_eq!(
            MeteringMode::from_parts("test", &[]),
            Err(MeteringModeError::UnknownMode("test".into()))
        );
        assert_eq!("direct-submit".parse(), Ok(DeploymentMode::DirectSubmit));
        assert!("direct".parse::<DeploymentMode>().is_err());
    }
}

//! The variables several functions read (ARCHITECTURE.md, "Environment variables"),
//! each read in one place, with its name, its default and its checks, as methods of
//! [`EnvReader`].

use awsmp_core::aggregate::ZeroQuantityPolicy;
use awsmp_core::retention::Retention;
use awsmp_core::submit::DeploymentMode;
use awsmp_core::time::MeteringLockHours;

use super::EnvReader;

impl EnvReader<'_> {
    /// `PRODUCT_CODE` (required): the stack's product, a dimension of every metric.
    pub fn product_code(&mut self) -> String {
        self.required("PRODUCT_CODE")
    }

    /// `STAGE` (required, a stage name): the stack's stage, a dimension of every metric.
    pub fn stage(&mut self) -> String {
        let stage = self.required("STAGE");
        if !stage.is_empty()
            && let Some(problem) = awsmp_aws::metrics::stage_problem(&stage)
        {
            self.problem(problem);
        }
        stage
    }

    /// `SUBSCRIBERS_TABLE` (required).
    pub fn subscribers_table(&mut self) -> String {
        self.required("SUBSCRIBERS_TABLE")
    }

    /// `SUBSCRIBERS_TABLE_REGION` (required): the subscribers table lives in us-east-1.
    pub fn subscribers_table_region(&mut self) -> String {
        self.required("SUBSCRIBERS_TABLE_REGION")
    }

    /// `USAGE_TABLE` (required): the raw usage table.
    pub fn usage_table(&mut self) -> String {
        self.required("USAGE_TABLE")
    }

    /// `AGGREGATED_TABLE` (required): the aggregated-usage table.
    pub fn aggregated_table(&mut self) -> String {
        self.required("AGGREGATED_TABLE")
    }

    /// `METERING_LOCK_HOURS` (1..=20, default 1).
    pub fn metering_lock(&mut self) -> MeteringLockHours {
        self.parsed_or("METERING_LOCK_HOURS", MeteringLockHours::DEFAULT)
    }

    /// `ZERO_QUANTITY_POLICY` (default `defer`).
    pub fn zero_quantity_policy(&mut self) -> ZeroQuantityPolicy {
        self.parsed_or("ZERO_QUANTITY_POLICY", ZeroQuantityPolicy::default())
    }

    /// `DATA_RETENTION_DAYS` (0 = keep everything, the default; else at least
    /// `MIN_RETENTION_DAYS`): the `expiresAt` of every item the function makes final.
    pub fn retention(&mut self) -> Retention {
        self.parsed_or("DATA_RETENTION_DAYS", Retention::FOREVER)
    }

    /// `DEPLOYMENT_MODE` (required): `full` or `direct-submit`.
    pub fn deployment_mode(&mut self) -> DeploymentMode {
        let text = self.required("DEPLOYMENT_MODE");
        match text.parse() {
            Ok(mode) => mode,
            Err(e) => {
                if !text.is_empty() {
                    self.problem(e.to_string());
                }
                DeploymentMode::Full
            }
        }
    }
}

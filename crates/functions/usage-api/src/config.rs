//! The usage API function's configuration, read once at init.

use awsmp_core::submit::DeploymentMode;
use awsmp_lambda::{ConfigError, EnvReader};

/// Every environment variable this function reads (its template sets exactly these).
pub const ENV_VARS: &[&str] = &[
    "USAGE_TABLE",
    "AGGREGATED_TABLE",
    "PRODUCT_CODE",
    "DEPLOYMENT_MODE",
    "USAGE_API_READ_SCOPE",
    "SUBSCRIBERS_TABLE",
    "SUBSCRIBERS_TABLE_REGION",
];

/// The usage API's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `USAGE_TABLE`: where events are written.
    pub usage_table: String,
    /// `AGGREGATED_TABLE`: read for an event's record.
    pub aggregated_table: String,
    /// `PRODUCT_CODE`: the product every event is checked against.
    pub product_code: String,
    /// `DEPLOYMENT_MODE`: a direct-submit stack takes no raw usage.
    pub deployment_mode: DeploymentMode,
    /// `USAGE_API_READ_SCOPE`: with JWT authorization, the scope a token needs to read
    /// usage (the GET route's); a POST answers what an id recorded only to such a
    /// caller. Empty or unset (IAM authorization): every caller may.
    pub read_scope: Option<String>,
    /// `SUBSCRIBERS_TABLE`: read by `GET /subscriptions/{licenseArn}`.
    pub subscribers_table: String,
    /// `SUBSCRIBERS_TABLE_REGION`: the events stack's Region, where that table lives.
    pub subscribers_table_region: String,
}

impl Config {
    /// Reads the variables through `lookup` (the process environment in Lambda; tests
    /// pass a map); every problem is reported at once.
    pub fn from_lookup(lookup: &dyn Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let mut env = EnvReader::new(lookup);
        let config = Config {
            usage_table: env.usage_table(),
            aggregated_table: env.aggregated_table(),
            product_code: env.product_code(),
            deployment_mode: env.deployment_mode(),
            read_scope: lookup("USAGE_API_READ_SCOPE").filter(|s| !s.is_empty()),
            subscribers_table: env.subscribers_table(),
            subscribers_table_region: env.subscribers_table_region(),
        };
        env.finish(config)
    }
}

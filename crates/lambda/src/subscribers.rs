//! The configuration and state of a function that only reads and writes the
//! subscribers table (subscription, deprovision-cleanup): written once here, each
//! crate names them its `Config`, `State` and `ENV_VARS`.

use std::sync::Arc;

use aws_config::SdkConfig;
use awsmp_core::ports::{Clock, SubscriberStore};

use super::{ConfigError, EnvReader};

/// Every variable the template sets for such a function.
pub const SUBSCRIBERS_TABLE_ENV_VARS: &[&str] = &["SUBSCRIBERS_TABLE"];

/// The settings of a subscribers-table function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscribersTableConfig {
    /// `SUBSCRIBERS_TABLE`: the subscribers table.
    pub subscribers_table: String,
}

impl SubscribersTableConfig {
    /// Reads through `lookup` (the process environment in Lambda; tests pass a map).
    pub fn from_lookup(lookup: &dyn Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let mut env = EnvReader::new(lookup);
        let subscribers_table = env.subscribers_table();
        env.finish(SubscribersTableConfig { subscribers_table })
    }
}

/// The handler's dependencies, built once per process.
#[derive(Clone)]
pub struct SubscribersTableState {
    /// Settings.
    pub config: Arc<SubscribersTableConfig>,
    /// The subscribers table.
    pub subscribers: Arc<dyn SubscriberStore>,
    /// Time, for the audit stamps (and "now" when a scheduled event carries none).
    pub clock: Arc<dyn Clock>,
}

impl SubscribersTableState {
    /// Builds the AWS clients once, on `sdk`, for `config`: the DynamoDB adapter.
    pub fn connect(sdk: &SdkConfig, config: &SubscribersTableConfig) -> Self {
        SubscribersTableState {
            subscribers: Arc::new(awsmp_aws::DynamoSubscriberStore::new(
                aws_sdk_dynamodb::Client::new(sdk),
                &config.subscribers_table,
            )),
            clock: Arc::new(awsmp_aws::SystemClock),
            config: Arc::new(config.clone()),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn reads_only_the_subscribers_table() {
        let config = SubscribersTableConfig::from_lookup(&|k| {
            (k == "SUBSCRIBERS_TABLE").then(|| "t".to_string())
        });
        assert_eq!(config.unwrap().subscribers_table, "t");
        let err = SubscribersTableConfig::from_lookup(&|_| None).unwrap_err();
        assert!(err.to_string().contains("SUBSCRIBERS_TABLE is not set"));
        assert_eq!(SUBSCRIBERS_TABLE_ENV_VARS, ["SUBSCRIBERS_TABLE"]);
    }
}

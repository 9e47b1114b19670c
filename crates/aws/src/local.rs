//! The SDK config of the local stack: every service on the emulator but Marketplace
//! Metering and the Agreement API, which go to the simulator, with static local
//! credentials. The local stack and the tests build it and hand it to each function's
//! `State::connect`, as a Lambda's `main.rs` hands in the config it loads; handlers
//! stay unaware of it.

use aws_config::{Region, SdkConfig};
use aws_credential_types::Credentials;
use aws_credential_types::provider::SharedCredentialsProvider;
use aws_types::service_config::{LoadServiceConfig, ServiceConfigKey};

/// Where AWS calls go when they run on the local stack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalEndpoints {
    /// DynamoDB and SQS (the emulator).
    pub aws: String,
    /// Marketplace Metering and the Agreement API (the simulator).
    pub metering: String,
}

impl LocalEndpoints {
    /// An SDK config in `region` sending Marketplace Metering to `self.metering` and
    /// every other service to `self.aws`, with static local credentials. (It stands in
    /// for the `AWS_ENDPOINT_URL_*` variables, which a multi-threaded process cannot
    /// safely set for itself.)
    pub fn sdk_config(&self, region: &str) -> SdkConfig {
        SdkConfig::builder()
            .behavior_version(crate::sdk::behavior_version())
            .region(Region::new(region.to_string()))
            .credentials_provider(SharedCredentialsProvider::new(Credentials::new(
                "local",
                "local",
                None,
                None,
                "awsmp-local",
            )))
            .service_config(PerServiceEndpoints(self.clone()))
            .build()
    }
}

/// Answers the SDK's per-service `endpoint_url` lookups, as the env variables would.
#[derive(Debug)]
struct PerServiceEndpoints(LocalEndpoints);

impl LoadServiceConfig for PerServiceEndpoints {
    fn load_config(&self, key: ServiceConfigKey<'_>) -> Option<String> {
        if key.profile() != "endpoint_url" {
            return None;
        }
        // The simulator serves the Agreement API beside Metering.
        let simulated = ["Marketplace Metering", "Marketplace Agreement"];
        Some(if simulated.contains(&key.service_id()) {
            self.0.metering.clone()
        } else {
            self.0.aws.clone()
        })
    }
}

//! Routing every SDK client of this process to local endpoints (the local stack's
//! emulator and Marketplace simulator). It stands in for the `AWS_ENDPOINT_URL_*`
//! variables, which a multi-threaded process cannot safely set for itself; handlers
//! stay unaware of it, exactly as they are of those variables.

use std::sync::OnceLock;

use aws_config::{Region, SdkConfig};
use aws_credential_types::Credentials;
use aws_credential_types::provider::SharedCredentialsProvider;
use aws_types::service_config::{LoadServiceConfig, ServiceConfigKey};

/// Where a process's AWS calls go when it runs the local stack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalEndpoints {
    /// DynamoDB and SQS (the emulator).
    pub aws: String,
    /// Marketplace Metering (the simulator).
    pub metering: String,
    /// Where EMF metric lines go instead of stdout (one JSON line each), if anywhere.
    pub metrics_log: Option<std::path::PathBuf>,
}

static LOCAL: OnceLock<LocalEndpoints> = OnceLock::new();

/// Routes every SDK config loaded afterwards by [`crate::load_sdk_config`] and
/// [`crate::load_sdk_config_in`] to `endpoints`. Set once per process; a second call
/// with different endpoints is refused.
pub fn route_to_local(endpoints: LocalEndpoints) -> Result<(), LocalEndpoints> {
    match LOCAL.set(endpoints.clone()) {
        Ok(()) => Ok(()),
        Err(_) if LOCAL.get() == Some(&endpoints) => Ok(()),
        Err(_) => Err(endpoints),
    }
}

/// The SDK config of a process routed to local endpoints, if it is.
pub(crate) fn local_sdk_config(region: Option<&str>) -> Option<SdkConfig> {
    LOCAL
        .get()
        .map(|endpoints| sdk_config_for(endpoints, region.unwrap_or("us-east-1")))
}

/// An SDK config sending Marketplace Metering to `endpoints.metering` and every other
/// service to `endpoints.aws`, with static local credentials.
pub fn sdk_config_for(endpoints: &LocalEndpoints, region: &str) -> SdkConfig {
    SdkConfig::builder()
        .behavior_version(crate::runtime::behavior_version())
        .region(Region::new(region.to_string()))
        .credentials_provider(SharedCredentialsProvider::new(Credentials::new(
            "local",
            "local",
            None,
            None,
            "awsmp-local",
        )))
        .service_config(PerServiceEndpoints(endpoints.clone()))
        .build()
}

/// Answers the SDK's per-service `endpoint_url` lookups, as the env variables would.
#[derive(Debug)]
struct PerServiceEndpoints(LocalEndpoints);

impl LoadServiceConfig for PerServiceEndpoints {
    fn load_config(&self, key: ServiceConfigKey<'_>) -> Option<String> {
        if key.profile() != "endpoint_url" {
            return None;
        }
        Some(if key.service_id() == "Marketplace Metering" {
            self.0.metering.clone()
        } else {
            self.0.aws.clone()
        })
    }
}

/// The EMF destination of a process routed to local endpoints with a metrics log.
pub(crate) fn local_metrics_writer() -> Option<Box<dyn std::io::Write + Send>> {
    let path = LOCAL.get()?.metrics_log.as_ref()?;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .ok()
        .map(|f| Box::new(f) as Box<dyn std::io::Write + Send>)
}

//! The Marketplace Metering simulator embedded in a test: started on a free loopback
//! port in the test's runtime, with SDK configs and clients pointing at it.

use aws_config::SdkConfig;
use awsmp_marketplace_sim::{RunningSim, SimConfig, SimHandle, Simulator};

use crate::error::LocalAwsError;
use crate::moto::{TEST_ACCESS_KEY, TEST_REGION, TEST_SECRET_KEY, test_sdk_config};

/// A running simulator. Dropping it stops the server.
#[derive(Debug)]
pub struct SimServer {
    sim: RunningSim,
}

impl SimServer {
    /// Starts the simulator with `config` on a free port (`config.port` is ignored).
    pub async fn start(config: SimConfig) -> Result<SimServer, LocalAwsError> {
        let config = SimConfig { port: 0, ..config };
        let sim = Simulator::start(config)
            .await
            .map_err(|e| LocalAwsError::Simulator(e.to_string()))?;
        Ok(SimServer { sim })
    }

    /// `http://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> String {
        self.sim.endpoint_url()
    }

    /// Drives the simulator's state (entitlements, faults, clock, ledger) from Rust.
    pub fn handle(&self) -> &SimHandle {
        self.sim.handle()
    }

    /// An SDK config (us-east-1, static test credentials) pointing at the simulator.
    pub fn sdk_config(&self) -> SdkConfig {
        test_sdk_config(&self.endpoint(), TEST_REGION)
    }

    /// A Marketplace Metering client on the simulator, with the SDK's default retries
    /// (wrap it in `awsmp_aws::SdkMeteringApi`, which makes one attempt per call).
    pub fn metering_client(&self) -> aws_sdk_marketplacemetering::Client {
        aws_sdk_marketplacemetering::Client::new(&self.sdk_config())
    }

    /// Environment for a process that should reach the simulator through the SDK's
    /// own variable.
    pub fn env_vars(&self) -> Vec<(String, String)> {
        vec![
            (
                "AWS_ENDPOINT_URL_MARKETPLACE_METERING".into(),
                self.endpoint(),
            ),
            ("AWS_REGION".into(), TEST_REGION.into()),
            ("AWS_ACCESS_KEY_ID".into(), TEST_ACCESS_KEY.into()),
            ("AWS_SECRET_ACCESS_KEY".into(), TEST_SECRET_KEY.into()),
        ]
    }

    /// Stops the server and waits for calls in progress to finish.
    pub async fn shutdown(self) -> Result<(), LocalAwsError> {
        self.sim
            .shutdown()
            .await
            .map_err(|e| LocalAwsError::Simulator(e.to_string()))
    }
}

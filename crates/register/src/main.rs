//! Bootstrap of the `register` Lambda: configuration, SDK clients, runtime loop.

use awsmp_register::{Config, State, handler};
use lambda_runtime::{Error, service_fn};

#[tokio::main]
async fn main() -> Result<(), Error> {
    awsmp_aws::init_tracing();
    let config = Config::from_env()?;
    let sdk = awsmp_aws::sdk::load_sdk_config().await;
    let state = State::connect(&sdk, &config);
    lambda_runtime::run(service_fn(|event| handler(&state, event))).await
}

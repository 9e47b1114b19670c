//! Bootstrap of the `register` Lambda: configuration, SDK clients, runtime loop.

use awsmp_register::{Config, RegisterState, handler};
use lambda_runtime::{Error, service_fn};

#[tokio::main]
async fn main() -> Result<(), Error> {
    awsmp_aws::init_tracing();
    let config = Config::from_env()?;
    let state = RegisterState::connect(config).await;
    lambda_runtime::run(service_fn(|event| handler(&state, event))).await
}

//! Bootstrap of the `buyer-events` function: its state built once
//! ([`awsmp_lambda::init`]: tracing, config, SDK config, the EventBridge client), then
//! the runtime loop on its handler.

use awsmp_buyer_events::{Config, State, handler};
use lambda_runtime::{Error, service_fn};

#[tokio::main]
async fn main() -> Result<(), Error> {
    let state = awsmp_lambda::init(Config::from_lookup, State::connect).await?;
    lambda_runtime::run(service_fn(|event| handler(&state, event))).await
}

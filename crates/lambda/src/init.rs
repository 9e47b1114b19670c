//! Everything a Lambda's `main.rs` does before the runtime loop, in one function
//! ([`init`]), so each `main.rs` is two lines that read like the runtime's `basic-sdk`
//! example: build the handler's state once, then `lambda_runtime::run` the handler on it.
//!
//! [`init`] performs, in this order:
//! 1. JSON tracing ([`crate::init_tracing`]), so that everything after it is logged;
//! 2. the function's configuration, read once from the process environment
//!    ([`process_env`]) by its `Config::from_lookup`: every problem at once, and a bad
//!    deploy fails here, at init, before any SDK call;
//! 3. the one SDK config, [`crate::sdk::load_sdk_config`] (Region, credentials and
//!    endpoints from the SDK's own variables; rustls on ring as the HTTP client);
//! 4. the handler's state, `State::connect(&sdk, &config)`, which builds every client once.

use aws_config::SdkConfig;

use super::{ConfigError, process_env};

/// Tracing, config, SDK config, state (see the module docs), for `main.rs`:
///
/// ```ignore
/// let state = awsmp_lambda::init(Config::from_lookup, State::connect).await?;
/// lambda_runtime::run(service_fn(|event| handler(&state, event))).await
/// ```
///
/// Fails, before any SDK call, with every problem of the configuration.
pub async fn init<C, S>(
    read_config: impl FnOnce(&dyn Fn(&str) -> Option<String>) -> Result<C, ConfigError>,
    connect: impl FnOnce(&SdkConfig, &C) -> S,
) -> Result<S, ConfigError> {
    crate::init_tracing();
    let config = read_config(&process_env)?;
    let sdk = crate::sdk::load_sdk_config().await;
    Ok(connect(&sdk, &config))
}

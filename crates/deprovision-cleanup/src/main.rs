//! Bootstrap of the `deprovision-cleanup` Lambda: configuration, SDK client, runtime loop.

use std::sync::Arc;

use awsmp_aws::{DynamoSubscriberStore, SystemClock};
use awsmp_deprovision_cleanup::{CleanupState, Config, handler};
use lambda_runtime::{Error, service_fn};

#[tokio::main]
async fn main() -> Result<(), Error> {
    awsmp_aws::init_tracing();
    let config = Config::from_env()?;
    let dynamodb = aws_sdk_dynamodb::Client::new(&awsmp_aws::load_sdk_config().await);
    let state = CleanupState {
        subscribers: Arc::new(DynamoSubscriberStore::new(
            dynamodb,
            &config.subscribers_table,
        )),
        clock: Arc::new(SystemClock),
        config: Arc::new(config),
    };
    lambda_runtime::run(service_fn(|event| handler(&state, event))).await
}

//! Bootstrap of the `register` Lambda: configuration, SDK clients, runtime loop.

use std::sync::Arc;

use aws_sdk_dynamodb::Client as Dynamo;
use aws_sdk_marketplacemetering::Client as Metering;
use awsmp_aws::{DynamoProfileStore, DynamoSubscriberStore, SdkCustomerResolver, SystemClock};
use awsmp_core::ports::ProfileStore;
use awsmp_register::{Config, RegisterState, handler};
use lambda_runtime::{Error, service_fn};

#[tokio::main]
async fn main() -> Result<(), Error> {
    awsmp_aws::init_tracing();
    let config = Config::from_env()?;
    let here = Dynamo::new(&awsmp_aws::load_sdk_config().await);
    let subscribers = awsmp_aws::load_sdk_config_in(&config.subscribers_table_region).await;
    let resolve = awsmp_aws::load_sdk_config_in(&config.resolve_customer_region).await;
    let table = &config.subscribers_table;
    let state = RegisterState {
        subscribers: Arc::new(DynamoSubscriberStore::new(Dynamo::new(&subscribers), table)),
        resolver: Arc::new(SdkCustomerResolver::new(Metering::new(&resolve))),
        profiles: (config.customer_profile_table.as_ref())
            .map(|t| Arc::new(DynamoProfileStore::new(here, t)) as Arc<dyn ProfileStore>),
        clock: Arc::new(SystemClock),
        config: Arc::new(config),
    };
    lambda_runtime::run(service_fn(|event| handler(&state, event))).await
}

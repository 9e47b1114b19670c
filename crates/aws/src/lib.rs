//! awsmp-aws: the ports of `awsmp-core` on the real AWS SDK. Thin by design: each
//! adapter maps domain types to `AttributeValue`s / SDK shapes and back, and maps SDK
//! errors to the port's errors; every decision stays in the core.
//!
//! | port | adapter |
//! |---|---|
//! | `UsageStore` | [`DynamoUsageStore`] |
//! | `AggregatedStore` | [`DynamoAggregatedStore`] (commit = one `TransactWriteItems`) |
//! | `SubscriberStore` | [`DynamoSubscriberStore`] |
//! | `ProfileStore` | [`DynamoProfileStore`] |
//! | `WorkQueue` | [`SqsWorkQueue`] |
//! | `MeteringApi` | [`SdkMeteringApi`] (one attempt per call) |
//! | `CustomerResolver` | [`SdkCustomerResolver`] |
//! | `MetricsSink` | [`EmfMetrics`] |
//! | `Clock` | [`SystemClock`] |
//! | `OperatorStore` | [`DynamoOperatorStore`] (the `awsmp` tool only) |

pub mod aggregated;
pub mod calls;
mod error;
pub mod item;
pub mod local;
pub mod metering;
pub mod metrics;
pub mod operator;
pub mod runtime;
pub mod sqs;
pub mod subscribers;
pub mod usage;

pub use aggregated::DynamoAggregatedStore;
pub use calls::{Authorization, CallLog, CallRecorder, RecordedCall};
pub use local::{LocalEndpoints, route_to_local};
pub use metering::{SdkCustomerResolver, SdkMeteringApi, metering_client};
pub use metrics::EmfMetrics;
pub use operator::DynamoOperatorStore;
pub use runtime::{
    SystemClock, WorkMessageError, behavior_version, init_tracing, load_sdk_config,
    load_sdk_config_in, parse_work_message,
};
pub use sqs::SqsWorkQueue;
pub use subscribers::{DynamoProfileStore, DynamoSubscriberStore};
pub use usage::DynamoUsageStore;

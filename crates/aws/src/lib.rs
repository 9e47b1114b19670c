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
//!
//! Beside the adapters, what every Lambda's `main.rs` and `lib.rs` share: [`sdk`] (the
//! pinned behaviour version, one config per Region), [`logging`] (JSON tracing),
//! [`message`] (reading work messages), [`clock`] (the real clock), [`local`] (the local
//! stack's SDK config) and [`lambda`] (config from the environment, the SQS
//! partial-batch loop, the scheduled run's "now", the `Diagnostic` of every error).

pub mod aggregated;
pub mod clock;
mod error;
pub mod item;
pub mod lambda;
pub mod local;
pub mod logging;
pub mod message;
pub mod metering;
pub mod metrics;
pub mod operator;
pub mod sdk;
pub mod sqs;
pub mod subscribers;
pub mod usage;

pub use aggregated::DynamoAggregatedStore;
pub use clock::SystemClock;
pub use local::LocalEndpoints;
pub use logging::init_tracing;
pub use message::{WorkMessageError, parse_work_message};
pub use metering::{SdkCustomerResolver, SdkMeteringApi, metering_client};
pub use metrics::EmfMetrics;
pub use operator::DynamoOperatorStore;
pub use sdk::{behavior_version, in_region};
pub use sqs::SqsWorkQueue;
pub use subscribers::{DynamoProfileStore, DynamoSubscriberStore};
pub use usage::DynamoUsageStore;

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
//! | `AgreementApi` | `SdkAgreementApi` (the `agreements` feature) |
//! | `MetricsSink` | [`EmfMetrics`] |
//! | `Clock` | [`SystemClock`] |
//! | `OperatorStore` | [`DynamoOperatorStore`] (the `awsmp` tool only) |
//! | `PiiTable` (awsmp-operate) | [`DynamoPiiTable`] (the `awsmp profile` commands only: one buyer's customer-profile row read or erased) |
//!
//! Beside the adapters: [`sdk`] (the pinned behaviour version, one config per Region),
//! [`message`] (reading work messages), [`clock`] (the real clock) and [`local`] (the
//! local stack's SDK config). The Lambda skeleton the functions share is `awsmp-lambda`.
//!
//! The SQS, Marketplace Metering, EventBridge and Agreement API adapters are behind the
//! `sqs`, `metering`, `eventbridge` and `agreements` features, so a seller's writer
//! (`awsmp-usage`) links the DynamoDB SDK alone.

pub mod aggregated;
#[cfg(feature = "agreements")]
pub mod agreements;
pub mod clock;
mod error;
#[cfg(feature = "eventbridge")]
pub mod events;
pub mod item;
pub mod local;
pub mod message;
#[cfg(feature = "metering")]
pub mod metering;
pub mod metrics;
pub mod operator;
pub mod pii;
pub mod profiles;
pub mod sdk;
#[cfg(feature = "sqs")]
pub mod sqs;
pub mod subscribers;
pub mod usage;

pub use aggregated::DynamoAggregatedStore;
#[cfg(feature = "agreements")]
pub use agreements::{SdkAgreementApi, agreement_client};
pub use clock::SystemClock;
#[cfg(feature = "eventbridge")]
pub use events::{BusState, EventBridgeBus};
pub use local::LocalEndpoints;
pub use message::{WorkMessageError, parse_work_message};
#[cfg(feature = "metering")]
pub use metering::{SdkCustomerResolver, SdkMeteringApi, metering_client};
pub use metrics::EmfMetrics;
pub use operator::DynamoOperatorStore;
pub use pii::{DynamoPiiTable, PiiTableError};
pub use profiles::DynamoProfileStore;
pub use sdk::{behavior_version, in_region};
#[cfg(feature = "sqs")]
pub use sqs::SqsWorkQueue;
pub use subscribers::DynamoSubscriberStore;
pub use usage::DynamoUsageStore;

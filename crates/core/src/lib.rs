//! awsmp-core: the AWS Marketplace metering domain. Pure rules (windows, guardrails,
//! VMT merge, aggregation, batching, bisection, outcome mapping, lifecycle), the
//! ports every external service sits behind, and the use cases the Lambdas run over
//! those ports. Nothing here touches an SDK type or does I/O of its own.

pub mod aggregate;
pub mod answer;
pub mod batch;
pub mod bisect;
pub mod clock;
pub mod config;
pub mod guardrails;
pub mod ingestion;
pub mod item_size;
pub mod items;
pub mod lifecycle;
#[cfg(any(test, feature = "test-util"))]
pub mod memory;
pub mod metrics;
pub mod model;
pub mod outcome;
pub mod pipeline;
pub mod ports;
pub mod remedy;
pub mod retention;
pub mod stamp;
mod sync;
pub mod time;
pub mod vmt;

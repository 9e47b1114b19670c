//! awsmp-core: the AWS Marketplace metering domain, one module per feature. The rules
//! every feature shares ([`model`], [`time`], [`retention`], [`remedy`]), the stored
//! item shapes ([`items`]), the [`ports`] every external service sits behind, and each
//! step with its rules and the use case its Lambda runs over the ports:
//! [`lifecycle`] (events stack), [`register`], [`guardrails`], [`discover`],
//! [`aggregate`], [`cleanup`], [`submit`], [`outcomes`] (events from the tables' streams); [`pipeline`] is what the use cases share,
//! and [`backoff`] and [`random`] sit below the ports and every use case. Nothing here
//! touches an SDK type or does I/O of its own; the operator's views are `awsmp-operate`.

pub mod aggregate;
pub mod backoff;
pub mod charges;
pub mod cleanup;
pub mod clock;
pub mod config;
pub mod corrections;
pub mod discover;
pub mod guardrails;
pub mod items;
pub mod lifecycle;
#[cfg(any(test, feature = "test-util"))]
pub mod memory;
pub mod metrics;
pub mod model;
pub mod outcomes;
pub mod pipeline;
pub mod ports;
pub mod random;
pub mod register;
pub mod remedy;
pub mod retention;
pub mod stamp;
pub mod submit;
mod sync;
pub mod time;
pub mod usage_api;

//! In-memory implementations of every port, faithful to the contracts in
//! [`crate::ports`] (conditional writes, sparse pending index, pagination, DynamoDB's
//! item and transaction limits), so use-case tests exercise the same semantics and item
//! shapes as the DynamoDB/SQS adapters. Test machinery: compiled only for tests and
//! with the `test-util` feature, never into a Lambda.
//!
//! The usage and aggregated stores share one [`MemoryTables`], because an
//! [`AggregationCommit`](crate::ports::AggregationCommit) writes both tables in one
//! all-or-nothing step, as the real adapter does with a DynamoDB transaction. Every
//! store is a cheap `Clone` handle on shared state: give one clone to the code under
//! test and inspect through another. Store operations can be made to fail once with
//! [`StoreOp`] (`fail_next`), to test retries and error paths. [`contract`] holds the
//! assertions every usage/aggregated store must pass, run against these stores and
//! against the DynamoDB adapters on moto. A test double that wraps a store (faults,
//! counting, a rival writer) implements a [`Decorator`] instead of every port method.
//! [`conservation`] is the conservation invariant every test of the whole pipeline
//! holds its tables and Marketplace's ledger to (the simulation, the e2e suite).

mod aggregated;
pub mod agreement_contract;
mod agreements;
mod bus;
pub mod conservation;
pub mod contract;
mod decorate;
mod faults;
pub mod fixtures;
mod metering;
mod operator;
mod page;
mod profiles;
mod queue;
mod resolver;
mod subscribers;
mod tables;
mod usage;

// The clock's one home is `crate::clock::ManualClock`. This second path stays only
// while crates/dev/dst and the register and usage-api tests (rewritten on other
// branches) still import it from here; drop it once they import `clock::ManualClock`.
#[doc(hidden)]
pub use crate::clock::ManualClock;
pub use crate::items::{
    INGESTION_MARKER_PREFIX, INGESTION_MARKER_ROW, allocations_attr, ingestion_item,
    ingestion_marker_event_id, ingestion_marker_item, ingestion_marker_sort_key,
    ingestion_sort_key,
};
pub use crate::metrics::RecordingMetrics;
pub use aggregated::{MemoryAggregatedStore, claim_read};
pub use agreements::{AgreementOp, AgreementRecord, MemoryAgreementApi};
pub use bus::MemoryBus;
pub use decorate::{
    AggregatedDecorator, Decorator, StoreCall, SubscriberDecorator, UsageDecorator, yield_now,
};
pub use faults::StoreOp;
pub use metering::{LedgerEntry, MAX_RECORDS_PER_BATCH, MemoryMeteringApi};
pub use operator::MemoryOperatorStore;
pub use profiles::MemoryProfileStore;
pub use queue::{DEFAULT_MAX_MESSAGE_BYTES, MemoryWorkQueue};
pub use resolver::MemoryCustomerResolver;
pub use subscribers::{MemorySubscriberStore, SubscriberChange};
pub use tables::{DEFAULT_PAGE_SIZE, Image, MemoryTables, StreamChange};
pub use usage::{MemoryUsageStore, reference_row};

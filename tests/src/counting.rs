//! Counting wrappers around the store ports: every call a handler makes to DynamoDB
//! goes through one of these, so a test or benchmark can report DynamoDB operations
//! per raw row end to end.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::Mutex;

use async_trait::async_trait;
use awsmp_core::memory::{
    AggregatedDecorator, Decorator, StoreCall, StoreOp, SubscriberDecorator, UsageDecorator,
};
use awsmp_core::ports::{AggregatedStore, PortError, SubscriberStore, UsageStore};

/// Calls per `table.operation`, plus the items written by aggregation commits
/// (one `TransactWriteItems` call writes the record and every claimed row).
#[derive(Debug, Default)]
pub struct OpCounts {
    calls: Mutex<BTreeMap<&'static str, u64>>,
    /// A server that answers one request at a time, each taking this long (benchmarks).
    latency: Option<std::time::Duration>,
    /// When that server is free again: each request is served after the ones before it,
    /// whether or not its caller is waiting on it at the moment (a real server's queue).
    free_at: Mutex<Option<tokio::time::Instant>>,
}

impl OpCounts {
    /// A fresh counter.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// A fresh counter whose aggregated-store requests wait like a server that answers
    /// one request at a time, `latency` each (a hot partition or a throttled table).
    pub fn serial(latency: std::time::Duration) -> Arc<Self> {
        Arc::new(OpCounts {
            latency: Some(latency),
            ..Self::default()
        })
    }

    /// Waits out one request's latency, behind every request before it.
    async fn wait(&self) {
        if let Some(latency) = self.latency {
            let done = {
                let mut free_at = self.free_at.lock().unwrap_or_else(|e| e.into_inner());
                let start = free_at.map_or_else(tokio::time::Instant::now, |at| {
                    at.max(tokio::time::Instant::now())
                });
                *free_at.insert(start + latency)
            };
            tokio::time::sleep_until(done).await;
        }
    }

    fn add(&self, name: &'static str, n: u64) {
        let mut calls = self
            .calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *calls.entry(name).or_insert(0) += n;
    }

    /// Every counter.
    pub fn snapshot(&self) -> BTreeMap<&'static str, u64> {
        self.calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// DynamoDB calls in total (every counter except the `items.` ones).
    pub fn total_calls(&self) -> u64 {
        self.snapshot()
            .iter()
            .filter(|(k, _)| !k.starts_with("items."))
            .map(|(_, v)| *v)
            .sum()
    }

    /// Forgets every count.
    pub fn reset(&self) {
        self.calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clear();
    }
}

/// The DynamoDB operation a store call costs, as the counters name it, and the
/// counter of the items a batched write writes.
fn counters(op: StoreOp) -> (&'static str, Option<&'static str>) {
    match op {
        StoreOp::UsagePendingPage => ("usage.query_pending", None),
        StoreOp::UsageGroupRows => ("usage.query_group", None),
        StoreOp::UsageGetRow => ("usage.get", None),
        StoreOp::UsageFinalizeRow => ("usage.finalize", None),
        StoreOp::UsagePutRow => ("usage.put", None),
        StoreOp::UsageStrayPendingPage => ("usage.scan_pending", None),
        StoreOp::UsageRepairPending => ("usage.repair_pending", None),
        StoreOp::AggregatedCommit => ("aggregated.commit", Some("items.commit_writes")),
        StoreOp::AggregatedClaim => ("aggregated.claim_all", Some("items.claim_writes")),
        StoreOp::AggregatedRecord => ("aggregated.record_all", Some("items.record_writes")),
        StoreOp::AggregatedPendingPage => ("aggregated.query_pending", None),
        StoreOp::AggregatedStrayPendingPage => ("aggregated.scan_pending", None),
        other => (other.name(), None),
    }
}

/// A store that counts its calls: a [`UsageStore`], an [`AggregatedStore`] or a
/// [`SubscriberStore`] as the store it wraps is. Aggregated-store calls wait out
/// [`OpCounts::serial`]'s latency.
pub struct Counting<S: ?Sized> {
    /// The real store.
    pub inner: Arc<S>,
    /// Where counts go.
    pub counts: Arc<OpCounts>,
}

/// A [`UsageStore`] that counts its calls.
pub type CountingUsage<S> = Counting<S>;
/// An [`AggregatedStore`] that counts its calls.
pub type CountingAggregated<S> = Counting<S>;
/// A [`SubscriberStore`] that counts its calls.
pub type CountingSubscribers<S> = Counting<S>;

#[async_trait]
impl<S: Send + Sync + ?Sized> Decorator for Counting<S> {
    async fn around<T: Send>(
        &self,
        call: StoreCall,
        inner: impl std::future::Future<Output = Result<T, PortError>> + Send,
    ) -> Result<T, PortError> {
        let (operation, items) = counters(call.op);
        self.counts.add(operation, 1);
        if let Some(items) = items {
            self.counts.add(items, call.items as u64);
        }
        if operation.starts_with("aggregated.") {
            self.counts.wait().await;
        }
        inner.await
    }
}

impl<S: UsageStore + ?Sized> UsageDecorator for Counting<S> {
    type Inner = S;
    fn inner(&self) -> &S {
        &self.inner
    }
}

impl<S: AggregatedStore + ?Sized> AggregatedDecorator for Counting<S> {
    type Inner = S;
    fn inner(&self) -> &S {
        &self.inner
    }
}

impl<S: SubscriberStore + ?Sized> SubscriberDecorator for Counting<S> {
    type Inner = S;
    fn inner(&self) -> &S {
        &self.inner
    }
}

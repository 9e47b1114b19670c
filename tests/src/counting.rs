//! Counting wrappers around the store ports: every call a handler makes to DynamoDB
//! goes through one of these, so a test or benchmark can report DynamoDB operations
//! per raw row end to end.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::Mutex;

use async_trait::async_trait;
use awsmp_core::model::{AggregatedRecord, GroupKey, RawUsageRow, Subscriber};
use awsmp_core::ports::{
    AggregatedStore, AggregationCommit, ClaimGrant, ClaimRequest, CommitOutcome, Cursor,
    MalformedItem, NewUsageRow, OutcomeWrite, Page, PendingRawRef, PortError, PutOutcome, RowClaim,
    StrayPending, SubscriberStore, UsageStore,
};
use awsmp_core::time::{HourBucket, Instant};

/// Calls per `table.operation`, plus the items written by aggregation commits
/// (one `TransactWriteItems` call writes the record and every claimed row).
#[derive(Debug, Default)]
pub struct OpCounts {
    calls: Mutex<BTreeMap<&'static str, u64>>,
    /// A server that answers one request at a time, each taking this long (benchmarks).
    latency: Option<std::time::Duration>,
    gate: tokio::sync::Mutex<()>,
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
            let _turn = self.gate.lock().await;
            tokio::time::sleep(latency).await;
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

/// A [`UsageStore`] that counts its calls.
pub struct CountingUsage<S> {
    /// The real store.
    pub inner: S,
    /// Where counts go.
    pub counts: Arc<OpCounts>,
}

#[async_trait]
impl<S: UsageStore> UsageStore for CountingUsage<S> {
    async fn pending_page(
        &self,
        hour: HourBucket,
        cursor: Option<Cursor>,
    ) -> Result<Page<PendingRawRef>, PortError> {
        self.counts.add("usage.query_pending", 1);
        self.inner.pending_page(hour, cursor).await
    }
    async fn group_rows(&self, key: &GroupKey) -> Result<Vec<RawUsageRow>, PortError> {
        self.counts.add("usage.query_group", 1);
        self.inner.group_rows(key).await
    }
    async fn get_row(
        &self,
        license_arn: &str,
        sort_key: &str,
    ) -> Result<Option<RawUsageRow>, PortError> {
        self.counts.add("usage.get", 1);
        self.inner.get_row(license_arn, sort_key).await
    }
    async fn finalize_row(
        &self,
        license_arn: &str,
        sort_key: &str,
        claim: RowClaim<'_>,
        outcome: awsmp_core::ports::RowFinal,
        now: Instant,
    ) -> Result<bool, PortError> {
        self.counts.add("usage.finalize", 1);
        self.inner
            .finalize_row(license_arn, sort_key, claim, outcome, now)
            .await
    }
    async fn put_row(&self, row: &NewUsageRow, now: Instant) -> Result<PutOutcome, PortError> {
        self.counts.add("usage.put", 1);
        self.inner.put_row(row, now).await
    }
    async fn stray_pending_page(
        &self,
        live: &[HourBucket],
        cursor: Option<Cursor>,
    ) -> Result<Page<StrayPending>, PortError> {
        self.counts.add("usage.scan_pending", 1);
        self.inner.stray_pending_page(live, cursor).await
    }
    async fn repair_pending(
        &self,
        license_arn: &str,
        sort_key: &str,
        from: &str,
        hour: HourBucket,
        now: Instant,
    ) -> Result<bool, PortError> {
        self.counts.add("usage.repair_pending", 1);
        self.inner
            .repair_pending(license_arn, sort_key, from, hour, now)
            .await
    }
}

/// An [`AggregatedStore`] that counts its calls.
pub struct CountingAggregated<S> {
    /// The real store.
    pub inner: S,
    /// Where counts go.
    pub counts: Arc<OpCounts>,
}

#[async_trait]
impl<S: AggregatedStore> AggregatedStore for CountingAggregated<S> {
    async fn get(&self, key: &GroupKey) -> Result<Option<AggregatedRecord>, PortError> {
        self.counts.add("aggregated.get", 1);
        self.counts.wait().await;
        self.inner.get(key).await
    }
    async fn commit(&self, commit: &AggregationCommit) -> Result<CommitOutcome, PortError> {
        self.counts.add("aggregated.commit", 1);
        self.counts
            .add("items.commit_writes", 1 + commit.claimed_rows.len() as u64);
        self.counts.wait().await;
        self.inner.commit(commit).await
    }
    async fn pending_page(
        &self,
        hour: HourBucket,
        cursor: Option<Cursor>,
    ) -> Result<Page<AggregatedRecord>, PortError> {
        self.counts.add("aggregated.query_pending", 1);
        self.counts.wait().await;
        self.inner.pending_page(hour, cursor).await
    }
    async fn claim_all(
        &self,
        requests: &[ClaimRequest],
    ) -> Result<Vec<Option<ClaimGrant>>, PortError> {
        self.counts.add("aggregated.claim_all", 1);
        self.counts.add("items.claim_writes", requests.len() as u64);
        self.counts.wait().await;
        self.inner.claim_all(requests).await
    }
    async fn record_all(
        &self,
        writes: &[OutcomeWrite],
        now: Instant,
    ) -> Result<Vec<bool>, PortError> {
        self.counts.add("aggregated.record_all", 1);
        self.counts.add("items.record_writes", writes.len() as u64);
        self.counts.wait().await;
        self.inner.record_all(writes, now).await
    }
    async fn reject_malformed(
        &self,
        item: &MalformedItem,
        reason: &str,
        expires_at: Option<Instant>,
        now: Instant,
    ) -> Result<bool, PortError> {
        self.counts.add("aggregated.reject_malformed", 1);
        self.counts.wait().await;
        self.inner
            .reject_malformed(item, reason, expires_at, now)
            .await
    }
    async fn stray_pending_page(
        &self,
        live: &[HourBucket],
        cursor: Option<Cursor>,
    ) -> Result<Page<AggregatedRecord>, PortError> {
        self.counts.add("aggregated.scan_pending", 1);
        self.counts.wait().await;
        self.inner.stray_pending_page(live, cursor).await
    }
    async fn put_direct(
        &self,
        record: &AggregatedRecord,
        now: Instant,
    ) -> Result<PutOutcome, PortError> {
        self.counts.add("aggregated.put_direct", 1);
        self.counts.wait().await;
        self.inner.put_direct(record, now).await
    }
}

/// A [`SubscriberStore`] that counts its calls.
pub struct CountingSubscribers<S> {
    /// The real store.
    pub inner: S,
    /// Where counts go.
    pub counts: Arc<OpCounts>,
}

#[async_trait]
impl<S: SubscriberStore> SubscriberStore for CountingSubscribers<S> {
    async fn get(&self, license_arn: &str, account: &str) -> Result<Option<Subscriber>, PortError> {
        self.counts.add("subscribers.get", 1);
        self.inner.get(license_arn, account).await
    }
    async fn by_license(&self, license_arn: &str) -> Result<Vec<Subscriber>, PortError> {
        self.counts.add("subscribers.by_license", 1);
        self.inner.by_license(license_arn).await
    }
    async fn by_agreement(&self, agreement_id: &str) -> Result<Vec<Subscriber>, PortError> {
        self.counts.add("subscribers.by_agreement", 1);
        self.inner.by_agreement(agreement_id).await
    }
    async fn deprovisioning(&self) -> Result<Vec<Subscriber>, PortError> {
        self.counts.add("subscribers.deprovisioning", 1);
        self.inner.deprovisioning().await
    }
    async fn put_lifecycle(&self, row: &Subscriber, now: Instant) -> Result<bool, PortError> {
        self.counts.add("subscribers.put_lifecycle", 1);
        self.inner.put_lifecycle(row, now).await
    }
    async fn add_registered_region(
        &self,
        license_arn: &str,
        account: &str,
        product_code: &str,
        region: &str,
        now: Instant,
    ) -> Result<(), PortError> {
        self.counts.add("subscribers.add_registered_region", 1);
        self.inner
            .add_registered_region(license_arn, account, product_code, region, now)
            .await
    }
}

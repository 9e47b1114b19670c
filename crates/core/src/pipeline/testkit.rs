//! Test fixtures for the use cases: one in-memory world (shared usage/aggregated
//! tables, queues, subscribers, metrics, a manual clock, an in-memory Marketplace) and
//! helpers that run each stage the way its Lambda would.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;

use crate::aggregate::ZeroQuantityPolicy;
use crate::aggregate::run::{AggregatePorts, AggregateReport, AggregateSettings, aggregate_group};
use crate::cleanup::{CleanupPorts, CleanupReport, finalize_named_rows};
use crate::clock::ManualClock;
use crate::discover::{DiscoverPorts, DiscoverReport, DiscoverSettings, discover};
use crate::memory::{
    MemoryAggregatedStore, MemoryMeteringApi, MemorySubscriberStore, MemoryTables,
    MemoryUsageStore, MemoryWorkQueue, RecordingMetrics, reference_row,
};
use crate::model::{
    AggregatedRecord, Attr, GroupKey, RawUsageRow, Subscriber, SubscriptionStatus, attr,
};
use crate::pipeline::budget::Budget;
use crate::pipeline::error::PipelineError;
use crate::ports::{Clock, PortError, WorkMessage};
use crate::retention::Retention;
use crate::submit::{
    DeploymentMode, MeteringMode, SubmitPorts, SubmitReport, SubmitSettings, submit,
};
use crate::time::{HourBucket, Instant, MeteringLockHours, parse_usage_timestamp};

pub const PRODUCT: &str = "prod-abc123";
pub const ACCOUNT_A: &str = "111122223333";
pub const ACCOUNT_B: &str = "444455556666";

pub fn license(n: u32) -> String {
    format!("arn:aws:license-manager::123456789012:license:l-{n:016x}")
}

pub fn t(s: &str) -> Instant {
    parse_usage_timestamp(s).unwrap()
}

pub fn hour(s: &str) -> HourBucket {
    s.parse().unwrap()
}

pub fn group(license_arn: &str, account: &str, dimension: &str, h: &str) -> GroupKey {
    GroupKey {
        license_arn: license_arn.to_string(),
        customer_aws_account_id: account.to_string(),
        dimension: dimension.to_string(),
        hour: hour(h),
    }
}

/// Everything a pipeline test touches.
#[derive(Clone)]
pub struct World {
    pub tables: MemoryTables,
    pub usage: MemoryUsageStore,
    pub aggregated: MemoryAggregatedStore,
    pub subscribers: MemorySubscriberStore,
    pub work: MemoryWorkQueue,
    pub deprovision: MemoryWorkQueue,
    pub cleanup_queue: MemoryWorkQueue,
    pub metrics: RecordingMetrics,
    pub clock: ManualClock,
    pub api: MemoryMeteringApi,
    pub lock: MeteringLockHours,
    pub zero_policy: ZeroQuantityPolicy,
    /// Every stage's `DATA_RETENTION_DAYS`: the floor by default, so every pipeline test
    /// runs with expiries on and checks that no pending item ever carries one
    /// ([`World::assert_no_pending_expiry`], after each stage helper).
    pub retention: Retention,
}

impl World {
    pub fn new(now: Instant) -> Self {
        let tables = MemoryTables::new();
        World {
            usage: tables.usage_store(),
            aggregated: tables.aggregated_store(),
            tables,
            subscribers: MemorySubscriberStore::new(),
            work: MemoryWorkQueue::new(),
            deprovision: MemoryWorkQueue::new(),
            cleanup_queue: MemoryWorkQueue::new(),
            metrics: RecordingMetrics::new(),
            clock: ManualClock::new(now),
            api: MemoryMeteringApi::new(),
            lock: MeteringLockHours::DEFAULT,
            zero_policy: ZeroQuantityPolicy::Defer,
            retention: Retention::MIN,
        }
    }

    /// The property every stage keeps: no item that is not final carries `expiresAt`
    /// (DynamoDB would delete usage before it is counted or billed). A seller's row may
    /// arrive with one (it is refused `ReservedAttribute`): until the pipeline's final
    /// write it is the seller's, so raw rows the pipeline never wrote (no `updatedAt`)
    /// are left out.
    pub fn assert_no_pending_expiry(&self) {
        let carrying: Vec<String> = self
            .tables
            .pending_items_with_expiry()
            .into_iter()
            .filter(|item| {
                !item.starts_with("usage ")
                    || self.tables.raw_rows().iter().any(|row| {
                        *item == format!("usage {}/{}", row.license_arn, row.sort_key)
                            && row.attrs.contains_key(attr::UPDATED_AT)
                    })
            })
            .collect();
        assert!(
            carrying.is_empty(),
            "pending items carry expiresAt: {carrying:?}"
        );
    }

    /// A raw row's `expiresAt`, if it carries one.
    pub fn row_expiry(&self, license_arn: &str, sort_key: &str) -> Option<Instant> {
        self.row(license_arn, sort_key)
            .attrs
            .get(attr::EXPIRES_AT)
            .and_then(crate::items::expiry_of)
    }

    /// Writes a pending row in the reference writer's shape.
    pub fn put(
        &self,
        license_arn: &str,
        account: &str,
        dimension: &str,
        ts: &str,
        quantity: i64,
    ) -> String {
        let row = reference_row(license_arn, account, dimension, ts, quantity);
        let sort_key = row.sort_key.clone();
        self.tables.insert_raw_row(row);
        sort_key
    }

    /// [`World::put`] for each `(license, account, dimension, timestamp, quantity)`.
    pub fn put_each(&self, rows: &[(&str, &str, &str, &str, i64)]) {
        for (license_arn, account, dimension, ts, quantity) in rows {
            self.put(license_arn, account, dimension, ts, *quantity);
        }
    }

    pub fn put_row(&self, row: RawUsageRow) -> String {
        let sort_key = row.sort_key.clone();
        self.tables.insert_raw_row(row);
        sort_key
    }

    pub fn row(&self, license_arn: &str, sort_key: &str) -> RawUsageRow {
        self.tables
            .raw_row(license_arn, sort_key)
            .expect("row exists")
    }

    pub fn status(&self, license_arn: &str, sort_key: &str) -> Option<String> {
        string_attr(&self.row(license_arn, sort_key), attr::METERING_STATUS)
    }

    pub fn reason(&self, license_arn: &str, sort_key: &str) -> Option<String> {
        string_attr(
            &self.row(license_arn, sort_key),
            attr::METERING_STATUS_REASON,
        )
    }

    pub fn record(&self, key: &GroupKey) -> Option<AggregatedRecord> {
        self.tables
            .aggregated_records()
            .into_iter()
            .find(|r| r.key == *key)
    }

    pub fn subscribe(
        &self,
        license_arn: &str,
        account: &str,
        status: SubscriptionStatus,
        expiry: Option<Instant>,
    ) {
        let mut row = Subscriber::new(license_arn, account);
        row.subscription_status = Some(status);
        row.deprovisioning_expiry = expiry;
        row.product_code = Some(PRODUCT.to_string());
        self.subscribers.insert(row, self.clock.now());
    }

    /// A subscriber in its final-usage window, which closes at `expiry`.
    pub fn deprovisioning(&self, license_arn: &str, account: &str, expiry: &str) {
        self.subscribe(
            license_arn,
            account,
            SubscriptionStatus::Deprovisioning,
            Some(t(expiry)),
        );
    }

    pub fn discover_settings(&self) -> DiscoverSettings {
        DiscoverSettings {
            retention: self.retention,
            ..DiscoverSettings::new(PRODUCT, self.lock)
        }
    }

    pub fn discover_ports(&self) -> DiscoverPorts {
        DiscoverPorts {
            usage: Arc::new(self.usage.clone()),
            subscribers: Arc::new(self.subscribers.clone()),
            work_queue: Arc::new(self.work.clone()),
            deprovision_queue: Arc::new(self.deprovision.clone()),
            profiles: None,
            metrics: Arc::new(self.metrics.clone()),
            clock: Arc::new(self.clock.clone()),
        }
    }

    pub async fn discover(&self, now: Instant) -> DiscoverReport {
        let report = discover(
            now,
            &self.discover_settings(),
            &self.discover_ports(),
            Budget::UNLIMITED,
        )
        .await
        .unwrap();
        self.assert_no_pending_expiry();
        report
    }

    pub fn aggregate_settings(&self) -> AggregateSettings {
        AggregateSettings {
            product_code: PRODUCT.to_string(),
            lock: self.lock,
            zero_policy: self.zero_policy,
            retention: self.retention,
        }
    }

    pub fn aggregate_ports(&self) -> AggregatePorts {
        AggregatePorts {
            usage: Arc::new(self.usage.clone()),
            aggregated: Arc::new(self.aggregated.clone()),
            cleanup_queue: Arc::new(self.cleanup_queue.clone()),
            clock: Arc::new(self.clock.clone()),
        }
    }

    pub async fn aggregate(
        &self,
        message: &WorkMessage,
        now: Instant,
    ) -> Result<AggregateReport, PipelineError> {
        let report = aggregate_group(
            message,
            now,
            &self.aggregate_settings(),
            &self.aggregate_ports(),
        )
        .await;
        self.assert_no_pending_expiry();
        report
    }

    /// Drains both work queues (deprovisioning first) through the aggregator; failed
    /// messages are returned (SQS would redeliver them).
    pub async fn aggregate_all(&self, now: Instant) -> Vec<(WorkMessage, PipelineError)> {
        let mut failed = Vec::new();
        for message in self
            .deprovision
            .drain()
            .into_iter()
            .chain(self.work.drain())
        {
            if let Err(e) = self.aggregate(&message, now).await {
                failed.push((message, e));
            }
        }
        failed
    }

    pub fn cleanup_ports(&self) -> CleanupPorts {
        CleanupPorts {
            usage: Arc::new(self.usage.clone()),
            metrics: Arc::new(self.metrics.clone()),
            clock: Arc::new(self.clock.clone()),
        }
    }

    pub async fn cleanup_all(&self, now: Instant) -> CleanupReport {
        let mut total = CleanupReport::default();
        for message in self.cleanup_queue.drain() {
            let report = finalize_named_rows(&message, now, self.retention, &self.cleanup_ports())
                .await
                .unwrap();
            total = crate::cleanup::merge_reports([&total, &report]);
        }
        self.assert_no_pending_expiry();
        total
    }

    /// Discover, aggregate, clean up at `now`.
    pub async fn run_upstream(&self, now: Instant) {
        self.discover(now).await;
        let failed = self.aggregate_all(now).await;
        assert!(failed.is_empty(), "aggregation failed: {failed:?}");
        self.cleanup_all(now).await;
    }

    pub fn submit_settings(&self) -> SubmitSettings {
        SubmitSettings {
            retention: self.retention,
            ..SubmitSettings::new(
                PRODUCT,
                MeteringMode::Live,
                self.zero_policy,
                DeploymentMode::Full,
            )
        }
    }

    pub fn submit_ports(&self) -> SubmitPorts {
        SubmitPorts {
            aggregated: Arc::new(self.aggregated.clone()),
            subscribers: Arc::new(self.subscribers.clone()),
            metering: Arc::new(self.api.clone()),
            metrics: Arc::new(self.metrics.clone()),
            clock: Arc::new(self.clock.clone()),
        }
    }

    pub async fn submit(&self, now: Instant) -> SubmitReport {
        // A run at `now` happens no earlier than `now` on the wall clock (leases).
        if now > self.clock.now() {
            self.clock.set(now);
        }
        let report = submit(
            now,
            &self.submit_settings(),
            &self.submit_ports(),
            Budget::UNLIMITED,
        )
        .await
        .unwrap();
        self.assert_no_pending_expiry();
        report
    }

    /// Every raw row's status (None while pending).
    pub fn raw_statuses(&self) -> Vec<(String, Option<String>)> {
        self.tables
            .raw_rows()
            .into_iter()
            .map(|row| {
                let status = string_attr(&row, attr::METERING_STATUS);
                (row.sort_key, status)
            })
            .collect()
    }
}

/// A raw row's string attribute `name`, if it has one.
fn string_attr(row: &RawUsageRow, name: &str) -> Option<String> {
    row.attrs.get(name).and_then(Attr::as_s).map(str::to_string)
}

/// A usage store that advances the clock on every index page (to test deadlines) and
/// counts pages.
pub struct SlowUsage {
    pub inner: MemoryUsageStore,
    pub clock: ManualClock,
    pub step: std::time::Duration,
    pub pages: Arc<AtomicUsize>,
}

#[async_trait]
impl crate::memory::Decorator for SlowUsage {
    /// Each page of the pending index (queried or swept) costs `step` of the clock.
    async fn around<T: Send>(
        &self,
        call: crate::memory::StoreCall,
        inner: impl std::future::Future<Output = Result<T, PortError>> + Send,
    ) -> Result<T, PortError> {
        if matches!(
            call.op,
            crate::memory::StoreOp::UsagePendingPage
                | crate::memory::StoreOp::UsageStrayPendingPage
        ) {
            self.clock.advance(self.step);
            self.pages.fetch_add(1, Ordering::SeqCst);
        }
        inner.await
    }
}

impl crate::memory::UsageDecorator for SlowUsage {
    type Inner = MemoryUsageStore;
    fn inner(&self) -> &MemoryUsageStore {
        &self.inner
    }
}

/// A submitter claim `id` taken at `now`, leased for `minutes`.
pub fn claim_at(id: &str, now: Instant, minutes: i64) -> crate::ports::Claim {
    crate::ports::Claim {
        id: id.to_string(),
        now,
        until: now + chrono::Duration::minutes(minutes),
    }
}

/// A store whose calls of `op` take effect and then lose their answer
/// ([`PortError::Transient`], as a timeout or the SDK's retry would), as the
/// simulation's lost responses do: `times` of them, each followed by one answered call
/// (the retry), so that consecutive writes each lose one answer.
pub struct LostAnswers<S> {
    pub inner: S,
    pub op: crate::memory::StoreOp,
    /// (answers still to lose, whether the last call of `op` lost its answer).
    state: std::sync::Mutex<(usize, bool)>,
}

impl<S> LostAnswers<S> {
    pub fn new(inner: S, op: crate::memory::StoreOp, times: usize) -> Self {
        LostAnswers {
            inner,
            op,
            state: std::sync::Mutex::new((times, false)),
        }
    }

    /// Answers lost so far are all there were to lose.
    pub fn exhausted(&self) -> bool {
        self.state.lock().unwrap().0 == 0
    }
}

#[async_trait]
impl<S: Send + Sync> crate::memory::Decorator for LostAnswers<S> {
    async fn around<T: Send>(
        &self,
        call: crate::memory::StoreCall,
        inner: impl std::future::Future<Output = Result<T, PortError>> + Send,
    ) -> Result<T, PortError> {
        let out = inner.await?;
        if call.op != self.op {
            return Ok(out);
        }
        let lose = {
            let mut state = self.state.lock().unwrap();
            let (left, just_lost) = *state;
            let lose = left > 0 && !just_lost;
            *state = (left - usize::from(lose), lose);
            lose
        };
        if lose {
            return Err(PortError::Transient {
                operation: call.op.name(),
                message: "the call took effect, its answer was lost".into(),
            });
        }
        Ok(out)
    }
}

impl crate::memory::UsageDecorator for LostAnswers<MemoryUsageStore> {
    type Inner = MemoryUsageStore;
    fn inner(&self) -> &MemoryUsageStore {
        &self.inner
    }
}

#[async_trait]
impl crate::memory::AggregatedDecorator for LostAnswers<MemoryAggregatedStore> {
    type Inner = MemoryAggregatedStore;
    fn inner(&self) -> &MemoryAggregatedStore {
        &self.inner
    }
}

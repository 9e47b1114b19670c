//! The in-memory ports wrapped for the simulation: every call is a yield point (the
//! scheduler may run another task there), may fail before taking effect, and a write
//! may take effect and then lose its response. `BatchMeterUsage` additionally throttles,
//! leaves records unprocessed, refuses the Region for a while, and bills then loses
//! its answer, or hangs for minutes (killing an invocation whose timeout passes); every quantity it is sent is recorded, to catch a group sent twice with
//! two quantities.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use awsmp_core::memory::{
    ManualClock, MemoryAggregatedStore, MemoryMeteringApi, MemorySubscriberStore, MemoryUsageStore,
};
use awsmp_core::model::{AggregatedRecord, GroupKey, RawUsageRow, Subscriber};
use awsmp_core::ports::{
    AggregatedStore, AggregationCommit, ClaimGrant, ClaimRequest, Clock, CommitOutcome, Cursor,
    MalformedItem, MeteringApi, MeteringError, MeteringRecord, NewUsageRow, OutcomeWrite, Page,
    PendingRawRef, PortError, PutOutcome, RecordVerdict, RowClaim, StrayPending, SubscriberStore,
    UsageStore,
};
use awsmp_core::time::{HourBucket, Instant};

use crate::sim::{FaultKind, Sim, yield_now};

/// Runs one store call with the simulation's faults: a yield, maybe a failure before
/// the call, the call, and (for writes) maybe a lost response after it.
async fn guarded<T>(
    sim: &Sim,
    op: &'static str,
    write: bool,
    call: impl std::future::Future<Output = Result<T, PortError>>,
) -> Result<T, PortError> {
    yield_now().await;
    if sim.fault(FaultKind::StoreTransient, op) {
        return Err(PortError::Transient {
            operation: op,
            message: "injected: throttled before the call took effect".into(),
        });
    }
    let out = call.await;
    if write && out.is_ok() && sim.fault(FaultKind::StoreLostResponse, op) {
        return Err(PortError::Transient {
            operation: op,
            message: "injected: the call took effect, its response was lost".into(),
        });
    }
    out
}

/// The usage table with faults.
pub struct FaultyUsage {
    /// The store.
    pub inner: MemoryUsageStore,
    /// The simulation.
    pub sim: Sim,
}

#[async_trait]
impl UsageStore for FaultyUsage {
    async fn pending_page(
        &self,
        hour: HourBucket,
        cursor: Option<Cursor>,
    ) -> Result<Page<PendingRawRef>, PortError> {
        guarded(
            &self.sim,
            "usage.pending_page",
            false,
            self.inner.pending_page(hour, cursor),
        )
        .await
    }
    async fn group_rows(&self, key: &GroupKey) -> Result<Vec<RawUsageRow>, PortError> {
        guarded(
            &self.sim,
            "usage.group_rows",
            false,
            self.inner.group_rows(key),
        )
        .await
    }
    async fn get_row(
        &self,
        license_arn: &str,
        sort_key: &str,
    ) -> Result<Option<RawUsageRow>, PortError> {
        guarded(
            &self.sim,
            "usage.get_row",
            false,
            self.inner.get_row(license_arn, sort_key),
        )
        .await
    }
    async fn finalize_row(
        &self,
        license_arn: &str,
        sort_key: &str,
        claim: RowClaim<'_>,
        outcome: awsmp_core::ports::RowFinal,
        now: Instant,
    ) -> Result<bool, PortError> {
        let call = self
            .inner
            .finalize_row(license_arn, sort_key, claim, outcome, now);
        guarded(&self.sim, "usage.finalize_row", true, call).await
    }
    async fn put_row(&self, row: &NewUsageRow, now: Instant) -> Result<PutOutcome, PortError> {
        guarded(
            &self.sim,
            "usage.put_row",
            true,
            self.inner.put_row(row, now),
        )
        .await
    }
    async fn stray_pending_page(
        &self,
        live: &[HourBucket],
        cursor: Option<Cursor>,
    ) -> Result<Page<StrayPending>, PortError> {
        let call = self.inner.stray_pending_page(live, cursor);
        guarded(&self.sim, "usage.stray_pending_page", false, call).await
    }
    async fn repair_pending(
        &self,
        license_arn: &str,
        sort_key: &str,
        from: &str,
        hour: HourBucket,
        now: Instant,
    ) -> Result<bool, PortError> {
        let call = self
            .inner
            .repair_pending(license_arn, sort_key, from, hour, now);
        guarded(&self.sim, "usage.repair_pending", true, call).await
    }
}

/// The aggregated table with faults (and spurious transaction conflicts).
pub struct FaultyAggregated {
    /// The store.
    pub inner: MemoryAggregatedStore,
    /// The simulation.
    pub sim: Sim,
}

#[async_trait]
impl AggregatedStore for FaultyAggregated {
    async fn get(&self, key: &GroupKey) -> Result<Option<AggregatedRecord>, PortError> {
        guarded(&self.sim, "aggregated.get", false, self.inner.get(key)).await
    }
    async fn commit(&self, commit: &AggregationCommit) -> Result<CommitOutcome, PortError> {
        yield_now().await;
        if self
            .sim
            .fault(FaultKind::TransactionConflict, "aggregated.commit")
        {
            return Ok(CommitOutcome::Conflict);
        }
        guarded(
            &self.sim,
            "aggregated.commit",
            true,
            self.inner.commit(commit),
        )
        .await
    }
    async fn pending_page(
        &self,
        hour: HourBucket,
        cursor: Option<Cursor>,
    ) -> Result<Page<AggregatedRecord>, PortError> {
        let call = self.inner.pending_page(hour, cursor);
        guarded(&self.sim, "aggregated.pending_page", false, call).await
    }
    async fn claim_all(
        &self,
        requests: &[ClaimRequest],
    ) -> Result<Vec<Option<ClaimGrant>>, PortError> {
        let call = self.inner.claim_all(requests);
        guarded(&self.sim, "aggregated.claim_all", true, call).await
    }
    async fn record_all(
        &self,
        writes: &[OutcomeWrite],
        now: Instant,
    ) -> Result<Vec<bool>, PortError> {
        let call = self.inner.record_all(writes, now);
        guarded(&self.sim, "aggregated.record_all", true, call).await
    }
    async fn put_direct(
        &self,
        record: &AggregatedRecord,
        now: Instant,
    ) -> Result<PutOutcome, PortError> {
        guarded(
            &self.sim,
            "aggregated.put_direct",
            true,
            self.inner.put_direct(record, now),
        )
        .await
    }
    async fn reject_malformed(
        &self,
        item: &MalformedItem,
        reason: &str,
        expires_at: Option<Instant>,
        now: Instant,
    ) -> Result<bool, PortError> {
        let call = self.inner.reject_malformed(item, reason, expires_at, now);
        guarded(&self.sim, "aggregated.reject_malformed", true, call).await
    }
    async fn stray_pending_page(
        &self,
        live: &[HourBucket],
        cursor: Option<Cursor>,
    ) -> Result<Page<AggregatedRecord>, PortError> {
        let call = self.inner.stray_pending_page(live, cursor);
        guarded(&self.sim, "aggregated.stray_pending_page", false, call).await
    }
}

/// The subscribers table with faults.
pub struct FaultySubscribers {
    /// The store.
    pub inner: MemorySubscriberStore,
    /// The simulation.
    pub sim: Sim,
}

#[async_trait]
impl SubscriberStore for FaultySubscribers {
    async fn get(&self, license_arn: &str, account: &str) -> Result<Option<Subscriber>, PortError> {
        guarded(
            &self.sim,
            "subscribers.get",
            false,
            self.inner.get(license_arn, account),
        )
        .await
    }
    async fn by_license(&self, license_arn: &str) -> Result<Vec<Subscriber>, PortError> {
        guarded(
            &self.sim,
            "subscribers.by_license",
            false,
            self.inner.by_license(license_arn),
        )
        .await
    }
    async fn by_agreement(&self, agreement_id: &str) -> Result<Vec<Subscriber>, PortError> {
        let call = self.inner.by_agreement(agreement_id);
        guarded(&self.sim, "subscribers.by_agreement", false, call).await
    }
    async fn deprovisioning(&self) -> Result<Vec<Subscriber>, PortError> {
        guarded(
            &self.sim,
            "subscribers.deprovisioning",
            false,
            self.inner.deprovisioning(),
        )
        .await
    }
    async fn put_lifecycle(&self, row: &Subscriber, now: Instant) -> Result<bool, PortError> {
        guarded(
            &self.sim,
            "subscribers.put_lifecycle",
            true,
            self.inner.put_lifecycle(row, now),
        )
        .await
    }
    async fn add_registered_region(
        &self,
        license_arn: &str,
        account: &str,
        product_code: &str,
        region: &str,
        now: Instant,
    ) -> Result<(), PortError> {
        let call =
            self.inner
                .add_registered_region(license_arn, account, product_code, region, now);
        guarded(&self.sim, "subscribers.add_registered_region", true, call).await
    }
}

/// `BatchMeterUsage` with faults, recording every quantity it was sent per group.
pub struct FaultyMetering {
    /// The in-memory Marketplace (its ledger is what was billed).
    pub inner: MemoryMeteringApi,
    /// The simulation.
    pub sim: Sim,
    /// Calls left in the current `DisabledApiException` storm.
    disabled_calls: Mutex<u32>,
    /// Every quantity sent per group (one Marketplace processed).
    sent: Arc<Mutex<BTreeMap<GroupKey, BTreeSet<i64>>>>,
    /// Time (a stalled call lets it run on).
    clock: ManualClock,
}

impl FaultyMetering {
    /// A wrapper around `inner`.
    pub fn new(inner: MemoryMeteringApi, sim: Sim, clock: ManualClock) -> Self {
        FaultyMetering {
            inner,
            sim,
            disabled_calls: Mutex::new(0),
            sent: Arc::default(),
            clock,
        }
    }

    /// A call that hangs after billing: one to eight minutes pass while every other
    /// task runs; an invocation whose Lambda timeout passes meanwhile never resumes.
    async fn stall(&self) {
        let minutes = 1 + u64::try_from(self.sim.below(8)).unwrap_or(0);
        for _ in 0..minutes {
            self.clock.advance(Duration::from_secs(60));
            for _ in 0..(5 + self.sim.below(40)) {
                yield_now().await;
            }
        }
        if self.sim.deadline().is_some_and(|d| self.clock.now() >= d) {
            self.sim.kill_current();
            std::future::pending::<()>().await;
        }
    }

    /// Every quantity each group was sent with (that Marketplace processed).
    pub fn sent(&self) -> BTreeMap<GroupKey, BTreeSet<i64>> {
        self.sent
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn note_sent(&self, records: &[MeteringRecord]) {
        let mut sent = self.sent.lock().unwrap_or_else(PoisonError::into_inner);
        for record in records {
            sent.entry(record.key.clone())
                .or_default()
                .insert(record.quantity);
        }
    }
}

#[async_trait]
impl MeteringApi for FaultyMetering {
    async fn batch_meter_usage(
        &self,
        records: &[MeteringRecord],
    ) -> Result<Vec<RecordVerdict>, MeteringError> {
        yield_now().await;
        {
            let mut left = self
                .disabled_calls
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if *left == 0 && self.sim.fault(FaultKind::DisabledStorm, "BatchMeterUsage") {
                *left = 1 + u32::try_from(self.sim.below(6)).unwrap_or(0);
            }
            if *left > 0 {
                *left -= 1;
                return Err(MeteringError::Disabled(
                    "injected: Region disabled for a while".into(),
                ));
            }
        }
        if self.sim.fault(FaultKind::Throttled, "BatchMeterUsage") {
            return Err(MeteringError::Throttled("injected".into()));
        }
        if self
            .sim
            .fault(FaultKind::MeteringTransient, "BatchMeterUsage")
        {
            return Err(MeteringError::Transient(
                "injected: InternalServiceErrorException".into(),
            ));
        }
        // UnprocessedRecords: a random subset is never processed.
        let unprocessed: Vec<bool> = if self.sim.fault(FaultKind::Unprocessed, "BatchMeterUsage") {
            records.iter().map(|_| self.sim.below(2) == 0).collect()
        } else {
            vec![false; records.len()]
        };
        let processed: Vec<MeteringRecord> = records
            .iter()
            .zip(&unprocessed)
            .filter(|(_, skip)| !**skip)
            .map(|(r, _)| r.clone())
            .collect();
        let answers = if processed.is_empty() {
            Vec::new()
        } else {
            let answers = self.inner.batch_meter_usage(&processed).await?;
            self.note_sent(&processed);
            answers
        };
        if self.sim.fault(FaultKind::Stall, "BatchMeterUsage") {
            self.stall().await;
        }
        if self
            .sim
            .fault(FaultKind::MeteringLostResponse, "BatchMeterUsage")
        {
            return Err(MeteringError::Transient(
                "injected: billed, then the response was lost".into(),
            ));
        }
        let mut answers = answers.into_iter();
        Ok(unprocessed
            .iter()
            .map(|skip| {
                if *skip {
                    RecordVerdict::Unprocessed
                } else {
                    answers.next().unwrap_or(RecordVerdict::Unprocessed)
                }
            })
            .collect())
    }
}

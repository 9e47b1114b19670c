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
    AggregatedDecorator, Decorator, ManualClock, MemoryAggregatedStore, MemoryMeteringApi,
    MemorySubscriberStore, MemoryUsageStore, StoreCall, SubscriberDecorator, UsageDecorator,
};
use awsmp_core::model::GroupKey;
use awsmp_core::ports::{
    AggregationCommit, Clock, CommitOutcome, MeteringApi, MeteringError, MeteringRecord, PortError,
    RecordVerdict,
};

use crate::sim::{FaultKind, Sim, yield_now};

/// Runs one store call with the simulation's faults: a yield, maybe a failure before
/// the call, the call, and (for writes) maybe a lost response after it.
async fn guarded<T>(
    sim: &Sim,
    call: StoreCall,
    inner: impl std::future::Future<Output = Result<T, PortError>>,
) -> Result<T, PortError> {
    let op = call.op.name();
    yield_now().await;
    if sim.fault(FaultKind::StoreTransient, op) {
        return Err(PortError::Transient {
            operation: op,
            message: "injected: throttled before the call took effect".into(),
        });
    }
    let out = inner.await;
    if call.op.is_write() && out.is_ok() && sim.fault(FaultKind::StoreLostResponse, op) {
        return Err(PortError::Transient {
            operation: op,
            message: "injected: the call took effect, its response was lost".into(),
        });
    }
    out
}

/// An in-memory store with faults at every call.
pub struct Faulty<S> {
    /// The store.
    pub inner: S,
    /// The simulation.
    pub sim: Sim,
}

/// The usage table with faults.
pub type FaultyUsage = Faulty<MemoryUsageStore>;
/// The aggregated table with faults (and spurious transaction conflicts).
pub type FaultyAggregated = Faulty<MemoryAggregatedStore>;
/// The subscribers table with faults.
pub type FaultySubscribers = Faulty<MemorySubscriberStore>;

#[async_trait]
impl<S: Send + Sync> Decorator for Faulty<S> {
    async fn around<T: Send>(
        &self,
        call: StoreCall,
        inner: impl std::future::Future<Output = Result<T, PortError>> + Send,
    ) -> Result<T, PortError> {
        guarded(&self.sim, call, inner).await
    }
}

impl UsageDecorator for FaultyUsage {
    type Inner = MemoryUsageStore;
    fn inner(&self) -> &MemoryUsageStore {
        &self.inner
    }
}

#[async_trait]
impl AggregatedDecorator for FaultyAggregated {
    type Inner = MemoryAggregatedStore;
    fn inner(&self) -> &MemoryAggregatedStore {
        &self.inner
    }

    async fn before_commit(&self, _commit: &AggregationCommit) -> Option<CommitOutcome> {
        yield_now().await;
        self.sim
            .fault(FaultKind::TransactionConflict, "aggregated.commit")
            .then_some(CommitOutcome::Conflict)
    }
}

impl SubscriberDecorator for FaultySubscribers {
    type Inner = MemorySubscriberStore;
    fn inner(&self) -> &MemorySubscriberStore {
        &self.inner
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

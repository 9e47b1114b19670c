//! The in-memory ports wrapped for the simulation: every call is a yield point (the
//! scheduler may run another task there), may fail before taking effect, and a write
//! may take effect and then lose its response. `BatchMeterUsage` additionally throttles,
//! leaves records unprocessed, refuses the Region for a while, refuses the caller's
//! credentials or role (once, or for a while) and fails to connect before the request
//! is written (nothing billed, nothing possibly billed), and bills then loses
//! its answer, or hangs for minutes (killing an invocation whose timeout passes); every quantity it is sent is recorded, to catch a group sent twice with
//! two quantities.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use awsmp_core::memory::{
    AggregatedDecorator, Decorator, ManualClock, MemoryAggregatedStore, MemorySubscriberStore,
    MemoryTables, MemoryUsageStore, StoreCall, StoreOp, SubscriberDecorator, UsageDecorator,
};
use awsmp_core::model::{AggregatedRecord, GroupKey};
use awsmp_core::ports::{
    AggregationCommit, Clock, CommitOutcome, Cursor, MeteringApi, MeteringError, MeteringRecord,
    Page, PendingRawRef, PortError, RecordVerdict,
};
use awsmp_core::submit::answer::{self, Dispatch};
use awsmp_core::time::HourBucket;
use awsmp_marketplace_sim::AuthFailure;

use crate::marketplace::SimMarketplace;
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
    // Final writes lose their answer more often: their retry must still count the
    // transition (and its metric) once.
    let lost = if matches!(
        call.op,
        StoreOp::UsageFinalizeRow | StoreOp::AggregatedRecord
    ) {
        FaultKind::FinalWriteLostResponse
    } else {
        FaultKind::StoreLostResponse
    };
    if call.op.is_write() && out.is_ok() && sim.fault(lost, op) {
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
    /// The index pages it answered, for stale reads.
    pub index: StaleIndex,
    /// Where claims taken over a lapsed claim are noted, if anywhere.
    claims: Option<(MemoryTables, Lapses)>,
}

impl<S> Faulty<S> {
    /// `inner` with the simulation's faults.
    pub fn new(inner: S, sim: Sim) -> Self {
        Faulty {
            inner,
            sim,
            index: StaleIndex::default(),
            claims: None,
        }
    }

    /// Notes in `lapses` every record of `tables` a claim is granted on while an
    /// earlier claim still held it (its holder died, or lost its answers, before
    /// writing an outcome): the protocol rightly reads such a record as possibly billed.
    pub fn watching_claims(mut self, tables: MemoryTables, lapses: Lapses) -> Self {
        self.claims = Some((tables, lapses));
        self
    }
}

/// Groups some claim was granted on over an unreleased earlier one (shared between the
/// aggregated table's wrapper that sees the claims and the invariant).
pub type Lapses = Arc<Mutex<BTreeSet<GroupKey>>>;

/// Each held record's claim count: a claim that finds the record still held and takes
/// it bumps the count.
fn held_claims(tables: &MemoryTables) -> BTreeMap<GroupKey, u32> {
    tables
        .aggregated_records()
        .into_iter()
        .filter(|r| r.in_flight_until.is_some())
        .map(|r| (r.key, r.attempt_count))
        .collect()
}

/// A global secondary index read eventually consistently: a query may answer the page
/// it answered before for the same hour and cursor (new items missing, items since
/// finalized still listed with their old attributes), as DynamoDB's index may while it
/// catches up. Base-table reads stay consistent.
#[derive(Default)]
pub struct StaleIndex {
    pages: Mutex<BTreeMap<String, Box<dyn std::any::Any + Send>>>,
}

impl StaleIndex {
    /// The page to answer: an earlier one for `(hour, cursor)` when the simulation
    /// injects a stale read, else `fresh` (remembered for later stale reads).
    fn answer<T: Clone + Send + 'static>(
        &self,
        sim: &Sim,
        hour: HourBucket,
        cursor: Option<&Cursor>,
        fresh: Page<T>,
    ) -> Page<T> {
        let key = format!("{hour}|{cursor:?}");
        let mut pages = self.pages.lock().unwrap_or_else(PoisonError::into_inner);
        let stale = pages
            .get(&key)
            .and_then(|p| p.downcast_ref::<Page<T>>())
            .cloned();
        if let Some(stale) = stale
            && sim.fault(FaultKind::StaleIndexRead, "index query")
        {
            return stale;
        }
        pages.insert(key, Box::new(fresh.clone()));
        fresh
    }
}

/// The usage table with faults.
pub type FaultyUsage = Faulty<MemoryUsageStore>;
/// The exception Marketplace answers a record outside its window with.
const TIMESTAMP_OUT_OF_BOUNDS: &str = "TimestampOutOfBoundsException";

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
        let Some((tables, lapses)) = self
            .claims
            .as_ref()
            .filter(|_| call.op == StoreOp::AggregatedClaim)
        else {
            return guarded(&self.sim, call, inner).await;
        };
        // Read right around the claim (the in-memory call does not yield).
        let watched = async {
            let held = held_claims(tables);
            let out = inner.await;
            let taken_over = tables.aggregated_records().into_iter().filter(|r| {
                held.get(&r.key)
                    .is_some_and(|before| r.attempt_count > *before)
            });
            lapses
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .extend(taken_over.map(|r| r.key));
            out
        };
        guarded(&self.sim, call, watched).await
    }
}

impl UsageDecorator for FaultyUsage {
    type Inner = MemoryUsageStore;
    fn inner(&self) -> &MemoryUsageStore {
        &self.inner
    }

    fn index_page(
        &self,
        hour: HourBucket,
        cursor: Option<&Cursor>,
        fresh: Page<PendingRawRef>,
    ) -> Page<PendingRawRef> {
        self.index.answer(&self.sim, hour, cursor, fresh)
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

    fn index_page(
        &self,
        hour: HourBucket,
        cursor: Option<&Cursor>,
        fresh: Page<AggregatedRecord>,
    ) -> Page<AggregatedRecord> {
        self.index.answer(&self.sim, hour, cursor, fresh)
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
    /// The Marketplace (the simulator's engine; its ledger is what was billed).
    pub inner: SimMarketplace,
    /// The simulation.
    pub sim: Sim,
    /// When the current `DisabledApiException` storm ends (it is a while, not a number
    /// of calls: a run that sends one call must not stretch it past the window).
    disabled_until: Mutex<Option<awsmp_core::time::Instant>>,
    /// Every quantity sent per group (one Marketplace processed).
    sent: Arc<Mutex<BTreeMap<GroupKey, BTreeSet<i64>>>>,
    /// Time (a stalled call lets it run on).
    clock: ManualClock,
    /// Records sent in calls that failed without a definite answer (an internal error,
    /// a lost response) or that an answer left unclear: the most records the submitter
    /// may call ambiguous.
    ambiguous: Mutex<u64>,
    /// The tables whose records are sent (to read their claims at the call).
    tables: Option<MemoryTables>,
    /// Records sent under a claim that outlives the invocation sending them.
    overlong_leases: Mutex<Vec<String>>,
    /// Groups carried by a call whose answer was lost, failed or left a record unclear.
    ambiguous_groups: Mutex<BTreeSet<GroupKey>>,
    /// Groups another writer billed first (another stack, a script).
    rival: Mutex<BTreeSet<GroupKey>>,
    /// When the current refusal of the caller's role ends (a role edited, then fixed).
    refused_until: Mutex<Option<awsmp_core::time::Instant>>,
    /// When Marketplace refused, as past the window, a call whose every record was
    /// still in the window when the submitter handed it over: the call was delayed in
    /// flight past the hour's edge (the interleaving let other tasks' time pass), as a
    /// slow network can. Nothing the submitter's checks could have kept back.
    delayed_past_window: Mutex<Vec<awsmp_core::time::Instant>>,
    /// The records of such calls: the bisection that isolates the refused record sends
    /// them again, past the window by then, and is refused the same way.
    delayed_groups: Mutex<BTreeSet<GroupKey>>,
    /// Calls refused before Marketplace processed them (credentials, role, signature,
    /// a connection that failed before the request was written).
    refused: Mutex<u64>,
    /// Groups carried by a call Marketplace processed (answered, refused for what it
    /// was sent, or billed and its answer lost).
    reached: Mutex<BTreeSet<GroupKey>>,
    /// Groups claimed over an unreleased earlier claim (noted by the aggregated table's
    /// wrapper, [`Faulty::watching_claims`]).
    lapses: Lapses,
}

impl FaultyMetering {
    /// A wrapper around `inner`.
    pub fn new(inner: SimMarketplace, sim: Sim, clock: ManualClock) -> Self {
        FaultyMetering {
            inner,
            sim,
            disabled_until: Mutex::new(None),
            sent: Arc::default(),
            clock,
            ambiguous: Mutex::new(0),
            tables: None,
            overlong_leases: Mutex::new(Vec::new()),
            ambiguous_groups: Mutex::new(BTreeSet::new()),
            rival: Mutex::new(BTreeSet::new()),
            refused_until: Mutex::new(None),
            delayed_past_window: Mutex::new(Vec::new()),
            delayed_groups: Mutex::new(BTreeSet::new()),
            refused: Mutex::new(0),
            reached: Mutex::new(BTreeSet::new()),
            lapses: Lapses::default(),
        }
    }

    /// Where the aggregated table's wrapper notes claims taken over lapsed ones.
    pub fn lapses(&self) -> Lapses {
        Arc::clone(&self.lapses)
    }

    /// Groups claimed over an unreleased earlier claim.
    pub fn lapsed_groups(&self) -> BTreeSet<GroupKey> {
        self.lapses
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Groups carried by a call Marketplace processed.
    pub fn reached_groups(&self) -> BTreeSet<GroupKey> {
        self.reached
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Whether a call refused as past the window was handed over inside it (every
    /// record's hour open at `handed_over`), or re-sends records of such a call.
    fn delayed_in_flight(
        &self,
        records: &[MeteringRecord],
        handed_over: awsmp_core::time::Instant,
    ) -> bool {
        let delayed = self
            .delayed_groups
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        records.iter().all(|r| {
            !awsmp_core::time::bucket_expired(r.key.hour, handed_over) || delayed.contains(&r.key)
        })
    }

    /// When each call delayed in flight past its hour's window was refused for it.
    pub fn delayed_past_window(&self) -> Vec<awsmp_core::time::Instant> {
        self.delayed_past_window
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Calls refused before Marketplace processed them, so far.
    pub fn refusals(&self) -> u64 {
        *self.refused.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A refusal before processing, if the simulation draws one for this call: for a
    /// while every call (a role edited, then fixed: `AccessDeniedException`), once (one
    /// of the credentials and signature exceptions), answered by the simulator's engine
    /// and read back as any answer is; or a connection that fails before the request
    /// is written. Nothing is billed, nothing may be read as possibly billed.
    async fn refusal(&self, records: &[MeteringRecord]) -> Option<MeteringError> {
        let failure = {
            let now = self.clock.now();
            let mut until = self
                .refused_until
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if until.is_none_or(|u| u <= now)
                && self.sim.fault(FaultKind::RefusalStorm, "BatchMeterUsage")
            {
                let minutes = 1 + i64::try_from(self.sim.below(12)).unwrap_or(0);
                *until = Some(now + chrono::Duration::minutes(minutes));
            }
            if until.is_some_and(|u| u > now) {
                Some(AuthFailure::AccessDenied)
            } else if self.sim.fault(FaultKind::AuthRefused, "BatchMeterUsage") {
                AuthFailure::ALL
                    .get(self.sim.below(AuthFailure::ALL.len()))
                    .copied()
            } else {
                None
            }
        };
        let refused = match failure {
            Some(failure) => {
                if let Err(e) = self.inner.refuse_next(failure) {
                    panic!("the simulator refused a valid fault: {e}");
                }
                match self.inner.batch_meter_usage(records).await {
                    Err(refused) => refused,
                    Ok(answers) => {
                        panic!("a call refused before processing was answered: {answers:?}")
                    }
                }
            }
            None if self.sim.fault(FaultKind::ConnectRefused, "BatchMeterUsage") => {
                answer::transport_failure(
                    Dispatch::NotWritten,
                    "injected: connection refused before the request was written",
                )
            }
            None => return None,
        };
        *self.refused.lock().unwrap_or_else(PoisonError::into_inner) += 1;
        Some(refused)
    }

    fn note_reached(&self, records: &[MeteringRecord]) {
        self.reached
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(records.iter().map(|r| r.key.clone()));
    }

    /// Another writer (a second stack, a seller's script) bills `record`'s hour with
    /// its own quantity; remembered when it got there first.
    pub async fn bill_as_rival(&self, record: MeteringRecord) {
        let key = record.key.clone();
        if let Ok(answers) = self.inner.batch_meter_usage(&[record]).await
            && matches!(answers.first(), Some(RecordVerdict::Success { .. }))
        {
            self.rival
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(key);
        }
    }

    /// Groups another writer billed first.
    pub fn rival_groups(&self) -> BTreeSet<GroupKey> {
        self.rival
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// [`Self::rival_groups`] as their records' item keys (license, sort key): what an
    /// outcome event names.
    pub fn rival_record_keys(&self) -> BTreeSet<(String, String)> {
        self.rival_groups()
            .into_iter()
            .map(|key| (key.license_arn.clone(), key.aggregated_sort_key()))
            .collect()
    }

    /// Groups carried by a call of ours that may have billed without a definite answer.
    pub fn ambiguous_groups(&self) -> BTreeSet<GroupKey> {
        self.ambiguous_groups
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Checks, at every call, that each record sent is claimed no longer than the
    /// invocation sending it may run (its Lambda timeout): a claim that outlives its
    /// invocation keeps the record from every later run until it lapses.
    pub fn watching(mut self, tables: MemoryTables) -> Self {
        self.tables = Some(tables);
        self
    }

    /// Each record sent under a claim that outlived its invocation.
    pub fn overlong_leases(&self) -> Vec<String> {
        self.overlong_leases
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn check_leases(&self, records: &[MeteringRecord]) {
        let (Some(tables), Some(deadline)) = (&self.tables, self.sim.deadline()) else {
            return;
        };
        let stored = tables.aggregated_records();
        for record in records {
            if let Some(until) = stored
                .iter()
                .find(|r| r.key == record.key)
                .and_then(|r| r.in_flight_until)
                .filter(|until| *until > deadline)
            {
                self.overlong_leases
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(format!(
                        "aggregated {}: sent under a claim held until {until}, after its \
                         invocation's end at {deadline}",
                        record.key
                    ));
            }
        }
    }

    /// Records sent in calls that failed without a definite answer, so far.
    pub fn ambiguous_sends(&self) -> u64 {
        *self
            .ambiguous
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn note_ambiguous(&self, records: &[MeteringRecord]) {
        *self
            .ambiguous
            .lock()
            .unwrap_or_else(PoisonError::into_inner) += records.len() as u64;
        self.ambiguous_groups
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(records.iter().map(|r| r.key.clone()));
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
        let handed_over = self.clock.now();
        yield_now().await;
        self.check_leases(records);
        {
            let now = self.clock.now();
            let mut until = self
                .disabled_until
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if until.is_none_or(|u| u <= now)
                && self.sim.fault(FaultKind::DisabledStorm, "BatchMeterUsage")
            {
                let minutes = 1 + i64::try_from(self.sim.below(10)).unwrap_or(0);
                *until = Some(now + chrono::Duration::minutes(minutes));
            }
            if until.is_some_and(|u| u > now) {
                return Err(MeteringError::Disabled(
                    "injected: Region disabled for a while".into(),
                ));
            }
        }
        if let Some(refused) = self.refusal(records).await {
            return Err(refused);
        }
        if self.sim.fault(FaultKind::Throttled, "BatchMeterUsage") {
            return Err(MeteringError::Throttled("injected".into()));
        }
        if self
            .sim
            .fault(FaultKind::MeteringTransient, "BatchMeterUsage")
        {
            self.note_ambiguous(records);
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
        self.note_reached(records);
        let answers = if processed.is_empty() {
            Vec::new()
        } else {
            let at = self.clock.now();
            let answers = match self.inner.batch_meter_usage(&processed).await {
                Err(MeteringError::Validation { name, message })
                    if name == TIMESTAMP_OUT_OF_BOUNDS
                        && self.delayed_in_flight(&processed, handed_over) =>
                {
                    self.delayed_past_window
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(at);
                    self.delayed_groups
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .extend(processed.iter().map(|r| r.key.clone()));
                    return Err(MeteringError::Validation { name, message });
                }
                answers => answers?,
            };
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
            self.note_ambiguous(records);
            return Err(MeteringError::Transient(
                "injected: billed, then the response was lost".into(),
            ));
        }
        let mut answers = answers.into_iter();
        let given: Vec<RecordVerdict> = unprocessed
            .iter()
            .map(|skip| {
                if *skip {
                    RecordVerdict::Unprocessed
                } else {
                    answers.next().unwrap_or(RecordVerdict::Unprocessed)
                }
            })
            .collect();
        // The answer as it travels, read back as the SDK adapter reads it. Now and
        // then it leaves a billed record unclear, as AWS may: a result left out, a
        // status AWS does not document, a record echoed with another quantity.
        let mut answer = answer::answer_of(records, &given);
        if !answer.results.is_empty() && self.sim.fault(FaultKind::UnclearAnswer, "BatchMeterUsage")
        {
            let at = self.sim.below(answer.results.len());
            *self
                .ambiguous
                .lock()
                .unwrap_or_else(PoisonError::into_inner) += 1;
            if let Some(echo) = answer.results.get(at).and_then(|r| r.record.as_ref())
                && let Some(sent) = records.iter().find(|r| {
                    r.key.dimension == echo.dimension
                        && r.key.license_arn == echo.license_arn
                        && r.key.hour.start().timestamp() == echo.timestamp
                })
            {
                self.ambiguous_groups
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(sent.key.clone());
            }
            match self.sim.below(3) {
                0 => {
                    answer.results.remove(at);
                }
                1 => {
                    if let Some(result) = answer.results.get_mut(at) {
                        result.status = Some("Billed".into());
                    }
                }
                _ => {
                    if let Some(echo) = answer.results.get_mut(at).and_then(|r| r.record.as_mut()) {
                        echo.quantity += 1;
                    }
                }
            }
        }
        Ok(answer::verdicts(records, &answer))
    }
}

/// One Lambda execution environment's clock: the simulation's, off by a fixed amount
/// (each host keeps its own time; AWS keeps them close, not equal). Sleeping lets the
/// simulation's time pass.
pub struct SkewedClock {
    clock: ManualClock,
    skew: chrono::Duration,
}

impl SkewedClock {
    /// `clock`, `skew` ahead (behind when negative).
    pub fn new(clock: ManualClock, skew: chrono::Duration) -> Self {
        SkewedClock { clock, skew }
    }
}

#[async_trait]
impl Clock for SkewedClock {
    fn now(&self) -> awsmp_core::time::Instant {
        self.clock.now() + self.skew
    }

    async fn sleep(&self, duration: Duration) {
        self.clock.sleep(duration).await;
    }
}

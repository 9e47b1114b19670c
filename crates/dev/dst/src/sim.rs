//! The simulation's shared context: the seeded random stream every scheduling and
//! fault decision is drawn from, the fault switches (probabilities, and the mask the
//! shrinker uses to turn single faults off), and the log of what was injected.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use awsmp_core::time::Instant;

/// A fault the simulation can inject.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FaultKind {
    /// The task (a Lambda invocation) dies between two port calls.
    Crash,
    /// A store call fails before it takes effect (throttled, timed out).
    StoreTransient,
    /// A store write takes effect but its response is lost.
    StoreLostResponse,
    /// A final write (a row's or a record's terminal status) takes effect but its
    /// response is lost (more often than other writes).
    FinalWriteLostResponse,
    /// A transaction is cancelled by a conflicting one (`TransactionConflict`).
    TransactionConflict,
    /// `BatchMeterUsage` throttled (nothing billed).
    Throttled,
    /// `BatchMeterUsage` fails before processing (`InternalServiceErrorException`).
    MeteringTransient,
    /// `BatchMeterUsage` bills, then its answer is lost.
    MeteringLostResponse,
    /// Some records come back in `UnprocessedRecords` (not billed).
    Unprocessed,
    /// `DisabledApiException` for a while.
    DisabledStorm,
    /// A queue delivers a message again while the first delivery still runs.
    DuplicateDelivery,
    /// A queue send takes effect but its response is lost (the sender retries).
    QueueLostResponse,
    /// A scheduled function runs with a stale event time (a retried schedule).
    StaleInvocation,
    /// A `BatchMeterUsage` call hangs for minutes after billing (a slow network, SDK
    /// retries) while the rest of the system runs on; an invocation whose Lambda
    /// timeout passes meanwhile is killed there, as Lambda kills it.
    Stall,
    /// A query of a pending index answers an older page (the index lags the table).
    StaleIndexRead,
    /// `BatchMeterUsage` bills, and its answer leaves one record unclear (left out, an
    /// undocumented status, another quantity echoed).
    UnclearAnswer,
    /// `PutEvents` fails as a whole, or refuses an entry (the outcome-events function
    /// reports its change for redelivery).
    BusRefused,
    /// `BatchMeterUsage` refused before processing: the caller's credentials, role or
    /// signature (`AccessDeniedException`, `ExpiredTokenException`, ...), once.
    AuthRefused,
    /// Every `BatchMeterUsage` call refused with `AccessDeniedException` for a while (a
    /// role edited, then fixed).
    RefusalStorm,
    /// A `BatchMeterUsage` call whose connection fails before its request is written.
    ConnectRefused,
    /// An Agreement API call (a correction's) fails before it takes effect.
    AgreementTransient,
    /// A billing adjustment request takes effect and its answer is lost.
    AgreementLostResponse,
}

impl FaultKind {
    /// Probability per decision point, in parts per 10,000.
    fn rate(self) -> u64 {
        match self {
            FaultKind::Crash => 40,
            FaultKind::StoreTransient => 150,
            FaultKind::StoreLostResponse => 150,
            FaultKind::FinalWriteLostResponse => 1000,
            FaultKind::TransactionConflict => 300,
            FaultKind::Throttled => 600,
            FaultKind::MeteringTransient => 400,
            FaultKind::MeteringLostResponse => 800,
            FaultKind::Unprocessed => 600,
            FaultKind::DisabledStorm => 150,
            FaultKind::DuplicateDelivery => 800,
            FaultKind::QueueLostResponse => 300,
            FaultKind::StaleInvocation => 3000,
            FaultKind::Stall => 500,
            FaultKind::StaleIndexRead => 1500,
            FaultKind::UnclearAnswer => 300,
            FaultKind::BusRefused => 1500,
            FaultKind::AuthRefused => 300,
            FaultKind::RefusalStorm => 150,
            FaultKind::ConnectRefused => 300,
            FaultKind::AgreementTransient => 1500,
            FaultKind::AgreementLostResponse => 3000,
        }
    }
}

/// One injected fault, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Injected {
    /// Index of the decision point it was drawn at (the shrinker's handle).
    pub point: u64,
    /// What.
    pub kind: FaultKind,
    /// Where (task or operation).
    pub place: String,
    /// The task running when it was drawn (its index in its phase).
    pub task: usize,
}

#[derive(Debug)]
struct State {
    rng: u64,
    points: u64,
    /// Decision points whose fault is switched off (shrinking).
    masked: Vec<u64>,
    /// When set, only these decision points may fault (replaying a shrunk schedule).
    only: Option<Vec<u64>>,
    faults_on: bool,
    injected: Vec<Injected>,
    current: usize,
    /// Lambda timeouts of the tasks that run under one (task -> deadline).
    deadlines: Vec<(usize, Instant)>,
    /// Tasks whose timeout passed while they were stalled: dropped at their next poll.
    killed: Vec<usize>,
}

/// The shared context (cheap to clone).
#[derive(Debug, Clone)]
pub struct Sim {
    state: Arc<Mutex<State>>,
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Sim {
    /// A context for `seed`.
    pub fn new(seed: u64, masked: Vec<u64>, only: Option<Vec<u64>>) -> Self {
        Sim {
            state: Arc::new(Mutex::new(State {
                rng: seed ^ 0x9E37_79B9_7F4A_7C15,
                points: 0,
                masked,
                only,
                faults_on: true,
                injected: Vec::new(),
                current: 0,
                deadlines: Vec::new(),
                killed: Vec::new(),
            })),
        }
    }

    /// The next 64 random bits (splitmix64: small, fast, the same on every machine).
    pub fn next_u64(&self) -> u64 {
        let mut state = lock(&self.state);
        state.rng = state.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform number in `0..n` (`n > 0`).
    pub fn below(&self, n: usize) -> usize {
        let n = n.max(1) as u64;
        usize::try_from(self.next_u64() % n).unwrap_or(0)
    }

    /// Whether to inject `kind` at `place` now. Always draws, so turning one fault off
    /// changes as little as possible of the rest of the schedule.
    pub fn fault(&self, kind: FaultKind, place: &str) -> bool {
        let roll = self.next_u64() % 10_000;
        let mut state = lock(&self.state);
        let point = state.points;
        state.points += 1;
        if !state.faults_on || roll >= kind.rate() {
            return false;
        }
        if state.masked.contains(&point) {
            return false;
        }
        if let Some(only) = &state.only
            && !only.contains(&point)
        {
            return false;
        }
        let task = state.current;
        state.injected.push(Injected {
            point,
            kind,
            place: place.to_string(),
            task,
        });
        true
    }

    /// Stops injecting faults (the settling phase runs fault-free).
    pub fn faults_off(&self) {
        lock(&self.state).faults_on = false;
    }

    /// Injects faults again.
    pub fn faults_on(&self) {
        lock(&self.state).faults_on = true;
    }

    /// The task being polled (set by the executor).
    pub fn current(&self) -> usize {
        lock(&self.state).current
    }

    /// Marks `task` as the one being polled.
    pub fn set_current(&self, task: usize) {
        lock(&self.state).current = task;
    }

    /// The current task runs under a Lambda timeout at `deadline`.
    pub fn set_deadline(&self, deadline: Instant) {
        let mut state = lock(&self.state);
        let task = state.current;
        state.deadlines.retain(|(t, _)| *t != task);
        state.deadlines.push((task, deadline));
    }

    /// The current task's Lambda timeout, if it runs under one.
    pub fn deadline(&self) -> Option<Instant> {
        let state = lock(&self.state);
        let task = state.current;
        state
            .deadlines
            .iter()
            .find(|(t, _)| *t == task)
            .map(|(_, d)| *d)
    }

    /// The current task's invocation ended (its timeout no longer applies).
    pub fn clear_deadline(&self) {
        let mut state = lock(&self.state);
        let task = state.current;
        state.deadlines.retain(|(t, _)| *t != task);
    }

    /// Marks the current task as killed by Lambda (its timeout passed).
    pub fn kill_current(&self) {
        let mut state = lock(&self.state);
        let task = state.current;
        state.killed.push(task);
    }

    /// Whether `task` was killed (once: the flag is taken).
    pub fn take_killed(&self, task: usize) -> bool {
        let mut state = lock(&self.state);
        let before = state.killed.len();
        state.killed.retain(|t| *t != task);
        state.killed.len() != before
    }

    /// Every fault injected so far.
    pub fn injected(&self) -> Vec<Injected> {
        lock(&self.state).injected.clone()
    }
}

/// The point where the scheduler may run another task.
pub use awsmp_core::memory::yield_now;

//! [`SimHandle`]: the simulator's shared state behind one lock, driven from Rust by
//! tests and by the admin API in `server.rs` alike (every admin operation is a method).

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use crate::agreement::model::{
    AdjustmentFailure, Agreement, AgreementEnd, AgreementSeed, BillingAdjustment,
};
use crate::clock::ClockSetting;
use crate::engine::Engine;
use crate::error::AdminError;
use crate::model::{
    Entitlement, EntitlementKey, EntitlementSeed, FaultSpec, LedgerSnapshot, LifecycleOutcome,
    ProductSeed, Stats, TokenSeed,
};
use crate::throttle::ThrottleConfig;

/// A shared handle on the simulator's state; cheap to clone. Every admin operation
/// of the HTTP API is a method here.
#[derive(Debug, Clone)]
pub struct SimHandle {
    engine: Arc<Mutex<Engine>>,
}

impl SimHandle {
    /// Wraps an engine.
    pub fn new(engine: Engine) -> Self {
        Self {
            engine: Arc::new(Mutex::new(engine)),
        }
    }

    /// Runs `f` on the engine under its lock. A panic in an earlier holder does
    /// not wedge the simulator: the state it left is used as is.
    pub fn with<T>(&self, f: impl FnOnce(&mut Engine) -> T) -> T {
        let mut guard: MutexGuard<'_, Engine> =
            self.engine.lock().unwrap_or_else(PoisonError::into_inner);
        f(&mut guard)
    }

    /// Sets a product's dimensions.
    pub fn seed_product(&self, seed: ProductSeed) -> Result<(), AdminError> {
        self.with(|e| e.seed_product(seed))
    }

    /// Entitles (license, account) to a product.
    pub fn entitle(&self, seed: EntitlementSeed) -> Result<Entitlement, AdminError> {
        self.with(|e| e.entitle(seed))
    }

    /// Revokes (license, account) at once.
    pub fn revoke(&self, key: &EntitlementKey) -> Result<Entitlement, AdminError> {
        self.with(|e| e.revoke(key))
    }

    /// Every entitlement.
    pub fn entitlements(&self) -> Vec<Entitlement> {
        self.with(|e| e.entitlements())
    }

    /// Issues a registration token.
    pub fn seed_token(&self, seed: TokenSeed) -> Result<(), AdminError> {
        self.with(|e| e.seed_token(seed))
    }

    /// Applies an EventBridge lifecycle event.
    pub fn apply_lifecycle_event(
        &self,
        event: &serde_json::Value,
    ) -> Result<LifecycleOutcome, AdminError> {
        self.with(|e| e.apply_lifecycle_event(event))
    }

    /// Queues a fault.
    pub fn inject_fault(&self, spec: FaultSpec) -> Result<(), AdminError> {
        self.with(|e| e.inject_fault(spec))
    }

    /// The pending faults.
    pub fn pending_faults(&self) -> Vec<FaultSpec> {
        self.with(|e| e.pending_faults())
    }

    /// Drops every pending fault.
    pub fn clear_faults(&self) {
        self.with(Engine::clear_faults);
    }

    /// The simulator's current time.
    pub fn now(&self) -> DateTime<Utc> {
        self.with(|e| e.now())
    }

    /// The clock setting in force.
    pub fn clock_setting(&self) -> ClockSetting {
        self.with(|e| e.clock_setting())
    }

    /// Replaces the clock setting.
    pub fn set_clock(&self, setting: ClockSetting) {
        self.with(|e| e.set_clock(setting));
    }

    /// Moves the clock by `seconds`.
    pub fn advance_clock(&self, seconds: i64) {
        self.with(|e| e.advance_clock(seconds));
    }

    /// Replaces the BatchMeterUsage quota (the bucket starts full).
    pub fn set_throttle(&self, config: ThrottleConfig) -> Result<(), AdminError> {
        self.with(|e| e.set_throttle(config, Instant::now()))
    }

    /// The quota in force.
    pub fn throttle(&self) -> ThrottleConfig {
        self.with(|e| e.throttle())
    }

    /// Sets the delay added to every wire answer.
    pub fn set_latency(&self, latency: Duration) {
        self.with(|e| e.set_latency(latency));
    }

    /// The delay in force.
    pub fn latency(&self) -> Duration {
        self.with(|e| e.latency())
    }

    /// Back to the start-up configuration.
    pub fn reset(&self) -> Result<(), AdminError> {
        self.with(|e| e.reset(Instant::now()))
    }

    /// Billed records, conflicts and rejected requests.
    pub fn ledger(&self) -> LedgerSnapshot {
        self.with(|e| e.ledger())
    }

    /// The counters.
    pub fn stats(&self) -> Stats {
        self.with(|e| e.stats())
    }

    /// Sets how long after a call its CloudTrail event becomes visible (sim time).
    pub fn set_cloudtrail_lag(&self, lag: chrono::TimeDelta) {
        self.with(|e| e.set_cloudtrail_lag(lag));
    }

    /// CloudTrail events recorded so far (visible or not).
    pub fn cloudtrail_event_count(&self) -> usize {
        self.with(|e| e.cloudtrail_event_count())
    }

    /// Seeds (or amends) an agreement of the Agreement API.
    pub fn seed_agreement(&self, seed: AgreementSeed) -> Result<Agreement, AdminError> {
        self.with(|e| e.seed_agreement(seed))
    }

    /// Ends an agreement with a status other than ACTIVE.
    pub fn end_agreement(&self, end: &AgreementEnd) -> Result<Agreement, AdminError> {
        self.with(|e| e.end_agreement(end))
    }

    /// Every agreement.
    pub fn agreements(&self) -> Vec<Agreement> {
        self.with(|e| e.agreements())
    }

    /// Every billing adjustment request.
    pub fn billing_adjustments(&self) -> Vec<BillingAdjustment> {
        self.with(Engine::billing_adjustments)
    }

    /// Fails a PENDING billing adjustment request.
    pub fn fail_billing_adjustment(
        &self,
        failure: AdjustmentFailure,
    ) -> Result<BillingAdjustment, AdminError> {
        self.with(|e| e.fail_billing_adjustment(failure))
    }

    /// The EventBridge events the Agreement side emitted, oldest first.
    pub fn agreement_events(&self) -> Vec<serde_json::Value> {
        self.with(Engine::agreement_events)
    }

    /// Empties the event outbox.
    pub fn clear_agreement_events(&self) {
        self.with(Engine::clear_agreement_events);
    }
}

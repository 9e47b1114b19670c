//! Starting the simulator: [`Simulator::start`] binds 127.0.0.1, serves the wire
//! protocol and the admin API, and hands back a [`RunningSim`] whose
//! [`SimHandle`] drives the same state from Rust without HTTP.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tracing::info;

use crate::clock::ClockSetting;
use crate::config::SimConfig;
use crate::engine::Engine;
use crate::error::{AdminError, SimError};
use crate::model::{
    Entitlement, EntitlementKey, EntitlementSeed, FaultSpec, LedgerSnapshot, LifecycleOutcome,
    ProductSeed, Stats, TokenSeed,
};
use crate::server::router;
use crate::throttle::ThrottleConfig;
use crate::validate::Patterns;

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
}

/// Starts simulators.
#[derive(Debug, Clone, Copy)]
pub struct Simulator;

impl Simulator {
    /// Builds the state `config` describes and serves it on 127.0.0.1:`config.port`
    /// (0: a free port). Fails on an invalid configuration or an unavailable port.
    pub async fn start(config: SimConfig) -> Result<RunningSim, SimError> {
        let patterns = Patterns::compile()?;
        let port = config.port;
        let engine = Engine::new(config, patterns, Instant::now())
            .map_err(|e| SimError::ConfigInvalid(e.to_string()))?;
        let handle = SimHandle::new(engine);
        let requested = SocketAddr::from(([127, 0, 0, 1], port));
        let listener = TcpListener::bind(requested)
            .await
            .map_err(|source| SimError::Bind {
                addr: requested.to_string(),
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| SimError::Bind {
            addr: requested.to_string(),
            source,
        })?;
        let (stop, stopped) = oneshot::channel::<()>();
        let app = router(handle.clone());
        let task = tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    // A dropped sender stops the server too.
                    let _ = stopped.await;
                })
                .await
        });
        info!(%addr, "marketplace simulator listening");
        Ok(RunningSim {
            addr,
            handle,
            stop: Some(stop),
            task,
        })
    }
}

/// A simulator serving in the background. Dropping it stops the server.
#[derive(Debug)]
pub struct RunningSim {
    addr: SocketAddr,
    handle: SimHandle,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<std::io::Result<()>>,
}

impl RunningSim {
    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`, for `endpoint_url` / `AWS_ENDPOINT_URL_MARKETPLACE_METERING`.
    pub fn endpoint_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The handle on the simulator's state.
    pub fn handle(&self) -> &SimHandle {
        &self.handle
    }

    /// Stops accepting calls, lets calls in progress finish, and waits for the
    /// server to end.
    pub async fn shutdown(mut self) -> Result<(), SimError> {
        if let Some(stop) = self.stop.take() {
            // The server may already be gone; then there is nobody to tell.
            let _ = stop.send(());
        }
        match (&mut self.task).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(SimError::Serve(e)),
            Err(e) => Err(SimError::Join(e.to_string())),
        }
    }
}

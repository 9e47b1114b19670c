//! The simulator's state and rules: entitlements, products, tokens, the ledger, the
//! quota, injected faults and stats, and what one wire call does to them. No I/O:
//! the HTTP layer hands each call in and sends back what this returns.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use chrono::{DateTime, TimeDelta, Utc};
use tracing::{info, warn};

use crate::clock::{ClockSetting, SimClock};
use crate::cloudtrail::{Caller, EventHistory, is_lookup_events};
use crate::config::{IdenticalRetryStatus, SimConfig};
use crate::error::{AdminError, ApiError, ApiErrorKind};
use crate::lifecycle::{LifecycleChange, parse_event};
use crate::model::{
    BilledRecord, Conflict, Entitlement, EntitlementKey, EntitlementSeed, EntitlementState,
    FaultKind, FaultPhase, FaultSpec, FaultTarget, LedgerSnapshot, LifecycleOutcome, LossMode,
    ProductSeed, RejectedRequest, Stats, TokenSeed,
};
use crate::throttle::{ThrottleConfig, TokenBucket};
use crate::validate::{Catalog, MeteredRecord, Patterns, validate_batch};
use crate::wire::{
    BatchMeterUsageRequest, BatchMeterUsageResponse, RecordStatus, ResolveCustomerRequest,
    ResolveCustomerResponse, TARGET_PREFIX, WireUsageRecordResult,
};

/// Largest accepted request body: "The request must be less than 1 MB in size".
pub const MAX_BODY_BYTES: usize = 1024 * 1024;
/// The HTTP layer reads bodies up to this size whole, so that a client sending a
/// little over 1 MB gets a clean ValidationException rather than a reset
/// connection; beyond it, reading stops.
pub const READ_CAP_BYTES: usize = 16 * MAX_BODY_BYTES;
/// A registration token resolves for this long after it was issued (sim clock).
pub const TOKEN_LIFETIME: TimeDelta = TimeDelta::hours(4);
/// After `License Deprovisioned`, metering is accepted for this long (sim clock).
pub const DEPROVISIONING_WINDOW: TimeDelta = TimeDelta::hours(1);
/// The rejected-request log keeps this many entries (oldest dropped first).
pub const REJECTED_LOG_CAPACITY: usize = 10_000;
/// Stats key for records left in `UnprocessedRecords`.
pub const UNPROCESSED_STATUS: &str = "Unprocessed";

/// The operations the simulator serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// `AWSMPMeteringService.BatchMeterUsage`.
    BatchMeterUsage,
    /// `AWSMPMeteringService.ResolveCustomer`.
    ResolveCustomer,
}

impl Operation {
    /// The operation's name.
    pub fn name(self) -> &'static str {
        match self {
            Self::BatchMeterUsage => "BatchMeterUsage",
            Self::ResolveCustomer => "ResolveCustomer",
        }
    }

    /// Reads an `X-Amz-Target` header value.
    pub fn from_target(target: Option<&str>) -> Result<Self, ApiError> {
        let target = target.ok_or_else(|| {
            ApiError::new(
                ApiErrorKind::UnknownOperation,
                "missing X-Amz-Target header (expected AWSMPMeteringService.<Operation>)",
            )
        })?;
        match target.strip_prefix(TARGET_PREFIX) {
            Some("BatchMeterUsage") => Ok(Self::BatchMeterUsage),
            Some("ResolveCustomer") => Ok(Self::ResolveCustomer),
            _ => Err(ApiError::new(
                ApiErrorKind::UnknownOperation,
                format!(
                    "X-Amz-Target {target:?} is not served by the simulator \
                     (it serves AWSMPMeteringService.BatchMeterUsage and .ResolveCustomer)"
                ),
            )),
        }
    }

    fn matches(self, target: FaultTarget) -> bool {
        match target {
            FaultTarget::Any => true,
            FaultTarget::BatchMeterUsage => self == Self::BatchMeterUsage,
            FaultTarget::ResolveCustomer => self == Self::ResolveCustomer,
        }
    }
}

/// A request body as the HTTP layer read it.
#[derive(Debug, Clone, Copy)]
pub enum RequestBody<'a> {
    /// The whole body (the engine judges the 1 MB rule).
    Complete(&'a [u8]),
    /// The body exceeded [`READ_CAP_BYTES`] (it was not read further).
    TooLarge,
}

/// What to answer for one wire call.
#[derive(Debug, Clone)]
pub struct CallOutcome {
    /// The JSON response body, or the exception.
    pub result: Result<serde_json::Value, ApiError>,
    /// Real-time delay to add before answering.
    pub latency: Duration,
    /// Close the connection without answering (an injected `lose_response` fault
    /// in `drop` mode); `result` is then what the call would have answered.
    pub drop_connection: bool,
}

#[derive(Debug, Clone)]
struct PendingFault {
    kind: FaultKind,
    remaining: u32,
    operation: FaultTarget,
}

#[derive(Debug, Clone)]
struct IssuedToken {
    license_arn: String,
    customer_aws_account_id: String,
    product_code: String,
    issued_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct DedupKey {
    account: String,
    license: String,
    dimension: String,
    hour: DateTime<Utc>,
}

/// Unique `MeteringRecordId`s in UUID form, without a randomness dependency: a
/// per-process seed from the wall clock mixed with a counter (splitmix64).
#[derive(Debug, Clone)]
struct RecordIdGenerator {
    seed: u64,
    counter: u64,
}

impl RecordIdGenerator {
    fn new() -> Self {
        let seed = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0x9e37_79b9_7f4a_7c15);
        Self::seeded(seed)
    }

    fn seeded(seed: u64) -> Self {
        Self { seed, counter: 0 }
    }

    fn mix(mut z: u64) -> u64 {
        z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn next_id(&mut self) -> String {
        self.counter += 1;
        let high = Self::mix(self.seed ^ self.counter);
        let low = Self::mix(high ^ self.counter.rotate_left(32));
        // Version 4 / variant 1 bits, so the id looks like any UUID.
        let high = (high & 0xffff_ffff_ffff_0fff) | 0x0000_0000_0000_4000;
        let low = (low & 0x3fff_ffff_ffff_ffff) | 0x8000_0000_0000_0000;
        format!(
            "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
            high >> 32,
            (high >> 16) & 0xffff,
            high & 0xffff,
            low >> 48,
            low & 0xffff_ffff_ffff
        )
    }
}

/// The whole simulated service.
#[derive(Debug)]
pub struct Engine {
    startup: SimConfig,
    patterns: Patterns,
    clock: SimClock,
    bucket: TokenBucket,
    latency: Duration,
    identical_retry_status: IdenticalRetryStatus,
    product_dimensions: BTreeMap<String, BTreeSet<String>>,
    license_products: BTreeMap<String, String>,
    entitlements: BTreeMap<(String, String), Entitlement>,
    tokens: HashMap<String, IssuedToken>,
    billed: Vec<BilledRecord>,
    billed_index: HashMap<DedupKey, usize>,
    conflicts: Vec<Conflict>,
    rejected: VecDeque<RejectedRequest>,
    faults: VecDeque<PendingFault>,
    stats: Stats,
    ids: RecordIdGenerator,
    trail: EventHistory,
    trail_ids: RecordIdGenerator,
}

fn non_empty(value: &str, field: &str) -> Result<(), AdminError> {
    if value.is_empty() {
        Err(AdminError::Invalid(format!("{field} must not be empty")))
    } else {
        Ok(())
    }
}

impl Engine {
    /// A simulator in the state `config` describes, at real time `now`.
    pub fn new(config: SimConfig, patterns: Patterns, now: Instant) -> Result<Self, AdminError> {
        config.throttle.validate()?;
        let mut engine = Self {
            patterns,
            clock: SimClock::new(config.clock),
            bucket: TokenBucket::new(config.throttle, now),
            latency: Duration::from_millis(config.latency_ms),
            identical_retry_status: config.identical_retry_status,
            product_dimensions: BTreeMap::new(),
            license_products: BTreeMap::new(),
            entitlements: BTreeMap::new(),
            tokens: HashMap::new(),
            billed: Vec::new(),
            billed_index: HashMap::new(),
            conflicts: Vec::new(),
            rejected: VecDeque::new(),
            faults: VecDeque::new(),
            stats: Stats::default(),
            ids: RecordIdGenerator::new(),
            trail: EventHistory::default(),
            trail_ids: RecordIdGenerator::new(),
            startup: config,
        };
        for product in engine.startup.products.clone() {
            engine.seed_product(product)?;
        }
        for entitlement in engine.startup.entitlements.clone() {
            engine.entitle(entitlement)?;
        }
        for token in engine.startup.tokens.clone() {
            engine.seed_token(token)?;
        }
        Ok(engine)
    }

    /// Back to the start-up configuration: seeds, clock, quota, latency; empties the
    /// ledger, faults and stats.
    pub fn reset(&mut self, now: Instant) -> Result<(), AdminError> {
        let fresh = Self::new(self.startup.clone(), self.patterns.clone(), now)?;
        *self = fresh;
        info!("simulator reset");
        Ok(())
    }

    // ---- admin: seeding ------------------------------------------------------

    /// Sets the dimensions of a product (replacing earlier ones).
    pub fn seed_product(&mut self, seed: ProductSeed) -> Result<(), AdminError> {
        non_empty(&seed.product_code, "product_code")?;
        if seed.dimensions.is_empty() {
            return Err(AdminError::Invalid(format!(
                "product {} needs at least one dimension",
                seed.product_code
            )));
        }
        if let Some(empty) = seed.dimensions.iter().position(String::is_empty) {
            return Err(AdminError::Invalid(format!("dimensions[{empty}] is empty")));
        }
        info!(product = %seed.product_code, dimensions = ?seed.dimensions, "product seeded");
        self.product_dimensions
            .insert(seed.product_code, seed.dimensions.into_iter().collect());
        Ok(())
    }

    fn register_license(
        &mut self,
        license_arn: &str,
        product_code: &str,
    ) -> Result<(), AdminError> {
        match self.license_products.get(license_arn) {
            Some(existing) if existing != product_code => Err(AdminError::Invalid(format!(
                "license {license_arn} is already known for product {existing}, not {product_code}"
            ))),
            Some(_) => Ok(()),
            None => {
                self.license_products
                    .insert(license_arn.to_owned(), product_code.to_owned());
                Ok(())
            }
        }
    }

    /// Entitles (license, account) to the product (active from now on).
    pub fn entitle(&mut self, seed: EntitlementSeed) -> Result<Entitlement, AdminError> {
        non_empty(&seed.license_arn, "license_arn")?;
        non_empty(&seed.customer_aws_account_id, "customer_aws_account_id")?;
        non_empty(&seed.product_code, "product_code")?;
        self.register_license(&seed.license_arn, &seed.product_code)?;
        let entitlement = Entitlement {
            license_arn: seed.license_arn.clone(),
            customer_aws_account_id: seed.customer_aws_account_id.clone(),
            product_code: seed.product_code,
            state: EntitlementState::Active,
            updated_at: self.clock.now(),
        };
        info!(license = %entitlement.license_arn, account = %entitlement.customer_aws_account_id, "entitled");
        self.entitlements.insert(
            (seed.license_arn, seed.customer_aws_account_id),
            entitlement.clone(),
        );
        Ok(entitlement)
    }

    /// Revokes (license, account) at once; its license stays known.
    pub fn revoke(&mut self, key: &EntitlementKey) -> Result<Entitlement, AdminError> {
        let now = self.clock.now();
        let entitlement = self
            .entitlements
            .get_mut(&(key.license_arn.clone(), key.customer_aws_account_id.clone()))
            .ok_or_else(|| {
                AdminError::NotFound(format!(
                    "no entitlement for license {} and account {}",
                    key.license_arn, key.customer_aws_account_id
                ))
            })?;
        entitlement.state = EntitlementState::Revoked { at: now };
        entitlement.updated_at = now;
        info!(license = %key.license_arn, account = %key.customer_aws_account_id, "revoked");
        Ok(entitlement.clone())
    }

    /// Every entitlement, ordered by (license, account).
    pub fn entitlements(&self) -> Vec<Entitlement> {
        self.entitlements.values().cloned().collect()
    }

    /// Issues a registration token (issued now when `issued_at` is absent).
    pub fn seed_token(&mut self, seed: TokenSeed) -> Result<(), AdminError> {
        non_empty(&seed.token, "token")?;
        non_empty(&seed.license_arn, "license_arn")?;
        non_empty(&seed.customer_aws_account_id, "customer_aws_account_id")?;
        non_empty(&seed.product_code, "product_code")?;
        self.register_license(&seed.license_arn, &seed.product_code)?;
        let issued_at = seed.issued_at.unwrap_or_else(|| self.clock.now());
        // Never log the token itself: it identifies a buyer's registration.
        info!(license = %seed.license_arn, %issued_at, "registration token seeded");
        self.tokens.insert(
            seed.token,
            IssuedToken {
                license_arn: seed.license_arn,
                customer_aws_account_id: seed.customer_aws_account_id,
                product_code: seed.product_code,
                issued_at,
            },
        );
        Ok(())
    }

    /// Applies an EventBridge lifecycle event (the JSON the events stack consumes).
    pub fn apply_lifecycle_event(
        &mut self,
        event: &serde_json::Value,
    ) -> Result<LifecycleOutcome, AdminError> {
        match parse_event(event)? {
            LifecycleChange::LicenseUpdated {
                license_arn,
                customer_aws_account_id,
                product_code,
            } => Ok(LifecycleOutcome::Entitled {
                entitlement: self.entitle(EntitlementSeed {
                    license_arn,
                    customer_aws_account_id,
                    product_code,
                })?,
            }),
            LifecycleChange::LicenseDeprovisioned {
                license_arn,
                customer_aws_account_id,
                product_code,
            } => self
                .deprovision(license_arn, customer_aws_account_id, product_code)
                .map(|entitlement| LifecycleOutcome::Deprovisioning { entitlement }),
            LifecycleChange::Ignored { detail_type } => {
                info!(%detail_type, "lifecycle event changes no entitlement");
                Ok(LifecycleOutcome::Ignored { detail_type })
            }
        }
    }

    fn deprovision(
        &mut self,
        license_arn: String,
        account: String,
        product_code: Option<String>,
    ) -> Result<Entitlement, AdminError> {
        let now = self.clock.now();
        let ends_at = now + DEPROVISIONING_WINDOW;
        let key = (license_arn.clone(), account.clone());
        if let Some(entitlement) = self.entitlements.get_mut(&key) {
            // A repeated event never extends the final hour, and a revoked
            // entitlement stays revoked.
            if entitlement.state == EntitlementState::Active {
                entitlement.state = EntitlementState::Deprovisioning { ends_at };
                entitlement.updated_at = now;
            }
            info!(license = %license_arn, account = %account, state = ?entitlement.state, "deprovisioned");
            return Ok(entitlement.clone());
        }
        let product_code = product_code.ok_or_else(|| {
            AdminError::NotFound(format!(
                "no entitlement for license {license_arn} and account {account}, and the event names no product"
            ))
        })?;
        self.register_license(&license_arn, &product_code)?;
        let entitlement = Entitlement {
            license_arn,
            customer_aws_account_id: account,
            product_code,
            state: EntitlementState::Deprovisioning { ends_at },
            updated_at: now,
        };
        self.entitlements.insert(key, entitlement.clone());
        Ok(entitlement)
    }

    // ---- admin: faults, clock, quota, latency --------------------------------

    /// Queues a fault for the next `count` calls of its operation.
    pub fn inject_fault(&mut self, spec: FaultSpec) -> Result<(), AdminError> {
        spec.validate()?;
        info!(?spec, "fault injected");
        self.faults.push_back(PendingFault {
            kind: spec.kind,
            remaining: spec.count,
            operation: spec.operation,
        });
        Ok(())
    }

    /// The faults still pending, in the order they will fire.
    pub fn pending_faults(&self) -> Vec<FaultSpec> {
        self.faults
            .iter()
            .map(|f| FaultSpec {
                kind: f.kind,
                count: f.remaining,
                operation: f.operation,
            })
            .collect()
    }

    /// Issues `MeteringRecordId`s and CloudTrail ids from `seed` from now on, so that a
    /// caller replaying a run (a deterministic simulation) gets the same ids again.
    pub fn seed_record_ids(&mut self, seed: u64) {
        self.ids = RecordIdGenerator::seeded(seed);
        self.trail_ids = RecordIdGenerator::seeded(RecordIdGenerator::mix(seed));
    }

    /// Drops every pending fault.
    pub fn clear_faults(&mut self) {
        self.faults.clear();
    }

    /// The simulator's current time.
    pub fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    /// The clock setting in force.
    pub fn clock_setting(&self) -> ClockSetting {
        self.clock.setting()
    }

    /// Replaces the clock setting.
    pub fn set_clock(&mut self, setting: ClockSetting) {
        info!(?setting, "clock set");
        self.clock.set(setting);
    }

    /// Moves the clock by `seconds`.
    pub fn advance_clock(&mut self, seconds: i64) {
        self.clock.advance(seconds);
        info!(seconds, now = %self.clock.now(), "clock advanced");
    }

    /// Replaces the quota (the bucket starts full).
    pub fn set_throttle(&mut self, config: ThrottleConfig, now: Instant) -> Result<(), AdminError> {
        config.validate()?;
        self.bucket = TokenBucket::new(config, now);
        Ok(())
    }

    /// The quota in force.
    pub fn throttle(&self) -> ThrottleConfig {
        self.bucket.config()
    }

    /// Sets the real-time delay added to every wire answer.
    pub fn set_latency(&mut self, latency: Duration) {
        self.latency = latency;
    }

    /// The delay in force.
    pub fn latency(&self) -> Duration {
        self.latency
    }

    // ---- reports --------------------------------------------------------------

    /// The billed records, conflicts and rejected requests.
    pub fn ledger(&self) -> LedgerSnapshot {
        LedgerSnapshot {
            records: self.billed.clone(),
            conflicts: self.conflicts.clone(),
            rejected_requests: self.rejected.iter().cloned().collect(),
        }
    }

    /// The counters.
    pub fn stats(&self) -> Stats {
        self.stats.clone()
    }

    /// Sets how long after a call its CloudTrail event becomes visible to
    /// `LookupEvents` (sim time; real Event History: about 15 minutes).
    pub fn set_cloudtrail_lag(&mut self, lag: TimeDelta) {
        self.trail.set_lag(lag);
    }

    /// CloudTrail events recorded so far (visible or not).
    pub fn cloudtrail_event_count(&self) -> usize {
        self.trail.len()
    }

    // ---- the wire ------------------------------------------------------------

    /// Serves one wire call: `target` is the `X-Amz-Target` header, `real_now` the
    /// real time the call arrived (for the quota).
    pub fn call(
        &mut self,
        target: Option<&str>,
        body: RequestBody<'_>,
        real_now: Instant,
    ) -> CallOutcome {
        self.call_from(target, body, real_now, &Caller::default())
    }

    /// [`Engine::call`] by `caller` (the SigV4 credential's Region and key): its
    /// `BatchMeterUsage` calls are recorded in CloudTrail in that Region, and its
    /// CloudTrail `LookupEvents` calls see that Region's events.
    pub fn call_from(
        &mut self,
        target: Option<&str>,
        body: RequestBody<'_>,
        real_now: Instant,
        caller: &Caller,
    ) -> CallOutcome {
        if is_lookup_events(target) {
            let result = match body {
                RequestBody::Complete(bytes) => {
                    self.trail.lookup_events(bytes, caller, self.clock.now())
                }
                RequestBody::TooLarge => Err(ApiError::new(
                    ApiErrorKind::Validation,
                    "LookupEvents request body too large",
                )),
            };
            return CallOutcome {
                result,
                latency: self.latency,
                drop_connection: false,
            };
        }
        let mut drop_connection = false;
        let result = match Operation::from_target(target) {
            Ok(operation) => {
                let result = self.call_operation(operation, body, real_now);
                if operation == Operation::BatchMeterUsage {
                    let request = match body {
                        RequestBody::Complete(bytes) => {
                            serde_json::from_slice::<serde_json::Value>(bytes).ok()
                        }
                        RequestBody::TooLarge => None,
                    };
                    let (event_id, request_id) =
                        (self.trail_ids.next_id(), self.trail_ids.next_id());
                    self.trail.record_batch_meter_usage(
                        self.clock.now(),
                        caller,
                        event_id,
                        request_id,
                        request.as_ref(),
                        &result,
                    );
                }
                match self.take_fault(operation, FaultPhase::LoseAnswer) {
                    Some(FaultKind::LoseResponse { mode }) => {
                        self.stats.lost_responses += 1;
                        warn!(
                            operation = operation.name(),
                            ?mode,
                            answered_ok = result.is_ok(),
                            "call processed; its answer is lost (injected fault)"
                        );
                        match mode {
                            LossMode::Http500 => Err(ApiError::new(
                                ApiErrorKind::InternalServiceError,
                                "An internal error has occurred (injected lost response: the \
                                 call was processed). Retry your request.",
                            )),
                            LossMode::Drop => {
                                drop_connection = true;
                                result
                            }
                        }
                    }
                    _ => result,
                }
            }
            Err(err) => {
                self.stats.unknown_operation_calls += 1;
                Err(self.reject(target.unwrap_or("(missing X-Amz-Target)"), err, 0))
            }
        };
        CallOutcome {
            result,
            latency: self.latency,
            drop_connection,
        }
    }

    fn call_operation(
        &mut self,
        operation: Operation,
        body: RequestBody<'_>,
        real_now: Instant,
    ) -> Result<serde_json::Value, ApiError> {
        match operation {
            Operation::BatchMeterUsage => self.stats.batch_meter_usage_calls += 1,
            Operation::ResolveCustomer => self.stats.resolve_customer_calls += 1,
        }
        if let Some(kind) = self.take_fault(operation, FaultPhase::Refuse) {
            let err = match kind {
                FaultKind::Throttling => {
                    ApiError::new(ApiErrorKind::Throttling, "Rate exceeded (injected fault)")
                }
                FaultKind::InternalError => ApiError::new(
                    ApiErrorKind::InternalServiceError,
                    "An internal error has occurred (injected fault). Retry your request.",
                ),
                FaultKind::Unauthorized { exception } => ApiError::new(
                    ApiErrorKind::Unauthorized(exception),
                    format!(
                        "{} (injected fault): the request was refused before processing",
                        exception.wire_name()
                    ),
                ),
                _ => ApiError::new(
                    ApiErrorKind::DisabledApi,
                    "The API is disabled in the Region (injected fault)",
                ),
            };
            return Err(self.reject(operation.name(), err, 0));
        }
        if operation == Operation::BatchMeterUsage && !self.bucket.try_take(real_now) {
            self.stats.throttled += 1;
            let quota = self.bucket.config();
            let err = ApiError::new(
                ApiErrorKind::Throttling,
                format!(
                    "Rate exceeded: BatchMeterUsage allows {} requests/second (burst {})",
                    quota.rate_per_second, quota.burst
                ),
            );
            return Err(self.reject(operation.name(), err, 0));
        }
        let bytes = match body {
            RequestBody::Complete(bytes) if bytes.len() <= MAX_BODY_BYTES => bytes,
            RequestBody::Complete(_) | RequestBody::TooLarge => {
                let err = ApiError::new(
                    ApiErrorKind::Validation,
                    format!("The request must be less than 1 MB ({MAX_BODY_BYTES} bytes) in size"),
                );
                return Err(self.reject(operation.name(), err, 0));
            }
        };
        match operation {
            Operation::BatchMeterUsage => self.batch_meter_usage(bytes),
            Operation::ResolveCustomer => self.resolve_customer(bytes),
        }
    }

    fn parse<T: serde::de::DeserializeOwned>(
        &mut self,
        operation: Operation,
        bytes: &[u8],
    ) -> Result<T, ApiError> {
        serde_json::from_slice(bytes).map_err(|e| {
            let err = ApiError::new(
                ApiErrorKind::Serialization,
                format!(
                    "request body is not a valid {} request: {e}",
                    operation.name()
                ),
            );
            self.reject(operation.name(), err, 0)
        })
    }

    fn batch_meter_usage(&mut self, bytes: &[u8]) -> Result<serde_json::Value, ApiError> {
        let operation = Operation::BatchMeterUsage;
        let request: BatchMeterUsageRequest = self.parse(operation, bytes)?;
        let record_count = request.usage_records.as_ref().map_or(0, Vec::len);
        let sends_product_code = request
            .product_code
            .as_deref()
            .is_some_and(|p| !p.is_empty());
        let sends_license = request
            .usage_records
            .iter()
            .flatten()
            .any(|r| r.license_arn.as_deref().is_some_and(|l| !l.is_empty()));
        if sends_product_code && sends_license {
            self.stats.product_code_with_license_arn += 1;
            warn!(
                "BatchMeterUsage request sends ProductCode with LicenseArn records: AWS would double-bill"
            );
        }
        let now = self.clock.now();
        let catalog = Catalog {
            license_products: &self.license_products,
            product_dimensions: &self.product_dimensions,
        };
        let records = match validate_batch(&request, now, &self.patterns, catalog) {
            Ok(records) => records,
            Err(err) => return Err(self.reject(operation.name(), err, record_count)),
        };

        let unprocessed_count = match self.take_fault(operation, FaultPhase::Unprocess) {
            Some(FaultKind::Unprocessed { records: k }) => k.min(records.len()),
            _ => 0,
        };
        let processed_count = records.len() - unprocessed_count;
        let mut response = BatchMeterUsageResponse::default();
        for (i, record) in records.into_iter().enumerate() {
            if i >= processed_count {
                *self
                    .stats
                    .records_by_status
                    .entry(UNPROCESSED_STATUS.to_owned())
                    .or_default() += 1;
                response.unprocessed_records.push(record.echo);
                continue;
            }
            let result = self.meter_record(record, now);
            *self
                .stats
                .records_by_status
                .entry(result.status.as_str().to_owned())
                .or_default() += 1;
            response.results.push(result);
        }
        if let Some(kind) = self.take_fault(operation, FaultPhase::Garble) {
            self.garble(&mut response, kind);
        }
        info!(
            records = record_count,
            unprocessed = unprocessed_count,
            "BatchMeterUsage served"
        );
        serde_json::to_value(response).map_err(|e| {
            ApiError::new(
                ApiErrorKind::InternalServiceError,
                format!("response could not be encoded: {e}"),
            )
        })
    }

    /// Applies an injected `omit_results`, `unknown_status` or `wrong_echo` fault to the
    /// last results of a processed call (whatever they billed stays billed).
    fn garble(&mut self, response: &mut BatchMeterUsageResponse, kind: FaultKind) {
        let Some((name, records)) = kind.per_record() else {
            return;
        };
        let from = response.results.len().saturating_sub(records);
        let affected = response.results.len() - from;
        match kind {
            FaultKind::OmitResults { .. } => response.results.truncate(from),
            FaultKind::UnknownStatus { .. } => {
                for result in response.results.iter_mut().skip(from) {
                    result.status = RecordStatus::Unknown;
                }
            }
            FaultKind::WrongEcho { .. } => {
                for result in response.results.iter_mut().skip(from) {
                    let sent = result
                        .usage_record
                        .quantity
                        .as_ref()
                        .and_then(serde_json::Number::as_u64)
                        .unwrap_or(0);
                    result.usage_record.quantity = Some(serde_json::Number::from(sent + 1));
                }
            }
            _ => {}
        }
        self.stats.garbled_results += u64::try_from(affected).unwrap_or(u64::MAX);
        warn!(
            fault = name,
            results = affected,
            "call processed; some of its results are left out or garbled (injected fault)"
        );
    }

    /// Bills one validated record, first write wins per (account, license,
    /// dimension, hour).
    fn meter_record(&mut self, record: MeteredRecord, now: DateTime<Utc>) -> WireUsageRecordResult {
        let entitlement = self.entitlements.get(&(
            record.license_arn.clone(),
            record.customer_aws_account_id.clone(),
        ));
        let Some(entitlement) = entitlement.filter(|e| e.state.is_active(now)) else {
            return WireUsageRecordResult {
                usage_record: record.echo,
                metering_record_id: None,
                status: RecordStatus::CustomerNotSubscribed,
            };
        };
        let product_code = entitlement.product_code.clone();
        let key = DedupKey {
            account: record.customer_aws_account_id.clone(),
            license: record.license_arn.clone(),
            dimension: record.dimension.clone(),
            hour: record.hour,
        };
        if let Some(&index) = self.billed_index.get(&key) {
            let billed = &self.billed[index];
            let identical =
                billed.quantity == record.quantity && billed.allocations == record.allocations;
            let original_id = billed.metering_record_id.clone();
            let status = if identical {
                match self.identical_retry_status {
                    IdenticalRetryStatus::DuplicateRecord => RecordStatus::DuplicateRecord,
                    IdenticalRetryStatus::Success => RecordStatus::Success,
                }
            } else {
                warn!(
                    license = %record.license_arn,
                    dimension = %record.dimension,
                    hour = %record.hour,
                    billed = billed.quantity,
                    attempted = record.quantity,
                    "conflicting duplicate refused; first write stays billed"
                );
                self.conflicts.push(Conflict {
                    customer_aws_account_id: billed.customer_aws_account_id.clone(),
                    license_arn: billed.license_arn.clone(),
                    dimension: billed.dimension.clone(),
                    hour: billed.hour,
                    billed_quantity: billed.quantity,
                    attempted_quantity: record.quantity,
                    billed_allocations: billed.allocations.clone(),
                    attempted_allocations: record.allocations.clone(),
                    original_metering_record_id: original_id.clone(),
                    attempted_at: now,
                });
                self.stats.conflicts += 1;
                RecordStatus::DuplicateRecord
            };
            return WireUsageRecordResult {
                usage_record: record.echo,
                metering_record_id: Some(original_id),
                status,
            };
        }
        let metering_record_id = self.ids.next_id();
        self.billed_index.insert(key, self.billed.len());
        self.billed.push(BilledRecord {
            customer_aws_account_id: record.customer_aws_account_id,
            license_arn: record.license_arn,
            product_code,
            dimension: record.dimension,
            hour: record.hour,
            timestamp: record.timestamp,
            quantity: record.quantity,
            allocations: record.allocations,
            metering_record_id: metering_record_id.clone(),
            billed_at: now,
        });
        WireUsageRecordResult {
            usage_record: record.echo,
            metering_record_id: Some(metering_record_id),
            status: RecordStatus::Success,
        }
    }

    fn resolve_customer(&mut self, bytes: &[u8]) -> Result<serde_json::Value, ApiError> {
        let operation = Operation::ResolveCustomer;
        let request: ResolveCustomerRequest = self.parse(operation, bytes)?;
        let Some(token) = request.registration_token.filter(|t| !t.is_empty()) else {
            let err = ApiError::new(
                ApiErrorKind::InvalidToken,
                "RegistrationToken is required and must not be empty",
            );
            return Err(self.reject(operation.name(), err, 0));
        };
        let now = self.clock.now();
        let Some(issued) = self.tokens.get(&token).cloned() else {
            let err = ApiError::new(ApiErrorKind::InvalidToken, "Registration token is invalid.");
            return Err(self.reject(operation.name(), err, 0));
        };
        if now - issued.issued_at >= TOKEN_LIFETIME {
            let err = ApiError::new(
                ApiErrorKind::ExpiredToken,
                format!(
                    "The submitted registration token has expired (issued {}, valid for 4 hours, service time {now})",
                    issued.issued_at
                ),
            );
            return Err(self.reject(operation.name(), err, 0));
        }
        info!(license = %issued.license_arn, "ResolveCustomer served");
        serde_json::to_value(ResolveCustomerResponse {
            customer_aws_account_id: issued.customer_aws_account_id,
            product_code: issued.product_code,
            license_arn: issued.license_arn,
        })
        .map_err(|e| {
            ApiError::new(
                ApiErrorKind::InternalServiceError,
                format!("response could not be encoded: {e}"),
            )
        })
    }

    /// Takes one use of the first pending fault for `operation` that takes effect
    /// in `phase` of the call.
    fn take_fault(&mut self, operation: Operation, phase: FaultPhase) -> Option<FaultKind> {
        let position = self
            .faults
            .iter()
            .position(|f| operation.matches(f.operation) && f.kind.phase() == phase)?;
        let fault = self.faults.get_mut(position)?;
        let kind = fault.kind;
        fault.remaining = fault.remaining.saturating_sub(1);
        if fault.remaining == 0 {
            self.faults.remove(position);
        }
        Some(kind)
    }

    /// Logs and counts a refused call, and hands the exception back.
    fn reject(&mut self, operation: &str, err: ApiError, record_count: usize) -> ApiError {
        let error_type = err.kind.wire_name().to_owned();
        *self
            .stats
            .errors_by_type
            .entry(error_type.clone())
            .or_default() += 1;
        info!(operation, error = %error_type, message = %err.message, "call refused");
        if self.rejected.len() == REJECTED_LOG_CAPACITY {
            self.rejected.pop_front();
        }
        self.rejected.push_back(RejectedRequest {
            at: self.clock.now(),
            operation: operation.to_owned(),
            error_type,
            message: err.message.clone(),
            record_count,
        });
        err
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn record_ids_are_unique_and_uuid_shaped() {
        let mut ids = RecordIdGenerator::new();
        let all: BTreeSet<String> = (0..10_000).map(|_| ids.next_id()).collect();
        assert_eq!(all.len(), 10_000);
        let one = all.iter().next().expect("some id");
        assert_eq!(one.len(), 36);
        assert_eq!(&one[14..15], "4");
    }

    #[test]
    fn seeded_record_ids_repeat_with_their_seed() {
        let ids = |seed| {
            let mut ids = RecordIdGenerator::seeded(seed);
            (0..3).map(|_| ids.next_id()).collect::<Vec<_>>()
        };
        assert_eq!(ids(7), ids(7));
        assert_ne!(ids(7), ids(8));
    }

    #[test]
    fn targets_map_to_operations() {
        assert_eq!(
            Operation::from_target(Some("AWSMPMeteringService.BatchMeterUsage")),
            Ok(Operation::BatchMeterUsage)
        );
        assert_eq!(
            Operation::from_target(Some("AWSMPMeteringService.ResolveCustomer")),
            Ok(Operation::ResolveCustomer)
        );
        let unknown = Operation::from_target(Some("AWSMPMeteringService.MeterUsage"))
            .expect_err("not served");
        assert_eq!(unknown.kind, ApiErrorKind::UnknownOperation);
        assert!(Operation::from_target(None).is_err());
    }
}

//! The simulator's state and rules: entitlements, products, tokens, the ledger, the
//! quota, injected faults and stats, and what one wire call does to them. No I/O:
//! the HTTP layer hands each call in and sends back what this returns.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeDelta, Utc};
use tracing::{info, warn};

use crate::agreement::AgreementBook;
use crate::clock::SimClock;
use crate::cloudtrail::{Caller, EventHistory, is_lookup_events};
use crate::config::{IdenticalRetryStatus, SimConfig};
use crate::error::{AdminError, ApiError, ApiErrorKind};
use crate::ids::RecordIdGenerator;
use crate::model::{
    BilledRecord, Conflict, Entitlement, FaultKind, FaultPhase, FaultTarget, LossMode,
    RejectedRequest, Stats,
};
use crate::throttle::TokenBucket;
use crate::validate::Patterns;
use crate::wire::TARGET_PREFIX;

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
            FaultTarget::BillingAdjustments => false,
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
    agreements: AgreementBook,
}

mod admin;
mod agreement;
mod metering;

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
            agreements: AgreementBook::default(),
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
        for agreement in engine.startup.agreements.clone() {
            engine.seed_agreement(agreement)?;
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

//! The simulation's Marketplace: the Marketplace Metering simulator's engine
//! (`awsmp-marketplace-sim`) run in process at the simulation's clock, behind the
//! core `MeteringApi` port. Each batch goes to the engine as the `BatchMeterUsage`
//! JSON body the SDK sends, and its JSON answer (or exception) is read back with the
//! core code the SDK adapter reads its answers with, so the pipeline meets AWS's rules
//! (the 24-hour window and month-end grace, future timestamps, entitlements, the
//! product's dimensions, first write wins per hour) rather than a kinder model.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use async_trait::async_trait;
use awsmp_core::memory::ManualClock;
use awsmp_core::model::{Allocation, GroupKey};
use awsmp_core::ports::{Clock, MeteringApi, MeteringError, MeteringRecord, RecordVerdict};
use awsmp_core::submit::answer::{self, Answer, AnsweredResult, EchoedRecord};
use awsmp_core::time::{HourBucket, Instant};
use awsmp_marketplace_sim::agreement::Protocol;
use awsmp_marketplace_sim::engine::{Engine, RequestBody};
use awsmp_marketplace_sim::validate::Patterns;
use awsmp_marketplace_sim::{
    AdminError, AgreementSeed, AuthFailure, BillingAdjustment, ClockSetting, EntitlementKey,
    EntitlementSeed, FaultKind, FaultSpec, FaultTarget, IdenticalRetryStatus, ProductSeed,
    RejectedRequest, SimConfig, ThrottleConfig,
};
use serde::Deserialize;
use serde_json::{Value, json};

/// The `X-Amz-Target` of the only operation the pipeline calls.
const BATCH_METER_USAGE: &str = "AWSMPMeteringService.BatchMeterUsage";
/// The exception Marketplace refuses a dimension its product lacks with.
pub const INVALID_DIMENSION: &str = "InvalidUsageDimensionException";

/// Why the simulated Marketplace could not be set up as asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MarketplaceError {
    /// The engine refused a seed, an entitlement or a revocation.
    #[error("the Marketplace simulator refused: {0}")]
    Admin(#[from] AdminError),
    /// The model's patterns do not compile (a bug in the simulator).
    #[error("the Marketplace simulator's patterns do not compile: {0}")]
    Patterns(String),
    /// A refusal the engine does not make for a dimension (it refuses a dimension its
    /// product lacks with `InvalidUsageDimensionException` only).
    #[error("a missing dimension is refused with {INVALID_DIMENSION}, not {0}")]
    UnsupportedRefusal(String),
}

/// What Marketplace billed for one group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerEntry {
    /// Billed quantity (the first write's).
    pub quantity: i64,
    /// The product of the record's license.
    pub product_code: String,
    /// The record id answered.
    pub metering_record_id: String,
    /// When it was billed (simulation time).
    pub billed_at: Instant,
    /// The billed allocations: quantity per tag set (its `(key, value)` pairs sorted);
    /// empty when none were sent.
    pub allocations: BTreeMap<Vec<(String, String)>, i64>,
}

/// A record Marketplace answered `CustomerNotSubscribed`, and when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotSubscribed {
    /// The record's group.
    pub key: GroupKey,
    /// Simulation time of the call.
    pub at: Instant,
}

/// An entitlement revoked while the schedule ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revocation {
    /// The license.
    pub license_arn: String,
    /// The buyer account.
    pub customer_aws_account_id: String,
    /// Simulation time of the revocation.
    pub at: Instant,
}

struct State {
    engine: Engine,
    product: String,
    dimensions: BTreeSet<String>,
    not_subscribed: Vec<NotSubscribed>,
    revocations: Vec<Revocation>,
}

/// The simulator's engine as the simulation's Marketplace (one product).
#[derive(Clone)]
pub struct SimMarketplace {
    state: Arc<Mutex<State>>,
    clock: Arc<dyn Clock>,
}

/// The model's patterns, compiled once per process (each schedule clones them).
fn patterns() -> Result<Patterns, MarketplaceError> {
    static COMPILED: OnceLock<Result<Patterns, String>> = OnceLock::new();
    COMPILED
        .get_or_init(|| Patterns::compile().map_err(|e| e.to_string()))
        .clone()
        .map_err(MarketplaceError::Patterns)
}

impl SimMarketplace {
    /// A Marketplace selling `product` with `dimensions`, at `clock`'s time, its record
    /// ids drawn from `seed` (a schedule replays them). No quota (the simulation
    /// injects its own throttling) and no latency. `identical_retry` is how a resend
    /// of a billed record with the same quantity is answered (AWS documents both
    /// readings).
    pub fn new(
        product: &str,
        dimensions: &[&str],
        clock: ManualClock,
        seed: u64,
        identical_retry: IdenticalRetryStatus,
    ) -> Result<Self, MarketplaceError> {
        Self::on_clock(product, dimensions, Arc::new(clock), seed, identical_retry)
    }

    /// [`SimMarketplace::new`] at any clock's time.
    pub fn on_clock(
        product: &str,
        dimensions: &[&str],
        clock: Arc<dyn Clock>,
        seed: u64,
        identical_retry: IdenticalRetryStatus,
    ) -> Result<Self, MarketplaceError> {
        let config = SimConfig {
            throttle: ThrottleConfig {
                enabled: false,
                ..ThrottleConfig::default()
            },
            latency_ms: 0,
            clock: ClockSetting::Fixed { at: clock.now() },
            identical_retry_status: identical_retry,
            ..SimConfig::default()
        };
        let mut engine = Engine::new(config, patterns()?, std::time::Instant::now())?;
        engine.seed_record_ids(seed);
        let marketplace = SimMarketplace {
            state: Arc::new(Mutex::new(State {
                engine,
                product: product.to_string(),
                dimensions: dimensions.iter().map(|d| (*d).to_string()).collect(),
                not_subscribed: Vec::new(),
                revocations: Vec::new(),
            })),
            clock,
        };
        marketplace.reseed_product()?;
        Ok(marketplace)
    }

    /// The state, its engine's clock set to the simulation's.
    fn state(&self) -> MutexGuard<'_, State> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.engine.set_clock(ClockSetting::Fixed {
            at: self.clock.now(),
        });
        state
    }

    fn reseed_product(&self) -> Result<(), MarketplaceError> {
        let mut state = self.state();
        let seed = ProductSeed {
            product_code: state.product.clone(),
            dimensions: state.dimensions.iter().cloned().collect(),
        };
        state.engine.seed_product(seed)?;
        Ok(())
    }

    /// Entitles `account` under `license_arn` to the product, from now on.
    pub fn entitle(&self, license_arn: &str, account: &str) -> Result<(), MarketplaceError> {
        let mut state = self.state();
        let product_code = state.product.clone();
        state.engine.entitle(EntitlementSeed {
            license_arn: license_arn.to_string(),
            customer_aws_account_id: account.to_string(),
            product_code,
        })?;
        Ok(())
    }

    /// Revokes the entitlement at once: records sent from now on are answered
    /// `CustomerNotSubscribed`.
    pub fn revoke(&self, license_arn: &str, account: &str) -> Result<(), MarketplaceError> {
        let at = self.clock.now();
        let mut state = self.state();
        state.engine.revoke(&EntitlementKey {
            license_arn: license_arn.to_string(),
            customer_aws_account_id: account.to_string(),
        })?;
        state.revocations.push(Revocation {
            license_arn: license_arn.to_string(),
            customer_aws_account_id: account.to_string(),
            at,
        });
        Ok(())
    }

    /// Takes `dimension` out of the product's catalog: every batch holding it is
    /// refused with `exception`, which must be `InvalidUsageDimensionException` (what
    /// Marketplace answers for a dimension its product lacks).
    pub fn reject_dimension(
        &self,
        dimension: &str,
        exception: &str,
    ) -> Result<(), MarketplaceError> {
        if exception != INVALID_DIMENSION {
            return Err(MarketplaceError::UnsupportedRefusal(exception.to_string()));
        }
        self.state().dimensions.remove(dimension);
        self.reseed_product()
    }

    /// Defines `dimension` in the product's catalog (the seller added it).
    pub fn accept_dimension(&self, dimension: &str) -> Result<(), MarketplaceError> {
        self.state().dimensions.insert(dimension.to_string());
        self.reseed_product()
    }

    /// What was billed, per group.
    pub fn ledger(&self) -> BTreeMap<GroupKey, LedgerEntry> {
        self.billed().into_iter().collect()
    }

    /// What was billed, in billing order (a group billed twice is there twice).
    pub fn billed(&self) -> Vec<(GroupKey, LedgerEntry)> {
        self.state()
            .engine
            .ledger()
            .records
            .into_iter()
            .map(|billed| {
                let key = GroupKey {
                    license_arn: billed.license_arn,
                    customer_aws_account_id: billed.customer_aws_account_id,
                    dimension: billed.dimension,
                    hour: HourBucket::containing(billed.hour),
                };
                let entry = LedgerEntry {
                    quantity: i64::from(billed.quantity),
                    product_code: billed.product_code,
                    metering_record_id: billed.metering_record_id,
                    billed_at: billed.billed_at,
                    allocations: billed
                        .allocations
                        .iter()
                        .map(|a| {
                            let mut tags: Vec<(String, String)> = a
                                .tags
                                .iter()
                                .map(|t| (t.key.clone(), t.value.clone()))
                                .collect();
                            tags.sort();
                            (tags, i64::from(a.allocated_usage_quantity))
                        })
                        .fold(BTreeMap::new(), |mut all, (tags, quantity)| {
                            *all.entry(tags).or_insert(0) += quantity;
                            all
                        }),
                };
                (key, entry)
            })
            .collect()
    }

    /// Refuses the next `BatchMeterUsage` call before processing it, as AWS refuses a
    /// caller whose credentials, role or signature it does not accept (`failure` says
    /// which; the answer goes through the same reading as any other).
    pub fn refuse_next(&self, failure: AuthFailure) -> Result<(), MarketplaceError> {
        self.state().engine.inject_fault(FaultSpec {
            kind: FaultKind::Unauthorized { exception: failure },
            count: 1,
            operation: FaultTarget::BatchMeterUsage,
        })?;
        Ok(())
    }

    /// Every call Marketplace refused with an exception for what it was sent, oldest
    /// first: not the refusals of the caller's credentials the simulation injects
    /// ([`SimMarketplace::refuse_next`]).
    pub fn refused_calls(&self) -> Vec<RejectedRequest> {
        self.state()
            .engine
            .ledger()
            .rejected_requests
            .into_iter()
            .filter(|r| {
                !AuthFailure::ALL
                    .iter()
                    .any(|f| f.wire_name() == r.error_type)
            })
            .collect()
    }

    /// Holds an agreement (its Agreement API answers, invoices built from this
    /// Marketplace's ledger, billing adjustments against them).
    pub fn seed_agreement(&self, seed: AgreementSeed) -> Result<(), MarketplaceError> {
        self.state().engine.seed_agreement(seed)?;
        Ok(())
    }

    /// Serves one Agreement API call as boto3 sends it (awsJson 1.0) at the
    /// simulation's time: the HTTP status and the JSON answer (or exception).
    pub fn agreement_call(&self, operation: &str, request: &Value) -> (u16, Value) {
        let body = serde_json::to_vec(request).unwrap_or_default();
        let reply = self.state().engine.agreement_call(
            Protocol::AwsJson10,
            operation,
            RequestBody::Complete(&body),
            std::time::Instant::now(),
        );
        let answer = serde_json::from_slice(&reply.body).unwrap_or(Value::Null);
        (reply.status.as_u16(), answer)
    }

    /// Every billing adjustment made, oldest first (those due completed first).
    pub fn billing_adjustments(&self) -> Vec<BillingAdjustment> {
        self.state().engine.billing_adjustments()
    }

    /// Every record answered `CustomerNotSubscribed`, in order.
    pub fn not_subscribed(&self) -> Vec<NotSubscribed> {
        self.state().not_subscribed.clone()
    }

    /// The entitlements revoked so far.
    pub fn revocations(&self) -> Vec<Revocation> {
        self.state().revocations.clone()
    }
}

/// The request body the SDK sends for `records` (Concurrent Agreements: account and
/// license on every record, the hour's start as epoch seconds, no `ProductCode`, and
/// the `CustomerIdentifier` the model defaults to "").
fn request_body(records: &[MeteringRecord]) -> Value {
    let records: Vec<Value> = records
        .iter()
        .map(|record| {
            let mut wire = json!({
                "Timestamp": record.key.hour.start().timestamp(),
                "CustomerIdentifier": "",
                "Dimension": record.key.dimension,
                "Quantity": record.quantity,
                "CustomerAWSAccountId": record.key.customer_aws_account_id,
                "LicenseArn": record.key.license_arn,
            });
            if let Some(allocations) = &record.allocations {
                wire["UsageAllocations"] = allocations.iter().map(allocation).collect();
            }
            wire
        })
        .collect();
    json!({ "UsageRecords": records })
}

/// One allocation on the wire: the untagged bucket leaves `Tags` out.
fn allocation(allocation: &Allocation) -> Value {
    let mut wire = json!({ "AllocatedUsageQuantity": allocation.quantity });
    if !allocation.tags.is_empty() {
        wire["Tags"] = allocation
            .tags
            .iter()
            .map(|tag| json!({ "Key": tag.key, "Value": tag.value }))
            .collect();
    }
    wire
}

/// A `BatchMeterUsage` answer as the SDK reads it: every field optional.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct WireAnswer {
    #[serde(default)]
    results: Vec<WireResult>,
    #[serde(default)]
    unprocessed_records: Vec<WireRecord>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct WireResult {
    usage_record: Option<WireRecord>,
    metering_record_id: Option<String>,
    status: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct WireRecord {
    #[serde(rename = "CustomerAWSAccountId")]
    customer_aws_account_id: Option<String>,
    license_arn: Option<String>,
    dimension: Option<String>,
    timestamp: Option<f64>,
    quantity: Option<i64>,
}

impl WireRecord {
    /// As the adapter echoes it: an absent quantity is 0, a timestamp whole seconds.
    fn echoed(self) -> EchoedRecord {
        EchoedRecord {
            account: self.customer_aws_account_id.unwrap_or_default(),
            license_arn: self.license_arn.unwrap_or_default(),
            dimension: self.dimension.unwrap_or_default(),
            timestamp: self.timestamp.map_or(0, |t| t.floor() as i64),
            quantity: self.quantity.unwrap_or(0),
        }
    }
}

fn read_answer(body: Value) -> Result<Answer, MeteringError> {
    let wire: WireAnswer = serde_json::from_value(body).map_err(|e| {
        MeteringError::Transient(format!("unreadable BatchMeterUsage response: {e}"))
    })?;
    Ok(Answer {
        results: wire
            .results
            .into_iter()
            .map(|result| AnsweredResult {
                record: result.usage_record.map(WireRecord::echoed),
                status: result.status,
                metering_record_id: result.metering_record_id,
            })
            .collect(),
        unprocessed: wire
            .unprocessed_records
            .into_iter()
            .map(WireRecord::echoed)
            .collect(),
    })
}

#[async_trait]
impl MeteringApi for SimMarketplace {
    async fn batch_meter_usage(
        &self,
        records: &[MeteringRecord],
    ) -> Result<Vec<RecordVerdict>, MeteringError> {
        let body = serde_json::to_vec(&request_body(records))
            .map_err(|e| MeteringError::Transient(format!("request not serialized: {e}")))?;
        let at = self.clock.now();
        let mut state = self.state();
        let outcome = state.engine.call(
            Some(BATCH_METER_USAGE),
            RequestBody::Complete(&body),
            std::time::Instant::now(),
        );
        if outcome.drop_connection {
            return Err(MeteringError::Transient(
                "the connection closed without an answer".to_string(),
            ));
        }
        let answered = outcome
            .result
            .map_err(|e| answer::refusal(e.kind.wire_name(), &e.message))?;
        let verdicts = answer::verdicts(records, &read_answer(answered)?);
        for (record, verdict) in records.iter().zip(&verdicts) {
            if *verdict == RecordVerdict::CustomerNotSubscribed {
                state.not_subscribed.push(NotSubscribed {
                    key: record.key.clone(),
                    at,
                });
            }
        }
        Ok(verdicts)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use awsmp_core::time::parse_usage_timestamp;

    const LICENSE: &str = "arn:aws:license-manager::123456789012:license:l-0000000000000001";
    const ACCOUNT: &str = "111122223333";

    fn record(dimension: &str, hour: &str, quantity: i64) -> MeteringRecord {
        MeteringRecord {
            key: GroupKey {
                license_arn: LICENSE.into(),
                customer_aws_account_id: ACCOUNT.into(),
                dimension: dimension.into(),
                hour: hour.parse().unwrap(),
            },
            product_code: "prod".into(),
            quantity,
            allocations: None,
        }
    }

    fn marketplace(now: &str) -> (SimMarketplace, ManualClock) {
        let clock = ManualClock::new(parse_usage_timestamp(now).unwrap());
        let api = SimMarketplace::new(
            "prod",
            &["requests"],
            clock.clone(),
            7,
            IdenticalRetryStatus::DuplicateRecord,
        )
        .unwrap();
        api.entitle(LICENSE, ACCOUNT).unwrap();
        (api, clock)
    }

    #[tokio::test]
    async fn bills_first_write_and_refuses_what_aws_refuses() {
        let (api, clock) = marketplace("2026-11-30T12:10:00Z");
        let first = api
            .batch_meter_usage(&[record("requests", "2026-11-30T11", 5)])
            .await
            .unwrap();
        assert!(
            matches!(first[0], RecordVerdict::Success { .. }),
            "{first:?}"
        );
        let again = api
            .batch_meter_usage(&[record("requests", "2026-11-30T11", 6)])
            .await
            .unwrap();
        assert!(matches!(again[0], RecordVerdict::DuplicateRecord { .. }));
        let key = record("requests", "2026-11-30T11", 0).key;
        assert_eq!(api.ledger()[&key].quantity, 5);

        // The hour's window closes 24 hours after it starts.
        clock.set(parse_usage_timestamp("2026-12-01T11:00:00Z").unwrap());
        let late = api
            .batch_meter_usage(&[record("requests", "2026-11-30T11", 1)])
            .await
            .unwrap_err();
        assert!(
            matches!(&late, MeteringError::Validation { name, .. } if name == "TimestampOutOfBoundsException"),
            "{late:?}"
        );
        // An hour that has not begun is in the future.
        let future = api
            .batch_meter_usage(&[record("requests", "2026-12-01T12", 1)])
            .await
            .unwrap_err();
        assert!(
            matches!(&future, MeteringError::Validation { name, .. } if name == "TimestampOutOfBoundsException")
        );
        assert_eq!(api.refused_calls().len(), 2);
    }

    #[tokio::test]
    async fn dimensions_and_entitlements_follow_the_catalog() {
        let (api, _clock) = marketplace("2026-11-30T12:10:00Z");
        api.reject_dimension("poison", INVALID_DIMENSION).unwrap();
        let refused = api
            .batch_meter_usage(&[record("poison", "2026-11-30T11", 1)])
            .await
            .unwrap_err();
        assert!(
            matches!(&refused, MeteringError::Validation { name, .. } if name == INVALID_DIMENSION)
        );
        api.accept_dimension("poison").unwrap();
        let billed = api
            .batch_meter_usage(&[record("poison", "2026-11-30T11", 1)])
            .await
            .unwrap();
        assert!(matches!(billed[0], RecordVerdict::Success { .. }));
        assert!(api.reject_dimension("x", "ThrottlingException").is_err());

        api.revoke(LICENSE, ACCOUNT).unwrap();
        let revoked = api
            .batch_meter_usage(&[record("requests", "2026-11-30T10", 1)])
            .await
            .unwrap();
        assert_eq!(revoked, vec![RecordVerdict::CustomerNotSubscribed]);
        assert_eq!(api.not_subscribed().len(), 1);
        assert_eq!(api.revocations().len(), 1);
    }

    #[tokio::test]
    async fn a_refused_caller_is_refused_before_processing_and_read_as_definite() {
        let (api, _clock) = marketplace("2026-11-30T12:10:00Z");
        for failure in AuthFailure::ALL {
            api.refuse_next(failure).unwrap();
            let refused = api
                .batch_meter_usage(&[record("requests", "2026-11-30T11", 5)])
                .await
                .unwrap_err();
            assert!(
                matches!(&refused, MeteringError::Refused { name, .. } if name == failure.wire_name()),
                "{failure:?}: {refused:?}"
            );
        }
        assert!(api.ledger().is_empty());
        assert!(
            api.refused_calls().is_empty(),
            "not a refusal of what was sent"
        );
        let billed = api
            .batch_meter_usage(&[record("requests", "2026-11-30T11", 5)])
            .await
            .unwrap();
        assert!(matches!(billed[0], RecordVerdict::Success { .. }));
    }

    #[tokio::test]
    async fn record_ids_replay_with_the_seed() {
        let ids = || async {
            let (api, _clock) = marketplace("2026-11-30T12:10:00Z");
            api.batch_meter_usage(&[record("requests", "2026-11-30T11", 5)])
                .await
                .unwrap()
        };
        assert_eq!(ids().await, ids().await);
    }
}

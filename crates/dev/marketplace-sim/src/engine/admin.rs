//! The admin side of the [`Engine`]: seeding products, entitlements and tokens,
//! lifecycle events, faults, the clock, the quota, latency, and the reports.

use std::time::{Duration, Instant};

use chrono::{DateTime, TimeDelta, Utc};
use tracing::info;

use super::{DEPROVISIONING_WINDOW, Engine, IssuedToken, PendingFault};
use crate::clock::ClockSetting;
use crate::error::AdminError;
use crate::ids::RecordIdGenerator;
use crate::lifecycle::{LifecycleChange, parse_event};
use crate::model::{
    Entitlement, EntitlementKey, EntitlementSeed, EntitlementState, FaultSpec, LedgerSnapshot,
    LifecycleOutcome, ProductSeed, Stats, TokenSeed,
};
use crate::throttle::{ThrottleConfig, TokenBucket};

fn non_empty(value: &str, field: &str) -> Result<(), AdminError> {
    if value.is_empty() {
        Err(AdminError::Invalid(format!("{field} must not be empty")))
    } else {
        Ok(())
    }
}

impl Engine {
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

    pub(super) fn deprovision(
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

    /// Issues `MeteringRecordId`s, CloudTrail ids and the Agreement side's ids from
    /// `seed` from now on, so that a caller replaying a run (a deterministic
    /// simulation) gets the same ids again.
    pub fn seed_record_ids(&mut self, seed: u64) {
        self.ids = RecordIdGenerator::seeded(seed);
        self.trail_ids = RecordIdGenerator::seeded(RecordIdGenerator::mix(seed));
        self.agreements.ids =
            RecordIdGenerator::seeded(RecordIdGenerator::mix(RecordIdGenerator::mix(seed)));
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
}

//! The agreement reconciliation (events stack, scheduled) and the Agreement API it
//! reads: the three buyers' agreements, started when their License Updated was sent,
//! the third one's ending when its License Deprovisioned was (or would have been) sent.
//! The API answers as of the simulation's clock, and lags behind when the schedule says
//! so: until settling it still calls the ended agreement `ACTIVE`. The reconciliation
//! runs once while the pipeline runs (under faults: its search may be throttled, its
//! writes fail as every subscribers write may) and at every settling pass, fault-free.
//! Each run also keeps the active licenses' rate cards on their rows (its terms read
//! may be throttled too); each buyer's agreement has its own prices, and the first
//! buyer's is amended (new prices, a later `lastUpdateTime`) once settling begins.

use std::cell::Cell;

use awsmp_core::charges::StoredRateCard;
use awsmp_core::lifecycle::reconcile::{
    Product, ReconcilePorts, ReconcileReport, ReconcileSettings, reconcile,
};
use awsmp_core::memory::agreement_contract::{SeedAgreement, record};
use awsmp_core::memory::{AgreementOp, MemoryAgreementApi};
use awsmp_core::ports::{AgreementStatus, Clock, SubscriberStore};
use awsmp_core::time::Instant;

use crate::executor::Task;
use crate::options::LostEvents;
use crate::scenario::{ACCOUNT, PRODUCT};
use crate::sim::yield_now;
use crate::stack::{Stack, lock};

/// The product id the Agreement API knows the stack's product by.
pub const PRODUCT_ID: &str = "prod-sim-id";

/// The agreement id the simulation's lifecycle events name for `license_arn`.
pub fn agreement_id(license_arn: &str) -> String {
    format!(
        "agmt-{}",
        &license_arn[license_arn.len().saturating_sub(4)..]
    )
}

/// What every agreement prices the edge seller's dimension at (0.01).
pub const EDGES_PRICE: rust_decimal::Decimal = rust_decimal::Decimal::from_parts(1, 0, 0, false, 2);

/// The prices of `license_arn`'s agreement (each buyer's own, so a card kept on the
/// wrong row shows), `amended` or as first agreed.
pub fn prices(license_arn: &str, amended: bool) -> Vec<(String, rust_decimal::Decimal)> {
    let n: u32 = license_arn
        .chars()
        .last()
        .and_then(|c| c.to_digit(10))
        .unwrap_or(0);
    let requests = i64::from(n) + 1 + if amended { 10 } else { 0 };
    vec![
        (
            "requests".to_string(),
            rust_decimal::Decimal::new(requests, 4),
        ),
        ("storage_gb".to_string(), rust_decimal::Decimal::new(5, 1)),
        (
            crate::actors::edge_seller::DIMENSION.to_string(),
            EDGES_PRICE,
        ),
    ]
}

/// Whether `n`'s agreement (0-based) is amended once settling begins: the first
/// buyer's is, so its card, read while the pipeline ran, must be read again.
pub fn amended_when_settled(n: usize) -> bool {
    n == 0
}

/// The Agreement API of the schedule and the reconciliation's runs.
pub struct Reconciler<'a> {
    api: MemoryAgreementApi,
    buyers: [&'a str; 3],
    activated: Instant,
    deprovisioned_at: Instant,
    lost: LostEvents,
    /// Settling began: the API no longer lags.
    settled: Cell<bool>,
    /// Each run's report, or its error.
    runs: std::sync::Mutex<Vec<Result<ReconcileReport, String>>>,
    /// The first buyer's card right after its amendment was told.
    amended_card: std::sync::Mutex<Option<StoredRateCard>>,
}

impl<'a> Reconciler<'a> {
    /// The API of `buyers`' agreements (`api`, the events stack's), active since
    /// `activated`; the third one's ends at `deprovisioned_at`.
    pub fn new(
        api: MemoryAgreementApi,
        buyers: [&'a str; 3],
        activated: Instant,
        deprovisioned_at: Instant,
        lost: LostEvents,
    ) -> Self {
        Reconciler {
            api,
            buyers,
            activated,
            deprovisioned_at,
            lost,
            settled: Cell::new(false),
            runs: std::sync::Mutex::new(Vec::new()),
            amended_card: std::sync::Mutex::new(None),
        }
    }

    /// Seeds every agreement as the API answers at `now`.
    pub fn answer_as_of(&self, now: Instant) {
        for (n, license) in self.buyers.iter().enumerate() {
            let amended = amended_when_settled(n) && self.settled.get();
            let seed = SeedAgreement {
                agreement_id: agreement_id(license),
                license_arn: license.to_string(),
                account: ACCOUNT.to_string(),
                product_id: PRODUCT_ID.to_string(),
                offer_id: "offer-sim".to_string(),
                start: self.activated,
                end: None,
                currency: "USD".to_string(),
                rate_card: prices(license, amended),
                free_trial: None,
                upfront: None,
            };
            let caught_up = !self.lost.api_lag || self.settled.get();
            let ended = n == 2 && now >= self.deprovisioned_at && caught_up;
            let record = if ended {
                record(&seed, AgreementStatus::Cancelled, self.deprovisioned_at)
            } else if amended {
                // An amendment moves lastUpdateTime.
                let at = self.activated + chrono::Duration::hours(1);
                record(&seed, AgreementStatus::Active, at)
            } else {
                record(&seed, AgreementStatus::Active, self.activated)
            };
            self.api.seed(record);
        }
    }

    /// One run on `stack`'s events-stack ports.
    async fn run_once(&self, stack: &Stack) {
        let now = stack.clock.now();
        self.answer_as_of(now);
        let settings = ReconcileSettings {
            products: vec![Product {
                product_id: PRODUCT_ID.to_string(),
                product_code: PRODUCT.to_string(),
            }],
            dry_run: false,
        };
        let ports = ReconcilePorts {
            agreements: &self.api,
            subscribers: &*stack.subscribers,
            clock: &stack.clock,
        };
        let answer = reconcile(ports, &settings).await.map_err(|e| e.to_string());
        lock(&self.runs).push(answer);
    }

    /// The run while the pipeline runs, under faults.
    pub fn task<'s>(&'s self, stack: &'s Stack) -> Task<'s> {
        Task::new("agreement-reconcile", async move {
            for _ in 0..stack.sim.below(120) {
                yield_now().await;
            }
            if stack.sim.below(4) == 0 {
                self.api.throttle_next(AgreementOp::Search);
            }
            if stack.sim.below(4) == 0 {
                self.api.throttle_next(AgreementOp::Terms);
            }
            self.run_once(stack).await;
        })
    }

    /// A fault-free run while settling (the API has caught up). The first one begins
    /// with the first buyer's agreement amended (new prices, a later `lastUpdateTime`)
    /// and Marketplace telling it (`Purchase Agreement Amended`): the subscription
    /// function reads the new card, kept for the checker, before the run.
    pub fn settle(&self, stack: &Stack) {
        let first = !self.settled.replace(true);
        // Settling is fault-free: a throttle queued under faults that no call met (no
        // card was due, the run crashed first) is gone, not left for a later call.
        self.api.clear_faults();
        let tasks = vec![Task::new("agreement-reconcile", async move {
            if first {
                self.amend(stack).await;
            }
            self.run_once(stack).await;
        })];
        crate::executor::run(
            &stack.sim,
            tasks,
            false,
            crate::scenario::MAX_STEPS,
            &|_| {},
        );
    }

    /// The first buyer's agreement amended and told; its card right after.
    async fn amend(&self, stack: &Stack) {
        let now = stack.clock.now();
        self.answer_as_of(now);
        let buyer = self.buyers[0];
        stack
            .lifecycle(crate::actors::lifecycle::AMENDED, buyer, now)
            .await;
        let row = stack.subscribers.get(buyer, ACCOUNT).await.ok().flatten();
        *lock(&self.amended_card) = row.and_then(|row| row.rate_card).map(|card| *card);
    }

    /// The first buyer's card right after its amendment was told (settling's start).
    pub fn amended_card(&self) -> Option<StoredRateCard> {
        lock(&self.amended_card).clone()
    }

    /// Every run's report (or error), in order.
    pub fn runs(&self) -> Vec<Result<ReconcileReport, String>> {
        lock(&self.runs).clone()
    }
}

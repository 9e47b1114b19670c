//! The operator correcting over-bills (`awsmp adjust`) once the schedule's months are
//! invoiced: run after every other invariant was checked, because it moves the clock
//! past the month's end. The buyers' agreements (a rate card pricing `requests`, `storage` and
//! the imported dimension; the rest unpriced) are seeded in the Marketplace engine,
//! which builds their invoices from its own ledger. Two operators then correct a few
//! billed records at once, sometimes the same record with other quantities, sometimes
//! an under-bill, under faults (Agreement API calls failing or losing the adjustment's
//! answer, operators crashing between calls); then, fault-free, each operator reruns
//! what it left unconfirmed or not filed, the adjustments complete, and `awsmp
//! adjustments` follows each one.

use std::collections::BTreeMap;
use std::sync::Mutex;

use awsmp_core::corrections::{
    CorrectionError, CorrectionOutcome, CorrectionPorts, CorrectionRequest, CorrectionStatus,
    correct, invoiced_from, period_of, refresh,
};
use awsmp_core::memory::MemoryAgreementApi;
use awsmp_core::memory::agreement_contract::{SeedAgreement, record};
use awsmp_core::model::{AggregatedStatus, GroupKey};
use awsmp_core::ports::{AgreementStatus, Clock, OperatorStore};
use awsmp_core::time::Instant;
use awsmp_marketplace_sim::AgreementSeed;
use rust_decimal::Decimal;

use crate::actors::reconcile::{PRODUCT_ID, agreement_id};
use crate::agreements::EngineAgreements;
use crate::executor::{self, Task};
use crate::scenario::{ACCOUNT, IMPORTED, MAX_STEPS, license};
use crate::stack::lock;
use crate::world::World;

/// The buyers' rate card: dimension and price (USD).
pub const PRICES: [(&str, &str); 3] = [
    ("requests", "0.0025"),
    ("storage", "0.5"),
    (IMPORTED, "0.01"),
];

/// One correction an operator asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// Which operator (0 or 1).
    pub operator: usize,
    /// The record.
    pub key: GroupKey,
    /// The quantity the operator says is right.
    pub correct: i64,
}

/// What one run of `awsmp adjust` answered.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The request (an index into [`CorrectionsLog::requests`]).
    pub request: usize,
    /// Whether it ran fault-free (the reruns).
    pub settling: bool,
    /// What it answered.
    pub outcome: Result<CorrectionOutcome, CorrectionError>,
}

/// What the corrections left, for [`crate::check::corrections`].
pub struct CorrectionsLog {
    /// The Agreement API they ran against.
    pub api: EngineAgreements,
    /// Every request, in order.
    pub requests: Vec<Request>,
    /// Every run's answer, in order.
    pub answers: Vec<Answer>,
    /// The rate card.
    pub prices: BTreeMap<String, Decimal>,
    /// Each buyer's agreement.
    pub agreements: BTreeMap<String, String>,
    /// When the agreements started.
    pub start: Instant,
    /// Agreements the engine refused to hold (a broken setup).
    pub seeding: Vec<String>,
}

fn prices() -> BTreeMap<String, Decimal> {
    PRICES
        .iter()
        .map(|(d, p)| ((*d).to_string(), p.parse().unwrap_or_default()))
        .collect()
}

/// Seeds each buyer's agreement in the engine (invoices, adjustments) and in the
/// facts API (describe, terms), from the agreements' start.
fn seed_agreements(world: &World, facts: &MemoryAgreementApi, start: Instant) -> Vec<String> {
    let prices = prices();
    let mut refused = Vec::new();
    for n in 1..=3 {
        let license = license(n);
        let id = agreement_id(&license);
        let engine = AgreementSeed::active(
            &id,
            &license,
            ACCOUNT,
            (world.product, PRODUCT_ID),
            start,
            "offer-sim",
        )
        .priced(&PRICES);
        let seeded = engine
            .map_err(crate::marketplace::MarketplaceError::from)
            .and_then(|engine| world.metering.inner.seed_agreement(engine));
        if let Err(e) = seeded {
            refused.push(format!("agreement {}: {e}", agreement_id(&license)));
        }
        let seed = SeedAgreement {
            agreement_id: id,
            license_arn: license,
            account: ACCOUNT.to_string(),
            product_id: PRODUCT_ID.to_string(),
            offer_id: "offer-sim".to_string(),
            start,
            end: None,
            currency: "USD".to_string(),
            rate_card: prices.iter().map(|(d, p)| (d.clone(), *p)).collect(),
            free_trial: None,
            upfront: None,
        };
        facts.seed(record(&seed, AgreementStatus::Active, start));
    }
    refused
}

/// The requests: one to four billed records, each with a quantity below what was
/// billed (now and then above it: an under-bill), split between the two operators;
/// half the time the second operator also corrects the first record, otherwise.
fn draw(world: &World) -> Vec<Request> {
    let sim = &world.sim;
    let mut billed: Vec<_> = world
        .tables
        .aggregated_records()
        .into_iter()
        .filter(|r| r.status == AggregatedStatus::Success && r.quantity_to_send() > 0)
        .collect();
    let mut requests = Vec::new();
    for _ in 0..(1 + sim.below(4)) {
        if billed.is_empty() {
            break;
        }
        let record = billed.swap_remove(sim.below(billed.len()));
        let sent = record.quantity_to_send();
        let correct = if sim.below(8) == 0 {
            sent + 1 + i64::try_from(sim.below(5)).unwrap_or(0)
        } else {
            i64::try_from(sim.below(usize::try_from(sent).unwrap_or(1))).unwrap_or(0)
        };
        requests.push(Request {
            operator: sim.below(2),
            key: record.key,
            correct,
        });
    }
    if let Some(first) = requests.first().cloned()
        && sim.below(2) == 0
    {
        let billed = first.correct.max(1);
        requests.push(Request {
            operator: 1 - first.operator,
            correct: i64::try_from(sim.below(usize::try_from(billed).unwrap_or(1))).unwrap_or(0),
            ..first
        });
    }
    requests
}

/// Runs the corrections on `world` (see the module docs).
pub fn run(world: &World) -> CorrectionsLog {
    let sim = &world.sim;
    let clock = &world.clock;
    let start = world.options.start - chrono::Duration::hours(5);
    let facts = MemoryAgreementApi::new();
    let seeding = seed_agreements(world, &facts, start);
    let api = EngineAgreements::new(facts, world.metering.inner.clone(), sim.clone());
    let requests = draw(world);
    // Past the end of every month billed: each is invoiced.
    if let Some(last) = world.metering.inner.ledger().keys().map(|k| k.hour).max() {
        let invoiced = invoiced_from(period_of(last.start())) + chrono::Duration::hours(1);
        if invoiced > clock.now() {
            clock.set(invoiced);
        }
    }
    let operator = world.tables.operator_store();
    let ports = CorrectionPorts {
        records: &operator,
        subscribers: &world.subscribers,
        agreements: &api,
        clock,
    };
    let answers = Mutex::new(Vec::new());
    let ask = |n: usize, retries: u32, settling: bool| {
        let answers = &answers;
        let requests = &requests;
        async move {
            let r = &requests[n];
            let request = CorrectionRequest {
                key: r.key.clone(),
                correct_quantity: r.correct,
                agreement_id: None,
            };
            let outcome = correct(ports, &request, true, retries).await;
            lock(answers).push(Answer {
                request: n,
                settling,
                outcome,
            });
        }
    };

    // Both operators at once, under faults.
    sim.faults_on();
    let tasks: Vec<Task<'_>> = (0..2)
        .map(|op| {
            let mine: Vec<usize> = (0..requests.len())
                .filter(|n| requests[*n].operator == op)
                .collect();
            let retries = u32::try_from(sim.below(3)).unwrap_or(0);
            let ask = &ask;
            Task::new(format!("operator-adjust#{op}"), async move {
                for n in mine {
                    ask(n, retries, false).await;
                }
            })
        })
        .collect();
    executor::run(sim, tasks, true, MAX_STEPS, &|_| {});
    sim.faults_off();

    // Fault-free: each request run again, as an operator reruns what did not say
    // "filed" (an unconfirmed correction resumes with its token; a filed one sends
    // nothing; a refused one is refused again).
    let reruns: Vec<Task<'_>> = vec![Task::new("operator-adjust#settle", async {
        for n in 0..requests.len() {
            ask(n, 3, true).await;
        }
    })];
    executor::run(sim, reruns, false, MAX_STEPS, &|_| {});

    // The adjustments complete; `awsmp adjustments` follows them.
    clock.set(clock.now() + chrono::Duration::minutes(5));
    let follow = vec![Task::new("operator-adjustments", async {
        let mut cursor = None;
        loop {
            let Ok(page) = operator.corrections_page(cursor).await else {
                return;
            };
            for (record, c) in &page.items {
                if c.status == CorrectionStatus::Pending {
                    let _ = refresh(ports, &record.key, c).await;
                }
            }
            cursor = page.next;
            if cursor.is_none() {
                return;
            }
        }
    })];
    executor::run(sim, follow, false, MAX_STEPS, &|_| {});

    CorrectionsLog {
        requests: requests.clone(),
        answers: answers
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
        prices: prices(),
        agreements: (1..=3)
            .map(|n| (license(n), agreement_id(&license(n))))
            .collect(),
        start,
        seeding,
        api,
    }
}

//! One schedule, as its [`Options`] (drawn from the seed first) say: the seller's usage
//! (one group of more than 99 rows, a poison dimension, late rows arriving while the
//! pipeline runs, a license deprovisioned mid-run), the real use cases running
//! concurrently as their Lambdas would (two discoverer runs, two aggregator and one
//! cleanup consumer, two submitter invocations that may overlap with stale times, the
//! subscription handler, deprovision-cleanup, and buyers registering through the
//! register handler while their lifecycle events land, the seller's service recording
//! events through `awsmp_usage::Meter`, the operator importing usage files), now and
//! then a second main stack (the product's second metering Region, or another product
//! in the same Region) with its own pipeline and Marketplace over the same subscribers
//! table, then a fault-free settling phase that runs the pipeline past the 24-hour
//! window. Each actor is in [`crate::actors`]; this file only sets them going, phase
//! by phase, and hands what they left to the checkers as a [`World`].

use std::sync::{Arc, Mutex};
use std::time::Duration;

use awsmp_core::memory::{
    AgreementOp, ManualClock, MemoryProfileStore, MemorySubscriberStore, MemoryTables,
};
use awsmp_core::ports::Clock;
use awsmp_core::retention::Retention;
use awsmp_core::time::{self, HourBucket, Instant, MeteringLockHours};

use crate::actors::buyer_events::BuyerEvents;
use crate::actors::edge_seller::EdgeSeller;
use crate::actors::gatekeeper::Gatekeeper;
use crate::actors::outcome_events::OutcomeEvents;
use crate::actors::reconcile::Reconciler;
use crate::actors::seller::{self, Buyers, Row};
use crate::actors::submitter::{self, Runs};
use crate::actors::{aggregator, cleanup, discoverer, lifecycle, marketplace, operator, register};
use crate::executor::{self, Task};
use crate::options::{Options, SecondKind};
use crate::ports::FaultyMetering;
use crate::queue::SimQueue;
use crate::sim::Sim;
use crate::stack::{Stack, lock};
use crate::world::World;

/// The stack's product.
pub const PRODUCT: &str = "prod-sim";
/// Another product of the same seller, with its own main stack in the same Region and
/// the same events stack (subscribers table).
pub const SECOND_PRODUCT: &str = "prod-two";
/// The buyer account.
pub const ACCOUNT: &str = "111122223333";
/// The dimension Marketplace rejects (`InvalidUsageDimensionException`).
pub const POISON: &str = "poison";
/// The Region of the main stack (recorded in `registeredRegions` by the register function).
pub const REGION: &str = "us-west-2";
/// A second metering Region some schedules deploy: its own usage and aggregated
/// tables, queues and Marketplace (which deduplicates per Region), the same
/// subscribers table.
pub const SECOND_REGION: &str = "eu-west-1";
/// A body on the work queue that is no work message (sent by hand, or by another
/// version): reported failed by every receive, never deleted, dead-lettered after the
/// redrive policy's receives.
pub const GARBAGE: &str = r#"{"kind":"Rollup","version":2}"#;
/// The dimension the operator imports usage files for.
pub const IMPORTED: &str = "imported";
/// Most an execution environment's clock is off the simulation's, in milliseconds.
pub const MAX_CLOCK_SKEW_MS: i64 = 2000;
/// Most polls of one concurrent phase (a guard; reported when hit).
pub const MAX_STEPS: u64 = 200_000;

/// Every stage's `DATA_RETENTION_DAYS` in the simulation: the floor, so every final
/// write under faults must carry its `expiresAt` and no pending one ever may
/// ([`crate::check::retention`]).
pub const RETENTION: Retention = Retention::MIN;

/// Every stack's `PROFILE_RETENTION_DAYS` in the simulation.
pub const PROFILE_RETENTION_DAYS: i64 = 30;

/// A license ARN that passes the guardrails.
pub fn license(n: u32) -> String {
    format!("arn:aws:license-manager::123456789012:license:l-{n:016}")
}

fn at(text: &str) -> Instant {
    time::parse_usage_timestamp(text).unwrap_or_default()
}

/// The hours a schedule's usage falls in.
#[derive(Debug, Clone, Copy)]
pub struct Hours {
    /// The older of the last two hours the lock lets the pipeline process.
    pub oldest: HourBucket,
    /// The newer of them.
    pub newest: HourBucket,
    /// The hour before the open one.
    pub previous: HourBucket,
    /// The open hour.
    pub current: HourBucket,
}

impl Hours {
    fn of(start: Instant, lock: MeteringLockHours) -> Self {
        let completed = time::completed_buckets(start, lock);
        let current = HourBucket::containing(start);
        let (oldest, newest) = match completed.as_slice() {
            [.., a, b] => (*a, *b),
            _ => (current.plus_hours(-3), current.plus_hours(-2)),
        };
        Hours {
            oldest,
            newest,
            previous: current.plus_hours(-1),
            current,
        }
    }
}

/// Whether a task runs a stage that a direct-submit stack does not deploy.
fn raw_usage_stage(name: &str) -> bool {
    ["discoverer", "aggregator", "cleanup"]
        .iter()
        .any(|stage| name.starts_with(stage))
}

/// Runs the schedule `options` describe on `sim` and returns what it built.
pub fn run(sim: Sim, options: &Options) -> World {
    let settings = options.settings;
    let direct = settings.direct;
    let clock = ManualClock::new(options.start);
    let tables = MemoryTables::with_page_size(options.main.page_size);
    let subscribers = MemorySubscriberStore::new();
    let (l1, l2, l3, l4) = (license(1), license(2), license(3), license(4));
    let buyers: Buyers<'_> = [&l1, &l2, &l3];
    let api = marketplace::selling(&options.main, &clock, PRODUCT, &buyers);
    let metering =
        Arc::new(FaultyMetering::new(api, sim.clone(), clock.clone()).watching(tables.clone()));
    let hours = Hours::of(options.start, settings.lock);
    let profiles = MemoryProfileStore::new();
    let stack = Stack::build(
        (REGION, PRODUCT),
        &sim,
        &clock,
        &tables,
        &subscribers,
        metering.clone(),
        &profiles,
        (settings, &options.main),
    );
    // The seller posting to the usage API across the edges, while settling moves on.
    let edge_seller = (!direct).then(|| {
        let tables = (stack.usage.clone() as _, stack.aggregated.clone() as _);
        let subscribers = stack.subscribers.clone() as _;
        EdgeSeller::new(
            &sim,
            &clock,
            tables,
            subscribers,
            (PRODUCT, settings.lock),
            license(1),
        )
    });
    // The second main stack: its own tables, pipeline and Marketplace; the product's
    // buyers in its second Region, or its own buyer (l4) for the second product.
    let second_region = options.second.map(|second| {
        let (deployment, buyers) = match second.kind {
            SecondKind::Region => ((SECOND_REGION, PRODUCT), buyers.to_vec()),
            SecondKind::Product => ((REGION, SECOND_PRODUCT), vec![&l4]),
        };
        let tables = MemoryTables::with_page_size(second.deployment.page_size);
        let api = marketplace::selling(&second.deployment, &clock, deployment.1, &buyers);
        let metering =
            Arc::new(FaultyMetering::new(api, sim.clone(), clock.clone()).watching(tables.clone()));
        let stack = Stack::build(
            deployment,
            &sim,
            &clock,
            &tables,
            &subscribers,
            metering,
            &MemoryProfileStore::new(),
            (settings, &second.deployment),
        );
        (stack, tables, second.rows)
    });
    seller::usage_before(&sim, &tables, &options.seller, buyers, &hours, direct);
    let outcomes = OutcomeEvents::new(&sim, &tables, options.outcome_batch_size);
    let buyer_events = BuyerEvents::new(&sim, &subscribers, options.outcome_batch_size);
    let gatekeeper = Gatekeeper::new(&stack, &buyers);
    // The second stack meters some of the first buyer's usage too (its own groups:
    // Marketplace deduplicates per Region), or its own buyer's.
    if let Some((other, tables, rows)) = &second_region {
        let buyer = if other.product == PRODUCT { &l1 } else { &l4 };
        for n in 0..*rows {
            let row = seller::row_at(&sim, buyer, "requests", hours.newest, n);
            seller::write(tables, other.product, &row, direct);
        }
    }
    let second_stack = second_region.as_ref().map(|(stack, _, _)| stack);
    let initial_rows: Vec<(String, String)> = tables
        .raw_rows()
        .into_iter()
        .map(|r| (r.license_arn, r.sort_key))
        .collect();
    // Late rows, written while the pipeline runs.
    let late = seller::late_rows(&sim, &options.seller.late, buyers, &hours, 800);
    if options.garbage {
        stack.work.send_garbage(GARBAGE);
    }

    // License Updated for every buyer, applied before the run, one after the other (the
    // other product's buyer through the same events stack); each is followed by its
    // buyer's rate card, read from the Agreement API as it answers then.
    let activated = options.start - chrono::Duration::hours(5);
    let reconciler = Reconciler::new(
        stack.agreements.clone(),
        buyers.map(String::as_str),
        activated,
        options.deprovisioned_at,
        options.lost,
    );
    reconciler.answer_as_of(activated);
    let lost = options.lost;
    let mut setup: Vec<Task<'_>> = vec![Task::new("license-updated", async {
        for (n, l) in buyers.into_iter().enumerate() {
            // A lost one never arrives: the agreement reconciliation finds it in the API.
            if lost.updated == Some(n) {
                continue;
            }
            if lost.card_throttled == Some(n) {
                stack.agreements.throttle_next(AgreementOp::Terms);
            }
            stack.lifecycle(lifecycle::UPDATED, l, activated).await;
        }
    })];
    if let Some(other) = second_stack.filter(|other| other.product != PRODUCT) {
        setup.push(lifecycle::updated(other, &l4, activated));
    }
    sim.faults_off();
    executor::run(&sim, setup, false, MAX_STEPS, &|_| {});
    sim.faults_on();
    // What each buyer's row holds once its License Updated was handled.
    let activation_cards = buyers
        .iter()
        .map(|l| {
            let row = subscribers
                .rows()
                .into_iter()
                .find(|row| row.license_arn == **l);
            (
                (*l).clone(),
                row.and_then(|row| row.rate_card.map(|card| *card)),
            )
        })
        .collect();

    // The concurrent phase, with faults.
    if !options.lost.deprovisioning {
        *lock(&stack.deprovisioned) = Some((l3.clone(), options.deprovisioned_at));
    }
    let imports = Mutex::new(Vec::new());
    let mut tasks = concurrent(
        options,
        (&stack, second_stack),
        &tables,
        (&late, &imports),
        buyers,
        &hours,
        (&outcomes, &reconciler),
    );
    tasks.push(buyer_events.task());
    tasks.push(gatekeeper.task("gatekeeper#1"));
    let queues: Vec<SimQueue> = std::iter::once(&stack)
        .chain(second_stack)
        .flat_map(|s| s.queues().map(SimQueue::clone))
        .collect();
    let release = |task: usize| {
        for queue in &queues {
            queue.release_task(task);
        }
    };
    let mut stats = executor::run(&sim, tasks, true, MAX_STEPS, &release);

    // The next scheduled runs, minutes later, still under faults: records aggregated in
    // the first phase are sent now, while more late usage arrives.
    clock.advance(Duration::from_secs(60 * options.next_runs_after_minutes));
    let later_rows = seller::late_rows(&sim, &options.seller.later, buyers, &hours, 1100);
    let operator = tables.operator_store();
    let mut later: Vec<Task<'_>> = vec![
        seller::later_writer(&stack, &tables, &later_rows),
        discoverer::task(&stack, "discoverer#3", 0),
        aggregator::task(&stack, "aggregator#3"),
        aggregator::task(&stack, "aggregator#4"),
        cleanup::task(&stack, "cleanup#2"),
        operator::replayer(
            &stack,
            &operator,
            &options.operator,
            (hours.oldest, hours.newest),
        ),
    ];
    for (name, count) in [
        ("submitter#3", options.submitter_runs[2]),
        ("submitter#4", options.submitter_runs[3]),
    ] {
        let runs = Runs {
            count,
            wait: 60,
            spacing_secs: 20,
        };
        later.push(submitter::task(&stack, name, runs));
    }
    later.retain(|task| !(direct && raw_usage_stage(&task.name)));
    later.push(outcomes.task());
    later.push(buyer_events.task());
    later.push(gatekeeper.task("gatekeeper#2"));
    let second = executor::run(&sim, later, true, MAX_STEPS, &release);
    stats.steps += second.steps;
    stats.crashed += second.crashed;
    stats.unfinished += second.unfinished;

    // Settling, fault-free: the hours complete, leases lapse, the pipeline runs until
    // every queue is empty, then again past the 24-hour window.
    sim.faults_off();
    let faults_end = clock.now();
    let settle_all = || {
        edge_seller.iter().for_each(EdgeSeller::step);
        reconciler.settle(&stack);
        for stack in std::iter::once(&stack).chain(second_stack) {
            stack.settle();
        }
        gatekeeper.settled();
    };
    settle(&clock, &hours, settle_all);
    edge_seller.iter().for_each(EdgeSeller::read_back);
    outcomes.drain();
    buyer_events.drain();

    let second = second_region.map(|(other, tables, _)| {
        Box::new(World {
            sim: sim.clone(),
            options: options.clone(),
            initial_rows: tables
                .raw_rows()
                .into_iter()
                .filter(|r| !r.sort_key.starts_with("event#"))
                .filter(|r| !r.sort_key.contains("#imp"))
                .map(|r| (r.license_arn, r.sort_key))
                .collect(),
            tables,
            subscribers: subscribers.clone(),
            metering: other.metering.clone(),
            clock: clock.clone(),
            stats: executor::RunStats::default(),
            profiles: MemoryProfileStore::new(),
            registrations: Vec::new(),
            deprovisioned: vec![l3.clone()],
            metrics: other.metrics.clone(),
            faults_end,
            ingested: Vec::new(),
            region: other.region,
            product: other.product,
            second: None,
            imports: Vec::new(),
            queued: other.queued(),
            dead_letters: other.dead_letters(),
            garbage_sent: false,
            outcomes: None,
            buyer_events: None,
            edges: Default::default(),
            reconciliations: Vec::new(),
            activation_cards: Vec::new(),
            amended_card: None,
            gates: Vec::new(),
            discoveries: lock(&other.discoveries).clone(),
        })
    });
    World {
        sim: sim.clone(),
        options: options.clone(),
        tables,
        subscribers,
        metering,
        clock,
        stats,
        initial_rows,
        profiles,
        registrations: lock(&stack.registrations).clone(),
        deprovisioned: vec![l3.clone()],
        metrics: stack.metrics.clone(),
        faults_end,
        ingested: lock(&stack.ingested).clone(),
        region: REGION,
        product: PRODUCT,
        queued: stack.queued(),
        dead_letters: stack.dead_letters(),
        garbage_sent: options.garbage,
        outcomes: Some(outcomes),
        buyer_events: Some(buyer_events),
        edges: edge_seller.map(|e| e.log()).unwrap_or_default(),
        reconciliations: reconciler.runs(),
        activation_cards,
        amended_card: reconciler.amended_card(),
        gates: gatekeeper.answers(),
        discoveries: lock(&stack.discoveries).clone(),
        second,
        imports: imports
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    }
}

/// The first concurrent phase's tasks: every actor at once, under faults.
fn concurrent<'a>(
    options: &'a Options,
    (stack, second_stack): (&'a Stack, Option<&'a Stack>),
    tables: &'a MemoryTables,
    (late, imports): (&'a [Row], &'a Mutex<Vec<crate::world::Import>>),
    [l1, l2, l3]: Buyers<'a>,
    hours: &Hours,
    (outcomes, reconciler): (&'a OutcomeEvents, &'a Reconciler<'a>),
) -> Vec<Task<'a>> {
    let direct = options.settings.direct;
    let mut regional: Vec<Task<'_>> = Vec::new();
    if let Some(other) = second_stack {
        let once = Runs {
            count: 1,
            wait: 60,
            spacing_secs: 0,
        };
        regional.extend([
            discoverer::task(other, "discoverer@2", 0),
            aggregator::task(other, "aggregator@2"),
            cleanup::task(other, "cleanup@2"),
            submitter::task(other, "submitter@2", once),
        ]);
    }
    // The operator's deployments of this product: one or two Regions.
    let deployments: Vec<&Stack> = std::iter::once(stack)
        .chain(second_stack.filter(|other| other.product == PRODUCT))
        .collect();
    // One to three scheduled runs each, the later ones while others still work.
    let runs = |n: usize, wait: usize| Runs {
        count: options.submitter_runs[n],
        wait,
        spacing_secs: 30,
    };
    let revoked = options.revoked.map(|n| [l1, l2][n]);
    vec![
        operator::importer(deployments, &options.operator, hours.newest, imports),
        seller::writer(stack, tables, late),
        seller::service(stack, &options.seller, license(1)),
        discoverer::task(stack, "discoverer#1", 0),
        discoverer::task(stack, "discoverer#2", 40),
        aggregator::task(stack, "aggregator#1"),
        aggregator::task(stack, "aggregator#2"),
        cleanup::task(stack, "cleanup#1"),
        submitter::task(stack, "submitter#1", runs(0, 30)),
        submitter::task(stack, "submitter#2", runs(1, 80)),
        lifecycle::deprovision_cleanup(stack),
        reconciler.task(stack),
    ]
    .into_iter()
    .chain(
        (!options.lost.deprovisioning)
            .then(|| lifecycle::deprovisioned(stack, l3, options.deprovisioned_at)),
    )
    // Buyers registering while usage flows and l3's deprovisioning lands.
    .chain(
        [l1, l2, l3]
            .into_iter()
            .enumerate()
            .map(|(n, license)| register::task(stack, n + 1, license)),
    )
    .chain(regional)
    .chain([outcomes.task()])
    .chain(revoked.map(|license| marketplace::revocation(stack, license)))
    .filter(|task| !(direct && raw_usage_stage(&task.name)))
    .collect()
}

/// Settling: `settle_all` 20 minutes, two hours and 30 minutes on; then through each
/// written hour's last hour in the window and the 1st's 03:00-06:00 (a deferred zero
/// hour goes out only there); then past every window.
fn settle(clock: &ManualClock, hours: &Hours, settle_all: impl Fn()) {
    for advance in [
        chrono::Duration::minutes(20),
        chrono::Duration::hours(2),
        chrono::Duration::minutes(30),
    ] {
        clock.set(clock.now() + advance);
        settle_all();
    }
    let mut edges = vec![at("2026-12-01T03:30:00Z")];
    let mut edge =
        hours.oldest.min(hours.previous).start() + chrono::Duration::minutes(23 * 60 + 30);
    while edge <= hours.current.start() + chrono::Duration::minutes(23 * 60 + 30) {
        edges.push(edge);
        edge += chrono::Duration::hours(1);
    }
    edges.sort();
    for edge in edges {
        if edge > clock.now() {
            clock.set(edge);
            settle_all();
        }
    }
    clock.set(clock.now() + chrono::Duration::hours(26));
    settle_all();
    clock.set(clock.now() + chrono::Duration::minutes(30));
    settle_all();
}

//! What a schedule is, drawn from its seed before anything runs: the deployments and
//! their settings, the seller's usage, what each actor sets out to do (a crash may stop
//! it first), which faults of the scenario's own it stages (a revoked entitlement, a
//! message that is no work message, another writer billing an hour first). A failing
//! seed prints them with its replay line. Drawn first, they are the same for every
//! shrink of a schedule: masking a fault changes what happens, never what the schedule
//! is.
//!
//! Not options: the scheduler's interleaving, the faults at every port call, each
//! actor's waits between steps, and the data of single events (a row's quantity, an
//! event's tag, a stale event time) stay on the random stream as the schedule runs.

use std::fmt;

use awsmp_core::aggregate::ZeroQuantityPolicy;
use awsmp_core::time::{self, Instant, MeteringLockHours, format_instant};
use awsmp_marketplace_sim::IdenticalRetryStatus;

use crate::scenario::MAX_CLOCK_SKEW_MS;
use crate::sim::Sim;

/// The hours a schedule starts in: mid-month, an hour before midnight on the last day
/// of the month (the pending hours become last month's), or the morning of the 1st
/// (last month's hours age out at 06:00 while they are pending).
const STARTING_HOURS: [&str; 3] = [
    "2026-11-30T10:00:00Z",
    "2026-11-30T23:00:00Z",
    "2026-12-01T05:00:00Z",
];

/// Everything a schedule is, drawn from its seed ([`Options::draw`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// When the schedule starts: 20 to 59 minutes into one of [`STARTING_HOURS`].
    pub start: Instant,
    /// The settings sellers deploy, the same in every Region of the schedule.
    pub settings: Settings,
    /// The main stack (the product's first metering Region).
    pub main: Deployment,
    /// A second main stack beside it, one schedule in three.
    pub second: Option<Second>,
    /// The seller's usage.
    pub seller: Seller,
    /// The operator's imports and, later, its replay.
    pub operator: Operator,
    /// Scheduled runs of each of the four submitter invocations (`submitter#1` ..
    /// `submitter#4`): one to three each.
    pub submitter_runs: [usize; 4],
    /// Minutes between the first concurrent phase and the next scheduled runs.
    pub next_runs_after_minutes: u64,
    /// Most records one delivery of a table's stream carries to the outcome-events
    /// function (the mapping's `BatchSize`).
    pub outcome_batch_size: usize,
    /// A message that is no work message sits on the work queue (full stacks only).
    pub garbage: bool,
    /// When the third buyer's license is deprovisioned (its event delivered up to an
    /// hour late, or just now).
    pub deprovisioned_at: Instant,
    /// Marketplace revokes a buyer's entitlement mid-run (one schedule in four): which
    /// buyer, 0 or 1 (of the first two).
    pub revoked: Option<usize>,
    /// Lifecycle events Marketplace lost, for the agreement reconciliation to repair.
    pub lost: LostEvents,
}

/// Lifecycle events Marketplace lost (a rule disabled during a deploy, a message that
/// aged out of the dead-letter queue), and how the Agreement API tells of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LostEvents {
    /// The License Updated of this buyer (0 to 2) never arrives (one schedule in three).
    pub updated: Option<usize>,
    /// The third buyer's License Deprovisioned never arrives (one in three).
    pub deprovisioning: bool,
    /// Until settling, the Agreement API still calls the third buyer's ended agreement
    /// `ACTIVE` (one in two): the reconciliation must not act on the row's newer news.
    pub api_lag: bool,
    /// The Agreement API throttles the rate-card read that follows this buyer's (0 to 2)
    /// License Updated (one in four): the activation stands, the reconciliation reads
    /// the card.
    pub card_throttled: Option<usize>,
}

impl LostEvents {
    /// Whether buyer `n`'s (0 to 2) rate card was kept when its License Updated was
    /// handled, before the pipeline's first run (else the reconciliation keeps it).
    pub fn card_kept_at_activation(&self, n: usize) -> bool {
        self.updated != Some(n) && self.card_throttled != Some(n)
    }
}

/// The settings sellers deploy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// `DEPLOYMENT_MODE=direct-submit` (one schedule in four): the seller writes hourly
    /// totals into the aggregated table; only the submitter runs.
    pub direct: bool,
    /// `METERING_LOCK_HOURS`: one to three.
    pub lock: MeteringLockHours,
    /// `ZERO_QUANTITY_POLICY`, the same for the aggregator and the submitter.
    pub zero_policy: ZeroQuantityPolicy,
    /// A dry run (one schedule in six): whether the buyer's account is on its
    /// allowlist (two in three). `None`: live.
    pub dry_run: Option<bool>,
}

/// One main stack's tables, Marketplace and functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deployment {
    /// Its tables' page size: small pages exercise pagination, large ones keep the
    /// schedule quick.
    pub page_size: usize,
    /// How its Marketplace answers a resend of a billed record with the same quantity
    /// (AWS documents both readings).
    pub identical_retry: IdenticalRetryStatus,
    /// The seed of its Marketplace's record ids.
    pub marketplace_seed: u64,
    /// How far the subscription function's clock is off the simulation's, in ms.
    pub subscription_skew_ms: i64,
    /// How far the deprovision-cleanup function's clock is off, in ms.
    pub deprovision_cleanup_skew_ms: i64,
}

/// The second main stack of a schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Second {
    /// What it is.
    pub kind: SecondKind,
    /// Its tables, Marketplace and functions.
    pub deployment: Deployment,
    /// Rows the seller writes there before the run: one to three.
    pub rows: usize,
}

/// What the second main stack is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecondKind {
    /// The product's second metering Region (its own Marketplace, which deduplicates
    /// per Region; the same subscribers table).
    Region,
    /// Another product's stack in the same Region, over the same events stack, with a
    /// buyer of its own.
    Product,
}

/// The seller's usage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seller {
    /// Rows of the big group (100 to 139: more than one fold).
    pub big_group: usize,
    /// Rows of the first buyer's small group: two to six.
    pub small_group: usize,
    /// Rows of the second buyer, each in a good and in the poison dimension: one to three.
    pub poison_rows: usize,
    /// Rows of the deprovisioned buyer's last two hours, each: one to three.
    pub final_hours_rows: usize,
    /// Rows of the oldest hour still in the window (it closes mid-run): one to three.
    pub closing_hour_rows: usize,
    /// The groups of the rows written while the pipeline runs: two to seven.
    pub late: Vec<LateGroup>,
    /// The groups of the rows written minutes later: one to four.
    pub later: Vec<LateGroup>,
    /// A direct-submit seller's odd items.
    pub odd_items: Option<OddItems>,
    /// Events its service records through the ingestion port: one to four.
    pub events: usize,
    /// Its service tags every event with a `team` (else none).
    pub tagged: bool,
}

/// A group a late row is written into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LateGroup {
    /// The big group (the oldest completed hour).
    Big,
    /// The first buyer's small group.
    Small,
    /// The deprovisioned buyer's open hour.
    Open,
    /// The second buyer's group beside the poison dimension.
    Poisoned,
}

/// A direct-submit seller's odd items (each one time in three).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OddItems {
    /// A record the submitter cannot read (it lacks its hour).
    pub malformed: bool,
    /// A record whose product code is huge, with this quantity (one to five).
    pub huge: Option<i64>,
}

/// The operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Operator {
    /// Lines of each of the two usage files imported: one to four.
    pub import_lines: usize,
    /// The two files' imports.
    pub imports: [ImportPlan; 2],
    /// After the dead-letter alarm, `awsmp dlq redrive` (one in two).
    pub redrive: bool,
    /// The refused dimension is defined in the catalog before the replay (one in two).
    pub defines_poison: bool,
    /// Then something else bills the refused hour first (one in two of those).
    pub rival_bills: bool,
    /// Times the replay runs (its answer may be lost): one or two.
    pub replays: usize,
}

/// Where one usage file is imported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImportPlan {
    /// The deployment of this product it goes into (0: the main stack).
    pub target: usize,
    /// The operator first names both Regions (one in three, when there are two) and
    /// is refused.
    pub names_both: bool,
}

/// The groups late rows are written into, in the order they are drawn from.
const LATE_GROUPS: [LateGroup; 4] = [
    LateGroup::Big,
    LateGroup::Small,
    LateGroup::Open,
    LateGroup::Poisoned,
];

/// One of `items`, each as likely.
fn pick<T: Copy, const N: usize>(sim: &Sim, items: [T; N]) -> T {
    items[sim.below(N)]
}

/// A function's clock skew: up to [`MAX_CLOCK_SKEW_MS`] either way.
pub fn skew_ms(sim: &Sim) -> i64 {
    let spread = 2 * MAX_CLOCK_SKEW_MS as usize + 1;
    sim.below(spread) as i64 - MAX_CLOCK_SKEW_MS
}

fn below_i64(sim: &Sim, n: usize) -> i64 {
    i64::try_from(sim.below(n)).unwrap_or(0)
}

impl Deployment {
    fn draw(sim: &Sim) -> Self {
        Deployment {
            page_size: pick(sim, [2, 10, 100]),
            identical_retry: pick(
                sim,
                [
                    IdenticalRetryStatus::DuplicateRecord,
                    IdenticalRetryStatus::Success,
                ],
            ),
            marketplace_seed: sim.below(usize::MAX) as u64,
            subscription_skew_ms: skew_ms(sim),
            deprovision_cleanup_skew_ms: skew_ms(sim),
        }
    }
}

impl Options {
    /// The options of the schedule `sim` runs, drawn from its random stream first.
    pub fn draw(sim: &Sim) -> Self {
        let base = time::parse_usage_timestamp(pick(sim, STARTING_HOURS)).unwrap_or_default();
        let start = base + chrono::Duration::seconds(1200 + below_i64(sim, 2400));
        let direct = sim.below(4) == 0;
        let settings = Settings {
            direct,
            lock: MeteringLockHours::new(1 + below_i64(sim, 3))
                .unwrap_or(MeteringLockHours::DEFAULT),
            zero_policy: pick(
                sim,
                [
                    ZeroQuantityPolicy::Defer,
                    ZeroQuantityPolicy::Submit,
                    ZeroQuantityPolicy::Skip,
                ],
            ),
            dry_run: (sim.below(6) == 0).then(|| sim.below(3) != 0),
        };
        let main = Deployment::draw(sim);
        let second = (sim.below(3) == 0).then(|| Second {
            kind: pick(sim, [SecondKind::Region, SecondKind::Product]),
            deployment: Deployment::draw(sim),
            rows: 1 + sim.below(3),
        });
        // Late rows go into any of the groups; the later ones not beside the poison.
        let late_group = |groups: usize| LATE_GROUPS[sim.below(groups)];
        let seller = Seller {
            big_group: 100 + sim.below(40),
            small_group: 2 + sim.below(5),
            poison_rows: 1 + sim.below(3),
            final_hours_rows: 1 + sim.below(3),
            closing_hour_rows: 1 + sim.below(3),
            late: (0..2 + sim.below(6)).map(|_| late_group(4)).collect(),
            later: (0..1 + sim.below(4)).map(|_| late_group(3)).collect(),
            odd_items: direct.then(|| OddItems {
                malformed: sim.below(3) == 0,
                huge: (sim.below(3) == 0).then(|| 1 + below_i64(sim, 5)),
            }),
            events: 1 + sim.below(4),
            tagged: sim.below(2) == 0,
        };
        // The deployments of this product the operator may import into.
        let deployments = 1 + usize::from(second.is_some_and(|s| s.kind == SecondKind::Region));
        let import_lines = 1 + sim.below(4);
        let import = || ImportPlan {
            target: sim.below(deployments),
            names_both: deployments > 1 && sim.below(3) == 0,
        };
        let imports = [import(), import()];
        let redrive = sim.below(2) == 0;
        let defines_poison = sim.below(2) == 0;
        let operator = Operator {
            import_lines,
            imports,
            redrive,
            defines_poison,
            rival_bills: defines_poison && sim.below(2) == 0,
            replays: 1 + sim.below(2),
        };
        Options {
            start,
            settings,
            main,
            second,
            seller,
            operator,
            submitter_runs: [(); 4].map(|()| 1 + sim.below(3)),
            next_runs_after_minutes: 6 + sim.below(15) as u64,
            outcome_batch_size: pick(sim, [1, 3, 10, 100]),
            garbage: !direct && sim.below(4) == 0,
            deprovisioned_at: start - chrono::Duration::minutes(below_i64(sim, 60))
                + chrono::Duration::minutes(below_i64(sim, 10)),
            revoked: (sim.below(4) == 0).then(|| sim.below(2)),
            lost: LostEvents {
                updated: (sim.below(3) == 0).then(|| sim.below(3)),
                deprovisioning: sim.below(3) == 0,
                api_lag: sim.below(2) == 0,
                card_throttled: (sim.below(4) == 0).then(|| sim.below(3)),
            },
        }
    }
}

impl fmt::Display for Deployment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "pages of {}, an identical retry answered {:?}, Marketplace seed {}, clocks off \
             {} ms (subscription) and {} ms (deprovision-cleanup)",
            self.page_size,
            self.identical_retry,
            self.marketplace_seed,
            self.subscription_skew_ms,
            self.deprovision_cleanup_skew_ms
        )
    }
}

impl fmt::Display for Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.settings;
        let mode = match s.dry_run {
            None => "live",
            Some(true) => "dry run, the buyer on the allowlist",
            Some(false) => "dry run, the buyer not on the allowlist",
        };
        writeln!(
            f,
            "options: starts {}; {} stack, lock {} h, zero policy {:?}, {mode}",
            format_instant(self.start),
            if s.direct { "direct-submit" } else { "full" },
            s.lock.hours(),
            s.zero_policy,
        )?;
        writeln!(f, "  main stack: {}", self.main)?;
        if let Some(second) = &self.second {
            writeln!(
                f,
                "  second stack ({:?}): {}; {} rows",
                second.kind, second.deployment, second.rows
            )?;
        }
        let u = &self.seller;
        writeln!(
            f,
            "  seller: rows {} (big group), {} (small), {} (poison), {} (final hours), {} \
             (closing hour); late {:?}; later {:?}; odd items {:?}; {} events{}",
            u.big_group,
            u.small_group,
            u.poison_rows,
            u.final_hours_rows,
            u.closing_hour_rows,
            u.late,
            u.later,
            u.odd_items,
            u.events,
            if u.tagged { ", tagged" } else { "" }
        )?;
        let o = &self.operator;
        writeln!(
            f,
            "  operator: imports of {} lines {:?}; redrive {}, defines the poison dimension \
             {}, another writer bills first {}, replays {}",
            o.import_lines, o.imports, o.redrive, o.defines_poison, o.rival_bills, o.replays
        )?;
        write!(
            f,
            "  submitter runs {:?}, next runs after {} min, outcome batches of {}, garbage \
             message {}, deprovisioned at {}, revoked buyer {:?}; lost: License Updated of \
             buyer {:?}, the deprovisioning {}, the Agreement API lags {}; the card read \
             after License Updated throttled for buyer {:?}",
            self.submitter_runs,
            self.next_runs_after_minutes,
            self.outcome_batch_size,
            self.garbage,
            format_instant(self.deprovisioned_at),
            self.revoked.map(|n| n + 1),
            self.lost.updated.map(|n| n + 1),
            self.lost.deprovisioning,
            self.lost.api_lag,
            self.lost.card_throttled.map(|n| n + 1)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_replay_from_the_seed_and_keep_their_ranges() {
        for seed in 0..300 {
            let options = Options::draw(&Sim::new(seed, Vec::new(), None));
            assert_eq!(options, Options::draw(&Sim::new(seed, Vec::new(), None)));
            let minutes = (options.start.timestamp() % 3600) / 60;
            assert!((20..60).contains(&minutes), "{options}");
            assert!((100..140).contains(&options.seller.big_group));
            assert!((2..8).contains(&options.seller.late.len()));
            assert!(
                options
                    .seller
                    .later
                    .iter()
                    .all(|g| *g != LateGroup::Poisoned)
            );
            assert_eq!(options.seller.odd_items.is_some(), options.settings.direct);
            assert!(!(options.garbage && options.settings.direct));
            assert!(options.operator.defines_poison || !options.operator.rival_bills);
            if options.second.is_none_or(|s| s.kind == SecondKind::Product) {
                assert!(
                    options
                        .operator
                        .imports
                        .iter()
                        .all(|i| i.target == 0 && !i.names_both)
                );
            }
        }
    }
}

//! awsmp-dst: a deterministic simulation of the whole metering pipeline. The real use
//! cases (discover, aggregate, cleanup, submit, the subscription, deprovision-cleanup
//! and register handlers) run concurrently over the in-memory ports under a seeded scheduler that
//! interleaves them at every port call, with a simulated clock and injected faults
//! (crashes between port calls, writes whose response is lost, duplicate and late
//! redeliveries, stale invocation times, stalled calls past a Lambda timeout,
//! throttling, conflicts, unprocessed records,
//! a disabled Region for a while, poison records, lifecycle events racing usage).
//!
//! A schedule's [`options`] are drawn from its seed first; [`scenario`] sets the
//! [`actors`] going on each [`stack`], phase by phase; after each schedule every
//! invariant in [`check`] runs over the [`world`] it left; a failing seed is shrunk to
//! the fewest faults that still fail and printed with its options and the command that
//! replays it. [`ceiling`] drains a backlog at the quota on the submitter's schedule
//! instead.

pub mod actors;
pub mod agreements;
pub mod ceiling;
pub mod check;
pub mod cli;
pub mod executor;
pub mod marketplace;
pub mod options;
pub mod ports;
pub mod queue;
pub mod scenario;
pub mod sim;
pub mod stack;
pub mod world;

use options::Options;
use sim::{Injected, Sim};

/// What one schedule did.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The seed.
    pub seed: u64,
    /// What the schedule was (drawn from the seed; the same for every mask).
    pub options: Options,
    /// Faults injected.
    pub faults: Vec<Injected>,
    /// Invariant violations (empty: it held).
    pub violations: Vec<String>,
    /// Tasks still live at the step limit.
    pub unfinished: usize,
}

/// Runs the schedule of `seed`, with the decision points in `masked` never faulting.
pub fn run_schedule(seed: u64, masked: &[u64]) -> Outcome {
    // Jitter and claim ids come from the seed too: the schedule replays exactly.
    awsmp_core::pipeline::retry::seed_randomness(Some(seed.rotate_left(17)));
    let sim = Sim::new(seed, masked.to_vec(), None);
    let options = Options::draw(&sim);
    let world = scenario::run(sim, &options);
    let mut violations = check::check(&world);
    // Last: the corrections move the clock past the month's end to its invoice.
    let corrections = actors::corrections::run(&world);
    violations.extend(check::corrections::check(&world, &corrections));
    if world.stats.unfinished > 0 {
        violations.push(format!(
            "{} tasks still running at the step limit (livelock?)",
            world.stats.unfinished
        ));
    }
    Outcome {
        seed,
        options,
        faults: world.sim.injected(),
        violations,
        unfinished: world.stats.unfinished,
    }
}

/// Most schedules one shrink may run.
pub const SHRINK_TRIALS: usize = 400;

/// Shrinks a failing schedule: turns its faults off one at a time, keeping each off
/// when the schedule still fails (each removal changes what follows, so the list is
/// re-read after every kept removal). Returns the mask and the last failing outcome.
pub fn shrink(failing: &Outcome) -> (Vec<u64>, Outcome) {
    let mut masked: Vec<u64> = Vec::new();
    let mut needed: Vec<u64> = Vec::new();
    let mut best = failing.clone();
    for _ in 0..SHRINK_TRIALS {
        let Some(point) = best
            .faults
            .iter()
            .map(|f| f.point)
            .find(|p| !masked.contains(p) && !needed.contains(p))
        else {
            break;
        };
        let mut trial = masked.clone();
        trial.push(point);
        let outcome = run_schedule(failing.seed, &trial);
        if outcome.violations.is_empty() {
            needed.push(point);
        } else {
            masked = trial;
            best = outcome;
        }
    }
    (masked, best)
}

/// The seed of schedule number `n` of an exploration starting at `base`.
pub fn seed_of(base: u64, n: u64) -> u64 {
    base.wrapping_add(n.wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

//! The command line: explore schedules under a time budget, or replay one seed (with
//! the mask a shrink printed), and say the result in one line; a failing schedule is
//! printed with its violations, its options and the command that replays it.

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use clap::Parser;

use crate::{Outcome, run_schedule, seed_of, shrink};

/// Deterministic simulation of the metering pipeline under concurrent faults.
#[derive(Debug, Parser)]
#[command(name = "awsmp-dst")]
struct Args {
    /// Schedules to run (stops early at the time budget; fewer than `--min` fails).
    #[arg(long, default_value_t = 10_000)]
    schedules: u64,
    /// Fewest schedules that must run inside the budget.
    #[arg(long, default_value_t = 0)]
    min: u64,
    /// Seed of the exploration (each schedule's seed derives from it).
    #[arg(long, default_value_t = 1)]
    base: u64,
    /// Stop starting schedules after this many seconds.
    #[arg(long, default_value_t = 600)]
    budget_secs: u64,
    /// Threads running schedules side by side (each schedule is single-threaded).
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Replay this schedule seed only.
    #[arg(long)]
    replay: Option<u64>,
    /// With `--replay`: fault decision points to turn off (as a shrink prints them).
    #[arg(long, value_delimiter = ',')]
    mask: Vec<u64>,
    /// Run every schedule, failing or not, and list each kind of violation found with
    /// how many schedules had it and the first seed that did (no shrinking).
    #[arg(long)]
    survey: bool,
}

/// Runs the command line; exit code 1 on a violation or too few schedules.
pub fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(seed) = args.replay {
        let outcome = run_schedule(seed, &args.mask);
        print_faults(&outcome);
        return report_failure(&outcome, &args.mask, false);
    }
    let started = Instant::now();
    let budget = Duration::from_secs(args.budget_secs);
    if args.survey {
        return survey(args.base, args.schedules, budget);
    }
    let explored = explore(args.base, args.schedules, budget, args.threads.max(1));
    if let Some(outcome) = explored.failing {
        println!(
            "simulation: {} schedules, {} faults injected, 1 violations",
            explored.schedules, explored.faults
        );
        println!("shrinking seed {} ...", outcome.seed);
        let (mask, shrunk) = shrink(&outcome);
        print_faults(&shrunk);
        return report_failure(&shrunk, &mask, true);
    }
    println!(
        "simulation: {} schedules, {} faults injected, 0 violations ({:.1} s, {} threads)",
        explored.schedules,
        explored.faults,
        started.elapsed().as_secs_f64(),
        args.threads.max(1)
    );
    if explored.schedules < args.min {
        println!(
            "simulation: only {} of the required {} schedules fit the {} s budget",
            explored.schedules, args.min, args.budget_secs
        );
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

/// Schedules run, faults injected, and the first failing schedule (number, outcome).
type Tally = (u64, usize, Option<(u64, Outcome)>);

/// What an exploration did.
struct Explored {
    schedules: u64,
    faults: usize,
    /// The first failing schedule (lowest schedule number among those run).
    failing: Option<Outcome>,
}

/// Runs schedules `0..count` of `base` on `threads` threads until one fails or the
/// budget is spent. Each schedule is deterministic in its seed, whatever thread runs it.
fn explore(base: u64, count: u64, budget: Duration, threads: usize) -> Explored {
    let started = Instant::now();
    let next = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let results: Mutex<Tally> = Mutex::new((0, 0, None));
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                loop {
                    if stop.load(Ordering::Relaxed) || started.elapsed() >= budget {
                        break;
                    }
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    if n >= count {
                        break;
                    }
                    let outcome = run_schedule(seed_of(base, n), &[]);
                    let mut results = results.lock().unwrap_or_else(PoisonError::into_inner);
                    results.0 += 1;
                    results.1 += outcome.faults.len();
                    if !outcome.violations.is_empty() {
                        stop.store(true, Ordering::Relaxed);
                        if results.2.as_ref().is_none_or(|(m, _)| n < *m) {
                            results.2 = Some((n, outcome));
                        }
                    }
                }
            });
        }
    });
    let (schedules, faults, failing) = results.into_inner().unwrap_or_else(PoisonError::into_inner);
    Explored {
        schedules,
        faults,
        failing: failing.map(|(_, o)| o),
    }
}

fn print_faults(outcome: &Outcome) {
    println!("faults in this schedule ({}):", outcome.faults.len());
    for fault in &outcome.faults {
        println!("  #{} {:?} at {}", fault.point, fault.kind, fault.place);
    }
}

fn report_failure(outcome: &Outcome, mask: &[u64], shrunk: bool) -> ExitCode {
    if outcome.violations.is_empty() {
        println!("seed {}: 0 violations", outcome.seed);
        return ExitCode::SUCCESS;
    }
    const SHOWN: usize = 8;
    for violation in outcome.violations.iter().take(SHOWN) {
        println!("VIOLATION: {violation}");
    }
    if outcome.violations.len() > SHOWN {
        println!("... and {} more", outcome.violations.len() - SHOWN);
    }
    println!("{}", outcome.options);
    let mask: Vec<String> = mask.iter().map(u64::to_string).collect();
    let mask = if mask.is_empty() {
        String::new()
    } else {
        format!(" --mask {}", mask.join(","))
    };
    println!(
        "{}replay: cargo run -p awsmp-dst -- --replay {}{mask}",
        if shrunk {
            "shortest failing schedule found; "
        } else {
            ""
        },
        outcome.seed
    );
    ExitCode::FAILURE
}

/// Runs schedules `0..count` of `base` (one thread, until the budget is spent) and
/// prints each kind of violation (its text with keys and numbers blanked) with the
/// number of schedules that had it and the first seed that did.
fn survey(base: u64, count: u64, budget: Duration) -> ExitCode {
    let started = Instant::now();
    // Kind -> (schedules that had it, first schedule number, its seed).
    let mut kinds: std::collections::BTreeMap<String, (u64, u64, u64)> = Default::default();
    let mut ran = 0;
    for n in 0..count {
        if started.elapsed() >= budget {
            break;
        }
        let outcome = run_schedule(seed_of(base, n), &[]);
        ran += 1;
        let mut seen = std::collections::BTreeSet::new();
        for violation in &outcome.violations {
            seen.insert(kind_of(violation));
        }
        for kind in seen {
            let entry = kinds.entry(kind).or_insert((0, n, outcome.seed));
            entry.0 += 1;
        }
    }
    println!(
        "survey: {ran} schedules, {} kinds of violation",
        kinds.len()
    );
    for (kind, (schedules, first, seed)) in &kinds {
        println!("  {schedules:>6} schedules, first #{first} (seed {seed}): {kind}");
    }
    if kinds.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// A violation's text with what differs between schedules blanked: digits, and the
/// license and group keys at its start.
fn kind_of(violation: &str) -> String {
    let text: String = violation
        .chars()
        .map(|c| if c.is_ascii_digit() { '#' } else { c })
        .collect();
    match text.split_once(": ") {
        Some((head, rest)) => {
            let head = head.split_whitespace().next().unwrap_or(head);
            format!("{head} …: {rest}")
        }
        None => text,
    }
}

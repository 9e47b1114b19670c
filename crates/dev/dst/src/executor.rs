//! A seeded single-threaded executor: every step it picks one live task at random and
//! polls it once, so tasks interleave at every yield point (each port call yields), and
//! a task may be dropped between two port calls (a Lambda that dies mid-run).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use crate::sim::{FaultKind, Sim};

/// A task: a name (for the fault log) and its future.
pub struct Task<'a> {
    /// Name, e.g. `submitter#2`.
    pub name: String,
    /// What it runs.
    pub future: Pin<Box<dyn Future<Output = ()> + 'a>>,
}

impl<'a> Task<'a> {
    /// A task running `future`.
    pub fn new(name: impl Into<String>, future: impl Future<Output = ()> + 'a) -> Self {
        Task {
            name: name.into(),
            future: Box::pin(future),
        }
    }
}

/// How a run of the executor ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RunStats {
    /// Polls made.
    pub steps: u64,
    /// Tasks dropped by an injected crash or killed at their Lambda timeout.
    pub crashed: usize,
    /// Tasks still live when the step limit came (a livelock guard, reported).
    pub unfinished: usize,
}

/// Runs `tasks` to completion (or `max_steps`), interleaved by `sim`'s random stream.
/// `crashes` allows injected crashes; `on_crash(task)` is told of each (so the queue
/// can make that task's in-flight messages visible again, as SQS does).
pub fn run(
    sim: &Sim,
    mut tasks: Vec<Task<'_>>,
    crashes: bool,
    max_steps: u64,
    on_crash: &dyn Fn(usize),
) -> RunStats {
    let mut stats = RunStats::default();
    let mut context = Context::from_waker(Waker::noop());
    let mut live: Vec<usize> = (0..tasks.len()).collect();
    while !live.is_empty() && stats.steps < max_steps {
        let slot = sim.below(live.len());
        let id = live[slot];
        let Some(task) = tasks.get_mut(id) else {
            live.swap_remove(slot);
            continue;
        };
        // A task that has started may die before its next port call; one whose Lambda
        // timeout passed while it was stalled is dead already.
        sim.set_current(id);
        if sim.take_killed(id)
            || (crashes && stats.steps > 0 && sim.fault(FaultKind::Crash, &task.name))
        {
            live.swap_remove(slot);
            stats.crashed += 1;
            on_crash(id);
            continue;
        }
        sim.set_current(id);
        stats.steps += 1;
        if let Poll::Ready(()) = task.future.as_mut().poll(&mut context) {
            live.swap_remove(slot);
        }
    }
    stats.unfinished = live.len();
    stats
}

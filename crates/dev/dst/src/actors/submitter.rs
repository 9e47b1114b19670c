//! The submitter: scheduled invocations, each under the Lambda timeout the template
//! gives it, that claim the sendable records and send them to Marketplace; a later run
//! may start while an earlier one still works, with a stale event time (a retried
//! schedule).

use awsmp_core::pipeline::budget::Budget;
use awsmp_core::ports::Clock;
use awsmp_core::submit::{SubmitPorts, SubmitSettings, schedule, submit};
use awsmp_core::time::Instant;
use std::sync::Arc;
use std::time::Duration;

use crate::executor::Task;
use crate::scenario::RETENTION;
use crate::sim::yield_now;
use crate::stack::Stack;

impl Stack {
    fn submit_settings(&self) -> SubmitSettings {
        SubmitSettings {
            retention: RETENTION,
            ..SubmitSettings::new(
                self.product,
                self.metering_mode.clone(),
                self.zero_policy,
                self.mode(),
            )
        }
    }

    /// One submitter invocation under the Lambda timeout the template gives it (the
    /// deadline is wall-clock, whatever the event time says).
    pub async fn submit_once(&self, name: &str) {
        self.submit_at(self.invocation_time(name)).await;
    }

    /// A submitter invocation whose scheduled event says `now`.
    pub async fn submit_at(&self, now: Instant) {
        let ports = SubmitPorts {
            aggregated: self.aggregated.clone(),
            subscribers: self.subscribers.clone(),
            metering: self.metering.clone(),
            metrics: Arc::new(self.metrics.clone()),
            clock: self.lambda_clock(),
        };
        // The handler's budget: the template's timeout, stopping before the next tick.
        let started = self.clock.now();
        let deadline = started + chrono::Duration::seconds(schedule::TIMEOUT_SECONDS);
        self.sim.set_deadline(deadline);
        let budget = schedule::run_budget(
            now,
            started,
            Budget::before(
                deadline,
                chrono::Duration::seconds(schedule::DEADLINE_MARGIN_SECONDS),
            ),
        );
        let _ = submit(now, &self.submit_settings(), &ports, budget).await;
        self.sim.clear_deadline();
    }
}

/// How one submitter task's scheduled runs are spaced.
#[derive(Debug, Clone, Copy)]
pub struct Runs {
    /// Scheduled runs.
    pub count: usize,
    /// Most scheduler steps before each run.
    pub wait: usize,
    /// Seconds the clock moves on before run `n`, times `n`.
    pub spacing_secs: u64,
}

/// The invocations `name`: `runs.count` scheduled runs, the later ones while others
/// still work.
pub fn task<'a>(stack: &'a Stack, name: &'static str, runs: Runs) -> Task<'a> {
    Task::new(name, async move {
        for run in 0..runs.count {
            for _ in 0..stack.sim.below(runs.wait) {
                yield_now().await;
            }
            stack
                .clock
                .advance(Duration::from_secs(runs.spacing_secs * run as u64));
            stack.submit_once(name).await;
        }
    })
}

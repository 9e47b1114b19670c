//! The discoverer: a scheduled invocation that finds the completed hours' pending rows
//! and sends their groups to the work queue (a deprovisioned license's final hours to
//! the flush queue), and ages out what the window left behind.

use std::sync::Arc;

use awsmp_core::discover::{DiscoverPorts, DiscoverSettings, discover};
use awsmp_core::pipeline::budget::Budget;
use awsmp_core::time::Instant;

use crate::executor::Task;
use crate::scenario::{PROFILE_RETENTION_DAYS, RETENTION};
use crate::sim::yield_now;
use crate::stack::Stack;

impl Stack {
    fn discover_settings(&self) -> DiscoverSettings {
        DiscoverSettings {
            retention: RETENTION,
            profile_retention: Some(chrono::Duration::days(PROFILE_RETENTION_DAYS)),
            ..DiscoverSettings::new(self.product, self.lock)
        }
    }

    /// A scheduled invocation, its event time now or (a retried schedule) stale.
    pub async fn discover_once(&self, name: &str) {
        self.discover_at(self.invocation_time(name)).await;
    }

    /// A discoverer invocation whose scheduled event says `now`.
    pub async fn discover_at(&self, now: Instant) {
        let ports = DiscoverPorts {
            usage: self.usage.clone(),
            subscribers: self.subscribers.clone(),
            work_queue: Arc::new(self.work.clone()),
            deprovision_queue: Arc::new(self.deprovision.clone()),
            profiles: Some(Arc::new(self.profiles.clone())),
            metrics: Arc::new(self.metrics.clone()),
            clock: self.lambda_clock(),
        };
        if let Ok(report) =
            discover(now, &self.discover_settings(), &ports, Budget::UNLIMITED).await
        {
            crate::stack::lock(&self.discoveries).push(report);
        }
    }
}

/// The invocation `name`, after up to `wait` of the scheduler's steps (none: at once).
pub fn task<'a>(stack: &'a Stack, name: &'static str, wait: usize) -> Task<'a> {
    Task::new(name, async move {
        if wait > 0 {
            for _ in 0..stack.sim.below(wait) {
                yield_now().await;
            }
        }
        stack.discover_once(name).await;
    })
}

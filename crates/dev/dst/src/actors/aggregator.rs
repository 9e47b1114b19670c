//! The aggregator: an SQS consumer that takes a batch from the flush queue, else from
//! the work queue, and folds each group's rows into its record through the Lambda's
//! handler, under its timeout; SQS then deletes what it did not report failed.

use std::sync::Arc;

use awsmp_core::aggregate::run::{AggregatePorts, AggregateSettings};

use crate::executor::Task;
use crate::scenario::RETENTION;
use crate::sim::yield_now;
use crate::stack::{Stack, settle_batch};

/// The aggregator's Lambda timeout.
const TIMEOUT_SECONDS: i64 = 120;

/// Receives in a row a consumer finds every queue empty before it stops.
const IDLE_RECEIVES: usize = 6;

impl Stack {
    fn aggregate_settings(&self) -> AggregateSettings {
        AggregateSettings {
            product_code: self.product.to_string(),
            lock: self.lock,
            zero_policy: self.zero_policy,
            retention: RETENTION,
        }
    }

    /// One aggregator invocation: a batch from the flush queue, else from the work
    /// queue, through the Lambda's handler under its timeout; `false` when none was
    /// visible.
    pub async fn aggregate_one(&self) -> bool {
        let mut queue = &self.deprovision;
        let mut batch = queue.receive_batch().await;
        if batch.is_empty() {
            queue = &self.work;
            batch = queue.receive_batch().await;
        }
        if batch.is_empty() {
            return false;
        }
        let state = awsmp_aggregator::State {
            settings: Arc::new(self.aggregate_settings()),
            ports: AggregatePorts {
                usage: self.usage.clone(),
                aggregated: self.aggregated.clone(),
                cleanup_queue: Arc::new(self.cleanup_queue.clone()),
                clock: self.lambda_clock(),
            },
        };
        let event = self.invocation(&batch, queue, TIMEOUT_SECONDS);
        let answer = awsmp_aggregator::handler(&state, event).await;
        settle_batch(queue, &batch, answer);
        true
    }
}

/// A consumer running `one` invocation after another until it finds its queues empty
/// [`IDLE_RECEIVES`] times in a row (the cleanup function's consumer too).
pub async fn until_idle<F, Fut>(one: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let mut idle = 0;
    while idle < IDLE_RECEIVES {
        if one().await {
            idle = 0;
        } else {
            idle += 1;
            yield_now().await;
        }
    }
}

/// The consumer `name`.
pub fn task<'a>(stack: &'a Stack, name: &'static str) -> Task<'a> {
    Task::new(name, until_idle(move || stack.aggregate_one()))
}

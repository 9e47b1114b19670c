//! The cleanup function: an SQS consumer of the cleanup queue that writes the rows the
//! aggregator could not count (rejected, late) their terminal status.

use std::sync::Arc;

use awsmp_core::cleanup::CleanupPorts;

use crate::actors::aggregator::until_idle;
use crate::executor::Task;
use crate::scenario::RETENTION;
use crate::stack::{Stack, settle_batch};

/// The cleanup function's Lambda timeout.
const TIMEOUT_SECONDS: i64 = 60;

impl Stack {
    /// One cleanup invocation over a batch of the cleanup queue; `false` when none was
    /// visible.
    pub async fn cleanup_one(&self) -> bool {
        let batch = self.cleanup_queue.receive_batch().await;
        if batch.is_empty() {
            return false;
        }
        let state = awsmp_cleanup::State {
            retention: RETENTION,
            ports: CleanupPorts {
                usage: self.usage.clone(),
                metrics: Arc::new(self.metrics.clone()),
                clock: self.lambda_clock(),
            },
        };
        let event = self.invocation(&batch, &self.cleanup_queue, TIMEOUT_SECONDS);
        let answer = awsmp_cleanup::handler(&state, event).await;
        settle_batch(&self.cleanup_queue, &batch, answer);
        true
    }
}

/// The consumer `name`.
pub fn task<'a>(stack: &'a Stack, name: &'static str) -> Task<'a> {
    Task::new(name, until_idle(move || stack.cleanup_one()))
}

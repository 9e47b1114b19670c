//! An SQS queue as the pipeline sees it: at-least-once delivery in batches of up to ten
//! messages, every message of a batch invisible while the consumer holds the batch and
//! visible again only when its visibility timeout runs out after the consumer reported
//! it failed or died; duplicate deliveries while the first still runs; sends whose
//! response is lost after the messages were enqueued; and a redrive policy: a message
//! received `maxReceiveCount` times without being deleted goes to the dead-letter queue
//! at its next receive, where it stays until the operator redrives it.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use awsmp_core::memory::ManualClock;
use awsmp_core::ports::{Clock, PortError, SendReport, WorkMessage, WorkQueue};
use awsmp_core::time::Instant;

use crate::sim::{FaultKind, Sim, yield_now};

/// A queue's settings, as the template gives them.
#[derive(Debug, Clone, Copy)]
pub struct QueueSettings {
    /// `VisibilityTimeout`.
    pub visibility: Duration,
    /// The redrive policy's `maxReceiveCount`.
    pub max_receives: u32,
}

/// A message waiting in the queue.
#[derive(Debug, Clone)]
struct Waiting {
    /// The body, as the SQS adapter writes a work message (or anything else someone sent).
    body: String,
    /// Receives so far (`ApproximateReceiveCount`).
    receives: u32,
    /// Invisible until then (a failed or abandoned receive's visibility timeout).
    visible_at: Option<Instant>,
}

#[derive(Debug, Default)]
struct State {
    waiting: Vec<Waiting>,
    /// (delivery id, owner task, message).
    in_flight: Vec<(u64, usize, Waiting)>,
    /// The dead-letter queue's bodies.
    dead: Vec<String>,
    next_delivery: u64,
    sent: usize,
}

/// One simulated queue (cheap to clone).
#[derive(Debug, Clone)]
pub struct SimQueue {
    name: &'static str,
    sim: Sim,
    clock: ManualClock,
    settings: QueueSettings,
    state: Arc<Mutex<State>>,
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Most messages one receive (one Lambda batch) carries: the template's `BatchSize`.
pub const BATCH_SIZE: usize = 10;

impl SimQueue {
    /// An empty queue with `settings`, on `clock`.
    pub fn new(name: &'static str, sim: Sim, clock: ManualClock, settings: QueueSettings) -> Self {
        SimQueue {
            name,
            sim,
            clock,
            settings,
            state: Arc::default(),
        }
    }

    /// Receives up to [`BATCH_SIZE`] visible messages for the current task (the batch an
    /// event source mapping hands one invocation). A message already received
    /// `maxReceiveCount` times goes to the dead-letter queue instead. With an injected
    /// duplicate delivery a message stays visible too, so another consumer may get it
    /// while this one still runs.
    pub async fn receive_batch(&self) -> Vec<(u64, String)> {
        yield_now().await;
        let owner = self.sim.current();
        let now = self.clock.now();
        let size = 1 + self.sim.below(BATCH_SIZE);
        let mut batch = Vec::new();
        let mut state = lock(&self.state);
        let mut i = 0;
        while i < state.waiting.len() && batch.len() < size {
            if state.waiting[i].visible_at.is_some_and(|at| at > now) {
                i += 1;
                continue;
            }
            let mut waiting = state.waiting.remove(i);
            if waiting.receives >= self.settings.max_receives {
                state.dead.push(waiting.body);
                continue;
            }
            waiting.receives += 1;
            if self.sim.fault(FaultKind::DuplicateDelivery, self.name) {
                state.waiting.push(Waiting {
                    visible_at: None,
                    ..waiting.clone()
                });
            }
            state.next_delivery += 1;
            let id = state.next_delivery;
            batch.push((id, waiting.body.clone()));
            state.in_flight.push((id, owner, waiting));
        }
        batch
    }

    /// Deletes a handled delivery.
    pub fn ack(&self, delivery: u64) {
        lock(&self.state)
            .in_flight
            .retain(|(id, _, _)| *id != delivery);
    }

    /// A failed delivery (reported in `batchItemFailures`) becomes visible again when
    /// its visibility timeout runs out.
    pub fn nack(&self, delivery: u64) {
        let visible_at = self.visible_again();
        let mut state = lock(&self.state);
        if let Some(pos) = state
            .in_flight
            .iter()
            .position(|(id, _, _)| *id == delivery)
        {
            let (_, _, mut waiting) = state.in_flight.remove(pos);
            waiting.visible_at = Some(visible_at);
            state.waiting.push(waiting);
        }
    }

    fn visible_again(&self) -> Instant {
        self.clock.now() + chrono::Duration::from_std(self.settings.visibility).unwrap_or_default()
    }

    /// Everything `task` held becomes visible again when its visibility timeout runs
    /// out (the invocation died mid-batch).
    pub fn release_task(&self, task: usize) {
        let visible_at = self.visible_again();
        let mut state = lock(&self.state);
        let (theirs, others): (Vec<_>, Vec<_>) = std::mem::take(&mut state.in_flight)
            .into_iter()
            .partition(|(_, owner, _)| *owner == task);
        state.in_flight = others;
        for (_, _, mut waiting) in theirs {
            waiting.visible_at = Some(visible_at);
            state.waiting.push(waiting);
        }
    }

    /// Messages a receive could get now.
    pub fn visible(&self) -> usize {
        let now = self.clock.now();
        lock(&self.state)
            .waiting
            .iter()
            .filter(|w| w.visible_at.is_none_or(|at| at <= now))
            .count()
    }

    /// The bodies in the dead-letter queue.
    pub fn dead_letters(&self) -> Vec<String> {
        lock(&self.state).dead.clone()
    }

    /// The bodies still in the queue (waiting or held by a consumer).
    pub fn bodies(&self) -> Vec<String> {
        let state = lock(&self.state);
        state
            .waiting
            .iter()
            .map(|w| w.body.clone())
            .chain(state.in_flight.iter().map(|(_, _, w)| w.body.clone()))
            .collect()
    }

    /// A message that is not a work message (sent by hand, or by another version).
    pub fn send_garbage(&self, body: &str) {
        lock(&self.state).waiting.push(Waiting {
            body: body.to_string(),
            receives: 0,
            visible_at: None,
        });
    }

    /// The operator's `awsmp dlq redrive` (SQS `StartMessageMoveTask`): every
    /// dead-lettered message back into the queue, visible, its receive count reset.
    pub fn redrive(&self) -> usize {
        let mut state = lock(&self.state);
        let dead = std::mem::take(&mut state.dead);
        let moved = dead.len();
        state.waiting.extend(dead.into_iter().map(|body| Waiting {
            body,
            receives: 0,
            visible_at: None,
        }));
        moved
    }

    /// The queue's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Messages ever accepted.
    pub fn sent(&self) -> usize {
        lock(&self.state).sent
    }
}

#[async_trait]
impl WorkQueue for SimQueue {
    async fn send(&self, messages: &[WorkMessage]) -> Result<SendReport, PortError> {
        yield_now().await;
        {
            let mut state = lock(&self.state);
            // As the SQS adapter writes each body.
            state.waiting.extend(messages.iter().map(|message| Waiting {
                body: serde_json::to_string(message).unwrap_or_default(),
                receives: 0,
                visible_at: None,
            }));
            state.sent += messages.len();
        }
        if self.sim.fault(FaultKind::QueueLostResponse, self.name) {
            return Err(PortError::Transient {
                operation: "SendMessageBatch",
                message: "injected: the messages were enqueued, the response was lost".into(),
            });
        }
        Ok(SendReport::default())
    }
}

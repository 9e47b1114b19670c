//! An SQS queue as the pipeline sees it: at-least-once delivery, a message invisible
//! while a consumer holds it and visible again when that consumer fails or dies
//! (visibility timeout), duplicate deliveries while the first still runs, and sends
//! whose response is lost after the messages were enqueued.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use awsmp_core::ports::{PortError, SendReport, WorkMessage, WorkQueue};

use crate::sim::{FaultKind, Sim, yield_now};

#[derive(Debug, Default)]
struct State {
    visible: VecDeque<WorkMessage>,
    /// (delivery id, owner task, message).
    in_flight: Vec<(u64, usize, WorkMessage)>,
    next_delivery: u64,
    sent: usize,
}

/// One simulated queue (cheap to clone).
#[derive(Debug, Clone)]
pub struct SimQueue {
    name: &'static str,
    sim: Sim,
    state: Arc<Mutex<State>>,
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl SimQueue {
    /// An empty queue.
    pub fn new(name: &'static str, sim: Sim) -> Self {
        SimQueue {
            name,
            sim,
            state: Arc::default(),
        }
    }

    /// Receives one message for the current task, if any is visible. With an injected
    /// duplicate delivery the message stays visible too, so another consumer may get it
    /// while this one still runs.
    pub async fn receive(&self) -> Option<(u64, WorkMessage)> {
        yield_now().await;
        let owner = self.sim.current();
        let duplicate = self.sim.fault(FaultKind::DuplicateDelivery, self.name);
        let mut state = lock(&self.state);
        let message = state.visible.pop_front()?;
        if duplicate {
            state.visible.push_back(message.clone());
        }
        state.next_delivery += 1;
        let id = state.next_delivery;
        state.in_flight.push((id, owner, message.clone()));
        Some((id, message))
    }

    /// Deletes a handled delivery.
    pub fn ack(&self, delivery: u64) {
        lock(&self.state)
            .in_flight
            .retain(|(id, _, _)| *id != delivery);
    }

    /// A failed delivery becomes visible again (its visibility timeout ran out).
    pub fn nack(&self, delivery: u64) {
        let mut state = lock(&self.state);
        if let Some(pos) = state
            .in_flight
            .iter()
            .position(|(id, _, _)| *id == delivery)
        {
            let (_, _, message) = state.in_flight.remove(pos);
            state.visible.push_back(message);
        }
    }

    /// Everything `task` held becomes visible again (it died mid-run).
    pub fn release_task(&self, task: usize) {
        let mut state = lock(&self.state);
        let (theirs, others): (Vec<_>, Vec<_>) = std::mem::take(&mut state.in_flight)
            .into_iter()
            .partition(|(_, owner, _)| *owner == task);
        state.in_flight = others;
        for (_, _, message) in theirs {
            state.visible.push_back(message);
        }
    }

    /// Messages waiting or held.
    pub fn depth(&self) -> usize {
        let state = lock(&self.state);
        state.visible.len() + state.in_flight.len()
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
            state.visible.extend(messages.iter().cloned());
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

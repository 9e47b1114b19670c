//! The buyer-events function in the simulated world: its Lambda handler
//! ([`awsmp_buyer_events::handler`]) runs over the in-memory subscribers table's stream
//! as the event-source mapping delivers it: one shard, the committed changes the
//! lifecycle actors (subscription, deprovision-cleanup, register) made, in order, in
//! batches; a batch item failure checkpoints the shard before the failed change, so it
//! and everything after it are delivered again. The bus ([`SimBus`]) fails calls and
//! refuses entries under the schedule's faults. [`crate::check::buyer_events`] holds
//! what was told to the changes the table recorded.

use std::sync::{Arc, Mutex, PoisonError};

use awsmp_buyer_events::{
    Config, State, StreamChange, StreamEvent, StreamRecord, dynamodb_image, failed_positions,
};
use awsmp_core::memory::{MemoryBus, MemorySubscriberStore, SubscriberChange};
use awsmp_core::ports::BusEvent;
use lambda_runtime::{Context, LambdaEvent};

use crate::actors::outcome_events::{SimBus, drain, invocations};
use crate::executor::Task;
use crate::sim::Sim;

/// The subscribers table's name in the simulated events stack (its stream's ARN names it).
const SUBSCRIBERS_TABLE: &str = "awsmp-subscribers-sim";

/// The function over one subscribers table: its handler state and the shard's checkpoint.
pub struct BuyerEvents {
    subscribers: MemorySubscriberStore,
    bus: MemoryBus,
    state: State,
    sim: Sim,
    /// Most records a delivery carries (the mapping's `BatchSize`).
    batch_size: usize,
    /// The stream index of the next change to deliver.
    checkpoint: Mutex<usize>,
}

/// The stream record Lambda hands the function for `change` (every committed change
/// of a row is an insert or a modification: the mapping's filter passes them all).
fn stream_record(change: &SubscriberChange) -> StreamRecord {
    let change = &change.change;
    StreamRecord {
        event_id: change.change_id.clone(),
        event_name: if change.old.is_some() {
            "MODIFY"
        } else {
            "INSERT"
        }
        .to_string(),
        event_source_arn: format!(
            "arn:aws:dynamodb:us-east-1:123456789012:table/{SUBSCRIBERS_TABLE}/stream/2026-11-01T00:00:00.000"
        ),
        dynamodb: StreamChange {
            sequence_number: change.position.clone(),
            new_image: change.new.as_ref().map(dynamodb_image),
            old_image: change.old.as_ref().map(dynamodb_image),
        },
    }
}

impl BuyerEvents {
    /// The function over `subscribers`, whose stream is recorded from now on,
    /// delivered in batches of at most `batch_size`.
    pub fn new(sim: &Sim, subscribers: &MemorySubscriberStore, batch_size: usize) -> Self {
        subscribers.record_changes();
        let bus = MemoryBus::new();
        let state = State {
            config: Arc::new(Config {
                subscribers_table: SUBSCRIBERS_TABLE.into(),
            }),
            bus: Arc::new(SimBus::new(bus.clone(), sim)),
        };
        BuyerEvents {
            subscribers: subscribers.clone(),
            bus,
            state,
            sim: sim.clone(),
            batch_size: batch_size.max(1),
            checkpoint: Mutex::new(0),
        }
    }

    /// Every event the bus took, in order (repeated deliveries included).
    pub fn told(&self) -> Vec<BusEvent> {
        self.bus.taken()
    }

    /// Every change the table's stream recorded, in order.
    pub fn changes(&self) -> Vec<SubscriberChange> {
        self.subscribers.changes_from(0)
    }

    /// Whether every change was delivered and taken.
    fn caught_up(&self) -> bool {
        *self
            .checkpoint
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            >= self.subscribers.change_count()
    }

    /// One invocation: the next batch from the checkpoint, and the checkpoint moved past
    /// what the function took (to the first failed record).
    async fn deliver(&self) {
        let from = *self
            .checkpoint
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let batch: Vec<SubscriberChange> = self
            .subscribers
            .changes_from(from)
            .into_iter()
            .take(self.batch_size)
            .collect();
        if batch.is_empty() {
            return;
        }
        let event = StreamEvent {
            records: batch.iter().map(stream_record).collect(),
        };
        let response =
            awsmp_buyer_events::handler(&self.state, LambdaEvent::new(event, Context::default()))
                .await
                .unwrap_or_else(|never| match never {});
        // Lambda checkpoints before the lowest failed sequence number.
        let failed = failed_positions(&response);
        let next = batch
            .iter()
            .position(|c| failed.contains(&c.change.position.as_str()))
            .map_or(from + batch.len(), |offset| from + offset);
        let mut checkpoint = self
            .checkpoint
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *checkpoint = (*checkpoint).max(next);
    }

    /// The function running beside the lifecycle and the pipeline (under faults): a few
    /// invocations, at random moments.
    pub fn task(&self) -> Task<'_> {
        invocations(&self.sim, "buyer-events", || self.deliver())
    }

    /// Settling, fault-free: invocations until the shard is caught up (bounded: a change
    /// the bus never takes holds its shard, as in AWS).
    pub fn drain(&self) {
        drain(
            &self.sim,
            "buyer-events",
            || self.caught_up(),
            || self.deliver(),
        );
    }
}

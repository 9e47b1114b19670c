//! The outcome-events function in the simulated world: its Lambda handler
//! ([`awsmp_outcome_events::handler`]) runs over the in-memory tables' streams as the
//! event-source mappings deliver them: each table one shard, its committed changes in
//! order, filtered as the mappings filter (a new image in a told status), in batches;
//! a batch item failure checkpoints the shard before the failed change, so it and
//! everything after it are delivered again. The bus ([`SimBus`]) fails calls and
//! refuses entries under the schedule's faults. [`crate::check::outcome_events`] holds
//! what was told to the tables and to Marketplace's ledger.

use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use awsmp_core::memory::{MemoryBus, MemoryTables, StreamChange as TableChange, yield_now};
use awsmp_core::model::{Attr, attr};
use awsmp_core::outcomes::Table;
use awsmp_core::ports::{BusEvent, EventBus, PUT_EVENTS_MAX_BYTES, PortError};
use awsmp_outcome_events::{
    Config, State, StreamChange, StreamEvent, StreamRecord, dynamodb_image, failed_positions,
};
use lambda_runtime::{Context, LambdaEvent};

use crate::executor::{self, Task};
use crate::sim::{FaultKind, Sim};

/// The usage table's name in the simulated stack (its stream's ARN names it).
const USAGE_TABLE: &str = "awsmp-prod-usage-sim";
/// The aggregated-usage table's name.
const AGGREGATED_TABLE: &str = "awsmp-prod-aggregated-usage-sim";
/// Most fault-free deliveries of one settling drain (a change the bus can never take
/// stays undelivered; the check then reports every outcome it holds back).
const DRAIN_DELIVERIES: usize = 40;

/// EventBridge's default bus under the schedule's faults: a call fails as a whole, or
/// refuses some of its entries; what it takes is kept ([`OutcomeEvents::told`]).
pub struct SimBus {
    inner: MemoryBus,
    sim: Sim,
}

impl SimBus {
    /// The bus keeping what it takes in `inner`, failing under `sim`'s faults.
    pub fn new(inner: MemoryBus, sim: &Sim) -> Self {
        SimBus {
            inner,
            sim: sim.clone(),
        }
    }
}

#[async_trait]
impl EventBus for SimBus {
    async fn put(&self, events: &[BusEvent]) -> Result<Vec<Option<String>>, PortError> {
        yield_now().await;
        if self.sim.fault(FaultKind::BusRefused, "PutEvents") {
            return Err(PortError::Transient {
                operation: "PutEvents",
                message: "InternalException (simulated)".into(),
            });
        }
        // A call the bus refuses whole (too many entries or bytes) takes no refusal.
        let valid = events.len() <= 10
            && events.iter().map(BusEvent::size).sum::<usize>() <= PUT_EVENTS_MAX_BYTES;
        let refused: Vec<usize> = (0..events.len())
            .filter(|_| self.sim.fault(FaultKind::BusRefused, "PutEvents entry"))
            .collect();
        if valid && !refused.is_empty() {
            self.inner.refuse_next(&refused, "ThrottlingException");
        }
        self.inner.put(events).await
    }
}

/// The function over one world's tables: its handler state and each shard's checkpoint.
pub struct OutcomeEvents {
    tables: MemoryTables,
    bus: MemoryBus,
    state: State,
    sim: Sim,
    /// Most records a delivery carries (the mapping's `BatchSize`).
    batch_size: usize,
    /// Per shard (usage, aggregated): the stream index of the next change to deliver.
    checkpoints: Mutex<[usize; 2]>,
}

/// The shard of `table` (its index in the checkpoints).
fn shard(table: Table) -> usize {
    match table {
        Table::Usage => 0,
        Table::Aggregated => 1,
    }
}

/// Whether the mapping's filter passes `change` (`INSERT`/`MODIFY` into a told status).
fn passes_filter(change: &TableChange) -> bool {
    let told = change.table.told_statuses();
    change
        .change
        .new
        .as_ref()
        .and_then(|new| new.get(attr::METERING_STATUS))
        .and_then(Attr::as_s)
        .is_some_and(|status| told.contains(&status))
}

/// The stream record Lambda hands the function for `change`.
fn stream_record(change: &TableChange) -> StreamRecord {
    let table = match change.table {
        Table::Usage => USAGE_TABLE,
        Table::Aggregated => AGGREGATED_TABLE,
    };
    let event_name = match (&change.change.old, &change.change.new) {
        (None, _) => "INSERT",
        (Some(_), Some(_)) => "MODIFY",
        (Some(_), None) => "REMOVE",
    };
    StreamRecord {
        event_id: change.change.change_id.clone(),
        event_name: event_name.to_string(),
        event_source_arn: format!(
            "arn:aws:dynamodb:us-west-2:123456789012:table/{table}/stream/2026-11-01T00:00:00.000"
        ),
        dynamodb: StreamChange {
            sequence_number: change.change.position.clone(),
            new_image: change.change.new.as_ref().map(dynamodb_image),
            old_image: change.change.old.as_ref().map(dynamodb_image),
        },
    }
}

impl OutcomeEvents {
    /// The function over `tables`, whose streams are recorded from now on, delivered in
    /// batches of at most `batch_size`.
    pub fn new(sim: &Sim, tables: &MemoryTables, batch_size: usize) -> Self {
        tables.record_changes();
        let bus = MemoryBus::new();
        let state = State {
            config: Arc::new(Config {
                usage_table: USAGE_TABLE.into(),
                aggregated_table: AGGREGATED_TABLE.into(),
            }),
            bus: Arc::new(SimBus::new(bus.clone(), sim)),
        };
        OutcomeEvents {
            tables: tables.clone(),
            bus,
            state,
            sim: sim.clone(),
            batch_size,
            checkpoints: Mutex::new([0, 0]),
        }
    }

    /// Every event the bus took, in order (repeated deliveries included).
    pub fn told(&self) -> Vec<BusEvent> {
        self.bus.taken()
    }

    /// Whether every change of both shards was delivered and taken.
    fn caught_up(&self) -> bool {
        let end = self.tables.change_count();
        self.checkpoints
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .all(|at| *at >= end)
    }

    /// One invocation on `table`'s shard: the next batch from its checkpoint, and the
    /// checkpoint moved past what the function took (to the first failed record).
    async fn deliver(&self, table: Table) {
        let from = self
            .checkpoints
            .lock()
            .unwrap_or_else(PoisonError::into_inner)[shard(table)];
        let changes = self.tables.changes_from(from);
        let mut batch: Vec<(usize, &TableChange)> = Vec::new();
        let mut scanned = from + changes.len();
        for (offset, change) in changes.iter().enumerate() {
            if change.table != table || !passes_filter(change) {
                continue;
            }
            batch.push((from + offset, change));
            if batch.len() == self.batch_size {
                scanned = from + offset + 1;
                break;
            }
        }
        let next = if batch.is_empty() {
            scanned
        } else {
            let event = StreamEvent {
                records: batch.iter().map(|(_, c)| stream_record(c)).collect(),
            };
            let response = awsmp_outcome_events::handler(
                &self.state,
                LambdaEvent::new(event, Context::default()),
            )
            .await
            .unwrap_or_else(|never| match never {});
            // Lambda checkpoints before the lowest failed sequence number.
            let failed = failed_positions(&response);
            batch
                .iter()
                .find(|(_, c)| failed.contains(&c.change.position.as_str()))
                .map_or(scanned, |(index, _)| *index)
        };
        let mut checkpoints = self
            .checkpoints
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let at = &mut checkpoints[shard(table)];
        *at = (*at).max(next);
    }

    /// One invocation on each shard.
    async fn deliver_both(&self) {
        self.deliver(Table::Aggregated).await;
        self.deliver(Table::Usage).await;
    }

    /// The function running beside the pipeline (under faults): a few invocations, at
    /// random moments.
    pub fn task(&self) -> Task<'_> {
        invocations(&self.sim, "outcome-events", || self.deliver_both())
    }

    /// Settling, fault-free: invocations until both shards are caught up (bounded: a
    /// change the bus never takes holds its shard, as in AWS).
    pub fn drain(&self) {
        drain(
            &self.sim,
            "outcome-events",
            || self.caught_up(),
            || self.deliver_both(),
        );
    }
}

/// A stream function running beside the pipeline (under faults): a few invocations of
/// `deliver`, at random moments.
pub fn invocations<'a, F: Future<Output = ()> + 'a>(
    sim: &'a Sim,
    name: &str,
    deliver: impl Fn() -> F + 'a,
) -> Task<'a> {
    Task::new(name, async move {
        for _ in 0..(2 + sim.below(4)) {
            for _ in 0..sim.below(60) {
                yield_now().await;
            }
            deliver().await;
        }
    })
}

/// Settling a stream function, fault-free: invocations of `deliver` until
/// `caught_up` (bounded: a change the bus never takes holds its shard, as in AWS).
pub fn drain<F: Future<Output = ()>>(
    sim: &Sim,
    name: &str,
    caught_up: impl Fn() -> bool,
    deliver: impl Fn() -> F,
) {
    let task = Task::new(name, async move {
        for _ in 0..DRAIN_DELIVERIES {
            if caught_up() {
                break;
            }
            deliver().await;
        }
    });
    executor::run(sim, vec![task], false, 200_000, &|_| {});
}

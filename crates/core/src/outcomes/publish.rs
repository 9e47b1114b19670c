//! Puts a batch of stream changes' events on the bus, in `PutEvents`-sized calls, and
//! names the changes whose event the bus did not take, so the stream delivers them
//! again (Lambda's partial batch response for streams). [`put_all`] is the one loop
//! every stream-to-bus function shares (outcome events, buyer lifecycle events).

use crate::pipeline::batch_ranges;
use crate::ports::{BusEvent, EventBus, PUT_EVENTS_MAX_BYTES, PUT_EVENTS_MAX_ENTRIES};

use super::{Change, Table, outcome};

/// What one batch of changes came to.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PublishReport {
    /// Events the bus took.
    pub published: usize,
    /// Changes that tell nothing (not a move into a told status).
    pub silent: usize,
    /// Positions ([`Change::position`]) of the changes whose event was not taken, in
    /// the order given, each once: the stream must deliver them again.
    pub failed: Vec<String>,
}

/// Puts the events of `changes` (all from `table`'s stream) on `bus`, at most ten and
/// 256 KB a call, one call after another. A call that fails, or an entry the bus
/// refuses, marks its changes failed; the others are published either way.
pub async fn publish(table: Table, changes: &[Change], bus: &dyn EventBus) -> PublishReport {
    let mut silent = 0;
    let mut events: Vec<(&str, BusEvent)> = Vec::new();
    for change in changes {
        match outcome(table, change) {
            Some(event) => events.push((change.position.as_str(), event)),
            None => silent += 1,
        }
    }
    let mut report = put_all(&events, bus).await;
    report.silent = silent;
    report
}

/// Puts `events` (each with the position of the change it tells; a change may tell
/// several) on `bus`, at most ten and 256 KB a call, one call after another. A call
/// that fails, or an entry the bus refuses, marks its change failed (once, however
/// many of its events failed); the others are published either way.
pub async fn put_all(events: &[(&str, BusEvent)], bus: &dyn EventBus) -> PublishReport {
    let mut report = PublishReport::default();
    let fail = |report: &mut PublishReport, position: &str| {
        if !report.failed.iter().any(|p| p == position) {
            report.failed.push(position.to_string());
        }
    };
    let sizes: Vec<usize> = events.iter().map(|(_, e)| e.size()).collect();
    for range in batch_ranges(&sizes, PUT_EVENTS_MAX_ENTRIES, PUT_EVENTS_MAX_BYTES) {
        let call = &events[range];
        let batch: Vec<BusEvent> = call.iter().map(|(_, e)| e.clone()).collect();
        match bus.put(&batch).await {
            Ok(answers) => {
                for (i, (position, event)) in call.iter().enumerate() {
                    match answers.get(i) {
                        Some(None) => report.published += 1,
                        Some(Some(error)) => {
                            tracing::warn!(
                                position,
                                error,
                                detail_type = event.detail_type,
                                "the bus refused an event; the change will be delivered again"
                            );
                            fail(&mut report, position);
                        }
                        None => {
                            tracing::warn!(
                                position,
                                "the bus gave no answer for an event; the change will be delivered again"
                            );
                            fail(&mut report, position);
                        }
                    }
                }
            }
            Err(error) => {
                tracing::warn!(%error, events = call.len(), "PutEvents failed; the changes will be delivered again");
                for (position, _) in call {
                    fail(&mut report, position);
                }
            }
        }
    }
    report
}

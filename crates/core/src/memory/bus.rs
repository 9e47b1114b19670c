//! [`EventBus`] in memory: keeps what it took, enforces `PutEvents`' limits (ten
//! entries, 256 KB), and refuses entries or whole calls on request.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use crate::ports::{BusEvent, EventBus, PUT_EVENTS_MAX_BYTES, PUT_EVENTS_MAX_ENTRIES, PortError};
use crate::sync::lock;

#[derive(Default)]
struct BusState {
    taken: Vec<BusEvent>,
    /// Errors for the next calls, as a whole.
    next_errors: VecDeque<PortError>,
    /// Entry refusals for the next calls: (index within the call, error code).
    next_refusals: VecDeque<Vec<(usize, String)>>,
    calls: usize,
}

/// [`EventBus`] in memory. Every taken event is kept in order ([`MemoryBus::taken`]).
#[derive(Clone, Default)]
pub struct MemoryBus {
    state: Arc<Mutex<BusState>>,
}

impl MemoryBus {
    /// An empty bus.
    pub fn new() -> Self {
        Self::default()
    }

    /// Everything the bus took, in order.
    pub fn taken(&self) -> Vec<BusEvent> {
        lock(&self.state).taken.clone()
    }

    /// How many `put` calls were made.
    pub fn calls(&self) -> usize {
        lock(&self.state).calls
    }

    /// The next call fails as a whole with `error`.
    pub fn fail_next_put(&self, error: PortError) {
        lock(&self.state).next_errors.push_back(error);
    }

    /// The next call refuses the entries at `indexes` (within that call) with `code`.
    pub fn refuse_next(&self, indexes: &[usize], code: &str) {
        lock(&self.state)
            .next_refusals
            .push_back(indexes.iter().map(|i| (*i, code.to_string())).collect());
    }
}

#[async_trait]
impl EventBus for MemoryBus {
    async fn put(&self, events: &[BusEvent]) -> Result<Vec<Option<String>>, PortError> {
        let mut state = lock(&self.state);
        state.calls += 1;
        let bytes: usize = events.iter().map(BusEvent::size).sum();
        if events.is_empty() || events.len() > PUT_EVENTS_MAX_ENTRIES {
            return Err(PortError::Failed {
                operation: "PutEvents",
                message: format!("{} entries (1 to 10 allowed)", events.len()),
            });
        }
        if bytes > PUT_EVENTS_MAX_BYTES {
            return Err(PortError::Failed {
                operation: "PutEvents",
                message: format!("{bytes} bytes (256 KB allowed)"),
            });
        }
        if let Some(error) = state.next_errors.pop_front() {
            return Err(error);
        }
        let refusals = state.next_refusals.pop_front().unwrap_or_default();
        let mut answers = Vec::with_capacity(events.len());
        for (i, event) in events.iter().enumerate() {
            match refusals.iter().find(|(at, _)| *at == i) {
                Some((_, code)) => answers.push(Some(code.clone())),
                None => {
                    if serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(
                        &event.detail,
                    )
                    .is_err()
                    {
                        answers.push(Some("MalformedDetail".to_string()));
                        continue;
                    }
                    state.taken.push(event.clone());
                    answers.push(None);
                }
            }
        }
        Ok(answers)
    }
}

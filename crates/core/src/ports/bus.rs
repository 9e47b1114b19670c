//! The event bus outcome events go to (EventBridge `PutEvents` on the account's
//! default bus).

use async_trait::async_trait;

use super::PortError;

/// Most entries one `PutEvents` call takes.
pub const PUT_EVENTS_MAX_ENTRIES: usize = 10;
/// Most bytes one `PutEvents` call takes (all entries together).
pub const PUT_EVENTS_MAX_BYTES: usize = 256 * 1024;

/// One event to put on the bus.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BusEvent {
    /// `Source`.
    pub source: &'static str,
    /// `DetailType`.
    pub detail_type: &'static str,
    /// `Detail`: a JSON object, serialized.
    pub detail: String,
    /// `Resources`: ARNs a rule may match on (the license's).
    pub resources: Vec<String>,
}

impl BusEvent {
    /// The bytes `PutEvents` counts for this entry against its 256 KB request limit
    /// (source, detail type, detail and each resource; no `Time` is sent).
    pub fn size(&self) -> usize {
        self.source.len()
            + self.detail_type.len()
            + self.detail.len()
            + self.resources.iter().map(String::len).sum::<usize>()
    }
}

/// An event bus (`PutEvents`, at most [`BusEvent`]s ten at a time).
#[async_trait]
pub trait EventBus: Send + Sync {
    /// Puts `events` (at most ten, 256 KB in all). Per event, in order: `None` when the
    /// bus took it, else the error it gave that entry. `Err` when the call as a whole
    /// failed (then none of them is known to be taken).
    async fn put(&self, events: &[BusEvent]) -> Result<Vec<Option<String>>, PortError>;
}

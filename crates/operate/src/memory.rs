//! An in-memory Event History: raw events with their times, paged newest first
//! like `LookupEvents`, the token being the offset (checked against the request
//! it belongs to).

use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use crate::ports::{RawTrailEvent, TrailError, TrailEvents, TrailPage};
use awsmp_core::time::Instant;

/// In-memory [`TrailEvents`]: a cheap `Clone` handle on shared events.
#[derive(Debug, Clone)]
pub struct MemoryTrail {
    events: Arc<Mutex<Vec<(Instant, RawTrailEvent)>>>,
    page_size: usize,
}

impl MemoryTrail {
    /// Empty, with pages of `page_size` events (at least 1).
    pub fn new(page_size: usize) -> Self {
        MemoryTrail {
            events: Arc::new(Mutex::new(Vec::new())),
            page_size: page_size.max(1),
        }
    }

    /// Adds an event recorded at `event_time` with its `CloudTrailEvent` JSON.
    pub fn record(&self, event_time: Instant, event_id: &str, cloudtrail_event: &str) {
        lock(&self.events).push((
            event_time,
            RawTrailEvent {
                event_id: Some(event_id.to_string()),
                event_name: Some("BatchMeterUsage".to_string()),
                cloudtrail_event: Some(cloudtrail_event.to_string()),
            },
        ));
    }
}

#[async_trait]
impl TrailEvents for MemoryTrail {
    async fn lookup(
        &self,
        since: Instant,
        until: Instant,
        next_token: Option<String>,
    ) -> Result<TrailPage, TrailError> {
        let mut matching: Vec<(Instant, RawTrailEvent)> = lock(&self.events)
            .iter()
            .filter(|(t, _)| since <= *t && *t <= until)
            .cloned()
            .collect();
        matching.sort_by_key(|e| std::cmp::Reverse(e.0));
        let request = format!("{}|{}", since.timestamp(), until.timestamp());
        let offset = match next_token {
            None => 0,
            Some(token) => token
                .strip_prefix(&format!("{request}|"))
                .and_then(|o| o.parse::<usize>().ok())
                .ok_or_else(|| TrailError::InvalidNextToken(format!("token {token:?}")))?,
        };
        let end = (offset + self.page_size).min(matching.len());
        let raw = matching
            .get(offset..end)
            .unwrap_or_default()
            .iter()
            .map(|(_, e)| e.clone())
            .collect();
        let next = (end < matching.len()).then(|| format!("{request}|{end}"));
        Ok(TrailPage::from_raw(raw, next))
    }
}

/// Locks a mutex, recovering the data if a panicking thread poisoned it.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

//! The operator's ports in memory, for tests. An Event History: raw events with their
//! times, paged newest first like `LookupEvents`, the token being the offset (checked
//! against the request it belongs to). A customer-profile table: rows by their keys,
//! and a refusal to script.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use crate::ports::{
    PiiTable, ProfileError, ProfileKey, RawTrailEvent, TrailError, TrailEvents, TrailPage,
};
use awsmp_core::model::Attr;
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

/// In-memory [`PiiTable`]: a cheap `Clone` handle on shared rows.
#[derive(Debug, Clone, Default)]
pub struct MemoryProfiles {
    rows: Arc<Mutex<BTreeMap<ProfileKey, BTreeMap<String, Attr>>>>,
    refusal: Arc<Mutex<Option<ProfileError>>>,
    calls: Arc<Mutex<Vec<&'static str>>>,
}

impl MemoryProfiles {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Stores the row of `key` with `attributes` (string attributes; the keys are added).
    pub fn insert(&self, key: &ProfileKey, attributes: &[(&str, &str)]) {
        let mut row: BTreeMap<String, Attr> = attributes
            .iter()
            .map(|(name, value)| (name.to_string(), Attr::S(value.to_string())))
            .collect();
        row.insert(
            awsmp_core::model::attr::LICENSE_ARN.into(),
            Attr::S(key.license_arn.clone()),
        );
        row.insert(
            awsmp_core::model::attr::CUSTOMER_ACCOUNT.into(),
            Attr::S(key.customer_aws_account_id.clone()),
        );
        lock(&self.rows).insert(key.clone(), row);
    }

    /// Whether the row of `key` is stored.
    pub fn contains(&self, key: &ProfileKey) -> bool {
        lock(&self.rows).contains_key(key)
    }

    /// Makes every later call fail with `error` (`None`: succeed again).
    pub fn refuse(&self, error: Option<ProfileError>) {
        *lock(&self.refusal) = error;
    }

    /// The calls made so far, in order (`get`, `delete_existing`).
    pub fn calls(&self) -> Vec<&'static str> {
        lock(&self.calls).clone()
    }

    fn call(&self, name: &'static str) -> Result<(), ProfileError> {
        lock(&self.calls).push(name);
        match lock(&self.refusal).clone() {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }
}

#[async_trait]
impl PiiTable for MemoryProfiles {
    async fn get(&self, key: &ProfileKey) -> Result<Option<BTreeMap<String, Attr>>, ProfileError> {
        self.call("get")?;
        Ok(lock(&self.rows).get(key).cloned())
    }

    async fn delete_existing(&self, key: &ProfileKey) -> Result<bool, ProfileError> {
        self.call("delete_existing")?;
        Ok(lock(&self.rows).remove(key).is_some())
    }
}

/// Locks a mutex, recovering the data if a panicking thread poisoned it.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

//! The operator's ports. CloudTrail Event History ([`TrailEvents`]): one page of
//! `LookupEvents` for the Marketplace Metering calls between two instants, already
//! parsed. Event History keeps 90 days per Region and shows a call about 15 minutes
//! after it was made; [`EventHistoryWindow`] applies both. Never CloudTrail Lake.
//! And one Region's customer-profile table ([`PiiTable`]): one buyer's row by its
//! keys, read or deleted, never listed.

use std::collections::BTreeMap;

use async_trait::async_trait;
use chrono::Duration;
use serde::Serialize;

use awsmp_core::model::Attr;
use awsmp_core::time::Instant;

use crate::reconcile::trail::{
    TrailEvent, TrailParseError, is_metering_source, parse_cloudtrail_event,
};

/// Days of events Event History keeps per Region.
pub const EVENT_HISTORY_DAYS: i64 = 90;
/// How long after a call Event History is expected to show it (not guaranteed; AWS
/// documents about 5 minutes for trails, about 15 for Event History).
pub const EVENT_HISTORY_LAG_MINUTES: i64 = 15;
/// Most events per `LookupEvents` page (the API's maximum).
pub const MAX_RESULTS: i32 = 50;

/// A failed `LookupEvents` call, worded for the operator.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TrailError {
    /// The caller may not call `cloudtrail:LookupEvents`.
    #[error(
        "CloudTrail refused LookupEvents ({0}): grant cloudtrail:LookupEvents in the metering Region to the profile you use"
    )]
    Denied(String),
    /// Throttled (2 calls per second per account and Region) after the SDK's retries.
    #[error("CloudTrail LookupEvents is throttled ({0}): wait a minute and run it again")]
    Throttled(String),
    /// The pagination token was refused (it must come with the same parameters).
    #[error("CloudTrail refused the pagination token ({0}): run the command again")]
    InvalidNextToken(String),
    /// Anything else (network, Region, time range).
    #[error("CloudTrail LookupEvents failed: {0}")]
    Failed(String),
}

/// One `LookupEvents` event as the API returns it, before parsing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawTrailEvent {
    /// `EventId`.
    pub event_id: Option<String>,
    /// `EventName`.
    pub event_name: Option<String>,
    /// `CloudTrailEvent`: the full record as a JSON string.
    pub cloudtrail_event: Option<String>,
}

/// An event that could not be used, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct UnreadableEvent {
    /// `EventId`, if known.
    pub event_id: Option<String>,
    /// What is wrong.
    pub problem: String,
}

/// One parsed page.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TrailPage {
    /// The `BatchMeterUsage` calls on the page.
    pub events: Vec<TrailEvent>,
    /// Events that could not be read.
    pub unreadable: Vec<UnreadableEvent>,
    /// Events of other operations or sources (not metering), skipped.
    pub skipped: usize,
    /// The token for the next page; `None` on the last.
    pub next_token: Option<String>,
}

impl TrailPage {
    /// Parses a page of raw events: keeps `BatchMeterUsage` calls of the Marketplace
    /// Metering source (either spelling), lists unreadable ones, counts the rest.
    pub fn from_raw(raw: Vec<RawTrailEvent>, next_token: Option<String>) -> Self {
        let mut page = TrailPage {
            next_token,
            ..TrailPage::default()
        };
        for event in raw {
            let Some(json) = event.cloudtrail_event.as_deref() else {
                page.unreadable.push(UnreadableEvent {
                    event_id: event.event_id,
                    problem: "the event carries no CloudTrailEvent record".into(),
                });
                continue;
            };
            match parse_cloudtrail_event(json) {
                Ok(parsed) if is_metering_source(&parsed.event_source) => page.events.push(parsed),
                Ok(_) | Err(TrailParseError::NotBatchMeterUsage { .. }) => page.skipped += 1,
                Err(TrailParseError::Unreadable { event_id, problem }) => {
                    page.unreadable.push(UnreadableEvent {
                        event_id: event_id.or(event.event_id),
                        problem,
                    })
                }
            }
        }
        page
    }
}

/// CloudTrail Event History, filtered to Marketplace Metering `BatchMeterUsage`
/// calls in the metering Region.
#[async_trait]
pub trait TrailEvents: Send + Sync {
    /// One page of events with `since <= eventTime <= until`, newest first.
    /// `next_token` is the previous page's, with the same `since` and `until`.
    async fn lookup(
        &self,
        since: Instant,
        until: Instant,
        next_token: Option<String>,
    ) -> Result<TrailPage, TrailError>;
}

/// One buyer's row of the customer-profile table: its keys.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ProfileKey {
    /// `licenseArn`.
    pub license_arn: String,
    /// `customerAWSAccountId`.
    pub customer_aws_account_id: String,
}

/// A failed call on the customer-profile table, worded for the operator. It never
/// carries the row's data.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProfileError {
    /// The credentials may not read or delete the table's items.
    #[error(
        "{operation} on {table} was refused ({message}). {}",
        PROFILE_ACCESS_ADVICE
    )]
    Denied {
        /// `GetItem` or `DeleteItem`.
        operation: String,
        /// The table.
        table: String,
        /// What DynamoDB said.
        message: String,
    },
    /// No such table in the Region.
    #[error(
        "there is no customer-profile table {table} in this Region ({message}): check --region, and the table's name (--customer-profile-table, or the stack's CustomerProfileTableName output)"
    )]
    NoTable {
        /// The table.
        table: String,
        /// What DynamoDB said.
        message: String,
    },
    /// Anything else.
    #[error("{0}")]
    Failed(String),
}

/// What to do about a refused profile read or delete: the stack's resource policy
/// names the only principals allowed.
pub const PROFILE_ACCESS_ADVICE: &str = "The customer-profile table's resource policy lets only the register function's role and the PII role named by the stack parameter ProfileAccessRoleArn read or delete its items: run `awsmp profile` with that role's credentials (e.g. --profile naming an AWS profile that assumes it)";

/// One Region's customer-profile table as the operator's PII commands see it, one
/// buyer at a time: read or erased, and there is no call that lists or scans it (the
/// pipeline's writes to the same table are `awsmp_core::ports::ProfileStore`).
#[async_trait]
pub trait PiiTable: Send + Sync {
    /// The row of `key`, every attribute as stored (keys included), read strongly
    /// consistent; `None` when there is none.
    async fn get(&self, key: &ProfileKey) -> Result<Option<BTreeMap<String, Attr>>, ProfileError>;

    /// Deletes the row of `key` only if it exists, returning none of its data: `true`
    /// deleted, `false` there was none (nothing deleted).
    async fn delete_existing(&self, key: &ProfileKey) -> Result<bool, ProfileError>;
}

/// The span Event History can answer for: at most 90 days back, and complete only
/// up to about 15 minutes ago.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct EventHistoryWindow {
    /// First instant asked for (after clamping to 90 days).
    pub since: Instant,
    /// Last instant asked for (never after now).
    pub until: Instant,
    /// Calls after this may not be visible yet.
    pub visible_until: Instant,
    /// The requested start was older than Event History keeps.
    pub clamped: bool,
}

impl EventHistoryWindow {
    /// The window for a request from `since` to `until` (defaults: 90 days ago, now).
    pub fn new(since: Option<Instant>, until: Option<Instant>, now: Instant) -> Self {
        let oldest = now - Duration::days(EVENT_HISTORY_DAYS);
        let wanted = since.unwrap_or(oldest);
        let until = until.map_or(now, |u| u.min(now));
        EventHistoryWindow {
            since: wanted.max(oldest),
            until,
            visible_until: until.min(now - Duration::minutes(EVENT_HISTORY_LAG_MINUTES)),
            clamped: wanted < oldest,
        }
    }
}

/// Every page of a lookup.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TrailLog {
    /// Every `BatchMeterUsage` call.
    pub events: Vec<TrailEvent>,
    /// Every event that could not be read.
    pub unreadable: Vec<UnreadableEvent>,
    /// Events skipped as not metering.
    pub skipped: usize,
    /// Pages read.
    pub pages: usize,
}

/// Reads every page between `since` and `until`; `on_page` sees the running total
/// of events after each page (for a progress bar).
pub async fn read_trail(
    trail: &dyn TrailEvents,
    since: Instant,
    until: Instant,
    mut on_page: impl FnMut(usize) + Send,
) -> Result<TrailLog, TrailError> {
    let mut log = TrailLog::default();
    let mut token = None;
    loop {
        let page = trail.lookup(since, until, token.take()).await?;
        log.pages += 1;
        log.events.extend(page.events);
        log.unreadable.extend(page.unreadable);
        log.skipped += page.skipped;
        on_page(log.events.len());
        match page.next_token {
            Some(next) => token = Some(next),
            None => break,
        }
    }
    Ok(log)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::reconcile::at;

    use crate::memory::MemoryTrail;
    use crate::reconcile::trail::{EVENT_SOURCE, MODEL_EVENT_SOURCE};

    /// Records an empty `name` call from `source`, made at `time`, as event `id`.
    fn record_call(trail: &MemoryTrail, id: &str, time: &str, name: &str, source: &str) {
        let event = serde_json::json!({
            "eventID": id, "eventTime": time, "eventName": name, "eventSource": source,
            "requestParameters": {"usageRecords": []},
            "responseElements": {"results": [], "unprocessedRecords": []}
        });
        trail.record(at(time), id, &event.to_string());
    }

    #[test]
    fn the_window_keeps_90_days_and_the_15_minute_lag() {
        let now = at("2026-06-30T12:00:00Z");
        let w = EventHistoryWindow::new(Some(at("2026-01-01T00:00:00Z")), None, now);
        assert!(w.clamped);
        assert_eq!(w.since, at("2026-04-01T12:00:00Z"));
        assert_eq!(w.until, now);
        assert_eq!(w.visible_until, at("2026-06-30T11:45:00Z"));
        let w = EventHistoryWindow::new(
            Some(at("2026-06-01T00:00:00Z")),
            Some(at("2026-06-02T00:00:00Z")),
            now,
        );
        assert!(!w.clamped);
        assert_eq!(w.visible_until, at("2026-06-02T00:00:00Z"));
        let future = EventHistoryWindow::new(None, Some(at("2027-01-01T00:00:00Z")), now);
        assert_eq!(future.until, now);
    }

    #[tokio::test]
    async fn pages_newest_first_and_keeps_only_metering_calls() {
        let trail = MemoryTrail::new(2);
        for (i, minute) in [1, 2, 3, 4, 5].iter().enumerate() {
            let time = format!("2026-03-15T12:0{minute}:00Z");
            record_call(
                &trail,
                &format!("e{i}"),
                &time,
                "BatchMeterUsage",
                EVENT_SOURCE,
            );
        }
        record_call(
            &trail,
            "r",
            "2026-03-15T12:06:00Z",
            "ResolveCustomer",
            EVENT_SOURCE,
        );
        record_call(
            &trail,
            "m",
            "2026-03-15T12:07:00Z",
            "BatchMeterUsage",
            MODEL_EVENT_SOURCE,
        );
        trail.record(at("2026-03-15T12:08:00Z"), "bad", "{not json");
        let mut progress = Vec::new();
        let log = read_trail(
            &trail,
            at("2026-03-15T12:02:00Z"),
            at("2026-03-15T13:00:00Z"),
            |n| progress.push(n),
        )
        .await
        .unwrap();
        let ids: Vec<&str> = log.events.iter().map(|e| e.event_id.as_str()).collect();
        assert_eq!(
            ids,
            ["m", "e4", "e3", "e2", "e1"],
            "newest first, from 12:02 on"
        );
        assert_eq!(log.skipped, 1, "ResolveCustomer");
        assert_eq!(log.unreadable.len(), 1);
        assert_eq!(log.unreadable[0].event_id.as_deref(), Some("bad"));
        assert_eq!(log.pages, 4);
        assert_eq!(progress, [1, 2, 4, 5]);
    }

    #[tokio::test]
    async fn a_token_from_another_request_is_refused() {
        let trail = MemoryTrail::new(1);
        for i in 0..3 {
            let time = format!("2026-03-15T12:0{i}:00Z");
            record_call(&trail, "e", &time, "BatchMeterUsage", EVENT_SOURCE);
        }
        let first = trail
            .lookup(at("2026-03-15T00:00:00Z"), at("2026-03-16T00:00:00Z"), None)
            .await
            .unwrap();
        let token = first.next_token.unwrap();
        let other = trail
            .lookup(
                at("2026-03-15T01:00:00Z"),
                at("2026-03-16T00:00:00Z"),
                Some(token),
            )
            .await;
        assert!(matches!(other, Err(TrailError::InvalidNextToken(_))));
    }
}

//! Reconciliation: what AWS recorded against what we billed. Pure domain logic, no
//! I/O: reading a CloudTrail `BatchMeterUsage` event ([`trail`]), reading the SDDS
//! Daily Usage, Account and Product feeds with their bi-temporal rows ([`sdds`]),
//! and comparing either with our aggregated records ([`compare`]). The one port,
//! [`TrailEvents`] (`crate::ports`), is CloudTrail Event History (`LookupEvents`: 90 days, about 15
//! minutes behind, never CloudTrail Lake); the CLI implements it over the SDK.

pub mod compare;
pub mod quantity;
pub mod sdds;
pub mod trail;

#[cfg(any(test, feature = "test-util"))]
pub use crate::memory::MemoryTrail;
pub use crate::ports::{
    EVENT_HISTORY_DAYS, EVENT_HISTORY_LAG_MINUTES, EventHistoryWindow, MAX_RESULTS, RawTrailEvent,
    TrailError, TrailEvents, TrailLog, TrailPage, UnreadableEvent, read_trail,
};
pub use compare::{
    AwsSource, DayWindow, Discrepancy, DiscrepancyKind, KindTotal, OurRecord, Period, ReconcileKey,
    Reconciliation, TrailRow, TrailWindow, is_billed, join_trail, price_discrepancies,
    reconcile_with_sdds, reconcile_with_trail,
};
pub use quantity::Quantity;
pub use sdds::{AwsDailyUsage, FeedFile, JoinedUsage, LineProblem, join_feeds};
pub use trail::{
    EVENT_NAME, EVENT_SOURCE, MODEL_EVENT_SOURCE, TrailEvent, TrailOutcome, TrailRecord,
    TrailStatus, parse_cloudtrail_event,
};

/// An RFC 3339 instant, for the reconciliation tests.
#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) fn at(s: &str) -> awsmp_core::time::Instant {
    chrono::DateTime::parse_from_rfc3339(s)
        .unwrap()
        .with_timezone(&chrono::Utc)
}

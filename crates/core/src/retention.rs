//! Data retention: how long a final item stays in the usage and aggregated-usage tables
//! before DynamoDB's TTL may delete it (`DataRetentionDays`, env `DATA_RETENTION_DAYS`).
//!
//! The pipeline owns the TTL attribute ([`attr::EXPIRES_AT`](crate::model::attr::EXPIRES_AT)):
//! it is written only by the write that makes an item final (a raw row `Aggregated`,
//! `RejectedClientSide` or `AggregationExpired`; a record `Success`, `DuplicateRecord`,
//! `CustomerNotSubscribed`, `Error`, `SubmissionExpired` or `DryRunSubmitted`), and every
//! write that leaves or puts an item pending removes it. So TTL never deletes usage that
//! is not yet counted or billed. A seller's row that carries it is refused
//! ([`ReasonCode::ReservedAttribute`](crate::model::ReasonCode::ReservedAttribute)).

use std::fmt;
use std::str::FromStr;

use chrono::{Duration, Timelike};
use serde::{Deserialize, Serialize};

use crate::model::AggregatedStatus;
use crate::time::{HourBucket, Instant, WINDOW_HOURS};

/// The shortest retention accepted, in days. The retention counts from an item's final
/// write, and the pipeline still reads a final item until one metering window
/// ([`WINDOW_HOURS`], 24 h) after its hour starts: late rows fold into (or are refused
/// `HourAlreadySubmitted` against) the hour's record until the hour ages out, and an
/// `Error` record is replayable inside that window. A record can be final before its
/// hour even ends (a deprovisioning flush bills the open hour), and a raw row written
/// late in its window is aged out up to one more window after it was written, so two
/// windows (48 h) after any final write cover every path; one more day is margin for the
/// schedules (discoverer 15 min, submitter 5 min) and a stopped pipeline catching up.
/// (A literal, so the template test reads it: `tests/deploy/check_templates.py` checks
/// that `DataRetentionDays` refuses every value below it; the unit test below derives it
/// from [`WINDOW_HOURS`].)
pub const MIN_RETENTION_DAYS: u32 = 3;

/// The longest retention accepted, in days (ten years; `0` keeps items for ever).
pub const MAX_RETENTION_DAYS: u32 = 3653;

/// How long a final item is kept: for ever (the default), or a number of days from the
/// write that made it final.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Retention(Option<u32>);

/// A `DataRetentionDays` that is not 0 or a whole number of days in
/// [`MIN_RETENTION_DAYS`]..=[`MAX_RETENTION_DAYS`] (configuration error; never clamped).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "DATA_RETENTION_DAYS must be 0 (keep everything) or a whole number of days from \
     {MIN_RETENTION_DAYS} to {MAX_RETENTION_DAYS}, got {0:?}"
)]
pub struct InvalidRetention(pub String);

impl Retention {
    /// Keep every item for ever (no item carries the TTL attribute).
    pub const FOREVER: Retention = Retention(None);

    /// The shortest retention, [`MIN_RETENTION_DAYS`].
    pub const MIN: Retention = Retention(Some(MIN_RETENTION_DAYS));

    /// `days` after the final write; 0 is [`Retention::FOREVER`].
    pub fn days(days: u32) -> Result<Self, InvalidRetention> {
        match days {
            0 => Ok(Retention::FOREVER),
            d if (MIN_RETENTION_DAYS..=MAX_RETENTION_DAYS).contains(&d) => Ok(Retention(Some(d))),
            d => Err(InvalidRetention(d.to_string())),
        }
    }

    /// The retention in days (0: for ever).
    pub fn as_days(&self) -> u32 {
        self.0.unwrap_or(0)
    }

    /// When an item made final at `final_at` may be deleted, in whole seconds (what the
    /// TTL attribute holds); `None`: never.
    pub fn expiry(&self, final_at: Instant) -> Option<Instant> {
        self.0.map(|days| {
            let at = final_at + Duration::days(i64::from(days));
            at.with_nanosecond(0).unwrap_or(at)
        })
    }

    /// When an aggregated record of `hour` written `status` at `now` may be deleted:
    /// `None` while it is pending (or retention is off). An `Error` record can still be
    /// replayed until its hour's window closes, so its retention counts from the later
    /// of `now` and that close; every other final status counts from `now`.
    pub fn record_expiry(
        &self,
        hour: HourBucket,
        status: AggregatedStatus,
        now: Instant,
    ) -> Option<Instant> {
        match status {
            AggregatedStatus::Pending => None,
            AggregatedStatus::Error => {
                let window_closes = hour.start() + Duration::hours(WINDOW_HOURS);
                self.expiry(now.max(window_closes))
            }
            _ => self.expiry(now),
        }
    }

    /// When an item of the aggregated table that cannot be read (its hour unknown),
    /// closed `Error` at `now`, may be deleted: counted from one window after `now`, the
    /// latest any hour it could belong to stays replayable.
    pub fn unreadable_record_expiry(&self, now: Instant) -> Option<Instant> {
        self.expiry(now + Duration::hours(WINDOW_HOURS))
    }
}

impl FromStr for Retention {
    type Err = InvalidRetention;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.trim()
            .parse::<u32>()
            .map_err(|_| InvalidRetention(s.to_string()))
            .and_then(Retention::days)
            .map_err(|_| InvalidRetention(s.to_string()))
    }
}

impl fmt::Display for Retention {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            None => write!(f, "forever"),
            Some(days) => write!(f, "{days} days"),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::model::{Attr, attr};
    use crate::pipeline::testkit::{ACCOUNT_A, PRODUCT, World, group, license, t as at};
    use crate::ports::OperatorStore;
    use crate::time::parse_usage_timestamp;

    /// GIVEN a stack keeping final items for the floor, usage that ends every way a raw
    /// row and a record can end, WHEN each stage runs at its own (injected) time, THEN
    /// each final write carries `expiresAt` = that time + 3 days (an `Error` record from
    /// its replay window's close), and nothing pending ever carries one (the World
    /// checks that after every stage; the replay removes it).
    #[tokio::test]
    async fn every_final_write_expires_from_the_clock_and_nothing_pending_does() {
        let days = Duration::days(i64::from(MIN_RETENTION_DAYS));
        let world = World::new(at("2026-11-30T10:30:00Z"));
        let l = license(1);
        world.api.entitle(&l, ACCOUNT_A);
        let counted = world.put(&l, ACCOUNT_A, "requests", "2026-11-30T09:10:00Z", 4);
        let refused = world.put(&l, ACCOUNT_A, "bad", "2026-11-30T09:20:00Z", 1);
        world
            .api
            .reject_dimension("bad", "InvalidUsageDimensionException");
        let mut tagged =
            crate::memory::reference_row(&l, ACCOUNT_A, "x", "2026-11-30T09:30:00Z", 1);
        tagged
            .attrs
            .insert(attr::EXPIRES_AT.into(), Attr::N("1".into()));
        let reserved = world.put_row(tagged);
        let stranded = world.put(&l, ACCOUNT_A, "old", "2026-11-28T09:00:00Z", 1);
        let never_sent = crate::memory::fixtures::pending_record(
            group(&l, ACCOUNT_A, "late", "2026-11-29T09"),
            PRODUCT,
            2,
            1,
        );
        world
            .tables
            .insert_aggregated(never_sent.clone(), at("2026-11-29T10:00:00Z"));

        // Discovery at 10:30 ages out the stranded row; the aggregator counts (commit)
        // and rejects (cleanup) at 10:31.
        let discovered = at("2026-11-30T10:30:00Z");
        world.discover(discovered).await;
        assert_eq!(
            world.status(&l, &stranded).as_deref(),
            Some("AggregationExpired")
        );
        assert_eq!(world.row_expiry(&l, &stranded), Some(discovered + days));
        let aggregated = at("2026-11-30T10:31:00Z");
        world.clock.set(aggregated);
        let failed = world.aggregate_all(aggregated).await;
        assert!(failed.is_empty(), "{failed:?}");
        world.cleanup_all(aggregated).await;
        assert_eq!(world.status(&l, &counted).as_deref(), Some("Aggregated"));
        assert_eq!(world.row_expiry(&l, &counted), Some(aggregated + days));
        assert_eq!(
            world.reason(&l, &reserved).as_deref(),
            Some("ReservedAttribute")
        );
        assert_eq!(
            world.row_expiry(&l, &reserved),
            Some(aggregated + days),
            "the seller's value is replaced by the final write's"
        );

        // The submitter at 10:35 bills one, isolates one as Error, ages one out.
        let submitted = at("2026-11-30T10:35:00Z");
        world.submit(submitted).await;
        let billed = group(&l, ACCOUNT_A, "requests", "2026-11-30T09");
        let error = group(&l, ACCOUNT_A, "bad", "2026-11-30T09");
        assert_eq!(
            world.record(&billed).unwrap().status,
            AggregatedStatus::Success
        );
        assert_eq!(
            world.tables.aggregated_expiry(&billed),
            Some(submitted + days)
        );
        assert_eq!(
            world.record(&error).unwrap().status,
            AggregatedStatus::Error
        );
        assert_eq!(
            world.tables.aggregated_expiry(&error),
            Some(at("2026-12-01T09:00:00Z") + days),
            "replayable until its window closes"
        );
        // The refused row is the poisoned record's: counted into it (and final from
        // the commit on), while the record expires from its replay window's close.
        assert_eq!(
            world.row(&l, &refused).attrs.get(attr::AGGREGATED_INTO),
            Some(&Attr::S(error.aggregated_sort_key()))
        );
        assert_eq!(world.row_expiry(&l, &refused), Some(aggregated + days));
        assert_eq!(
            world.record(&never_sent.key).unwrap().status,
            AggregatedStatus::SubmissionExpired
        );
        assert_eq!(
            world.tables.aggregated_expiry(&never_sent.key),
            Some(submitted + days)
        );

        // The operator's replay puts the Error record back: pending, no expiry.
        let operator = world.tables.operator_store();
        let record = world.record(&error).unwrap();
        assert!(operator.replay(&record, submitted).await.unwrap());
        assert_eq!(world.tables.aggregated_expiry(&error), None);
        world.assert_no_pending_expiry();
    }

    #[tokio::test]
    async fn retention_off_writes_no_expiry_and_removes_a_stale_one() {
        let mut world = World::new(at("2026-11-30T10:30:00Z"));
        world.retention = Retention::FOREVER;
        let l = license(1);
        world.api.entitle(&l, ACCOUNT_A);
        let counted = world.put(&l, ACCOUNT_A, "requests", "2026-11-30T09:10:00Z", 4);
        world.run_upstream(at("2026-11-30T10:30:00Z")).await;
        world.submit(at("2026-11-30T10:35:00Z")).await;
        assert_eq!(world.status(&l, &counted).as_deref(), Some("Aggregated"));
        assert_eq!(world.row_expiry(&l, &counted), None);
        let key = group(&l, ACCOUNT_A, "requests", "2026-11-30T09");
        assert_eq!(
            world.record(&key).unwrap().status,
            AggregatedStatus::Success
        );
        assert_eq!(world.tables.aggregated_expiry(&key), None);
    }

    fn t(s: &str) -> Instant {
        parse_usage_timestamp(s).unwrap()
    }

    #[test]
    fn the_floor_covers_two_metering_windows_and_a_day() {
        let two_windows_and_a_day = (2 * WINDOW_HOURS + 24 + 23) / 24;
        assert_eq!(i64::from(MIN_RETENTION_DAYS), two_windows_and_a_day);
    }

    #[test]
    fn zero_keeps_everything_and_days_below_the_floor_are_refused() {
        assert_eq!("0".parse::<Retention>().unwrap(), Retention::FOREVER);
        assert_eq!(Retention::FOREVER.expiry(t("2026-11-30T10:00:00Z")), None);
        for bad in ["1", "2", "3654", "-1", "2.5", "x", ""] {
            let err = bad.parse::<Retention>().unwrap_err();
            assert!(err.to_string().contains("from 3 to 3653"), "{bad}: {err}");
        }
        let thirty: Retention = " 30 ".parse().unwrap();
        assert_eq!(thirty.as_days(), 30);
        assert_eq!(
            thirty.expiry(t("2026-11-30T10:15:00Z")),
            Some(t("2026-12-30T10:15:00Z"))
        );
    }

    #[test]
    fn an_error_record_keeps_its_replay_window_and_a_pending_one_never_expires() {
        let r = Retention::days(3).unwrap();
        let hour: HourBucket = "2026-11-30T10".parse().unwrap();
        let now = t("2026-11-30T11:05:00Z");
        assert_eq!(r.record_expiry(hour, AggregatedStatus::Pending, now), None);
        assert_eq!(
            r.record_expiry(hour, AggregatedStatus::Success, now),
            Some(t("2026-12-03T11:05:00Z"))
        );
        // Replayable until 2026-12-01T10:00Z: three days from then.
        assert_eq!(
            r.record_expiry(hour, AggregatedStatus::Error, now),
            Some(t("2026-12-04T10:00:00Z"))
        );
        assert_eq!(
            r.unreadable_record_expiry(now),
            Some(t("2026-12-04T11:05:00Z"))
        );
        assert_eq!(
            Retention::FOREVER.record_expiry(hour, AggregatedStatus::Error, now),
            None
        );
    }
}

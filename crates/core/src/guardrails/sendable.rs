//! Whether usage written now can still be billed: the write-time rule every writer of
//! raw usage shares (the usage API, `awsmp_usage::Meter`, `awsmp usage put`/`import`).
//!
//! Usage is billed in its hour's record, and that record is sent stamped at the hour's
//! start ([`HourBucket::start`]), not at the usage's own instant; it is sent at the
//! earliest once the hour has ended and its metering lock has passed (the lock counts
//! from the hour's start)
//! ([`crate::time::bucket_unlocked`]: last month's hours drop the lock from 03:00 UTC
//! on the 1st), by the next submitter run; and Marketplace takes it only while the
//! hour's start is inside its window ([`crate::time::bucket_expired`]: 24 hours, and
//! last month's records until 06:00 UTC on the 1st). So usage stamped 10:50 and written
//! at 10:20 the next day is within 24 hours of its own instant, but its record (stamped
//! 10:00) can no longer be sent: it is refused here rather than accepted and aged out.
//!
//! The lock is the longest a stack may have ([`MeteringLockHours::MAX`]): the writers
//! know no stack setting, and an hour sendable under the longest lock is sendable under
//! every shorter one (the earliest send only moves earlier).

use chrono::{Datelike, Duration, TimeZone, Utc};

use crate::time::{
    HourBucket, Instant, MONTH_LOCK_DROP_HOUR, MeteringLockHours, WINDOW_HOURS, bucket_expired,
    format_instant,
};

/// Usage whose hour's record can no longer be sent before Marketplace's window for it
/// closes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "usage stamped {stamped} is billed in its hour's record, which is sent stamped {hour_start} (the hour's start) once the hour and the metering lock have passed; Marketplace takes that record only while {hour_start} is inside its window (24 hours, and last month's hours until 06:00 UTC on the 1st), which closes {closes}; the pipeline needs up to 20 minutes to reach it, and it is now {now}: the record can no longer be sent in time, so nothing was written. Write usage within the hour it happened, or soon after"
)]
pub struct Unsendable {
    /// The usage's own instant.
    pub stamped: String,
    /// Its hour's start, the instant its record is sent with.
    pub hour_start: String,
    /// When Marketplace's window for that record closed (or closes).
    pub closes: String,
    /// When it was written.
    pub now: String,
}

/// The earliest instant the record of `bucket` may be sent under `lock`: `lock` hours
/// after the hour's start (a lock of 1 is the hour itself), or, for an hour of a month
/// that has ended, 03:00 UTC on the 1st when that comes first (the month's lock drop).
pub fn first_send(bucket: HourBucket, lock: MeteringLockHours) -> Instant {
    let start = bucket.start();
    let locked_until = start + Duration::hours(lock.hours());
    let (year, month) = match start.month() {
        12 => (start.year() + 1, 1),
        month => (start.year(), month + 1),
    };
    // From 03:00 on the next month's 1st, `bucket` is last month's and drops the lock.
    let lock_drop = Utc
        .with_ymd_and_hms(year, month, 1, MONTH_LOCK_DROP_HOUR, 0, 0)
        .single()
        .unwrap_or(locked_until);
    locked_until.min(lock_drop)
}

/// How long the pipeline may take from a raw row's write to its record's send: the
/// discoverer's period (15 minutes), the aggregator's queue and the submitter's next run
/// (every minute), with room to spare. Usage written later than this before its
/// record's window closes could not be sent in time, so it is refused, not accepted and
/// aged out.
pub const PIPELINE_ROOM: Duration = Duration::minutes(20);

/// Whether usage stamped `stamped`, written at `now`, can still be billed: its hour's
/// record, first sendable at [`first_send`] under the longest lock, is sendable then or
/// now (whichever is later), with [`PIPELINE_ROOM`] for the pipeline to reach it,
/// inside Marketplace's window for it.
pub fn check_sendable(stamped: Instant, now: Instant) -> Result<(), Unsendable> {
    let bucket = HourBucket::containing(stamped);
    let sendable_from = first_send(bucket, MeteringLockHours::MAX).max(now);
    if !bucket_expired(bucket, sendable_from + PIPELINE_ROOM) {
        return Ok(());
    }
    // The window closes at the first whole hour the bucket is expired at: 24 h after
    // its start, or 06:00 on the next month's 1st, whichever comes first.
    let day_after = bucket.start() + Duration::hours(WINDOW_HOURS);
    let closes = (0..WINDOW_HOURS)
        .map(|h| bucket.start() + Duration::hours(h + 1))
        .find(|t| bucket_expired(bucket, *t))
        .unwrap_or(day_after);
    Err(Unsendable {
        stamped: format_instant(stamped),
        hour_start: format_instant(bucket.start()),
        closes: format_instant(closes),
        now: format_instant(now),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::time::{bucket_unlocked, parse_usage_timestamp};

    fn t(s: &str) -> Instant {
        parse_usage_timestamp(s).unwrap()
    }

    #[test]
    fn usage_whose_hour_left_the_window_is_refused_though_its_own_instant_is_inside() {
        // 10:50 written at 10:20 the next day: within 24 h of 10:50, not of 10:00.
        let refused = check_sendable(t("2026-11-29T10:50:00Z"), t("2026-11-30T10:20:00Z"));
        let why = refused.unwrap_err();
        assert_eq!(why.hour_start, "2026-11-29T10:00:00Z");
        assert_eq!(why.closes, "2026-11-30T10:00:00Z");
        assert!(why.to_string().contains("can no longer be sent"), "{why}");
        // Written 20 minutes (the pipeline's room) before 10:00 the next day it is sent
        // in time; later, the pipeline could not reach it before the window closes.
        assert!(check_sendable(t("2026-11-29T10:50:00Z"), t("2026-11-30T09:39:59Z")).is_ok());
        let late = check_sendable(t("2026-11-29T10:50:00Z"), t("2026-11-30T09:59:57Z"));
        let why = late.unwrap_err();
        assert_eq!(why.closes, "2026-11-30T10:00:00Z");
        assert!(why.to_string().contains("up to 20 minutes"), "{why}");
    }

    #[test]
    fn last_months_usage_is_taken_until_06_00_on_the_1st() {
        let last_second = t("2026-11-30T23:59:50Z");
        assert!(check_sendable(last_second, t("2026-11-30T23:59:55Z")).is_ok());
        assert!(check_sendable(last_second, t("2026-12-01T05:39:59Z")).is_ok());
        assert!(check_sendable(last_second, t("2026-12-01T05:45:00Z")).is_err());
        let why = check_sendable(last_second, t("2026-12-01T06:00:05Z")).unwrap_err();
        assert_eq!(why.closes, "2026-12-01T06:00:00Z");
        // An earlier hour of the 30th closes 24 h after its start, before 06:00.
        let why = check_sendable(t("2026-11-30T04:10:00Z"), t("2026-12-01T04:20:00Z")).unwrap_err();
        assert_eq!(why.closes, "2026-12-01T04:00:00Z");
    }

    #[test]
    fn the_first_send_is_the_hours_end_plus_the_lock_or_the_months_lock_drop() {
        let lock = MeteringLockHours::new(3).unwrap();
        let mid = HourBucket::containing(t("2026-11-15T10:20:00Z"));
        assert_eq!(first_send(mid, lock), t("2026-11-15T13:00:00Z"));
        let late = HourBucket::containing(t("2026-11-30T22:20:00Z"));
        assert_eq!(first_send(late, lock), t("2026-12-01T01:00:00Z"));
        let longest = HourBucket::containing(t("2026-11-30T10:20:00Z"));
        assert_eq!(
            first_send(longest, MeteringLockHours::MAX),
            t("2026-12-01T03:00:00Z")
        );
        // December's last hour: January's 1st.
        let year_end = HourBucket::containing(t("2026-12-31T23:20:00Z"));
        assert_eq!(
            first_send(year_end, MeteringLockHours::MAX),
            t("2027-01-01T03:00:00Z")
        );
    }

    #[test]
    fn every_lock_and_hour_agrees_with_the_pipelines_own_rules() {
        // For every lock and every hour around a month's end: the first send is when the
        // discoverer first walks the hour, and it is always inside the hour's window, so
        // the longest lock never refuses what a shorter one would send.
        let from = HourBucket::containing(t("2026-11-29T00:00:00Z"));
        for lock in 1..=20 {
            let lock = MeteringLockHours::new(lock).unwrap();
            for h in 0..72 {
                let bucket = from.plus_hours(h);
                let at = first_send(bucket, lock);
                assert!(bucket_unlocked(bucket, at, lock), "{bucket} {lock:?}");
                assert!(
                    !bucket_unlocked(bucket, at - Duration::seconds(1), lock),
                    "{bucket} {lock:?}: unlocked before {at}"
                );
                assert!(!bucket_expired(bucket, at), "{bucket} {lock:?}");
                assert!(first_send(bucket, MeteringLockHours::MAX) >= at);
            }
        }
    }
}

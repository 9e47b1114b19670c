//! UTC time rules: hour buckets, second-precision usage timestamps, the metering
//! window, `MeteringLockHours`, the month-boundary grace and the age-out edges.
//!
//! | rule | boundary |
//! |---|---|
//! | hour bucket | UTC hour, `YYYY-MM-DDTHH` |
//! | usage timestamp | `YYYY-MM-DDTHH:MM:SS` or `...SSZ`, both UTC; nothing else |
//! | API window | `t > now - 24h` and `t <= now` |
//! | month grace | a previous-month `t` is accepted only while `now < 1st 06:00 UTC` |
//! | completed hours | buckets `hour(now)-23 ..= hour(now)-lock`, oldest first |
//! | lock drop | on the 1st from 03:00 UTC, previous-month buckets ignore the lock |
//! | age-out | a bucket is expired once `start + 24h <= now`, or it is last month and `now >= 1st 06:00` |

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Datelike, Duration, NaiveDateTime, TimeZone, Timelike, Utc};
use serde::{Deserialize, Serialize};

/// A UTC instant with whole-second meaning.
pub type Instant = DateTime<Utc>;

/// Hours in the Marketplace submission window.
pub const WINDOW_HOURS: i64 = 24;
/// Hour of the 1st (UTC) until which previous-month records are accepted.
pub const MONTH_GRACE_END_HOUR: u32 = 6;
/// Hour of the 1st (UTC) from which previous-month buckets ignore the lock.
pub const MONTH_LOCK_DROP_HOUR: u32 = 3;

/// Formats an instant as ISO-8601 whole seconds with `Z` (`2026-11-30T10:15:42Z`).
pub fn format_instant(t: Instant) -> String {
    t.format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Parses an ISO-8601 whole-second instant with `Z` (the form [`format_instant`] writes).
pub fn parse_instant(s: &str) -> Option<Instant> {
    parse_usage_timestamp(s).ok().filter(|_| s.ends_with('Z'))
}

/// A usage timestamp that is not whole-second UTC `YYYY-MM-DDTHH:MM:SS[Z]`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("timestamp {0:?} is not whole-second UTC YYYY-MM-DDTHH:MM:SS (optionally ending in Z)")]
pub struct MalformedTimestamp(pub String);

/// Parses a usage-row timestamp: exactly `YYYY-MM-DDTHH:MM:SS` or the same plus `Z`.
/// Offsets, fractions, spaces and every other form are rejected.
pub fn parse_usage_timestamp(s: &str) -> Result<Instant, MalformedTimestamp> {
    let body = s.strip_suffix('Z').unwrap_or(s);
    let bytes = body.as_bytes();
    let shape_ok = bytes.len() == 19
        && bytes.iter().enumerate().all(|(i, b)| match i {
            4 | 7 => *b == b'-',
            10 => *b == b'T',
            13 | 16 => *b == b':',
            _ => b.is_ascii_digit(),
        });
    if !shape_ok {
        return Err(MalformedTimestamp(s.to_string()));
    }
    NaiveDateTime::parse_from_str(body, "%Y-%m-%dT%H:%M:%S")
        .map(|n| Utc.from_utc_datetime(&n))
        .map_err(|_| MalformedTimestamp(s.to_string()))
}

/// A UTC hour, printed `YYYY-MM-DDTHH`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct HourBucket(Instant);

impl HourBucket {
    /// The bucket containing `t`.
    pub fn containing(t: Instant) -> Self {
        let truncated = t
            .with_minute(0)
            .and_then(|t| t.with_second(0))
            .and_then(|t| t.with_nanosecond(0))
            .unwrap_or(t);
        HourBucket(truncated)
    }

    /// The first instant of the hour (the timestamp sent to Marketplace).
    pub fn start(&self) -> Instant {
        self.0
    }

    /// The bucket `hours` later (negative: earlier).
    pub fn plus_hours(&self, hours: i64) -> Self {
        HourBucket(self.0 + Duration::hours(hours))
    }

    /// The sort-key prefix `YYYY-MM-DDTHH` shared by every timestamp in the hour.
    pub fn key_prefix(&self) -> String {
        self.to_string()
    }

    /// Whether the bucket lies in an earlier calendar month than `now`.
    pub fn is_previous_month_of(&self, now: Instant) -> bool {
        (self.0.year(), self.0.month()) < (now.year(), now.month())
    }
}

#[cfg(feature = "schema")]
impl schemars::JsonSchema for HourBucket {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "HourBucket".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "pattern": "^\\d{4}-\\d{2}-\\d{2}T\\d{2}$",
            "description": "A UTC hour, YYYY-MM-DDTHH."
        })
    }
}

impl fmt::Display for HourBucket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0.format("%Y-%m-%dT%H"))
    }
}

/// Text that is not an hour bucket `YYYY-MM-DDTHH`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not an hour bucket YYYY-MM-DDTHH")]
pub struct MalformedHourBucket(pub String);

impl FromStr for HourBucket {
    type Err = MalformedHourBucket;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.len() != 13 {
            return Err(MalformedHourBucket(s.to_string()));
        }
        parse_usage_timestamp(&format!("{s}:00:00"))
            .map(HourBucket)
            .map_err(|_| MalformedHourBucket(s.to_string()))
    }
}

impl TryFrom<String> for HourBucket {
    type Error = MalformedHourBucket;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<HourBucket> for String {
    fn from(b: HourBucket) -> String {
        b.to_string()
    }
}

/// `MeteringLockHours`: how many hours an hour stays open for late usage (1..=20).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct MeteringLockHours(u8);

/// A `MeteringLockHours` outside 1..=20 (configuration error; never clamped).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("MeteringLockHours must be an integer from 1 to 20, got {0:?}")]
pub struct InvalidLockHours(pub String);

impl MeteringLockHours {
    /// The default: the just-completed hour is processed.
    pub const DEFAULT: MeteringLockHours = MeteringLockHours(1);
    /// The longest lock a stack may have.
    pub const MAX: MeteringLockHours = MeteringLockHours(20);

    /// Validates a lock in 1..=20.
    pub fn new(hours: i64) -> Result<Self, InvalidLockHours> {
        if (1..=Self::MAX.hours()).contains(&hours) {
            Ok(MeteringLockHours(hours as u8))
        } else {
            Err(InvalidLockHours(hours.to_string()))
        }
    }

    /// The lock in hours.
    pub fn hours(&self) -> i64 {
        i64::from(self.0)
    }
}

impl FromStr for MeteringLockHours {
    type Err = InvalidLockHours;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.trim()
            .parse::<i64>()
            .map_err(|_| InvalidLockHours(s.to_string()))
            .and_then(MeteringLockHours::new)
    }
}

/// Midnight UTC on the 1st of `now`'s month.
fn month_start(now: Instant) -> Instant {
    Utc.with_ymd_and_hms(now.year(), now.month(), 1, 0, 0, 0)
        .single()
        .unwrap_or(now)
}

/// Whether Marketplace accepts a record stamped `t` at `now`: within 24 h, not in the
/// future, and previous-month records only until 06:00 UTC on the 1st.
pub fn accepted_by_api(t: Instant, now: Instant) -> bool {
    if t > now || t <= now - Duration::hours(WINDOW_HOURS) {
        return false;
    }
    let grace_end = month_start(now) + Duration::hours(i64::from(MONTH_GRACE_END_HOUR));
    !(HourBucket::containing(t).is_previous_month_of(now) && now >= grace_end)
}

/// Whether a bucket has aged out at `now`: its start is 24 h or more ago, or it is
/// last month's and the month grace has ended. Expired buckets are never submitted.
/// A bucket that has not begun at `now` has not aged out (a run stamped a little
/// before an hour began must not expire that hour's records).
pub fn bucket_expired(bucket: HourBucket, now: Instant) -> bool {
    let start = bucket.start();
    start <= now && !accepted_by_api(start, now)
}

/// Whether `bucket`'s hour has completed and its lock has passed at `now`, so it may be
/// aggregated and submitted. Previous-month buckets drop the lock from 03:00 UTC on the 1st.
pub fn bucket_unlocked(bucket: HourBucket, now: Instant, lock: MeteringLockHours) -> bool {
    let current = HourBucket::containing(now);
    if bucket >= current {
        return false;
    }
    let lock_drop = month_start(now) + Duration::hours(i64::from(MONTH_LOCK_DROP_HOUR));
    if bucket.is_previous_month_of(now) && now >= lock_drop {
        return true;
    }
    bucket <= current.plus_hours(-lock.hours())
}

/// The completed, unlocked, unexpired buckets at `now`, oldest first: the buckets the
/// discoverer walks (`hour(now)-23 ..= hour(now)-lock`, with the month rules).
pub fn completed_buckets(now: Instant, lock: MeteringLockHours) -> Vec<HourBucket> {
    let current = HourBucket::containing(now);
    (1..WINDOW_HOURS)
        .rev()
        .map(|back| current.plus_hours(-back))
        .filter(|b| !bucket_expired(*b, now) && bucket_unlocked(*b, now, lock))
        .collect()
}

/// The buckets still inside the window at `now` (including locked and current ones),
/// oldest first: where pending aggregated records may sit.
pub fn live_buckets(now: Instant) -> Vec<HourBucket> {
    let current = HourBucket::containing(now);
    (0..WINDOW_HOURS)
        .rev()
        .map(|back| current.plus_hours(-back))
        .filter(|b| !bucket_expired(*b, now))
        .collect()
}

/// Expired buckets within `lookback_hours` before the window, oldest first: where the
/// age-out sweeps look for rows that were never processed.
pub fn expired_buckets(now: Instant, lookback_hours: i64) -> Vec<HourBucket> {
    let current = HourBucket::containing(now);
    (0..WINDOW_HOURS + lookback_hours)
        .rev()
        .map(|back| current.plus_hours(-back))
        .filter(|b| bucket_expired(*b, now))
        .collect()
}

/// Whether `bucket` is the oldest live bucket at `now` (the edge where deferred
/// zero-quantity records are submitted): the next hour would age it out.
pub fn at_oldest_edge(bucket: HourBucket, now: Instant) -> bool {
    !bucket_expired(bucket, now) && bucket_expired(bucket, now + Duration::hours(1))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn t(s: &str) -> Instant {
        parse_usage_timestamp(s).unwrap()
    }

    fn b(s: &str) -> HourBucket {
        s.parse().unwrap()
    }

    #[test]
    fn timestamps_accept_only_whole_second_utc() {
        let cases = [
            ("2026-11-30T10:15:42", true),
            ("2026-11-30T10:15:42Z", true),
            ("2026-11-30T10:15:42.123Z", false),
            ("2026-11-30T10:15:42+00:00", false),
            ("2026-11-30 10:15:42", false),
            ("2026-11-30T10:15", false),
            ("2026-02-30T10:15:42Z", false),
            ("2026-11-30T24:00:00Z", false),
            ("1764497742", false),
            ("", false),
            ("2026-11-30T10:15:42z", false),
        ];
        for (input, ok) in cases {
            assert_eq!(parse_usage_timestamp(input).is_ok(), ok, "{input}");
        }
    }

    #[test]
    fn hour_buckets_round_trip_and_truncate() {
        let bucket = HourBucket::containing(t("2026-11-30T23:59:59Z"));
        assert_eq!(bucket.to_string(), "2026-11-30T23");
        assert_eq!(bucket.plus_hours(1).to_string(), "2026-12-01T00");
        assert_eq!(
            b("2026-11-30T10"),
            HourBucket::containing(t("2026-11-30T10:00:00"))
        );
        assert!("2026-11-30T1".parse::<HourBucket>().is_err());
        assert!("2026-11-30T25".parse::<HourBucket>().is_err());
    }

    #[test]
    fn lock_hours_are_validated_not_clamped() {
        assert!(MeteringLockHours::new(0).is_err());
        assert!(MeteringLockHours::new(21).is_err());
        assert_eq!(MeteringLockHours::new(20).unwrap().hours(), 20);
        assert_eq!("1".parse::<MeteringLockHours>().unwrap().hours(), 1);
        let err = "abc".parse::<MeteringLockHours>().unwrap_err();
        assert!(err.to_string().contains("1 to 20"));
    }

    #[test]
    fn completed_window_is_now_minus_23_to_now_minus_lock_oldest_first() {
        let now = t("2026-11-30T10:30:00Z");
        let buckets = completed_buckets(now, MeteringLockHours::DEFAULT);
        assert_eq!(buckets.first().unwrap().to_string(), "2026-11-29T11");
        assert_eq!(buckets.last().unwrap().to_string(), "2026-11-30T09");
        assert_eq!(buckets.len(), 23);
        let locked = completed_buckets(now, MeteringLockHours::new(3).unwrap());
        assert_eq!(locked.last().unwrap().to_string(), "2026-11-30T07");
        assert_eq!(locked.len(), 21);
    }

    #[test]
    fn api_window_edges() {
        let now = t("2026-11-30T10:30:00Z");
        assert!(accepted_by_api(now, now));
        assert!(!accepted_by_api(now + Duration::seconds(1), now));
        assert!(accepted_by_api(t("2026-11-29T10:30:01Z"), now));
        assert!(!accepted_by_api(t("2026-11-29T10:30:00Z"), now));
    }

    #[test]
    fn day_rollover_23_59_59_to_00_00() {
        let now = t("2026-11-30T00:00:00Z");
        let buckets = completed_buckets(now, MeteringLockHours::DEFAULT);
        assert_eq!(buckets.last().unwrap().to_string(), "2026-11-29T23");
        let before = t("2026-11-29T23:59:59Z");
        assert_eq!(
            completed_buckets(before, MeteringLockHours::DEFAULT)
                .last()
                .unwrap()
                .to_string(),
            "2026-11-29T22"
        );
    }

    #[test]
    fn month_grace_accepts_previous_month_until_06_00_on_the_1st() {
        let last_hour = t("2026-11-30T23:10:00Z");
        assert!(accepted_by_api(last_hour, t("2026-12-01T05:59:59Z")));
        assert!(!accepted_by_api(last_hour, t("2026-12-01T06:00:00Z")));
        assert!(bucket_expired(
            b("2026-11-30T23"),
            t("2026-12-01T06:00:00Z")
        ));
        assert!(!bucket_expired(
            b("2026-11-30T23"),
            t("2026-12-01T05:59:00Z")
        ));
        // The new month's own hours follow the plain 24 h rule.
        assert!(accepted_by_api(
            t("2026-12-01T00:10:00Z"),
            t("2026-12-01T06:00:00Z")
        ));
    }

    #[test]
    fn month_lock_drops_for_previous_month_from_03_00_on_the_1st() {
        let lock = MeteringLockHours::new(5).unwrap();
        let last = b("2026-11-30T23");
        assert!(!bucket_unlocked(last, t("2026-12-01T02:59:59Z"), lock));
        assert!(bucket_unlocked(last, t("2026-12-01T03:00:00Z"), lock));
        assert!(completed_buckets(t("2026-12-01T05:59:00Z"), lock).contains(&last));
        assert!(!completed_buckets(t("2026-12-01T06:00:00Z"), lock).contains(&last));
        // A new-month bucket still honours the lock at 03:00.
        assert!(!bucket_unlocked(
            b("2026-12-01T00"),
            t("2026-12-01T03:00:00Z"),
            lock
        ));
    }

    #[test]
    fn age_out_and_oldest_edge() {
        let now = t("2026-11-30T10:30:00Z");
        assert!(!bucket_expired(b("2026-11-29T11"), now));
        assert!(bucket_expired(b("2026-11-29T10"), now));
        // An hour that has not begun has not aged out (a run stamped just before it).
        assert!(!bucket_expired(
            b("2026-11-30T11"),
            t("2026-11-30T10:59:40Z")
        ));
        assert!(!bucket_expired(
            b("2026-12-01T00"),
            t("2026-11-30T23:59:59Z")
        ));
        assert!(at_oldest_edge(b("2026-11-29T11"), now));
        assert!(!at_oldest_edge(b("2026-11-29T12"), now));
        let expired = expired_buckets(now, 24);
        assert_eq!(expired.last().unwrap().to_string(), "2026-11-29T10");
        assert_eq!(expired.len(), 24);
        assert_eq!(live_buckets(now).len(), 24);
    }
}

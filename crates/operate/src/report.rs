//! `awsmp report`: the series behind the operator's HTML page (billed quantity per hour
//! and dimension, status mix per hour, failures by reason), computed with the rules of
//! `status` and `failures` so the page never disagrees with them; the CLI renders it as
//! one HTML page.

use std::collections::BTreeMap;

use serde::Serialize;

use super::failures::failures;
use super::status::{HourCounts, StatusInputs, status};
use awsmp_core::model::{AggregatedRecord, AggregatedStatus, RawUsageRow};
use awsmp_core::ports::MalformedItem;
use awsmp_core::time::{HourBucket, Instant};

/// The most hours one chart's axis spans; data outside it stays in the tables.
pub const MAX_AXIS_HOURS: i64 = 24 * 31;

/// Failures of one kind: a status and its stored reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Rejection {
    /// `RejectedClientSide`, `AggregationExpired`, `Error`, `CustomerNotSubscribed` or
    /// `SubmissionExpired`.
    pub status: &'static str,
    /// The stored reason (client-side reason code, exception name, or what makes an
    /// item unreadable).
    pub reason: Option<String>,
    /// The server-side exception the reason stands for, when there is one.
    pub server_side: Option<String>,
    /// Rows or records of this kind.
    pub count: u64,
    /// Their readable quantity.
    pub quantity: i64,
}

/// One Region's series.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Series {
    /// The first hour asked for (`hours` back, ending with the current hour).
    pub from: HourBucket,
    /// The current hour.
    pub to: HourBucket,
    /// The charts' first hour: `from`, or earlier when older usage is still pending.
    pub axis_from: HourBucket,
    /// The charts' last hour: `to`, or later when a row carries a future hour.
    pub axis_to: HourBucket,
    /// Hours with data that fall outside the axis (at most [`MAX_AXIS_HOURS`] long);
    /// they are in the tables only.
    pub hours_off_axis: u64,
    /// Every dimension billed in the range, sorted.
    pub dimensions: Vec<String>,
    /// Quantity billed per hour and dimension (hours with something billed only).
    pub billed: BTreeMap<HourBucket, BTreeMap<String, i64>>,
    /// `awsmp status`'s counts per hour (rows by state, records by status).
    pub status: BTreeMap<HourBucket, HourCounts>,
    /// `awsmp failures` grouped by status and reason, most frequent first.
    pub rejections: Vec<Rejection>,
    /// Raw rows whose hour cannot be read.
    pub rows_unplaced: u64,
    /// Aggregated items that cannot be read as records.
    pub records_unreadable: u64,
}

impl Series {
    /// Every hour on the charts' axis, oldest first.
    pub fn axis(&self) -> Vec<HourBucket> {
        let mut out = Vec::new();
        let mut hour = self.axis_from;
        while hour <= self.axis_to {
            out.push(hour);
            hour = hour.plus_hours(1);
        }
        out
    }

    /// Total quantity billed in the range.
    pub fn quantity_billed(&self) -> i64 {
        self.billed.values().flat_map(|d| d.values()).sum()
    }
}

/// The whole page: the deployment and each Region's series.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct ReportPage {
    /// Product code, when the deployment was named by it.
    pub product_code: Option<String>,
    /// Stage, when the deployment was named by it.
    pub stage: Option<String>,
    /// When the tables were read.
    #[serde(serialize_with = "crate::serialize_instant")]
    pub generated: Instant,
    /// Hours asked for.
    pub hours: u32,
    /// One entry per metering Region.
    pub regions: Vec<RegionReport>,
}

/// One Region's part of the page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct RegionReport {
    /// Metering Region.
    pub region: String,
    /// Main stack, when known.
    pub stack: Option<String>,
    /// Its series.
    #[serde(flatten)]
    pub series: Series,
}

/// The series at `now` over the last `hours` hours, from what the operator store pages
/// (the same rows, records and unreadable items `status` and `failures` read).
pub fn series(
    rows: &[RawUsageRow],
    records: &[AggregatedRecord],
    unreadable: &[MalformedItem],
    now: Instant,
    hours: u32,
) -> Series {
    let counts = status(
        StatusInputs {
            rows,
            records,
            records_unreadable: unreadable.len() as u64,
            queues: &[],
            deprovisioning: 0,
            requests_per_second: crate::status::DEFAULT_REQUESTS_PER_SECOND,
        },
        now,
        hours,
    );
    let from = counts.from;
    let to = HourBucket::containing(now);

    // Billed is what `status` counts as billed, split by dimension.
    let mut billed: BTreeMap<HourBucket, BTreeMap<String, i64>> = BTreeMap::new();
    for record in records.iter().filter(|r| r.key.hour >= from) {
        if matches!(
            record.status,
            AggregatedStatus::Success | AggregatedStatus::DuplicateRecord
        ) {
            *billed
                .entry(record.key.hour)
                .or_default()
                .entry(record.key.dimension.clone())
                .or_default() += record.quantity_to_send();
        }
    }
    let dimensions: Vec<String> = billed
        .values()
        .flat_map(|d| d.keys().cloned())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();

    let mut kinds: BTreeMap<(&'static str, Option<String>), Rejection> = BTreeMap::new();
    for failure in failures(rows, records, unreadable, from, now) {
        let kind = kinds
            .entry((failure.status, failure.reason.clone()))
            .or_insert_with(|| Rejection {
                status: failure.status,
                reason: failure.reason.clone(),
                server_side: failure.server_side.clone(),
                count: 0,
                quantity: 0,
            });
        kind.count += 1;
        kind.quantity += failure.quantity.unwrap_or(0);
    }
    let mut rejections: Vec<Rejection> = kinds.into_values().collect();
    rejections.sort_by_key(|r| std::cmp::Reverse(r.count));

    let earliest = counts.hours.keys().next().copied().unwrap_or(from);
    let latest = counts.hours.keys().next_back().copied().unwrap_or(to);
    let axis_to = latest.max(to).min(to.plus_hours(MAX_AXIS_HOURS / 4));
    let axis_from = earliest
        .min(from)
        .max(axis_to.plus_hours(1 - MAX_AXIS_HOURS));
    let hours_off_axis = counts
        .hours
        .keys()
        .filter(|h| **h < axis_from || **h > axis_to)
        .count() as u64;

    Series {
        from,
        to,
        axis_from,
        axis_to,
        hours_off_axis,
        dimensions,
        billed,
        status: counts.hours,
        rejections,
        rows_unplaced: counts.rows_unplaced,
        records_unreadable: counts.records_unreadable,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use awsmp_core::memory::fixtures::operator_record;
    use awsmp_core::memory::reference_row;
    use awsmp_core::model::{Attr, attr};
    use awsmp_core::time::parse_usage_timestamp;

    const LIC: &str = "arn:aws:license-manager::123456789012:license:l-1";

    fn at(text: &str) -> Instant {
        parse_usage_timestamp(text).unwrap()
    }

    fn rejected(timestamp: &str, reason: &str, quantity: i64) -> RawUsageRow {
        let mut row = reference_row(LIC, "111122223333", "api", timestamp, quantity);
        row.attrs.remove(attr::METERING_PENDING);
        for (k, v) in [
            (attr::METERING_STATUS, "RejectedClientSide"),
            (attr::METERING_STATUS_REASON, reason),
        ] {
            row.attrs.insert(k.into(), Attr::S(v.into()));
        }
        row
    }

    #[test]
    fn splits_what_status_bills_by_hour_and_dimension() {
        // GIVEN two dimensions billed over two hours (one by an earlier attempt), an
        // error, a pending record, and a billed record before the range.
        let now = at("2026-11-30T12:30:00Z");
        let records = [
            operator_record("api", "2026-11-30T10", AggregatedStatus::Success, 3, None),
            operator_record("seats", "2026-11-30T10", AggregatedStatus::Success, 2, None),
            operator_record(
                "api",
                "2026-11-30T11",
                AggregatedStatus::DuplicateRecord,
                5,
                None,
            ),
            operator_record(
                "api",
                "2026-11-30T11",
                AggregatedStatus::Error,
                7,
                Some("X"),
            ),
            operator_record("api", "2026-11-30T12", AggregatedStatus::Pending, 1, None),
            operator_record("api", "2026-11-29T01", AggregatedStatus::Success, 100, None),
        ];
        // WHEN the series covers the last 6 hours
        let s = series(&[], &records, &[], now, 6);
        // THEN billed holds exactly the billed records in range, per dimension
        let ten: HourBucket = "2026-11-30T10".parse().unwrap();
        let eleven: HourBucket = "2026-11-30T11".parse().unwrap();
        assert_eq!(
            s.billed,
            BTreeMap::from([
                (
                    ten,
                    BTreeMap::from([("api".into(), 3), ("seats".into(), 2)])
                ),
                (eleven, BTreeMap::from([("api".into(), 5)])),
            ])
        );
        assert_eq!(s.dimensions, vec!["api".to_string(), "seats".to_string()]);
        assert_eq!(s.quantity_billed(), 10);
        // and each hour's sum is what `awsmp status` shows as quantity billed.
        for (hour, dims) in &s.billed {
            assert_eq!(dims.values().sum::<i64>(), s.status[hour].quantity_billed);
        }
        assert_eq!(s.status[&eleven].records_error, 1);
        assert_eq!(
            s.status[&"2026-11-30T12".parse().unwrap()].records_pending,
            1
        );
        assert_eq!(
            (s.from, s.to),
            (
                "2026-11-30T07".parse().unwrap(),
                "2026-11-30T12".parse().unwrap()
            )
        );
        assert_eq!(s.axis().len(), 6);
        assert_eq!(s.hours_off_axis, 0);
    }

    #[test]
    fn groups_failures_by_status_and_reason_most_frequent_first() {
        let now = at("2026-11-30T12:30:00Z");
        let rows = [
            rejected("2026-11-30T10:01:00Z", "TooManyTags", 2),
            rejected("2026-11-30T10:02:00Z", "NegativeQuantity", 0),
            rejected("2026-11-30T11:03:00Z", "TooManyTags", 3),
            // Before the range: not counted.
            rejected("2026-11-28T11:03:00Z", "TooManyTags", 3),
        ];
        let records = [operator_record(
            "api",
            "2026-11-30T11",
            AggregatedStatus::Error,
            4,
            Some("InvalidUsageDimensionException"),
        )];
        let unreadable = [MalformedItem {
            license_arn: LIC.into(),
            sort_key: "x".into(),
            problem: "no quantity".into(),
        }];
        let s = series(&rows, &records, &unreadable, now, 24);
        let kinds: Vec<_> = s
            .rejections
            .iter()
            .map(|r| (r.status, r.reason.as_deref(), r.count, r.quantity))
            .collect();
        assert_eq!(kinds[0], ("RejectedClientSide", Some("TooManyTags"), 2, 5));
        assert!(kinds.contains(&("Error", Some("InvalidUsageDimensionException"), 1, 4)));
        assert!(kinds.contains(&("Error", Some("no quantity"), 1, 0)));
        assert!(kinds.contains(&("RejectedClientSide", Some("NegativeQuantity"), 1, 0)));
        assert_eq!(kinds.len(), 4);
        assert_eq!(
            s.rejections[0].server_side.as_deref(),
            Some("InvalidTagException")
        );
        assert_eq!(s.records_unreadable, 1);
    }

    #[test]
    fn the_axis_reaches_back_to_old_pending_usage_but_stays_bounded() {
        let now = at("2026-11-30T12:30:00Z");
        let pending = |ts| reference_row(LIC, "111122223333", "api", ts, 1);
        // Pending usage 20 hours old is shown though only 3 hours were asked for.
        let rows = [pending("2026-11-29T16:10:00Z")];
        let s = series(&rows, &[], &[], now, 3);
        assert_eq!(s.axis_from, "2026-11-29T16".parse().unwrap());
        assert_eq!(s.axis().len(), 21);
        // A pending row from a year ago does not stretch the axis to a year.
        let rows = [pending("2025-11-29T16:10:00Z")];
        let s = series(&rows, &[], &[], now, 3);
        assert_eq!(s.axis().len() as i64, MAX_AXIS_HOURS);
        assert_eq!(s.hours_off_axis, 1);
        assert_eq!(s.axis_to, s.to);
    }
}

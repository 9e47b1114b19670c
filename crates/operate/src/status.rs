//! `awsmp status`: one Region's metering at a glance. Per hour, raw rows pending /
//! counted / rejected / expired and records pending / billed / error / not subscribed
//! / expired; the oldest pending usage against the 24 h window; with the buyers' rate
//! cards, what the billed usage is worth (an estimate) and which billed dimensions no
//! agreement prices (usage given away); and what needs attention first.

use std::collections::BTreeMap;

use chrono::Duration;
use serde::Serialize;

use super::rows::{RowState, row_hour, row_state};
use awsmp_core::model::{AggregatedRecord, AggregatedStatus, RawUsageRow};
use awsmp_core::submit::schedule::scheduled_records_per_hour;
use awsmp_core::time::{HourBucket, Instant, WINDOW_HOURS};

/// One hour's counts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct HourCounts {
    /// Raw rows awaiting aggregation.
    pub rows_pending: u64,
    /// Raw rows counted into a record.
    pub rows_counted: u64,
    /// Raw rows rejected client-side.
    pub rows_rejected: u64,
    /// Raw rows aged out unaggregated.
    pub rows_expired: u64,
    /// Aggregated records awaiting submission.
    pub records_pending: u64,
    /// Records billed (`Success`, or `DuplicateRecord`: billed by an earlier send).
    pub records_billed: u64,
    /// Quantity billed.
    pub quantity_billed: i64,
    /// Records that ended `Error`.
    pub records_error: u64,
    /// Records that ended `CustomerNotSubscribed`.
    pub records_not_subscribed: u64,
    /// Records that aged out unsent.
    pub records_expired: u64,
    /// Records a dry run would have sent.
    pub records_dry_run: u64,
}

/// One queue's depth, as the status screen shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct QueueDepth {
    /// The queue's role (`work`, `cleanup`, ...).
    pub name: String,
    /// Messages visible or in flight.
    pub depth: u64,
    /// Messages in its dead-letter queue, when it has one.
    pub dead_letters: Option<u64>,
}

/// How soon something must be looked at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Urgency {
    /// Money is being lost or soon will be.
    Urgent,
    /// Something failed and may be fixable.
    Warning,
    /// Worth knowing.
    Info,
}

/// One line of "what needs attention first".
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Attention {
    /// How soon.
    pub urgency: Urgency,
    /// What, and what to do.
    pub message: String,
}

/// Raw rows per second one hour's `metering_pending` key takes (one partition's
/// 1,000 WCU/s at <= 1 KB a row; docs/performance.md, "Scale on paper").
pub const PENDING_KEY_ROWS_PER_SECOND: u64 = 1_000;
/// The submitter's share of the quota when the stack does not say (the whole quota).
pub const DEFAULT_REQUESTS_PER_SECOND: u32 = 10;

/// What is waiting to be sent, and how long the submitter takes to send it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Backlog {
    /// Aggregated records pending, every hour.
    pub records_pending: u64,
    /// Raw rows still to be aggregated (each becomes part of a record).
    pub rows_pending: u64,
    /// The stack's share of the account's `BatchMeterUsage` quota (requests/s).
    pub requests_per_second: u32,
    /// Records an hour the submitter sends at that share with a backlog
    /// (`awsmp_core::submit::schedule::scheduled_records_per_hour`).
    pub records_per_hour: u64,
    /// Minutes to send every pending record at that rate (rounded up).
    pub drain_minutes: u64,
}

/// How close the busiest hour of the window came to each documented limit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Limits {
    /// The hour with the most raw rows, and how many.
    pub busiest_ingest_hour: Option<(HourBucket, u64)>,
    /// Its rows as thousandths of what one `metering_pending` key takes in an hour.
    pub ingest_per_mille: u64,
    /// The hour with the most aggregated records, and how many.
    pub busiest_records_hour: Option<(HourBucket, u64)>,
    /// Its records as thousandths of what the submitter sends in an hour at the quota.
    pub records_per_mille: u64,
}

/// One Region's status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct StatusReport {
    /// When it was taken.
    #[serde(serialize_with = "crate::serialize_instant")]
    pub now: Instant,
    /// The first hour shown.
    pub from: HourBucket,
    /// Counts per hour, oldest first (only hours with something in them).
    pub hours: BTreeMap<HourBucket, HourCounts>,
    /// The oldest hour with pending usage (raw or aggregated).
    pub oldest_pending: Option<HourBucket>,
    /// Hours until that usage leaves Marketplace's 24 h window (negative: already out).
    pub oldest_pending_hours_left: Option<i64>,
    /// Raw rows whose hour cannot be read (malformed timestamps).
    pub rows_unplaced: u64,
    /// Aggregated items that cannot be read as records.
    pub records_unreadable: u64,
    /// Queue depths.
    pub queues: Vec<QueueDepth>,
    /// Subscribers in their final-usage window (deprovisioning).
    pub deprovisioning: u64,
    /// What is waiting to be sent and how long it takes.
    pub backlog: Backlog,
    /// How close the busiest hour came to the documented limits.
    pub limits: Limits,
    /// What the billed usage of the hours shown is worth, estimated from each buyer's
    /// agreement terms (`null` when not asked: `--no-charges`, or no subscribers table).
    pub charges: Option<crate::report::Charges>,
    /// What needs attention, most urgent first.
    pub attention: Vec<Attention>,
}

/// Everything the status screen is computed from.
#[derive(Debug, Clone, Copy)]
pub struct StatusInputs<'a> {
    /// Raw rows (markers are skipped).
    pub rows: &'a [RawUsageRow],
    /// Aggregated records.
    pub records: &'a [AggregatedRecord],
    /// Aggregated items that could not be read.
    pub records_unreadable: u64,
    /// Queue depths.
    pub queues: &'a [QueueDepth],
    /// Subscribers deprovisioning.
    pub deprovisioning: u64,
    /// The stack's share of the quota (`MeteringRequestsPerSecond`).
    pub requests_per_second: u32,
    /// Each billed license's rate card, and why some could not be read, when asked.
    pub rate_cards: Option<(
        &'a BTreeMap<String, awsmp_core::charges::RateCard>,
        Option<&'a str>,
    )>,
}

/// The status at `now` for hours from `hours` back (pending usage older than that is
/// still counted: it is what matters most).
pub fn status(inputs: StatusInputs<'_>, now: Instant, hours: u32) -> StatusReport {
    let from = HourBucket::containing(now).plus_hours(-i64::from(hours.saturating_sub(1)));
    let mut by_hour: BTreeMap<HourBucket, HourCounts> = BTreeMap::new();
    let mut rows_unplaced = 0;
    let mut oldest_pending: Option<HourBucket> = None;
    let mut note_pending = |hour: HourBucket| {
        oldest_pending = Some(oldest_pending.map_or(hour, |o| o.min(hour)));
    };
    for row in inputs.rows {
        let Some(state) = row_state(row) else {
            continue;
        };
        let Some(hour) = row_hour(row) else {
            rows_unplaced += 1;
            continue;
        };
        if state == RowState::Pending {
            note_pending(hour);
        }
        if hour < from && state != RowState::Pending {
            continue;
        }
        let counts = by_hour.entry(hour).or_default();
        match state {
            RowState::Pending => counts.rows_pending += 1,
            RowState::Counted => counts.rows_counted += 1,
            RowState::Rejected(_) => counts.rows_rejected += 1,
            RowState::Expired => counts.rows_expired += 1,
        }
    }
    for record in inputs.records {
        let hour = record.key.hour;
        if record.is_pending() {
            note_pending(hour);
        } else if hour < from {
            continue;
        }
        let counts = by_hour.entry(hour).or_default();
        match record.status {
            AggregatedStatus::Pending => counts.records_pending += 1,
            AggregatedStatus::Success | AggregatedStatus::DuplicateRecord => {
                counts.records_billed += 1;
                counts.quantity_billed += record.quantity_to_send();
            }
            AggregatedStatus::Error => counts.records_error += 1,
            AggregatedStatus::CustomerNotSubscribed => counts.records_not_subscribed += 1,
            AggregatedStatus::SubmissionExpired => counts.records_expired += 1,
            AggregatedStatus::DryRunSubmitted => counts.records_dry_run += 1,
        }
    }
    let hours_left = oldest_pending.map(|h| {
        let closes = h.start() + Duration::hours(WINDOW_HOURS);
        (closes - now).num_minutes().div_euclid(60)
    });
    let mut report = StatusReport {
        now,
        from,
        hours: by_hour,
        oldest_pending,
        oldest_pending_hours_left: hours_left,
        rows_unplaced,
        records_unreadable: inputs.records_unreadable,
        queues: inputs.queues.to_vec(),
        deprovisioning: inputs.deprovisioning,
        backlog: Backlog {
            records_pending: 0,
            rows_pending: 0,
            requests_per_second: inputs.requests_per_second,
            records_per_hour: 0,
            drain_minutes: 0,
        },
        limits: Limits {
            busiest_ingest_hour: None,
            ingest_per_mille: 0,
            busiest_records_hour: None,
            records_per_mille: 0,
        },
        charges: inputs.rate_cards.map(|(cards, unavailable)| {
            crate::report::charges(inputs.records, from, cards, unavailable.map(str::to_string))
        }),
        attention: Vec::new(),
    };
    report.backlog = backlog(&report.hours, inputs.requests_per_second);
    report.limits = limits(&report.hours, report.backlog.records_per_hour);
    report.attention = attention(&report);
    report
}

fn backlog(hours: &BTreeMap<HourBucket, HourCounts>, requests_per_second: u32) -> Backlog {
    let records_pending: u64 = hours.values().map(|c| c.records_pending).sum();
    let records_per_hour = scheduled_records_per_hour(requests_per_second).max(1);
    Backlog {
        records_pending,
        rows_pending: hours.values().map(|c| c.rows_pending).sum(),
        requests_per_second,
        records_per_hour,
        drain_minutes: (records_pending * 60).div_ceil(records_per_hour),
    }
}

fn limits(hours: &BTreeMap<HourBucket, HourCounts>, records_per_hour: u64) -> Limits {
    let busiest = |count: fn(&HourCounts) -> u64| {
        hours
            .iter()
            .map(|(h, c)| (*h, count(c)))
            .filter(|(_, n)| *n > 0)
            .max_by_key(|(h, n)| (*n, std::cmp::Reverse(*h)))
    };
    let ingest = busiest(|c| c.rows_pending + c.rows_counted + c.rows_rejected + c.rows_expired);
    let records = busiest(|c| {
        c.records_pending
            + c.records_billed
            + c.records_error
            + c.records_not_subscribed
            + c.records_expired
            + c.records_dry_run
    });
    let per_mille = |n: u64, of: u64| n.saturating_mul(1000) / of;
    Limits {
        ingest_per_mille: ingest
            .map_or(0, |(_, n)| per_mille(n, PENDING_KEY_ROWS_PER_SECOND * 3600)),
        busiest_ingest_hour: ingest,
        records_per_mille: records.map_or(0, |(_, n)| per_mille(n, records_per_hour.max(1))),
        busiest_records_hour: records,
    }
}

/// `95 min` as `1 h 35 min`; under an hour as minutes.
pub fn minutes_text(minutes: u64) -> String {
    match (minutes / 60, minutes % 60) {
        (0, m) => format!("{m} min"),
        (h, 0) => format!("{h} h"),
        (h, m) => format!("{h} h {m} min"),
    }
}

fn attention(report: &StatusReport) -> Vec<Attention> {
    let mut out = Vec::new();
    let mut add = |urgency, message: String| out.push(Attention { urgency, message });
    if let (Some(hour), Some(left)) = (report.oldest_pending, report.oldest_pending_hours_left) {
        // Past the lock plus a few runs, pending usage means a stage is not keeping up.
        if left < 20 {
            add(
                if left < 6 {
                    Urgency::Urgent
                } else {
                    Urgency::Warning
                },
                format!(
                    "usage of {hour} is still pending and leaves the 24 h window in {left} h: check the discoverer, aggregator and submitter (alarms, logs, DLQs)"
                ),
            );
        }
    }
    if let Some(charges) = &report.charges {
        for u in &charges.unpriced {
            add(
                Urgency::Warning,
                format!(
                    "{} of dimension {} billed to license {} (account {}) is priced by no term of the buyer's agreement: on a private offer Marketplace bills nothing for it (usage given away); offer a replacement that prices it, or stop metering the dimension",
                    u.quantity, u.dimension, u.license_arn, u.customer_aws_account_id
                ),
            );
        }
        if let Some(why) = &charges.unavailable {
            add(
                Urgency::Info,
                format!("estimated charges incomplete: {why}"),
            );
        }
    }
    let backlog = &report.backlog;
    if let (Some(hour), Some(left)) = (report.oldest_pending, report.oldest_pending_hours_left) {
        // Sent oldest first: the last of the backlog goes out after all of it.
        if backlog.records_pending > 0
            && backlog.drain_minutes > u64::try_from(left.max(0) * 60).unwrap_or(0)
        {
            add(
                Urgency::Urgent,
                format!(
                    "{} pending record(s) take about {} to send at {} requests/s, but usage of {hour} leaves the 24 h window in {left} h: records will age out unbilled; raise MeteringRequestsPerSecond (the stack's share of the quota) or ask AWS Marketplace for a higher BatchMeterUsage quota",
                    backlog.records_pending,
                    minutes_text(backlog.drain_minutes),
                    backlog.requests_per_second
                ),
            );
        }
    }
    for queue in &report.queues {
        if let Some(dead) = queue.dead_letters.filter(|d| *d > 0) {
            add(
                Urgency::Urgent,
                format!(
                    "{dead} message(s) in the {} queue's DLQ: read one, fix the cause, then `awsmp dlq redrive {}`",
                    queue.name, queue.name
                ),
            );
        }
    }
    let total = |f: fn(&HourCounts) -> u64| report.hours.values().map(f).sum::<u64>();
    // Counts over the hours shown, each told only when it is not zero.
    type Counted = (u64, Urgency, fn(u64) -> String);
    let counted: [Counted; 4] = [
        (total(|c| c.records_error), Urgency::Warning, |errors| {
            format!(
                "{errors} record(s) ended Error: `awsmp failures` says why; fix the cause, then `awsmp replay` inside the 24 h window"
            )
        }),
        (total(|c| c.rows_rejected), Urgency::Warning, |rejected| {
            format!(
                "{rejected} usage row(s) rejected client-side: `awsmp failures` lists each with its reason code"
            )
        }),
        (
            total(|c| c.rows_expired + c.records_expired),
            Urgency::Warning,
            |expired| format!("{expired} row(s)/record(s) aged out unbilled: `awsmp failures`"),
        ),
        (
            total(|c| c.records_not_subscribed),
            Urgency::Info,
            |not_subscribed| {
                format!(
                    "{not_subscribed} record(s) CustomerNotSubscribed (final, not retried): `awsmp inspect license ARN`"
                )
            },
        ),
    ];
    for (count, urgency, message) in counted {
        if count > 0 {
            add(urgency, message(count));
        }
    }
    if report.rows_unplaced > 0 || report.records_unreadable > 0 {
        add(
            Urgency::Warning,
            format!(
                "{} row(s) with an unreadable timestamp and {} unreadable aggregated item(s): `awsmp failures`",
                report.rows_unplaced, report.records_unreadable
            ),
        );
    }
    let limits = &report.limits;
    if limits.ingest_per_mille >= 500 || limits.records_per_mille >= 500 {
        add(
            Urgency::Warning,
            format!(
                "the busiest hour used {}.{}% of one hour's metering_pending key and {}.{}% of the submitter's hourly quota: see docs/performance.md, \"Scale on paper\" (direct-submit, batching, a quota increase)",
                limits.ingest_per_mille / 10,
                limits.ingest_per_mille % 10,
                limits.records_per_mille / 10,
                limits.records_per_mille % 10
            ),
        );
    }
    if report.deprovisioning > 0 {
        add(
            Urgency::Info,
            format!(
                "{} subscriber(s) deprovisioning: their final usage is sent first",
                report.deprovisioning
            ),
        );
    }
    out.sort_by_key(|a| a.urgency);
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use awsmp_core::memory::reference_row;
    use awsmp_core::model::{Attr, attr};
    use awsmp_core::time::parse_usage_timestamp;

    const LIC: &str = "arn:aws:license-manager::123456789012:license:l-1";

    fn record(hour: &str, status: AggregatedStatus, quantity: i64) -> AggregatedRecord {
        awsmp_core::memory::fixtures::operator_record("api", hour, status, quantity, None)
    }

    #[test]
    fn counts_each_hour_and_puts_the_closing_window_first() {
        let now = parse_usage_timestamp("2026-11-30T12:30:00Z").unwrap();
        let mut counted = reference_row(LIC, "111122223333", "api", "2026-11-30T10:15:00Z", 3);
        counted.attrs.remove(attr::METERING_PENDING);
        counted
            .attrs
            .insert(attr::METERING_STATUS.into(), Attr::S("Aggregated".into()));
        let old = reference_row(LIC, "111122223333", "api", "2026-11-29T14:00:00Z", 1);
        let rows = [counted, old];
        let records = [
            record("2026-11-30T10", AggregatedStatus::Success, 3),
            record("2026-11-30T11", AggregatedStatus::Error, 5),
        ];
        let queues = [QueueDepth {
            name: "work".into(),
            depth: 0,
            dead_letters: Some(2),
        }];
        let report = status(
            StatusInputs {
                rows: &rows,
                records: &records,
                records_unreadable: 0,
                queues: &queues,
                deprovisioning: 0,
                requests_per_second: DEFAULT_REQUESTS_PER_SECOND,
                rate_cards: None,
            },
            now,
            6,
        );
        let ten = &report.hours[&"2026-11-30T10".parse().unwrap()];
        assert_eq!(
            (ten.rows_counted, ten.records_billed, ten.quantity_billed),
            (1, 1, 3)
        );
        // The 22.5 h old pending row is shown though it is before the 6 hours asked.
        let old_hour: HourBucket = "2026-11-29T14".parse().unwrap();
        assert_eq!(report.hours[&old_hour].rows_pending, 1);
        assert_eq!(report.oldest_pending, Some(old_hour));
        assert_eq!(report.oldest_pending_hours_left, Some(1));
        assert_eq!(report.attention[0].urgency, Urgency::Urgent);
        assert!(
            report.attention[0].message.contains("2026-11-29T14"),
            "{:?}",
            report.attention
        );
        assert!(report.attention.iter().any(|a| a.message.contains("DLQ")));
        assert_eq!(
            report.limits.busiest_records_hour,
            Some(("2026-11-30T10".parse().unwrap(), 1))
        );
        assert_eq!(report.limits.records_per_mille, 0);
        assert!(
            report
                .attention
                .iter()
                .any(|a| a.message.contains("1 record(s) ended Error"))
        );
    }

    #[test]
    fn the_backlog_says_how_long_it_takes_and_warns_before_usage_ages_out() {
        let now = parse_usage_timestamp("2026-11-30T12:30:00Z").unwrap();
        // 90,000 records pending, the oldest from 2026-11-29T16 (3 h 30 min left in the window).
        let records: Vec<AggregatedRecord> = (0..90_000)
            .map(|i| {
                let mut r = record(
                    if i % 2 == 0 {
                        "2026-11-29T16"
                    } else {
                        "2026-11-30T11"
                    },
                    AggregatedStatus::Pending,
                    1,
                );
                r.key.license_arn = format!("arn:aws:license-manager::123456789012:license:l-{i}");
                r
            })
            .collect();
        let at = |requests_per_second| {
            status(
                StatusInputs {
                    rows: &[],
                    records: &records,
                    records_unreadable: 0,
                    queues: &[],
                    deprovisioning: 0,
                    requests_per_second,
                    rate_cards: None,
                },
                now,
                24,
            )
        };
        let full = at(10);
        assert_eq!(full.backlog.records_pending, 90_000);
        assert_eq!(full.backlog.records_per_hour, 870_000);
        assert_eq!(full.backlog.drain_minutes, 7);
        assert_eq!(full.oldest_pending_hours_left, Some(3));
        assert!(
            !full
                .attention
                .iter()
                .any(|a| a.message.contains("take about")),
            "{:?}",
            full.attention
        );
        // At 1 request/s: 87,000 an hour, about 63 minutes; still inside 3 h.
        assert_eq!(at(1).backlog.drain_minutes, 63);
        // A backlog ten times larger at 1 request/s takes over 10 h: urgent.
        let many: Vec<AggregatedRecord> = records
            .iter()
            .cycle()
            .take(900_000)
            .enumerate()
            .map(|(i, r)| {
                let mut r = r.clone();
                r.key.customer_aws_account_id = format!("{i:012}");
                r
            })
            .collect();
        let slow = status(
            StatusInputs {
                rows: &[],
                records: &many,
                records_unreadable: 0,
                queues: &[],
                deprovisioning: 0,
                requests_per_second: 1,
                rate_cards: None,
            },
            now,
            24,
        );
        assert_eq!(slow.backlog.drain_minutes, 621);
        let warning = slow
            .attention
            .iter()
            .find(|a| a.message.contains("take about"))
            .unwrap();
        assert_eq!(warning.urgency, Urgency::Urgent);
        assert!(
            warning
                .message
                .contains("take about 10 h 21 min to send at 1 requests/s")
                && warning.message.contains("2026-11-29T16")
                && warning.message.contains("MeteringRequestsPerSecond"),
            "{}",
            warning.message
        );
        assert_eq!(minutes_text(45), "45 min");
        assert_eq!(minutes_text(120), "2 h");
    }

    /// GIVEN billed records of a priced and an unpriced dimension WHEN the status is
    /// taken with the buyer's rate card THEN it says what the billed usage is worth and
    /// warns that the unpriced dimension was given away.
    #[test]
    fn billed_usage_no_agreement_prices_needs_attention() {
        use awsmp_core::charges::RateCard;
        use awsmp_core::ports::AgreementTerms;
        let now = parse_usage_timestamp("2026-11-30T12:30:00Z").unwrap();
        let records = vec![
            awsmp_core::memory::fixtures::operator_record(
                "api",
                "2026-11-30T10",
                AggregatedStatus::Success,
                400,
                None,
            ),
            awsmp_core::memory::fixtures::operator_record(
                "seats",
                "2026-11-30T10",
                AggregatedStatus::Success,
                3,
                None,
            ),
        ];
        let cards = BTreeMap::from([(
            records[0].key.license_arn.clone(),
            RateCard {
                agreement_id: "agmt-1".into(),
                start: parse_usage_timestamp("2026-11-01T00:00:00Z").unwrap(),
                terms: AgreementTerms {
                    currency: Some("USD".into()),
                    rate_card: BTreeMap::from([("api".to_string(), "0.0025".parse().unwrap())]),
                    free_trial: None,
                    has_upfront: false,
                },
            },
        )]);
        let report = status(
            StatusInputs {
                rows: &[],
                records: &records,
                records_unreadable: 0,
                queues: &[],
                deprovisioning: 0,
                requests_per_second: DEFAULT_REQUESTS_PER_SECOND,
                rate_cards: Some((&cards, None)),
            },
            now,
            6,
        );
        let charges = report.charges.as_ref().unwrap();
        assert_eq!(charges.total["USD"], "1");
        let warning = report
            .attention
            .iter()
            .find(|a| a.message.contains("seats"))
            .unwrap();
        assert_eq!(warning.urgency, Urgency::Warning);
        assert!(
            warning.message.contains("given away"),
            "{}",
            warning.message
        );
    }
}

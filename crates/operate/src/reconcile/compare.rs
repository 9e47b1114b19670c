//! What we billed against what AWS recorded. Ours: the aggregated records whose
//! status says Marketplace holds them (`Success`, or `DuplicateRecord`: already
//! billed, first write wins). AWS's: the `Success` results CloudTrail recorded (per
//! license, account, dimension and hour), or the SDDS Daily Usage rows (per account,
//! product, dimension and UTC day). Every key where the two disagree is a
//! [`Discrepancy`]: missing on AWS's side, extra on AWS's side, or a different
//! quantity, with totals per kind.
//!
//! CloudTrail Event History shows a call about 15 minutes after it was made: a
//! record we billed more recently than the trail can show is listed as not yet
//! visible, never as missing.

use std::collections::{BTreeMap, BTreeSet};

use chrono::NaiveDate;
use serde::Serialize;

use awsmp_core::model::{AggregatedRecord, AggregatedStatus, GroupKey};
use awsmp_core::time::{HourBucket, Instant};

use super::quantity::Quantity;
use super::sdds::AwsDailyUsage;
use super::trail::{TrailEvent, TrailOutcome, TrailStatus};

/// Largest difference treated as equal against SDDS: `usage_quantity` has 2 decimal
/// places, so an exact total may be off by half a hundredth.
pub const SDDS_ROUNDING: Quantity = Quantity::from_micros(5_000);

/// One of our aggregated records, with when it was last written (the `updatedAt`
/// audit stamp), which tells whether CloudTrail can show its call yet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct OurRecord {
    /// The record.
    pub record: AggregatedRecord,
    /// When it was last written, if known.
    pub recorded_at: Option<Instant>,
}

/// Whether a status means Marketplace holds the record (architecture: `Success`,
/// and `DuplicateRecord`, already billed by an earlier call).
pub fn is_billed(status: AggregatedStatus) -> bool {
    matches!(
        status,
        AggregatedStatus::Success | AggregatedStatus::DuplicateRecord
    )
}

/// The period a compared quantity covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Period {
    /// A UTC hour (CloudTrail: one record per group and hour).
    Hour(HourBucket),
    /// A UTC day (SDDS Daily Usage).
    Day(NaiveDate),
}

impl std::fmt::Display for Period {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Period::Hour(h) => write!(f, "{h}"),
            Period::Day(d) => write!(f, "{d}"),
        }
    }
}

/// What a compared quantity is of.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, schemars::JsonSchema)]
pub struct ReconcileKey {
    /// Buyer AWS account.
    pub account: String,
    /// License (CloudTrail), or the licenses our records of the day carry (SDDS,
    /// which has no license column), joined with `, `.
    pub license: Option<String>,
    /// Product code (SDDS; CloudTrail LicenseArn calls carry none).
    pub product_code: Option<String>,
    /// Dimension.
    pub dimension: String,
    /// Hour or day.
    pub period: Period,
}

impl ReconcileKey {
    fn of_group(key: &GroupKey) -> Self {
        ReconcileKey {
            account: key.customer_aws_account_id.clone(),
            license: Some(key.license_arn.clone()),
            product_code: None,
            dimension: key.dimension.clone(),
            period: Period::Hour(key.hour),
        }
    }
}

/// How the two sides disagree.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, schemars::JsonSchema,
)]
pub enum DiscrepancyKind {
    /// We billed it; AWS's record has nothing.
    MissingOnAws,
    /// AWS's record has it; we did not bill it.
    ExtraOnAws,
    /// Both have it, with different quantities.
    QuantityDiffers,
}

impl DiscrepancyKind {
    /// Every kind, in report order.
    pub const ALL: [DiscrepancyKind; 3] = [
        DiscrepancyKind::MissingOnAws,
        DiscrepancyKind::ExtraOnAws,
        DiscrepancyKind::QuantityDiffers,
    ];

    /// A short human label.
    pub fn label(self) -> &'static str {
        match self {
            DiscrepancyKind::MissingOnAws => "missing on AWS",
            DiscrepancyKind::ExtraOnAws => "extra on AWS",
            DiscrepancyKind::QuantityDiffers => "different quantity",
        }
    }
}

/// One key where we and AWS disagree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Discrepancy {
    /// How.
    pub kind: DiscrepancyKind,
    /// Of what.
    pub key: ReconcileKey,
    /// What we billed (`None`: nothing).
    pub ours: Option<Quantity>,
    /// What AWS recorded (`None`: nothing).
    pub aws: Option<Quantity>,
    /// Our record's status, when we have a record (billed or not).
    pub our_status: Option<AggregatedStatus>,
    /// Our record's `meteringRecordId`.
    pub our_record_id: Option<String>,
    /// AWS's `meteringRecordId`s (CloudTrail) or `usage_feed_id`s (SDDS).
    pub aws_ids: Vec<String>,
    /// What it probably means and what to look at.
    pub note: Option<String>,
    /// What the difference is worth (`|ours - AWS| x` the license's price), an
    /// estimate from the buyer's agreement terms; `null` when not priced.
    pub value: Option<crate::failures::Worth>,
}

/// Count and quantities of one kind of discrepancy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, schemars::JsonSchema)]
pub struct KindTotal {
    /// How many keys.
    pub count: usize,
    /// Sum of our side.
    pub ours: Quantity,
    /// Sum of AWS's side.
    pub aws: Quantity,
}

/// Which AWS record was compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub enum AwsSource {
    /// CloudTrail Event History (`LookupEvents`).
    CloudTrail,
    /// The SDDS Daily Usage feed.
    Sdds,
}

/// The outcome of one reconciliation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Reconciliation {
    /// Against what.
    pub source: AwsSource,
    /// Keys compared (either side has it).
    pub compared: usize,
    /// Keys where both agree.
    pub agreed: usize,
    /// Every disagreement, ordered by key.
    pub discrepancies: Vec<Discrepancy>,
    /// Keys we billed too recently for the AWS record to show yet (not counted as
    /// discrepancies).
    pub not_yet_visible: Vec<Discrepancy>,
    /// Per kind of discrepancy.
    pub totals: BTreeMap<DiscrepancyKind, KindTotal>,
    /// Our total billed quantity in the window.
    pub ours_total: Quantity,
    /// AWS's total in the window.
    pub aws_total: Quantity,
    /// What the discrepancies are worth together, per currency (exact decimal
    /// text), an estimate; empty when not priced.
    pub discrepancy_value: BTreeMap<String, String>,
}

impl Reconciliation {
    fn new(source: AwsSource) -> Self {
        Reconciliation {
            source,
            compared: 0,
            agreed: 0,
            discrepancies: Vec::new(),
            not_yet_visible: Vec::new(),
            totals: DiscrepancyKind::ALL
                .iter()
                .map(|k| (*k, KindTotal::default()))
                .collect(),
            ours_total: Quantity::ZERO,
            aws_total: Quantity::ZERO,
            discrepancy_value: BTreeMap::new(),
        }
    }

    fn push(&mut self, d: Discrepancy) {
        let total = self.totals.entry(d.kind).or_default();
        total.count += 1;
        total.ours = total.ours + d.ours.unwrap_or_default();
        total.aws = total.aws + d.aws.unwrap_or_default();
        self.discrepancies.push(d);
    }

    /// Whether both sides agree on every key.
    pub fn is_clean(&self) -> bool {
        self.discrepancies.is_empty()
    }
}

/// The hours compared against CloudTrail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct TrailWindow {
    /// First hour compared.
    pub from: HourBucket,
    /// First hour not compared.
    pub to: HourBucket,
    /// Calls after this instant may not be in Event History yet.
    pub visible_until: Instant,
}

impl TrailWindow {
    fn contains(&self, hour: HourBucket) -> bool {
        self.from <= hour && hour < self.to
    }
}

#[derive(Default)]
struct AwsBilled {
    /// First Success per meteringRecordId (or per event for a result without one).
    by_id: BTreeMap<String, (Instant, Quantity)>,
    duplicates: BTreeSet<String>,
}

/// Compares our records with the `Success` results CloudTrail recorded, per license,
/// account, dimension and hour of `window`. `trail` must hold every call from the
/// window's first hour on (a record is sent after its hour starts).
pub fn reconcile_with_trail(
    ours: &[OurRecord],
    trail: &[TrailEvent],
    window: &TrailWindow,
) -> Reconciliation {
    let mut aws: BTreeMap<GroupKey, AwsBilled> = BTreeMap::new();
    for event in trail {
        for record in &event.records {
            let Some(key) = record.submitted.group_key() else {
                continue;
            };
            if !window.contains(key.hour) {
                continue;
            }
            let TrailOutcome::Result {
                status,
                metering_record_id,
            } = &record.outcome
            else {
                continue;
            };
            let id = metering_record_id
                .clone()
                .unwrap_or_else(|| format!("(no id, event {})", event.event_id));
            let entry = aws.entry(key).or_default();
            match status {
                TrailStatus::Success => {
                    let slot = entry
                        .by_id
                        .entry(id)
                        .or_insert((event.event_time, record.submitted.quantity));
                    if event.event_time < slot.0 {
                        *slot = (event.event_time, record.submitted.quantity);
                    }
                }
                TrailStatus::DuplicateRecord => {
                    entry.duplicates.insert(id);
                }
                _ => {}
            }
        }
    }
    let ours: BTreeMap<&GroupKey, &OurRecord> = ours
        .iter()
        .filter(|o| window.contains(o.record.key.hour))
        .map(|o| (&o.record.key, o))
        .collect();

    let mut result = Reconciliation::new(AwsSource::CloudTrail);
    let keys: BTreeSet<&GroupKey> = ours
        .keys()
        .copied()
        .chain(
            aws.iter()
                .filter(|(_, b)| !b.by_id.is_empty())
                .map(|(k, _)| k),
        )
        .collect();
    for key in keys {
        let our = ours.get(key).copied();
        let billed_by_us = our.filter(|o| is_billed(o.record.status));
        let aws_entry = aws.get(key);
        let aws_ids: Vec<String> = aws_entry
            .map(|b| b.by_id.keys().cloned().collect())
            .unwrap_or_default();
        let aws_quantity: Option<Quantity> = aws_entry
            .filter(|b| !b.by_id.is_empty())
            .map(|b| b.by_id.values().map(|(_, q)| *q).sum());
        if billed_by_us.is_none() && aws_quantity.is_none() {
            continue; // neither side billed it (e.g. our Error, or CustomerNotSubscribed)
        }
        result.compared += 1;
        let ours_quantity = billed_by_us.map(|o| Quantity::units(o.record.quantity_to_send()));
        result.ours_total = result.ours_total + ours_quantity.unwrap_or_default();
        result.aws_total = result.aws_total + aws_quantity.unwrap_or_default();
        let mut d = Discrepancy {
            kind: DiscrepancyKind::QuantityDiffers,
            key: ReconcileKey::of_group(key),
            ours: ours_quantity,
            aws: aws_quantity,
            our_status: our.map(|o| o.record.status),
            our_record_id: our.and_then(|o| o.record.metering_record_id.clone()),
            aws_ids,
            note: None,
            value: None,
        };
        match (ours_quantity, aws_quantity) {
            (Some(o), Some(a)) if o == a && d.aws_ids.len() <= 1 => {
                result.agreed += 1;
                continue;
            }
            (Some(o), Some(a)) => {
                d.note = Some(if d.aws_ids.len() > 1 {
                    format!(
                        "AWS billed this hour {} times (record ids differ): was it also sent with ProductCode, or by another deployment?",
                        d.aws_ids.len()
                    )
                } else if d.our_status == Some(AggregatedStatus::DuplicateRecord) {
                    format!(
                        "AWS kept the first write ({a}); we were answered DuplicateRecord for {o}: something billed this hour before us"
                    )
                } else {
                    format!(
                        "our table says {o}, AWS billed {a}: was the record changed after it was sent?"
                    )
                });
            }
            (Some(_), None) => {
                let visible = billed_by_us
                    .and_then(|o| o.recorded_at)
                    .is_none_or(|at| at <= window.visible_until);
                d.kind = DiscrepancyKind::MissingOnAws;
                if !visible {
                    d.note = Some(
                        "billed minutes ago: Event History shows calls about 15 minutes late"
                            .into(),
                    );
                    result.not_yet_visible.push(d);
                    // Neither agreed nor a discrepancy yet.
                    continue;
                }
                let duplicates = aws_entry.map(|b| b.duplicates.len()).unwrap_or(0);
                let mut note: String = if duplicates > 0 {
                    "CloudTrail has only DuplicateRecord answers for it in the window: the billing call is older than the window".into()
                } else {
                    "no Success for it in CloudTrail: was it billed from another Region or account, or before the window?".into()
                };
                let unknown_age = billed_by_us.is_some_and(|o| o.recorded_at.is_none());
                if unknown_age
                    && key.hour.start() + chrono::Duration::hours(25) > window.visible_until
                {
                    note.push_str(
                        " (if it was sent in the last 15 minutes, Event History may not show it yet: run again later)",
                    );
                }
                d.note = Some(note);
            }
            (None, Some(_)) => {
                d.kind = DiscrepancyKind::ExtraOnAws;
                d.note = Some(match d.our_status {
                    Some(status) => format!(
                        "AWS billed it but our table says {status}: an answer lost in transit? Do not replay it"
                    ),
                    None => "AWS billed it but our table has no record of it: another sender, or the record was deleted".into(),
                });
            }
            (None, None) => continue,
        }
        result.push(d);
    }
    result
}

/// The days compared against SDDS (`to` excluded).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct DayWindow {
    /// First day compared.
    pub from: NaiveDate,
    /// First day not compared.
    pub to: NaiveDate,
}

impl DayWindow {
    fn contains(&self, day: NaiveDate) -> bool {
        self.from <= day && day < self.to
    }
}

type DayKey = (String, String, String, NaiveDate);

/// Compares our billed records, summed per (account, product, dimension, UTC day),
/// with the joined SDDS Daily Usage rows of `window`, allowing for the feed's
/// 2-decimal rounding ([`SDDS_ROUNDING`]).
pub fn reconcile_with_sdds(
    ours: &[OurRecord],
    aws: &[AwsDailyUsage],
    window: &DayWindow,
) -> Reconciliation {
    #[derive(Default)]
    struct Ours {
        quantity: Quantity,
        licenses: BTreeSet<String>,
    }
    let mut our_days: BTreeMap<DayKey, Ours> = BTreeMap::new();
    for o in ours {
        let r = &o.record;
        let day = r.key.hour.start().date_naive();
        if !is_billed(r.status) || !window.contains(day) {
            continue;
        }
        let entry = our_days
            .entry((
                r.key.customer_aws_account_id.clone(),
                r.product_code.clone(),
                r.key.dimension.clone(),
                day,
            ))
            .or_default();
        entry.quantity = entry.quantity + Quantity::units(r.quantity_to_send());
        entry.licenses.insert(r.key.license_arn.clone());
    }
    let mut aws_days: BTreeMap<DayKey, (Quantity, Vec<String>)> = BTreeMap::new();
    for u in aws.iter().filter(|u| window.contains(u.usage_date)) {
        let entry = aws_days
            .entry((
                u.aws_account_id.clone(),
                u.product_code.clone(),
                u.dimension.clone(),
                u.usage_date,
            ))
            .or_default();
        entry.0 = entry.0 + u.quantity;
        entry.1.push(u.usage_feed_id.clone());
    }
    let mut result = Reconciliation::new(AwsSource::Sdds);
    let keys: BTreeSet<&DayKey> = our_days.keys().chain(aws_days.keys()).collect();
    for key in keys {
        result.compared += 1;
        let our = our_days.get(key);
        let theirs = aws_days.get(key);
        let ours_quantity = our.map(|o| o.quantity);
        let aws_quantity = theirs.map(|t| t.0);
        result.ours_total = result.ours_total + ours_quantity.unwrap_or_default();
        result.aws_total = result.aws_total + aws_quantity.unwrap_or_default();
        let (account, product, dimension, day) = key;
        let mut d = Discrepancy {
            kind: DiscrepancyKind::QuantityDiffers,
            key: ReconcileKey {
                account: account.clone(),
                license: our.map(|o| o.licenses.iter().cloned().collect::<Vec<_>>().join(", ")),
                product_code: Some(product.clone()),
                dimension: dimension.clone(),
                period: Period::Day(*day),
            },
            ours: ours_quantity,
            aws: aws_quantity,
            our_status: None,
            our_record_id: None,
            aws_ids: theirs.map(|t| t.1.clone()).unwrap_or_default(),
            note: None,
            value: None,
        };
        match (ours_quantity, aws_quantity) {
            (Some(o), Some(a)) if (o - a).abs() <= SDDS_ROUNDING => {
                result.agreed += 1;
                continue;
            }
            (Some(o), Some(a)) => {
                d.note = Some(format!(
                    "we billed {o} that day, the feed says {a} (a later feed revision may still correct it)"
                ));
            }
            (Some(_), None) => {
                d.kind = DiscrepancyKind::MissingOnAws;
                d.note = Some(
                    "not in the feed: is the feed file complete up to this day (delivered daily at midnight UTC)?".into(),
                );
            }
            (None, Some(_)) => {
                d.kind = DiscrepancyKind::ExtraOnAws;
                d.note = Some("in the feed, but we billed nothing for it that day".into());
            }
            (None, None) => continue,
        }
        result.push(d);
    }
    result
}

/// Prices every discrepancy of one license with its rate card in `cards`: the
/// difference `|ours - AWS|` at the period's price, summed per currency into
/// [`Reconciliation::discrepancy_value`]. A discrepancy of no single license (AWS's
/// extra usage, keyed by account) or of a license without a rate card says so.
pub fn price_discrepancies(
    result: &mut Reconciliation,
    cards: &BTreeMap<String, awsmp_core::charges::RateCard>,
) {
    use awsmp_core::charges::{Amounts, Estimate, estimate};
    use rust_decimal::Decimal;
    let mut total = Amounts::default();
    for d in &mut result.discrepancies {
        let difference = (d.ours.unwrap_or_default() - d.aws.unwrap_or_default()).abs();
        let at = match d.key.period {
            Period::Hour(h) => h.start(),
            Period::Day(day) => day
                .and_hms_opt(0, 0, 0)
                .map(|t| chrono::TimeZone::from_utc_datetime(&chrono::Utc, &t))
                .unwrap_or_default(),
        };
        let card = d
            .key
            .license
            .as_deref()
            .filter(|l| !l.contains(", "))
            .and_then(|l| cards.get(l));
        // `estimate` prices whole units; the feed's quantities have decimals, so the
        // price is taken per unit and applied to the exact difference.
        let worth = match estimate(1, &d.key.dimension, at, card) {
            Estimate::Priced { amount, currency } => {
                let amount = amount * Decimal::new(difference.micros(), 6);
                total.add(&currency, amount);
                crate::failures::Worth::of(Estimate::Priced { amount, currency })
            }
            other => crate::failures::Worth::of(other),
        };
        d.value = Some(worth);
    }
    result.discrepancy_value = total.as_text();
}

/// One record of a CloudTrail call next to our aggregated record (`awsmp trail`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct TrailRow {
    /// When the call was made.
    pub event_time: Instant,
    /// `eventID`.
    pub event_id: String,
    /// The group, for records that name a license and an account.
    pub key: Option<GroupKey>,
    /// The record's timestamp.
    pub timestamp: Instant,
    /// The dimension.
    pub dimension: String,
    /// The quantity sent.
    pub quantity: Quantity,
    /// What Marketplace answered (status, `Unprocessed`, or the call's exception).
    pub outcome: String,
    /// AWS's `meteringRecordId`.
    pub aws_record_id: Option<String>,
    /// Our record's status.
    pub our_status: Option<AggregatedStatus>,
    /// Our record's quantity.
    pub our_quantity: Option<i64>,
    /// Our record's `meteringRecordId`.
    pub our_record_id: Option<String>,
    /// Whether this answer is consistent with our record.
    pub consistent: bool,
    /// Why not, or what it means.
    pub note: String,
}

/// Joins every record of `events` (newest call first) to our record of its group.
/// `ours` holds whatever records could be found for those groups.
pub fn join_trail(
    events: &[TrailEvent],
    ours: &BTreeMap<GroupKey, AggregatedRecord>,
) -> Vec<TrailRow> {
    let mut rows = Vec::new();
    let mut ordered: Vec<&TrailEvent> = events.iter().collect();
    ordered.sort_by(|a, b| {
        b.event_time
            .cmp(&a.event_time)
            .then(a.event_id.cmp(&b.event_id))
    });
    for event in ordered {
        for record in &event.records {
            let key = record.submitted.group_key();
            let our = key.as_ref().and_then(|k| ours.get(k));
            let billed_by_us = our.is_some_and(|o| is_billed(o.status));
            let same_quantity = our.is_some_and(|o| {
                Quantity::units(o.quantity_to_send()) == record.submitted.quantity
            });
            let (consistent, note) = match (&record.outcome, our) {
                (_, None) if key.is_none() => (
                    false,
                    "legacy CustomerIdentifier record: not one of this deployment's".to_string(),
                ),
                (
                    TrailOutcome::Result {
                        status: TrailStatus::Success | TrailStatus::DuplicateRecord,
                        ..
                    }
                    | TrailOutcome::NoResponseRecorded,
                    None,
                ) => (false, "no record in our table for this group".to_string()),
                (outcome, None) => (
                    true,
                    format!("not billed ({}); no record in our table", outcome.label()),
                ),
                (
                    TrailOutcome::Result {
                        status: TrailStatus::Success,
                        ..
                    },
                    Some(o),
                ) => {
                    if !billed_by_us {
                        (false, format!("AWS billed it; our table says {}", o.status))
                    } else if !same_quantity {
                        (
                            false,
                            format!(
                                "AWS billed {}; our table says {}",
                                record.submitted.quantity,
                                o.quantity_to_send()
                            ),
                        )
                    } else {
                        (true, "billed".to_string())
                    }
                }
                (
                    TrailOutcome::Result {
                        status: TrailStatus::DuplicateRecord,
                        ..
                    },
                    Some(o),
                ) => {
                    if billed_by_us {
                        (true, "already billed".to_string())
                    } else {
                        (
                            false,
                            format!("AWS had it already; our table says {}", o.status),
                        )
                    }
                }
                (
                    TrailOutcome::Result {
                        status: TrailStatus::CustomerNotSubscribed,
                        ..
                    },
                    Some(o),
                ) => (
                    o.status == AggregatedStatus::CustomerNotSubscribed,
                    "not billed: the buyer is not subscribed".to_string(),
                ),
                (
                    TrailOutcome::Result {
                        status: TrailStatus::Other(s),
                        ..
                    },
                    Some(_),
                ) => (false, format!("unknown status {s}")),
                (TrailOutcome::Unprocessed, Some(_)) => {
                    (true, "not billed: unprocessed, retried later".to_string())
                }
                (TrailOutcome::CallFailed { code }, Some(_)) => {
                    (true, format!("not billed: the call failed with {code}"))
                }
                (TrailOutcome::NoResponseRecorded, Some(_)) => (
                    false,
                    "CloudTrail recorded no answer: whether it billed is unknown".to_string(),
                ),
            };
            let aws_record_id = match &record.outcome {
                TrailOutcome::Result {
                    metering_record_id, ..
                } => metering_record_id.clone(),
                _ => None,
            };
            rows.push(TrailRow {
                event_time: event.event_time,
                event_id: event.event_id.clone(),
                key,
                timestamp: record.submitted.timestamp,
                dimension: record.submitted.dimension.clone(),
                quantity: record.submitted.quantity,
                outcome: record.outcome.label(),
                aws_record_id,
                our_status: our.map(|o| o.status),
                our_quantity: our.map(|o| o.quantity_to_send()),
                our_record_id: our.and_then(|o| o.metering_record_id.clone()),
                consistent,
                note,
            });
        }
    }
    rows
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;

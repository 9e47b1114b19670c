//! `awsmp report`: the series behind the operator's HTML page (billed quantity per hour
//! and dimension, status mix per hour, failures by reason), computed with the rules of
//! `status` and `failures` so the page never disagrees with them; the CLI renders it as
//! one HTML page.

use std::collections::BTreeMap;

use serde::Serialize;

use super::failures::failures;
use super::status::{HourCounts, StatusInputs, status};
use awsmp_core::charges::{Amounts, ESTIMATE_LABEL, Estimate, RateCard, estimate};
use awsmp_core::model::{AggregatedRecord, AggregatedStatus, RawUsageRow};
use awsmp_core::ports::{AgreementApi, MalformedItem, SubscriberStore};
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
    /// What the billed quantities are worth under each buyer's agreement, when the
    /// rate cards were read ([`charges`]); always an estimate.
    pub charges: Option<Charges>,
}

/// The estimated charges of what was billed in the range.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Charges {
    /// What these amounts are: an estimate, and from what.
    pub label: &'static str,
    /// Why some or all rate cards could not be read (a role without
    /// `aws-marketplace:GetAgreementTerms`, say), when so.
    pub unavailable: Option<String>,
    /// Per currency, exact decimal text (`"12.5"`): never added across currencies.
    pub total: BTreeMap<String, String>,
    /// Per hour (hours with a priced quantity only), per currency.
    pub by_hour: BTreeMap<HourBucket, BTreeMap<String, String>>,
    /// Per UTC day (`YYYY-MM-DD`, days with a priced quantity only), per currency.
    pub by_day: BTreeMap<String, BTreeMap<String, String>>,
    /// Per dimension (priced ones only), per currency.
    pub by_dimension: BTreeMap<String, BTreeMap<String, String>>,
    /// Per buyer (license and account), in license order.
    pub by_buyer: Vec<BuyerCharges>,
    /// Billed quantities the buyer's rate card does not price: on a private offer
    /// Marketplace billed nothing for them.
    pub unpriced: Vec<UnpricedUsage>,
    /// Licenses whose rate card could not be read (their usage is in no amount).
    pub without_rate_card: Vec<String>,
}

/// One buyer's estimated charges.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct BuyerCharges {
    /// The license.
    pub license_arn: String,
    /// The buyer.
    pub customer_aws_account_id: String,
    /// The agreement whose rate card priced it.
    pub agreement_id: Option<String>,
    /// Per currency.
    pub amounts: BTreeMap<String, String>,
    /// Quantity billed inside the agreement's free trial (charged nothing).
    pub free_trial_quantity: i64,
}

/// A billed quantity of a dimension the buyer's rate card does not price.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct UnpricedUsage {
    /// The license.
    pub license_arn: String,
    /// The buyer.
    pub customer_aws_account_id: String,
    /// The dimension.
    pub dimension: String,
    /// Quantity billed in the range.
    pub quantity: i64,
}

/// The rate card of each license billed from `from` on: the one kept on its subscribers
/// row by the agreement reconciliation, or, for a row without a current one, its
/// agreement's read from the API (`DescribeAgreement` for its start,
/// `GetAgreementTerms` for its prices), each agreement read once. A license whose row names no agreement, or whose agreement the
/// API does not know, gets none. The first refusal or throttle stops the reading: the
/// cards read so far come back with why the rest were not (the report never fails for
/// it).
pub async fn rate_cards(
    records: &[AggregatedRecord],
    from: HourBucket,
    subscribers: &dyn SubscriberStore,
    agreements: &dyn AgreementApi,
) -> (BTreeMap<String, RateCard>, Option<String>) {
    let mut licenses: BTreeMap<String, String> = BTreeMap::new();
    for record in records.iter().filter(|r| r.key.hour >= from) {
        licenses
            .entry(record.key.license_arn.clone())
            .or_insert_with(|| record.key.customer_aws_account_id.clone());
    }
    let mut by_agreement: BTreeMap<String, Option<RateCard>> = BTreeMap::new();
    let mut cards = BTreeMap::new();
    for (license, account) in licenses {
        let row = match subscribers.get(&license, &account).await {
            Ok(Some(row)) => row,
            Ok(None) => continue,
            Err(e) => return (cards, Some(format!("the subscribers table: {e}"))),
        };
        let Some(agreement_id) = row.agreement_id.clone() else {
            continue;
        };
        if !by_agreement.contains_key(&agreement_id) {
            let card = match awsmp_core::charges::rate_card_of(&row, agreements).await {
                Ok(card) => card,
                Err(e) => return (cards, Some(e.to_string())),
            };
            by_agreement.insert(agreement_id.clone(), card);
        }
        if let Some(Some(card)) = by_agreement.get(&agreement_id) {
            cards.insert(license, card.clone());
        }
    }
    (cards, None)
}

/// The estimated charges of the records billed from `from` on, each at the unit price
/// it keeps (priced when it was aggregated) or, for a record without one, with its
/// license's rate card in `cards` (a license without either is listed, never priced at 0).
pub fn charges(
    records: &[AggregatedRecord],
    from: HourBucket,
    cards: &BTreeMap<String, RateCard>,
    unavailable: Option<String>,
) -> Charges {
    let mut total = Amounts::default();
    let mut by_hour: BTreeMap<HourBucket, Amounts> = BTreeMap::new();
    let mut by_day: BTreeMap<String, Amounts> = BTreeMap::new();
    let mut by_dimension: BTreeMap<String, Amounts> = BTreeMap::new();
    let mut buyers: BTreeMap<(String, String), (Amounts, i64)> = BTreeMap::new();
    let mut unpriced: BTreeMap<(String, String, String), i64> = BTreeMap::new();
    let mut without = std::collections::BTreeSet::new();
    for record in records.iter().filter(|r| r.key.hour >= from) {
        if !matches!(
            record.status,
            AggregatedStatus::Success | AggregatedStatus::DuplicateRecord
        ) {
            continue;
        }
        let key = &record.key;
        let quantity = record.quantity_to_send();
        let buyer = buyers
            .entry((key.license_arn.clone(), key.customer_aws_account_id.clone()))
            .or_default();
        let card = cards.get(&key.license_arn);
        let estimate = record
            .kept_estimate()
            .unwrap_or_else(|| estimate(quantity, &key.dimension, key.hour.start(), card));
        match estimate {
            Estimate::Priced { amount, currency } => {
                total.add(&currency, amount);
                by_hour.entry(key.hour).or_default().add(&currency, amount);
                by_day
                    .entry(key.hour.start().format("%Y-%m-%d").to_string())
                    .or_default()
                    .add(&currency, amount);
                by_dimension
                    .entry(key.dimension.clone())
                    .or_default()
                    .add(&currency, amount);
                buyer.0.add(&currency, amount);
            }
            Estimate::FreeTrial => buyer.1 += quantity,
            Estimate::Unpriced => {
                *unpriced
                    .entry((
                        key.license_arn.clone(),
                        key.customer_aws_account_id.clone(),
                        key.dimension.clone(),
                    ))
                    .or_default() += quantity;
            }
            Estimate::NoRateCard => {
                without.insert(key.license_arn.clone());
            }
        }
    }
    let by_buyer: Vec<BuyerCharges> = buyers
        .into_iter()
        .filter(|(_, (amounts, trial))| !amounts.is_empty() || *trial > 0)
        .map(|((license_arn, account), (amounts, trial))| BuyerCharges {
            agreement_id: cards.get(&license_arn).map(|c| c.agreement_id.clone()),
            license_arn,
            customer_aws_account_id: account,
            amounts: amounts.as_text(),
            free_trial_quantity: trial,
        })
        .collect();
    Charges {
        label: ESTIMATE_LABEL,
        unavailable,
        total: total.as_text(),
        by_hour: by_hour
            .into_iter()
            .map(|(hour, amounts)| (hour, amounts.as_text()))
            .collect(),
        by_day: by_day
            .into_iter()
            .map(|(day, amounts)| (day, amounts.as_text()))
            .collect(),
        by_dimension: by_dimension
            .into_iter()
            .map(|(dimension, amounts)| (dimension, amounts.as_text()))
            .collect(),
        by_buyer,
        unpriced: unpriced
            .into_iter()
            .map(
                |((license_arn, account, dimension), quantity)| UnpricedUsage {
                    license_arn,
                    customer_aws_account_id: account,
                    dimension,
                    quantity,
                },
            )
            .collect(),
        without_rate_card: without.into_iter().collect(),
    }
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
            rate_cards: None,
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
        charges: None,
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

    #[tokio::test]
    async fn a_card_kept_on_the_row_prices_without_a_call_and_another_agreements_is_not_used() {
        use awsmp_core::charges::StoredRateCard;
        use awsmp_core::memory::agreement_contract::{record, seed};
        use awsmp_core::memory::{AgreementOp, MemoryAgreementApi, MemorySubscriberStore};
        use awsmp_core::ports::AgreementStatus;

        let now = at("2026-11-30T12:00:00Z");
        let records = [operator_record(
            "requests",
            "2026-11-30T10",
            AggregatedStatus::Success,
            3,
            None,
        )];
        let from: HourBucket = "2026-11-30T00".parse().unwrap();
        let (subscribers, api) = (MemorySubscriberStore::new(), MemoryAgreementApi::new());
        let mut kept = seed("agmt-1");
        kept.license_arn = LIC.into();
        api.seed(record(&kept, AgreementStatus::Active, now));
        let mut terms = api.get("agmt-1").unwrap().terms;
        terms
            .rate_card
            .insert("requests".into(), "0.004".parse().unwrap());
        let mut row = awsmp_core::model::Subscriber::new(LIC, "111122223333");
        row.agreement_id = Some("agmt-1".into());
        row.rate_card = Some(Box::new(StoredRateCard {
            card: RateCard {
                agreement_id: "agmt-1".into(),
                start: kept.start,
                terms,
            },
            agreement_updated_at: Some(now),
            read_at: now,
        }));
        subscribers.insert(row.clone(), now);

        let (cards, unavailable) = rate_cards(&records, from, &subscribers, &api).await;
        assert!(unavailable.is_none());
        assert_eq!(
            cards[LIC].terms.rate_card["requests"].to_string(),
            "0.004",
            "the kept card"
        );
        assert_eq!(
            api.calls(AgreementOp::Describe) + api.calls(AgreementOp::Terms),
            0
        );

        // Replaced: the row moved to agmt-2 before its card was read; agmt-1's is not used.
        let mut replacement = seed("agmt-2");
        replacement.license_arn = LIC.into();
        api.seed(record(&replacement, AgreementStatus::Active, now));
        row.agreement_id = Some("agmt-2".into());
        subscribers.insert(row, now);
        let (cards, _) = rate_cards(&records, from, &subscribers, &api).await;
        assert_eq!(cards[LIC].agreement_id, "agmt-2");
        assert_eq!(cards[LIC].terms.rate_card["requests"].to_string(), "0.0025");
        assert_eq!(api.calls(AgreementOp::Terms), 1, "read from the API");
    }

    #[test]
    fn charges_price_each_billed_record_with_its_buyers_rate_card() {
        // GIVEN billed records of a priced and an unpriced dimension, an unbilled one,
        // and the buyer's rate card (requests at 0.0025 USD)
        let records = [
            operator_record("api", "2026-11-30T10", AggregatedStatus::Success, 3, None),
            operator_record(
                "api",
                "2026-11-30T11",
                AggregatedStatus::DuplicateRecord,
                5,
                None,
            ),
            operator_record("seats", "2026-11-30T11", AggregatedStatus::Success, 2, None),
            operator_record(
                "api",
                "2026-11-30T11",
                AggregatedStatus::Error,
                7,
                Some("X"),
            ),
        ];
        let mut terms = awsmp_core::ports::AgreementTerms {
            currency: Some("USD".into()),
            ..Default::default()
        };
        terms
            .rate_card
            .insert("api".into(), "0.0025".parse().unwrap());
        let cards = BTreeMap::from([(
            LIC.to_string(),
            RateCard {
                agreement_id: "agmt-1".into(),
                start: at("2026-01-01T00:00:00Z"),
                terms,
            },
        )]);
        // WHEN priced from 10:00
        let c = charges(&records, "2026-11-30T10".parse().unwrap(), &cards, None);
        // THEN only what was billed counts, exactly, in its currency, labelled
        assert_eq!(c.total, BTreeMap::from([("USD".into(), "0.02".into())]));
        assert_eq!(c.by_hour.len(), 2);
        assert_eq!(c.by_buyer[0].amounts["USD"], "0.02");
        assert_eq!(c.by_buyer[0].agreement_id.as_deref(), Some("agmt-1"));
        assert!(c.label.contains("estimate"));
        // and the unpriced dimension is named with its quantity, never priced at 0
        assert_eq!(c.unpriced.len(), 1);
        assert_eq!(
            (c.unpriced[0].dimension.as_str(), c.unpriced[0].quantity),
            ("seats", 2)
        );
        // and a license without a rate card is listed, not priced
        let none = charges(
            &records,
            "2026-11-30T10".parse().unwrap(),
            &BTreeMap::new(),
            Some("no".into()),
        );
        assert!(none.total.is_empty());
        assert_eq!(none.without_rate_card, vec![LIC.to_string()]);
        // and a record that keeps the unit price it was aggregated at (before an
        // amendment: 0.01) is worth that, whatever the card says now
        let mut kept = records.clone();
        kept[0].unit_price = Some(awsmp_core::charges::UnitPrice {
            agreement_id: "agmt-1".into(),
            basis: awsmp_core::charges::PriceBasis::Priced {
                price: "0.01".parse().unwrap(),
                currency: "USD".into(),
            },
        });
        let c = charges(&kept, "2026-11-30T10".parse().unwrap(), &cards, None);
        assert_eq!(c.total["USD"], "0.0425", "3 x 0.01 + 5 x 0.0025");
        // and per day and per dimension, the same sums
        assert_eq!(c.by_day["2026-11-30"]["USD"], "0.0425");
        assert_eq!(
            c.by_dimension.keys().collect::<Vec<_>>(),
            vec!["api"],
            "an unpriced dimension is in no amount"
        );
        assert_eq!(c.by_dimension["api"]["USD"], "0.0425");
    }
}

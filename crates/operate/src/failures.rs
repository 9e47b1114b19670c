//! `awsmp failures`: every raw row and aggregated record that ended unbilled, with its
//! reason, the paired server-side exception, what to do, and what an unbilled record
//! is worth (an estimate from the buyer's agreement terms).

use std::collections::BTreeMap;

use awsmp_core::charges::{Amounts, RateCard, estimate};
use serde::Serialize;

use super::replay::check_replay;
use super::rows::{RowState, row_account_dimension, row_hour, row_quantity, row_state};
use awsmp_core::model::{AggregatedRecord, AggregatedStatus, RawStatus, RawUsageRow, ReasonCode};
use awsmp_core::ports::MalformedItem;
use awsmp_core::remedy::{FailureStatus, for_status, server_side_pair};
use awsmp_core::time::{HourBucket, Instant};

/// One failure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Failure {
    /// `RejectedClientSide`, `AggregationExpired`, `Error`, `CustomerNotSubscribed`,
    /// `SubmissionExpired`.
    pub status: &'static str,
    /// The stored reason (a client-side reason code, or the exception name).
    pub reason: Option<String>,
    /// The server-side exception: the pair of a client-side code, or the record's own.
    pub server_side: Option<String>,
    /// License.
    pub license_arn: String,
    /// The row's sort key, or the record's `<account>#<dimension>#<hour>`.
    pub key: String,
    /// Buyer account, when readable.
    pub account: Option<String>,
    /// Dimension, when readable.
    pub dimension: Option<String>,
    /// The usage hour, when readable.
    pub hour: Option<HourBucket>,
    /// The quantity, when readable.
    pub quantity: Option<i64>,
    /// What to do.
    pub remedy: String,
    /// Whether `awsmp replay` would send it again now.
    pub replayable: bool,
    /// The record's group as `awsmp replay` takes it (`license|account|dimension|hour`);
    /// `null` for a raw row.
    pub group: Option<String>,
    /// A call of ours may have billed the record before it ended so (its answer was
    /// lost or unclear): settling it outside metering could bill the buyer twice.
    pub possibly_billed: bool,
    /// What the unbilled record would have billed, estimated from its buyer's
    /// agreement terms (records only; `null` for a raw row, or when not priced).
    pub worth: Option<Worth>,
}

pub use awsmp_core::charges::Worth;

/// Prices every record's failure not yet priced (its record keeps no unit price) with
/// its license's rate card in `cards`.
pub fn price(found: &mut [Failure], cards: &BTreeMap<String, RateCard>) {
    for f in found.iter_mut().filter(|f| f.worth.is_none()) {
        let (Some(_), Some(dimension), Some(hour), Some(quantity)) =
            (&f.group, &f.dimension, f.hour, f.quantity)
        else {
            continue;
        };
        let card = cards.get(&f.license_arn);
        f.worth = Some(Worth::of(estimate(quantity, dimension, hour.start(), card)));
    }
}

/// What the priced failures are worth together, per currency.
pub fn unbilled_worth(found: &[Failure]) -> Amounts {
    let mut total = Amounts::default();
    for worth in found.iter().filter_map(|f| f.worth.as_ref()) {
        if let (Some(amount), Some(currency)) = (&worth.amount, &worth.currency)
            && let Ok(amount) = amount.parse()
        {
            total.add(currency, amount);
        }
    }
    total
}

/// Every failure of usage hours from `since` on (unreadable items always), records
/// first (they are the money), each group in key order.
pub fn failures(
    rows: &[RawUsageRow],
    records: &[AggregatedRecord],
    unreadable: &[MalformedItem],
    since: HourBucket,
    now: Instant,
) -> Vec<Failure> {
    let mut out = Vec::new();
    for record in records.iter().filter(|r| r.key.hour >= since) {
        let status = match record.status {
            s @ (AggregatedStatus::Error
            | AggregatedStatus::CustomerNotSubscribed
            | AggregatedStatus::SubmissionExpired) => s,
            _ => continue,
        };
        let reason = record.status_reason.clone();
        out.push(Failure {
            status: status.as_str(),
            server_side: match status {
                AggregatedStatus::Error => reason.clone(),
                AggregatedStatus::CustomerNotSubscribed => Some("CustomerNotSubscribed".into()),
                _ => None,
            },
            remedy: for_status(FailureStatus::Record(status), reason.as_deref()),
            reason,
            license_arn: record.key.license_arn.clone(),
            key: record.key.aggregated_sort_key(),
            account: Some(record.key.customer_aws_account_id.clone()),
            dimension: Some(record.key.dimension.clone()),
            hour: Some(record.key.hour),
            quantity: Some(record.quantity_to_send()),
            replayable: check_replay(record, now).is_ok(),
            group: Some(record.key.to_string()),
            possibly_billed: record.may_have_been_billed(),
            // Priced as aggregated when the record keeps its unit price; else by `price`.
            worth: record.kept_estimate().map(Worth::of),
        });
    }
    for item in unreadable {
        out.push(Failure {
            status: AggregatedStatus::Error.as_str(),
            reason: Some(item.problem.clone()),
            server_side: None,
            license_arn: item.license_arn.clone(),
            key: item.sort_key.clone(),
            account: None,
            dimension: None,
            hour: None,
            quantity: None,
            remedy: "the aggregated item cannot be read as a record: fix or delete it".into(),
            replayable: false,
            group: None,
            possibly_billed: false,
            worth: None,
        });
    }
    for row in rows {
        let (status, reason) = match row_state(row) {
            Some(RowState::Rejected(reason)) => (RawStatus::RejectedClientSide, reason),
            Some(RowState::Expired) => (RawStatus::AggregationExpired, None),
            _ => continue,
        };
        let hour = row_hour(row);
        if hour.is_some_and(|h| h < since) {
            continue;
        }
        let (account, dimension) = row_account_dimension(row);
        out.push(Failure {
            status: status.as_str(),
            server_side: reason
                .as_deref()
                .and_then(|r| r.parse::<ReasonCode>().ok())
                .and_then(server_side_pair)
                .map(str::to_string),
            remedy: for_status(FailureStatus::Raw(status), reason.as_deref()),
            reason,
            license_arn: row.license_arn.clone(),
            key: row.sort_key.clone(),
            account: account.map(str::to_string),
            dimension: dimension.map(str::to_string),
            hour,
            quantity: row_quantity(row),
            replayable: false,
            group: None,
            possibly_billed: false,
            worth: None,
        });
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use awsmp_core::memory::reference_row;
    use awsmp_core::model::{Attr, attr};
    use awsmp_core::time::parse_usage_timestamp;

    #[test]
    fn names_both_codes_of_a_rejection_and_offers_replay_for_a_fixable_error() {
        let lic = "arn:aws:license-manager::123456789012:license:l-1";
        let now = parse_usage_timestamp("2026-11-30T12:30:00Z").unwrap();
        let mut row = reference_row(lic, "111122223333", "api", "2026-11-30T10:15:00Z", 3);
        row.attrs.remove(attr::METERING_PENDING);
        for (k, v) in [
            (attr::METERING_STATUS, "RejectedClientSide"),
            (attr::METERING_STATUS_REASON, "TooManyTags"),
        ] {
            row.attrs.insert(k.into(), Attr::S(v.into()));
        }
        let mut record = awsmp_core::memory::fixtures::operator_record(
            "Api",
            "2026-11-30T11",
            AggregatedStatus::Error,
            4,
            Some("InvalidUsageDimensionException"),
        );
        record.version = 2;
        let found = failures(
            &[row],
            &[record],
            &[],
            "2026-11-30T00".parse().unwrap(),
            now,
        );
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].status, "Error");
        assert!(found[0].replayable);
        // The group as `awsmp replay` takes it; a raw row has none.
        assert_eq!(
            found[0].group.as_deref(),
            Some(
                "arn:aws:license-manager::123456789012:license:l-1|111122223333|Api|2026-11-30T11"
            )
        );
        assert_eq!(found[1].group, None);
        assert!(found[0].remedy.contains("catalog"));
        assert_eq!(found[1].reason.as_deref(), Some("TooManyTags"));
        assert_eq!(found[1].server_side.as_deref(), Some("InvalidTagException"));
        assert!(!found[1].replayable);
        let later = failures(&[], &[], &[], "2026-11-30T12".parse().unwrap(), now);
        assert!(later.is_empty());
    }

    /// GIVEN a record answered CustomerNotSubscribed after an earlier send of ours may
    /// have billed it WHEN failures are listed THEN it says so (settling it outside
    /// metering could bill the buyer twice); one never sent does not.
    #[test]
    fn a_failure_an_earlier_send_may_have_billed_says_so() {
        let now = parse_usage_timestamp("2026-11-30T12:30:00Z").unwrap();
        let mut sent = awsmp_core::memory::fixtures::operator_record(
            "Api",
            "2026-11-30T10",
            AggregatedStatus::CustomerNotSubscribed,
            4,
            None,
        );
        sent.sent_quantity = Some(4);
        sent.possibly_billed = Some(true);
        // A definite answer to our only send stores possiblyBilled = false.
        let mut never = awsmp_core::memory::fixtures::operator_record(
            "Api",
            "2026-11-30T11",
            AggregatedStatus::CustomerNotSubscribed,
            2,
            None,
        );
        never.possibly_billed = Some(false);
        let found = failures(
            &[],
            &[sent, never],
            &[],
            "2026-11-30T00".parse().unwrap(),
            now,
        );
        let billed: Vec<bool> = found.iter().map(|f| f.possibly_billed).collect();
        assert_eq!(billed, [true, false]);
    }

    /// GIVEN unbilled records of a priced, an unpriced and a trial dimension, and one
    /// of a license without a rate card WHEN priced THEN each says what it is worth,
    /// exactly, and only the priced one counts in the total.
    #[test]
    fn each_unbilled_record_says_what_it_is_worth() {
        use awsmp_core::ports::{AgreementTerms, FreeTrial};
        let now = parse_usage_timestamp("2026-11-30T12:30:00Z").unwrap();
        let record = |dimension: &str, quantity| {
            awsmp_core::memory::fixtures::operator_record(
                dimension,
                "2026-11-30T11",
                AggregatedStatus::Error,
                quantity,
                Some("InvalidUsageDimensionException"),
            )
        };
        let mut other = record("api", 5);
        other.key.license_arn = "arn:aws:license-manager::123456789012:license:l-2".into();
        // A record keeping the unit price it was aggregated at needs no card.
        let mut kept = record("api", 5);
        kept.key.license_arn = "arn:aws:license-manager::123456789012:license:l-3".into();
        kept.unit_price = Some(awsmp_core::charges::UnitPrice {
            agreement_id: "agmt-3".into(),
            basis: awsmp_core::charges::PriceBasis::Priced {
                price: "0.2".parse().unwrap(),
                currency: "USD".into(),
            },
        });
        let mut found = failures(
            &[],
            &[
                record("api", 400),
                record("seats", 3),
                record("trial", 9),
                other,
                kept,
            ],
            &[],
            "2026-11-30T00".parse().unwrap(),
            now,
        );
        let card = RateCard {
            agreement_id: "agmt-1".into(),
            start: parse_usage_timestamp("2026-11-25T00:00:00Z").unwrap(),
            terms: AgreementTerms {
                currency: Some("USD".into()),
                rate_card: [("api", "0.0025"), ("trial", "1")]
                    .into_iter()
                    .map(|(d, p)| (d.to_string(), p.parse().unwrap()))
                    .collect(),
                free_trial: Some(FreeTrial {
                    duration_days: 14,
                    grants: vec![awsmp_core::ports::TrialGrant {
                        dimension: "trial".into(),
                        max_quantity: None,
                    }],
                }),
                has_upfront: false,
            },
        };
        let cards = BTreeMap::from([(
            "arn:aws:license-manager::123456789012:license:l-1".to_string(),
            card,
        )]);
        price(&mut found, &cards);
        let basis = |dimension: &str, license_end: &str| {
            found
                .iter()
                .find(|f| {
                    f.dimension.as_deref() == Some(dimension)
                        && f.license_arn.ends_with(license_end)
                })
                .and_then(|f| f.worth.clone())
                .unwrap()
        };
        let api = basis("api", "l-1");
        assert_eq!((api.amount.as_deref(), api.basis), (Some("1"), "priced"));
        assert_eq!(basis("seats", "l-1").basis, "unpriced");
        assert_eq!(basis("trial", "l-1").basis, "free trial");
        assert_eq!(basis("api", "l-2").basis, "no rate card");
        assert_eq!(basis("api", "l-3").amount.as_deref(), Some("1"));
        assert_eq!(unbilled_worth(&found).as_text()["USD"], "2");
    }
}

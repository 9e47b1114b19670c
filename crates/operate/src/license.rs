//! `awsmp inspect license`: one license's chain per account, dimension and hour: the
//! raw rows, the aggregated record they were counted into, and its submission.

use std::collections::BTreeMap;

use serde::Serialize;

use super::rows::{RowState, row_account_dimension, row_hour, row_quantity, row_state};
use awsmp_core::model::{AggregatedRecord, RawUsageRow};
use awsmp_core::time::HourBucket;

/// One group's chain.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct GroupChain {
    /// Buyer account.
    pub account: String,
    /// Dimension.
    pub dimension: String,
    /// Hour.
    pub hour: Option<HourBucket>,
    /// Raw rows by state: pending, counted, rejected, expired.
    pub rows_pending: u64,
    /// Counted rows.
    pub rows_counted: u64,
    /// Rejected rows, with each reason and how many.
    pub rows_rejected: BTreeMap<String, u64>,
    /// Expired rows.
    pub rows_expired: u64,
    /// Quantity of the counted rows.
    pub quantity_counted: i64,
    /// The aggregated record's status, if there is one.
    pub record_status: Option<String>,
    /// Its quantity (the one sent or to be sent).
    pub record_quantity: Option<i64>,
    /// Its reason.
    pub record_reason: Option<String>,
    /// Marketplace's `meteringRecordId` once billed.
    pub metering_record_id: Option<String>,
    /// Sends so far.
    pub attempts: Option<u32>,
    /// What the record's quantity is worth under the buyer's agreement (an estimate;
    /// `null` when not priced).
    pub worth: Option<crate::failures::Worth>,
}

/// Which groups to show.
#[derive(Debug, Clone, Default)]
pub struct ChainFilter {
    /// Only this hour.
    pub hour: Option<HourBucket>,
    /// Only this dimension.
    pub dimension: Option<String>,
}

/// The license's chains, by (account, dimension, hour).
pub fn chains(
    rows: &[RawUsageRow],
    records: &[AggregatedRecord],
    filter: &ChainFilter,
) -> Vec<GroupChain> {
    let keep = |dimension: &str, hour: Option<HourBucket>| {
        filter.dimension.as_deref().is_none_or(|d| d == dimension)
            && filter.hour.is_none_or(|h| hour == Some(h))
    };
    let mut groups: BTreeMap<(String, String, Option<HourBucket>), GroupChain> = BTreeMap::new();
    for row in rows {
        let Some(state) = row_state(row) else {
            continue;
        };
        let (account, dimension) = row_account_dimension(row);
        let (account, dimension) = (
            account.unwrap_or("?").to_string(),
            dimension.unwrap_or("?").to_string(),
        );
        let hour = row_hour(row);
        if !keep(&dimension, hour) {
            continue;
        }
        let chain = groups
            .entry((account.clone(), dimension.clone(), hour))
            .or_insert_with(|| GroupChain {
                account,
                dimension,
                hour,
                ..GroupChain::default()
            });
        match state {
            RowState::Pending => chain.rows_pending += 1,
            RowState::Counted => {
                chain.rows_counted += 1;
                chain.quantity_counted += row_quantity(row).unwrap_or(0);
            }
            RowState::Rejected(reason) => {
                *chain
                    .rows_rejected
                    .entry(reason.unwrap_or_else(|| "?".into()))
                    .or_default() += 1;
            }
            RowState::Expired => chain.rows_expired += 1,
        }
    }
    for record in records {
        let key = &record.key;
        if !keep(&key.dimension, Some(key.hour)) {
            continue;
        }
        let chain = groups
            .entry((
                key.customer_aws_account_id.clone(),
                key.dimension.clone(),
                Some(key.hour),
            ))
            .or_insert_with(|| GroupChain {
                account: key.customer_aws_account_id.clone(),
                dimension: key.dimension.clone(),
                hour: Some(key.hour),
                ..GroupChain::default()
            });
        chain.record_status = Some(record.status.to_string());
        chain.record_quantity = Some(record.quantity_to_send());
        chain.record_reason = record.status_reason.clone();
        chain.metering_record_id = record.metering_record_id.clone();
        chain.attempts = Some(record.attempt_count);
        chain.worth = record.kept_estimate().map(crate::failures::Worth::of);
    }
    groups.into_values().collect()
}

/// Prices each group's record not yet priced (it keeps no unit price of its own: its
/// quantity at its hour) with the rate card of its buyer's agreement in `cards` (by
/// account: a license's rows each name one).
pub fn price_chains(
    groups: &mut [GroupChain],
    cards: &BTreeMap<String, awsmp_core::charges::RateCard>,
) {
    for g in groups.iter_mut().filter(|g| g.worth.is_none()) {
        let (Some(quantity), Some(hour)) = (g.record_quantity, g.hour) else {
            continue;
        };
        let card = cards.get(&g.account);
        g.worth = Some(crate::failures::Worth::of(awsmp_core::charges::estimate(
            quantity,
            &g.dimension,
            hour.start(),
            card,
        )));
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use awsmp_core::memory::reference_row;
    use awsmp_core::model::{AggregatedStatus, Attr, attr};

    #[test]
    fn joins_each_groups_rows_to_its_record_and_filters() {
        let lic = "arn:aws:license-manager::123456789012:license:l-1";
        let mut counted = reference_row(lic, "111122223333", "api", "2026-11-30T10:15:00Z", 3);
        counted.attrs.remove(attr::METERING_PENDING);
        counted
            .attrs
            .insert(attr::METERING_STATUS.into(), Attr::S("Aggregated".into()));
        let pending = reference_row(lic, "111122223333", "gb", "2026-11-30T11:15:00Z", 1);
        let mut record = awsmp_core::memory::fixtures::operator_record(
            "api",
            "2026-11-30T10",
            AggregatedStatus::Success,
            3,
            None,
        );
        record.metering_record_id = Some("mr-1".into());
        let all = chains(
            &[counted.clone(), pending.clone()],
            &[record.clone()],
            &ChainFilter::default(),
        );
        assert_eq!(all.len(), 2);
        assert_eq!(
            (
                all[0].rows_counted,
                all[0].quantity_counted,
                all[0].metering_record_id.as_deref()
            ),
            (1, 3, Some("mr-1"))
        );
        assert_eq!(
            (
                all[1].dimension.as_str(),
                all[1].rows_pending,
                all[1].record_status.clone()
            ),
            ("gb", 1, None)
        );
        let only = chains(
            &[counted, pending],
            &[record],
            &ChainFilter {
                dimension: Some("gb".into()),
                hour: None,
            },
        );
        assert_eq!(only.len(), 1);
    }
}

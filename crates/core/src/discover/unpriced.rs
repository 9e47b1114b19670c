//! Unpriced dimensions caught before billing: before the discoverer sends a page's
//! groups to the aggregator, their buyers' rows are read in one batch
//! (`SubscriberStore::get_many`, each buyer once a run) and every group of a dimension
//! the rate card kept on the row does not price is reported (metric `UnpricedUsage`, a
//! warning naming the buyer, the agreement and the dimension, and the run's report).
//! Checked before the send, so a run that dies after it, or a send whose answer is
//! lost, cannot bill such usage unreported. On a private offer Marketplace meters it and
//! bills nothing; on a public offer it is a dimension added after the agreement, or a
//! catalog mistake `InvalidUsageDimensionException` will reject.
//!
//! The cards read are also what prices each group: [`UnpricedCheck::price_of`] gives
//! the unit price the work message carries to the aggregator, which keeps it on the
//! record (so every record says what it is worth, with no read on a later path).
//!
//! It never holds metering back: a row without a kept card is only counted, and a read
//! that fails (after the store's retries) is reported, metric `UnpricedUsageUnchecked`
//! counting the groups sent unchecked (the page is sent all the same; the next page
//! reads again).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Serialize;
use tracing::warn;

use crate::charges::{RateCard, UnitPrice};
use crate::model::GroupKey;
use crate::pipeline::retry::{RetryPolicy, retry_transient};
use crate::ports::{Clock, MetricsSink, SubscriberStore, metric};

/// A dimension a buyer's usage carries that their agreement's rate card does not price.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UnpricedDimension {
    /// The license.
    pub license_arn: String,
    /// The buyer.
    #[serde(rename = "customerAWSAccountId")]
    pub customer_aws_account_id: String,
    /// The agreement whose card does not price it.
    pub agreement_id: String,
    /// The dimension.
    pub dimension: String,
    /// Its groups (hours) sent this run.
    pub groups: usize,
}

/// One run's check: the cards read so far (`None`: the buyer's row keeps none, or there
/// is no row) and what they found.
#[derive(Debug, Default)]
pub struct UnpricedCheck {
    cards: HashMap<(String, String), Option<RateCard>>,
    found: BTreeMap<(String, String, String), (String, usize)>,
    /// Why the buyers' rows could not be read, the last time they could not.
    pub error: Option<String>,
}

impl UnpricedCheck {
    /// Checks `groups`, about to be sent, against their buyers' kept rate cards.
    pub async fn before_send<'g>(
        &mut self,
        subscribers: &dyn SubscriberStore,
        metrics: &dyn MetricsSink,
        clock: &dyn Clock,
        groups: impl IntoIterator<Item = &'g GroupKey>,
    ) {
        let groups: Vec<&GroupKey> = groups.into_iter().collect();
        let unread: BTreeSet<(String, String)> = groups
            .iter()
            .map(|g| (g.license_arn.clone(), g.customer_aws_account_id.clone()))
            .filter(|key| !self.cards.contains_key(key))
            .collect();
        if !unread.is_empty() {
            let keys: Vec<(String, String)> = unread.iter().cloned().collect();
            let read =
                retry_transient(clock, RetryPolicy::STORE, || subscribers.get_many(&keys)).await;
            match read {
                Ok(rows) => {
                    for key in unread {
                        self.cards.insert(key, None);
                    }
                    for row in rows {
                        let card = row.current_rate_card().cloned();
                        self.cards
                            .insert((row.license_arn, row.customer_aws_account_id), card);
                    }
                }
                Err(e) => {
                    let unchecked = groups
                        .iter()
                        .filter(|g| {
                            !self.cards.contains_key(&(
                                g.license_arn.clone(),
                                g.customer_aws_account_id.clone(),
                            ))
                        })
                        .count();
                    warn!(error = %e, unchecked, "buyers' rate cards unread; these groups are sent unchecked");
                    metrics.count(metric::UNPRICED_USAGE_UNCHECKED, &[], unchecked as u64);
                    self.error = Some(e.to_string());
                }
            }
        }
        for group in groups {
            let key = (
                group.license_arn.clone(),
                group.customer_aws_account_id.clone(),
            );
            let Some(Some(card)) = self.cards.get(&key) else {
                continue;
            };
            if card.terms.rate_card.contains_key(&group.dimension) {
                continue;
            }
            let agreement = &card.agreement_id;
            metrics.count(
                metric::UNPRICED_USAGE,
                &[("Dimension", group.dimension.as_str())],
                1,
            );
            let entry = self
                .found
                .entry((key.0, key.1, group.dimension.clone()))
                .or_insert_with(|| (agreement.clone(), 0));
            entry.1 += 1;
            if entry.1 == 1 {
                warn!(
                    license = %group.license_arn,
                    account = %group.customer_aws_account_id,
                    agreement = %agreement,
                    dimension = %group.dimension,
                    "usage of a dimension the buyer's agreement does not price: on a private offer it is billed at nothing, on a public one Marketplace may reject it"
                );
            }
        }
    }

    /// The unit price of `group`'s usage under the card kept for its buyer, as read by
    /// [`UnpricedCheck::before_send`] (`None`: no card kept, or the row was unread).
    pub fn price_of(&self, group: &GroupKey) -> Option<UnitPrice> {
        let key = (
            group.license_arn.clone(),
            group.customer_aws_account_id.clone(),
        );
        let card = self.cards.get(&key)?.as_ref()?;
        Some(card.unit_price(&group.dimension, group.hour.start()))
    }

    /// Every unpriced dimension of a buyer, in (license, account, dimension) order.
    pub fn unpriced(&self) -> Vec<UnpricedDimension> {
        self.found
            .iter()
            .map(
                |((license, account, dimension), (agreement, groups))| UnpricedDimension {
                    license_arn: license.clone(),
                    customer_aws_account_id: account.clone(),
                    agreement_id: agreement.clone(),
                    dimension: dimension.clone(),
                    groups: *groups,
                },
            )
            .collect()
    }

    /// Buyers whose row holds no rate card of its agreement (or has no row): not judged.
    pub fn without_rate_card(&self) -> usize {
        self.cards.values().filter(|card| card.is_none()).count()
    }
}

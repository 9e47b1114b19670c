//! Estimated charges: what a billed quantity is worth under the buyer's own agreement
//! (its rate card from `GetAgreementTerms`, private-offer prices included), in exact
//! decimals with the currency beside the amount. Always an estimate: Marketplace
//! invoices (taxes, credits, discounts through other agreements) are the truth.
//!
//! A dimension the rate card does not price is [`Estimate::Unpriced`]: on a private
//! offer Marketplace meters it and bills nothing (usage given away); on a public offer
//! it is a dimension added after the agreement, or a catalog mistake. Usage inside the
//! agreement's free trial is [`Estimate::FreeTrial`] (nothing charged).

use std::collections::BTreeMap;

use rust_decimal::Decimal;

use crate::ports::{AgreementApi, AgreementError, AgreementTerms};
use crate::time::Instant;

/// How every estimate is labelled wherever it is shown.
pub const ESTIMATE_LABEL: &str =
    "estimated from each buyer's agreement terms (quantity x price, before tax and credits)";

/// One agreement's prices, as read for a license.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateCard {
    /// The agreement they are the terms of.
    pub agreement_id: String,
    /// When it started (a free trial runs from here).
    pub start: Instant,
    /// Its terms.
    pub terms: AgreementTerms,
}

/// The rate card of `agreement_id` (`DescribeAgreement` for its start, then
/// `GetAgreementTerms`); `None` when the API does not know the agreement.
pub async fn rate_card(
    agreements: &dyn AgreementApi,
    agreement_id: &str,
) -> Result<Option<RateCard>, AgreementError> {
    let Some(facts) = agreements.describe(agreement_id).await? else {
        return Ok(None);
    };
    match agreements.terms(agreement_id).await {
        Ok(terms) => Ok(Some(RateCard {
            agreement_id: agreement_id.to_string(),
            start: facts.start,
            terms,
        })),
        Err(AgreementError::NotFound { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// What one quantity of one dimension is worth.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Estimate {
    /// Quantity x the rate card's price.
    Priced {
        /// Exact.
        amount: Decimal,
        /// The rate card's currency (`USD`).
        currency: String,
    },
    /// Inside the agreement's free trial: nothing is charged.
    FreeTrial,
    /// The rate card has no price for the dimension.
    Unpriced,
    /// No rate card could be read for the license.
    NoRateCard,
}

impl RateCard {
    /// Whether usage at `at` of `dimension` falls inside its free trial (its days from
    /// the agreement's start; a trial that names dimensions covers only those).
    pub fn in_free_trial(&self, dimension: &str, at: Instant) -> bool {
        self.terms.free_trial.as_ref().is_some_and(|trial| {
            let ends = self.start + chrono::Duration::days(i64::from(trial.duration_days));
            let covers =
                trial.grants.is_empty() || trial.grants.iter().any(|g| g.dimension == dimension);
            at < ends && covers
        })
    }
}

/// What `quantity` of `dimension`, used at `at`, is worth under `card`.
pub fn estimate(quantity: i64, dimension: &str, at: Instant, card: Option<&RateCard>) -> Estimate {
    let Some(card) = card else {
        return Estimate::NoRateCard;
    };
    if card.in_free_trial(dimension, at) {
        return Estimate::FreeTrial;
    }
    match (card.terms.rate_card.get(dimension), &card.terms.currency) {
        (Some(price), Some(currency)) => Estimate::Priced {
            amount: *price * Decimal::from(quantity),
            currency: currency.clone(),
        },
        _ => Estimate::Unpriced,
    }
}

/// Amounts added up per currency (never across currencies), as exact decimals.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Amounts(BTreeMap<String, Decimal>);

impl Amounts {
    /// Adds `amount` in `currency`.
    pub fn add(&mut self, currency: &str, amount: Decimal) {
        *self.0.entry(currency.to_string()).or_default() += amount;
    }

    /// Each currency and its total, as decimal text (`"12.3450"` stays as computed).
    pub fn as_text(&self) -> BTreeMap<String, String> {
        self.0
            .iter()
            .map(|(currency, amount)| (currency.clone(), amount.normalize().to_string()))
            .collect()
    }

    /// The total in `currency`, if any.
    pub fn get(&self, currency: &str) -> Option<Decimal> {
        self.0.get(currency).copied()
    }

    /// Whether nothing was added.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::ports::{FreeTrial, TrialGrant};
    use crate::time::parse_usage_timestamp;

    fn at(s: &str) -> Instant {
        parse_usage_timestamp(s).unwrap()
    }

    fn card(trial: Option<FreeTrial>) -> RateCard {
        let mut rate_card = BTreeMap::new();
        rate_card.insert("requests".to_string(), "0.0025".parse().unwrap());
        RateCard {
            agreement_id: "agmt-1".into(),
            start: at("2026-11-01T00:00:00Z"),
            terms: AgreementTerms {
                currency: Some("USD".into()),
                rate_card,
                free_trial: trial,
                has_upfront: false,
            },
        }
    }

    #[test]
    fn a_priced_dimension_is_exact_and_carries_its_currency() {
        let e = estimate(3, "requests", at("2026-12-01T10:00:00Z"), Some(&card(None)));
        assert_eq!(
            e,
            Estimate::Priced {
                amount: "0.0075".parse().unwrap(),
                currency: "USD".into()
            }
        );
        // 0.1 + 0.2 style sums stay exact.
        let mut total = Amounts::default();
        for _ in 0..10 {
            total.add("USD", "0.1".parse().unwrap());
        }
        total.add("EUR", Decimal::ONE);
        assert_eq!(total.as_text()["USD"], "1");
        assert_eq!(total.as_text()["EUR"], "1", "never added across currencies");
    }

    #[test]
    fn unpriced_dimensions_and_missing_cards_are_named_not_zero() {
        let c = card(None);
        let when = at("2026-12-01T10:00:00Z");
        assert_eq!(
            estimate(5, "storage_gb", when, Some(&c)),
            Estimate::Unpriced
        );
        assert_eq!(estimate(5, "requests", when, None), Estimate::NoRateCard);
    }

    #[test]
    fn a_free_trial_charges_nothing_inside_its_days_and_its_dimensions() {
        let trial = FreeTrial {
            duration_days: 14,
            grants: vec![TrialGrant {
                dimension: "requests".into(),
                max_quantity: None,
            }],
        };
        let c = card(Some(trial));
        assert_eq!(
            estimate(9, "requests", at("2026-11-14T23:00:00Z"), Some(&c)),
            Estimate::FreeTrial
        );
        assert!(matches!(
            estimate(9, "requests", at("2026-11-15T00:00:00Z"), Some(&c)),
            Estimate::Priced { .. }
        ));
        assert_eq!(
            estimate(9, "storage_gb", at("2026-11-02T00:00:00Z"), Some(&c)),
            Estimate::Unpriced,
            "a trial covers only the dimensions it grants"
        );
    }
}

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

use crate::model::{Attr, AttrMap, Subscriber};
use crate::ports::{AgreementApi, AgreementError, AgreementTerms, FreeTrial, TrialGrant};
use crate::time::{Instant, format_instant};

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

/// The subscribers-row attribute holding a license's rate card.
pub const RATE_CARD_ATTR: &str = "rateCard";

/// A rate card as kept on its license's subscribers row (PII-free: prices and dates):
/// read by the agreement reconciliation when the license becomes active on an agreement
/// and again whenever the agreement's `lastUpdateTime` moves (an amendment), so
/// reports and checks price usage without calling the Agreement API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRateCard {
    /// The card.
    pub card: RateCard,
    /// The agreement's `lastUpdateTime` when the card was read (`None`: the API gave
    /// none); a different one means the terms may have changed.
    pub agreement_updated_at: Option<Instant>,
    /// When it was read.
    pub read_at: Instant,
}

impl StoredRateCard {
    /// Whether it still describes `agreement_id` as last updated at `updated_at`.
    pub fn is_current(&self, agreement_id: &str, updated_at: Option<Instant>) -> bool {
        self.card.agreement_id == agreement_id && self.agreement_updated_at == updated_at
    }

    /// The stored map.
    pub fn to_attr(&self) -> Attr {
        let s = |v: &str| Attr::S(v.to_string());
        let terms = &self.card.terms;
        let prices = terms
            .rate_card
            .iter()
            .map(|(dimension, price)| (dimension.clone(), s(&price.normalize().to_string())))
            .collect();
        let mut map = BTreeMap::from([
            ("agreementId".to_string(), s(&self.card.agreement_id)),
            ("start".to_string(), s(&format_instant(self.card.start))),
            ("prices".to_string(), Attr::M(prices)),
            ("hasUpfront".to_string(), Attr::Bool(terms.has_upfront)),
            ("readAt".to_string(), s(&format_instant(self.read_at))),
        ]);
        if let Some(currency) = &terms.currency {
            map.insert("currency".to_string(), s(currency));
        }
        if let Some(at) = self.agreement_updated_at {
            map.insert("agreementUpdatedAt".to_string(), s(&format_instant(at)));
        }
        if let Some(trial) = &terms.free_trial {
            let grants = trial
                .grants
                .iter()
                .map(|grant| {
                    let mut g = BTreeMap::from([("dimension".to_string(), s(&grant.dimension))]);
                    if let Some(max) = grant.max_quantity {
                        g.insert("maxQuantity".to_string(), Attr::N(max.to_string()));
                    }
                    Attr::M(g)
                })
                .collect();
            map.insert(
                "freeTrial".to_string(),
                Attr::M(BTreeMap::from([
                    ("days".to_string(), Attr::N(trial.duration_days.to_string())),
                    ("grants".to_string(), Attr::L(grants)),
                ])),
            );
        }
        Attr::M(map)
    }

    /// Reads the stored map; an error names what is wrong.
    pub fn from_attr(value: &Attr) -> Result<Self, String> {
        let map = AttrMap::of(RATE_CARD_ATTR, value)?;
        let mut rate_card = BTreeMap::new();
        if let Some(prices) = map.get("prices") {
            let prices = AttrMap::of("rateCard.prices", prices)?;
            for dimension in prices.keys() {
                rate_card.insert(dimension.to_string(), prices.parsed(dimension)?);
            }
        }
        let free_trial = match map.get("freeTrial") {
            None => None,
            Some(trial) => {
                let trial = AttrMap::of("rateCard.freeTrial", trial)?;
                let mut grants = Vec::new();
                if let Some(Attr::L(items)) = trial.get("grants") {
                    for item in items {
                        let grant = AttrMap::of("rateCard.freeTrial.grants[]", item)?;
                        grants.push(TrialGrant {
                            dimension: grant.text("dimension")?,
                            max_quantity: match grant.get("maxQuantity") {
                                None => None,
                                Some(_) => Some(grant.number("maxQuantity")?),
                            },
                        });
                    }
                }
                Some(FreeTrial {
                    duration_days: trial.number("days")?,
                    grants,
                })
            }
        };
        Ok(StoredRateCard {
            card: RateCard {
                agreement_id: map.text("agreementId")?,
                start: map.instant("start")?,
                terms: AgreementTerms {
                    currency: map.optional("currency"),
                    rate_card,
                    free_trial,
                    has_upfront: matches!(map.get("hasUpfront"), Some(Attr::Bool(true))),
                },
            },
            agreement_updated_at: map.optional_instant("agreementUpdatedAt")?,
            read_at: map.instant("readAt")?,
        })
    }
}

/// The rate card of a subscribers row: the one kept on it when it is of the row's
/// agreement (no call; as fresh as the last reconciliation run), else read from the
/// API. `None`: the row names no agreement, or the API does not know it.
pub async fn rate_card_of(
    row: &Subscriber,
    agreements: &dyn AgreementApi,
) -> Result<Option<RateCard>, AgreementError> {
    if let Some(kept) = row.current_rate_card() {
        return Ok(Some(kept.clone()));
    }
    match &row.agreement_id {
        Some(agreement_id) => rate_card(agreements, agreement_id).await,
        None => Ok(None),
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
    card.map_or(Estimate::NoRateCard, |card| {
        card.unit_price(dimension, at).estimate(quantity)
    })
}

/// The aggregated-record attribute holding the unit price its usage was priced at.
pub const UNIT_PRICE_ATTR: &str = "unitPrice";

/// What one unit of a dimension, used in a given hour, costs under a buyer's agreement:
/// taken by the discoverer from the rate card kept on the buyer's row when it sends the
/// group, carried in the work message and kept on the aggregated record
/// ([`UNIT_PRICE_ATTR`]), so each record says what it is worth as it was priced, with no
/// read on any later path. A record without one was sent while no card was kept (or
/// the row could not be read): "no rate card".
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct UnitPrice {
    /// The agreement whose rate card priced it.
    pub agreement_id: String,
    /// The price, or why there is none.
    #[serde(flatten)]
    pub basis: PriceBasis,
}

/// A unit's price under an agreement, or why it has none.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "basis", rename_all = "camelCase")]
pub enum PriceBasis {
    /// Priced by the rate card.
    Priced {
        /// One unit's price, exact (a decimal string on the wire).
        #[serde(with = "rust_decimal::serde::str")]
        #[cfg_attr(feature = "schema", schemars(with = "String"))]
        price: Decimal,
        /// Its currency (`USD`).
        currency: String,
    },
    /// Inside the agreement's free trial: nothing is charged.
    FreeTrial,
    /// The rate card has no price for the dimension.
    Unpriced,
}

impl RateCard {
    /// What one unit of `dimension`, used at `at`, costs under this card.
    pub fn unit_price(&self, dimension: &str, at: Instant) -> UnitPrice {
        let basis = if self.in_free_trial(dimension, at) {
            PriceBasis::FreeTrial
        } else {
            match (self.terms.rate_card.get(dimension), &self.terms.currency) {
                (Some(price), Some(currency)) => PriceBasis::Priced {
                    price: *price,
                    currency: currency.clone(),
                },
                _ => PriceBasis::Unpriced,
            }
        };
        UnitPrice {
            agreement_id: self.agreement_id.clone(),
            basis,
        }
    }
}

impl UnitPrice {
    /// What `quantity` units are worth at this price.
    pub fn estimate(&self, quantity: i64) -> Estimate {
        match &self.basis {
            PriceBasis::Priced { price, currency } => Estimate::Priced {
                amount: *price * Decimal::from(quantity),
                currency: currency.clone(),
            },
            PriceBasis::FreeTrial => Estimate::FreeTrial,
            PriceBasis::Unpriced => Estimate::Unpriced,
        }
    }

    /// The stored map (`agreementId`, `basis`: `priced`, `freeTrial` or `unpriced`, and
    /// for a priced unit `price` as a decimal string and `currency`).
    pub fn to_attr(&self) -> Attr {
        let s = |v: &str| Attr::S(v.to_string());
        let mut map = BTreeMap::from([("agreementId".to_string(), s(&self.agreement_id))]);
        let basis = match &self.basis {
            PriceBasis::Priced { price, currency } => {
                map.insert("price".to_string(), s(&price.normalize().to_string()));
                map.insert("currency".to_string(), s(currency));
                "priced"
            }
            PriceBasis::FreeTrial => "freeTrial",
            PriceBasis::Unpriced => "unpriced",
        };
        map.insert("basis".to_string(), s(basis));
        Attr::M(map)
    }

    /// Reads the stored map; an error names what is wrong.
    pub fn from_attr(value: &Attr) -> Result<Self, String> {
        let map = AttrMap::of(UNIT_PRICE_ATTR, value)?;
        let basis = match map.text("basis")?.as_str() {
            "priced" => PriceBasis::Priced {
                price: map.parsed("price")?,
                currency: map.text("currency")?,
            },
            "freeTrial" => PriceBasis::FreeTrial,
            "unpriced" => PriceBasis::Unpriced,
            other => {
                return Err(format!(
                    "{UNIT_PRICE_ATTR}.basis is {other:?}: expected priced, freeTrial or unpriced"
                ));
            }
        };
        Ok(UnitPrice {
            agreement_id: map.text("agreementId")?,
            basis,
        })
    }
}

/// What a quantity is worth, as the operator tool and the usage API show it: an
/// estimate from the buyer's agreement terms ([`ESTIMATE_LABEL`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Worth {
    /// Quantity x price, exact (a decimal string); `null` unless `basis` is `priced`.
    pub amount: Option<String>,
    /// Its currency.
    pub currency: Option<String>,
    /// `priced`, `free trial` (nothing charged), `unpriced` (the rate card has no price
    /// for the dimension) or `no rate card` (none could be read for the license).
    pub basis: &'static str,
}

impl Worth {
    /// What an estimate says, as shown.
    pub fn of(estimate: Estimate) -> Self {
        match estimate {
            Estimate::Priced { amount, currency } => Worth {
                amount: Some(amount.normalize().to_string()),
                currency: Some(currency),
                basis: "priced",
            },
            Estimate::FreeTrial => Worth::unpriced("free trial"),
            Estimate::Unpriced => Worth::unpriced("unpriced"),
            Estimate::NoRateCard => Worth::unpriced("no rate card"),
        }
    }

    /// Not priced, and why (`free trial`, `unpriced`, `no rate card`).
    pub fn unpriced(basis: &'static str) -> Self {
        Worth {
            amount: None,
            currency: None,
            basis,
        }
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

    #[test]
    fn a_stored_rate_card_reads_back_as_written_and_a_bad_price_is_named() {
        let trial = FreeTrial {
            duration_days: 14,
            grants: vec![TrialGrant {
                dimension: "requests".into(),
                max_quantity: Some(1000),
            }],
        };
        let stored = StoredRateCard {
            card: card(Some(trial)),
            agreement_updated_at: Some(at("2026-11-02T00:00:00Z")),
            read_at: at("2026-12-01T10:00:00Z"),
        };
        assert_eq!(
            StoredRateCard::from_attr(&stored.to_attr()).unwrap(),
            stored
        );
        let bare = StoredRateCard {
            card: RateCard {
                terms: AgreementTerms::default(),
                ..card(None)
            },
            agreement_updated_at: None,
            read_at: at("2026-12-01T10:00:00Z"),
        };
        assert_eq!(StoredRateCard::from_attr(&bare.to_attr()).unwrap(), bare);
        assert!(stored.is_current("agmt-1", Some(at("2026-11-02T00:00:00Z"))));
        assert!(!stored.is_current("agmt-1", None), "an amendment moved it");
        assert!(!stored.is_current("agmt-2", Some(at("2026-11-02T00:00:00Z"))));

        let Attr::M(mut map) = stored.to_attr() else {
            unreachable!()
        };
        map.insert(
            "prices".into(),
            Attr::M(BTreeMap::from([(
                "requests".into(),
                Attr::S("cheap".into()),
            )])),
        );
        let err = StoredRateCard::from_attr(&Attr::M(map)).unwrap_err();
        assert!(err.contains("rateCard.prices.requests"), "{err}");
    }

    #[test]
    fn a_unit_price_is_the_cards_for_the_hour_and_keeps_its_decimal_everywhere() {
        let trial = FreeTrial {
            duration_days: 14,
            grants: Vec::new(),
        };
        let c = card(Some(trial));
        let inside = c.unit_price("requests", at("2026-11-03T00:00:00Z"));
        assert_eq!(inside.basis, PriceBasis::FreeTrial);
        let after = c.unit_price("requests", at("2026-12-03T00:00:00Z"));
        assert_eq!(
            after,
            UnitPrice {
                agreement_id: "agmt-1".into(),
                basis: PriceBasis::Priced {
                    price: "0.0025".parse().unwrap(),
                    currency: "USD".into()
                }
            }
        );
        assert_eq!(
            c.unit_price("storage_gb", at("2026-12-03T00:00:00Z")).basis,
            PriceBasis::Unpriced
        );
        // What a unit price says of a quantity is what the card says of it.
        for (dimension, hour) in [
            ("requests", "2026-11-03T00:00:00Z"),
            ("requests", "2026-12-03T00:00:00Z"),
            ("storage_gb", "2026-12-03T00:00:00Z"),
        ] {
            assert_eq!(
                c.unit_price(dimension, at(hour)).estimate(7),
                estimate(7, dimension, at(hour), Some(&c))
            );
        }
        // Stored and sent as JSON, it reads back exactly (no float on the way).
        for price in [
            inside,
            after.clone(),
            UnitPrice {
                basis: PriceBasis::Unpriced,
                ..after.clone()
            },
        ] {
            assert_eq!(UnitPrice::from_attr(&price.to_attr()).unwrap(), price);
            let json = serde_json::to_string(&price).unwrap();
            assert_eq!(serde_json::from_str::<UnitPrice>(&json).unwrap(), price);
        }
        assert_eq!(
            serde_json::to_value(&after).unwrap(),
            serde_json::json!({"agreementId": "agmt-1", "basis": "priced", "price": "0.0025", "currency": "USD"})
        );
        let Attr::M(mut map) = after.to_attr() else {
            unreachable!()
        };
        map.insert("basis".into(), Attr::S("cheap".into()));
        let err = UnitPrice::from_attr(&Attr::M(map)).unwrap_err();
        assert!(err.contains("unitPrice.basis"), "{err}");
    }
}

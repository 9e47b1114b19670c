//! The Agreement side's public data: what the admin API seeds (agreements with their
//! rate card, free trial and upfront price) and what it reports (agreements, billing
//! adjustments, emitted events). JSON in snake_case; money as decimal strings;
//! enum values spelled as the Agreement API spells them.

use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

/// An agreement's status (the API's `AgreementStatus`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[derive(Default)]
pub enum AgreementStatus {
    /// In force.
    #[default]
    Active,
    /// Ended with no stated reason.
    Archived,
    /// The acceptor ended it early.
    Cancelled,
    /// Reached its end date.
    Expired,
    /// Renewed into a new agreement.
    Renewed,
    /// Replaced through a replacement offer.
    Replaced,
    /// Undocumented.
    RolledBack,
    /// Undocumented.
    Superseded,
    /// AWS ended it early (e.g. payment failure).
    Terminated,
}

impl AgreementStatus {
    /// The wire value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Active => "ACTIVE",
            Self::Archived => "ARCHIVED",
            Self::Cancelled => "CANCELLED",
            Self::Expired => "EXPIRED",
            Self::Renewed => "RENEWED",
            Self::Replaced => "REPLACED",
            Self::RolledBack => "ROLLED_BACK",
            Self::Superseded => "SUPERSEDED",
            Self::Terminated => "TERMINATED",
        }
    }

    /// Every status, for filter validation.
    pub const ALL: [Self; 9] = [
        Self::Active,
        Self::Archived,
        Self::Cancelled,
        Self::Expired,
        Self::Renewed,
        Self::Replaced,
        Self::RolledBack,
        Self::Superseded,
        Self::Terminated,
    ];
}

/// The per-unit price of one dimension.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateSeed {
    /// The dimension's API name (the metering dimension).
    pub dimension_key: String,
    /// Price per unit, a decimal string (`"0.015"`).
    #[serde(with = "decimal_string")]
    pub price: Decimal,
}

/// A quantity granted by a free trial or an upfront price.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GrantSeed {
    /// The dimension.
    pub dimension_key: String,
    /// The quantity; absent: unlimited (sent as no `maxQuantity`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_quantity: Option<i32>,
}

/// A free trial: usage during its first `duration_days` is not charged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FreeTrialSeed {
    /// 5 to 31 days (sent as `P<n>D`).
    pub duration_days: u32,
    /// What the trial grants.
    #[serde(default)]
    pub grants: Vec<GrantSeed>,
}

/// A fixed upfront price, invoiced at acceptance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FixedUpfrontSeed {
    /// ISO 8601 duration (`P12M`).
    pub duration: String,
    /// The price, a decimal string.
    #[serde(with = "decimal_string")]
    pub price: Decimal,
    /// What the price grants.
    #[serde(default)]
    pub grants: Vec<GrantSeed>,
}

/// An agreement as the admin API seeds it (`POST /admin/agreements`; seeding an
/// existing id amends it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgreementSeed {
    /// 1..64 of `[A-Za-z0-9_/-]` (`agmt-...`).
    pub agreement_id: String,
    /// The buyer's license (what metering and the entitlements name).
    pub license_arn: String,
    /// The product code (metering, events).
    pub product_code: String,
    /// The product id (`proposalSummary.resources[].id`); absent: the product code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub product_id: Option<String>,
    /// The buyer's account (the acceptor).
    pub customer_aws_account_id: String,
    /// The seller's account (the proposer).
    pub proposer_account_id: String,
    /// The accepted offer.
    pub offer_id: String,
    /// The offer set, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offer_set_id: Option<String>,
    /// The channel partner's resale authorization (CPPO); only events carry it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resale_authorization_id: Option<String>,
    /// Whether the caller is the seller of record (false: an ISV looking at a CPPO
    /// agreement; invoices and adjustments answer AccessDeniedException).
    #[serde(default = "yes")]
    pub seller_of_record: bool,
    /// When it starts; absent: the sim clock's now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<DateTime<Utc>>,
    /// When it ends; absent: pay-as-you-go, no end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<DateTime<Utc>>,
    /// When it was accepted; absent: its start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acceptance_time: Option<DateTime<Utc>>,
    /// Its status (default `ACTIVE`).
    #[serde(default)]
    pub status: AgreementStatus,
    /// ISO 4217 currency of every price (default `USD`).
    #[serde(default = "usd")]
    pub currency_code: String,
    /// The usage rate card (a `UsageBasedPricingTerm`); empty: no such term.
    #[serde(default)]
    pub rate_card: Vec<RateSeed>,
    /// A `FreeTrialPricingTerm`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub free_trial: Option<FreeTrialSeed>,
    /// A `FixedUpfrontPricingTerm`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fixed_upfront: Option<FixedUpfrontSeed>,
    /// The first agreement of its renewal chain; absent: itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initial_agreement_id: Option<String>,
    /// Whether an `ACTIVE` agreement entitles (license, account) to the product for
    /// metering, and ending it starts the final metering hour (default true).
    #[serde(default = "yes")]
    pub entitle: bool,
}

impl AgreementSeed {
    /// An active pay-as-you-go agreement of the seller of record (`123456789012`) in
    /// USD: `agreement_id` on `license_arn` of `account`, for `product_code` (the
    /// Agreement API's `product_id`), from `start`, accepting offer `offer_id`; no rate
    /// card (see [`AgreementSeed::priced`]), no trial, and it does not entitle the
    /// license for metering (the caller entitles it).
    pub fn active(
        agreement_id: &str,
        license_arn: &str,
        account: &str,
        (product_code, product_id): (&str, &str),
        start: DateTime<Utc>,
        offer_id: &str,
    ) -> Self {
        AgreementSeed {
            agreement_id: agreement_id.into(),
            license_arn: license_arn.into(),
            product_code: product_code.into(),
            product_id: Some(product_id.into()),
            customer_aws_account_id: account.into(),
            proposer_account_id: "123456789012".into(),
            offer_id: offer_id.into(),
            offer_set_id: None,
            resale_authorization_id: None,
            seller_of_record: true,
            start_time: Some(start),
            end_time: None,
            acceptance_time: None,
            status: AgreementStatus::Active,
            currency_code: usd(),
            rate_card: Vec::new(),
            free_trial: None,
            fixed_upfront: None,
            initial_agreement_id: None,
            entitle: false,
        }
    }

    /// The same agreement with its usage rate card: each dimension and its price, a
    /// decimal string (`"0.0025"`); a price that is no decimal is refused.
    pub fn priced(self, prices: &[(&str, &str)]) -> Result<Self, crate::error::AdminError> {
        let rate_card = prices
            .iter()
            .map(|(dimension, price)| {
                let price = price.parse::<Decimal>().map_err(|e| {
                    crate::error::AdminError::Invalid(format!(
                        "the price {price:?} of dimension {dimension} is not a decimal: {e}"
                    ))
                })?;
                Ok(RateSeed {
                    dimension_key: (*dimension).to_string(),
                    price,
                })
            })
            .collect::<Result<_, crate::error::AdminError>>()?;
        Ok(AgreementSeed { rate_card, ..self })
    }
}

fn yes() -> bool {
    true
}

fn usd() -> String {
    "USD".to_owned()
}

/// An agreement the simulator holds: the seed with its times filled in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Agreement {
    /// What was seeded (`start_time` and `acceptance_time` filled in).
    #[serde(flatten)]
    pub seed: AgreementSeed,
    /// Last amendment or status change (sim clock).
    pub last_update_time: DateTime<Utc>,
}

impl Agreement {
    /// When it starts.
    pub fn start_time(&self) -> DateTime<Utc> {
        self.seed.start_time.unwrap_or(self.last_update_time)
    }

    /// When it was accepted.
    pub fn acceptance_time(&self) -> DateTime<Utc> {
        self.seed
            .acceptance_time
            .unwrap_or_else(|| self.start_time())
    }

    /// `proposalSummary.resources[].id`.
    pub fn product_id(&self) -> &str {
        self.seed
            .product_id
            .as_deref()
            .unwrap_or(&self.seed.product_code)
    }

    /// The first agreement of its chain.
    pub fn initial_agreement_id(&self) -> &str {
        self.seed
            .initial_agreement_id
            .as_deref()
            .unwrap_or(&self.seed.agreement_id)
    }

    /// `endTimeBehavior` (type, reason code): only active agreements with an end date.
    pub fn end_time_behavior(&self) -> Option<(&'static str, &'static str)> {
        (self.seed.status == AgreementStatus::Active && self.seed.end_time.is_some())
            .then_some(("EXPIRE", "NO_RENEWAL_TERM"))
    }
}

/// Ends an agreement (`POST /admin/agreements/end`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgreementEnd {
    /// Which agreement.
    pub agreement_id: String,
    /// Its new status: anything but `ACTIVE`.
    pub status: AgreementStatus,
}

/// A billing adjustment request's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum AdjustmentStatus {
    /// Being processed.
    Pending,
    /// Adjusted: the buyer gets a credit memo.
    Completed,
    /// Failed asynchronous validation (`status_message` says why).
    ValidationFailed,
}

impl AdjustmentStatus {
    /// The wire value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "PENDING",
            Self::Completed => "COMPLETED",
            Self::ValidationFailed => "VALIDATION_FAILED",
        }
    }

    /// Reads a wire value.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "PENDING" => Some(Self::Pending),
            "COMPLETED" => Some(Self::Completed),
            "VALIDATION_FAILED" => Some(Self::ValidationFailed),
            _ => None,
        }
    }
}

/// A billing adjustment (refund) request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BillingAdjustment {
    /// `ba-...`.
    pub billing_adjustment_request_id: String,
    /// The agreement.
    pub agreement_id: String,
    /// The invoice adjusted.
    pub original_invoice_id: String,
    /// The amount, positive.
    #[serde(with = "decimal_string")]
    pub adjustment_amount: Decimal,
    /// The invoice's currency.
    pub currency_code: String,
    /// Why.
    pub adjustment_reason_code: String,
    /// Free text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The caller's idempotency token.
    pub client_token: String,
    /// Where it stands.
    pub status: AdjustmentStatus,
    /// Why it failed (only when `VALIDATION_FAILED`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_message: Option<String>,
    /// When it was created (sim clock).
    pub created_at: DateTime<Utc>,
    /// Last status change (sim clock).
    pub updated_at: DateTime<Utc>,
}

/// Fails a pending adjustment (`POST /admin/billing-adjustments/fail`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdjustmentFailure {
    /// Which request.
    pub billing_adjustment_request_id: String,
    /// The `statusMessage` to report.
    pub status_message: String,
}

/// Money as a decimal string on the admin API, never a JSON number (no float on
/// the way in or out).
pub mod decimal_string {
    use std::str::FromStr;

    use rust_decimal::Decimal;
    use serde::{Deserialize, Deserializer, Serializer};

    /// Writes the decimal as a string.
    pub fn serialize<S: Serializer>(value: &Decimal, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&value.to_string())
    }

    /// Reads a non-negative decimal string.
    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Decimal, D::Error> {
        let s = String::deserialize(deserializer)?;
        let value = Decimal::from_str(&s)
            .map_err(|e| serde::de::Error::custom(format!("{s:?} is not a decimal: {e}")))?;
        if value.is_sign_negative() {
            return Err(serde::de::Error::custom(format!("{s:?} is negative")));
        }
        Ok(value)
    }
}

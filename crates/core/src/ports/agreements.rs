//! The AWS Marketplace Agreement API, read as the seller (the proposer): an agreement's
//! facts (`DescribeAgreement`), its prices (`GetAgreementTerms`), its entitlements
//! (`GetAgreementEntitlements`), the seller's purchase agreements
//! (`SearchAgreements`), its invoices (`ListAgreementInvoiceLineItems`) and billing
//! adjustments (`BatchCreateBillingAdjustmentRequest`, `GetBillingAdjustmentRequest`).
//! What the agreement reconciliation, the rate cards and corrections need, in domain
//! types: money is a [`Decimal`], never a float, and every list is paged to
//! its end by the implementation.

use std::collections::BTreeMap;

use async_trait::async_trait;
use rust_decimal::Decimal;

use crate::time::Instant;

use super::PortError;

/// `aws-marketplace:DescribeAgreement`, the operation and its IAM action's name.
pub const DESCRIBE_AGREEMENT: &str = "DescribeAgreement";
/// `aws-marketplace:GetAgreementTerms`.
pub const GET_AGREEMENT_TERMS: &str = "GetAgreementTerms";
/// `aws-marketplace:GetAgreementEntitlements`.
pub const GET_AGREEMENT_ENTITLEMENTS: &str = "GetAgreementEntitlements";
/// `aws-marketplace:SearchAgreements`.
pub const SEARCH_AGREEMENTS: &str = "SearchAgreements";
/// `aws-marketplace:ListAgreementInvoiceLineItems`.
pub const LIST_AGREEMENT_INVOICE_LINE_ITEMS: &str = "ListAgreementInvoiceLineItems";
/// `aws-marketplace:BatchCreateBillingAdjustmentRequest`: the operator's alone, never
/// a stack's.
pub const BATCH_CREATE_BILLING_ADJUSTMENT_REQUEST: &str = "BatchCreateBillingAdjustmentRequest";
/// `aws-marketplace:GetBillingAdjustmentRequest`.
pub const GET_BILLING_ADJUSTMENT_REQUEST: &str = "GetBillingAdjustmentRequest";
/// Entries one `BatchCreateBillingAdjustmentRequest` may carry.
pub const MAX_ADJUSTMENTS_PER_BATCH: usize = 5;
/// The reason code of a correction of ours: the usage was metered wrong.
pub const INCORRECT_METERING: &str = "INCORRECT_METERING";

/// An agreement's status, as `DescribeAgreement` and `SearchAgreements` spell it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AgreementStatus {
    /// `ACTIVE`.
    Active,
    /// `ARCHIVED`: ended with no stated reason.
    Archived,
    /// `CANCELLED`: the buyer ended it early.
    Cancelled,
    /// `EXPIRED`: reached its end date.
    Expired,
    /// `RENEWED`: renewed into a new agreement.
    Renewed,
    /// `REPLACED`: replaced through a replacement offer.
    Replaced,
    /// `ROLLED_BACK` (undocumented).
    RolledBack,
    /// `SUPERSEDED` (undocumented).
    Superseded,
    /// `TERMINATED`: AWS ended it early (a failed payment, say).
    Terminated,
    /// A status this build does not know, as answered.
    Unknown(String),
}

impl AgreementStatus {
    /// The status as the API spells it; anything else is [`AgreementStatus::Unknown`].
    pub fn parse(s: &str) -> Self {
        match s {
            "ACTIVE" => AgreementStatus::Active,
            "ARCHIVED" => AgreementStatus::Archived,
            "CANCELLED" => AgreementStatus::Cancelled,
            "EXPIRED" => AgreementStatus::Expired,
            "RENEWED" => AgreementStatus::Renewed,
            "REPLACED" => AgreementStatus::Replaced,
            "ROLLED_BACK" => AgreementStatus::RolledBack,
            "SUPERSEDED" => AgreementStatus::Superseded,
            "TERMINATED" => AgreementStatus::Terminated,
            other => AgreementStatus::Unknown(other.to_string()),
        }
    }

    /// The API's spelling (`ACTIVE`, ...).
    pub fn as_str(&self) -> &str {
        match self {
            AgreementStatus::Active => "ACTIVE",
            AgreementStatus::Archived => "ARCHIVED",
            AgreementStatus::Cancelled => "CANCELLED",
            AgreementStatus::Expired => "EXPIRED",
            AgreementStatus::Renewed => "RENEWED",
            AgreementStatus::Replaced => "REPLACED",
            AgreementStatus::RolledBack => "ROLLED_BACK",
            AgreementStatus::Superseded => "SUPERSEDED",
            AgreementStatus::Terminated => "TERMINATED",
            AgreementStatus::Unknown(s) => s,
        }
    }
}

impl std::fmt::Display for AgreementStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What happens at an active agreement's end date (`endTimeBehavior`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndTimeBehavior {
    /// `RENEW`, `REPLACE` or `EXPIRE`, as answered.
    pub kind: String,
    /// Why (`NO_RENEWAL_TERM`, `PROPOSER_RENEW_OPTED_OUT`, ...), as answered.
    pub reason_code: Option<String>,
}

/// One agreement as `DescribeAgreement` answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgreementFacts {
    /// The agreement id (`agmt-...`).
    pub agreement_id: String,
    /// Its status.
    pub status: AgreementStatus,
    /// The acceptor's account: the buyer.
    pub acceptor_account_id: String,
    /// The proposer's account: the seller (or the channel partner of a CPPO).
    pub proposer_account_id: String,
    /// The offer accepted.
    pub offer_id: String,
    /// Its offer set, if any.
    pub offer_set_id: Option<String>,
    /// The product (the proposal's first resource), if the answer names one.
    pub product_id: Option<String>,
    /// When it starts (or started).
    pub start: Instant,
    /// When it ends; `None` for pay-as-you-go.
    pub end: Option<Instant>,
    /// When the buyer accepted (before `start` for a future-dated agreement).
    pub acceptance_time: Instant,
    /// The first agreement of its renewal/replacement chain (its own id when none
    /// preceded it).
    pub initial_agreement_id: Option<String>,
    /// What happens at its end date (active agreements with one only).
    pub end_time_behavior: Option<EndTimeBehavior>,
}

/// One dimension a free trial grants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrialGrant {
    /// The dimension key.
    pub dimension: String,
    /// The quantity granted; `None`: unlimited. (The Rust SDK reads an absent
    /// `maxQuantity` as 1, so through it this is always `Some`.)
    pub max_quantity: Option<u32>,
}

/// A `freeTrialPricingTerm`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FreeTrial {
    /// Its length in days (`P14D` is 14).
    pub duration_days: u32,
    /// What it grants.
    pub grants: Vec<TrialGrant>,
}

/// What an agreement's terms say about money (`GetAgreementTerms`, every page).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AgreementTerms {
    /// The currency of its priced terms (`USD`); `None` when it has none.
    pub currency: Option<String>,
    /// Price per unit by dimension key, from its `usageBasedPricingTerm`s; empty when
    /// it has no usage term (an upfront-only contract, a free agreement).
    pub rate_card: BTreeMap<String, Decimal>,
    /// Its free trial, if any.
    pub free_trial: Option<FreeTrial>,
    /// Whether it has an upfront price (a fixed or configurable upfront term).
    pub has_upfront: bool,
}

/// An entitlement's status (`GetAgreementEntitlements`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum EntitlementStatus {
    /// `PROVISIONED`: the buyer may use the product now.
    Provisioned,
    /// `SCHEDULED`: from a future start date.
    Scheduled,
    /// `PENDING`: being provisioned (can last minutes after the agreement is active).
    Pending,
    /// `FAILED`.
    Failed,
    /// `DEPROVISIONED`: the agreement is no longer active.
    Deprovisioned,
    /// A status this build does not know, as answered.
    Unknown(String),
}

impl EntitlementStatus {
    /// The status as the API spells it; anything else is [`EntitlementStatus::Unknown`].
    pub fn parse(s: &str) -> Self {
        match s {
            "PROVISIONED" => EntitlementStatus::Provisioned,
            "SCHEDULED" => EntitlementStatus::Scheduled,
            "PENDING" => EntitlementStatus::Pending,
            "FAILED" => EntitlementStatus::Failed,
            "DEPROVISIONED" => EntitlementStatus::Deprovisioned,
            other => EntitlementStatus::Unknown(other.to_string()),
        }
    }

    /// The API's spelling.
    pub fn as_str(&self) -> &str {
        match self {
            EntitlementStatus::Provisioned => "PROVISIONED",
            EntitlementStatus::Scheduled => "SCHEDULED",
            EntitlementStatus::Pending => "PENDING",
            EntitlementStatus::Failed => "FAILED",
            EntitlementStatus::Deprovisioned => "DEPROVISIONED",
            EntitlementStatus::Unknown(s) => s,
        }
    }
}

/// One entitlement of an agreement (the registration token is left out: it is the
/// buyer's, and valid 30 minutes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgreementEntitlement {
    /// The license it is under, if answered.
    pub license_arn: Option<String>,
    /// Its status.
    pub status: EntitlementStatus,
    /// Why (`AGREEMENT_ACTIVE`, `FUTURE_START_DATE`, ...), as answered.
    pub status_reason: Option<String>,
}

/// What to search the seller's purchase agreements for. Every search sends
/// `AgreementType=PurchaseAgreement`, `PartyType=Proposer` and catalog
/// `AWSMarketplace`; each field set here adds one filter (all must hold).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AgreementSearch {
    /// `LicenseArn`: the agreements of this license.
    pub license_arn: Option<String>,
    /// `Status`.
    pub status: Option<AgreementStatus>,
    /// `AfterLastUpdateTime`: changed at or after this instant.
    pub updated_after: Option<Instant>,
    /// `ResourceIdentifier`: the agreements of this product.
    pub product_id: Option<String>,
}

/// One agreement as `SearchAgreements` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgreementSummary {
    /// The agreement id.
    pub agreement_id: String,
    /// Its status.
    pub status: AgreementStatus,
    /// The buyer's account.
    pub acceptor_account_id: String,
    /// When it starts.
    pub start: Instant,
    /// When it ends; `None` for pay-as-you-go.
    pub end: Option<Instant>,
    /// The licenses of its entitlements (`entitlements[].licenseArn`).
    pub license_arns: Vec<String>,
    /// When it last changed (amendment, renewal, renewal opt-out).
    pub last_update_time: Option<Instant>,
    /// The first agreement of its chain.
    pub initial_agreement_id: Option<String>,
}

/// A calendar month an invoice bills (`invoiceBillingPeriod`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BillingPeriod {
    /// The year.
    pub year: i32,
    /// The month, 1..=12.
    pub month: u32,
}

impl std::fmt::Display for BillingPeriod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:04}-{:02}", self.year, self.month)
    }
}

/// One invoice of an agreement as `ListAgreementInvoiceLineItems` (grouped by
/// invoice) lists it: a pre-tax total, never its usage lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvoiceSummary {
    /// The agreement billed.
    pub agreement_id: String,
    /// The invoice id, an adjustment's `originalInvoiceId`.
    pub invoice_id: String,
    /// `INVOICE` or `CREDIT_MEMO`, as answered.
    pub invoice_type: String,
    /// Its pre-tax amount.
    pub amount: Decimal,
    /// What may still be refunded on it (less than `amount` after earlier adjustments).
    pub max_adjustment: Decimal,
    /// Its currency.
    pub currency: String,
    /// The month it bills, when answered.
    pub period: Option<BillingPeriod>,
    /// When it was issued, when answered.
    pub issued: Option<Instant>,
}

impl InvoiceSummary {
    /// Whether it is an invoice (not a credit memo).
    pub fn is_invoice(&self) -> bool {
        self.invoice_type == "INVOICE"
    }
}

/// One entry of `BatchCreateBillingAdjustmentRequest`: a refund of `amount` (positive,
/// pre-tax, in the invoice's currency) against one invoice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdjustmentRequest {
    /// The agreement (every entry of one call names the same).
    pub agreement_id: String,
    /// The invoice refunded against.
    pub original_invoice_id: String,
    /// The amount, exact.
    pub amount: Decimal,
    /// Its currency.
    pub currency: String,
    /// The reason code ([`INCORRECT_METERING`] for ours).
    pub reason_code: String,
    /// A description (at most 500 characters).
    pub description: Option<String>,
    /// Unique per entry (1..64 of `[a-zA-Z0-9-]`): the same token with the same
    /// request answers the adjustment it made, never a second one.
    pub client_token: String,
}

/// One entry the call created (or had created before with the same client token).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdjustmentFiled {
    /// The entry's client token.
    pub client_token: String,
    /// The adjustment's id (`ba-...`).
    pub adjustment_id: String,
}

/// One entry the call refused on its own (`errors[]`): nothing was created for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdjustmentRefused {
    /// The entry's client token.
    pub client_token: String,
    /// `CONFLICT_EXCEPTION` (the token was used for another request),
    /// `RESOURCE_NOT_FOUND_EXCEPTION`, `VALIDATION_EXCEPTION` or `INTERNAL_FAILURE`.
    pub code: String,
    /// What the service said.
    pub message: String,
}

/// What a `BatchCreateBillingAdjustmentRequest` answered, entry by entry.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AdjustmentBatch {
    /// Entries created (or created before with the same token).
    pub filed: Vec<AdjustmentFiled>,
    /// Entries refused.
    pub refused: Vec<AdjustmentRefused>,
}

/// A billing adjustment's status.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum AdjustmentStatus {
    /// `PENDING`: being processed.
    Pending,
    /// `COMPLETED`: the buyer has a credit memo or a refund.
    Completed,
    /// `VALIDATION_FAILED`: nothing was refunded (see the status message).
    ValidationFailed,
    /// A status this build does not know, as answered.
    Unknown(String),
}

impl AdjustmentStatus {
    /// The status as the API spells it.
    pub fn parse(s: &str) -> Self {
        match s {
            "PENDING" => AdjustmentStatus::Pending,
            "COMPLETED" => AdjustmentStatus::Completed,
            "VALIDATION_FAILED" => AdjustmentStatus::ValidationFailed,
            other => AdjustmentStatus::Unknown(other.to_string()),
        }
    }

    /// The API's spelling.
    pub fn as_str(&self) -> &str {
        match self {
            AdjustmentStatus::Pending => "PENDING",
            AdjustmentStatus::Completed => "COMPLETED",
            AdjustmentStatus::ValidationFailed => "VALIDATION_FAILED",
            AdjustmentStatus::Unknown(s) => s,
        }
    }
}

/// A billing adjustment as `GetBillingAdjustmentRequest` answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdjustmentState {
    /// Its id.
    pub adjustment_id: String,
    /// The agreement.
    pub agreement_id: String,
    /// The invoice refunded against.
    pub original_invoice_id: String,
    /// The amount.
    pub amount: Decimal,
    /// Its currency.
    pub currency: String,
    /// The client token it was filed with (`GetBillingAdjustmentRequest` does not
    /// answer it: `None` there).
    pub client_token: Option<String>,
    /// Its status.
    pub status: AdjustmentStatus,
    /// Why it failed (`VALIDATION_FAILED` only).
    pub status_message: Option<String>,
}

/// A failed Agreement API call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AgreementError {
    /// `ResourceNotFoundException`: no such agreement (or not yet: the API's
    /// consistency after acceptance is undocumented, so a caller that expects it may
    /// retry later).
    #[error("{operation}: agreement {agreement_id} not found")]
    NotFound {
        /// The operation (its IAM action's name).
        operation: &'static str,
        /// The agreement asked for.
        agreement_id: String,
    },
    /// `AccessDeniedException`: the caller's role lacks `aws-marketplace:<operation>`
    /// (or the account may not act as the agreement's proposer).
    #[error("{operation} refused: the role needs aws-marketplace:{operation} ({message})")]
    AccessDenied {
        /// The operation, whose name is the IAM action's.
        operation: &'static str,
        /// What the service said.
        message: String,
    },
    /// `ValidationException` or `ConflictException` of a write: the request itself was
    /// refused (an amount above what the invoice has left, another currency, ...)
    /// and nothing was created.
    #[error("{operation} refused: {code}{}: {message}", reason.as_ref().map(|r| format!(" ({r})")).unwrap_or_default())]
    Refused {
        /// The operation.
        operation: &'static str,
        /// `ValidationException` or `ConflictException`.
        code: String,
        /// The validation reason (`EXCEEDED_MAXIMUM_ADJUSTMENT_AMOUNT`, ...), if any.
        reason: Option<String>,
        /// What the service said.
        message: String,
    },
    /// The answer cannot be read as the domain expects (a price that is not a
    /// decimal, a required member missing, conflicting rate cards).
    #[error("{operation} answered what cannot be read: {message}")]
    Malformed {
        /// The operation.
        operation: &'static str,
        /// What was wrong, naming the agreement and the dimension.
        message: String,
    },
    /// Throttled or unavailable ([`PortError::Transient`]: retry later), or any
    /// other failure ([`PortError::Failed`]).
    #[error(transparent)]
    Port(#[from] PortError),
}

impl AgreementError {
    /// Whether the same call may succeed later (throttling, a service fault, a lost
    /// connection).
    pub fn is_transient(&self) -> bool {
        matches!(self, AgreementError::Port(PortError::Transient { .. }))
    }

    /// The IAM action that was missing, for an [`AgreementError::AccessDenied`].
    pub fn missing_permission(&self) -> Option<String> {
        match self {
            AgreementError::AccessDenied { operation, .. } => {
                Some(format!("aws-marketplace:{operation}"))
            }
            _ => None,
        }
    }
}

/// Reads a rate card's price (a decimal string) exactly: an error names the
/// agreement and the dimension.
pub fn parse_price(agreement_id: &str, dimension: &str, price: &str) -> Result<Decimal, String> {
    let parsed = price.trim().parse::<Decimal>().map_err(|e| {
        format!("agreement {agreement_id}: the price {price:?} of dimension {dimension} is not a decimal ({e})")
    })?;
    if parsed.is_sign_negative() {
        return Err(format!(
            "agreement {agreement_id}: the price {price:?} of dimension {dimension} is negative"
        ));
    }
    Ok(parsed)
}

/// Adds one usage term's prices to `rate_card`: a dimension priced twice at different
/// prices (two usage terms that disagree) is an error naming it.
pub fn add_rate(
    agreement_id: &str,
    rate_card: &mut BTreeMap<String, Decimal>,
    dimension: &str,
    price: Decimal,
) -> Result<(), String> {
    match rate_card.get(dimension) {
        Some(known) if *known != price => Err(format!(
            "agreement {agreement_id}: dimension {dimension} is priced both {known} and {price}"
        )),
        _ => {
            rate_card.insert(dimension.to_string(), price);
            Ok(())
        }
    }
}

/// A free trial's ISO 8601 duration in days (`P14D`); `None` for any other shape.
pub fn trial_days(duration: &str) -> Option<u32> {
    duration
        .strip_prefix('P')?
        .strip_suffix('D')?
        .parse::<u32>()
        .ok()
}

/// The seller's view of the Agreement API. Lists are paged to their end.
#[async_trait]
pub trait AgreementApi: Send + Sync {
    /// `DescribeAgreement`: the agreement's facts, `Ok(None)` when the API does not
    /// know it (`ResourceNotFoundException`).
    async fn describe(&self, agreement_id: &str) -> Result<Option<AgreementFacts>, AgreementError>;

    /// `GetAgreementTerms`, every page: currency, rate card, free trial, upfront.
    /// An unknown agreement is [`AgreementError::NotFound`].
    async fn terms(&self, agreement_id: &str) -> Result<AgreementTerms, AgreementError>;

    /// `GetAgreementEntitlements`, every page. An unknown agreement is
    /// [`AgreementError::NotFound`].
    async fn entitlements(
        &self,
        agreement_id: &str,
    ) -> Result<Vec<AgreementEntitlement>, AgreementError>;

    /// `SearchAgreements` as the proposer of purchase agreements, every page, sorted
    /// by agreement id.
    async fn search(
        &self,
        filter: &AgreementSearch,
    ) -> Result<Vec<AgreementSummary>, AgreementError>;

    /// `ListAgreementInvoiceLineItems` grouped by invoice, every page, of `period`
    /// only when given. An unknown agreement is [`AgreementError::NotFound`].
    async fn invoices(
        &self,
        agreement_id: &str,
        period: Option<BillingPeriod>,
    ) -> Result<Vec<InvoiceSummary>, AgreementError>;

    /// `BatchCreateBillingAdjustmentRequest` with at most
    /// [`MAX_ADJUSTMENTS_PER_BATCH`] entries of one agreement. A refused call is
    /// [`AgreementError::Refused`] and created nothing; entries refused on their own
    /// are in [`AdjustmentBatch::refused`].
    async fn request_adjustments(
        &self,
        entries: &[AdjustmentRequest],
    ) -> Result<AdjustmentBatch, AgreementError>;

    /// `GetBillingAdjustmentRequest`: `Ok(None)` for an id the API does not know.
    async fn adjustment(
        &self,
        agreement_id: &str,
        adjustment_id: &str,
    ) -> Result<Option<AdjustmentState>, AgreementError>;
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn statuses_round_trip_and_keep_the_unknown() {
        for s in [
            "ACTIVE",
            "ARCHIVED",
            "CANCELLED",
            "EXPIRED",
            "RENEWED",
            "REPLACED",
            "ROLLED_BACK",
            "SUPERSEDED",
            "TERMINATED",
            "PAUSED",
        ] {
            assert_eq!(AgreementStatus::parse(s).as_str(), s);
        }
        assert_eq!(
            AgreementStatus::parse("PAUSED"),
            AgreementStatus::Unknown("PAUSED".into())
        );
        for s in [
            "PROVISIONED",
            "SCHEDULED",
            "PENDING",
            "FAILED",
            "DEPROVISIONED",
            "NEW",
        ] {
            assert_eq!(EntitlementStatus::parse(s).as_str(), s);
        }
    }

    #[test]
    fn prices_are_exact_and_a_bad_one_names_its_dimension() {
        let price = parse_price("agmt-1", "requests", "0.0025").unwrap();
        assert_eq!(price.to_string(), "0.0025");
        assert_eq!(
            price * Decimal::from(4),
            "0.0100".parse::<Decimal>().unwrap()
        );
        let err = parse_price("agmt-1", "storage_gb", "1,5").unwrap_err();
        assert!(
            err.contains("storage_gb") && err.contains("agmt-1"),
            "{err}"
        );
        assert!(parse_price("agmt-1", "x", "-1").is_err());
    }

    #[test]
    fn a_dimension_priced_twice_must_agree() {
        let mut card = BTreeMap::new();
        let one = Decimal::from(1);
        add_rate("a", &mut card, "d", one).unwrap();
        add_rate("a", &mut card, "d", one).unwrap();
        let err = add_rate("a", &mut card, "d", Decimal::from(2)).unwrap_err();
        assert!(err.contains("dimension d"), "{err}");
    }

    #[test]
    fn trial_durations_in_days() {
        assert_eq!(trial_days("P14D"), Some(14));
        assert_eq!(trial_days("P1M"), None);
        assert_eq!(trial_days("14"), None);
    }

    #[test]
    fn access_denied_names_the_permission() {
        let err = AgreementError::AccessDenied {
            operation: GET_AGREEMENT_TERMS,
            message: "no".into(),
        };
        assert_eq!(
            err.missing_permission().as_deref(),
            Some("aws-marketplace:GetAgreementTerms")
        );
        assert!(
            err.to_string()
                .contains("aws-marketplace:GetAgreementTerms")
        );
        assert!(!err.is_transient());
        let throttled = AgreementError::from(PortError::Transient {
            operation: SEARCH_AGREEMENTS,
            message: "ThrottlingException".into(),
        });
        assert!(throttled.is_transient());
    }
}

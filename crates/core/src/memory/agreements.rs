//! [`AgreementApi`] in memory: seeded agreements and invoices, answered as the
//! Agreement API answers the seller (billing adjustments idempotent by client token,
//! never above what an invoice has left, a completed one listed as a credit memo),
//! with one-shot failures ([`AgreementOp`], `fail_next`, `lose_next`) for the error
//! paths (a throttled search, a role without `GetAgreementTerms`, an answer lost after
//! the adjustment was made).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use rust_decimal::Decimal;

use crate::ports::{
    AdjustmentBatch, AdjustmentFiled, AdjustmentRefused, AdjustmentRequest, AdjustmentState,
    AdjustmentStatus, AgreementApi, AgreementEntitlement, AgreementError, AgreementFacts,
    AgreementSearch, AgreementSummary, AgreementTerms, BATCH_CREATE_BILLING_ADJUSTMENT_REQUEST,
    BillingPeriod, DESCRIBE_AGREEMENT, GET_AGREEMENT_ENTITLEMENTS, GET_AGREEMENT_TERMS,
    GET_BILLING_ADJUSTMENT_REQUEST, InvoiceSummary, LIST_AGREEMENT_INVOICE_LINE_ITEMS,
    MAX_ADJUSTMENTS_PER_BATCH, PortError, SEARCH_AGREEMENTS,
};
use crate::sync::lock;
use crate::time::Instant;

/// One agreement as the memory API holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgreementRecord {
    /// What `describe` answers.
    pub facts: AgreementFacts,
    /// What `terms` answers.
    pub terms: AgreementTerms,
    /// What `entitlements` answers; their license ARNs are what `search` lists and
    /// filters by.
    pub entitlements: Vec<AgreementEntitlement>,
    /// `lastUpdateTime`.
    pub last_update_time: Instant,
}

/// A method of [`AgreementApi`], for [`MemoryAgreementApi::fail_next`] and
/// [`MemoryAgreementApi::calls`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AgreementOp {
    /// [`AgreementApi::describe`].
    Describe,
    /// [`AgreementApi::terms`].
    Terms,
    /// [`AgreementApi::entitlements`].
    Entitlements,
    /// [`AgreementApi::search`].
    Search,
    /// [`AgreementApi::invoices`].
    Invoices,
    /// [`AgreementApi::request_adjustments`].
    RequestAdjustments,
    /// [`AgreementApi::adjustment`].
    Adjustment,
}

impl AgreementOp {
    /// The API operation (and IAM action) it calls.
    pub fn operation(self) -> &'static str {
        match self {
            AgreementOp::Describe => DESCRIBE_AGREEMENT,
            AgreementOp::Terms => GET_AGREEMENT_TERMS,
            AgreementOp::Entitlements => GET_AGREEMENT_ENTITLEMENTS,
            AgreementOp::Search => SEARCH_AGREEMENTS,
            AgreementOp::Invoices => LIST_AGREEMENT_INVOICE_LINE_ITEMS,
            AgreementOp::RequestAdjustments => BATCH_CREATE_BILLING_ADJUSTMENT_REQUEST,
            AgreementOp::Adjustment => GET_BILLING_ADJUSTMENT_REQUEST,
        }
    }
}

#[derive(Debug, Default)]
struct State {
    agreements: BTreeMap<String, AgreementRecord>,
    invoices: Vec<InvoiceSummary>,
    adjustments: Vec<(AdjustmentRequest, AdjustmentState)>,
    faults: HashMap<AgreementOp, VecDeque<AgreementError>>,
    lost: HashMap<AgreementOp, usize>,
    calls: HashMap<AgreementOp, usize>,
}

/// [`AgreementApi`] over seeded [`AgreementRecord`]s. A cheap `Clone` handle on
/// shared state: give one clone to the code under test, seed and inspect through
/// another.
#[derive(Debug, Clone, Default)]
pub struct MemoryAgreementApi {
    state: Arc<Mutex<State>>,
}

impl MemoryAgreementApi {
    /// An API that knows no agreement.
    pub fn new() -> Self {
        Self::default()
    }

    /// Holds `record` (replacing one with the same id, as an amendment does).
    pub fn seed(&self, record: AgreementRecord) {
        lock(&self.state)
            .agreements
            .insert(record.facts.agreement_id.clone(), record);
    }

    /// Changes a held agreement in place; `false` when it is not held.
    pub fn update(&self, agreement_id: &str, change: impl FnOnce(&mut AgreementRecord)) -> bool {
        match lock(&self.state).agreements.get_mut(agreement_id) {
            Some(record) => {
                change(record);
                true
            }
            None => false,
        }
    }

    /// The held agreement, if any.
    pub fn get(&self, agreement_id: &str) -> Option<AgreementRecord> {
        lock(&self.state).agreements.get(agreement_id).cloned()
    }

    /// Fails the next call of `op` with `error` (queued: several fire in order).
    pub fn fail_next(&self, op: AgreementOp, error: AgreementError) {
        lock(&self.state)
            .faults
            .entry(op)
            .or_default()
            .push_back(error);
    }

    /// Fails the next call of `op` as a `ThrottlingException` does.
    pub fn throttle_next(&self, op: AgreementOp) {
        self.fail_next(
            op,
            AgreementError::Port(PortError::Transient {
                operation: op.operation(),
                message: "ThrottlingException: Rate exceeded".into(),
            }),
        );
    }

    /// Drops every failure queued and not yet met (a throttle is momentary: one no call
    /// met is gone).
    pub fn clear_faults(&self) {
        let mut state = lock(&self.state);
        state.faults.clear();
        state.lost.clear();
    }

    /// Lets the next call of `op` take effect, then answers it as a lost connection
    /// does ([`PortError::Transient`]).
    pub fn lose_next(&self, op: AgreementOp) {
        *lock(&self.state).lost.entry(op).or_default() += 1;
    }

    /// Holds an invoice (replacing one with the same agreement and id).
    pub fn seed_invoice(&self, invoice: InvoiceSummary) {
        let mut state = lock(&self.state);
        state.invoices.retain(|i| {
            !(i.agreement_id == invoice.agreement_id && i.invoice_id == invoice.invoice_id)
        });
        state.invoices.push(invoice);
    }

    /// Every adjustment made, in order, with the request that made it.
    pub fn adjustments(&self) -> Vec<(AdjustmentRequest, AdjustmentState)> {
        lock(&self.state).adjustments.clone()
    }

    /// Moves every pending adjustment to `status` (`message` for a failure): a failed
    /// one gives its amount back to its invoice, a completed one adds its credit memo
    /// (issued at no stated time; [`MemoryAgreementApi::settle_adjustments_at`] gives one).
    pub fn settle_adjustments(&self, status: AdjustmentStatus, message: Option<&str>) {
        self.settle_adjustments_at(status, message, None);
    }

    /// [`MemoryAgreementApi::settle_adjustments`], its credit memos issued `at`. As the
    /// Agreement API does: a `COMPLETED` adjustment is listed by `invoices` as a
    /// `CREDIT_MEMO` (`CM` and the adjustment id's digits) of its amount, in its
    /// invoice's month, with nothing left to adjust.
    pub fn settle_adjustments_at(
        &self,
        status: AdjustmentStatus,
        message: Option<&str>,
        at: Option<Instant>,
    ) {
        let mut state = lock(&self.state);
        let mut settled = Vec::new();
        for (request, adjustment) in &mut state.adjustments {
            if adjustment.status == AdjustmentStatus::Pending {
                adjustment.status = status.clone();
                if status == AdjustmentStatus::ValidationFailed {
                    adjustment.status_message = message.map(str::to_string);
                }
                settled.push((request.clone(), adjustment.adjustment_id.clone()));
            }
        }
        for (request, adjustment_id) in settled {
            let Some(invoice) = state.invoices.iter_mut().find(|i| {
                i.agreement_id == request.agreement_id
                    && i.invoice_id == request.original_invoice_id
            }) else {
                continue;
            };
            match status {
                AdjustmentStatus::ValidationFailed => invoice.max_adjustment += request.amount,
                AdjustmentStatus::Completed => {
                    let memo = InvoiceSummary {
                        agreement_id: request.agreement_id.clone(),
                        invoice_id: format!("CM{}", adjustment_id.trim_start_matches("ba-")),
                        invoice_type: "CREDIT_MEMO".into(),
                        amount: request.amount,
                        max_adjustment: Decimal::ZERO,
                        currency: request.currency.clone(),
                        period: invoice.period,
                        issued: at,
                    };
                    state.invoices.push(memo);
                }
                _ => {}
            }
        }
    }

    /// Whether the call of `op` now should take effect and then be answered as lost.
    fn take_lost(&self, op: AgreementOp) -> bool {
        let mut state = lock(&self.state);
        match state.lost.get_mut(&op) {
            Some(n) if *n > 0 => {
                *n -= 1;
                true
            }
            _ => false,
        }
    }

    /// How many times `op` was called (failed calls included).
    pub fn calls(&self, op: AgreementOp) -> usize {
        lock(&self.state).calls.get(&op).copied().unwrap_or(0)
    }

    /// Counts the call, then fails it if a failure is queued for `op`.
    fn enter(&self, op: AgreementOp) -> Result<(), AgreementError> {
        let mut state = lock(&self.state);
        *state.calls.entry(op).or_default() += 1;
        match state.faults.get_mut(&op).and_then(VecDeque::pop_front) {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }

    fn held(&self, op: AgreementOp, agreement_id: &str) -> Result<AgreementRecord, AgreementError> {
        self.get(agreement_id)
            .ok_or_else(|| AgreementError::NotFound {
                operation: op.operation(),
                agreement_id: agreement_id.to_string(),
            })
    }
}

fn lost_answer(op: AgreementOp) -> AgreementError {
    AgreementError::Port(PortError::Transient {
        operation: op.operation(),
        message: "connection reset before the answer arrived".into(),
    })
}

fn refused(reason: &str, message: String) -> AgreementError {
    AgreementError::Refused {
        operation: BATCH_CREATE_BILLING_ADJUSTMENT_REQUEST,
        code: "ValidationException".into(),
        reason: Some(reason.into()),
        message,
    }
}

/// One entry's fate in a call: made before with its token, to create, or refused.
enum Plan {
    Repeat(String),
    Create,
    Refuse(&'static str, String),
}

/// The adjustment reason codes the API takes.
const REASON_CODES: [&str; 7] = [
    "INCORRECT_TERMS_ACCEPTED",
    "INCORRECT_METERING",
    "TEST_ENVIRONMENT_CHARGES",
    "ALTERNATIVE_PROCUREMENT_CHANNEL",
    "UNINTENDED_RENEWAL",
    "BUYER_DISSATISFACTION",
    "OTHER",
];

/// An entry the API refuses the whole call for, checked field by field in the
/// simulator's order (`agreementId`, `originalInvoiceId`, `adjustmentAmount`,
/// `currencyCode`, `adjustmentReasonCode`, `description`, `clientToken`).
fn broken_entry(e: &AdjustmentRequest) -> Option<AgreementError> {
    let agreement_ok = (1..=64).contains(&e.agreement_id.len())
        && e.agreement_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'/' | b'-'));
    if !agreement_ok {
        return Some(refused(
            "INVALID_AGREEMENT_ID",
            format!(
                "agreementId {:?} must be 1 to 64 characters of [A-Za-z0-9_/-]",
                e.agreement_id
            ),
        ));
    }
    if e.original_invoice_id.is_empty() || e.original_invoice_id.len() > 255 {
        return Some(refused(
            "MISSING_INVOICE_ID",
            "originalInvoiceId is required, at most 255 characters".into(),
        ));
    }
    // The wire's `[0-9]*(\.[0-9]{0,8})?`: positive, unsigned, at most 8 decimals.
    if e.amount <= Decimal::ZERO || e.amount.normalize().scale() > 8 {
        return Some(refused(
            "INVALID_ADJUSTMENT_AMOUNT",
            format!(
                "adjustmentAmount {} must be a positive decimal of at most 8 decimals, without sign",
                e.amount
            ),
        ));
    }
    if e.currency.is_empty() {
        return Some(refused(
            "MISSING_CURRENCY_CODE",
            "currencyCode is required".into(),
        ));
    }
    if e.reason_code.is_empty() {
        return Some(refused(
            "MISSING_REASON_CODE",
            "adjustmentReasonCode is required".into(),
        ));
    }
    if !REASON_CODES.contains(&e.reason_code.as_str()) {
        return Some(refused(
            "INVALID_REASON_CODE",
            format!("{:?} is not an adjustment reason code", e.reason_code),
        ));
    }
    if e.description
        .as_ref()
        .is_some_and(|d| d.chars().count() > 500)
    {
        return Some(refused(
            "INVALID_DESCRIPTION",
            "description is longer than 500 characters".into(),
        ));
    }
    let token_ok = (1..=64).contains(&e.client_token.len())
        && e.client_token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-');
    if !token_ok {
        return Some(refused(
            "INVALID_CLIENT_TOKEN",
            format!(
                "clientToken {:?} must be 1 to 64 characters of [a-zA-Z0-9-]",
                e.client_token
            ),
        ));
    }
    None
}

/// `BatchCreateBillingAdjustmentRequest` on the state, as the simulator applies it:
/// a broken call (a broken entry, two entries with one token, two agreements, an
/// agreement without a priced term, another currency, more than an invoice has left)
/// creates nothing; an unknown agreement refuses every entry; entries are then
/// created, repeated (same token, same request) or refused one by one (the token used
/// for another request, an unknown invoice).
fn request_adjustments(
    state: &mut State,
    entries: &[AdjustmentRequest],
) -> Result<AdjustmentBatch, AgreementError> {
    if entries.is_empty() {
        return Err(refused(
            "MISSING_BILLING_ADJUSTMENTS",
            "at least one entry is required".into(),
        ));
    }
    if entries.len() > MAX_ADJUSTMENTS_PER_BATCH {
        return Err(refused(
            "BILLING_ADJUSTMENTS_LIMIT_EXCEEDED",
            format!(
                "at most {MAX_ADJUSTMENTS_PER_BATCH} entries per request (got {})",
                entries.len()
            ),
        ));
    }
    if let Some(err) = entries.iter().find_map(broken_entry) {
        return Err(err);
    }
    let tokens: BTreeSet<&str> = entries.iter().map(|e| e.client_token.as_str()).collect();
    if tokens.len() != entries.len() {
        return Err(refused(
            "INVALID_CLIENT_TOKEN",
            "each entry needs its own clientToken".into(),
        ));
    }
    if entries
        .iter()
        .any(|e| e.agreement_id != entries[0].agreement_id)
    {
        return Err(refused(
            "MULTIPLE_AGREEMENT_IDS",
            "every entry of one request must name the same agreement".into(),
        ));
    }
    let Some(agreement) = state.agreements.get(&entries[0].agreement_id) else {
        return Ok(AdjustmentBatch {
            filed: Vec::new(),
            refused: entries
                .iter()
                .map(|e| AdjustmentRefused {
                    client_token: e.client_token.clone(),
                    code: "RESOURCE_NOT_FOUND_EXCEPTION".into(),
                    message: format!("agreement {} was not found", e.agreement_id),
                })
                .collect(),
        });
    };
    if agreement.terms.rate_card.is_empty() && !agreement.terms.has_upfront {
        return Err(refused(
            "MISSING_USAGE_AGREEMENT",
            "the agreement has no priced term to adjust".into(),
        ));
    }
    let mut left: BTreeMap<String, (Decimal, String)> = BTreeMap::new();
    let mut plans = Vec::new();
    for e in entries {
        if let Some((earlier, made)) = state
            .adjustments
            .iter()
            .find(|(r, _)| r.client_token == e.client_token)
        {
            plans.push(if earlier == e {
                Plan::Repeat(made.adjustment_id.clone())
            } else {
                Plan::Refuse(
                    "CONFLICT_EXCEPTION",
                    format!(
                        "clientToken {} was already used for another billing adjustment request ({})",
                        e.client_token, made.adjustment_id
                    ),
                )
            });
            continue;
        }
        let Some(invoice) = state.invoices.iter().find(|i| {
            i.is_invoice()
                && i.agreement_id == e.agreement_id
                && i.invoice_id == e.original_invoice_id
        }) else {
            plans.push(Plan::Refuse(
                "RESOURCE_NOT_FOUND_EXCEPTION",
                format!(
                    "invoice {} of agreement {} was not found",
                    e.original_invoice_id, e.agreement_id
                ),
            ));
            continue;
        };
        let (remaining, currency) = left
            .entry(invoice.invoice_id.clone())
            .or_insert((invoice.max_adjustment, invoice.currency.clone()));
        if e.currency != *currency {
            return Err(refused(
                "INVALID_CURRENCY_CODE",
                format!(
                    "currencyCode {} is not the invoice's currency {currency}",
                    e.currency
                ),
            ));
        }
        if e.amount > *remaining {
            return Err(refused(
                "EXCEEDED_MAXIMUM_ADJUSTMENT_AMOUNT",
                format!(
                    "adjustmentAmount {} exceeds the maxAdjustmentAmount {remaining} left on invoice {}",
                    e.amount, e.original_invoice_id
                ),
            ));
        }
        *remaining -= e.amount;
        plans.push(Plan::Create);
    }
    let mut batch = AdjustmentBatch::default();
    for (e, plan) in entries.iter().zip(plans) {
        match plan {
            Plan::Repeat(adjustment_id) => batch.filed.push(AdjustmentFiled {
                client_token: e.client_token.clone(),
                adjustment_id,
            }),
            Plan::Refuse(code, message) => batch.refused.push(AdjustmentRefused {
                client_token: e.client_token.clone(),
                code: code.into(),
                message,
            }),
            Plan::Create => {
                let adjustment_id = format!("ba-{:016x}", state.adjustments.len() + 1);
                if let Some(invoice) = state.invoices.iter_mut().find(|i| {
                    i.agreement_id == e.agreement_id && i.invoice_id == e.original_invoice_id
                }) {
                    invoice.max_adjustment -= e.amount;
                }
                state.adjustments.push((
                    e.clone(),
                    AdjustmentState {
                        adjustment_id: adjustment_id.clone(),
                        agreement_id: e.agreement_id.clone(),
                        original_invoice_id: e.original_invoice_id.clone(),
                        amount: e.amount,
                        currency: e.currency.clone(),
                        client_token: Some(e.client_token.clone()),
                        status: AdjustmentStatus::Pending,
                        status_message: None,
                    },
                ));
                batch.filed.push(AdjustmentFiled {
                    client_token: e.client_token.clone(),
                    adjustment_id,
                });
            }
        }
    }
    Ok(batch)
}

fn matches(record: &AgreementRecord, filter: &AgreementSearch) -> bool {
    let license = filter.license_arn.as_ref().is_none_or(|arn| {
        record
            .entitlements
            .iter()
            .any(|e| e.license_arn.as_ref() == Some(arn))
    });
    let status = filter
        .status
        .as_ref()
        .is_none_or(|s| *s == record.facts.status);
    let updated = filter
        .updated_after
        .is_none_or(|after| record.last_update_time >= after);
    let product = filter
        .product_id
        .as_ref()
        .is_none_or(|p| record.facts.product_id.as_ref() == Some(p));
    license && status && updated && product
}

fn summary(record: &AgreementRecord) -> AgreementSummary {
    let facts = &record.facts;
    AgreementSummary {
        agreement_id: facts.agreement_id.clone(),
        status: facts.status.clone(),
        acceptor_account_id: facts.acceptor_account_id.clone(),
        start: facts.start,
        end: facts.end,
        license_arns: record
            .entitlements
            .iter()
            .filter_map(|e| e.license_arn.clone())
            .collect(),
        last_update_time: Some(record.last_update_time),
        initial_agreement_id: facts.initial_agreement_id.clone(),
    }
}

#[async_trait]
impl AgreementApi for MemoryAgreementApi {
    async fn describe(&self, agreement_id: &str) -> Result<Option<AgreementFacts>, AgreementError> {
        self.enter(AgreementOp::Describe)?;
        Ok(self.get(agreement_id).map(|record| record.facts))
    }

    async fn terms(&self, agreement_id: &str) -> Result<AgreementTerms, AgreementError> {
        self.enter(AgreementOp::Terms)?;
        Ok(self.held(AgreementOp::Terms, agreement_id)?.terms)
    }

    async fn entitlements(
        &self,
        agreement_id: &str,
    ) -> Result<Vec<AgreementEntitlement>, AgreementError> {
        self.enter(AgreementOp::Entitlements)?;
        Ok(self
            .held(AgreementOp::Entitlements, agreement_id)?
            .entitlements)
    }

    async fn search(
        &self,
        filter: &AgreementSearch,
    ) -> Result<Vec<AgreementSummary>, AgreementError> {
        self.enter(AgreementOp::Search)?;
        Ok(lock(&self.state)
            .agreements
            .values()
            .filter(|record| matches(record, filter))
            .map(summary)
            .collect())
    }

    async fn invoices(
        &self,
        agreement_id: &str,
        period: Option<BillingPeriod>,
    ) -> Result<Vec<InvoiceSummary>, AgreementError> {
        self.enter(AgreementOp::Invoices)?;
        self.held(AgreementOp::Invoices, agreement_id)?;
        let mut found: Vec<InvoiceSummary> = lock(&self.state)
            .invoices
            .iter()
            .filter(|i| i.agreement_id == agreement_id)
            .filter(|i| period.is_none_or(|p| i.period == Some(p)))
            .cloned()
            .collect();
        // As the API lists them: by issue time, then id.
        found.sort_by(|a, b| {
            a.issued
                .cmp(&b.issued)
                .then_with(|| a.invoice_id.cmp(&b.invoice_id))
        });
        Ok(found)
    }

    async fn request_adjustments(
        &self,
        entries: &[AdjustmentRequest],
    ) -> Result<AdjustmentBatch, AgreementError> {
        let op = AgreementOp::RequestAdjustments;
        self.enter(op)?;
        let batch = request_adjustments(&mut lock(&self.state), entries)?;
        if self.take_lost(op) {
            return Err(lost_answer(op));
        }
        Ok(batch)
    }

    async fn adjustment(
        &self,
        agreement_id: &str,
        adjustment_id: &str,
    ) -> Result<Option<AdjustmentState>, AgreementError> {
        self.enter(AgreementOp::Adjustment)?;
        Ok(lock(&self.state)
            .adjustments
            .iter()
            .map(|(_, a)| a)
            .find(|a| a.agreement_id == agreement_id && a.adjustment_id == adjustment_id)
            .map(|a| AdjustmentState {
                // GetBillingAdjustmentRequest does not answer it.
                client_token: None,
                ..a.clone()
            }))
    }
}

//! Refunds: `BatchCreateBillingAdjustmentRequest` (client-token idempotency, at most
//! 5 entries, never more than the invoice's `maxAdjustmentAmount`),
//! `Get`/`ListBillingAdjustmentRequests`, and the PENDING → COMPLETED step.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, TimeDelta, Utc};
use rust_decimal::Decimal;

use super::AgreementBook;
use super::doc::{Input, Obj, Value, money, page, parse_amount, text, time};
use super::error::AgreementError;
use super::invoices::{invoices, seller_of_record};
use super::model::{AdjustmentStatus, BillingAdjustment};
use super::ops::{AGREEMENT_TYPE, CATALOG, find};
use crate::model::BilledRecord;

/// Entries one `BatchCreateBillingAdjustmentRequest` call may carry.
pub const MAX_ADJUSTMENT_ENTRIES: usize = 5;
/// A PENDING adjustment completes this long after it was created (sim clock).
pub const ADJUSTMENT_PROCESSING: TimeDelta = TimeDelta::minutes(1);
/// The adjustment reason codes.
pub const REASON_CODES: [&str; 7] = [
    "INCORRECT_TERMS_ACCEPTED",
    "INCORRECT_METERING",
    "TEST_ENVIRONMENT_CHARGES",
    "ALTERNATIVE_PROCUREMENT_CHANNEL",
    "UNINTENDED_RENEWAL",
    "BUYER_DISSATISFACTION",
    "OTHER",
];
/// One validated entry of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    agreement_id: String,
    original_invoice_id: String,
    amount: Decimal,
    currency_code: String,
    reason_code: String,
    description: Option<String>,
    client_token: String,
}

impl Entry {
    fn same_request(&self, b: &BillingAdjustment) -> bool {
        self.agreement_id == b.agreement_id
            && self.original_invoice_id == b.original_invoice_id
            && self.amount == b.adjustment_amount
            && self.currency_code == b.currency_code
            && self.reason_code == b.adjustment_reason_code
            && self.description == b.description
    }
}

fn required(
    value: Option<String>,
    reason: &'static str,
    field: &str,
) -> Result<String, AgreementError> {
    value
        .filter(|v| !v.is_empty())
        .ok_or_else(|| AgreementError::validation(reason, field, format!("{field} is required")))
}

fn read_entry(item: &Value) -> Result<Entry, AgreementError> {
    let e = Input::item(item, "billingAdjustmentRequestEntries[]")?;
    let agreement_id = e.agreement_id()?;
    let original_invoice_id = required(
        e.string("originalInvoiceId")?,
        "MISSING_INVOICE_ID",
        "originalInvoiceId",
    )?;
    if original_invoice_id.len() > 255 {
        return Err(AgreementError::validation(
            "MISSING_INVOICE_ID",
            "originalInvoiceId",
            "originalInvoiceId is longer than 255 characters",
        ));
    }
    let raw_amount = required(
        e.string("adjustmentAmount")?,
        "MISSING_ADJUSTMENT_AMOUNT",
        "adjustmentAmount",
    )?;
    let amount = parse_amount(&raw_amount)
        .filter(|a| *a > Decimal::ZERO)
        .ok_or_else(|| {
            AgreementError::validation(
                "INVALID_ADJUSTMENT_AMOUNT",
                "adjustmentAmount",
                format!("adjustmentAmount {raw_amount:?} must be a positive decimal of at most 8 decimals, without sign"),
            )
        })?;
    let currency_code = required(
        e.string("currencyCode")?,
        "MISSING_CURRENCY_CODE",
        "currencyCode",
    )?;
    let reason_code = required(
        e.string("adjustmentReasonCode")?,
        "MISSING_REASON_CODE",
        "adjustmentReasonCode",
    )?;
    if !REASON_CODES.contains(&reason_code.as_str()) {
        return Err(AgreementError::validation(
            "INVALID_REASON_CODE",
            "adjustmentReasonCode",
            format!("{reason_code:?} is not an adjustment reason code"),
        ));
    }
    let description = e.string("description")?;
    if description
        .as_ref()
        .is_some_and(|d| d.chars().count() > 500)
    {
        return Err(AgreementError::validation(
            "INVALID_DESCRIPTION",
            "description",
            "description is longer than 500 characters",
        ));
    }
    let client_token = e.string("clientToken")?.unwrap_or_default();
    let token_ok = (1..=64).contains(&client_token.len())
        && client_token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-');
    if !token_ok {
        return Err(AgreementError::validation(
            "INVALID_CLIENT_TOKEN",
            "clientToken",
            format!("clientToken {client_token:?} must be 1 to 64 characters of [a-zA-Z0-9-]"),
        ));
    }
    Ok(Entry {
        agreement_id,
        original_invoice_id,
        amount,
        currency_code,
        reason_code,
        description,
        client_token,
    })
}

fn entry_error(token: &str, code: &str, message: String) -> Value {
    Obj::new()
        .s("clientToken", token)
        .s("code", code)
        .s("message", message)
        .done()
}

fn entry_item(id: &str, token: &str) -> Value {
    Obj::new()
        .s("billingAdjustmentRequestId", id)
        .s("clientToken", token)
        .done()
}

/// `BatchCreateBillingAdjustmentRequest`. Every entry is validated first; a broken
/// entry, an amount above what the invoice has left, or another currency refuses
/// the whole call and creates nothing. Then each entry is created, answered again
/// (its client token was used for the same request), or refused on its own
/// (unknown agreement or invoice; client token used for another request).
pub fn batch_create(
    book: &mut AgreementBook,
    request: &Value,
    billed: &[BilledRecord],
    now: DateTime<Utc>,
) -> Result<Value, AgreementError> {
    let input = Input::root(request)?;
    let items = input
        .list("billingAdjustmentRequestEntries")?
        .unwrap_or_default();
    if items.is_empty() {
        return Err(AgreementError::validation(
            "MISSING_BILLING_ADJUSTMENTS",
            "billingAdjustmentRequestEntries",
            "at least one entry is required",
        ));
    }
    if items.len() > MAX_ADJUSTMENT_ENTRIES {
        return Err(AgreementError::validation(
            "BILLING_ADJUSTMENTS_LIMIT_EXCEEDED",
            "billingAdjustmentRequestEntries",
            format!(
                "at most {MAX_ADJUSTMENT_ENTRIES} entries per request (got {})",
                items.len()
            ),
        ));
    }
    let entries = items
        .iter()
        .map(read_entry)
        .collect::<Result<Vec<_>, _>>()?;
    let tokens: BTreeSet<&str> = entries.iter().map(|e| e.client_token.as_str()).collect();
    if tokens.len() != entries.len() {
        return Err(AgreementError::validation(
            "INVALID_CLIENT_TOKEN",
            "clientToken",
            "each entry needs its own clientToken",
        ));
    }
    let agreement_ids: BTreeSet<&str> = entries.iter().map(|e| e.agreement_id.as_str()).collect();
    if agreement_ids.len() > 1 {
        return Err(AgreementError::validation(
            "MULTIPLE_AGREEMENT_IDS",
            "agreementId",
            "every entry of one request must name the same agreement",
        ));
    }
    let agreement = book.agreements.get(&entries[0].agreement_id).cloned();
    let Some(agreement) = agreement else {
        let errors = entries
            .iter()
            .map(|e| {
                entry_error(
                    &e.client_token,
                    "RESOURCE_NOT_FOUND_EXCEPTION",
                    format!("agreement {} was not found", e.agreement_id),
                )
            })
            .collect();
        return Ok(Obj::new()
            .v("items", Value::Array(Vec::new()))
            .v("errors", Value::Array(errors))
            .done());
    };
    seller_of_record(&agreement)?;
    if agreement.seed.rate_card.is_empty() && agreement.seed.fixed_upfront.is_none() {
        return Err(AgreementError::validation(
            "MISSING_USAGE_AGREEMENT",
            "agreementId",
            "the agreement has no priced term to adjust",
        ));
    }
    let invoices = invoices(&agreement, billed, &book.adjustments, now);
    // What each invoice has left, spent entry by entry in this call.
    let mut left: BTreeMap<&str, Decimal> = invoices
        .iter()
        .filter(|i| i.kind == "INVOICE")
        .map(|i| (i.id.as_str(), i.max_adjustment))
        .collect();
    enum Plan {
        Create,
        Repeat(String),
        Fail(&'static str, String),
    }
    let mut plans = Vec::new();
    for e in &entries {
        if let Some(earlier) = book
            .adjustments
            .iter()
            .find(|b| b.client_token == e.client_token)
        {
            plans.push(if e.same_request(earlier) {
                Plan::Repeat(earlier.billing_adjustment_request_id.clone())
            } else {
                Plan::Fail("CONFLICT_EXCEPTION", format!("clientToken {} was already used for another billing adjustment request ({})", e.client_token, earlier.billing_adjustment_request_id))
            });
            continue;
        }
        let Some(remaining) = left.get_mut(e.original_invoice_id.as_str()) else {
            plans.push(Plan::Fail(
                "RESOURCE_NOT_FOUND_EXCEPTION",
                format!(
                    "invoice {} of agreement {} was not found",
                    e.original_invoice_id, e.agreement_id
                ),
            ));
            continue;
        };
        if e.currency_code != agreement.seed.currency_code {
            return Err(AgreementError::validation(
                "INVALID_CURRENCY_CODE",
                "currencyCode",
                format!(
                    "currencyCode {} is not the invoice's currency {}",
                    e.currency_code, agreement.seed.currency_code
                ),
            ));
        }
        if e.amount > *remaining {
            return Err(AgreementError::validation(
                "EXCEEDED_MAXIMUM_ADJUSTMENT_AMOUNT",
                "adjustmentAmount",
                format!(
                    "adjustmentAmount {} exceeds the maxAdjustmentAmount {} left on invoice {}",
                    e.amount, remaining, e.original_invoice_id
                ),
            ));
        }
        *remaining -= e.amount;
        plans.push(Plan::Create);
    }
    let mut created = Vec::new();
    let mut failed = Vec::new();
    for (e, plan) in entries.into_iter().zip(plans) {
        match plan {
            Plan::Repeat(id) => created.push(entry_item(&id, &e.client_token)),
            Plan::Fail(code, message) => failed.push(entry_error(&e.client_token, code, message)),
            Plan::Create => {
                let id = format!(
                    "ba-{}",
                    book.ids.next_id().replace('-', "")[..20].to_owned()
                );
                created.push(entry_item(&id, &e.client_token));
                book.adjustments.push(BillingAdjustment {
                    billing_adjustment_request_id: id,
                    agreement_id: e.agreement_id,
                    original_invoice_id: e.original_invoice_id,
                    adjustment_amount: e.amount,
                    currency_code: e.currency_code,
                    adjustment_reason_code: e.reason_code,
                    description: e.description,
                    client_token: e.client_token,
                    status: AdjustmentStatus::Pending,
                    status_message: None,
                    created_at: now,
                    updated_at: now,
                });
            }
        }
    }
    Ok(Obj::new()
        .v("items", Value::Array(created))
        .v("errors", Value::Array(failed))
        .done())
}

/// `GetBillingAdjustmentRequest`.
pub fn get_adjustment(book: &AgreementBook, request: &Value) -> Result<Value, AgreementError> {
    let input = Input::root(request)?;
    let a = find(book, &input.agreement_id()?)?;
    let id = required(
        input.string("billingAdjustmentRequestId")?,
        "OTHER",
        "billingAdjustmentRequestId",
    )?;
    seller_of_record(a)?;
    let b = book
        .adjustments
        .iter()
        .find(|b| b.billing_adjustment_request_id == id && b.agreement_id == a.seed.agreement_id)
        .ok_or_else(|| AgreementError::not_found("BillingAdjustmentRequest", &id))?;
    Ok(Obj::new()
        .s(
            "billingAdjustmentRequestId",
            &b.billing_adjustment_request_id,
        )
        .s("agreementId", &b.agreement_id)
        .s("adjustmentReasonCode", &b.adjustment_reason_code)
        .opt("description", b.description.as_deref().map(text))
        .s("originalInvoiceId", &b.original_invoice_id)
        .v("adjustmentAmount", money(b.adjustment_amount))
        .s("currencyCode", &b.currency_code)
        .s("status", b.status.as_str())
        .opt("statusMessage", b.status_message.as_deref().map(text))
        .v("createdAt", time(b.created_at))
        .v("updatedAt", time(b.updated_at))
        .done())
}

/// `ListBillingAdjustmentRequests`: oldest first, filtered by agreement, status and
/// creation time.
pub fn list_adjustments(book: &AgreementBook, request: &Value) -> Result<Value, AgreementError> {
    let input = Input::root(request)?;
    let agreement_id = match input.string("agreementId")? {
        Some(_) => Some(input.agreement_id()?),
        None => None,
    };
    let status = match input.string("status")? {
        None => None,
        Some(s) => Some(AdjustmentStatus::parse(&s).ok_or_else(|| {
            AgreementError::validation(
                "INVALID_STATUS",
                "status",
                format!("{s:?} is not PENDING, COMPLETED or VALIDATION_FAILED"),
            )
        })?),
    };
    if input.string("catalog")?.is_some_and(|c| c != CATALOG) {
        return Err(AgreementError::validation(
            "INVALID_CATALOG",
            "catalog",
            format!("catalog must be {CATALOG}"),
        ));
    }
    if input
        .string("agreementType")?
        .is_some_and(|t| t != AGREEMENT_TYPE)
    {
        return Err(AgreementError::validation(
            "INVALID_AGREEMENT_TYPE",
            "agreementType",
            format!("agreementType must be {AGREEMENT_TYPE}"),
        ));
    }
    let after = input.time("createdAfter")?;
    let before = input.time("createdBefore")?;
    let page = page(&input, request)?;
    let visible = |b: &&BillingAdjustment| {
        book.agreements
            .get(&b.agreement_id)
            .is_some_and(|a| a.seed.seller_of_record)
    };
    let rows: Vec<&BillingAdjustment> = book
        .adjustments
        .iter()
        .filter(visible)
        .filter(|b| {
            agreement_id
                .as_deref()
                .is_none_or(|id| id == b.agreement_id)
        })
        .filter(|b| status.is_none_or(|s| s == b.status))
        .filter(|b| after.is_none_or(|t| b.created_at > t))
        .filter(|b| before.is_none_or(|t| b.created_at < t))
        .collect();
    let (rows, next) = page.cut(rows);
    let rows = rows
        .into_iter()
        .map(|b| {
            Obj::new()
                .s(
                    "billingAdjustmentRequestId",
                    &b.billing_adjustment_request_id,
                )
                .s("originalInvoiceId", &b.original_invoice_id)
                .v("adjustmentAmount", money(b.adjustment_amount))
                .s("currencyCode", &b.currency_code)
                .s("status", b.status.as_str())
                .s("agreementId", &b.agreement_id)
                .v("createdAt", time(b.created_at))
                .v("updatedAt", time(b.updated_at))
                .s("agreementType", AGREEMENT_TYPE)
                .s("catalog", CATALOG)
                .done()
        })
        .collect();
    Ok(Obj::new()
        .v("items", Value::Array(rows))
        .opt("nextToken", next.map(text))
        .done())
}

/// Completes every PENDING adjustment created [`ADJUSTMENT_PROCESSING`] or more
/// before `now`; answers the adjustments that changed.
pub fn settle(book: &mut AgreementBook, now: DateTime<Utc>) -> Vec<BillingAdjustment> {
    let mut changed = Vec::new();
    for b in &mut book.adjustments {
        if b.status == AdjustmentStatus::Pending && now - b.created_at >= ADJUSTMENT_PROCESSING {
            b.status = AdjustmentStatus::Completed;
            b.updated_at = b.created_at + ADJUSTMENT_PROCESSING;
            changed.push(b.clone());
        }
    }
    changed
}

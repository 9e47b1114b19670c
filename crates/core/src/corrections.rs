//! Corrections: a billed record (`Success`, or `DuplicateRecord` billed by an earlier
//! send of ours) the seller says was over-billed, refunded through AWS's
//! billing adjustments (`BatchCreateBillingAdjustmentRequest`, reason
//! `INCORRECT_METERING`) against the invoice that billed its month.
//!
//! Guarantees (docs/design.md, "Corrections"):
//! - **At most once.** The correction is written on its record *before* the call
//!   (status `REQUESTED`, with a client token derived from the record, the quantities
//!   and the attempt), and every rerun sends exactly what the record holds with that
//!   token, so an answer lost after AWS made the adjustment finds the same adjustment.
//! - **Never above what was billed.** One live correction per record (a new one only
//!   after AWS failed the last), for at most `(billed - correct) x price`, never more
//!   than the invoice's `maxAdjustmentAmount`.
//! - **Refusals say what to do** ([`Refusal`]): nothing billed, under-billing (cannot be
//!   added to an hour Marketplace already billed: the shortfall is reported), no
//!   invoice yet (when to run again), another currency, more than the invoice has left.

use std::collections::BTreeMap;

use chrono::{Datelike, Duration, TimeZone, Timelike, Utc};
use rust_decimal::Decimal;
use sha2::{Digest, Sha256};

use crate::charges::{Estimate, estimate, rate_card};
use crate::model::{AggregatedRecord, Attr, AttrMap, GroupKey};
use crate::ports::{
    AdjustmentRequest, AdjustmentStatus, AgreementApi, AgreementError, BillingPeriod, Clock,
    INCORRECT_METERING, OperatorStore, PortError, SubscriberStore,
};
use crate::time::{Instant, format_instant};

/// Where a correction stands, as its record keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CorrectionStatus {
    /// Written, the call not yet confirmed: a rerun sends it again with its token.
    Requested,
    /// AWS made the adjustment and is processing it.
    Pending,
    /// Refunded: the buyer has a credit memo or a refund.
    Completed,
    /// AWS refused or failed it: nothing was refunded; a new correction may be filed.
    Failed,
}

impl CorrectionStatus {
    /// As stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            CorrectionStatus::Requested => "REQUESTED",
            CorrectionStatus::Pending => "PENDING",
            CorrectionStatus::Completed => "COMPLETED",
            CorrectionStatus::Failed => "FAILED",
        }
    }

    /// The stored spelling back.
    pub fn parse(s: &str) -> Option<Self> {
        [
            CorrectionStatus::Requested,
            CorrectionStatus::Pending,
            CorrectionStatus::Completed,
            CorrectionStatus::Failed,
        ]
        .into_iter()
        .find(|c| c.as_str() == s)
    }
}

/// A correction as its record keeps it (the aggregated item's `correction` map).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Correction {
    /// The adjustment's client token ([`client_token`]).
    pub client_token: String,
    /// 1 for the record's first correction; one more after each failed one.
    pub attempt: u32,
    /// The quantity Marketplace billed.
    pub billed_quantity: i64,
    /// The quantity the seller says was right.
    pub correct_quantity: i64,
    /// The agreement refunded under.
    pub agreement_id: String,
    /// The invoice refunded against.
    pub invoice_id: String,
    /// `(billed - correct) x price`, exact.
    pub amount: Decimal,
    /// Its currency.
    pub currency: String,
    /// When it was first written.
    pub requested_at: Instant,
    /// The adjustment's id, once AWS answered it.
    pub adjustment_id: Option<String>,
    /// Where it stands.
    pub status: CorrectionStatus,
    /// Why it failed, as AWS said.
    pub message: Option<String>,
}

/// The item attribute holding a record's correction.
pub const CORRECTION_ATTR: &str = "correction";

impl Correction {
    /// Whether it holds (or may hold) a refund: anything but `FAILED`.
    pub fn is_live(&self) -> bool {
        self.status != CorrectionStatus::Failed
    }

    /// What it has refunded for certain: its amount once `COMPLETED`.
    pub fn refunded(&self) -> Decimal {
        if self.status == CorrectionStatus::Completed {
            self.amount
        } else {
            Decimal::ZERO
        }
    }

    /// The stored map.
    pub fn to_attr(&self) -> Attr {
        let s = |v: &str| Attr::S(v.to_string());
        let mut map = BTreeMap::from([
            ("clientToken".to_string(), s(&self.client_token)),
            ("attempt".to_string(), Attr::N(self.attempt.to_string())),
            (
                "billedQuantity".to_string(),
                Attr::N(self.billed_quantity.to_string()),
            ),
            (
                "correctQuantity".to_string(),
                Attr::N(self.correct_quantity.to_string()),
            ),
            ("agreementId".to_string(), s(&self.agreement_id)),
            ("invoiceId".to_string(), s(&self.invoice_id)),
            (
                "amount".to_string(),
                Attr::S(self.amount.normalize().to_string()),
            ),
            ("currency".to_string(), s(&self.currency)),
            (
                "requestedAt".to_string(),
                Attr::S(format_instant(self.requested_at)),
            ),
            ("status".to_string(), s(self.status.as_str())),
        ]);
        if let Some(id) = &self.adjustment_id {
            map.insert("adjustmentId".to_string(), s(id));
        }
        if let Some(message) = &self.message {
            map.insert("message".to_string(), s(message));
        }
        Attr::M(map)
    }

    /// Reads the stored map; an error names what is wrong.
    pub fn from_attr(value: &Attr) -> Result<Self, String> {
        let map = AttrMap::of(CORRECTION_ATTR, value)?;
        let status = map.text("status")?;
        Ok(Correction {
            client_token: map.text("clientToken")?,
            attempt: map.number("attempt")?,
            billed_quantity: map.number("billedQuantity")?,
            correct_quantity: map.number("correctQuantity")?,
            agreement_id: map.text("agreementId")?,
            invoice_id: map.text("invoiceId")?,
            amount: map.parsed("amount")?,
            currency: map.text("currency")?,
            requested_at: map.instant("requestedAt")?,
            adjustment_id: map.optional("adjustmentId"),
            status: CorrectionStatus::parse(&status)
                .ok_or_else(|| format!("{CORRECTION_ATTR}.status {status:?}"))?,
            message: map.optional("message"),
        })
    }
}

/// The client token of a correction: `awsmp-` and 56 hex digits of a SHA-256 over the
/// record's key, both quantities and the attempt (64 characters of `[a-z0-9-]`). The
/// same correction always has the same token; another quantity or attempt never.
pub fn client_token(key: &GroupKey, billed: i64, correct: i64, attempt: u32) -> String {
    let mut hash = Sha256::new();
    for field in [
        "awsmp-correction-v1",
        &key.license_arn,
        &key.customer_aws_account_id,
        &key.dimension,
        &key.hour.to_string(),
        &billed.to_string(),
        &correct.to_string(),
        &attempt.to_string(),
    ] {
        hash.update((field.len() as u64).to_be_bytes());
        hash.update(field.as_bytes());
    }
    let digest: String = hash.finalize().iter().map(|b| format!("{b:02x}")).collect();
    format!("awsmp-{}", &digest[..56])
}

/// The billing period (calendar month) of an hour.
pub fn period_of(at: Instant) -> BillingPeriod {
    BillingPeriod {
        year: at.year(),
        month: at.month(),
    }
}

/// When the invoice of `period` is expected: the first day of the next month (usage
/// invoices bill the month before their date).
pub fn invoiced_from(period: BillingPeriod) -> Instant {
    let (year, month) = if period.month == 12 {
        (period.year + 1, 1)
    } else {
        (period.year, period.month + 1)
    };
    Utc.with_ymd_and_hms(year, month, 1, 0, 0, 0)
        .single()
        .unwrap_or_else(|| Utc.timestamp_opt(0, 0).single().unwrap_or_default())
}

/// Why a correction was not filed, and what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// No such record (or retention deleted it).
    #[error(
        "no aggregated record {0}: check the license, account, dimension and hour (awsmp inspect)"
    )]
    NotFound(String),
    /// The record was not billed: nothing to refund.
    #[error("record {key} is {status}, not billed: there is nothing to refund")]
    NotBilled {
        /// The record.
        key: String,
        /// Its status.
        status: String,
    },
    /// A negative quantity.
    #[error("the correct quantity must be 0 or more, not {0}")]
    Negative(i64),
    /// The correct quantity is what was billed.
    #[error("record {key} billed {billed}, the quantity given: nothing to correct")]
    Unchanged {
        /// The record.
        key: String,
        /// What was billed.
        billed: i64,
    },
    /// Under-billed: Marketplace takes one record per hour and it is taken.
    #[error(
        "record {key} was under-billed by {shortfall} (billed {billed}, correct {correct}): Marketplace already billed this hour and takes no second record for it; report the shortfall to the buyer's account team, nothing was sent"
    )]
    UnderBilled {
        /// The record.
        key: String,
        /// What was billed.
        billed: i64,
        /// What should have been.
        correct: i64,
        /// The difference.
        shortfall: i64,
    },
    /// A live correction with other quantities exists.
    #[error(
        "record {key} already has a correction to {correct_quantity} ({status}{}): one correction per record; it can be replaced only once AWS failed it",
        adjustment_id.as_ref().map(|id| format!(", {id}")).unwrap_or_default()
    )]
    AlreadyCorrected {
        /// The record.
        key: String,
        /// The live correction's quantity.
        correct_quantity: i64,
        /// Its status.
        status: String,
        /// Its adjustment, if answered.
        adjustment_id: Option<String>,
    },
    /// The license has no agreement id on its subscribers row.
    #[error(
        "license {0} has no agreement id on its subscribers row: give --agreement-id (awsmp subscribers reconcile fills it)"
    )]
    NoAgreement(String),
    /// The Agreement API does not know the agreement.
    #[error(
        "the Agreement API does not know agreement {0}: check the license's agreement (awsmp inspect license) or give --agreement-id"
    )]
    NoRateCard(String),
    /// The dimension was billed nothing under the agreement.
    #[error(
        "dimension {dimension} {why} under agreement {agreement_id}: it was billed nothing, so there is nothing to refund"
    )]
    NothingBilled {
        /// The dimension.
        dimension: String,
        /// The agreement.
        agreement_id: String,
        /// Why: unpriced or free trial.
        why: &'static str,
    },
    /// The month's invoice is not issued yet.
    #[error(
        "agreement {agreement_id} has no invoice for {period} yet: usage is invoiced after its month ends; run this again after {retry_after}"
    )]
    NotYetInvoiced {
        /// The agreement.
        agreement_id: String,
        /// The month.
        period: BillingPeriod,
        /// When to run it again.
        retry_after: String,
    },
    /// The invoice is in another currency than the rate card.
    #[error(
        "invoice {invoice_id} is in {invoice}, the rate card in {rate_card}: an adjustment must be in the invoice's currency; correct it in the Marketplace Management Portal"
    )]
    CurrencyMismatch {
        /// The invoice.
        invoice_id: String,
        /// Its currency.
        invoice: String,
        /// The rate card's.
        rate_card: String,
    },
    /// More than the invoice has left to refund.
    #[error(
        "refunding {amount} {currency} exceeds the {max} {currency} invoice {invoice_id} has left to refund (earlier adjustments): nothing was filed"
    )]
    ExceedsRefundable {
        /// The invoice.
        invoice_id: String,
        /// What the correction is worth.
        amount: Decimal,
        /// What is left.
        max: Decimal,
        /// The currency.
        currency: String,
    },
    /// The record changed between the read and the write (another correction).
    #[error("record {0} changed while the correction was written: run it again")]
    Changed(String),
}

/// A correction that could not be carried out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CorrectionError {
    /// Refused before anything was filed.
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// A table read or write failed.
    #[error(transparent)]
    Store(#[from] PortError),
    /// An Agreement API call failed before anything was filed.
    #[error(transparent)]
    Agreement(#[from] AgreementError),
}

/// What the seller asks: this record's right quantity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CorrectionRequest {
    /// The record.
    pub key: GroupKey,
    /// The quantity that should have been billed.
    pub correct_quantity: i64,
    /// The agreement to refund under, when not the subscribers row's.
    pub agreement_id: Option<String>,
}

/// What a correction did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CorrectionOutcome {
    /// Dry run: what would be filed.
    Planned(Correction),
    /// Filed (or found filed by an earlier run with the same token): AWS answered
    /// the adjustment's id.
    Filed(Correction),
    /// Filed earlier: nothing was sent.
    AlreadyFiled(Correction),
    /// AWS refused it: the record keeps it `FAILED` with AWS's message.
    RefusedByAws(Correction),
    /// Written but not confirmed (the call failed or its answer was lost): run again;
    /// the same token files it at most once.
    Unconfirmed {
        /// The correction as written.
        correction: Correction,
        /// What failed.
        error: String,
    },
}

impl CorrectionOutcome {
    /// The correction it is about.
    pub fn correction(&self) -> &Correction {
        match self {
            CorrectionOutcome::Planned(c)
            | CorrectionOutcome::Filed(c)
            | CorrectionOutcome::AlreadyFiled(c)
            | CorrectionOutcome::RefusedByAws(c) => c,
            CorrectionOutcome::Unconfirmed { correction, .. } => correction,
        }
    }
}

/// What a correction reads and writes through.
#[derive(Clone, Copy)]
pub struct CorrectionPorts<'a> {
    /// The aggregated table (the record and its correction).
    pub records: &'a dyn OperatorStore,
    /// The subscribers table (the license's agreement).
    pub subscribers: &'a dyn SubscriberStore,
    /// The Agreement API.
    pub agreements: &'a dyn AgreementApi,
    /// Now.
    pub clock: &'a dyn Clock,
}

/// The record as read, and its correction.
async fn read(
    ports: CorrectionPorts<'_>,
    key: &GroupKey,
) -> Result<(AggregatedRecord, Option<Correction>), CorrectionError> {
    ports
        .records
        .correction(key)
        .await?
        .ok_or_else(|| Refusal::NotFound(key.to_string()).into())
}

/// The correction to file for `request` on `record` (no earlier live correction):
/// every refusal checked, nothing written.
async fn plan(
    ports: CorrectionPorts<'_>,
    request: &CorrectionRequest,
    record: &AggregatedRecord,
    attempt: u32,
) -> Result<Correction, CorrectionError> {
    let key = &record.key;
    let billed = record.quantity_to_send();
    let agreement_id = match &request.agreement_id {
        Some(id) => id.clone(),
        None => ports
            .subscribers
            .get(&key.license_arn, &key.customer_aws_account_id)
            .await?
            .and_then(|row| row.agreement_id)
            .ok_or_else(|| Refusal::NoAgreement(key.license_arn.clone()))?,
    };
    let card = rate_card(ports.agreements, &agreement_id)
        .await?
        .ok_or_else(|| Refusal::NoRateCard(agreement_id.clone()))?;
    let over = billed - request.correct_quantity;
    let nothing = |why| Refusal::NothingBilled {
        dimension: key.dimension.clone(),
        agreement_id: agreement_id.clone(),
        why,
    };
    let (amount, currency) = match estimate(over, &key.dimension, key.hour.start(), Some(&card)) {
        Estimate::Priced { amount, currency } if amount > Decimal::ZERO => (amount, currency),
        Estimate::FreeTrial => return Err(nothing("was in the free trial").into()),
        _ => return Err(nothing("has no price (or a price of 0)").into()),
    };
    let period = period_of(key.hour.start());
    let invoices = ports
        .agreements
        .invoices(&agreement_id, Some(period))
        .await?;
    let invoice = invoices
        .iter()
        .filter(|i| i.is_invoice() && i.period.is_none_or(|p| p == period))
        .max_by_key(|i| i.max_adjustment)
        .ok_or_else(|| Refusal::NotYetInvoiced {
            agreement_id: agreement_id.clone(),
            period,
            retry_after: format_instant(invoiced_from(period) + Duration::days(1)),
        })?;
    if invoice.currency != currency {
        return Err(Refusal::CurrencyMismatch {
            invoice_id: invoice.invoice_id.clone(),
            invoice: invoice.currency.clone(),
            rate_card: currency,
        }
        .into());
    }
    if amount > invoice.max_adjustment {
        return Err(Refusal::ExceedsRefundable {
            invoice_id: invoice.invoice_id.clone(),
            amount,
            max: invoice.max_adjustment,
            currency,
        }
        .into());
    }
    Ok(Correction {
        client_token: client_token(key, billed, request.correct_quantity, attempt),
        attempt,
        billed_quantity: billed,
        correct_quantity: request.correct_quantity,
        agreement_id,
        invoice_id: invoice.invoice_id.clone(),
        amount,
        currency,
        // Whole seconds: the instant as the table stores it, so a stored correction
        // reads back equal.
        requested_at: ports
            .clock
            .now()
            .with_nanosecond(0)
            .unwrap_or_else(|| ports.clock.now()),
        adjustment_id: None,
        status: CorrectionStatus::Requested,
        message: None,
    })
}

/// Checks the request against the record as read: billed, a real over-bill, and no
/// live correction of other quantities. `Some` is a live correction of the same
/// quantities (resume it); `None` means plan a new one at the returned attempt.
fn check(
    request: &CorrectionRequest,
    record: &AggregatedRecord,
    existing: Option<&Correction>,
) -> Result<(Option<Correction>, u32), Refusal> {
    let key = record.key.to_string();
    if !crate::outcomes::billed(record.status, record.status_reason.as_deref()) {
        return Err(Refusal::NotBilled {
            key,
            status: record.status.as_str().to_string(),
        });
    }
    let billed = record.quantity_to_send();
    let correct = request.correct_quantity;
    if correct < 0 {
        return Err(Refusal::Negative(correct));
    }
    if correct == billed {
        return Err(Refusal::Unchanged { key, billed });
    }
    if correct > billed {
        return Err(Refusal::UnderBilled {
            key,
            billed,
            correct,
            shortfall: correct - billed,
        });
    }
    match existing {
        Some(c) if c.is_live() && c.correct_quantity == correct => Ok((Some(c.clone()), c.attempt)),
        Some(c) if c.is_live() => Err(Refusal::AlreadyCorrected {
            key,
            correct_quantity: c.correct_quantity,
            status: c.status.as_str().to_string(),
            adjustment_id: c.adjustment_id.clone(),
        }),
        Some(failed) => Ok((None, failed.attempt + 1)),
        None => Ok((None, 1)),
    }
}

/// Files (or, with `file` false, plans) the correction of one record: refusals
/// first, then the correction written on the record, then the adjustment requested
/// with its token, the call repeated up to `retries` times while it fails
/// transiently, and what AWS answered written back. See the module docs.
pub async fn correct(
    ports: CorrectionPorts<'_>,
    request: &CorrectionRequest,
    file: bool,
    retries: u32,
) -> Result<CorrectionOutcome, CorrectionError> {
    let (record, existing) = read(ports, &request.key).await?;
    let (live, attempt) = check(request, &record, existing.as_ref())?;
    let correction = match live {
        Some(c) if c.status != CorrectionStatus::Requested => {
            return Ok(CorrectionOutcome::AlreadyFiled(c));
        }
        Some(c) => c,
        None => {
            let planned = plan(ports, request, &record, attempt).await?;
            if !file {
                return Ok(CorrectionOutcome::Planned(planned));
            }
            let expected = existing.as_ref().map(|c| c.client_token.as_str());
            if !ports
                .records
                .record_correction(&request.key, expected, &planned)
                .await?
            {
                return Err(Refusal::Changed(request.key.to_string()).into());
            }
            planned
        }
    };
    if !file {
        return Ok(CorrectionOutcome::Planned(correction));
    }
    send(ports, &request.key, correction, retries).await
}

/// Requests the adjustment `correction` holds (already written `REQUESTED`) and
/// writes back what AWS answered.
async fn send(
    ports: CorrectionPorts<'_>,
    key: &GroupKey,
    correction: Correction,
    retries: u32,
) -> Result<CorrectionOutcome, CorrectionError> {
    let entry = AdjustmentRequest {
        agreement_id: correction.agreement_id.clone(),
        original_invoice_id: correction.invoice_id.clone(),
        amount: correction.amount,
        currency: correction.currency.clone(),
        reason_code: INCORRECT_METERING.to_string(),
        description: Some(format!(
            "awsmp correction: billed {}, correct {}",
            correction.billed_quantity, correction.correct_quantity
        )),
        client_token: correction.client_token.clone(),
    };
    let mut tries = 0;
    let answer = loop {
        match ports
            .agreements
            .request_adjustments(std::slice::from_ref(&entry))
            .await
        {
            Err(e) if e.is_transient() && tries < retries => tries += 1,
            other => break other,
        }
    };
    let mut next = correction.clone();
    let outcome = match answer {
        Ok(batch) => {
            if let Some(filed) = batch
                .filed
                .iter()
                .find(|f| f.client_token == correction.client_token)
            {
                next.adjustment_id = Some(filed.adjustment_id.clone());
                next.status = CorrectionStatus::Pending;
                CorrectionOutcome::Filed
            } else {
                let refused = batch
                    .refused
                    .iter()
                    .find(|r| r.client_token == correction.client_token);
                next.status = CorrectionStatus::Failed;
                next.message = Some(refused.map_or_else(
                    || "the answer named neither the entry's adjustment nor an error".to_string(),
                    |r| format!("{}: {}", r.code, r.message),
                ));
                CorrectionOutcome::RefusedByAws
            }
        }
        Err(AgreementError::Refused {
            code,
            reason,
            message,
            ..
        }) => {
            next.status = CorrectionStatus::Failed;
            next.message = Some(format!(
                "{code}{}: {message}",
                reason.map(|r| format!(" ({r})")).unwrap_or_default()
            ));
            CorrectionOutcome::RefusedByAws
        }
        Err(e) => {
            return Ok(CorrectionOutcome::Unconfirmed {
                correction,
                error: e.to_string(),
            });
        }
    };
    write_back(ports, key, &correction, next, outcome).await
}

/// Writes `next` over `previous` on the record (only while it still holds `previous`'s
/// token) and answers `outcome` of it; a failed write leaves the record as it was,
/// and a rerun asks AWS again.
async fn write_back(
    ports: CorrectionPorts<'_>,
    key: &GroupKey,
    previous: &Correction,
    next: Correction,
    outcome: fn(Correction) -> CorrectionOutcome,
) -> Result<CorrectionOutcome, CorrectionError> {
    match ports
        .records
        .record_correction(key, Some(&previous.client_token), &next)
        .await
    {
        Ok(true) => Ok(outcome(next)),
        Ok(false) => Err(Refusal::Changed(key.to_string()).into()),
        Err(e) => Ok(CorrectionOutcome::Unconfirmed {
            correction: next,
            error: format!("AWS answered, but writing it on the record failed: {e}"),
        }),
    }
}

/// Follows a `PENDING` correction (`awsmp adjustments`): reads its adjustment's status
/// and writes a change back (`COMPLETED`, or `FAILED` with AWS's message). Any other
/// correction is answered as it is.
pub async fn refresh(
    ports: CorrectionPorts<'_>,
    key: &GroupKey,
    correction: &Correction,
) -> Result<Correction, CorrectionError> {
    let (CorrectionStatus::Pending, Some(id)) = (correction.status, &correction.adjustment_id)
    else {
        return Ok(correction.clone());
    };
    let Some(state) = ports
        .agreements
        .adjustment(&correction.agreement_id, id)
        .await?
    else {
        return Ok(correction.clone());
    };
    let status = match state.status {
        AdjustmentStatus::Completed => CorrectionStatus::Completed,
        AdjustmentStatus::ValidationFailed => CorrectionStatus::Failed,
        AdjustmentStatus::Pending | AdjustmentStatus::Unknown(_) => return Ok(correction.clone()),
    };
    let next = Correction {
        status,
        message: state.status_message,
        ..correction.clone()
    };
    match write_back(ports, key, correction, next, CorrectionOutcome::Filed).await? {
        CorrectionOutcome::Filed(next) => Ok(next),
        other => Ok(other.correction().clone()),
    }
}

#[cfg(test)]
mod tests;

//! Invoices: `ListAgreementInvoiceLineItems`, one row per invoice, built from the
//! billed ledger priced by the agreement's rate card per calendar month, the upfront
//! price at acceptance, and a credit memo per completed billing adjustment.

use std::collections::BTreeMap;

use chrono::{DateTime, Datelike, Months, NaiveDate, TimeDelta, TimeZone, Utc};
use rust_decimal::Decimal;

use super::AgreementBook;
use super::doc::{Input, Obj, Value, money, page, short_hash, text, time};
use super::error::AgreementError;
use super::model::{AdjustmentStatus, Agreement, BillingAdjustment};
use super::ops::find;
use crate::model::BilledRecord;

/// Who issues every invoice.
pub const INVOICING_ENTITY: &str = "Amazon Web Services, Inc.";

/// One invoice (or credit memo) of an agreement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invoice {
    /// `E2E...` (invoice) or `CM...` (credit memo).
    pub id: String,
    /// `INVOICE` or `CREDIT_MEMO`.
    pub kind: &'static str,
    /// Pre-tax amount.
    pub amount: Decimal,
    /// What may still be refunded.
    pub max_adjustment: Decimal,
    /// The billing period (year, month).
    pub period: (i32, u32),
    /// When it was issued.
    pub issued: DateTime<Utc>,
}

fn month_start(year: i32, month: u32) -> Option<DateTime<Utc>> {
    NaiveDate::from_ymd_opt(year, month, 1)
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .map(|d| Utc.from_utc_datetime(&d))
}

fn invoice_id(a: &Agreement, year: i32, month: u32, kind: &str) -> String {
    let hash = short_hash(&[&a.seed.agreement_id, kind]) & 0xff_ffff_ffff;
    format!("E2E{year:04}{month:02}01{hash:010x}")
}

/// The agreement's invoices issued by `now`: one per calendar month of billed usage
/// (issued at the start of the next month; free-trial days and dimensions without a
/// price are not charged), one for the upfront price (issued at acceptance), and one
/// credit memo per completed adjustment.
pub fn invoices(
    a: &Agreement,
    billed: &[BilledRecord],
    adjustments: &[BillingAdjustment],
    now: DateTime<Utc>,
) -> Vec<Invoice> {
    let start = a.start_time();
    let trial_end = a
        .seed
        .free_trial
        .as_ref()
        .map(|t| start + TimeDelta::days(i64::from(t.duration_days)));
    let mut months: BTreeMap<(i32, u32), Decimal> = BTreeMap::new();
    for record in billed {
        let ours = record.license_arn == a.seed.license_arn
            && record.customer_aws_account_id == a.seed.customer_aws_account_id
            && record.hour >= start
            && a.seed.end_time.is_none_or(|end| record.hour < end)
            && trial_end.is_none_or(|end| record.hour >= end);
        let price = a
            .seed
            .rate_card
            .iter()
            .find(|r| r.dimension_key == record.dimension)
            .map(|r| r.price);
        if let (true, Some(price)) = (ours, price) {
            *months
                .entry((record.hour.year(), record.hour.month()))
                .or_default() += price * Decimal::from(record.quantity);
        }
    }
    let mut out = Vec::new();
    if let Some(upfront) = &a.seed.fixed_upfront {
        let at = a.acceptance_time();
        out.push(Invoice {
            id: invoice_id(a, at.year(), at.month(), "upfront"),
            kind: "INVOICE",
            amount: upfront.price,
            max_adjustment: upfront.price,
            period: (at.year(), at.month()),
            issued: at,
        });
    }
    for ((year, month), amount) in months {
        let issued = month_start(year, month).and_then(|m| m.checked_add_months(Months::new(1)));
        if let Some(issued) = issued.filter(|_| amount > Decimal::ZERO) {
            out.push(Invoice {
                id: invoice_id(a, year, month, "usage"),
                kind: "INVOICE",
                amount,
                max_adjustment: amount,
                period: (year, month),
                issued,
            });
        }
    }
    out.retain(|i| i.issued <= now);
    for invoice in &mut out {
        let adjusted: Decimal = adjustments
            .iter()
            .filter(|b| {
                b.original_invoice_id == invoice.id
                    && b.status != AdjustmentStatus::ValidationFailed
            })
            .map(|b| b.adjustment_amount)
            .sum();
        invoice.max_adjustment = (invoice.amount - adjusted).max(Decimal::ZERO);
    }
    let memos: Vec<Invoice> = adjustments
        .iter()
        .filter(|b| {
            b.agreement_id == a.seed.agreement_id && b.status == AdjustmentStatus::Completed
        })
        .filter_map(|b| {
            let original = out.iter().find(|i| i.id == b.original_invoice_id)?;
            Some(Invoice {
                id: format!(
                    "CM{}",
                    b.billing_adjustment_request_id.trim_start_matches("ba-")
                ),
                kind: "CREDIT_MEMO",
                amount: b.adjustment_amount,
                max_adjustment: Decimal::ZERO,
                period: original.period,
                issued: b.updated_at,
            })
        })
        .collect();
    out.extend(memos);
    out.sort_by(|x, y| x.issued.cmp(&y.issued).then_with(|| x.id.cmp(&y.id)));
    out
}

pub(super) fn seller_of_record(a: &Agreement) -> Result<(), AgreementError> {
    if a.seed.seller_of_record {
        Ok(())
    } else {
        Err(AgreementError::access_denied(
            "INVALID_ACCESS",
            format!(
                "only the seller of record may see the invoices and adjustments of agreement {}",
                a.seed.agreement_id
            ),
        ))
    }
}

/// `ListAgreementInvoiceLineItems`.
pub fn list_invoice_line_items(
    book: &AgreementBook,
    request: &Value,
    billed: &[BilledRecord],
    now: DateTime<Utc>,
) -> Result<Value, AgreementError> {
    let input = Input::root(request)?;
    let a = find(book, &input.agreement_id()?)?;
    match input.string("groupBy")?.as_deref() {
        Some("INVOICE_ID") => {}
        other => {
            return Err(AgreementError::validation(
                "OTHER",
                "groupBy",
                format!("groupBy must be INVOICE_ID (got {other:?})"),
            ));
        }
    }
    seller_of_record(a)?;
    let invoice_id = input.string("invoiceId")?;
    let invoice_type = input.string("invoiceType")?;
    if let Some(t) = invoice_type
        .as_deref()
        .filter(|t| !matches!(*t, "INVOICE" | "CREDIT_MEMO"))
    {
        return Err(AgreementError::validation(
            "OTHER",
            "invoiceType",
            format!("invoiceType {t:?} is not INVOICE or CREDIT_MEMO"),
        ));
    }
    let period = match input.object("invoiceBillingPeriod")? {
        None => None,
        Some(p) => Some((p.int("year")?, p.int("month")?)),
    };
    let before = input.time("beforeIssuedTime")?;
    let after = input.time("afterIssuedTime")?;
    let page = page(&input, request)?;
    let rows: Vec<Invoice> = invoices(a, billed, &book.adjustments, now)
        .into_iter()
        .filter(|i| invoice_id.as_deref().is_none_or(|id| id == i.id))
        .filter(|i| invoice_type.as_deref().is_none_or(|t| t == i.kind))
        .filter(|i| {
            period.is_none_or(|(year, month)| {
                year.is_none_or(|y| y == i64::from(i.period.0))
                    && month.is_none_or(|m| m == i64::from(i.period.1))
            })
        })
        .filter(|i| before.is_none_or(|b| i.issued < b))
        .filter(|i| after.is_none_or(|t| i.issued > t))
        .collect();
    let (rows, next) = page.cut(rows);
    let rows = rows
        .into_iter()
        .map(|i| {
            Obj::new()
                .s("agreementId", &a.seed.agreement_id)
                .s("invoiceId", &i.id)
                .v(
                    "pricingCurrencyAmount",
                    Obj::new()
                        .v("amount", money(i.amount))
                        .v("maxAdjustmentAmount", money(i.max_adjustment))
                        .s("currencyCode", &a.seed.currency_code)
                        .done(),
                )
                .v(
                    "invoiceBillingPeriod",
                    Obj::new()
                        .v("month", Value::Integer(i.period.1.into()))
                        .v("year", Value::Integer(i.period.0.into()))
                        .done(),
                )
                .v("issuedTime", time(i.issued))
                .s("invoiceType", i.kind)
                .v(
                    "invoicingEntity",
                    Obj::new()
                        .s("legalName", INVOICING_ENTITY)
                        .s("branchName", INVOICING_ENTITY)
                        .done(),
                )
                .done()
        })
        .collect();
    Ok(Obj::new()
        .v("agreementInvoiceLineItemGroupSummaries", Value::Array(rows))
        .opt("nextToken", next.map(text))
        .done())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::agreement::model::{AgreementSeed, AgreementStatus, FreeTrialSeed, RateSeed};
    use crate::test_support::at;

    fn agreement() -> Agreement {
        Agreement {
            seed: AgreementSeed {
                agreement_id: "agmt-1".to_owned(),
                license_arn: "lic".to_owned(),
                product_code: "prod".to_owned(),
                product_id: None,
                customer_aws_account_id: "111122223333".to_owned(),
                proposer_account_id: "123456789012".to_owned(),
                offer_id: "offer-1".to_owned(),
                offer_set_id: None,
                resale_authorization_id: None,
                seller_of_record: true,
                start_time: Some(at("2026-01-10T00:00:00Z")),
                end_time: Some(at("2026-03-20T00:00:00Z")),
                acceptance_time: None,
                status: AgreementStatus::Active,
                currency_code: "USD".to_owned(),
                rate_card: vec![RateSeed {
                    dimension_key: "requests".to_owned(),
                    price: Decimal::new(1, 3),
                }],
                free_trial: Some(FreeTrialSeed {
                    duration_days: 7,
                    grants: vec![],
                }),
                fixed_upfront: None,
                initial_agreement_id: None,
                entitle: true,
            },
            last_update_time: at("2026-01-10T00:00:00Z"),
        }
    }

    fn billed(hour: &str, dimension: &str, quantity: u32) -> BilledRecord {
        BilledRecord {
            customer_aws_account_id: "111122223333".to_owned(),
            license_arn: "lic".to_owned(),
            product_code: "prod".to_owned(),
            dimension: dimension.to_owned(),
            hour: at(hour),
            timestamp: at(hour),
            quantity,
            allocations: Vec::new(),
            metering_record_id: "id".to_owned(),
            billed_at: at(hour),
        }
    }

    #[test]
    fn months_are_priced_exactly_without_trial_days_unpriced_dimensions_or_after_the_end() {
        let records = [
            billed("2026-01-12T00:00:00Z", "requests", 5000), // in the trial
            billed("2026-01-20T00:00:00Z", "requests", 333),
            billed("2026-01-20T00:00:00Z", "storage", 1000), // no price
            billed("2026-01-31T23:00:00Z", "requests", 1),
            billed("2026-02-01T00:00:00Z", "requests", 7),
            billed("2026-03-21T00:00:00Z", "requests", 9), // after the end
        ];
        let all = invoices(&agreement(), &records, &[], at("2026-04-01T00:00:00Z"));
        let rows: Vec<((i32, u32), String, DateTime<Utc>)> = all
            .iter()
            .map(|i| (i.period, i.amount.to_string(), i.issued))
            .collect();
        assert_eq!(
            rows,
            [
                ((2026, 1), "0.334".to_owned(), at("2026-02-01T00:00:00Z")),
                ((2026, 2), "0.007".to_owned(), at("2026-03-01T00:00:00Z")),
            ]
        );
        let before = invoices(&agreement(), &records, &[], at("2026-02-28T23:59:59Z"));
        assert_eq!(before.len(), 1, "February is not invoiced before March 1st");
    }
}

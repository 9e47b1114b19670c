//! Corrections ([`crate::actors::corrections`]): every billing adjustment the
//! Marketplace made belongs to the one correction its record holds (one adjustment per
//! correction, whatever the retries, crashes and races), for exactly `(billed - correct)
//! x price`, never more than the record billed nor the invoice holds; each agreement's
//! net invoiced amount is its ledger's charge less what was refunded; and, liveness,
//! every record an operator asked to correct below what it billed (of a priced
//! dimension) ends with its correction `COMPLETED`, while the others end with none.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use awsmp_core::corrections::{CorrectionError, CorrectionStatus, Refusal};
use awsmp_core::ports::{AgreementApi, InvoiceSummary};
use awsmp_marketplace_sim::AdjustmentStatus;
use rust_decimal::Decimal;

use crate::actors::corrections::CorrectionsLog;
use crate::executor::{self, Task};
use crate::scenario::MAX_STEPS;
use crate::stack::lock;
use crate::world::World;

/// Each agreement's invoices (and credit memos), read fault-free.
fn invoices(world: &World, log: &CorrectionsLog) -> BTreeMap<String, Vec<InvoiceSummary>> {
    let read = Mutex::new(BTreeMap::new());
    let task = Task::new("check-invoices", async {
        for agreement in log.agreements.values() {
            if let Ok(list) = log.api.invoices(agreement, None).await {
                lock(&read).insert(agreement.clone(), list);
            }
        }
    });
    executor::run(&world.sim, vec![task], false, MAX_STEPS, &|_| {});
    read.into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Every violation of the corrections' invariants.
pub fn check(world: &World, log: &CorrectionsLog) -> Vec<String> {
    let mut violations: Vec<String> = log
        .seeding
        .iter()
        .map(|e| format!("{e} (corrections setup)"))
        .collect();
    let adjustments = log.api.market.billing_adjustments();
    let corrected = world.tables.corrections();
    let by_token: BTreeMap<&str, usize> = corrected
        .iter()
        .enumerate()
        .map(|(n, (_, c))| (c.client_token.as_str(), n))
        .collect();

    // Safety: each adjustment is its record's one correction.
    for b in &adjustments {
        if !by_token.contains_key(b.client_token.as_str()) {
            violations.push(format!(
                "billing adjustment {} of {} {} (token {}) belongs to no correction a record holds: a correction filed twice (corrections)",
                b.billing_adjustment_request_id,
                b.adjustment_amount,
                b.currency_code,
                b.client_token
            ));
        }
    }
    let mut refunded: BTreeMap<(String, String), Decimal> = BTreeMap::new();
    for b in adjustments
        .iter()
        .filter(|b| b.status != AdjustmentStatus::ValidationFailed)
    {
        *refunded
            .entry((b.agreement_id.clone(), b.original_invoice_id.clone()))
            .or_default() += b.adjustment_amount;
    }
    for (record, c) in &corrected {
        let key = &record.key;
        let billed = record.quantity_to_send();
        let price = log.prices.get(&key.dimension).copied();
        let made = adjustments
            .iter()
            .find(|b| b.client_token == c.client_token);
        if c.billed_quantity != billed || c.correct_quantity >= billed || c.correct_quantity < 0 {
            violations.push(format!(
                "{key}: correction from {} to {} of a record that billed {billed} (corrections)",
                c.billed_quantity, c.correct_quantity
            ));
        }
        match price {
            Some(price) if c.amount == price * Decimal::from(billed - c.correct_quantity) => {}
            _ => violations.push(format!(
                "{key}: correction of {} {} is not (billed {billed} - correct {}) x price {price:?} (corrections)",
                c.amount, c.currency, c.correct_quantity
            )),
        }
        if let Some(b) = made {
            if b.adjustment_amount != c.amount
                || Some(&b.billing_adjustment_request_id) != c.adjustment_id.as_ref()
                    && c.adjustment_id.is_some()
            {
                violations.push(format!(
                    "{key}: the record holds {} {:?}, Marketplace made {} {} (corrections)",
                    c.amount, c.adjustment_id, b.adjustment_amount, b.billing_adjustment_request_id
                ));
            }
            let charged = price.unwrap_or_default() * Decimal::from(billed);
            if b.adjustment_amount > charged {
                violations.push(format!(
                    "{key}: refunded {} of a record billed {charged} (corrections)",
                    b.adjustment_amount
                ));
            }
        }
    }

    // Per invoice: never more refunded than invoiced; per agreement: net = ledger
    // charge - completed refunds.
    let ledger = world.metering.inner.ledger();
    for (agreement, list) in invoices(world, log) {
        let license = log
            .agreements
            .iter()
            .find(|(_, a)| **a == agreement)
            .map(|(l, _)| l.clone())
            .unwrap_or_default();
        let mut net = Decimal::ZERO;
        for invoice in &list {
            if invoice.is_invoice() {
                net += invoice.amount;
                let taken = refunded
                    .get(&(agreement.clone(), invoice.invoice_id.clone()))
                    .copied()
                    .unwrap_or_default();
                if taken > invoice.amount {
                    violations.push(format!(
                        "invoice {} of {agreement}: refunded {taken} of {} (corrections)",
                        invoice.invoice_id, invoice.amount
                    ));
                }
            } else {
                net -= invoice.amount;
            }
        }
        let charge: Decimal = ledger
            .iter()
            .filter(|(key, _)| key.license_arn == license && key.hour.start() >= log.start)
            .filter_map(|(key, entry)| {
                Some(*log.prices.get(&key.dimension)? * Decimal::from(entry.quantity))
            })
            .sum();
        let completed: Decimal = adjustments
            .iter()
            .filter(|b| b.agreement_id == agreement && b.status == AdjustmentStatus::Completed)
            .map(|b| b.adjustment_amount)
            .sum();
        if net != charge - completed {
            violations.push(format!(
                "agreement {agreement}: invoiced net {net}, but the ledger charged {charge} and {completed} was refunded (corrections)"
            ));
        }
    }

    // Liveness: each record asked below what it billed ends corrected, once.
    let asked: BTreeSet<_> = log.requests.iter().map(|r| r.key.clone()).collect();
    let records = world.tables.aggregated_records();
    for key in asked {
        let Some(record) = records.iter().find(|r| r.key == key) else {
            continue;
        };
        let billed = record.quantity_to_send();
        let lower: BTreeSet<i64> = log
            .requests
            .iter()
            .filter(|r| r.key == key && (0..billed).contains(&r.correct))
            .map(|r| r.correct)
            .collect();
        let priced = log.prices.contains_key(&key.dimension);
        let held = corrected.iter().find(|(r, _)| r.key == key).map(|(_, c)| c);
        match (priced && !lower.is_empty(), held) {
            (true, Some(c))
                if c.status == CorrectionStatus::Completed
                    && lower.contains(&c.correct_quantity) => {}
            (true, other) => violations.push(format!(
                "{key}: asked to correct to {lower:?} of {billed}, but the record ends with {:?} (corrections liveness)",
                other.map(|c| (c.correct_quantity, c.status, c.message.clone()))
            )),
            (false, Some(c)) => violations.push(format!(
                "{key}: nothing to refund, yet the record holds a correction to {} (corrections)",
                c.correct_quantity
            )),
            (false, None) => {}
        }
    }
    // A fault-free rerun fails only with a refusal that says what to do.
    for answer in log.answers.iter().filter(|a| a.settling) {
        let request = &log.requests[answer.request];
        match &answer.outcome {
            Ok(_)
            | Err(CorrectionError::Refused(
                Refusal::UnderBilled { .. }
                | Refusal::AlreadyCorrected { .. }
                | Refusal::NothingBilled { .. }
                | Refusal::Unchanged { .. },
            )) => {}
            Err(e) => violations.push(format!(
                "{}: the fault-free rerun to {} failed: {e} (corrections)",
                request.key, request.correct
            )),
        }
    }
    violations
}

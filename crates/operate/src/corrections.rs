//! `awsmp adjust` and `awsmp adjustments`: the corrections of over-billed records
//! (`awsmp_core::corrections`) planned, filed and followed, one line per record, with
//! what was refunded per currency.

use std::collections::BTreeMap;

use awsmp_core::corrections::{
    Correction, CorrectionError, CorrectionOutcome, CorrectionPorts, CorrectionRequest, correct,
    refresh,
};
use awsmp_core::model::GroupKey;
use awsmp_core::ports::PortError;
use rust_decimal::Decimal;
use serde::Serialize;

/// One correction as `awsmp adjust` and `awsmp adjustments` show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct CorrectionLine {
    /// The record's group, `license|account|dimension|hour`.
    pub group: String,
    /// `planned`, `filed`, `already filed`, `unconfirmed` (run it again), `refused`,
    /// `refused by AWS`, or for `adjustments` the correction's status (`requested`,
    /// `pending`, `completed`, `failed`).
    pub result: String,
    /// What Marketplace billed.
    pub billed_quantity: Option<i64>,
    /// What the seller says was right.
    pub correct_quantity: Option<i64>,
    /// The refund, exact (a decimal string).
    pub amount: Option<String>,
    /// Its currency.
    pub currency: Option<String>,
    /// The agreement.
    pub agreement_id: Option<String>,
    /// The invoice refunded against.
    pub invoice_id: Option<String>,
    /// The billing adjustment's id, once AWS answered it.
    pub adjustment_id: Option<String>,
    /// Why it was refused or failed, and what to do.
    pub why: Option<String>,
}

impl CorrectionLine {
    fn of(key: &GroupKey, result: &str, c: Option<&Correction>, why: Option<String>) -> Self {
        CorrectionLine {
            group: key.to_string(),
            result: result.to_string(),
            billed_quantity: c.map(|c| c.billed_quantity),
            correct_quantity: c.map(|c| c.correct_quantity),
            amount: c.map(|c| c.amount.normalize().to_string()),
            currency: c.map(|c| c.currency.clone()),
            agreement_id: c.map(|c| c.agreement_id.clone()),
            invoice_id: c.map(|c| c.invoice_id.clone()),
            adjustment_id: c.and_then(|c| c.adjustment_id.clone()),
            why,
        }
    }

    /// Whether it needs a person: refused, failed or unconfirmed.
    pub fn needs_attention(&self) -> bool {
        matches!(
            self.result.as_str(),
            "refused" | "refused by AWS" | "unconfirmed" | "failed" | "requested"
        )
    }
}

/// The line of one `correct` run.
pub fn line(
    key: &GroupKey,
    outcome: &Result<CorrectionOutcome, CorrectionError>,
) -> CorrectionLine {
    match outcome {
        Ok(CorrectionOutcome::Planned(c)) => CorrectionLine::of(key, "planned", Some(c), None),
        Ok(CorrectionOutcome::Filed(c)) => CorrectionLine::of(key, "filed", Some(c), None),
        Ok(CorrectionOutcome::AlreadyFiled(c)) => CorrectionLine::of(
            key,
            "already filed",
            Some(c),
            Some(format!("filed before; it is {}", c.status.as_str())),
        ),
        Ok(CorrectionOutcome::RefusedByAws(c)) => {
            CorrectionLine::of(key, "refused by AWS", Some(c), c.message.clone())
        }
        Ok(CorrectionOutcome::Unconfirmed { correction, error }) => CorrectionLine::of(
            key,
            "unconfirmed",
            Some(correction),
            Some(format!(
                "{error}; run the same command again: it resumes with the same client token and files at most once"
            )),
        ),
        Err(e) => CorrectionLine::of(key, "refused", None, Some(e.to_string())),
    }
}

/// Parses `license|account|dimension|hour=quantity` (the group as `awsmp failures`
/// prints it, and the quantity that should have been billed).
pub fn parse_request(text: &str) -> Result<(GroupKey, i64), String> {
    let (group, quantity) = text.trim().rsplit_once('=').ok_or_else(|| {
        format!(
            "{text:?}: write license|account|dimension|hour=quantity (the correct quantity after =)"
        )
    })?;
    let key: GroupKey = group
        .parse()
        .map_err(|e| format!("{text:?}: {e}, as `awsmp failures` prints it"))?;
    let quantity = quantity
        .trim()
        .parse::<i64>()
        .map_err(|e| format!("{text:?}: the quantity after = is not a whole number ({e})"))?;
    Ok((key, quantity))
}

/// Runs each request (files it, or with `file` false plans it), in order.
pub async fn adjust(
    ports: CorrectionPorts<'_>,
    requests: &[CorrectionRequest],
    file: bool,
    retries: u32,
) -> Vec<CorrectionLine> {
    let mut lines = Vec::new();
    for request in requests {
        let outcome = correct(ports, request, file, retries).await;
        lines.push(line(&request.key, &outcome));
    }
    lines
}

/// Every record's correction, a pending one followed first (`refresh`: its status read
/// from AWS and written back); a correction whose status cannot be read is shown as
/// stored, with why.
pub async fn adjustments(
    ports: CorrectionPorts<'_>,
    follow: bool,
) -> Result<Vec<CorrectionLine>, PortError> {
    let mut lines = Vec::new();
    let mut cursor = None;
    loop {
        let page = ports.records.corrections_page(cursor).await?;
        for (record, stored) in &page.items {
            let (c, why) = if follow {
                match refresh(ports, &record.key, stored).await {
                    Ok(c) => (c, None),
                    Err(e) => (stored.clone(), Some(format!("status not read: {e}"))),
                }
            } else {
                (stored.clone(), None)
            };
            let why = why.or_else(|| c.message.clone());
            lines.push(CorrectionLine::of(
                &record.key,
                &c.status.as_str().to_ascii_lowercase(),
                Some(&c),
                why,
            ));
        }
        cursor = page.next;
        if cursor.is_none() {
            return Ok(lines);
        }
    }
}

/// What the lines refunded (`completed`) and hold pending (`pending`, `requested`),
/// per currency, exactly.
pub fn totals(lines: &[CorrectionLine]) -> BTreeMap<String, (Decimal, Decimal)> {
    let mut totals: BTreeMap<String, (Decimal, Decimal)> = BTreeMap::new();
    for l in lines {
        let (Some(amount), Some(currency)) = (&l.amount, &l.currency) else {
            continue;
        };
        let amount: Decimal = amount.parse().unwrap_or_default();
        let entry = totals.entry(currency.clone()).or_default();
        match l.result.as_str() {
            "completed" => entry.0 += amount,
            "pending" | "requested" => entry.1 += amount,
            _ => {}
        }
    }
    totals
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_a_group_and_the_correct_quantity() {
        let (key, quantity) = parse_request(
            "arn:aws:license-manager::123456789012:license:l-1|111122223333|requests|2026-10-20T10=600",
        )
        .unwrap();
        assert_eq!(key.dimension, "requests");
        assert_eq!(quantity, 600);
        let no_quantity = parse_request("a|b|c|2026-10-20T10").unwrap_err();
        assert!(no_quantity.contains("=quantity"), "{no_quantity}");
        let bad = parse_request(
            "arn:aws:license-manager::123456789012:license:l-1|111122223333|requests|2026-10-20T10=six",
        )
        .unwrap_err();
        assert!(bad.contains("whole number"), "{bad}");
    }

    #[test]
    fn totals_keep_currencies_apart_and_count_only_refunds_and_pending() {
        let line = |result: &str, amount: &str, currency: &str| CorrectionLine {
            group: "g".into(),
            result: result.into(),
            billed_quantity: None,
            correct_quantity: None,
            amount: Some(amount.into()),
            currency: Some(currency.into()),
            agreement_id: None,
            invoice_id: None,
            adjustment_id: None,
            why: None,
        };
        let t = totals(&[
            line("completed", "1.5", "USD"),
            line("completed", "0.25", "USD"),
            line("pending", "2", "USD"),
            line("failed", "9", "USD"),
            line("completed", "3", "EUR"),
        ]);
        assert_eq!(t["USD"], (Decimal::new(175, 2), Decimal::from(2)));
        assert_eq!(t["EUR"], (Decimal::from(3), Decimal::ZERO));
    }
}

//! The EventBridge events (source `aws.agreement-marketplace`, us-east-1) the
//! simulator emits as its agreements change: Purchase Agreement Created / Amended /
//! Ended (Proposer and Manufacturer), License Updated / Deprovisioned
//! (Manufacturer), Billing Adjustment Completed / Failed (Proposer). They are kept
//! in an outbox the admin API reads (`GET /admin/agreement-events`); the License
//! events are the shape `POST /admin/lifecycle-events` reads.

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Value, json};

use super::model::{Agreement, BillingAdjustment};
use crate::lifecycle::EVENT_SOURCE;

/// The Region every Agreement event comes from.
pub const REGION: &str = "us-east-1";

/// Why an agreement event is emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// A new agreement (`intent: NEW`).
    Created,
    /// A seeded agreement was seeded again (`intent: AMEND`).
    Amended,
    /// It left `ACTIVE`.
    Ended,
}

fn envelope(
    id: String,
    detail_type: &str,
    account: &str,
    at: DateTime<Utc>,
    resources: Vec<String>,
    detail: Value,
) -> Value {
    json!({
        "version": "0",
        "id": id,
        "detail-type": detail_type,
        "source": EVENT_SOURCE,
        "account": account,
        "time": at.to_rfc3339_opts(SecondsFormat::Secs, true),
        "region": REGION,
        "resources": resources,
        "detail": detail,
    })
}

fn agreement_arn(a: &Agreement) -> String {
    format!(
        "arn:aws:aws-marketplace::aws:agreement:{}",
        a.seed.agreement_id
    )
}

fn time(at: Option<DateTime<Utc>>) -> Value {
    at.map_or(Value::Null, |t| {
        json!(t.to_rfc3339_opts(SecondsFormat::Secs, true))
    })
}

/// The events of `change` to `a`, at `at`; `next_id` names each event.
pub fn agreement_events(
    a: &Agreement,
    change: Change,
    at: DateTime<Utc>,
    next_id: &mut dyn FnMut() -> String,
) -> Vec<Value> {
    let s = &a.seed;
    let parties = |detail: &mut Value| {
        detail["acceptor"] = json!({"accountId": s.customer_aws_account_id});
        detail["proposer"] = json!({"accountId": s.proposer_account_id});
        detail["offer"] = json!({"id": s.offer_id});
        detail["resaleAuthorization"] = json!({"id": s.resale_authorization_id});
    };
    let (kind, license_kind) = match change {
        Change::Created => ("Created", "License Updated - Manufacturer"),
        Change::Amended => ("Amended", "License Updated - Manufacturer"),
        Change::Ended => ("Ended", "License Deprovisioned - Manufacturer"),
    };
    let mut detail = match change {
        Change::Ended => json!({"agreement": {"id": s.agreement_id, "status": s.status.as_str()}}),
        Change::Created | Change::Amended => json!({
            "requestId": next_id(),
            "catalog": "AWSMarketplace",
            "agreement": {
                "id": s.agreement_id,
                "intent": if change == Change::Created { "NEW" } else { "AMEND" },
                "status": s.status.as_str(),
                "acceptanceTime": time(Some(a.acceptance_time())),
                "startTime": time(Some(a.start_time())),
                "endTime": time(s.end_time),
            },
            "product": {"id": a.product_id()},
        }),
    };
    parties(&mut detail);
    let mut events = Vec::new();
    for role in ["Proposer", "Manufacturer"] {
        events.push(envelope(
            next_id(),
            &format!("Purchase Agreement {kind} - {role}"),
            &s.proposer_account_id,
            at,
            vec![agreement_arn(a)],
            detail.clone(),
        ));
    }
    let mut license = json!({
        "agreement": {"id": s.agreement_id},
        "product": {"code": s.product_code, "id": a.product_id()},
        "license": {"arn": s.license_arn},
    });
    parties(&mut license);
    events.push(envelope(
        next_id(),
        license_kind,
        &s.proposer_account_id,
        at,
        vec![agreement_arn(a)],
        license,
    ));
    events
}

/// The event of an adjustment that completed or failed.
pub fn adjustment_event(
    a: &Agreement,
    b: &BillingAdjustment,
    completed: bool,
    next_id: &mut dyn FnMut() -> String,
) -> Value {
    let kind = if completed { "Completed" } else { "Failed" };
    envelope(
        next_id(),
        &format!("Purchase Agreement Billing Adjustment {kind} - Proposer"),
        &a.seed.proposer_account_id,
        b.updated_at,
        Vec::new(),
        json!({
            "agreement": {"id": b.agreement_id},
            "billingAdjustmentRequest": {
                "id": b.billing_adjustment_request_id,
                "adjustmentAmount": b.adjustment_amount.to_string(),
                "currencyCode": b.currency_code,
                "adjustmentReasonCode": b.adjustment_reason_code,
            },
            "invoice": {"originalInvoiceId": b.original_invoice_id},
        }),
    )
}

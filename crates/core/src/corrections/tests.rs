//! Corrections over the memory tables and the memory Agreement API: each refusal,
//! filing once through lost answers, and following a pending adjustment.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use crate::clock::ManualClock;
use crate::memory::agreement_contract::{dec, record, seed};
use crate::memory::fixtures::operator_record;
use crate::memory::{
    AgreementOp, MemoryAgreementApi, MemoryOperatorStore, MemorySubscriberStore, MemoryTables,
};
use crate::model::{AggregatedStatus, Subscriber};
use crate::ports::{AgreementStatus, InvoiceSummary, OperatorStore};
use crate::time::parse_instant;

const AGREEMENT: &str = "agmt-correction";
const LICENSE: &str = "arn:aws:license-manager::123456789012:license:l-1";
const ACCOUNT: &str = "111122223333";
const INVOICE: &str = "E2E20261101a";

struct World {
    tables: MemoryTables,
    subscribers: MemorySubscriberStore,
    api: MemoryAgreementApi,
    clock: ManualClock,
    operator: MemoryOperatorStore,
}

impl World {
    /// One billed record of 1000 `requests` (0.0025 USD each) in October 2026, its
    /// license on the agreement, and the agreement's October invoice of 10 USD.
    fn new() -> Self {
        let tables = MemoryTables::new();
        let now = parse_instant("2026-11-05T00:00:00Z").unwrap();
        tables.insert_aggregated(
            operator_record(
                "requests",
                "2026-10-20T10",
                AggregatedStatus::Success,
                1000,
                None,
            ),
            now,
        );
        let subscribers = MemorySubscriberStore::new();
        let mut row = Subscriber::new(LICENSE, ACCOUNT);
        row.agreement_id = Some(AGREEMENT.into());
        subscribers.insert(row, now);
        let api = MemoryAgreementApi::new();
        let mut agreement = seed(AGREEMENT);
        agreement.license_arn = LICENSE.into();
        agreement.account = ACCOUNT.into();
        agreement.start = parse_instant("2026-10-01T00:00:00Z").unwrap();
        api.seed(record(&agreement, AgreementStatus::Active, now));
        api.seed_invoice(invoice("10", "10"));
        let operator = tables.operator_store();
        World {
            tables,
            subscribers,
            api,
            clock: ManualClock::new(now),
            operator,
        }
    }

    fn ports(&self) -> CorrectionPorts<'_> {
        CorrectionPorts {
            records: &self.operator,
            subscribers: &self.subscribers,
            agreements: &self.api,
            clock: &self.clock,
        }
    }

    async fn stored(&self) -> Option<Correction> {
        self.operator.correction(&key()).await.unwrap().unwrap().1
    }
}

fn invoice(amount: &str, max: &str) -> InvoiceSummary {
    InvoiceSummary {
        agreement_id: AGREEMENT.into(),
        invoice_id: INVOICE.into(),
        invoice_type: "INVOICE".into(),
        amount: dec(amount),
        max_adjustment: dec(max),
        currency: "USD".into(),
        period: Some(BillingPeriod {
            year: 2026,
            month: 10,
        }),
        issued: None,
    }
}

fn key() -> GroupKey {
    operator_record(
        "requests",
        "2026-10-20T10",
        AggregatedStatus::Success,
        1,
        None,
    )
    .key
}

fn request(correct: i64) -> CorrectionRequest {
    CorrectionRequest {
        key: key(),
        correct_quantity: correct,
        agreement_id: None,
    }
}

async fn correct_record(w: &World, correct: i64) -> Result<CorrectionOutcome, CorrectionError> {
    super::correct(w.ports(), &request(correct), true, 0).await
}

async fn refusal(w: &World, correct: i64) -> Refusal {
    match correct_record(w, correct).await {
        Err(CorrectionError::Refused(r)) => r,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn a_dry_run_plans_the_refund_and_writes_nothing() {
    let w = World::new();
    let outcome = super::correct(w.ports(), &request(600), false, 0)
        .await
        .unwrap();
    let CorrectionOutcome::Planned(c) = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(c.amount, dec("1.0000"));
    assert_eq!((c.billed_quantity, c.correct_quantity), (1000, 600));
    assert_eq!(c.invoice_id, INVOICE);
    assert_eq!(c.currency, "USD");
    assert!(c.client_token.len() <= 64 && c.client_token.starts_with("awsmp-"));
    assert_eq!(w.stored().await, None);
    assert_eq!(w.api.calls(AgreementOp::RequestAdjustments), 0);
}

#[tokio::test]
async fn a_correction_is_filed_once_through_lost_answers() {
    let w = World::new();
    w.api.lose_next(AgreementOp::RequestAdjustments);
    w.api.lose_next(AgreementOp::RequestAdjustments);
    // No retries: the first run leaves it requested.
    let first = correct_record(&w, 600).await.unwrap();
    assert!(
        matches!(first, CorrectionOutcome::Unconfirmed { .. }),
        "{first:?}"
    );
    assert_eq!(
        w.stored().await.unwrap().status,
        CorrectionStatus::Requested
    );
    // The rerun retries through the second lost answer and finds the same adjustment.
    let second = super::correct(w.ports(), &request(600), true, 2)
        .await
        .unwrap();
    let CorrectionOutcome::Filed(filed) = second else {
        panic!("{second:?}")
    };
    assert_eq!(filed.status, CorrectionStatus::Pending);
    assert_eq!(
        w.api.adjustments().len(),
        1,
        "one adjustment whatever the retries"
    );
    assert_eq!(w.api.calls(AgreementOp::RequestAdjustments), 3);
    assert_eq!(w.stored().await.unwrap(), filed);
    // Once filed, a rerun sends nothing.
    let third = correct_record(&w, 600).await.unwrap();
    assert!(
        matches!(third, CorrectionOutcome::AlreadyFiled(_)),
        "{third:?}"
    );
    assert_eq!(w.api.calls(AgreementOp::RequestAdjustments), 3);
}

#[tokio::test]
async fn a_pending_adjustment_is_followed_to_completed() {
    let w = World::new();
    let CorrectionOutcome::Filed(filed) = correct_record(&w, 0).await.unwrap() else {
        panic!()
    };
    assert_eq!(filed.amount, dec("2.5"));
    let same = refresh(w.ports(), &key(), &filed).await.unwrap();
    assert_eq!(same.status, CorrectionStatus::Pending);
    w.api.settle_adjustments(AdjustmentStatus::Completed, None);
    let done = refresh(w.ports(), &key(), &filed).await.unwrap();
    assert_eq!(done.status, CorrectionStatus::Completed);
    assert_eq!(done.refunded(), dec("2.5"));
    assert_eq!(w.stored().await.unwrap(), done);
}

#[tokio::test]
async fn a_failed_adjustment_may_be_filed_again_with_a_new_token() {
    let w = World::new();
    let CorrectionOutcome::Filed(first) = correct_record(&w, 600).await.unwrap() else {
        panic!()
    };
    w.api
        .settle_adjustments(AdjustmentStatus::ValidationFailed, Some("invoice closed"));
    let failed = refresh(w.ports(), &key(), &first).await.unwrap();
    assert_eq!(failed.status, CorrectionStatus::Failed);
    assert_eq!(failed.message.as_deref(), Some("invoice closed"));
    let CorrectionOutcome::Filed(second) = correct_record(&w, 600).await.unwrap() else {
        panic!()
    };
    assert_eq!(second.attempt, 2);
    assert_ne!(second.client_token, first.client_token);
    assert_eq!(w.api.adjustments().len(), 2);
}

#[tokio::test]
async fn a_second_correction_of_other_quantities_is_refused() {
    let w = World::new();
    correct_record(&w, 600).await.unwrap();
    let r = refusal(&w, 500).await;
    assert!(
        matches!(
            r,
            Refusal::AlreadyCorrected {
                correct_quantity: 600,
                ..
            }
        ),
        "{r}"
    );
    assert_eq!(w.api.adjustments().len(), 1);
}

#[tokio::test]
async fn refusals_say_why_and_file_nothing() {
    let w = World::new();
    assert!(matches!(refusal(&w, 1000).await, Refusal::Unchanged { .. }));
    assert!(matches!(refusal(&w, -1).await, Refusal::Negative(-1)));
    let under = refusal(&w, 1200).await;
    assert!(
        matches!(under, Refusal::UnderBilled { shortfall: 200, .. }),
        "{under}"
    );
    assert!(under.to_string().contains("nothing was sent"));
    // More than the invoice has left.
    w.api.seed_invoice(invoice("10", "0.5"));
    let over = refusal(&w, 0).await;
    assert!(matches!(over, Refusal::ExceedsRefundable { .. }), "{over}");
    // Another currency.
    let mut eur = invoice("10", "10");
    eur.currency = "EUR".into();
    w.api.seed_invoice(eur);
    assert!(matches!(
        refusal(&w, 0).await,
        Refusal::CurrencyMismatch { .. }
    ));
    assert_eq!(w.api.calls(AgreementOp::RequestAdjustments), 0);
    assert_eq!(w.stored().await, None);
}

#[tokio::test]
async fn a_month_not_yet_invoiced_says_when_to_run_again() {
    let w = World::new();
    w.tables.insert_aggregated(
        operator_record(
            "requests",
            "2026-11-02T10",
            AggregatedStatus::Success,
            10,
            None,
        ),
        w.clock.now(),
    );
    let mut req = request(5);
    req.key.hour = "2026-11-02T10".parse().unwrap();
    let Err(CorrectionError::Refused(r)) = super::correct(w.ports(), &req, true, 0).await else {
        panic!()
    };
    assert!(matches!(r, Refusal::NotYetInvoiced { .. }), "{r}");
    assert!(r.to_string().contains("2026-12-02"), "{r}");
}

#[tokio::test]
async fn an_unbilled_or_unpriced_record_has_nothing_to_refund() {
    let w = World::new();
    w.tables.insert_aggregated(
        operator_record(
            "requests",
            "2026-10-21T10",
            AggregatedStatus::Error,
            10,
            None,
        ),
        w.clock.now(),
    );
    w.tables.insert_aggregated(
        operator_record(
            "seats",
            "2026-10-21T10",
            AggregatedStatus::Success,
            10,
            None,
        ),
        w.clock.now(),
    );
    let mut req = request(5);
    req.key.hour = "2026-10-21T10".parse().unwrap();
    let r = super::correct(w.ports(), &req, true, 0).await.unwrap_err();
    assert!(
        matches!(r, CorrectionError::Refused(Refusal::NotBilled { .. })),
        "{r}"
    );
    req.key.dimension = "seats".into();
    let r = super::correct(w.ports(), &req, true, 0).await.unwrap_err();
    assert!(
        matches!(r, CorrectionError::Refused(Refusal::NothingBilled { .. })),
        "{r}"
    );
    req.key.dimension = "nothing".into();
    let r = super::correct(w.ports(), &req, true, 0).await.unwrap_err();
    assert!(
        matches!(r, CorrectionError::Refused(Refusal::NotFound(_))),
        "{r}"
    );
}

#[tokio::test]
async fn aws_refusing_the_call_leaves_it_failed_with_the_reason() {
    let w = World::new();
    w.api.fail_next(
        AgreementOp::RequestAdjustments,
        AgreementError::Refused {
            operation: "BatchCreateBillingAdjustmentRequest",
            code: "ValidationException".into(),
            reason: Some("INVALID_INVOICE_ADJUSTMENT_PERIOD".into()),
            message: "too late".into(),
        },
    );
    let outcome = correct_record(&w, 600).await.unwrap();
    let CorrectionOutcome::RefusedByAws(c) = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(c.status, CorrectionStatus::Failed);
    assert!(
        c.message
            .unwrap()
            .contains("INVALID_INVOICE_ADJUSTMENT_PERIOD")
    );
    assert!(w.api.adjustments().is_empty());
}

#[test]
fn a_correction_round_trips_its_stored_map() {
    let c = Correction {
        client_token: client_token(&key(), 1000, 600, 1),
        attempt: 1,
        billed_quantity: 1000,
        correct_quantity: 600,
        agreement_id: AGREEMENT.into(),
        invoice_id: INVOICE.into(),
        amount: dec("1.0000"),
        currency: "USD".into(),
        requested_at: parse_instant("2026-11-05T00:00:00Z").unwrap(),
        adjustment_id: Some("ba-1".into()),
        status: CorrectionStatus::Pending,
        message: None,
    };
    assert_eq!(Correction::from_attr(&c.to_attr()).unwrap(), c);
    assert!(Correction::from_attr(&Attr::S("x".into())).is_err());
}

#[test]
fn tokens_differ_by_quantity_and_attempt_and_fit_the_api() {
    let a = client_token(&key(), 1000, 600, 1);
    assert_eq!(a, client_token(&key(), 1000, 600, 1));
    assert_ne!(a, client_token(&key(), 1000, 500, 1));
    assert_ne!(a, client_token(&key(), 1000, 600, 2));
    assert_eq!(a.len(), 62);
    assert!(a.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'));
}

//! Invoices and refunds through the REAL `aws-sdk-marketplaceagreement`:
//! ListAgreementInvoiceLineItems built from the billed ledger, then
//! BatchCreateBillingAdjustmentRequest (client-token idempotency, the 5-entry and
//! maxAdjustmentAmount limits, the 2/s quota) and Get/ListBillingAdjustmentRequests.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use aws_sdk_marketplaceagreement as ma;
use awsmp_marketplace_sim::{AdjustmentFailure, ClockSetting, RunningSim, ThrottleConfig};
use chrono::{DateTime, TimeDelta, Utc};
use common::agreement::{AGREEMENT, agreement, agreement_client, chrono_time};
use common::{client, config, meter_ok, now, record, start};
use ma::error::ProvideErrorMetadata;
use ma::operation::batch_create_billing_adjustment_request::BatchCreateBillingAdjustmentRequestError as BatchError;
use ma::types::{
    BatchCreateBillingAdjustmentRequestEntry as Entry, BillingAdjustmentReasonCode,
    BillingAdjustmentStatus, ValidationExceptionReason,
};

/// Two days into the next month: March's invoice has been issued.
fn after_month_end() -> DateTime<Utc> {
    "2026-04-02T00:00:00Z".parse().unwrap()
}

/// A simulator whose agreement billed 1000 requests (10.00) and 10 storage_gb
/// (5.00) in March 2026, with the clock moved past the invoice date.
async fn billed_sim() -> RunningSim {
    let sim = start(config()).await;
    sim.handle().seed_agreement(agreement(AGREEMENT)).unwrap();
    meter_ok(
        &client(&sim).await,
        vec![record(30, "requests", 1000), record(30, "storage_gb", 10)],
    )
    .await;
    sim
}

async fn invoices(sim: &RunningSim) -> Vec<ma::types::AgreementInvoiceLineItemGroupSummary> {
    agreement_client(sim)
        .await
        .list_agreement_invoice_line_items()
        .agreement_id(AGREEMENT)
        .group_by(ma::types::LineItemGroupBy::InvoiceId)
        .send()
        .await
        .expect("invoices")
        .agreement_invoice_line_item_group_summaries()
        .to_vec()
}

fn entry(invoice: &str, amount: &str, token: &str) -> Entry {
    Entry::builder()
        .agreement_id(AGREEMENT)
        .original_invoice_id(invoice)
        .adjustment_amount(amount)
        .currency_code("USD")
        .adjustment_reason_code(BillingAdjustmentReasonCode::IncorrectMetering)
        .client_token(token)
        .build()
        .expect("complete entry")
}

async fn create(
    client: &ma::Client,
    entries: Vec<Entry>,
) -> Result<
    ma::operation::batch_create_billing_adjustment_request::BatchCreateBillingAdjustmentRequestOutput,
    BatchError,
>{
    client
        .batch_create_billing_adjustment_request()
        .set_billing_adjustment_request_entries(Some(entries))
        .send()
        .await
        .map_err(|e| e.into_service_error())
}

fn validation_reason(err: BatchError) -> ValidationExceptionReason {
    match err {
        BatchError::ValidationException(e) => e.reason().cloned().expect("a reason"),
        other => panic!("not a ValidationException: {other:?}"),
    }
}

#[tokio::test]
async fn an_invoice_per_month_priced_by_the_rate_card_once_the_month_is_over() {
    let sim = billed_sim().await;
    assert!(invoices(&sim).await.is_empty(), "March is still open");
    sim.handle().set_clock(ClockSetting::Fixed {
        at: after_month_end(),
    });
    let rows = invoices(&sim).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    let row = &rows[0];
    assert_eq!(row.agreement_id(), Some(AGREEMENT));
    assert!(row.invoice_id().unwrap().starts_with("E2E20260301"));
    let amount = row.pricing_currency_amount().unwrap();
    assert_eq!(amount.amount(), Some("15.00"));
    assert_eq!(amount.max_adjustment_amount(), Some("15.00"));
    assert_eq!(amount.currency_code(), Some("USD"));
    let period = row.invoice_billing_period().unwrap();
    assert_eq!((period.month(), period.year()), (3, 2026));
    assert_eq!(
        chrono_time(row.issued_time()),
        "2026-04-01T00:00:00Z".parse::<DateTime<Utc>>().unwrap()
    );
    assert_eq!(row.invoice_type().map(|t| t.as_str()), Some("INVOICE"));
}

#[tokio::test]
async fn adjustments_are_idempotent_bounded_and_complete() {
    let sim = billed_sim().await;
    sim.handle().set_clock(ClockSetting::Fixed {
        at: after_month_end(),
    });
    let invoice = invoices(&sim).await[0].invoice_id().unwrap().to_owned();
    let client = agreement_client(&sim).await;

    let first = create(&client, vec![entry(&invoice, "5.00", "refund-1")])
        .await
        .expect("created");
    assert!(first.errors().is_empty());
    let id = first.items()[0].billing_adjustment_request_id().to_owned();
    assert!(id.starts_with("ba-"), "{id}");

    // The same token and body again: the same request, nothing new.
    let again = create(&client, vec![entry(&invoice, "5.00", "refund-1")])
        .await
        .expect("repeated");
    assert_eq!(again.items()[0].billing_adjustment_request_id(), id);
    // The same token with another body: that entry is refused, the other created.
    let mixed = create(
        &client,
        vec![
            entry(&invoice, "6.00", "refund-1"),
            entry(&invoice, "1.00", "refund-2"),
        ],
    )
    .await
    .expect("partial success");
    assert_eq!(mixed.items().len(), 1);
    assert_eq!(mixed.items()[0].client_token(), "refund-2");
    assert_eq!(mixed.errors()[0].client_token(), "refund-1");
    assert_eq!(mixed.errors()[0].code().as_str(), "CONFLICT_EXCEPTION");
    assert_eq!(sim.handle().billing_adjustments().len(), 2);

    let row = &invoices(&sim).await[0];
    assert_eq!(
        row.pricing_currency_amount()
            .unwrap()
            .max_adjustment_amount(),
        Some("9.00")
    );
    // Above what is left (9.00): refused whole, nothing created.
    let over = create(&client, vec![entry(&invoice, "9.01", "refund-3")])
        .await
        .expect_err("above the maximum");
    assert_eq!(
        validation_reason(over),
        ValidationExceptionReason::ExceededMaximumAdjustmentAmount
    );
    let six: Vec<Entry> = (0..6)
        .map(|i| entry(&invoice, "0.01", &format!("many-{i}")))
        .collect();
    let err = create(&client, six).await.expect_err("six entries");
    assert_eq!(
        validation_reason(err),
        ValidationExceptionReason::BillingAdjustmentsLimitExceeded
    );
    let err = create(&client, vec![entry(&invoice, "-1", "negative")])
        .await
        .expect_err("signed amount");
    assert_eq!(
        validation_reason(err),
        ValidationExceptionReason::InvalidAdjustmentAmount
    );
    let unknown = create(&client, vec![entry("E2E-nope", "1.00", "refund-4")])
        .await
        .expect("answered per entry");
    assert_eq!(
        unknown.errors()[0].code().as_str(),
        "RESOURCE_NOT_FOUND_EXCEPTION"
    );
    assert_eq!(sim.handle().billing_adjustments().len(), 2);

    let got = client
        .get_billing_adjustment_request()
        .agreement_id(AGREEMENT)
        .billing_adjustment_request_id(&id)
        .send()
        .await
        .expect("got");
    assert_eq!(got.status(), &BillingAdjustmentStatus::Pending);
    assert_eq!(got.adjustment_amount(), "5.00");
    assert_eq!(got.original_invoice_id(), invoice);

    // Processing takes a minute of sim time; then both complete and credit memos appear.
    sim.handle().advance_clock(120);
    let completed = client
        .list_billing_adjustment_requests()
        .agreement_id(AGREEMENT)
        .status(BillingAdjustmentStatus::Completed)
        .max_results(1)
        .into_paginator()
        .items()
        .send()
        .collect::<Result<Vec<_>, _>>()
        .await
        .expect("every page");
    assert_eq!(completed.len(), 2);
    let rows = invoices(&sim).await;
    let memos: Vec<_> = rows
        .iter()
        .filter(|r| r.invoice_type().map(|t| t.as_str()) == Some("CREDIT_MEMO"))
        .collect();
    assert_eq!(memos.len(), 2);
    let events = sim.handle().agreement_events();
    let done = events
        .iter()
        .filter(|e| {
            e["detail-type"] == "Purchase Agreement Billing Adjustment Completed - Proposer"
        })
        .count();
    assert_eq!(done, 2);

    let err = client
        .get_billing_adjustment_request()
        .agreement_id(AGREEMENT)
        .billing_adjustment_request_id("ba-unknown")
        .send()
        .await
        .expect_err("unknown")
        .into_service_error();
    assert_eq!(err.code(), Some("ResourceNotFoundException"));
}

#[tokio::test]
async fn a_failed_adjustment_frees_its_amount_again() {
    let sim = billed_sim().await;
    sim.handle().set_clock(ClockSetting::Fixed {
        at: after_month_end(),
    });
    let invoice = invoices(&sim).await[0].invoice_id().unwrap().to_owned();
    let client = agreement_client(&sim).await;
    let out = create(&client, vec![entry(&invoice, "15.00", "all-of-it")])
        .await
        .unwrap();
    let id = out.items()[0].billing_adjustment_request_id().to_owned();
    sim.handle()
        .fail_billing_adjustment(AdjustmentFailure {
            billing_adjustment_request_id: id.clone(),
            status_message: "outside the adjustment period".to_owned(),
        })
        .unwrap();
    let got = client
        .get_billing_adjustment_request()
        .agreement_id(AGREEMENT)
        .billing_adjustment_request_id(&id)
        .send()
        .await
        .unwrap();
    assert_eq!(got.status(), &BillingAdjustmentStatus::ValidationFailed);
    assert_eq!(got.status_message(), Some("outside the adjustment period"));
    assert_eq!(
        invoices(&sim).await[0]
            .pricing_currency_amount()
            .unwrap()
            .max_adjustment_amount(),
        Some("15.00")
    );
}

#[tokio::test]
async fn only_the_seller_of_record_sees_invoices_and_adjusts() {
    let sim = start(config()).await;
    let mut seed = agreement(AGREEMENT);
    seed.seller_of_record = false;
    sim.handle().seed_agreement(seed).unwrap();
    let err = agreement_client(&sim)
        .await
        .list_agreement_invoice_line_items()
        .agreement_id(AGREEMENT)
        .group_by(ma::types::LineItemGroupBy::InvoiceId)
        .send()
        .await
        .expect_err("not the seller of record")
        .into_service_error();
    assert_eq!(err.code(), Some("AccessDeniedException"));
}

#[tokio::test]
async fn adjustments_are_limited_to_two_calls_a_second() {
    let sim = billed_sim().await;
    sim.handle().set_clock(ClockSetting::Fixed {
        at: now() + TimeDelta::days(18),
    });
    sim.handle()
        .set_throttle(ThrottleConfig::default())
        .unwrap();
    let invoice = invoices(&sim).await[0].invoice_id().unwrap().to_owned();
    let client = agreement_client(&sim).await;
    let mut throttled = 0;
    for i in 0..3 {
        match create(&client, vec![entry(&invoice, "1.00", &format!("q-{i}"))]).await {
            Ok(_) => {}
            Err(BatchError::ThrottlingException(_)) => throttled += 1,
            Err(other) => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(throttled, 1);
}

#[tokio::test]
async fn a_lost_adjustment_answer_still_made_the_adjustment_once() {
    let sim = billed_sim().await;
    sim.handle().set_clock(ClockSetting::Fixed {
        at: after_month_end(),
    });
    let invoice = invoices(&sim).await[0].invoice_id().unwrap().to_owned();
    let client = agreement_client(&sim).await;
    sim.handle()
        .inject_fault(awsmp_marketplace_sim::FaultSpec {
            kind: awsmp_marketplace_sim::FaultKind::LoseResponse {
                mode: Default::default(),
            },
            count: 2,
            operation: awsmp_marketplace_sim::FaultTarget::BillingAdjustments,
        })
        .unwrap();
    // Two answers lost (HTTP 500), each after the adjustment was made or found.
    for _ in 0..2 {
        let err = create(&client, vec![entry(&invoice, "2.50", "lost-1")])
            .await
            .expect_err("the answer is lost");
        assert_eq!(err.code(), Some("InternalServerException"), "{err:?}");
    }
    let third = create(&client, vec![entry(&invoice, "2.50", "lost-1")])
        .await
        .expect("answered");
    assert_eq!(third.items().len(), 1);
    assert_eq!(sim.handle().billing_adjustments().len(), 1, "made once");
    // Only lose_response applies to billing adjustments.
    let refused = sim
        .handle()
        .inject_fault(awsmp_marketplace_sim::FaultSpec {
            kind: awsmp_marketplace_sim::FaultKind::Throttling,
            count: 1,
            operation: awsmp_marketplace_sim::FaultTarget::BillingAdjustments,
        })
        .unwrap_err();
    assert!(refused.to_string().contains("lose_response"), "{refused}");
}

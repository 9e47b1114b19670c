//! `SdkAgreementApi`'s error classes and readings on scripted SDK answers
//! (aws-smithy-mocks, CBOR error bodies as the service sends them), for what the
//! simulator cannot produce on the read operations: AccessDenied per operation,
//! throttling and faults the SDK's retries do not get past, a price that is not a
//! decimal, an unknown status.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use aws_sdk_marketplaceagreement::Client;
use aws_sdk_marketplaceagreement::config::http::HttpResponse;
use aws_sdk_marketplaceagreement::operation::describe_agreement::DescribeAgreementOutput;
use aws_sdk_marketplaceagreement::operation::get_agreement_terms::GetAgreementTermsOutput;
use aws_sdk_marketplaceagreement::primitives::DateTime;
use aws_sdk_marketplaceagreement::types::{
    AcceptedTerm, Acceptor, AgreementStatus as SdkStatus, ProposalSummary, Proposer, RateCardItem,
    UsageBasedPricingTerm, UsageBasedRateCardItem,
};
use aws_smithy_mocks::{Rule, RuleMode, mock, mock_client};
use aws_smithy_runtime_api::http::StatusCode;
use aws_smithy_types::body::SdkBody;
use aws_smithy_types::retry::RetryConfig;
use awsmp_aws::SdkAgreementApi;
use awsmp_core::ports::{
    AgreementApi, AgreementError, AgreementSearch, AgreementStatus, PortError,
};

/// A CBOR text string (major type 3), short lengths only.
fn cbor_text(out: &mut Vec<u8>, s: &str) {
    let len = s.len();
    if len < 24 {
        out.push(0x60 | u8::try_from(len).unwrap());
    } else {
        out.push(0x78);
        out.push(u8::try_from(len).unwrap());
    }
    out.extend_from_slice(s.as_bytes());
}

/// An RPC v2 CBOR error answer: `{"__type": code, "message": ...}`.
fn error_answer(status: u16, code: &str) -> HttpResponse {
    let mut body = vec![0xa2];
    cbor_text(&mut body, "__type");
    cbor_text(
        &mut body,
        &format!("com.amazonaws.marketplaceagreement#{code}"),
    );
    cbor_text(&mut body, "message");
    cbor_text(&mut body, &format!("scripted {code}"));
    let mut response =
        HttpResponse::new(StatusCode::try_from(status).unwrap(), SdkBody::from(body));
    response
        .headers_mut()
        .insert("content-type", "application/cbor");
    response
        .headers_mut()
        .insert("smithy-protocol", "rpc-v2-cbor");
    response
}

fn client(rules: &[&Rule], attempts: u32) -> Client {
    mock_client!(
        aws_sdk_marketplaceagreement,
        RuleMode::Sequential,
        rules,
        |conf| {
            conf.retry_config(
                RetryConfig::standard()
                    .with_max_attempts(attempts)
                    .with_initial_backoff(Duration::from_millis(1))
                    .with_max_backoff(Duration::from_millis(5)),
            )
        }
    )
}

/// Every read operation answering `answer` (repeatedly), called through the port.
async fn each_operation(
    attempts: u32,
    answer: fn() -> HttpResponse,
) -> Vec<(&'static str, AgreementError, usize)> {
    let describe = mock!(Client::describe_agreement)
        .sequence()
        .http_response(answer)
        .repeatedly()
        .build();
    let terms = mock!(Client::get_agreement_terms)
        .sequence()
        .http_response(answer)
        .repeatedly()
        .build();
    let entitlements = mock!(Client::get_agreement_entitlements)
        .sequence()
        .http_response(answer)
        .repeatedly()
        .build();
    let search = mock!(Client::search_agreements)
        .sequence()
        .http_response(answer)
        .repeatedly()
        .build();
    let mut got = Vec::new();
    let api = SdkAgreementApi::new(client(&[&describe], attempts));
    got.push((
        "DescribeAgreement",
        api.describe("agmt-1").await.unwrap_err(),
        describe.num_calls(),
    ));
    let api = SdkAgreementApi::new(client(&[&terms], attempts));
    got.push((
        "GetAgreementTerms",
        api.terms("agmt-1").await.unwrap_err(),
        terms.num_calls(),
    ));
    let api = SdkAgreementApi::new(client(&[&entitlements], attempts));
    got.push((
        "GetAgreementEntitlements",
        api.entitlements("agmt-1").await.unwrap_err(),
        entitlements.num_calls(),
    ));
    let api = SdkAgreementApi::new(client(&[&search], attempts));
    got.push((
        "SearchAgreements",
        api.search(&AgreementSearch::default()).await.unwrap_err(),
        search.num_calls(),
    ));
    got
}

#[tokio::test]
async fn access_denied_names_the_missing_permission_of_each_operation() {
    for (operation, err, calls) in
        each_operation(3, || error_answer(400, "AccessDeniedException")).await
    {
        assert_eq!(
            err.missing_permission(),
            Some(format!("aws-marketplace:{operation}")),
            "{err:?}"
        );
        assert!(
            err.to_string()
                .contains(&format!("aws-marketplace:{operation}")),
            "{err}"
        );
        assert!(!err.is_transient());
        assert_eq!(calls, 1, "{operation}: never retried");
    }
}

#[tokio::test]
async fn throttling_the_sdk_retries_do_not_get_past_is_transient() {
    for (operation, err, calls) in
        each_operation(3, || error_answer(400, "ThrottlingException")).await
    {
        assert!(err.is_transient(), "{operation}: {err:?}");
        assert!(err.to_string().contains("ThrottlingException"), "{err}");
        assert_eq!(calls, 3, "{operation}: the SDK's three attempts");
    }
    for (operation, err, _) in
        each_operation(1, || error_answer(500, "InternalServerException")).await
    {
        assert!(err.is_transient(), "{operation}: {err:?}");
    }
}

#[tokio::test]
async fn a_validation_error_is_a_failure_not_retried() {
    for (operation, err, calls) in
        each_operation(3, || error_answer(400, "ValidationException")).await
    {
        assert!(
            matches!(err, AgreementError::Port(PortError::Failed { .. })),
            "{operation}: {err:?}"
        );
        assert_eq!(calls, 1);
    }
}

#[tokio::test]
async fn throttling_then_success_is_absorbed_by_the_sdk_retry() {
    let rule = mock!(Client::describe_agreement)
        .sequence()
        .http_response(|| error_answer(400, "ThrottlingException"))
        .output(|| described(SdkStatus::Active))
        .build();
    let api = SdkAgreementApi::new(client(&[&rule], 3));
    let facts = api.describe("agmt-1").await.unwrap().unwrap();
    assert_eq!(facts.status, AgreementStatus::Active);
    assert_eq!(rule.num_calls(), 2);
}

fn described(status: SdkStatus) -> DescribeAgreementOutput {
    DescribeAgreementOutput::builder()
        .agreement_id("agmt-1")
        .acceptor(Acceptor::builder().account_id("111122223333").build())
        .proposer(Proposer::builder().account_id("123456789012").build())
        .proposal_summary(ProposalSummary::builder().offer_id("offer-1").build())
        .start_time(DateTime::from_secs(1_764_000_000))
        .acceptance_time(DateTime::from_secs(1_764_000_000))
        .status(status)
        .build()
}

#[tokio::test]
async fn an_unknown_status_is_kept_as_answered() {
    let rule =
        mock!(Client::describe_agreement).then_output(|| described(SdkStatus::from("PAUSED")));
    let api = SdkAgreementApi::new(client(&[&rule], 1));
    let facts = api.describe("agmt-1").await.unwrap().unwrap();
    assert_eq!(facts.status, AgreementStatus::Unknown("PAUSED".into()));
    assert_eq!(facts.product_id, None);
    assert_eq!(facts.end, None);
}

#[tokio::test]
async fn a_price_that_is_not_a_decimal_names_its_dimension() {
    let rule = mock!(Client::get_agreement_terms).then_output(|| {
        GetAgreementTermsOutput::builder()
            .accepted_terms(AcceptedTerm::UsageBasedPricingTerm(
                UsageBasedPricingTerm::builder()
                    .currency_code("USD")
                    .rate_cards(
                        UsageBasedRateCardItem::builder()
                            .rate_card(
                                RateCardItem::builder()
                                    .dimension_key("requests")
                                    .price("0.0025")
                                    .build(),
                            )
                            .rate_card(
                                RateCardItem::builder()
                                    .dimension_key("storage_gb")
                                    .price("1,5")
                                    .build(),
                            )
                            .build(),
                    )
                    .build(),
            ))
            .build()
    });
    let api = SdkAgreementApi::new(client(&[&rule], 1));
    let err = api.terms("agmt-1").await.unwrap_err();
    let AgreementError::Malformed { operation, message } = &err else {
        panic!("not malformed: {err:?}");
    };
    assert_eq!(*operation, "GetAgreementTerms");
    assert!(
        message.contains("storage_gb") && message.contains("1,5"),
        "{message}"
    );
    assert!(!err.is_transient());
}

/// An endpoint that is not the Agreement API (moto answering an HTML 404): every
/// operation fails in one line that says to check the endpoint, not the decoder's dump,
/// and is not retried as if the service were busy.
#[tokio::test]
async fn an_answer_that_is_no_agreement_api_answer_says_to_check_the_endpoint() {
    fn html_404() -> HttpResponse {
        let mut response = HttpResponse::new(
            StatusCode::try_from(404).unwrap(),
            SdkBody::from("<!doctype html>\n<title>404 Not Found</title>\n"),
        );
        response
            .headers_mut()
            .insert("content-type", "text/html; charset=utf-8");
        response
    }
    for (operation, error, calls) in each_operation(3, html_404).await {
        let text = error.to_string();
        assert!(
            text.contains("HTTP 404 that is no Agreement API answer")
                && text.contains("AWS_ENDPOINT_URL_MARKETPLACE_AGREEMENT")
                && !text.contains("doctype"),
            "{operation}: {text}"
        );
        assert!(!error.is_transient(), "{operation}");
        assert_eq!(calls, 1, "{operation}: not retried");
    }
}

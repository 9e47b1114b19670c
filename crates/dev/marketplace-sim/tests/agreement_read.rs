//! The Agreement API's read operations through the REAL `aws-sdk-marketplaceagreement`
//! (RPC v2 CBOR): DescribeAgreement, GetAgreementTerms, SearchAgreements and
//! GetAgreementEntitlements, their pagination, their exceptions and quotas.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use aws_sdk_marketplaceagreement as ma;
use awsmp_marketplace_sim::{
    AgreementStatus, FixedUpfrontSeed, FreeTrialSeed, GrantSeed, ThrottleConfig,
};
use chrono::TimeDelta;
use common::agreement::{
    AGREEMENT, OFFER, SELLER, agreement, agreement_client, chrono_time, dec, filter,
    purchase_filter,
};
use common::{ACCOUNT, ACCOUNT_2, LICENSE, LICENSE_2, client, config, now, start};
use ma::error::ProvideErrorMetadata;
use ma::types::{AgreementStatus as SdkStatus, ValidationExceptionReason};

#[tokio::test]
async fn describe_agreement_answers_the_seeded_agreement() {
    let sim = start(config()).await;
    let end = now() + TimeDelta::days(365);
    let mut seed = agreement(AGREEMENT);
    seed.end_time = Some(end);
    seed.fixed_upfront = Some(FixedUpfrontSeed {
        duration: "P12M".to_owned(),
        price: dec("1200"),
        grants: vec![],
    });
    sim.handle().seed_agreement(seed).unwrap();
    let out = agreement_client(&sim)
        .await
        .describe_agreement()
        .agreement_id(AGREEMENT)
        .send()
        .await
        .expect("described");
    assert_eq!(out.agreement_id(), Some(AGREEMENT));
    assert_eq!(out.acceptor().and_then(|a| a.account_id()), Some(ACCOUNT));
    assert_eq!(out.proposer().and_then(|p| p.account_id()), Some(SELLER));
    assert_eq!(chrono_time(out.start_time()), now() - TimeDelta::days(30));
    assert_eq!(chrono_time(out.end_time()), end);
    assert_eq!(
        chrono_time(out.acceptance_time()),
        now() - TimeDelta::days(30)
    );
    assert_eq!(out.status(), Some(&SdkStatus::Active));
    assert_eq!(out.agreement_type(), Some("PurchaseAgreement"));
    assert_eq!(out.initial_agreement_id(), Some(AGREEMENT));
    let charges = out.estimated_charges().expect("estimated charges");
    assert_eq!(charges.currency_code(), Some("USD"));
    assert_eq!(charges.agreement_value(), Some("1200.00"));
    let proposal = out.proposal_summary().expect("proposal");
    assert_eq!(proposal.offer_id(), Some(OFFER));
    assert_eq!(proposal.resources()[0].id(), Some("prod-sim1234567890"));
    assert_eq!(proposal.resources()[0].r#type(), Some("SaaSProduct"));
    let behavior = out.end_time_behavior().expect("active with an end date");
    assert_eq!(behavior.r#type().as_str(), "EXPIRE");
}

#[tokio::test]
async fn describe_agreement_refuses_unknown_and_malformed_ids() {
    let sim = start(config()).await;
    let client = agreement_client(&sim).await;
    let err = client
        .describe_agreement()
        .agreement_id("agmt-unknown")
        .send()
        .await
        .expect_err("unknown");
    let err = err.into_service_error();
    assert_eq!(err.code(), Some("ResourceNotFoundException"));
    let ma::operation::describe_agreement::DescribeAgreementError::ResourceNotFoundException(e) =
        err
    else {
        panic!("not ResourceNotFound: {err:?}");
    };
    assert_eq!(e.resource_id(), Some("agmt-unknown"));
    assert_eq!(e.resource_type().map(|t| t.as_str()), Some("Agreement"));

    let err = client
        .describe_agreement()
        .agreement_id("not valid!")
        .send()
        .await
        .expect_err("malformed")
        .into_service_error();
    let ma::operation::describe_agreement::DescribeAgreementError::ValidationException(e) = err
    else {
        panic!("not Validation: {err:?}");
    };
    assert_eq!(
        e.reason(),
        Some(&ValidationExceptionReason::InvalidAgreementId)
    );
    assert_eq!(e.fields()[0].name(), "agreementId");
}

#[tokio::test]
async fn terms_carry_the_rate_card_free_trial_and_upfront_price_page_by_page() {
    let sim = start(config()).await;
    let mut seed = agreement(AGREEMENT);
    seed.free_trial = Some(FreeTrialSeed {
        duration_days: 14,
        grants: vec![GrantSeed {
            dimension_key: "requests".to_owned(),
            max_quantity: Some(1000),
        }],
    });
    seed.fixed_upfront = Some(FixedUpfrontSeed {
        duration: "P12M".to_owned(),
        price: dec("99.5"),
        grants: vec![GrantSeed {
            dimension_key: "storage_gb".to_owned(),
            max_quantity: None,
        }],
    });
    sim.handle().seed_agreement(seed).unwrap();
    let client = agreement_client(&sim).await;
    let terms: Vec<ma::types::AcceptedTerm> = client
        .get_agreement_terms()
        .agreement_id(AGREEMENT)
        .max_results(1)
        .into_paginator()
        .items()
        .send()
        .collect::<Result<Vec<_>, _>>()
        .await
        .expect("every page");
    assert_eq!(terms.len(), 4, "{terms:?}");
    assert!(terms[0].is_legal_term());
    let usage = terms[1].as_usage_based_pricing_term().expect("usage term");
    assert_eq!(usage.currency_code(), Some("USD"));
    let card: Vec<(&str, &str)> = usage.rate_cards()[0]
        .rate_card()
        .iter()
        .map(|r| (r.dimension_key().unwrap(), r.price().unwrap()))
        .collect();
    assert_eq!(card, [("requests", "0.01"), ("storage_gb", "0.50")]);
    let trial = terms[2].as_free_trial_pricing_term().expect("trial");
    assert_eq!(trial.duration(), Some("P14D"));
    assert_eq!(trial.grants()[0].max_quantity(), 1000);
    let upfront = terms[3].as_fixed_upfront_pricing_term().expect("upfront");
    assert_eq!(upfront.price(), Some("99.50"));
    assert_eq!(upfront.duration(), Some("P12M"));

    let err = client
        .get_agreement_terms()
        .agreement_id(AGREEMENT)
        .max_results(51)
        .send()
        .await
        .expect_err("too many")
        .into_service_error();
    assert_eq!(err.code(), Some("ValidationException"));
    let err = client
        .get_agreement_terms()
        .agreement_id(AGREEMENT)
        .next_token("7.0000000000000000")
        .send()
        .await
        .expect_err("foreign token")
        .into_service_error();
    assert_eq!(err.code(), Some("ValidationException"));
}

#[tokio::test]
async fn search_filters_sorts_and_pages() {
    let sim = start(config()).await;
    let h = sim.handle();
    for (id, days, license, account) in [
        ("agmt-c", 30, LICENSE, ACCOUNT),
        ("agmt-a", 90, LICENSE, ACCOUNT),
        ("agmt-b", 60, LICENSE_2, ACCOUNT_2),
    ] {
        let mut seed = agreement(id);
        seed.license_arn = license.to_owned();
        seed.customer_aws_account_id = account.to_owned();
        seed.end_time = Some(now() + TimeDelta::days(days));
        h.seed_agreement(seed).unwrap();
    }
    let client = agreement_client(&sim).await;
    let ids = |summaries: &[ma::types::AgreementViewSummary]| -> Vec<String> {
        summaries
            .iter()
            .map(|s| s.agreement_id().unwrap().to_owned())
            .collect()
    };
    let all: Vec<ma::types::AgreementViewSummary> = client
        .search_agreements()
        .catalog("AWSMarketplace")
        .filters(purchase_filter())
        .filters(filter("PartyType", &["Proposer"]))
        .max_results(1)
        .into_paginator()
        .items()
        .send()
        .collect::<Result<Vec<_>, _>>()
        .await
        .expect("every page");
    assert_eq!(
        ids(&all),
        ["agmt-c", "agmt-b", "agmt-a"],
        "EndTime ascending"
    );
    assert_eq!(all[0].entitlements()[0].license_arn(), Some(LICENSE));

    let by_license = client
        .search_agreements()
        .filters(purchase_filter())
        .filters(filter("LicenseArn", &[LICENSE_2]))
        .send()
        .await
        .unwrap();
    assert_eq!(ids(by_license.agreement_view_summaries()), ["agmt-b"]);
    assert_eq!(by_license.next_token(), None);

    let later = client
        .search_agreements()
        .filters(purchase_filter())
        .filters(filter(
            "AfterEndTime",
            &[&(now() + TimeDelta::days(45)).to_rfc3339()],
        ))
        .sort(
            ma::types::Sort::builder()
                .sort_by("EndTime")
                .sort_order(ma::types::SortOrder::Descending)
                .build(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(ids(later.agreement_view_summaries()), ["agmt-a", "agmt-b"]);

    h.end_agreement(&awsmp_marketplace_sim::AgreementEnd {
        agreement_id: "agmt-a".to_owned(),
        status: AgreementStatus::Cancelled,
    })
    .unwrap();
    let cancelled = client
        .search_agreements()
        .filters(purchase_filter())
        .filters(filter("Status", &["CANCELLED"]))
        .send()
        .await
        .unwrap();
    assert_eq!(ids(cancelled.agreement_view_summaries()), ["agmt-a"]);

    for (filters, reason) in [
        (
            vec![filter("Status", &["ACTIVE"])],
            ValidationExceptionReason::InvalidFilters,
        ),
        (
            vec![purchase_filter(), filter("Colour", &["blue"])],
            ValidationExceptionReason::InvalidFilterName,
        ),
        (
            vec![purchase_filter(), filter("Status", &["HAPPY"])],
            ValidationExceptionReason::InvalidStatus,
        ),
    ] {
        let err = client
            .search_agreements()
            .set_filters(Some(filters))
            .send()
            .await
            .expect_err("refused")
            .into_service_error();
        let ma::operation::search_agreements::SearchAgreementsError::ValidationException(e) = err
        else {
            panic!("not Validation: {err:?}");
        };
        assert_eq!(e.reason(), Some(&reason));
    }
}

#[tokio::test]
async fn entitlements_hand_out_a_token_resolve_customer_resolves() {
    let sim = start(config()).await;
    sim.handle().seed_agreement(agreement(AGREEMENT)).unwrap();
    let out = agreement_client(&sim)
        .await
        .get_agreement_entitlements()
        .agreement_id(AGREEMENT)
        .send()
        .await
        .expect("entitlements");
    let e = &out.agreement_entitlements()[0];
    assert_eq!(e.status().map(|s| s.as_str()), Some("PROVISIONED"));
    assert_eq!(e.license_arn(), Some(LICENSE));
    assert_eq!(e.r#type(), Some("AWS::Marketplace::Usage"));
    let token = e.registration_token().expect("a registration token");
    let resolved = client(&sim)
        .await
        .resolve_customer()
        .registration_token(token)
        .send()
        .await
        .expect("the token resolves");
    assert_eq!(resolved.license_arn(), Some(LICENSE));
    assert_eq!(resolved.customer_aws_account_id(), Some(ACCOUNT));
}

#[tokio::test]
async fn the_describe_quota_is_five_a_second() {
    let sim = start(config()).await;
    sim.handle().seed_agreement(agreement(AGREEMENT)).unwrap();
    sim.handle()
        .set_throttle(ThrottleConfig::default())
        .unwrap();
    let client = agreement_client(&sim).await;
    let mut throttled = 0;
    for _ in 0..6 {
        if let Err(err) = client
            .describe_agreement()
            .agreement_id(AGREEMENT)
            .send()
            .await
        {
            assert_eq!(err.into_service_error().code(), Some("ThrottlingException"));
            throttled += 1;
        }
    }
    assert_eq!(throttled, 1, "the sixth call within a second is refused");
}

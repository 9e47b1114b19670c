//! ResolveCustomer through the real SDK client: seeded tokens resolve (reusably)
//! to license, account and product; unknown tokens are invalid; tokens expire 4 h
//! after issue on the sim clock.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use aws_sdk_marketplacemetering::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_marketplacemetering::operation::resolve_customer::ResolveCustomerError;
use awsmp_marketplace_sim::{FaultKind, FaultSpec, FaultTarget, SimConfig, TokenSeed};
use chrono::TimeDelta;
use common::*;

const TOKEN: &str = "x-amzn-marketplace-token-sim-0001";

fn token_seed() -> TokenSeed {
    TokenSeed {
        token: TOKEN.to_owned(),
        license_arn: LICENSE.to_owned(),
        customer_aws_account_id: ACCOUNT.to_owned(),
        product_code: PRODUCT.to_owned(),
        issued_at: None,
    }
}

fn failure(err: SdkError<ResolveCustomerError>) -> (ResolveCustomerError, u16) {
    match err {
        SdkError::ServiceError(service) => {
            let status = service.raw().status().as_u16();
            (service.into_err(), status)
        }
        other => panic!("expected a service error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_seeded_token_resolves_and_can_be_reused() {
    let sim = start(config()).await;
    sim.handle().seed_token(token_seed()).expect("seeded");
    let client = client(&sim).await;

    for _ in 0..2 {
        let out = client
            .resolve_customer()
            .registration_token(TOKEN)
            .send()
            .await
            .expect("resolved");
        assert_eq!(out.license_arn(), Some(LICENSE));
        assert_eq!(out.customer_aws_account_id(), Some(ACCOUNT));
        assert_eq!(out.product_code(), Some(PRODUCT));
        assert_eq!(out.customer_identifier(), None);
    }
    assert_eq!(sim.handle().stats().resolve_customer_calls, 2);
}

#[tokio::test]
async fn an_unknown_token_is_invalid() {
    let sim = start(config()).await;
    sim.handle().seed_token(token_seed()).expect("seeded");
    let client = client(&sim).await;

    let err = client
        .resolve_customer()
        .registration_token("never-issued")
        .send()
        .await
        .expect_err("refused");

    let (err, status) = failure(err);
    assert_eq!(status, 400);
    assert!(err.is_invalid_token_exception(), "{err:?}");
}

#[tokio::test]
async fn a_token_expires_four_hours_after_issue_on_the_sim_clock() {
    let sim = start(config()).await;
    sim.handle().seed_token(token_seed()).expect("seeded");
    let client = client(&sim).await;

    sim.handle()
        .advance_clock((TimeDelta::hours(4) - TimeDelta::seconds(1)).num_seconds());
    client
        .resolve_customer()
        .registration_token(TOKEN)
        .send()
        .await
        .expect("still valid one second before 4 h");

    sim.handle().advance_clock(1);
    let err = client
        .resolve_customer()
        .registration_token(TOKEN)
        .send()
        .await
        .expect_err("expired");

    let (err, status) = failure(err);
    assert_eq!(status, 400);
    assert!(err.is_expired_token_exception(), "{err:?}");
    assert!(err.message().expect("message").contains("expired"));
}

#[tokio::test]
async fn a_token_seeded_with_an_old_issue_time_is_already_expired() {
    let sim = start(SimConfig {
        tokens: vec![TokenSeed {
            issued_at: Some(now() - TimeDelta::hours(5)),
            ..token_seed()
        }],
        ..config()
    })
    .await;
    let client = client(&sim).await;

    let err = client
        .resolve_customer()
        .registration_token(TOKEN)
        .send()
        .await
        .expect_err("expired");

    assert!(failure(err).0.is_expired_token_exception());
}

#[tokio::test]
async fn faults_can_target_resolve_customer_only() {
    let sim = start(config()).await;
    sim.handle().seed_token(token_seed()).expect("seeded");
    sim.handle()
        .inject_fault(FaultSpec {
            kind: FaultKind::Disabled,
            count: 1,
            operation: FaultTarget::ResolveCustomer,
        })
        .expect("fault queued");
    let client = client(&sim).await;

    // BatchMeterUsage is not affected by a ResolveCustomer fault.
    meter(&client, vec![record(1, "requests", 1)])
        .await
        .expect("metered");
    let err = client
        .resolve_customer()
        .registration_token(TOKEN)
        .send()
        .await
        .expect_err("disabled");
    let (err, status) = failure(err);
    assert_eq!(status, 400);
    assert!(err.is_disabled_api_exception(), "{err:?}");
    assert_eq!(err.code(), Some("DisabledApiException"));

    client
        .resolve_customer()
        .registration_token(TOKEN)
        .send()
        .await
        .expect("the fault was used up");
}

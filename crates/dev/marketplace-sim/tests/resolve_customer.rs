//! ResolveCustomer through the real SDK client: seeded tokens resolve (reusably)
//! to license, account and product; unknown tokens are invalid; tokens expire 4 h
//! after issue on the sim clock.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use aws_sdk_marketplacemetering::error::ProvideErrorMetadata;
use awsmp_marketplace_sim::{FaultKind, FaultTarget, SimConfig, TokenSeed};
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

#[tokio::test]
async fn a_seeded_token_resolves_and_can_be_reused() {
    let sim = start(config()).await;
    sim.handle().seed_token(token_seed()).expect("seeded");
    let client = client(&sim).await;

    for _ in 0..2 {
        let out = resolve(&client, TOKEN).await.expect("resolved");
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

    let err = resolve(&client, "never-issued").await.expect_err("refused");

    let (err, status) = service_error(err);
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
    resolve(&client, TOKEN)
        .await
        .expect("still valid one second before 4 h");

    sim.handle().advance_clock(1);
    let err = resolve(&client, TOKEN).await.expect_err("expired");

    let (err, status) = service_error(err);
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

    let err = resolve(&client, TOKEN).await.expect_err("expired");

    assert!(service_error(err).0.is_expired_token_exception());
}

#[tokio::test]
async fn faults_can_target_resolve_customer_only() {
    let sim = start(config()).await;
    sim.handle().seed_token(token_seed()).expect("seeded");
    inject(&sim, FaultKind::Disabled, 1, FaultTarget::ResolveCustomer);
    let client = client(&sim).await;

    // BatchMeterUsage is not affected by a ResolveCustomer fault.
    meter_ok(&client, vec![record(1, "requests", 1)]).await;
    let err = resolve(&client, TOKEN).await.expect_err("disabled");
    let (err, status) = service_error(err);
    assert_eq!(status, 400);
    assert!(err.is_disabled_api_exception(), "{err:?}");
    assert_eq!(err.code(), Some("DisabledApiException"));

    resolve(&client, TOKEN)
        .await
        .expect("the fault was used up");
}

//! Shared set-up for the Agreement API tests: seeded agreements on the simulator's
//! license, and the REAL `aws-sdk-marketplaceagreement` client (RPC v2 CBOR) pointed
//! at it (static credentials, us-east-1, no retries).

#![allow(dead_code, clippy::expect_used, clippy::unwrap_used)]

use aws_sdk_marketplaceagreement as ma;
use awsmp_marketplace_sim::{AgreementSeed, AgreementStatus, RateSeed, RunningSim};
use chrono::{DateTime, Utc};

use super::{ACCOUNT, LICENSE, PRODUCT, now};

/// The seller's account.
pub const SELLER: &str = "123456789012";
/// The seeded agreement on LICENSE.
pub const AGREEMENT: &str = "agmt-1111111111111111111111111";
/// Its offer.
pub const OFFER: &str = "offer-aaaaaaaaaaaaa";

/// A decimal from a test literal.
pub fn dec(s: &str) -> rust_decimal::Decimal {
    s.parse().expect("decimal literal")
}

/// An active pay-as-you-go agreement on LICENSE: requests at 0.01, storage_gb at 0.5 USD.
pub fn agreement(id: &str) -> AgreementSeed {
    AgreementSeed {
        agreement_id: id.to_owned(),
        license_arn: LICENSE.to_owned(),
        product_code: PRODUCT.to_owned(),
        product_id: Some("prod-sim1234567890".to_owned()),
        customer_aws_account_id: ACCOUNT.to_owned(),
        proposer_account_id: SELLER.to_owned(),
        offer_id: OFFER.to_owned(),
        offer_set_id: None,
        resale_authorization_id: None,
        seller_of_record: true,
        start_time: Some(now() - chrono::TimeDelta::days(30)),
        end_time: None,
        acceptance_time: None,
        status: AgreementStatus::Active,
        currency_code: "USD".to_owned(),
        rate_card: vec![
            RateSeed {
                dimension_key: "requests".to_owned(),
                price: dec("0.01"),
            },
            RateSeed {
                dimension_key: "storage_gb".to_owned(),
                price: dec("0.5"),
            },
        ],
        free_trial: None,
        fixed_upfront: None,
        initial_agreement_id: None,
        entitle: true,
    }
}

/// The Agreement client for `sim`.
pub async fn agreement_client(sim: &RunningSim) -> ma::Client {
    let shared = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(ma::config::Credentials::new(
            "AKIDSIMULATOR",
            "simulator-secret",
            None,
            None,
            "static",
        ))
        .endpoint_url(sim.endpoint_url())
        .retry_config(aws_config::retry::RetryConfig::disabled())
        .load()
        .await;
    ma::Client::new(&shared)
}

/// An SDK timestamp as chrono.
pub fn chrono_time(t: Option<&ma::primitives::DateTime>) -> DateTime<Utc> {
    let t = t.expect("timestamp present");
    DateTime::from_timestamp(t.secs(), t.subsec_nanos()).expect("in range")
}

/// The `AgreementType=PurchaseAgreement` filter every search needs.
pub fn purchase_filter() -> ma::types::Filter {
    filter("AgreementType", &["PurchaseAgreement"])
}

/// A search filter.
pub fn filter(name: &str, values: &[&str]) -> ma::types::Filter {
    let mut f = ma::types::Filter::builder().name(name);
    for v in values {
        f = f.values(*v);
    }
    f.build()
}

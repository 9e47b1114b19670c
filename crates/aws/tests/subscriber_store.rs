//! `DynamoSubscriberStore` and `DynamoProfileStore` against moto: versioned lifecycle
//! writes, the sparse deprovisioning index, the agreement index, idempotent region
//! registration, write-once profile stamps, rate cards kept beside the lifecycle.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;

use aws_sdk_dynamodb::types::AttributeValue;
use awsmp_aws::{DynamoProfileStore, DynamoSubscriberStore};
use awsmp_core::charges::{RateCard, StoredRateCard};
use awsmp_core::model::{AgreementStatus, CustomerProfile, Subscriber, SubscriptionStatus};
use awsmp_core::ports::{
    AgreementTerms, FreeTrial, ProfileStore, ProfileWrite, SubscriberStore, TrialGrant,
};
use common::*;

const OTHER_ACCOUNT: &str = "444455556666";

fn active(account: &str) -> Subscriber {
    Subscriber {
        product_code: Some("prodcode".into()),
        agreement_id: Some("agmt-1".into()),
        agreement_status: Some(AgreementStatus::Active),
        subscription_status: Some(SubscriptionStatus::Active),
        subscription_event_at: Some(t("2026-11-30T10:00:00Z")),
        agreement_event_at: Some(t("2026-11-30T10:00:00Z")),
        ..Subscriber::new(LICENSE, account)
    }
}

async fn raw_item(
    db: &aws_sdk_dynamodb::Client,
    table: &str,
    account: &str,
) -> std::collections::HashMap<String, AttributeValue> {
    db.get_item()
        .table_name(table)
        .key("licenseArn", AttributeValue::S(LICENSE.into()))
        .key("customerAWSAccountId", AttributeValue::S(account.into()))
        .send()
        .await
        .unwrap()
        .item
        .unwrap()
}

#[tokio::test]
async fn lifecycle_writes_are_versioned_and_round_trip() {
    let (_moto, db) = moto_with_tables().await;
    let store = DynamoSubscriberStore::new(db.clone(), SUBSCRIBERS);
    let row = active(ACCOUNT);
    assert!(
        store
            .put_lifecycle(&row, t("2026-11-30T10:00:05Z"))
            .await
            .unwrap()
    );
    let stored = store.get(LICENSE, ACCOUNT).await.unwrap().unwrap();
    assert_eq!(
        stored,
        Subscriber {
            version: 1,
            ..row.clone()
        }
    );

    // A writer still holding version 0 lost the race.
    assert!(
        !store
            .put_lifecycle(&row, t("2026-11-30T10:00:06Z"))
            .await
            .unwrap()
    );
    // Version 1 applies and stores 2.
    let mut next = stored.clone();
    next.agreement_status = Some(AgreementStatus::Inactive);
    assert!(
        store
            .put_lifecycle(&next, t("2026-11-30T11:00:00Z"))
            .await
            .unwrap()
    );
    let stored = store.get(LICENSE, ACCOUNT).await.unwrap().unwrap();
    assert_eq!(stored.version, 2);
    assert_eq!(stored.agreement_status, Some(AgreementStatus::Inactive));

    // Exactly the documented attributes, PII-free.
    let item = raw_item(&db, SUBSCRIBERS, ACCOUNT).await;
    let mut names: Vec<&str> = item.keys().map(String::as_str).collect();
    names.sort();
    assert_eq!(
        names,
        vec![
            "agreementEventAt",
            "agreementId",
            "agreementStatus",
            "createdAt",
            "customerAWSAccountId",
            "licenseArn",
            "productCode",
            "subscriptionEventAt",
            "subscriptionStatus",
            "updatedAt",
            "version",
        ]
    );
    assert_eq!(
        item["createdAt"],
        AttributeValue::S("2026-11-30T10:00:05Z".into())
    );
    assert_eq!(
        item["updatedAt"],
        AttributeValue::S("2026-11-30T11:00:00Z".into())
    );
    assert!(store.get(LICENSE, "000000000000").await.unwrap().is_none());
}

#[tokio::test]
async fn the_deprovisioning_index_holds_exactly_the_rows_in_their_flush_window() {
    let (_moto, db) = moto_with_tables().await;
    let store = DynamoSubscriberStore::new(db.clone(), SUBSCRIBERS);
    for account in [ACCOUNT, OTHER_ACCOUNT] {
        assert!(
            store
                .put_lifecycle(&active(account), t("2026-11-30T10:00:00Z"))
                .await
                .unwrap()
        );
    }
    assert!(store.deprovisioning().await.unwrap().is_empty());

    let mut later = store.get(LICENSE, OTHER_ACCOUNT).await.unwrap().unwrap();
    later.subscription_status = Some(SubscriptionStatus::Deprovisioning);
    later.deprovisioning_expiry = Some(t("2026-11-30T13:00:00Z"));
    assert!(
        store
            .put_lifecycle(&later, t("2026-11-30T12:00:00Z"))
            .await
            .unwrap()
    );
    let mut sooner = store.get(LICENSE, ACCOUNT).await.unwrap().unwrap();
    sooner.subscription_status = Some(SubscriptionStatus::Deprovisioning);
    sooner.deprovisioning_expiry = Some(t("2026-11-30T12:30:00Z"));
    assert!(
        store
            .put_lifecycle(&sooner, t("2026-11-30T11:30:00Z"))
            .await
            .unwrap()
    );

    let listed = store.deprovisioning().await.unwrap();
    let accounts: Vec<&str> = listed
        .iter()
        .map(|r| r.customer_aws_account_id.as_str())
        .collect();
    assert_eq!(accounts, vec![ACCOUNT, OTHER_ACCOUNT], "ordered by expiry");
    let item = raw_item(&db, SUBSCRIBERS, ACCOUNT).await;
    assert_eq!(
        item["deprovisioningIndex"],
        AttributeValue::S("deprovisioning".into())
    );

    // Flush window closed: inactive, marker removed, out of the index.
    let mut closed = listed[0].clone();
    closed.subscription_status = Some(SubscriptionStatus::Inactive);
    closed.deprovisioning_expiry = None;
    assert!(
        store
            .put_lifecycle(&closed, t("2026-11-30T12:31:00Z"))
            .await
            .unwrap()
    );
    let listed = store.deprovisioning().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].customer_aws_account_id, OTHER_ACCOUNT);
    let item = raw_item(&db, SUBSCRIBERS, ACCOUNT).await;
    assert!(!item.contains_key("deprovisioningIndex"));
    assert!(!item.contains_key("deprovisioningExpiry"));
}

#[tokio::test]
async fn rows_are_found_by_license_and_by_agreement() {
    let (_moto, db) = moto_with_tables().await;
    let store = DynamoSubscriberStore::new(db, SUBSCRIBERS);
    store
        .put_lifecycle(&active(ACCOUNT), t("2026-11-30T10:00:00Z"))
        .await
        .unwrap();
    let mut other = active(OTHER_ACCOUNT);
    other.agreement_id = Some("agmt-2".into());
    store
        .put_lifecycle(&other, t("2026-11-30T10:00:00Z"))
        .await
        .unwrap();

    assert_eq!(store.by_license(LICENSE).await.unwrap().len(), 2);
    assert!(store.by_license("arn:none").await.unwrap().is_empty());
    let by_agreement = store.by_agreement("agmt-2").await.unwrap();
    assert_eq!(by_agreement.len(), 1);
    assert_eq!(by_agreement[0].customer_aws_account_id, OTHER_ACCOUNT);
    assert_eq!(
        by_agreement[0].version, 1,
        "whole rows, not just the index keys"
    );
    assert!(store.by_agreement("agmt-none").await.unwrap().is_empty());
}

#[tokio::test]
async fn registration_adds_regions_idempotently_and_never_touches_the_lifecycle() {
    let (_moto, db) = moto_with_tables().await;
    let store = DynamoSubscriberStore::new(db.clone(), SUBSCRIBERS);
    // Registration before License Updated: the row is created without a lifecycle.
    for region in ["us-east-1", "us-east-1"] {
        store
            .add_registered_region(
                LICENSE,
                ACCOUNT,
                "prodcode",
                (region, &["email".to_string()]),
                t("2026-11-30T09:00:00Z"),
            )
            .await
            .unwrap();
    }
    let row = store.get(LICENSE, ACCOUNT).await.unwrap().unwrap();
    assert_eq!(row.registered_regions, vec!["us-east-1"]);
    // Each registration counts, a repeat too; the field names are a set.
    assert_eq!(row.registrations.count, 2);
    assert_eq!(row.registrations.fields, vec!["email"]);
    assert_eq!(row.version, 0);
    assert_eq!(row.subscription_status, None);

    // The lifecycle at version 0 applies on the registration-only row and keeps regions.
    let mut lifecycle = active(ACCOUNT);
    lifecycle.product_code = None;
    assert!(
        store
            .put_lifecycle(&lifecycle, t("2026-11-30T10:00:00Z"))
            .await
            .unwrap()
    );
    store
        .add_registered_region(
            LICENSE,
            ACCOUNT,
            "other-code",
            ("eu-west-1", &[]),
            t("2026-11-30T11:00:00Z"),
        )
        .await
        .unwrap();
    let row = store.get(LICENSE, ACCOUNT).await.unwrap().unwrap();
    assert_eq!(row.registered_regions, vec!["eu-west-1", "us-east-1"]);
    assert_eq!(
        row.product_code.as_deref(),
        Some("prodcode"),
        "set once, never replaced"
    );
    assert_eq!(row.subscription_status, Some(SubscriptionStatus::Active));
    assert_eq!(row.version, 1);
    let item = raw_item(&db, SUBSCRIBERS, ACCOUNT).await;
    assert_eq!(
        item["createdAt"],
        AttributeValue::S("2026-11-30T09:00:00Z".into())
    );

    let err = store
        .add_registered_region(
            LICENSE,
            ACCOUNT,
            "prodcode",
            ("", &[]),
            t("2026-11-30T11:00:00Z"),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("empty"), "{err}");
}

#[tokio::test]
async fn profile_upsert_keeps_the_first_registrations_fields_and_created_at() {
    let (_moto, db) = moto_with_tables().await;
    let store = DynamoProfileStore::new(db.clone(), PROFILE);
    let mut profile = CustomerProfile {
        license_arn: LICENSE.into(),
        customer_aws_account_id: ACCOUNT.into(),
        product_code: "prodcode".into(),
        fields: BTreeMap::new(),
    };
    // Zero fields still writes the identity row.
    let write = store
        .upsert(&profile, t("2026-11-30T10:00:00Z"))
        .await
        .unwrap();
    assert_eq!(write, ProfileWrite::First);
    let item = raw_item(&db, PROFILE, ACCOUNT).await;
    assert_eq!(item["productCode"], AttributeValue::S("prodcode".into()));

    // Registered again: the fields the first left empty are filled.
    profile
        .fields
        .insert("company".into(), "Example Corp".into());
    profile
        .fields
        .insert("email".into(), "buyer@example.com".into());
    let write = store
        .upsert(&profile, t("2026-11-30T10:05:00Z"))
        .await
        .unwrap();
    assert_eq!(write, ProfileWrite::Again);
    // And again, by whoever holds the link: nothing stored is replaced.
    profile.fields = BTreeMap::from([
        ("company".to_string(), "Example Ltd".to_string()),
        ("email".to_string(), "attacker@example.net".to_string()),
    ]);
    let write = store
        .upsert(&profile, t("2026-11-30T10:10:00Z"))
        .await
        .unwrap();
    assert_eq!(write, ProfileWrite::Again);

    let item = raw_item(&db, PROFILE, ACCOUNT).await;
    assert_eq!(item["company"], AttributeValue::S("Example Corp".into()));
    assert_eq!(item["email"], AttributeValue::S("buyer@example.com".into()));
    assert_eq!(
        item["createdAt"],
        AttributeValue::S("2026-11-30T10:00:00Z".into())
    );
    assert_eq!(
        item["updatedAt"],
        AttributeValue::S("2026-11-30T10:10:00Z".into())
    );

    profile.fields = BTreeMap::from([("licenseArn".to_string(), "x".to_string())]);
    let err = store
        .upsert(&profile, t("2026-11-30T10:11:00Z"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("reserved"), "{err}");
}

#[tokio::test]
async fn profile_expiry_is_written_once_and_never_creates_a_row() {
    let (_moto, db) = moto_with_tables().await;
    let store = DynamoProfileStore::new(db.clone(), PROFILE);
    let at = t("2026-12-30T11:00:00Z");
    // No profile: nothing written, nothing created.
    assert!(!store.expire(LICENSE, ACCOUNT, at).await.unwrap());
    let scan = db.scan().table_name(PROFILE).send().await.unwrap();
    assert_eq!(scan.count, 0);

    let profile = CustomerProfile {
        license_arn: LICENSE.into(),
        customer_aws_account_id: ACCOUNT.into(),
        product_code: "prodcode".into(),
        fields: BTreeMap::from([("email".to_string(), "buyer@example.com".to_string())]),
    };
    store
        .upsert(&profile, t("2026-11-30T10:00:00Z"))
        .await
        .unwrap();
    assert!(store.expire(LICENSE, ACCOUNT, at).await.unwrap());
    assert!(
        !store.expire(LICENSE, ACCOUNT, at).await.unwrap(),
        "a repeat writes nothing"
    );
    let item = raw_item(&db, PROFILE, ACCOUNT).await;
    assert_eq!(
        item["expiresAt"],
        AttributeValue::N(at.timestamp().to_string())
    );
    assert_eq!(item["email"], AttributeValue::S("buyer@example.com".into()));

    // A form field can never be named like the TTL attribute.
    let mut forged = profile.clone();
    forged.fields = BTreeMap::from([("expiresAt".to_string(), "1".to_string())]);
    let err = store
        .upsert(&forged, t("2026-11-30T10:11:00Z"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("reserved"), "{err}");
}

fn stored_card(agreement_id: &str, read_at: &str, price: &str) -> StoredRateCard {
    StoredRateCard {
        card: RateCard {
            agreement_id: agreement_id.into(),
            start: t("2026-11-01T00:00:00Z"),
            terms: AgreementTerms {
                currency: Some("USD".into()),
                rate_card: BTreeMap::from([("requests".to_string(), price.parse().unwrap())]),
                free_trial: Some(FreeTrial {
                    duration_days: 14,
                    grants: vec![TrialGrant {
                        dimension: "requests".into(),
                        max_quantity: Some(1000),
                    }],
                }),
                has_upfront: false,
            },
        },
        agreement_updated_at: Some(t("2026-11-02T00:00:00Z")),
        read_at: t(read_at),
    }
}

#[tokio::test]
async fn a_rate_card_is_kept_only_on_its_agreements_row_never_over_a_later_read() {
    let (_moto, db) = moto_with_tables().await;
    let store = DynamoSubscriberStore::new(db.clone(), SUBSCRIBERS);
    let now = t("2026-11-30T12:00:00Z");
    let card = stored_card("agmt-1", "2026-11-30T12:00:00Z", "0.0025");
    assert!(
        !store
            .put_rate_card(LICENSE, ACCOUNT, &card, now)
            .await
            .unwrap(),
        "no row: nothing to keep it on (and no row is created)"
    );
    assert!(store.get(LICENSE, ACCOUNT).await.unwrap().is_none());

    store.put_lifecycle(&active(ACCOUNT), now).await.unwrap();
    assert!(
        store
            .put_rate_card(LICENSE, ACCOUNT, &card, now)
            .await
            .unwrap()
    );
    let row = store.get(LICENSE, ACCOUNT).await.unwrap().unwrap();
    assert_eq!(row.rate_card.as_deref(), Some(&card), "read back exactly");
    assert_eq!(row.current_rate_card(), Some(&card.card));
    assert_eq!(row.version, 1, "the card is not a lifecycle write");
    let item = raw_item(&db, SUBSCRIBERS, ACCOUNT).await;
    assert!(matches!(item.get("rateCard"), Some(AttributeValue::M(_))));

    let earlier = stored_card("agmt-1", "2026-11-30T11:00:00Z", "9");
    assert!(
        !store
            .put_rate_card(LICENSE, ACCOUNT, &earlier, now)
            .await
            .unwrap()
    );
    let other = stored_card("agmt-2", "2026-11-30T13:00:00Z", "9");
    assert!(
        !store
            .put_rate_card(LICENSE, ACCOUNT, &other, now)
            .await
            .unwrap()
    );
    let later = stored_card("agmt-1", "2026-11-30T13:00:00Z", "0.003");
    assert!(
        store
            .put_rate_card(LICENSE, ACCOUNT, &later, now)
            .await
            .unwrap()
    );

    // A lifecycle write keeps the card.
    let mut next = store.get(LICENSE, ACCOUNT).await.unwrap().unwrap();
    next.subscription_status = Some(SubscriptionStatus::Deprovisioning);
    assert!(store.put_lifecycle(&next, now).await.unwrap());
    let row = store.get(LICENSE, ACCOUNT).await.unwrap().unwrap();
    assert_eq!(row.rate_card.as_deref(), Some(&later));
}

#[tokio::test]
async fn many_rows_are_read_in_batches_and_a_missing_or_repeated_key_is_no_error() {
    let (_moto, db) = moto_with_tables().await;
    let store = DynamoSubscriberStore::new(db.clone(), SUBSCRIBERS);
    let now = t("2026-11-30T12:00:00Z");
    // 150 buyers: two BatchGetItem calls (100 keys each at most).
    let accounts: Vec<String> = (0..150).map(|n| format!("{:012}", 100_000 + n)).collect();
    for account in &accounts {
        store.put_lifecycle(&active(account), now).await.unwrap();
    }
    let card = stored_card("agmt-1", "2026-11-30T12:00:00Z", "0.0025");
    assert!(
        store
            .put_rate_card(LICENSE, &accounts[7], &card, now)
            .await
            .unwrap()
    );
    let mut keys: Vec<(String, String)> = accounts
        .iter()
        .map(|a| (LICENSE.to_string(), a.clone()))
        .collect();
    keys.push((LICENSE.to_string(), accounts[0].clone()));
    keys.push((LICENSE.to_string(), "999999999999".to_string()));

    let rows = store.get_many(&keys).await.unwrap();
    assert_eq!(
        rows.len(),
        150,
        "each existing row once; the unknown one left out"
    );
    let with_card: Vec<_> = rows.iter().filter(|r| r.rate_card.is_some()).collect();
    assert_eq!(with_card.len(), 1);
    assert_eq!(with_card[0].customer_aws_account_id, accounts[7]);
    assert_eq!(with_card[0].current_rate_card(), Some(&card.card));
    assert!(store.get_many(&[]).await.unwrap().is_empty());
}

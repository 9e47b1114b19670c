//! deprovision-cleanup on the real DynamoDB adapter, against moto: rows reach the
//! deprovisioning index through lifecycle writes, the run closes exactly the expired
//! ones, removes their sparse-index marker, and a second run finds nothing to do.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use aws_lambda_events::eventbridge::EventBridgeEvent;
use aws_sdk_dynamodb::types::AttributeValue;
use awsmp_aws::{DynamoSubscriberStore, SystemClock};
use awsmp_core::lifecycle::{MarketplaceEvent, Transition, apply};
use awsmp_core::model::SubscriptionStatus;
use awsmp_core::ports::SubscriberStore;
use awsmp_core::time::{Instant, parse_usage_timestamp};
use awsmp_deprovision_cleanup::{Config, State, handler};
use awsmp_local_aws::{MotoServer, create_subscribers_table};
use lambda_runtime::LambdaEvent;

#[path = "../../subscription/tests/support/deprovisioning.rs"]
mod deprovisioning;
use deprovisioning::licenses_in_index;

const TABLE: &str = "awsmp-subscribers-test";
const ACCOUNT: &str = "845735284135";

fn t(s: &str) -> Instant {
    parse_usage_timestamp(s).unwrap()
}

fn scheduled(time: &str) -> LambdaEvent<EventBridgeEvent> {
    let path = format!(
        "{}/tests/fixtures/scheduled-event.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    json["time"] = serde_json::Value::String(time.to_string());
    LambdaEvent::new(
        serde_json::from_value(json).unwrap(),
        lambda_runtime::Context::default(),
    )
}

/// Writes a row the way the subscription function does: License Updated at 10:00, then
/// (if `deprovisioned_at`) License Deprovisioned.
async fn seed(store: &DynamoSubscriberStore, license: &str, deprovisioned_at: Option<&str>) {
    let mut events = vec![MarketplaceEvent::LicenseUpdated {
        license_arn: license.into(),
        account: ACCOUNT.into(),
        product_code: Some("prod-abc".into()),
        agreement_id: format!("agmt-{license}"),
        time: t("2026-11-30T10:00:00Z"),
    }];
    if let Some(at) = deprovisioned_at {
        events.push(MarketplaceEvent::LicenseDeprovisioned {
            license_arn: license.into(),
            account: ACCOUNT.into(),
            product_code: Some("prod-abc".into()),
            agreement_id: format!("agmt-{license}"),
            time: t(at),
        });
    }
    for event in events {
        let current = store.get(license, ACCOUNT).await.unwrap();
        let Transition::Write { row, .. } = apply(current.as_ref(), &event) else {
            panic!("seeding {license}: expected a write");
        };
        assert!(
            store
                .put_lifecycle(&row, t("2026-11-30T10:00:00Z"))
                .await
                .unwrap()
        );
    }
}

#[tokio::test]
async fn closes_expired_rows_through_the_index_on_moto() {
    let moto = MotoServer::start().await.unwrap_or_else(|e| panic!("{e}"));
    let client = moto.dynamodb();
    create_subscribers_table(&client, TABLE).await.unwrap();
    let store = DynamoSubscriberStore::new(client.clone(), TABLE);
    seed(
        &store,
        "arn:aws:license-manager::1:license:l-expired",
        Some("2026-11-30T12:00:00Z"),
    )
    .await;
    seed(
        &store,
        "arn:aws:license-manager::1:license:l-edge",
        Some("2026-11-30T12:15:00Z"),
    )
    .await;
    seed(
        &store,
        "arn:aws:license-manager::1:license:l-open",
        Some("2026-11-30T12:30:00Z"),
    )
    .await;
    seed(&store, "arn:aws:license-manager::1:license:l-active", None).await;
    assert_eq!(store.deprovisioning().await.unwrap().len(), 3);

    let state = State {
        config: Arc::new(Config {
            subscribers_table: TABLE.into(),
        }),
        subscribers: Arc::new(store.clone()),
        clock: Arc::new(SystemClock),
    };
    let report = handler(&state, scheduled("2026-11-30T13:15:00Z"))
        .await
        .unwrap();
    assert_eq!(
        (report.deprovisioning, report.closed, report.still_open),
        (3, 2, 1)
    );

    let status = |license: &'static str| {
        let store = store.clone();
        async move {
            store
                .get(
                    &format!("arn:aws:license-manager::1:license:{license}"),
                    ACCOUNT,
                )
                .await
                .unwrap()
                .unwrap()
                .subscription_status
        }
    };
    assert_eq!(
        status("l-expired").await,
        Some(SubscriptionStatus::Inactive)
    );
    assert_eq!(status("l-edge").await, Some(SubscriptionStatus::Inactive));
    assert_eq!(
        status("l-open").await,
        Some(SubscriptionStatus::Deprovisioning)
    );
    assert_eq!(status("l-active").await, Some(SubscriptionStatus::Active));

    // Closed rows carry no sparse-index marker any more; the open one still does.
    let items = client
        .scan()
        .table_name(TABLE)
        .send()
        .await
        .unwrap()
        .items
        .unwrap_or_default();
    for item in &items {
        let license = match &item["licenseArn"] {
            AttributeValue::S(s) => s.clone(),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            item.contains_key("deprovisioningIndex"),
            license.ends_with("l-open"),
            "{license}: {item:?}"
        );
    }
    assert_eq!(
        licenses_in_index(&store).await,
        ["arn:aws:license-manager::1:license:l-open"]
    );

    // Idempotent: the same run again closes nothing; a later run closes the last one.
    let again = handler(&state, scheduled("2026-11-30T13:15:00Z"))
        .await
        .unwrap();
    assert_eq!((again.closed, again.still_open), (0, 1));
    let later = handler(&state, scheduled("2026-11-30T13:30:00Z"))
        .await
        .unwrap();
    assert_eq!(later.closed, 1);
    assert!(store.deprovisioning().await.unwrap().is_empty());
}

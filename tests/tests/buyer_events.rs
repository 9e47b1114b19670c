//! Buyer lifecycle events end to end on the local stack (`BuyerEvents=enabled`): a
//! License Updated then a License Deprovisioned go through the events queue to the
//! subscription function, which writes the subscribers table on moto; moto's stream of
//! that table is read as the template's mapping reads it by the buyer-events function,
//! which puts its events on moto's default bus, where a rule (as a seller's would)
//! sends every `awsmp.buyers` event to a queue. They are `Buyer Subscribed` then `Buyer
//! Deprovisioning`, the latter with `billedUntil` the row's `deprovisioningExpiry`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use awsmp_core::lifecycle::DEPROVISIONING_WINDOW;
use awsmp_core::time::{format_instant, parse_instant};
use awsmp_local_stack::demo::{BUYER_ACCOUNT, LICENSE_A, lifecycle_event};
use awsmp_local_stack::demo_start;
use awsmp_local_stack::system::{LocalPaths, LocalSystem};

const AGREEMENT: &str = "agmt-buyerevents";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn license_updated_then_deprovisioned_tell_subscribed_then_deprovisioning() {
    let root = awsmp_local_aws::workspace_root();
    let start = parse_instant("2026-12-03T10:00:00Z").unwrap();
    let mut system = LocalSystem::start(&LocalPaths { root }, demo_start(start))
        .await
        .expect("the local stack starts (moto from the project's venv: make venv)");
    assert!(
        system.buyer_queue.is_some(),
        "the local events stack deploys BuyerEvents=enabled"
    );
    let subscribed_at = system.now;
    system
        .put_marketplace_event(&lifecycle_event(
            "License Updated - Manufacturer",
            LICENSE_A,
            AGREEMENT,
            subscribed_at,
        ))
        .await
        .unwrap();
    system.drain(50).await.unwrap();
    let deprovisioned_at = subscribed_at + chrono::Duration::minutes(30);
    system
        .advance(deprovisioned_at, chrono::Duration::minutes(5))
        .await
        .unwrap();
    system
        .put_marketplace_event(&lifecycle_event(
            "License Deprovisioned - Manufacturer",
            LICENSE_A,
            AGREEMENT,
            deprovisioned_at,
        ))
        .await
        .unwrap();
    system.drain(50).await.unwrap();

    // The row as the subscription function left it.
    let row = system
        .dynamodb
        .get_item()
        .table_name(system.table("SubscribersTable").unwrap())
        .key(
            "licenseArn",
            aws_sdk_dynamodb::types::AttributeValue::S(LICENSE_A.into()),
        )
        .key(
            "customerAWSAccountId",
            aws_sdk_dynamodb::types::AttributeValue::S(BUYER_ACCOUNT.into()),
        )
        .send()
        .await
        .unwrap()
        .item
        .expect("the subscribers row");
    let expiry = row["deprovisioningExpiry"].as_s().unwrap().clone();
    assert_eq!(
        expiry,
        format_instant(deprovisioned_at + DEPROVISIONING_WINDOW)
    );

    let events = system.take_buyer_events().await.unwrap();
    let told: Vec<(&str, &serde_json::Value)> = events
        .iter()
        .map(|e| (e["detail-type"].as_str().unwrap(), &e["detail"]))
        .collect();
    let types: Vec<&str> = told.iter().map(|(t, _)| *t).collect();
    assert_eq!(
        types,
        vec!["Buyer Subscribed", "Buyer Deprovisioning"],
        "{events:#?}"
    );
    for event in &events {
        assert_eq!(event["source"], "awsmp.buyers");
        assert_eq!(event["resources"], serde_json::json!([LICENSE_A]));
        let detail = &event["detail"];
        assert_eq!(detail["detailVersion"], 1);
        assert_eq!(detail["licenseArn"], LICENSE_A);
        assert_eq!(detail["customerAWSAccountId"], BUYER_ACCOUNT);
        assert_eq!(detail["agreementId"], AGREEMENT);
        assert!(detail["eventId"].as_str().is_some_and(|id| !id.is_empty()));
    }
    assert_eq!(told[0].1["occurredAt"], format_instant(subscribed_at));
    assert_eq!(told[1].1["billedUntil"], expiry.as_str());
    assert_eq!(told[1].1["occurredAt"], format_instant(deprovisioned_at));
    assert_ne!(told[0].1["eventId"], told[1].1["eventId"]);
}

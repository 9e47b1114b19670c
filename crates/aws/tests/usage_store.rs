//! `DynamoUsageStore` against moto: idempotent ingestion, the item shape, paginated
//! pending queries, group reads, and finalization leaving the sparse index.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use aws_sdk_dynamodb::types::AttributeValue;
use awsmp_aws::DynamoUsageStore;
use awsmp_core::memory::fixtures::{all_pages, put_row, team_allocation, usage_row};
use awsmp_core::model::{Attr, RawStatus};
use awsmp_core::ports::{IngestOutcome, NewUsageRow, PortError, RowClaim, RowFinal, UsageStore};
use common::*;

fn new_row(dimension: &str, ts: &str, event_id: &str, quantity: i64) -> NewUsageRow {
    usage_row(LICENSE, ACCOUNT, dimension, t(ts), quantity, event_id)
}

async fn pending_count(store: &DynamoUsageStore, h: &str) -> usize {
    let pages = all_pages(|cursor| store.pending_page(hour(h), cursor)).await;
    pages.iter().map(|page| page.items.len()).sum()
}

#[tokio::test]
async fn put_row_is_idempotent_per_event_id_and_keeps_same_second_writes_apart() {
    let (_moto, db) = moto_with_tables().await;
    let store = DynamoUsageStore::new(db.clone(), USAGE);
    let now = t("2026-11-30T10:20:00Z");
    let mut row = new_row("requests", "2026-11-30T10:15:42Z", "evt-1", 5);
    row.allocations = Some(team_allocation(5));
    row.product_code = Some("prodcode".into());

    // GIVEN a first write WHEN it is retried THEN nothing changes; WHEN the event id
    // comes again with other usage THEN a conflict with both, and nothing changes.
    assert_eq!(put_row(&store, &row, now).await, IngestOutcome::Created);
    assert_eq!(
        put_row(&store, &row, t("2026-11-30T10:21:00Z")).await,
        IngestOutcome::Duplicate
    );
    let mut retried = row.clone();
    retried.quantity = 999;
    let IngestOutcome::Conflict(conflict) =
        put_row(&store, &retried, t("2026-11-30T10:21:00Z")).await
    else {
        panic!("another quantity under the event id is a conflict")
    };
    assert_eq!(conflict.recorded.map(|r| r.quantity), Some(5));
    assert_eq!(conflict.this.quantity, 999);
    // A second event in the same second is its own row.
    let same_second = new_row("requests", "2026-11-30T10:15:42Z", "evt-2", 7);
    assert_eq!(
        put_row(&store, &same_second, now).await,
        IngestOutcome::Created
    );

    let sort_key = format!("{ACCOUNT}#requests#2026-11-30T10:15:42Z#evt-1");
    let stored = store.get_row(LICENSE, &sort_key).await.unwrap().unwrap();
    assert_eq!(stored.attrs["quantity"], Attr::N("5".into()));
    assert_eq!(
        stored.attrs["timestamp"],
        Attr::S("2026-11-30T10:15:42Z".into())
    );
    assert_eq!(
        stored.attrs["meteringPending"],
        Attr::S("2026-11-30T10".into())
    );
    assert_eq!(stored.attrs["productCode"], Attr::S("prodcode".into()));
    assert_eq!(
        stored.attrs["createdAt"],
        Attr::S("2026-11-30T10:20:00Z".into())
    );
    assert_eq!(
        stored.attrs["updatedAt"],
        Attr::S("2026-11-30T10:20:00Z".into())
    );
    // Allocations in the documented shape, straight from DynamoDB.
    let raw = db
        .get_item()
        .table_name(USAGE)
        .key("licenseArn", AttributeValue::S(LICENSE.into()))
        .key(
            "customerAWSAccountId_dimension_timestamp",
            AttributeValue::S(sort_key.clone()),
        )
        .send()
        .await
        .unwrap()
        .item
        .unwrap();
    let allocation = &raw["usageAllocations"].as_l().unwrap()[0];
    let allocation = allocation.as_m().unwrap();
    assert_eq!(
        allocation["allocatedUsageQuantity"],
        AttributeValue::N("5".into())
    );
    let tag = allocation["tags"].as_l().unwrap()[0].as_m().unwrap();
    assert_eq!(tag["key"], AttributeValue::S("team".into()));
    assert_eq!(tag["value"], AttributeValue::S("a".into()));

    assert_eq!(pending_count(&store, "2026-11-30T10").await, 2);
    assert!(store.get_row(LICENSE, "nope").await.unwrap().is_none());
}

#[tokio::test]
async fn put_row_refuses_parts_that_would_break_the_sort_key() {
    let (_moto, db) = moto_with_tables().await;
    let store = DynamoUsageStore::new(db, USAGE);
    for (dimension, event_id) in [("requests", ""), ("requests", "a#b"), ("re#q", "e1")] {
        let err = store
            .put_row(
                &new_row(dimension, "2026-11-30T10:15:42Z", event_id, 1),
                t("2026-11-30T10:20:00Z"),
            )
            .await
            .unwrap_err();
        assert!(matches!(err, PortError::Failed { .. }), "{err}");
    }
    assert_eq!(pending_count(&store, "2026-11-30T10").await, 0);
}

#[tokio::test]
async fn pending_page_walks_the_sparse_index_over_several_pages() {
    let (_moto, db) = moto_with_tables().await;
    let store = DynamoUsageStore::new(db, USAGE).with_page_limit(4);
    let now = t("2026-11-30T11:00:00Z");
    for i in 0..10 {
        let row = new_row(
            "requests",
            &format!("2026-11-30T10:00:{i:02}Z"),
            &format!("e{i}"),
            1,
        );
        put_row(&store, &row, now).await;
    }
    // Another hour's row is not in this hour's partition of the index.
    let other_hour = new_row("requests", "2026-11-30T09:59:59Z", "other", 1);
    put_row(&store, &other_hour, now).await;

    let pages = all_pages(|cursor| store.pending_page(hour("2026-11-30T10"), cursor)).await;
    let mut seen = Vec::new();
    for page in &pages {
        assert!(page.items.len() <= 4);
        for item in &page.items {
            assert_eq!(item.license_arn, LICENSE);
            assert_eq!(item.customer_aws_account_id.as_deref(), Some(ACCOUNT));
            assert_eq!(item.dimension.as_deref(), Some("requests"));
        }
        seen.extend(page.items.iter().map(|i| i.sort_key.clone()));
    }
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 10);
    assert!(pages.len() >= 3, "{} pages", pages.len());

    let err = store
        .pending_page(hour("2026-11-30T10"), Some("not a cursor".into()))
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("malformed pagination cursor"),
        "{err}"
    );
}

#[tokio::test]
async fn group_rows_reads_exactly_one_group_in_any_status() {
    let (_moto, db) = moto_with_tables().await;
    let store = DynamoUsageStore::new(db, USAGE);
    let now = t("2026-11-30T11:00:00Z");
    for (dimension, ts, id) in [
        ("requests", "2026-11-30T10:00:00Z", "a"),
        ("requests", "2026-11-30T10:59:59Z", "b"),
        ("requests", "2026-11-30T11:00:00Z", "next-hour"),
        ("requests2", "2026-11-30T10:30:00Z", "other-dimension"),
    ] {
        put_row(&store, &new_row(dimension, ts, id, 1), now).await;
    }
    let sort_key_b = format!("{ACCOUNT}#requests#2026-11-30T10:59:59Z#b");
    store
        .finalize_row(
            LICENSE,
            &sort_key_b,
            RowClaim::Uncounted,
            RowFinal::new(RawStatus::Aggregated, None),
            now,
        )
        .await
        .unwrap();
    let mut keys: Vec<String> = store
        .group_rows(&group("requests", "2026-11-30T10"))
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.sort_key)
        .collect();
    keys.sort();
    assert_eq!(
        keys,
        vec![
            format!("{ACCOUNT}#requests#2026-11-30T10:00:00Z#a"),
            sort_key_b
        ]
    );
}

#[tokio::test]
async fn a_missing_table_is_a_clear_non_transient_failure() {
    let moto = awsmp_local_aws::MotoServer::start().await.unwrap();
    let store = DynamoUsageStore::new(moto.dynamodb(), "no-such-table");
    let err = store
        .pending_page(hour("2026-11-30T10"), None)
        .await
        .unwrap_err();
    assert!(matches!(err, PortError::Failed { .. }), "{err:?}");
    assert!(
        err.to_string().contains("ResourceNotFoundException"),
        "{err}"
    );
}

#[tokio::test]
async fn a_retry_with_the_same_event_id_and_another_timestamp_writes_nothing() {
    let (_moto, db) = moto_with_tables().await;
    let store = DynamoUsageStore::new(db.clone(), USAGE);
    // The first attempt defaulted its timestamp to "now"; its retry a second later
    // defaults to a later "now": another sort key, the same event.
    let first = new_row("requests", "2026-11-30T10:15:42Z", "evt-1", 5);
    assert_eq!(
        put_row(&store, &first, t("2026-11-30T10:15:42Z")).await,
        IngestOutcome::Created
    );
    let mut retry = new_row("requests", "2026-11-30T10:15:43Z", "evt-1", 5);
    retry.timestamp_defaulted = true;
    assert_eq!(
        put_row(&store, &retry, t("2026-11-30T10:15:43Z")).await,
        IngestOutcome::Duplicate
    );
    let mut next_hour = new_row("requests", "2026-11-30T11:00:01Z", "evt-1", 5);
    next_hour.timestamp_defaulted = true;
    assert_eq!(
        put_row(&store, &next_hour, t("2026-11-30T11:00:01Z")).await,
        IngestOutcome::Duplicate
    );
    // The same id with another quantity in the next hour: a conflict, no row.
    next_hour.quantity = 8;
    assert!(matches!(
        put_row(&store, &next_hour, t("2026-11-30T11:00:01Z")).await,
        IngestOutcome::Conflict(_)
    ));

    let rows = store
        .group_rows(&group("requests", "2026-11-30T10"))
        .await
        .unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(
        rows[0].sort_key,
        format!("{ACCOUNT}#requests#2026-11-30T10:15:42Z#evt-1")
    );
    assert!(
        store
            .group_rows(&group("requests", "2026-11-30T11"))
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(pending_count(&store, "2026-11-30T10").await, 1);
    assert_eq!(pending_count(&store, "2026-11-30T11").await, 0);

    // The marker: keyed by license and event id, out of the sparse index.
    let marker = store
        .get_row(LICENSE, "event#evt-1")
        .await
        .unwrap()
        .expect("the event's marker");
    assert_eq!(
        marker.attrs["ingestedRow"],
        Attr::S(format!("{ACCOUNT}#requests#2026-11-30T10:15:42Z#evt-1"))
    );
    assert!(!marker.attrs.contains_key("meteringPending"));
    assert!(marker.attrs.contains_key("createdAt"));
    // Exactly two items in the table: the row and its marker.
    let items = db.scan().table_name(USAGE).send().await.unwrap();
    assert_eq!(items.count(), 2);

    // Another event id is another row; the same id on another license too.
    let second = new_row("requests", "2026-11-30T10:15:42Z", "evt-2", 1);
    assert_eq!(
        put_row(&store, &second, t("2026-11-30T10:15:42Z")).await,
        IngestOutcome::Created
    );
    let mut elsewhere = first.clone();
    elsewhere.license_arn = format!("{LICENSE}-other");
    assert_eq!(
        put_row(&store, &elsewhere, t("2026-11-30T10:15:42Z")).await,
        IngestOutcome::Created
    );
    assert_eq!(pending_count(&store, "2026-11-30T10").await, 3);
}

#[tokio::test]
async fn a_row_without_a_marker_still_refuses_its_exact_retry() {
    // A row written by an earlier version (no marker): the exact retry is refused by
    // the row's own condition, and nothing half-written is left behind.
    let (_moto, db) = moto_with_tables().await;
    let store = DynamoUsageStore::new(db.clone(), USAGE);
    let row = new_row("requests", "2026-11-30T10:15:42Z", "evt-1", 5);
    put_row(&store, &row, t("2026-11-30T10:20:00Z")).await;
    db.delete_item()
        .table_name(USAGE)
        .key("licenseArn", AttributeValue::S(LICENSE.into()))
        .key(
            "customerAWSAccountId_dimension_timestamp",
            AttributeValue::S("event#evt-1".into()),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(
        put_row(&store, &row, t("2026-11-30T10:21:00Z")).await,
        IngestOutcome::Duplicate
    );
    assert!(
        store
            .get_row(LICENSE, "event#evt-1")
            .await
            .unwrap()
            .is_none()
    );
}

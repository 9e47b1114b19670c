//! Ingestion idempotency on the in-memory store: the event id makes a retry of the
//! same usage a no-op, whatever "now" its defaulted timestamp is; other usage under the
//! id is a conflict that writes nothing; and the marker that remembers the event id
//! never looks like usage to the pipeline.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use awsmp_core::memory::fixtures::{put_row, usage_row};
use awsmp_core::memory::{
    MemoryTables, MemoryUsageStore, ingestion_marker_event_id, ingestion_marker_sort_key,
    ingestion_sort_key,
};
use awsmp_core::model::{Attr, GroupKey, attr};
use awsmp_core::ports::{IngestOutcome, NewUsageRow, UsageStore};
use awsmp_core::time::{HourBucket, Instant, parse_usage_timestamp};

const LICENSE: &str = "arn:aws:license-manager::123456789012:license:l-0123456789abcdef";
const ACCOUNT: &str = "111122223333";

fn t(s: &str) -> Instant {
    parse_usage_timestamp(s).unwrap()
}

fn row(event_id: &str, ts: &str, quantity: i64) -> NewUsageRow {
    usage_row(LICENSE, ACCOUNT, "requests", t(ts), quantity, event_id)
}

fn group(h: &str) -> GroupKey {
    GroupKey {
        license_arn: LICENSE.into(),
        customer_aws_account_id: ACCOUNT.into(),
        dimension: "requests".into(),
        hour: HourBucket::containing(t(&format!("{h}:00:00Z"))),
    }
}

async fn pending(store: &MemoryUsageStore, h: &str) -> usize {
    let page = store
        .pending_page(HourBucket::containing(t(&format!("{h}:00:00Z"))), None)
        .await
        .unwrap();
    assert!(page.next.is_none());
    page.items.len()
}

#[tokio::test]
async fn a_retry_with_the_same_event_id_and_another_timestamp_is_a_no_op() {
    let tables = MemoryTables::new();
    let store = tables.usage_store();
    // The first attempt defaulted its timestamp to "now"; the retry a second later
    // defaults to a later "now".
    let first = row("evt-1", "2026-11-30T10:15:42Z", 5);
    assert_eq!(
        put_row(&store, &first, t("2026-11-30T10:15:42Z")).await,
        IngestOutcome::Created
    );
    let mut retry = row("evt-1", "2026-11-30T10:15:43Z", 5);
    retry.timestamp_defaulted = true;
    assert_eq!(
        put_row(&store, &retry, t("2026-11-30T10:15:43Z")).await,
        IngestOutcome::Duplicate
    );
    // A retry in another hour is the same event too; with another quantity it is a
    // conflict, and writes nothing either.
    let mut later = row("evt-1", "2026-11-30T11:00:05Z", 5);
    later.timestamp_defaulted = true;
    assert_eq!(
        put_row(&store, &later, t("2026-11-30T11:00:05Z")).await,
        IngestOutcome::Duplicate
    );
    later.quantity = 9;
    assert!(matches!(
        put_row(&store, &later, t("2026-11-30T11:00:05Z")).await,
        IngestOutcome::Conflict(_)
    ));

    let rows = store.group_rows(&group("2026-11-30T10")).await.unwrap();
    assert_eq!(rows.len(), 1, "one usage row: {rows:?}");
    assert_eq!(rows[0].sort_key, ingestion_sort_key(&first));
    assert_eq!(rows[0].attrs[attr::QUANTITY], Attr::N("5".into()));
    assert!(
        store
            .group_rows(&group("2026-11-30T11"))
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(pending(&store, "2026-11-30T10").await, 1);
    assert_eq!(pending(&store, "2026-11-30T11").await, 0);

    // Another event id is another row, also in the same second.
    let other = row("evt-2", "2026-11-30T10:15:42Z", 7);
    assert_eq!(
        put_row(&store, &other, t("2026-11-30T10:15:42Z")).await,
        IngestOutcome::Created
    );
    assert_eq!(
        store
            .group_rows(&group("2026-11-30T10"))
            .await
            .unwrap()
            .len(),
        2
    );
}

#[tokio::test]
async fn the_marker_is_keyed_by_license_and_never_looks_like_usage() {
    let tables = MemoryTables::new();
    let store = tables.usage_store();
    let first = row("evt-1", "2026-11-30T10:15:42Z", 5);
    put_row(&store, &first, t("2026-11-30T10:15:42Z")).await;

    let marker_key = ingestion_marker_sort_key("evt-1");
    let marker = tables.raw_row(LICENSE, &marker_key).expect("marker stored");
    // No meteringPending: it never enters the sparse index.
    assert!(
        !marker.attrs.contains_key(attr::METERING_PENDING),
        "{marker:?}"
    );
    assert!(!marker.attrs.contains_key(attr::CUSTOMER_ACCOUNT));
    assert!(!marker.attrs.contains_key(attr::DIMENSION));
    assert!(marker.attrs.contains_key(attr::CREATED_AT));
    // It can never match a group's prefix `<12-digit account>#<dimension>#<hour>`.
    assert!(!marker_key.starts_with(|c: char| c.is_ascii_digit()));
    assert!(!marker_key.starts_with(&group("2026-11-30T10").usage_sort_key_prefix()));
    assert_eq!(ingestion_marker_event_id(&marker_key), Some("evt-1"));
    assert_eq!(ingestion_marker_event_id(&ingestion_sort_key(&first)), None);

    // The same event id on another license is another event.
    let mut elsewhere = row("evt-1", "2026-11-30T10:15:42Z", 5);
    elsewhere.license_arn = "arn:aws:license-manager::123456789012:license:l-other".into();
    assert_eq!(
        put_row(&store, &elsewhere, t("2026-11-30T10:15:42Z")).await,
        IngestOutcome::Created
    );
}

#[tokio::test]
async fn a_row_written_before_markers_existed_still_refuses_its_exact_retry() {
    // A row ingested by an older version (no marker): an exact retry (same key) is
    // still refused, and writes no marker.
    let tables = MemoryTables::new();
    let store = tables.usage_store();
    let first = row("evt-1", "2026-11-30T10:15:42Z", 5);
    tables.insert_raw_row(awsmp_core::memory::ingestion_item(
        &first,
        t("2026-11-30T10:15:42Z"),
    ));
    assert_eq!(
        put_row(&store, &first, t("2026-11-30T10:16:00Z")).await,
        IngestOutcome::Duplicate
    );
    assert!(
        tables
            .raw_row(LICENSE, &ingestion_marker_sort_key("evt-1"))
            .is_none()
    );
}

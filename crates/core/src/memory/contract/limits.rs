//! DynamoDB's limits: 100 items a transaction, 400 KB an item, 4 MB a transaction.

use super::*;

/// A commit is one transaction: the record and [`MAX_ROWS_PER_COMMIT`] rows (100 items,
/// DynamoDB's limit) commit; one row more is refused before anything is written.
pub async fn a_commit_holds_at_most_100_items(b: &dyn Backend) {
    let key = group("2026-11-30T10");
    let mut rows = Vec::new();
    for i in 0..=MAX_ROWS_PER_COMMIT {
        rows.push(seed(b, &format!("2026-11-30T10:{:02}:{:02}Z", i / 60, i % 60), 1).await);
    }
    let all: Vec<&RawUsageRow> = rows.iter().collect();
    let too_many = commit(
        record(key.clone(), all.len() as i64, 1),
        None,
        &all,
        "2026-11-30T11:00:00Z",
    );
    let message = assert_failed(b.aggregated().commit(&too_many).await, "101 items");
    assert!(message.contains("at most 99"), "{message}");
    assert_eq!(b.aggregated().get(&key).await.unwrap(), None);

    let fits = commit(
        record(key.clone(), MAX_ROWS_PER_COMMIT as i64, 1),
        None,
        &all[..MAX_ROWS_PER_COMMIT],
        "2026-11-30T11:00:00Z",
    );
    assert_eq!(
        b.aggregated().commit(&fits).await.unwrap(),
        CommitOutcome::Committed
    );
    let last = b
        .usage()
        .get_row(LICENSE, &all[MAX_ROWS_PER_COMMIT - 1].sort_key)
        .await
        .unwrap()
        .unwrap();
    assert!(last.attrs.contains_key(attr::AGGREGATED_INTO));
}

/// An item over DynamoDB's 400 KB is refused as [`PortError::Failed`] and nothing is
/// written; one well under it is stored. (moto sizes items its own way and refuses
/// over 405,000 of its bytes, DynamoDB over 409,600 of its own: between the two they
/// differ, so the case stays clear of both.)
pub async fn an_item_over_400_kb_is_refused(b: &dyn Backend) {
    let now = t("2026-11-30T10:20:00Z");
    let mut fits = new_row("evt-fits", "2026-11-30T10:15:00Z", 1);
    fits.allocations = Some(big_allocations(300_000));
    assert_eq!(
        b.usage().put_row(&fits, now).await.unwrap(),
        IngestOutcome::Created
    );

    let mut huge = new_row("evt-huge", "2026-11-30T10:16:00Z", 1);
    huge.allocations = Some(big_allocations(MAX_ITEM_BYTES + 40_000));
    assert_failed(b.usage().put_row(&huge, now).await, "a row over 400 KB");
    assert_eq!(
        b.usage()
            .get_row(LICENSE, &ingestion_marker_sort_key("evt-huge"))
            .await
            .unwrap(),
        None,
        "not even the marker"
    );

    let key = group("2026-11-30T10");
    let row = seed(b, "2026-11-30T10:30:00Z", 1).await;
    let mut rec = record(key.clone(), 1, 1);
    rec.allocations = Some(big_allocations(MAX_ITEM_BYTES + 40_000));
    let c = commit(rec, None, &[&row], "2026-11-30T11:00:00Z");
    assert_failed(b.aggregated().commit(&c).await, "a record over 400 KB");
    assert_eq!(b.aggregated().get(&key).await.unwrap(), None);
    let stored = b
        .usage()
        .get_row(LICENSE, &row.sort_key)
        .await
        .unwrap()
        .unwrap();
    assert!(!stored.attrs.contains_key(attr::AGGREGATED_INTO));
}

/// DynamoDB refuses a transaction whose items add up to more than 4 MB. Eleven rows of
/// ~390 KB each (each under 400 KB, together over 4 MB) claimed by one commit: the
/// memory store refuses it, changing nothing. moto 5.2 does not check the aggregate
/// size and commits it; the case records that difference rather than hiding it.
pub async fn a_transaction_over_4_mb_is_refused(b: &dyn Backend) {
    let key = group("2026-11-30T10");
    let mut rows = Vec::new();
    for i in 0..11 {
        let mut row = reference_row(
            LICENSE,
            ACCOUNT,
            "requests",
            &format!("2026-11-30T10:{i:02}:00Z"),
            1,
        );
        row.attrs
            .insert("payload".into(), Attr::S("x".repeat(390_000)));
        b.insert_raw_row(&row).await;
        rows.push(row);
    }
    let all: Vec<&RawUsageRow> = rows.iter().collect();
    let c = commit(
        record(key.clone(), 11, 1),
        None,
        &all,
        "2026-11-30T11:00:00Z",
    );
    let result = b.aggregated().commit(&c).await;
    if b.enforces_transaction_bytes() {
        let message = assert_failed(result, "a transaction over 4 MB");
        assert!(
            message.contains(&MAX_TRANSACTION_BYTES.to_string()),
            "{message}"
        );
        assert_eq!(b.aggregated().get(&key).await.unwrap(), None);
    } else {
        // moto: not enforced (DynamoDB would answer ValidationException).
        assert_eq!(result.unwrap(), CommitOutcome::Committed);
    }
}

//! Raw usage rows: `put_row` and its event markers, and the pending index pages.

use super::*;

/// `put_row` writes the row and its event marker in the domain's shape
/// ([`ingestion_item`], [`ingestion_marker_item`]); the same event id again with the
/// same usage, at a defaulted later "now", writes nothing.
pub async fn put_row_writes_the_shared_shape_once_per_event_id(b: &dyn Backend) {
    let now = t("2026-11-30T10:20:00Z");
    let mut row = new_row("evt-1", "2026-11-30T10:15:42Z", 42);
    row.allocations = Some(vec![Allocation {
        quantity: 42,
        tags: vec![Tag {
            key: "team".into(),
            value: "a".into(),
        }],
    }]);
    row.product_code = Some("prodcode".into());
    assert_eq!(
        b.usage().put_row(&row, now).await.expect("put_row"),
        IngestOutcome::Created
    );
    let expected = ingestion_item(&row, now);
    let stored = b
        .usage()
        .get_row(LICENSE, &expected.sort_key)
        .await
        .expect("get_row")
        .expect("the row");
    assert_eq!(stored, expected);
    let marker = b
        .usage()
        .get_row(LICENSE, &ingestion_marker_sort_key("evt-1"))
        .await
        .expect("get_row")
        .expect("the marker");
    assert_eq!(marker, ingestion_marker_item(&row, now));

    // The retry of a call that left the instant to "now": a later "now".
    let mut retry = row.clone();
    retry.timestamp = t("2026-11-30T10:16:00Z");
    retry.timestamp_defaulted = true;
    assert_eq!(
        b.usage()
            .put_row(&retry, t("2026-11-30T10:21:00Z"))
            .await
            .expect("put_row retry"),
        IngestOutcome::Duplicate
    );
    let rows = b.usage().group_rows(&group("2026-11-30T10")).await.unwrap();
    assert_eq!(rows, vec![expected], "one row, and the marker is not usage");
}

/// An event id written before answers `Duplicate` only for the same usage; other usage
/// under it (another quantity, tags, or a given instant) is a `Conflict` carrying what
/// the first write stored and what the call carries, and writes nothing. A marker
/// written before markers kept a digest is compared through the row it names.
pub async fn put_row_reports_an_event_id_reused_with_other_usage(b: &dyn Backend) {
    let now = t("2026-11-30T10:20:00Z");
    let mut first = new_row("evt-1", "2026-11-30T10:15:00Z", 3);
    first.allocations = Some(vec![Allocation {
        quantity: 3,
        tags: vec![Tag {
            key: "team".into(),
            value: "a".into(),
        }],
    }]);
    assert_eq!(
        b.usage().put_row(&first, now).await.unwrap(),
        IngestOutcome::Created
    );
    assert_eq!(
        b.usage().put_row(&first, now).await.unwrap(),
        IngestOutcome::Duplicate
    );
    let conflict = |outcome: IngestOutcome| match outcome {
        IngestOutcome::Conflict(c) => c,
        other => panic!("expected a conflict, got {other:?}"),
    };
    let mut more = first.clone();
    more.quantity = 4;
    more.allocations = Some(vec![Allocation {
        quantity: 4,
        tags: vec![Tag {
            key: "team".into(),
            value: "a".into(),
        }],
    }]);
    let c = conflict(b.usage().put_row(&more, now).await.unwrap());
    assert_eq!(c.event_id, "evt-1");
    assert_eq!(c.recorded.as_ref().map(|r| r.quantity), Some(3));
    assert_eq!(c.this.quantity, 4);
    let mut later = first.clone();
    later.timestamp = t("2026-11-30T10:16:00Z");
    let c = conflict(b.usage().put_row(&later, now).await.unwrap());
    assert_eq!(
        c.recorded.as_ref().map(|r| r.timestamp),
        Some(t("2026-11-30T10:15:00Z"))
    );
    let rows = b.usage().group_rows(&group("2026-11-30T10")).await.unwrap();
    assert_eq!(rows.len(), 1, "nothing written by a conflict: {rows:?}");
    assert_eq!(rows[0].attrs[attr::QUANTITY], Attr::N("3".into()));

    // A marker as older versions wrote it (no digest): its row decides.
    let old = new_row("evt-old", "2026-11-30T10:10:00Z", 5);
    let mut marker = ingestion_marker_item(&old, now);
    marker.attrs.remove(crate::items::INGESTION_MARKER_DIGEST);
    b.insert_raw_row(&ingestion_item(&old, now)).await;
    b.insert_raw_row(&marker).await;
    assert_eq!(
        b.usage().put_row(&old, now).await.unwrap(),
        IngestOutcome::Duplicate
    );
    let mut changed = old.clone();
    changed.quantity = 6;
    let c = conflict(b.usage().put_row(&changed, now).await.unwrap());
    assert_eq!(c.recorded.as_ref().map(|r| r.quantity), Some(5));
}

/// A `#` in a sort-key part, or an empty event id, is refused before any write.
pub async fn put_row_refuses_an_ambiguous_sort_key(b: &dyn Backend) {
    let now = t("2026-11-30T10:20:00Z");
    let mut bad = new_row("evt-1", "2026-11-30T10:15:42Z", 1);
    bad.dimension = "re#quests".into();
    let message = assert_failed(b.usage().put_row(&bad, now).await, "a '#' in the dimension");
    assert!(message.contains("sort-key separator"), "{message}");
    let empty = new_row("", "2026-11-30T10:15:42Z", 1);
    assert_failed(b.usage().put_row(&empty, now).await, "an empty event id");
}

/// The pending indexes and their sweeps page through every pending item exactly once
/// (at most [`PAGE_SIZE`] a page, whatever order the index keeps).
pub async fn pending_pages_cover_every_pending_item_once(b: &dyn Backend) {
    let mut by_hour: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for (h, minutes) in [
        ("2026-11-30T10", 5),
        ("2026-11-30T11", 3),
        ("2026-11-30T12", 1),
    ] {
        for m in 0..minutes {
            let row = seed(b, &format!("{h}:{m:02}:00Z"), 1).await;
            by_hour.entry(h).or_default().insert(row.sort_key);
        }
    }
    for (h, expected) in &by_hour {
        let h = hour(h);
        let refs = all_pages(|c| b.usage().pending_page(h, c)).await;
        let got: Vec<String> = refs.iter().map(|r| r.sort_key.clone()).collect();
        assert_eq!(got.len(), expected.len(), "each once: {got:?}");
        assert_eq!(got.into_iter().collect::<BTreeSet<_>>(), *expected);
        assert!(refs.iter().all(|r| {
            r.customer_aws_account_id.as_deref() == Some(ACCOUNT)
                && r.dimension.as_deref() == Some("requests")
        }));
    }
    let live = [hour("2026-11-30T10")];
    let stray = all_pages(|c| b.usage().stray_pending_page(&live, c)).await;
    let got: BTreeSet<String> = stray.iter().map(|s| s.sort_key.clone()).collect();
    assert_eq!(stray.len(), 4, "each once: {stray:?}");
    let expected: BTreeSet<String> = by_hour
        .iter()
        .filter(|(h, _)| **h != "2026-11-30T10")
        .flat_map(|(_, keys)| keys.iter().cloned())
        .collect();
    assert_eq!(got, expected);

    // Aggregated: five pending records over two hours, one of them finalized.
    let agg = b.aggregated();
    for (i, h) in [
        "2026-11-30T10",
        "2026-11-30T10",
        "2026-11-30T10",
        "2026-11-30T11",
        "2026-11-30T11",
    ]
    .into_iter()
    .enumerate()
    {
        let mut key = group(h);
        key.dimension = format!("d{i}");
        let rec = record(key, 1, 1);
        assert_eq!(
            agg.put_direct(&rec, t("2026-11-30T12:00:00Z"))
                .await
                .unwrap(),
            PutOutcome::Created
        );
    }
    let mut done = group("2026-11-30T10");
    done.dimension = "d0".into();
    let terminal = SubmissionUpdate {
        status: AggregatedStatus::Success,
        reason: None,
        metering_record_id: Some("mr-0".into()),
        possibly_sent: false,
        possibly_billed: false,
        expires_at: None,
        final_write_id: None,
    };
    assert!(
        agg.record(&done, None, &terminal, t("2026-11-30T12:01:00Z"))
            .await
            .unwrap()
    );
    let ten = all_pages(|c| agg.pending_page(hour("2026-11-30T10"), c)).await;
    let dims: BTreeSet<String> = ten.iter().map(|r| r.key.dimension.clone()).collect();
    assert_eq!(ten.len(), 2);
    assert_eq!(dims, BTreeSet::from(["d1".to_string(), "d2".to_string()]));
    let stray = all_pages(|c| agg.stray_pending_page(&live, c)).await;
    let dims: BTreeSet<String> = stray.iter().map(|r| r.key.dimension.clone()).collect();
    assert_eq!(stray.len(), 2);
    assert_eq!(dims, BTreeSet::from(["d3".to_string(), "d4".to_string()]));
}

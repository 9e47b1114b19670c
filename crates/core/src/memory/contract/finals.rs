//! Final writes of raw rows: `finalize_row` under the right row claim, once, and a retried final write that had applied.

use super::*;

/// The commit counts and finalizes its rows at once; `finalize_row` applies once, only
/// to a pending row, and only under the right [`RowClaim`]: counted into this record
/// (a row counted by an earlier version, still pending), or not counted at all.
pub async fn finalize_row_requires_the_row_claim(b: &dyn Backend) {
    let key = group("2026-11-30T10");
    let committed = seed(b, "2026-11-30T10:00:00Z", 1).await;
    let uncounted = seed(b, "2026-11-30T10:01:00Z", 1).await;
    let c = commit(
        record(key.clone(), 1, 1),
        None,
        &[&committed],
        "2026-11-30T11:00:00Z",
    );
    assert_eq!(
        b.aggregated().commit(&c).await.unwrap(),
        CommitOutcome::Committed
    );
    let into = key.aggregated_sort_key();
    let row = b
        .usage()
        .get_row(LICENSE, &committed.sort_key)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (
            row.attrs.get(attr::METERING_STATUS),
            row.attrs.get(attr::AGGREGATED_INTO),
            row.attrs.contains_key(attr::METERING_PENDING)
        ),
        (
            Some(&Attr::S("Aggregated".into())),
            Some(&Attr::S(into.clone())),
            false
        ),
        "counted and finalized by the commit"
    );
    assert!(
        !finalize(b, &committed.sort_key, RowClaim::Counted(&into)).await,
        "already final"
    );

    // A row counted but still pending (what an earlier version's commit left).
    let mut counted = seed(b, "2026-11-30T10:02:00Z", 1).await;
    counted
        .attrs
        .insert(attr::AGGREGATED_INTO.to_string(), Attr::S(into.clone()));
    b.insert_raw_row(&counted).await;
    let other = "111122223333#requests#2026-11-30T09";
    assert!(!finalize(b, &counted.sort_key, RowClaim::Uncounted).await);
    assert!(!finalize(b, &counted.sort_key, RowClaim::Counted(other)).await);
    assert!(!finalize(b, &uncounted.sort_key, RowClaim::Counted(other)).await);
    assert!(finalize(b, &counted.sort_key, RowClaim::Counted(&into)).await);
    assert!(
        !finalize(b, &counted.sort_key, RowClaim::Counted(&into)).await,
        "once"
    );
    assert!(finalize(b, &uncounted.sort_key, RowClaim::Uncounted).await);
    let row = b
        .usage()
        .get_row(LICENSE, &counted.sort_key)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        row.attrs.get(attr::METERING_STATUS),
        Some(&Attr::S("Aggregated".into()))
    );
    assert!(!row.attrs.contains_key(attr::METERING_PENDING));
    assert!(
        !finalize(
            b,
            "111122223333#requests#2026-11-30T10:59:00Z",
            RowClaim::Uncounted
        )
        .await,
        "absent row"
    );
}

/// `finalize_row` makes a pending row final once: status and reason set, out of the
/// pending index, `createdAt` kept and `updatedAt` moved; a second finalize, whatever
/// status it asks for, changes nothing, and a missing row is not created.
pub async fn finalize_row_makes_a_pending_row_final_once(b: &dyn Backend) {
    let row = new_row("evt-1", "2026-11-30T10:15:42Z", 5);
    b.usage()
        .put_row(&row, t("2026-11-30T10:20:00Z"))
        .await
        .expect("put_row");
    let sort_key = ingestion_sort_key(&row);
    let pending = || async {
        all_pages(|c| b.usage().pending_page(hour("2026-11-30T10"), c))
            .await
            .len()
    };
    assert_eq!(pending().await, 1);

    let done = b
        .usage()
        .finalize_row(
            LICENSE,
            &sort_key,
            RowClaim::Uncounted,
            RowFinal::new(
                RawStatus::RejectedClientSide,
                Some(ReasonCode::MalformedTimestamp),
            ),
            t("2026-11-30T12:00:00Z"),
        )
        .await
        .unwrap();
    assert!(done);
    assert_eq!(pending().await, 0);
    let stored = b
        .usage()
        .get_row(LICENSE, &sort_key)
        .await
        .unwrap()
        .unwrap();
    assert!(!stored.attrs.contains_key(attr::METERING_PENDING));
    assert_eq!(
        stored.attrs[attr::METERING_STATUS],
        Attr::S("RejectedClientSide".into())
    );
    assert_eq!(
        stored.attrs[attr::METERING_STATUS_REASON],
        Attr::S("MalformedTimestamp".into())
    );
    assert_eq!(
        stored.attrs[attr::CREATED_AT],
        Attr::S("2026-11-30T10:20:00Z".into())
    );
    assert_eq!(
        stored.attrs[attr::UPDATED_AT],
        Attr::S("2026-11-30T12:00:00Z".into())
    );

    // Already terminal: nothing changes, whatever status is asked for.
    let again = b
        .usage()
        .finalize_row(
            LICENSE,
            &sort_key,
            RowClaim::Uncounted,
            RowFinal::new(RawStatus::Aggregated, None),
            t("2026-11-30T13:00:00Z"),
        )
        .await
        .unwrap();
    assert!(!again);
    assert_eq!(
        b.usage()
            .get_row(LICENSE, &sort_key)
            .await
            .unwrap()
            .unwrap(),
        stored
    );
    // A missing row is not created.
    assert!(
        !b.usage()
            .finalize_row(
                LICENSE,
                "missing",
                RowClaim::Uncounted,
                RowFinal::new(RawStatus::Aggregated, None),
                t("2026-11-30T13:00:00Z")
            )
            .await
            .unwrap()
    );
    assert!(
        b.usage()
            .get_row(LICENSE, "missing")
            .await
            .unwrap()
            .is_none()
    );
}

/// A final write's retry after its answer was lost: the condition fails (the item is
/// final), and the store answers `true` because the item carries the write's
/// `finalWriteId`, so its caller counts the transition's metric; a racing write (another
/// id) answers `false`, and a write without an id too. Raw rows (`finalize_row`) and the
/// claimless outcome of a record (the age-out, `record`).
pub async fn a_final_write_retried_after_it_applied_answers_true_and_only_to_itself(
    b: &dyn Backend,
) {
    let (usage, agg) = (b.usage(), b.aggregated());
    let now = t("2026-11-30T11:00:00Z");

    // A raw row.
    let row = seed(b, "2026-11-30T10:00:00Z", 1).await;
    let reject = RowFinal::new(
        RawStatus::RejectedClientSide,
        Some(ReasonCode::HourAlreadySubmitted),
    );
    let sort_key = row.sort_key.as_str();
    let finalize = |outcome: RowFinal| async move {
        usage
            .finalize_row(LICENSE, sort_key, RowClaim::Uncounted, outcome, now)
            .await
            .unwrap()
    };
    assert!(finalize(reject).await, "the write");
    assert!(finalize(reject).await, "its retry");
    assert!(finalize(reject).await, "and again");
    let stored = usage
        .get_row(LICENSE, &row.sort_key)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        stored.attrs.get(attr::FINAL_WRITE_ID),
        Some(&Attr::S(reject.write_id.to_string()))
    );
    assert_eq!(
        stored.attrs.get(attr::METERING_STATUS_REASON),
        Some(&Attr::S("HourAlreadySubmitted".into()))
    );
    assert!(
        !finalize(RowFinal::new(
            RawStatus::RejectedClientSide,
            Some(ReasonCode::HourAlreadySubmitted)
        ))
        .await,
        "a racing write: another id"
    );
    assert!(
        !finalize(RowFinal::new(RawStatus::AggregationExpired, None)).await,
        "another id, another status"
    );
    let after = usage
        .get_row(LICENSE, &row.sort_key)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        after.attrs.get(attr::FINAL_WRITE_ID),
        Some(&Attr::S(reject.write_id.to_string())),
        "the losers wrote nothing"
    );
    assert_eq!(
        after.attrs.get(attr::METERING_STATUS),
        Some(&Attr::S("RejectedClientSide".into()))
    );

    // A record aged out (no claim).
    let key = group("2026-11-30T09");
    let counted = seed(b, "2026-11-30T09:30:00Z", 3).await;
    let create = commit(
        record(key.clone(), 3, 1),
        None,
        &[&counted],
        "2026-11-30T10:00:00Z",
    );
    assert_eq!(agg.commit(&create).await.unwrap(), CommitOutcome::Committed);
    let expire = SubmissionUpdate::new(AggregatedStatus::SubmissionExpired, None, None).once();
    let record_outcome = |update: SubmissionUpdate| {
        let key = key.clone();
        async move { agg.record(&key, None, &update, now).await.unwrap() }
    };
    assert!(record_outcome(expire.clone()).await, "the write");
    assert!(record_outcome(expire.clone()).await, "its retry");
    assert!(
        !record_outcome(expire.clone().once()).await,
        "a racing write: another id"
    );
    assert!(
        !record_outcome(SubmissionUpdate::new(
            AggregatedStatus::SubmissionExpired,
            None,
            None
        ))
        .await,
        "a write without an id"
    );
    // In a batch, each write answers for itself: a retry beside a first write.
    let other = group("2026-11-30T08");
    let counted = seed(b, "2026-11-30T08:30:00Z", 2).await;
    let create = commit(
        record(other.clone(), 2, 1),
        None,
        &[&counted],
        "2026-11-30T10:00:00Z",
    );
    assert_eq!(agg.commit(&create).await.unwrap(), CommitOutcome::Committed);
    let writes = [
        OutcomeWrite {
            key: key.clone(),
            claim_id: None,
            update: expire.clone(),
        },
        OutcomeWrite {
            key: other.clone(),
            claim_id: None,
            update: expire.clone().once(),
        },
    ];
    assert_eq!(
        agg.record_all(&writes, now).await.unwrap(),
        vec![true, true]
    );
    assert!(
        !agg.record(&other, None, &expire, now).await.unwrap(),
        "an id is its own record's only"
    );
    for key in [&key, &other] {
        assert_eq!(
            read_record(agg, key).await.status,
            AggregatedStatus::SubmissionExpired
        );
    }
}

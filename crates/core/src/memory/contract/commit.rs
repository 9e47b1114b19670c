//! The aggregation commit: create or fold under the version, all or nothing, only into a record no claim ever held.

use super::*;

/// A create commit needs the record to be absent, a fold the stored version; each
/// claimed row must be pending and unclaimed, and gets `aggregatedInto`.
pub async fn commit_creates_then_folds_under_the_version_and_claims_rows(b: &dyn Backend) {
    let key = group("2026-11-30T10");
    let r1 = seed(b, "2026-11-30T10:00:00Z", 1).await;
    let r2 = seed(b, "2026-11-30T10:05:00Z", 2).await;
    let late = seed(b, "2026-11-30T10:50:00Z", 4).await;
    let agg = b.aggregated();

    // The record keeps the unit price it was priced at, exactly.
    let priced = |price: &str| {
        Some(crate::charges::UnitPrice {
            agreement_id: "agmt-1".into(),
            basis: crate::charges::PriceBasis::Priced {
                price: price.parse().unwrap_or_default(),
                currency: "USD".into(),
            },
        })
    };
    let create = commit(
        AggregatedRecord {
            unit_price: priced("0.0001234"),
            ..record(key.clone(), 3, 1)
        },
        None,
        &[&r1, &r2],
        "2026-11-30T11:00:00Z",
    );
    assert_eq!(agg.commit(&create).await.unwrap(), CommitOutcome::Committed);
    assert_eq!(agg.get(&key).await.unwrap(), Some(create.record.clone()));
    for row in [&r1, &r2] {
        let stored = b.usage().get_row(LICENSE, &row.sort_key).await.unwrap();
        assert_eq!(
            stored.and_then(|r| r.attrs.get(attr::AGGREGATED_INTO).cloned()),
            Some(Attr::S(key.aggregated_sort_key())),
            "claimed into the record"
        );
    }
    // Created twice: the record exists.
    let again = commit(
        record(key.clone(), 4, 1),
        None,
        &[&late],
        "2026-11-30T11:01:00Z",
    );
    assert_eq!(agg.commit(&again).await.unwrap(), CommitOutcome::Conflict);
    // A fold at a stale version.
    let stale = commit(
        record(key.clone(), 7, 2),
        Some(0),
        &[&late],
        "2026-11-30T11:01:00Z",
    );
    assert_eq!(agg.commit(&stale).await.unwrap(), CommitOutcome::Conflict);
    // A fold claiming a row already claimed.
    let twice = commit(
        record(key.clone(), 5, 2),
        Some(1),
        &[&r1],
        "2026-11-30T11:01:00Z",
    );
    assert_eq!(agg.commit(&twice).await.unwrap(), CommitOutcome::Conflict);
    // The fold at the stored version, re-priced.
    let fold = commit(
        AggregatedRecord {
            unit_price: priced("0.25"),
            ..record(key.clone(), 7, 2)
        },
        Some(1),
        &[&late],
        "2026-11-30T11:02:00Z",
    );
    assert_eq!(agg.commit(&fold).await.unwrap(), CommitOutcome::Committed);
    assert_eq!(agg.get(&key).await.unwrap(), Some(fold.record));
}

/// One failing row condition cancels the whole commit: no record, no row claimed.
pub async fn commit_is_all_or_nothing_when_a_row_condition_fails(b: &dyn Backend) {
    let key = group("2026-11-30T10");
    let healthy = seed(b, "2026-11-30T10:00:00Z", 1).await;
    let finalized = seed(b, "2026-11-30T10:01:00Z", 1).await;
    assert!(
        b.usage()
            .finalize_row(
                LICENSE,
                &finalized.sort_key,
                RowClaim::Uncounted,
                RowFinal::new(
                    RawStatus::RejectedClientSide,
                    Some(ReasonCode::NegativeQuantity)
                ),
                t("2026-11-30T10:30:00Z")
            )
            .await
            .unwrap()
    );
    let missing = reference_row(LICENSE, ACCOUNT, "requests", "2026-11-30T10:02:00Z", 1);
    for bad in [&finalized, &missing] {
        let c = commit(
            record(key.clone(), 2, 1),
            None,
            &[&healthy, bad],
            "2026-11-30T11:00:00Z",
        );
        assert_eq!(
            b.aggregated().commit(&c).await.unwrap(),
            CommitOutcome::Conflict
        );
        assert_eq!(b.aggregated().get(&key).await.unwrap(), None, "no record");
        let row = b
            .usage()
            .get_row(LICENSE, &healthy.sort_key)
            .await
            .unwrap()
            .unwrap();
        assert!(
            !row.attrs.contains_key(attr::AGGREGATED_INTO),
            "the healthy row is not claimed"
        );
    }
    // A commit naming one row twice is refused outright.
    let twice = commit(
        record(key, 2, 1),
        None,
        &[&healthy, &healthy],
        "2026-11-30T11:00:00Z",
    );
    assert_failed(b.aggregated().commit(&twice).await, "the same row twice");
}

/// A fold lands only in a record no submitter ever claimed (`inFlightUntil` and
/// `sentQuantity` absent); a record mid-fold (`aggregationInProgress`) cannot be claimed.
pub async fn commit_folds_only_into_a_record_no_claim_ever_held(b: &dyn Backend) {
    let agg = b.aggregated();
    let key = group("2026-11-30T10");
    let r1 = seed(b, "2026-11-30T10:00:00Z", 1).await;
    let late = seed(b, "2026-11-30T10:40:00Z", 1).await;
    let create = commit(
        record(key.clone(), 1, 1),
        None,
        &[&r1],
        "2026-11-30T11:00:00Z",
    );
    assert_eq!(agg.commit(&create).await.unwrap(), CommitOutcome::Committed);
    let held = claim("c1", "2026-11-30T11:05:00Z", "2026-11-30T11:10:00Z");
    assert!(claim_read(agg, &key, 1, &held).await.unwrap().is_some());
    let fold = commit(
        record(key.clone(), 2, 2),
        Some(1),
        &[&late],
        "2026-11-30T11:06:00Z",
    );
    assert_eq!(
        agg.commit(&fold).await.unwrap(),
        CommitOutcome::Conflict,
        "held by a claim"
    );
    // Released as "may have been billed": sentQuantity stays, still no fold.
    let ambiguous = SubmissionUpdate {
        status: AggregatedStatus::Pending,
        reason: Some("Timeout".into()),
        metering_record_id: None,
        possibly_sent: true,
        possibly_billed: true,
        expires_at: None,
        final_write_id: None,
    };
    assert!(
        agg.record(&key, Some("c1"), &ambiguous, t("2026-11-30T11:07:00Z"))
            .await
            .unwrap()
    );
    let stored = agg.get(&key).await.unwrap().unwrap();
    assert_eq!(
        (stored.sent_quantity, stored.in_flight_until),
        (Some(1), None)
    );
    let fold = commit(
        record(key.clone(), 2, 2),
        Some(1),
        &[&late],
        "2026-11-30T11:08:00Z",
    );
    assert_eq!(
        agg.commit(&fold).await.unwrap(),
        CommitOutcome::Conflict,
        "possibly sent"
    );

    // A record written mid-fold is not claimable until the fold clears the marker.
    let other = group("2026-11-30T12");
    let r3 = seed(b, "2026-11-30T12:00:00Z", 1).await;
    let mut folding = record(other.clone(), 1, 1);
    folding.folding = true;
    let c = commit(folding, None, &[&r3], "2026-11-30T13:00:00Z");
    assert_eq!(agg.commit(&c).await.unwrap(), CommitOutcome::Committed);
    let c2 = claim("c2", "2026-11-30T13:05:00Z", "2026-11-30T13:10:00Z");
    assert!(
        claim_read(agg, &other, 1, &c2).await.unwrap().is_none(),
        "mid-fold"
    );
}

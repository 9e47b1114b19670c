//! The submitter's claims: taken only on records exactly as read, outcomes written only under them, the quantity they pin.

use super::*;

/// A claim holds the record at its version until it expires; outcomes are written
/// only under the claim that holds it; `sentQuantity` is set by the claim and dropped
/// by a definite no-send.
pub async fn claim_and_record_hold_to_the_claim_id(b: &dyn Backend) {
    let agg = b.aggregated();
    let key = group("2026-11-30T10");
    let r1 = seed(b, "2026-11-30T10:00:00Z", 5).await;
    let create = commit(
        record(key.clone(), 5, 3),
        None,
        &[&r1],
        "2026-11-30T11:00:00Z",
    );
    assert_eq!(agg.commit(&create).await.unwrap(), CommitOutcome::Committed);

    let first = claim("c1", "2026-11-30T11:05:00Z", "2026-11-30T11:10:00Z");
    assert!(
        claim_read(agg, &key, 2, &first).await.unwrap().is_none(),
        "wrong version"
    );
    let grant = claim_read(agg, &key, 3, &first)
        .await
        .unwrap()
        .expect("claimed");
    assert!(!grant.previously_sent);
    let stored = agg.get(&key).await.unwrap().unwrap();
    assert_eq!(
        (
            stored.version,
            stored.attempt_count,
            stored.claim_id.as_deref(),
            stored.sent_quantity,
            stored.in_flight_until,
        ),
        (3, 1, Some("c1"), Some(5), Some(t("2026-11-30T11:10:00Z")))
    );
    let early = claim("c2", "2026-11-30T11:09:59Z", "2026-11-30T11:20:00Z");
    assert!(
        claim_read(agg, &key, 3, &early).await.unwrap().is_none(),
        "held"
    );

    let success = SubmissionUpdate {
        status: AggregatedStatus::Success,
        reason: None,
        metering_record_id: Some("mr-1".into()),
        possibly_sent: false,
        possibly_billed: false,
        expires_at: None,
        final_write_id: None,
    };
    let now = t("2026-11-30T11:06:00Z");
    assert!(
        !agg.record(&key, Some("someone-else"), &success, now)
            .await
            .unwrap(),
        "another claim id"
    );
    assert!(
        !agg.record(&key, None, &success, now).await.unwrap(),
        "no claim id while a claim holds it"
    );

    // The lease runs out: a second claim takes over and learns a send may have billed.
    let second = claim("c2", "2026-11-30T11:10:00Z", "2026-11-30T11:20:00Z");
    let grant = claim_read(agg, &key, 3, &second)
        .await
        .unwrap()
        .expect("expired");
    assert!(grant.previously_sent);
    assert!(
        !agg.record(&key, Some("c1"), &success, t("2026-11-30T11:11:00Z"))
            .await
            .unwrap(),
        "the expired claim writes nothing"
    );
    // A definite no-send reopens it and drops sentQuantity.
    let unsent = SubmissionUpdate {
        status: AggregatedStatus::Pending,
        reason: Some("Throttled".into()),
        metering_record_id: None,
        possibly_sent: false,
        possibly_billed: false,
        expires_at: None,
        final_write_id: None,
    };
    assert!(
        agg.record(&key, Some("c2"), &unsent, t("2026-11-30T11:12:00Z"))
            .await
            .unwrap()
    );
    let stored = agg.get(&key).await.unwrap().unwrap();
    assert_eq!(
        (
            stored.status,
            stored.claim_id,
            stored.sent_quantity,
            stored.in_flight_until
        ),
        (AggregatedStatus::Pending, None, None, None)
    );
    let third = claim("c3", "2026-11-30T11:13:00Z", "2026-11-30T11:23:00Z");
    assert!(claim_read(agg, &key, 3, &third).await.unwrap().is_some());
    assert!(
        agg.record(&key, Some("c3"), &success, t("2026-11-30T11:14:00Z"))
            .await
            .unwrap()
    );
    let done = agg.get(&key).await.unwrap().unwrap();
    assert_eq!(
        (done.status, done.metering_record_id.as_deref()),
        (AggregatedStatus::Success, Some("mr-1"))
    );
    assert!(
        !agg.record(&key, None, &success, t("2026-11-30T11:15:00Z"))
            .await
            .unwrap(),
        "terminal: no more outcomes"
    );
    let pending = agg.pending_page(hour("2026-11-30T10"), None).await.unwrap();
    assert!(pending.items.is_empty(), "left the pending index");
}

/// Batched claims and outcomes answer each item on its own (one whose condition fails
/// does not stop the rest): a claim is taken only on a record exactly as read, so one
/// claimed, released or folded since the read is skipped; what a claim says about
/// earlier sends is what the read said. More than [`MAX_BATCH_WRITES`] is refused.
pub async fn claim_all_takes_only_records_exactly_as_read_and_answers_each(b: &dyn Backend) {
    let agg = b.aggregated();
    let mut reads = Vec::new();
    for (n, h) in ["2026-11-30T07", "2026-11-30T08", "2026-11-30T09"]
        .into_iter()
        .enumerate()
    {
        let key = group(h);
        let row = seed(b, &format!("{h}:00:00Z"), 2).await;
        let create = commit(
            record(key.clone(), 2, 1),
            None,
            &[&row],
            "2026-11-30T10:00:00Z",
        );
        assert_eq!(agg.commit(&create).await.unwrap(), CommitOutcome::Committed);
        let read = agg.get(&key).await.unwrap().unwrap();
        assert_eq!(read.attempt_count, 0, "record {n} is fresh");
        reads.push(read);
    }
    // Behind the reader's back: the second is claimed and released as possibly sent.
    let rival = claim("rival", "2026-11-30T10:01:00Z", "2026-11-30T10:06:00Z");
    assert!(agg.claim(&reads[1], &rival).await.unwrap().is_some());
    let ambiguous = SubmissionUpdate::release(true);
    assert!(
        agg.record(
            &reads[1].key,
            Some("rival"),
            &ambiguous,
            t("2026-11-30T10:02:00Z")
        )
        .await
        .unwrap()
    );
    let requests: Vec<ClaimRequest> = reads
        .iter()
        .enumerate()
        .map(|(n, r)| {
            ClaimRequest::of(
                r,
                claim(
                    &format!("c{n}"),
                    "2026-11-30T10:03:00Z",
                    "2026-11-30T10:08:00Z",
                ),
            )
        })
        .collect();
    let granted = agg.claim_all(&requests).await.unwrap();
    assert_eq!(
        granted.iter().map(Option::is_some).collect::<Vec<_>>(),
        vec![true, false, true],
        "the stale read is skipped, the others claimed"
    );
    assert!(granted.iter().flatten().all(|g| !g.previously_sent));
    let stale = agg.get(&reads[1].key).await.unwrap().unwrap();
    assert_eq!(
        (stale.claim_id, stale.sent_quantity, stale.attempt_count),
        (None, Some(2), 1),
        "untouched by the skipped claim"
    );
    // Read again, it is claimable, and the grant says an earlier send may have billed.
    let again = ClaimRequest::of(
        &read_record(agg, &reads[1].key).await,
        claim("c9", "2026-11-30T10:03:00Z", "2026-11-30T10:08:00Z"),
    );
    let grant = agg.claim_all(&[again]).await.unwrap();
    assert_eq!(grant[0].map(|g| g.previously_sent), Some(true));

    // Outcomes: each under its own claim id; a wrong id fails alone.
    let billed = SubmissionUpdate::new(AggregatedStatus::Success, None, Some("mr".into()));
    let writes = vec![
        OutcomeWrite {
            key: reads[0].key.clone(),
            claim_id: Some("c0".into()),
            update: billed.clone(),
        },
        OutcomeWrite {
            key: reads[1].key.clone(),
            claim_id: Some("c1".into()),
            update: billed.clone(),
        },
        OutcomeWrite {
            key: reads[2].key.clone(),
            claim_id: Some("c2".into()),
            update: billed.clone(),
        },
    ];
    let applied = agg
        .record_all(&writes, t("2026-11-30T10:04:00Z"))
        .await
        .unwrap();
    assert_eq!(applied, vec![true, false, true]);
    for (n, status) in [
        (0, AggregatedStatus::Success),
        (1, AggregatedStatus::Pending),
        (2, AggregatedStatus::Success),
    ] {
        let stored = agg.get(&reads[n].key).await.unwrap().unwrap();
        assert_eq!(stored.status, status, "record {n}");
    }

    let too_many: Vec<ClaimRequest> = (0..=MAX_BATCH_WRITES)
        .map(|n| {
            let mut r = reads[0].clone();
            r.key.dimension = format!("d{n}");
            ClaimRequest::of(
                &r,
                claim("x", "2026-11-30T10:05:00Z", "2026-11-30T10:09:00Z"),
            )
        })
        .collect();
    assert!(
        agg.claim_all(&too_many).await.is_err(),
        "over the batch size"
    );
}

/// Direct-submit: the seller may update a record in place (no version bump). A claim
/// taken on a read whose quantity is no longer stored is refused; a claim stores as
/// `sentQuantity` exactly the quantity its call sends, never the stored one.
pub async fn a_claim_pins_the_quantity_it_sends_and_holds_only_while_it_is_stored(b: &dyn Backend) {
    let agg = b.aggregated();
    let key = group("2026-11-30T09");
    let written = record(key.clone(), 5, 0);
    assert_eq!(
        agg.put_direct(&written, t("2026-11-30T10:00:00Z"))
            .await
            .unwrap(),
        PutOutcome::Created
    );
    // A read that saw 7 (the seller's value before or after), while 5 is stored.
    let mut seen = read_record(agg, &key).await;
    seen.quantity = 7;
    let moved = ClaimRequest::of(
        &seen,
        claim("c1", "2026-11-30T10:01:00Z", "2026-11-30T10:05:00Z"),
    );
    assert_eq!(moved.sent_quantity, 7);
    assert_eq!(agg.claim_all(&[moved]).await.unwrap(), vec![None]);
    let untouched = read_record(agg, &key).await;
    assert_eq!((untouched.sent_quantity, untouched.claim_id), (None, None));
    // Read as stored: claimed, and `sentQuantity` is the quantity the call sends.
    let mut read = read_record(agg, &key).await;
    let as_read = ClaimRequest::of(
        &read,
        claim("c2", "2026-11-30T10:01:00Z", "2026-11-30T10:05:00Z"),
    );
    assert!(agg.claim_all(&[as_read]).await.unwrap()[0].is_some());
    assert_eq!(read_record(agg, &key).await.sent_quantity, Some(5));
    // A request that sends a pinned quantity stores that one, whatever `quantity` says.
    let release = SubmissionUpdate::release(true);
    assert!(
        agg.record(&key, Some("c2"), &release, t("2026-11-30T10:02:00Z"))
            .await
            .unwrap()
    );
    read = read_record(agg, &key).await;
    let mut request = ClaimRequest::of(
        &read,
        claim("c3", "2026-11-30T10:03:00Z", "2026-11-30T10:06:00Z"),
    );
    request.sent_quantity = 4;
    assert!(agg.claim_all(&[request]).await.unwrap()[0].is_some());
    assert_eq!(read_record(agg, &key).await.sent_quantity, Some(4));
}

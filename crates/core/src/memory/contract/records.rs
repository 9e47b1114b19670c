//! What an aggregated record keeps: the operator's reads and replays, `possiblyBilled`
//! never cleared, `expiresAt` only on final writes, and a billed record's correction
//! (written only over the one it holds, read back whole).

use rust_decimal::Decimal;

use super::*;
use crate::corrections::{Correction, CorrectionStatus};

/// The operator's pages cover each table once (by license: only that license's items),
/// and a replay puts an `Error` record back in the pending index with its quantity
/// pinned, only while it is still `Error` with the attempt count read.
pub async fn operator_reads_both_tables_and_replays_only_an_unchanged_error(b: &dyn Backend) {
    let (usage, agg, op) = (b.usage(), b.aggregated(), b.operator());
    let now = t("2026-11-30T11:00:00Z");
    let mut other = new_row("e-2", "2026-11-30T10:20:00Z", 1);
    other.license_arn = format!("{LICENSE}0");
    for row in [
        new_row("e-1", "2026-11-30T10:10:00Z", 5),
        other,
        new_row("e-3", "2026-11-30T10:30:00Z", 2),
    ] {
        assert_eq!(
            usage.put_row(&row, now).await.unwrap(),
            IngestOutcome::Created
        );
    }
    let all = all_pages(|c| op.raw_rows_page(None, c)).await;
    // Three rows and their three idempotency markers.
    assert_eq!(all.len(), 6, "{all:?}");
    let mine = all_pages(|c| op.raw_rows_page(Some(LICENSE), c)).await;
    assert_eq!(mine.len(), 4);
    assert!(mine.iter().all(|r| r.license_arn == LICENSE));

    let key = group("2026-11-30T10");
    let rows = usage.group_rows(&key).await.unwrap();
    let refs: Vec<&RawUsageRow> = rows.iter().collect();
    let create = commit(
        record(key.clone(), 7, 1),
        None,
        &refs,
        "2026-11-30T11:01:00Z",
    );
    assert_eq!(agg.commit(&create).await.unwrap(), CommitOutcome::Committed);
    let held = claim("c1", "2026-11-30T11:05:00Z", "2026-11-30T11:10:00Z");
    claim_read(agg, &key, 1, &held)
        .await
        .unwrap()
        .expect("claimed");
    let error = SubmissionUpdate {
        status: AggregatedStatus::Error,
        reason: Some("InvalidUsageDimensionException".into()),
        metering_record_id: None,
        possibly_sent: false,
        possibly_billed: false,
        expires_at: None,
        final_write_id: None,
    };
    let at = t("2026-11-30T11:06:00Z");
    assert!(agg.record(&key, Some("c1"), &error, at).await.unwrap());

    let records = all_pages(|c| op.records_page(Some(LICENSE), c)).await;
    assert_eq!(records.len(), 1);
    let failed = records[0].clone();
    assert_eq!(failed.status, AggregatedStatus::Error);
    assert!(
        all_pages(|c| op.records_page(Some("arn:aws:license-manager::1:license:l-x"), c))
            .await
            .is_empty()
    );
    assert!(
        agg.pending_page(key.hour, None)
            .await
            .unwrap()
            .items
            .is_empty()
    );

    let mut stale = failed.clone();
    stale.attempt_count += 1;
    assert!(
        !op.replay(&stale, at).await.unwrap(),
        "attempt count changed"
    );
    assert!(op.replay(&failed, at).await.unwrap());
    let replayed = agg.get(&key).await.unwrap().unwrap();
    assert_eq!(
        (
            replayed.status,
            replayed.status_reason.clone(),
            replayed.sent_quantity,
            replayed.quantity,
            replayed.claim_id.clone()
        ),
        (AggregatedStatus::Pending, None, Some(7), 7, None)
    );
    assert_eq!(
        replayed.possibly_billed,
        Some(false),
        "nothing of ours billed it: a DuplicateRecord now is something else's"
    );
    assert!(!replayed.may_have_been_billed());
    let pending = all_pages(|c| agg.pending_page(key.hour, c)).await;
    assert_eq!(pending.len(), 1, "back in the pending index");
    assert!(
        !replayed.accepts_folds(),
        "a replayed record takes no late rows"
    );
    assert!(!op.replay(&failed, at).await.unwrap(), "no longer Error");
    // The submitter can claim it as read.
    let again = claim("c2", "2026-11-30T11:07:00Z", "2026-11-30T11:12:00Z");
    let grant = agg
        .claim(&replayed, &again)
        .await
        .unwrap()
        .expect("claimable");
    assert!(grant.previously_sent);
}

/// `possiblyBilled` (whether a call of ours may have billed the record) is written by
/// outcomes only: `true` when the update says so; under a claim, `false` where it is
/// absent; never cleared, by any write. Without it (an item written before it existed)
/// `sentQuantity` is read as it; a pending release that pins the quantity without a
/// possible billing stores `false` explicitly, so the record reads as not billed.
pub async fn possibly_billed_is_written_by_outcomes_and_never_cleared(b: &dyn Backend) {
    let agg = b.aggregated();
    let key = group("2026-11-30T10");
    let r1 = seed(b, "2026-11-30T10:00:00Z", 1).await;
    let create = commit(
        record(key.clone(), 3, 1),
        None,
        &[&r1],
        "2026-11-30T11:00:00Z",
    );
    assert_eq!(agg.commit(&create).await.unwrap(), CommitOutcome::Committed);
    let stored = || async { agg.get(&key).await.unwrap().unwrap() };
    assert_eq!(
        stored().await.possibly_billed,
        None,
        "a new record has none"
    );

    // A claim sets sentQuantity and leaves possiblyBilled alone: while it is held (or
    // after it lapses) the record reads as possibly billed anyway.
    let c1 = claim("c1", "2026-11-30T11:05:00Z", "2026-11-30T11:10:00Z");
    assert!(claim_read(agg, &key, 1, &c1).await.unwrap().is_some());
    let held = stored().await;
    assert_eq!((held.sent_quantity, held.possibly_billed), (Some(3), None));
    assert!(held.may_have_been_billed());

    // Released with the quantity pinned but nothing billed (CustomerNotSubscribed
    // before activation): "no" is stored, so sentQuantity alone no longer reads as billed.
    let pinned = SubmissionUpdate::release(true);
    let at = t("2026-11-30T11:06:00Z");
    assert!(agg.record(&key, Some("c1"), &pinned, at).await.unwrap());
    let released = stored().await;
    assert_eq!(
        (released.sent_quantity, released.possibly_billed),
        (Some(3), Some(false))
    );
    assert!(!released.may_have_been_billed());

    // A send that may have billed sets it.
    let c2 = claim("c2", "2026-11-30T11:07:00Z", "2026-11-30T11:12:00Z");
    assert!(agg.claim(&released, &c2).await.unwrap().is_some());
    let ambiguous = SubmissionUpdate::release(true).with_possibly_billed(true);
    let at = t("2026-11-30T11:08:00Z");
    assert!(agg.record(&key, Some("c2"), &ambiguous, at).await.unwrap());
    let billed = stored().await;
    assert_eq!(billed.possibly_billed, Some(true));

    // Never cleared: not by a later "no" under a claim, nor by a final write.
    let c3 = claim("c3", "2026-11-30T11:13:00Z", "2026-11-30T11:18:00Z");
    assert!(agg.claim(&billed, &c3).await.unwrap().is_some());
    let at = t("2026-11-30T11:14:00Z");
    assert!(agg.record(&key, Some("c3"), &pinned, at).await.unwrap());
    assert_eq!(stored().await.possibly_billed, Some(true));
    let expired = SubmissionUpdate::new(AggregatedStatus::SubmissionExpired, None, None);
    let at = t("2026-11-30T11:20:00Z");
    assert!(agg.record(&key, None, &expired, at).await.unwrap());
    let done = stored().await;
    assert_eq!(
        (done.status, done.possibly_billed),
        (AggregatedStatus::SubmissionExpired, Some(true))
    );

    // A write without a claim never stores "no" where nothing is stored.
    let other = group("2026-11-30T12");
    let r2 = seed(b, "2026-11-30T12:00:00Z", 1).await;
    let c = commit(
        record(other.clone(), 1, 1),
        None,
        &[&r2],
        "2026-11-30T13:00:00Z",
    );
    assert_eq!(agg.commit(&c).await.unwrap(), CommitOutcome::Committed);
    let error = SubmissionUpdate::new(
        AggregatedStatus::Error,
        Some("RequestTooLarge".into()),
        None,
    );
    let at = t("2026-11-30T13:01:00Z");
    assert!(agg.record(&other, None, &error, at).await.unwrap());
    assert_eq!(
        agg.get(&other).await.unwrap().unwrap().possibly_billed,
        None
    );
}

/// `expiresAt` (the tables' TTL attribute, epoch seconds) is written only by a final
/// write, exactly as the write says: a finalized row, the rows a commit counts, a
/// record's terminal outcome, a malformed item closed `Error`. Every write that leaves
/// or puts an item pending removes it: the commit's record, a claim, a release, the
/// replay of an `Error` record, a row re-filed under its hour.
pub async fn expires_at_only_on_final_writes_and_removed_by_pending_ones(b: &dyn Backend) {
    let (usage, agg, op) = (b.usage(), b.aggregated(), b.operator());
    let at = t("2026-12-03T11:00:00Z");
    let expiry = |row: &RawUsageRow| row.attrs.get(attr::EXPIRES_AT).cloned();
    let read =
        |sort_key: String| async move { usage.get_row(LICENSE, &sort_key).await.unwrap().unwrap() };

    // A finalized row carries the expiry given, as epoch seconds; `None` removes one.
    let rejected = seed(b, "2026-11-30T10:00:00Z", 1).await;
    let final_row = RowFinal::new(RawStatus::RejectedClientSide, Some(ReasonCode::TooManyTags));
    assert!(
        usage
            .finalize_row(
                LICENSE,
                &rejected.sort_key,
                RowClaim::Uncounted,
                final_row.expiring(Some(at)),
                t("2026-11-30T11:00:00Z")
            )
            .await
            .unwrap()
    );
    assert_eq!(
        expiry(&read(rejected.sort_key.clone()).await),
        Some(Attr::N(at.timestamp().to_string()))
    );
    let mut stale = seed(b, "2026-11-30T10:01:00Z", 1).await;
    stale
        .attrs
        .insert(attr::EXPIRES_AT.into(), Attr::N("1".into()));
    b.insert_raw_row(&stale).await;
    assert!(
        usage
            .finalize_row(
                LICENSE,
                &stale.sort_key,
                RowClaim::Uncounted,
                RowFinal::new(RawStatus::AggregationExpired, None),
                t("2026-11-30T11:00:00Z")
            )
            .await
            .unwrap()
    );
    assert_eq!(
        expiry(&read(stale.sort_key.clone()).await),
        None,
        "retention off"
    );

    // A row re-filed under its hour is pending: a seller's expiresAt goes.
    let mut marked = seed(b, "2026-11-30T10:02:00Z", 1).await;
    marked
        .attrs
        .insert(attr::METERING_PENDING.into(), Attr::S("true".into()));
    marked
        .attrs
        .insert(attr::EXPIRES_AT.into(), Attr::N("1".into()));
    b.insert_raw_row(&marked).await;
    assert!(
        usage
            .repair_pending(
                LICENSE,
                &marked.sort_key,
                "true",
                hour("2026-11-30T10"),
                t("2026-11-30T11:00:00Z")
            )
            .await
            .unwrap()
    );
    assert_eq!(expiry(&read(marked.sort_key.clone()).await), None);

    // The commit: its counted rows are final (the expiry given), its record pending.
    let key = group("2026-11-30T10");
    let counted = seed(b, "2026-11-30T10:03:00Z", 4).await;
    let mut c = commit(
        record(key.clone(), 4, 1),
        None,
        &[&counted],
        "2026-11-30T11:00:00Z",
    );
    c.rows_expire_at = Some(at);
    assert_eq!(agg.commit(&c).await.unwrap(), CommitOutcome::Committed);
    assert_eq!(
        expiry(&read(counted.sort_key.clone()).await),
        Some(Attr::N(at.timestamp().to_string()))
    );
    assert_eq!(
        b.record_expiry(&key).await,
        None,
        "the record stays pending"
    );

    // A seller's expiresAt on a pending record: a fold, a claim and a release remove it.
    b.set_record_expiry(&key, t("2026-11-30T12:00:00Z")).await;
    let late = seed(b, "2026-11-30T10:04:00Z", 1).await;
    let fold = commit(
        record(key.clone(), 5, 2),
        Some(1),
        &[&late],
        "2026-11-30T11:01:00Z",
    );
    assert_eq!(agg.commit(&fold).await.unwrap(), CommitOutcome::Committed);
    assert_eq!(b.record_expiry(&key).await, None, "a fold");
    b.set_record_expiry(&key, t("2026-11-30T12:00:00Z")).await;
    let first = claim("c1", "2026-11-30T11:05:00Z", "2026-11-30T11:10:00Z");
    assert!(
        agg.claim(&read_record(agg, &key).await, &first)
            .await
            .unwrap()
            .is_some()
    );
    assert_eq!(b.record_expiry(&key).await, None, "a claim");
    let release = SubmissionUpdate::release(false).expiring(Some(at));
    assert!(
        agg.record(&key, Some("c1"), &release, t("2026-11-30T11:06:00Z"))
            .await
            .unwrap()
    );
    assert_eq!(b.record_expiry(&key).await, None, "a release never expires");

    // A terminal outcome carries the expiry given; the replay back to Pending removes it.
    let second = claim("c2", "2026-11-30T11:07:00Z", "2026-11-30T11:12:00Z");
    assert!(
        agg.claim(&read_record(agg, &key).await, &second)
            .await
            .unwrap()
            .is_some()
    );
    let error = SubmissionUpdate::new(
        AggregatedStatus::Error,
        Some("InvalidUsageDimensionException".into()),
        None,
    )
    .expiring(Some(at));
    assert!(
        agg.record(&key, Some("c2"), &error, t("2026-11-30T11:08:00Z"))
            .await
            .unwrap()
    );
    assert_eq!(b.record_expiry(&key).await, Some(at));
    assert!(
        op.replay(&read_record(agg, &key).await, t("2026-11-30T11:09:00Z"))
            .await
            .unwrap()
    );
    assert_eq!(
        b.record_expiry(&key).await,
        None,
        "pending again after the replay"
    );
    let third = claim("c3", "2026-11-30T11:10:00Z", "2026-11-30T11:15:00Z");
    assert!(
        agg.claim(&read_record(agg, &key).await, &third)
            .await
            .unwrap()
            .is_some()
    );
    let billed = SubmissionUpdate::new(AggregatedStatus::Success, None, Some("mr-1".into()))
        .expiring(Some(at));
    assert!(
        agg.record(&key, Some("c3"), &billed, t("2026-11-30T11:11:00Z"))
            .await
            .unwrap()
    );
    assert_eq!(b.record_expiry(&key).await, Some(at));
}

/// A record of `h` (`requests`, quantity 1) left `status` by the submitter: committed,
/// then (for anything but `Pending`) claimed and recorded with that outcome.
async fn record_left(b: &dyn Backend, h: &str, status: AggregatedStatus) -> GroupKey {
    let reason = match status {
        AggregatedStatus::Success | AggregatedStatus::Pending => None,
        _ => Some("InvalidUsageDimensionException"),
    };
    record_left_with(b, h, status, reason).await
}

/// [`record_left`] with the status's `reason`.
async fn record_left_with(
    b: &dyn Backend,
    h: &str,
    status: AggregatedStatus,
    reason: Option<&str>,
) -> GroupKey {
    let agg = b.aggregated();
    let key = group(h);
    let row = seed(b, &format!("{h}:00:00Z"), 1).await;
    let create = commit(
        record(key.clone(), 1, 1),
        None,
        &[&row],
        "2026-11-30T23:00:00Z",
    );
    assert_eq!(agg.commit(&create).await.unwrap(), CommitOutcome::Committed);
    if status == AggregatedStatus::Pending {
        return key;
    }
    let held = claim("c1", "2026-11-30T23:05:00Z", "2026-11-30T23:10:00Z");
    claim_read(agg, &key, 1, &held)
        .await
        .unwrap()
        .expect("claimed");
    let id = (status == AggregatedStatus::Success).then(|| "mr-1".to_string());
    let outcome = SubmissionUpdate::new(status, reason.map(str::to_string), id);
    let at = t("2026-11-30T23:06:00Z");
    assert!(agg.record(&key, Some("c1"), &outcome, at).await.unwrap());
    assert_eq!(read_record(agg, &key).await.status, status);
    key
}

/// A correction as `awsmp adjust` first writes it (`REQUESTED`, no adjustment yet),
/// its amount with more decimals than a price.
fn requested(token: &str) -> Correction {
    Correction {
        client_token: token.to_string(),
        attempt: 1,
        billed_quantity: 1000,
        correct_quantity: 600,
        agreement_id: "agmt-contract1".to_string(),
        invoice_id: "E2E2026110112345abcde".to_string(),
        amount: "1.0123456789".parse::<Decimal>().expect("an amount"),
        currency: "USD".to_string(),
        requested_at: t("2026-12-02T10:15:42Z"),
        adjustment_id: None,
        status: CorrectionStatus::Requested,
        message: None,
    }
}

/// What AWS's answer makes of it: failed, with the adjustment's id and AWS's words.
fn failed(token: &str) -> Correction {
    Correction {
        attempt: 2,
        adjustment_id: Some("ba-0123456789abcdef0123".to_string()),
        status: CorrectionStatus::Failed,
        message: Some(
            "ValidationException (EXCEEDED_MAXIMUM_ADJUSTMENT_AMOUNT): 1.01 > 0.50 \u{2014} «left»"
                .to_string(),
        ),
        ..requested(token)
    }
}

/// A billed record's correction: none at first; written over none only when it has
/// none, then only over the one with the token given; read back whole (every field,
/// the optional ones both absent and present, the amount exact through the map);
/// the record itself untouched by it.
pub async fn a_correction_is_written_on_a_billed_record_only_over_the_one_it_holds(
    b: &dyn Backend,
) {
    let (agg, op) = (b.aggregated(), b.operator());
    let key = record_left(b, "2026-11-30T10", AggregatedStatus::Success).await;
    let before = read_record(agg, &key).await;
    let (read, none) = op.correction(&key).await.unwrap().expect("the record");
    assert_eq!((read, none), (before.clone(), None));

    let first = requested("awsmp-token-1");
    assert!(op.record_correction(&key, None, &first).await.unwrap());
    let (read, held) = op.correction(&key).await.unwrap().expect("the record");
    assert_eq!(held.as_ref(), Some(&first));
    assert_eq!(
        held.map(|c| c.amount.to_string()),
        Some("1.0123456789".to_string()),
        "exact, not a float"
    );
    assert_eq!(read, before, "the record itself is untouched");
    assert_eq!(read_record(agg, &key).await, before);

    let other = requested("awsmp-token-2");
    assert!(
        !op.record_correction(&key, None, &other).await.unwrap(),
        "it holds one: a write expecting none is refused"
    );
    assert!(
        !op.record_correction(&key, Some("awsmp-token-9"), &other)
            .await
            .unwrap(),
        "another token"
    );
    assert_eq!(op.correction(&key).await.unwrap().unwrap().1, Some(first));

    let next = failed("awsmp-token-1");
    assert!(
        op.record_correction(&key, Some("awsmp-token-1"), &next)
            .await
            .unwrap()
    );
    assert_eq!(op.correction(&key).await.unwrap().unwrap().1, Some(next));
    let retry = requested("awsmp-token-2");
    assert!(
        op.record_correction(&key, Some("awsmp-token-1"), &retry)
            .await
            .unwrap(),
        "the token is the same: written again"
    );
    // Back to no message and no adjustment id: the whole map replaced, nothing kept.
    assert_eq!(op.correction(&key).await.unwrap().unwrap().1, Some(retry));
    assert!(
        !op.record_correction(&key, Some("awsmp-token-1"), &requested("awsmp-token-3"))
            .await
            .unwrap(),
        "the record now holds token 2"
    );
    assert_eq!(read_record(agg, &key).await, before);
}

/// Only a billed (`Success`) record takes a correction; a record the table does not
/// hold has none, and a write to it creates nothing.
pub async fn a_correction_needs_a_billed_record(b: &dyn Backend) {
    let (agg, op) = (b.aggregated(), b.operator());
    for (h, status) in [
        ("2026-11-30T10", AggregatedStatus::Pending),
        ("2026-11-30T11", AggregatedStatus::Error),
    ] {
        let key = record_left(b, h, status).await;
        assert!(
            !op.record_correction(&key, None, &requested("awsmp-token-1"))
                .await
                .unwrap(),
            "{status:?}"
        );
        let (read, none) = op.correction(&key).await.unwrap().expect("the record");
        assert_eq!((read.status, none), (status, None));
    }

    // A DuplicateRecord is billed only when an earlier send of ours billed it.
    let theirs = record_left_with(
        b,
        "2026-11-30T13",
        AggregatedStatus::DuplicateRecord,
        Some("DuplicateRecord"),
    )
    .await;
    assert!(
        !op.record_correction(&theirs, None, &requested("awsmp-token-1"))
            .await
            .unwrap(),
        "another writer billed the hour: nothing of ours to refund"
    );
    let ours = record_left_with(
        b,
        "2026-11-30T14",
        AggregatedStatus::DuplicateRecord,
        Some(crate::submit::outcome::REASON_BILLED_BY_EARLIER_ATTEMPT),
    )
    .await;
    assert!(
        op.record_correction(&ours, None, &requested("awsmp-token-2"))
            .await
            .unwrap(),
        "billed by an earlier send of ours"
    );

    let absent = group("2026-11-30T12");
    assert_eq!(op.correction(&absent).await.unwrap(), None);
    assert!(
        !op.record_correction(&absent, None, &requested("awsmp-token-1"))
            .await
            .unwrap()
    );
    assert!(
        !op.record_correction(&absent, Some("awsmp-token-1"), &requested("awsmp-token-1"))
            .await
            .unwrap()
    );
    assert_eq!(
        op.correction(&absent).await.unwrap(),
        None,
        "nothing created"
    );
    assert_eq!(agg.get(&absent).await.unwrap(), None);
    let records = all_pages(|c| op.records_page(None, c)).await;
    assert_eq!(records.len(), 4, "{records:?}");
    assert_eq!(all_pages(|c| op.corrections_page(c)).await.len(), 1);
}

/// `corrections_page` lists the records that carry a correction, each once with it,
/// over as many pages as the scan takes, and none of the others.
pub async fn corrections_page_lists_exactly_the_corrected_records(b: &dyn Backend) {
    let op = b.operator();
    assert!(all_pages(|c| op.corrections_page(c)).await.is_empty());
    let mut keys = Vec::new();
    for h in [
        "2026-11-30T10",
        "2026-11-30T11",
        "2026-11-30T12",
        "2026-11-30T13",
        "2026-11-30T14",
    ] {
        keys.push(record_left(b, h, AggregatedStatus::Success).await);
    }
    let pending = record_left(b, "2026-11-30T15", AggregatedStatus::Pending).await;
    let mut other_license = group("2026-11-30T10");
    other_license.license_arn = format!("{LICENSE}0");
    let mut wanted = BTreeMap::new();
    for (i, key) in keys.iter().enumerate().filter(|(i, _)| i % 2 == 0) {
        let correction = failed(&format!("awsmp-token-{i}"));
        assert!(op.record_correction(key, None, &correction).await.unwrap());
        wanted.insert(key.to_string(), correction);
    }
    assert!(
        !op.record_correction(&pending, None, &requested("awsmp-token-x"))
            .await
            .unwrap()
    );
    assert!(
        !op.record_correction(&other_license, None, &requested("awsmp-token-y"))
            .await
            .unwrap()
    );

    let listed = all_pages(|c| op.corrections_page(c)).await;
    assert_eq!(listed.len(), 3, "{listed:?}");
    let found: BTreeMap<String, Correction> = listed
        .iter()
        .map(|(record, correction)| (record.key.to_string(), correction.clone()))
        .collect();
    assert_eq!(
        found, wanted,
        "each corrected record once, with its correction"
    );
    for (record, _) in &listed {
        assert_eq!(record.status, AggregatedStatus::Success);
        assert_eq!(read_record(b.aggregated(), &record.key).await, *record);
    }
}

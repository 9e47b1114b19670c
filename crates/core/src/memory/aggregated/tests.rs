//! The in-memory aggregated store's own behaviour beyond the store contract.

use super::*;
use crate::memory::fixtures::*;
use crate::memory::reference_row;
use crate::model::RawUsageRow;
use crate::ports::{MAX_ROWS_PER_COMMIT, SubmissionUpdate};
#[tokio::test]
async fn commit_creates_then_folds_and_claims_rows_atomically() {
    let tables = MemoryTables::new();
    let aggregated = tables.aggregated_store();
    let r1 = reference_row(LICENSE, ACCOUNT, "requests", "2026-11-30T10:00:00Z", 1);
    let r2 = reference_row(LICENSE, ACCOUNT, "requests", "2026-11-30T10:05:00Z", 2);
    let late = reference_row(LICENSE, ACCOUNT, "requests", "2026-11-30T10:50:00Z", 4);
    for r in [&r1, &r2, &late] {
        tables.insert_raw_row(r.clone());
    }
    let key = group("requests", "2026-11-30T10");

    let created = commit(
        record(key.clone(), 3, 1),
        None,
        &[&r1, &r2],
        "2026-11-30T11:10:00Z",
    );
    assert_eq!(
        aggregated.commit(&created).await.unwrap(),
        CommitOutcome::Committed
    );
    let claimed = tables.raw_row(LICENSE, &r1.sort_key).unwrap();
    assert_eq!(
        claimed.attrs["aggregatedInto"],
        Attr::S(key.aggregated_sort_key())
    );
    assert_eq!(
        claimed.attrs["meteringStatus"],
        Attr::S("Aggregated".into())
    );
    assert!(
        !claimed.attrs.contains_key("meteringPending"),
        "counted and finalized in the commit"
    );

    // Redelivery: the same commit again conflicts (record exists, rows claimed).
    assert_eq!(
        aggregated.commit(&created).await.unwrap(),
        CommitOutcome::Conflict
    );

    // A late row folds in at the expected version.
    let fold = commit(
        record(key.clone(), 7, 2),
        Some(1),
        &[&late],
        "2026-11-30T11:20:00Z",
    );
    assert_eq!(
        aggregated.commit(&fold).await.unwrap(),
        CommitOutcome::Committed
    );
    assert_eq!(aggregated.get(&key).await.unwrap().unwrap().quantity, 7);
    let audit = tables.aggregated_audit(&key).unwrap();
    assert_eq!(audit.created_at, "2026-11-30T11:10:00Z");
    assert_eq!(audit.updated_at, "2026-11-30T11:20:00Z");
}

#[tokio::test]
async fn commit_conflicts_leave_everything_untouched() {
    let now = "2026-11-30T11:10:00Z";
    let key = group("requests", "2026-11-30T10");
    let fresh = || reference_row(LICENSE, ACCOUNT, "requests", "2026-11-30T10:00:00Z", 1);

    // Each case: (name, stored record, raw row as stored, expected version).
    let mut in_flight = record(key.clone(), 1, 1);
    in_flight.in_flight_until = Some(t("2026-11-30T11:15:00Z"));
    let mut expired_claim = record(key.clone(), 1, 1);
    expired_claim.in_flight_until = Some(t(now));
    let mut billed = record(key.clone(), 1, 1);
    billed.status = AggregatedStatus::Success;
    let mut finalized = fresh();
    finalized.attrs.remove("meteringPending");
    let mut claimed_elsewhere = fresh();
    claimed_elsewhere
        .attrs
        .insert("aggregatedInto".into(), Attr::S("other".into()));

    type Case = (
        &'static str,
        Option<AggregatedRecord>,
        Option<RawUsageRow>,
        Option<u64>,
        CommitOutcome,
    );
    let cases: Vec<Case> = vec![
        (
            "create but record exists",
            Some(record(key.clone(), 1, 1)),
            Some(fresh()),
            None,
            CommitOutcome::Conflict,
        ),
        (
            "fold but record missing",
            None,
            Some(fresh()),
            Some(1),
            CommitOutcome::Conflict,
        ),
        (
            "version moved",
            Some(record(key.clone(), 1, 2)),
            Some(fresh()),
            Some(1),
            CommitOutcome::Conflict,
        ),
        (
            "record in flight",
            Some(in_flight),
            Some(fresh()),
            Some(1),
            CommitOutcome::Conflict,
        ),
        (
            // The lapsed claim may have sent: its quantity is final.
            "claim expired exactly now",
            Some(expired_claim),
            Some(fresh()),
            Some(1),
            CommitOutcome::Conflict,
        ),
        (
            "an earlier send may have billed it",
            Some(AggregatedRecord {
                sent_quantity: Some(1),
                ..record(key.clone(), 1, 1)
            }),
            Some(fresh()),
            Some(1),
            CommitOutcome::Conflict,
        ),
        (
            "an unclaimed record takes the fold",
            Some(record(key.clone(), 1, 1)),
            Some(fresh()),
            Some(1),
            CommitOutcome::Committed,
        ),
        (
            "record no longer pending",
            Some(billed),
            Some(fresh()),
            Some(1),
            CommitOutcome::Conflict,
        ),
        ("raw row missing", None, None, None, CommitOutcome::Conflict),
        (
            "raw row finalized",
            None,
            Some(finalized),
            None,
            CommitOutcome::Conflict,
        ),
        (
            "raw row claimed elsewhere",
            None,
            Some(claimed_elsewhere),
            None,
            CommitOutcome::Conflict,
        ),
    ];
    for (name, stored, raw, expected, outcome) in cases {
        let tables = MemoryTables::new();
        let store = tables.aggregated_store();
        if let Some(stored) = &stored {
            tables.insert_aggregated(stored.clone(), t("2026-11-30T11:00:00Z"));
        }
        // A second, healthy row proves all-or-nothing: it is never claimed on conflict.
        let healthy = reference_row(LICENSE, ACCOUNT, "requests", "2026-11-30T10:30:00Z", 5);
        tables.insert_raw_row(healthy.clone());
        if let Some(raw) = &raw {
            tables.insert_raw_row(raw.clone());
        }
        let before = (tables.raw_rows(), tables.aggregated_records());
        let target = raw.clone().unwrap_or_else(fresh);
        let c = commit(
            record(key.clone(), 6, expected.map_or(1, |v| v + 1)),
            expected,
            &[&healthy, &target],
            now,
        );
        assert_eq!(store.commit(&c).await.unwrap(), outcome, "{name}");
        if outcome == CommitOutcome::Conflict {
            assert_eq!(
                (tables.raw_rows(), tables.aggregated_records()),
                before,
                "{name}"
            );
        }
    }
}

#[tokio::test]
async fn commit_refuses_oversized_or_repeating_claims() {
    let tables = MemoryTables::new();
    let store = tables.aggregated_store();
    let key = group("requests", "2026-11-30T10");
    let mut too_many = commit(record(key.clone(), 1, 1), None, &[], "2026-11-30T11:00:00Z");
    too_many.claimed_rows = (0..=MAX_ROWS_PER_COMMIT)
        .map(|i| (LICENSE.to_string(), format!("k{i}")))
        .collect();
    assert!(matches!(
        store.commit(&too_many).await,
        Err(PortError::Failed { .. })
    ));
    let row = reference_row(LICENSE, ACCOUNT, "requests", "2026-11-30T10:00:00Z", 1);
    tables.insert_raw_row(row.clone());
    let twice = commit(
        record(key, 1, 1),
        None,
        &[&row, &row],
        "2026-11-30T11:00:00Z",
    );
    assert!(matches!(
        store.commit(&twice).await,
        Err(PortError::Failed { .. })
    ));
    assert!(tables.aggregated_records().is_empty());
}

fn claim_at(id: &str, now: &str, until: &str) -> Claim {
    Claim {
        id: id.to_string(),
        now: t(now),
        until: t(until),
    }
}

#[tokio::test]
async fn claim_expires_and_record_releases_it() {
    let tables = MemoryTables::new();
    let store = tables.aggregated_store();
    let key = group("requests", "2026-11-30T10");
    tables.insert_aggregated(record(key.clone(), 5, 3), t("2026-11-30T11:00:00Z"));
    let until = t("2026-11-30T11:10:00Z");
    let first = claim_at("c1", "2026-11-30T11:05:00Z", "2026-11-30T11:10:00Z");

    assert!(
        claim_read(&store, &key, 2, &first).await.unwrap().is_none(),
        "wrong version"
    );
    let grant = claim_read(&store, &key, 3, &first).await.unwrap().unwrap();
    assert!(!grant.previously_sent, "never sent before");
    assert!(
        claim_read(
            &store,
            &key,
            3,
            &claim_at("c2", "2026-11-30T11:09:59Z", "2026-11-30T11:20:00Z")
        )
        .await
        .unwrap()
        .is_none(),
        "held"
    );
    let held = store.get(&key).await.unwrap().unwrap();
    assert_eq!(
        (
            held.attempt_count,
            held.version,
            held.in_flight_until,
            held.claim_id.as_deref(),
            held.sent_quantity
        ),
        (1, 3, Some(until), Some("c1"), Some(5))
    );
    // A fold is refused while in flight.
    let fold = commit(
        record(key.clone(), 9, 4),
        Some(3),
        &[],
        "2026-11-30T11:06:00Z",
    );
    assert_eq!(store.commit(&fold).await.unwrap(), CommitOutcome::Conflict);
    // The claim expires at `until`; another submitter may take it, and learns that
    // the lapsed claim may have sent.
    let second = claim_at("c2", "2026-11-30T11:10:00Z", "2026-11-30T11:15:00Z");
    let grant = claim_read(&store, &key, 3, &second).await.unwrap().unwrap();
    assert!(grant.previously_sent);
    // The first holder's late outcome is refused: only the current claim records.
    let late = SubmissionUpdate::new(AggregatedStatus::Success, None, Some("mr-0".into()));
    assert!(
        !store
            .record(&key, Some("c1"), &late, t("2026-11-30T11:11:00Z"))
            .await
            .unwrap()
    );

    // Pending outcome after a possibly-billing send: releases, keeps the quantity.
    assert!(
        store
            .record(
                &key,
                Some("c2"),
                &SubmissionUpdate::release(true),
                t("2026-11-30T11:11:00Z")
            )
            .await
            .unwrap()
    );
    let released = store.get(&key).await.unwrap().unwrap();
    assert_eq!(
        (
            released.status,
            released.in_flight_until,
            released.claim_id.clone(),
            released.sent_quantity
        ),
        (AggregatedStatus::Pending, None, None, Some(5))
    );
    assert_eq!(released.attempt_count, 2);
    assert!(
        !released.accepts_folds(),
        "a possibly billed record is final"
    );
    assert_eq!(store.commit(&fold).await.unwrap(), CommitOutcome::Conflict);

    // Terminal outcome: leaves the pending index; later records are refused.
    let third = claim_at("c3", "2026-11-30T11:12:00Z", "2026-11-30T11:17:00Z");
    assert!(
        claim_read(&store, &key, 3, &third)
            .await
            .unwrap()
            .unwrap()
            .previously_sent
    );
    let billed = SubmissionUpdate::new(AggregatedStatus::Success, None, Some("mr-1".into()));
    assert!(
        store
            .record(&key, Some("c3"), &billed, t("2026-11-30T11:12:00Z"))
            .await
            .unwrap()
    );
    let done = store.get(&key).await.unwrap().unwrap();
    assert_eq!(
        (done.status, done.metering_record_id.as_deref()),
        (AggregatedStatus::Success, Some("mr-1"))
    );
    assert!(
        store
            .pending_page(hour("2026-11-30T10"), None)
            .await
            .unwrap()
            .items
            .is_empty()
    );
    let again = SubmissionUpdate::new(AggregatedStatus::Error, Some("X".into()), None);
    assert!(
        !store
            .record(&key, None, &again, t("2026-11-30T11:13:00Z"))
            .await
            .unwrap()
    );
    assert!(
        claim_read(
            &store,
            &key,
            3,
            &claim_at("c4", "2026-11-30T12:00:00Z", "2026-11-30T12:05:00Z")
        )
        .await
        .unwrap()
        .is_none()
    );
    assert!(
        !store
            .record(
                &group("other", "2026-11-30T10"),
                None,
                &billed,
                t("2026-11-30T11:13:00Z")
            )
            .await
            .unwrap()
    );
}

#[tokio::test]
async fn a_definite_no_send_reopens_a_record_only_if_nothing_was_sent_before() {
    let tables = MemoryTables::new();
    let store = tables.aggregated_store();
    let key = group("requests", "2026-11-30T10");
    tables.insert_aggregated(record(key.clone(), 5, 1), t("2026-11-30T11:00:00Z"));
    // Throttled: nothing billed, nothing before -> folds resume.
    let c1 = claim_at("c1", "2026-11-30T11:05:00Z", "2026-11-30T11:10:00Z");
    assert!(
        !claim_read(&store, &key, 1, &c1)
            .await
            .unwrap()
            .unwrap()
            .previously_sent
    );
    let release = SubmissionUpdate::release(false);
    assert!(
        store
            .record(&key, Some("c1"), &release, t("2026-11-30T11:05:01Z"))
            .await
            .unwrap()
    );
    let reopened = store.get(&key).await.unwrap().unwrap();
    assert!(reopened.accepts_folds());
    assert_eq!(reopened.sent_quantity, None);
    // A record without a claim id cannot be written while a live claim holds it.
    let c2 = claim_at("c2", "2026-11-30T11:06:00Z", "2026-11-30T11:10:00Z");
    assert!(claim_read(&store, &key, 1, &c2).await.unwrap().is_some());
    let expire = SubmissionUpdate::new(AggregatedStatus::SubmissionExpired, None, None);
    assert!(
        !store
            .record(&key, None, &expire, t("2026-11-30T11:07:00Z"))
            .await
            .unwrap()
    );
    assert!(
        store
            .record(&key, None, &expire, t("2026-11-30T11:10:00Z"))
            .await
            .unwrap(),
        "the lease has lapsed"
    );
}

#[tokio::test]
async fn a_record_mid_fold_cannot_be_claimed() {
    let tables = MemoryTables::new();
    let store = tables.aggregated_store();
    let key = group("requests", "2026-11-30T10");
    let mut folding = record(key.clone(), 5, 1);
    folding.folding = true;
    tables.insert_aggregated(folding, t("2026-11-30T11:00:00Z"));
    let c1 = claim_at("c1", "2026-11-30T11:05:00Z", "2026-11-30T11:10:00Z");
    assert!(claim_read(&store, &key, 1, &c1).await.unwrap().is_none());
}

#[tokio::test]
async fn aggregated_pending_page_and_put_direct() {
    let tables = MemoryTables::with_page_size(2);
    let store = tables.aggregated_store();
    let now = t("2026-11-30T11:00:00Z");
    for dimension in ["a", "b", "c"] {
        let outcome = store
            .put_direct(&record(group(dimension, "2026-11-30T10"), 1, 1), now)
            .await
            .unwrap();
        assert_eq!(outcome, PutOutcome::Created);
    }
    assert_eq!(
        store
            .put_direct(&record(group("a", "2026-11-30T10"), 9, 1), now)
            .await
            .unwrap(),
        PutOutcome::AlreadyExists
    );
    store
        .put_direct(&record(group("a", "2026-11-30T09"), 1, 1), now)
        .await
        .unwrap();
    let first = store
        .pending_page(hour("2026-11-30T10"), None)
        .await
        .unwrap();
    assert_eq!(first.items.len(), 2);
    let second = store
        .pending_page(hour("2026-11-30T10"), first.next)
        .await
        .unwrap();
    assert_eq!(second.items.len(), 1);
    assert_eq!(second.next, None);
    assert_eq!(
        store
            .get(&group("a", "2026-11-30T10"))
            .await
            .unwrap()
            .unwrap()
            .quantity,
        1
    );
}

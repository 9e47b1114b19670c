//! `DynamoAggregatedStore` against moto: the transactional commit (create, fold,
//! every conflict), claims and submission outcomes, the pending index, direct-submit.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use aws_sdk_dynamodb::types::AttributeValue;
use awsmp_aws::{DynamoAggregatedStore, DynamoUsageStore};
use awsmp_core::memory::claim_read;
use awsmp_core::memory::fixtures::{all_pages, put_row, team_allocation, usage_row};
use awsmp_core::model::{AggregatedRecord, AggregatedStatus, Attr, GroupKey};
use awsmp_core::ports::{
    AggregatedStore, AggregationCommit, Claim, ClaimGrant, CommitOutcome, Page, PortError,
    PutOutcome, RowFinal, SubmissionUpdate, UsageStore,
};
use common::*;
use std::borrow::Borrow;

fn record(key: &GroupKey, quantity: i64, version: u64) -> AggregatedRecord {
    awsmp_core::memory::fixtures::pending_record(key.clone(), "prodcode", quantity, version)
}

struct World {
    _moto: awsmp_local_aws::MotoServer,
    db: aws_sdk_dynamodb::Client,
    usage: DynamoUsageStore,
    aggregated: DynamoAggregatedStore,
}

fn claim(id: &str, now: &str, until: &str) -> Claim {
    Claim {
        id: id.to_string(),
        now: t(now),
        until: t(until),
    }
}

async fn world() -> World {
    let (moto, db) = moto_with_tables().await;
    World {
        usage: DynamoUsageStore::new(db.clone(), USAGE),
        aggregated: DynamoAggregatedStore::new(db.clone(), AGGREGATED).claiming_rows_of(USAGE),
        db,
        _moto: moto,
    }
}

/// Writes `record` as the direct-submit path does, at `now`; the outcome.
async fn put_direct(
    store: &DynamoAggregatedStore,
    record: &AggregatedRecord,
    now: &str,
) -> PutOutcome {
    store.put_direct(record, t(now)).await.unwrap()
}

impl World {
    /// Commits `rows` (license, sort key) into `record`, which must be at `expected`
    /// (`None`: absent).
    async fn try_commit(
        &self,
        record: AggregatedRecord,
        expected: Option<u64>,
        rows: &[impl Borrow<(String, String)>],
        now: &str,
    ) -> Result<CommitOutcome, PortError> {
        let commit = AggregationCommit {
            record,
            expected_version: expected,
            claimed_rows: rows.iter().map(|r| r.borrow().clone()).collect(),
            rows_expire_at: None,
            now: t(now),
        };
        self.aggregated.commit(&commit).await
    }

    /// [`World::try_commit`], which must not fail; whether it committed.
    async fn commit(
        &self,
        record: AggregatedRecord,
        expected: Option<u64>,
        rows: &[impl Borrow<(String, String)>],
        now: &str,
    ) -> CommitOutcome {
        self.try_commit(record, expected, rows, now).await.unwrap()
    }

    /// `key`'s record, if it exists.
    async fn get(&self, key: &GroupKey) -> Option<AggregatedRecord> {
        self.aggregated.get(key).await.unwrap()
    }

    /// The first page of the records pending in hour `h`.
    async fn pending(&self, h: &str) -> Page<AggregatedRecord> {
        self.aggregated.pending_page(hour(h), None).await.unwrap()
    }

    /// Writes `update` to `key`'s record as claim `claim_id` at `now`; whether it applied.
    async fn record(
        &self,
        key: &GroupKey,
        claim_id: Option<&str>,
        update: &SubmissionUpdate,
        now: &str,
    ) -> bool {
        self.aggregated
            .record(key, claim_id, update, t(now))
            .await
            .unwrap()
    }

    /// Claims `key`'s record at `version` with `claim`; the grant, if it was claimable.
    async fn claim(&self, key: &GroupKey, version: u64, claim: &Claim) -> Option<ClaimGrant> {
        claim_read(&self.aggregated, key, version, claim)
            .await
            .unwrap()
    }

    /// Ingests a raw row; returns its (license, sort key).
    async fn raw(&self, timestamp: &str, id: &str, quantity: i64) -> (String, String) {
        let row = usage_row(LICENSE, ACCOUNT, "requests", t(timestamp), quantity, id);
        put_row(&self.usage, &row, t("2026-11-30T10:59:00Z")).await;
        (
            LICENSE.to_string(),
            format!("{ACCOUNT}#requests#{timestamp}#{id}"),
        )
    }

    async fn claim_of(&self, key: &(String, String)) -> Option<Attr> {
        let row = self.usage.get_row(&key.0, &key.1).await.unwrap().unwrap();
        row.attrs.get("aggregatedInto").cloned()
    }

    async fn item(&self, key: &GroupKey) -> std::collections::HashMap<String, AttributeValue> {
        self.db
            .get_item()
            .table_name(AGGREGATED)
            .key("licenseArn", AttributeValue::S(key.license_arn.clone()))
            .key(
                "account_dimension_hour",
                AttributeValue::S(key.aggregated_sort_key()),
            )
            .send()
            .await
            .unwrap()
            .item
            .unwrap()
    }

    /// Writes a seller's direct-submit row of `dimension` in hour 2026-11-30T10 under
    /// `sort_key`: only the documented attributes (no version, attemptCount,
    /// meteringStatus or productCode), `quantity` as given.
    async fn put_seller_row(&self, sort_key: &str, dimension: &str, quantity: AttributeValue) {
        self.db
            .put_item()
            .table_name(AGGREGATED)
            .item("licenseArn", AttributeValue::S(LICENSE.into()))
            .item("account_dimension_hour", AttributeValue::S(sort_key.into()))
            .item("customerAWSAccountId", AttributeValue::S(ACCOUNT.into()))
            .item("dimension", AttributeValue::S(dimension.into()))
            .item("hourBucket", AttributeValue::S("2026-11-30T10".into()))
            .item("quantity", quantity)
            .item("meteringPending", AttributeValue::S("2026-11-30T10".into()))
            .send()
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn commit_creates_then_folds_and_claims_rows_atomically() {
    let w = world().await;
    let key = group("requests", "2026-11-30T10");
    let r1 = w.raw("2026-11-30T10:00:00Z", "a", 1).await;
    let r2 = w.raw("2026-11-30T10:05:00Z", "b", 2).await;
    let late = w.raw("2026-11-30T10:50:00Z", "c", 4).await;

    // GIVEN no record WHEN the first commit lands THEN the record exists and both rows
    // carry the claim.
    let mut created = record(&key, 3, 1);
    created.allocations = Some(team_allocation(3));
    let outcome = w
        .commit(created.clone(), None, &[&r1, &r2], "2026-11-30T11:10:00Z")
        .await;
    assert_eq!(outcome, CommitOutcome::Committed);
    assert_eq!(w.get(&key).await.unwrap(), created);
    let claim = Some(Attr::S(key.aggregated_sort_key()));
    assert_eq!(w.claim_of(&r1).await, claim);
    assert_eq!(w.claim_of(&r2).await, claim);
    assert_eq!(w.claim_of(&late).await, None);
    let item = w.item(&key).await;
    assert_eq!(item["rawRowCount"], AttributeValue::N("2".into()));
    assert_eq!(
        item["meteringPending"],
        AttributeValue::S("2026-11-30T10".into())
    );
    assert_eq!(
        item["hourBucket"],
        AttributeValue::S("2026-11-30T10".into())
    );
    assert_eq!(
        item["createdAt"],
        AttributeValue::S("2026-11-30T11:10:00Z".into())
    );

    // A late row folds in at the next version.
    let folded = record(&key, 7, 2);
    let outcome = w
        .commit(folded.clone(), Some(1), &[&late], "2026-11-30T11:20:00Z")
        .await;
    assert_eq!(outcome, CommitOutcome::Committed);
    assert_eq!(w.get(&key).await.unwrap(), folded);
    assert_eq!(w.claim_of(&late).await, claim);
    let item = w.item(&key).await;
    assert_eq!(item["rawRowCount"], AttributeValue::N("3".into()));
    assert!(
        !item.contains_key("usageAllocations"),
        "allocations removed with the fold"
    );
    assert_eq!(
        item["createdAt"],
        AttributeValue::S("2026-11-30T11:10:00Z".into())
    );
    assert_eq!(
        item["updatedAt"],
        AttributeValue::S("2026-11-30T11:20:00Z".into())
    );
}

#[tokio::test]
async fn a_store_built_without_the_usage_table_commits_nothing() {
    let w = world().await;
    let key = group("requests", "2026-11-30T10");
    let row = w.raw("2026-11-30T10:00:00Z", "a", 1).await;
    // GIVEN the store the submitter and the operator build: no usage table named
    let reader = DynamoAggregatedStore::new(w.db.clone(), AGGREGATED);
    // WHEN it is asked to commit THEN it refuses, saying why, and writes nothing
    let commit = AggregationCommit {
        record: record(&key, 1, 1),
        expected_version: None,
        claimed_rows: vec![row.clone()],
        rows_expire_at: None,
        now: t("2026-11-30T11:10:00Z"),
    };
    let err = reader.commit(&commit).await.unwrap_err();
    assert!(err.to_string().contains("without the usage table"), "{err}");
    assert_eq!(w.get(&key).await, None);
    assert_eq!(w.claim_of(&row).await, None);
}

#[tokio::test]
async fn every_lost_race_is_a_conflict_that_changes_nothing() {
    let w = world().await;
    let key = group("requests", "2026-11-30T10");
    let r1 = w.raw("2026-11-30T10:00:00Z", "a", 1).await;
    let r2 = w.raw("2026-11-30T10:05:00Z", "b", 2).await;
    let r3 = w.raw("2026-11-30T10:06:00Z", "c", 3).await;
    let first = record(&key, 1, 1);
    assert_eq!(
        w.commit(first.clone(), None, &[&r1], "2026-11-30T11:00:00Z")
            .await,
        CommitOutcome::Committed
    );

    // A row finalized meanwhile (no longer pending), for the fourth case.
    w.usage
        .finalize_row(
            &r3.0,
            &r3.1,
            awsmp_core::ports::RowClaim::Uncounted,
            RowFinal::new(awsmp_core::model::RawStatus::AggregationExpired, None),
            t("2026-11-30T11:01:00Z"),
        )
        .await
        .unwrap();
    let ghost = (LICENSE.to_string(), "ghost".to_string());
    for (case, (quantity, version), expected, rows) in [
        (
            "the record already exists (a second aggregator created it first)",
            (2, 1),
            None,
            vec![&r2],
        ),
        ("the version moved on", (3, 6), Some(5), vec![&r2]),
        (
            "a row was already claimed by the first commit",
            (4, 2),
            Some(1),
            vec![&r2, &r1],
        ),
        ("a row was finalized meanwhile", (4, 2), Some(1), vec![&r3]),
        ("a row that does not exist", (4, 2), Some(1), vec![&ghost]),
    ] {
        let outcome = w
            .commit(
                record(&key, quantity, version),
                expected,
                &rows,
                "2026-11-30T11:01:00Z",
            )
            .await;
        assert_eq!(outcome, CommitOutcome::Conflict, "{case}");
    }

    // Nothing of any of them was applied.
    assert_eq!(w.get(&key).await.unwrap(), first);
    assert_eq!(w.claim_of(&r2).await, None);
    assert!(w.usage.get_row(LICENSE, "ghost").await.unwrap().is_none());
}

#[tokio::test]
async fn a_record_in_flight_or_terminal_is_never_folded() {
    let w = world().await;
    let key = group("requests", "2026-11-30T10");
    let r1 = w.raw("2026-11-30T10:00:00Z", "a", 1).await;
    let r2 = w.raw("2026-11-30T10:05:00Z", "b", 2).await;
    w.commit(record(&key, 1, 1), None, &[&r1], "2026-11-30T11:00:00Z")
        .await;
    // A submitter holds it until 11:15.
    let held = w
        .claim(
            &key,
            1,
            &claim("c1", "2026-11-30T11:05:00Z", "2026-11-30T11:15:00Z"),
        )
        .await;
    assert_eq!(
        held.map(|g| g.previously_sent),
        Some(false),
        "first claim: never sent"
    );
    // r2 folded in at version 2, tried at `now`.
    let fold =
        |now: &'static str| w.commit(record(&key, 3, 2), Some(1), std::slice::from_ref(&r2), now);
    assert_eq!(fold("2026-11-30T11:10:00Z").await, CommitOutcome::Conflict);
    // A lapsed claim may have sent: still no fold.
    assert_eq!(fold("2026-11-30T11:15:00Z").await, CommitOutcome::Conflict);
    // Released as definitely not sent (throttled): the fold goes through.
    assert!(
        w.record(
            &key,
            Some("c1"),
            &SubmissionUpdate::release(false),
            "2026-11-30T11:14:00Z"
        )
        .await
    );
    assert_eq!(fold("2026-11-30T11:15:00Z").await, CommitOutcome::Committed);

    // Billed: terminal, out of the pending index, never folded again.
    let update = SubmissionUpdate::new(AggregatedStatus::Success, None, Some("mr-1".into()));
    assert!(w.record(&key, None, &update, "2026-11-30T11:20:00Z").await);
    let r3 = w.raw("2026-11-30T10:07:00Z", "c", 5).await;
    let after = w
        .commit(record(&key, 8, 3), Some(2), &[&r3], "2026-11-30T11:30:00Z")
        .await;
    assert_eq!(after, CommitOutcome::Conflict);
}

#[tokio::test]
async fn commit_refuses_oversized_or_repeating_claims() {
    let w = world().await;
    let key = group("requests", "2026-11-30T10");
    let rows: Vec<(String, String)> = (0..100)
        .map(|i| (LICENSE.to_string(), format!("row-{i}")))
        .collect();
    let err = w
        .try_commit(record(&key, 1, 1), None, &rows, "2026-11-30T11:00:00Z")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("at most 99"), "{err}");
    let err = w
        .try_commit(
            record(&key, 1, 1),
            None,
            &[&rows[0], &rows[0]],
            "2026-11-30T11:00:00Z",
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("same raw row twice"), "{err}");
    assert!(w.get(&key).await.is_none());
}

#[tokio::test]
async fn a_commit_of_99_rows_fills_one_transaction() {
    let w = world().await;
    let key = group("requests", "2026-11-30T10");
    let mut rows = Vec::new();
    for i in 0..99 {
        rows.push(
            w.raw(
                &format!("2026-11-30T10:{:02}:{:02}Z", i / 60, i % 60),
                &format!("e{i}"),
                1,
            )
            .await,
        );
    }
    let outcome = w
        .commit(record(&key, 99, 1), None, &rows, "2026-11-30T11:00:00Z")
        .await;
    assert_eq!(outcome, CommitOutcome::Committed);
    assert_eq!(
        w.item(&key).await["rawRowCount"],
        AttributeValue::N("99".into())
    );
}

#[tokio::test]
async fn claim_and_record_follow_the_submission_contract() {
    let w = world().await;
    let key = group("requests", "2026-11-30T10");
    let r1 = w.raw("2026-11-30T10:00:00Z", "a", 1).await;
    w.commit(record(&key, 1, 1), None, &[&r1], "2026-11-30T11:00:00Z")
        .await;
    let until = t("2026-11-30T11:10:00Z");
    let first = claim("c1", "2026-11-30T11:05:00Z", "2026-11-30T11:10:00Z");
    // Wrong version: skipped.
    assert!(w.claim(&key, 7, &first).await.is_none());
    let grant = w.claim(&key, 1, &first).await.unwrap();
    assert!(!grant.previously_sent);
    // Held: a second submitter cannot take it before the claim expires.
    let early = claim("c2", "2026-11-30T11:09:59Z", "2026-11-30T11:20:00Z");
    assert!(w.claim(&key, 1, &early).await.is_none());
    let held = w.get(&key).await.unwrap();
    assert_eq!(held.in_flight_until, Some(until));
    assert_eq!(held.claim_id.as_deref(), Some("c1"));
    assert_eq!(held.sent_quantity, Some(1));
    assert_eq!(held.attempt_count, 1);
    assert_eq!(held.version, 1);

    // The response was lost: stays pending, claim released, the sent quantity kept.
    assert!(
        w.record(
            &key,
            Some("c1"),
            &SubmissionUpdate::release(true),
            "2026-11-30T11:06:00Z"
        )
        .await
    );
    let released = w.get(&key).await.unwrap();
    assert_eq!(released.in_flight_until, None);
    assert_eq!(released.claim_id, None);
    assert_eq!(released.sent_quantity, Some(1));
    assert_eq!(released.status, AggregatedStatus::Pending);
    assert_eq!(w.pending("2026-11-30T10").await.items.len(), 1);

    // Claimed again (attempt 2): it learns an earlier send may have billed it.
    let second = claim("c2", "2026-11-30T11:07:00Z", "2026-11-30T11:10:00Z");
    let grant = w.claim(&key, 1, &second).await.unwrap();
    assert!(grant.previously_sent);
    // An outcome under the old claim id is refused.
    let error = SubmissionUpdate::new(
        AggregatedStatus::Error,
        Some("InvalidUsageDimensionException".into()),
        None,
    );
    assert!(
        !w.record(&key, Some("c1"), &error, "2026-11-30T11:08:00Z")
            .await
    );
    // And one without a claim id while a live claim holds it.
    assert!(!w.record(&key, None, &error, "2026-11-30T11:08:00Z").await);
    assert!(
        w.record(&key, Some("c2"), &error, "2026-11-30T11:08:00Z")
            .await
    );
    let done = w.get(&key).await.unwrap();
    assert_eq!(done.status, AggregatedStatus::Error);
    assert_eq!(
        done.status_reason.as_deref(),
        Some("InvalidUsageDimensionException")
    );
    assert_eq!(done.attempt_count, 2);
    assert_eq!(done.in_flight_until, None);
    assert!(w.pending("2026-11-30T10").await.items.is_empty());
    // Terminal: neither claim nor record applies any more.
    let late = claim("c3", "2026-11-30T12:00:00Z", "2026-11-30T12:05:00Z");
    assert!(w.claim(&key, 1, &late).await.is_none());
    assert!(
        !w.record(
            &key,
            None,
            &SubmissionUpdate::release(false),
            "2026-11-30T12:00:00Z"
        )
        .await
    );
    // A record that does not exist is not created.
    let missing = group("other", "2026-11-30T10");
    assert!(w.claim(&missing, 0, &first).await.is_none());
    assert!(
        !w.record(&missing, None, &error, "2026-11-30T11:05:00Z")
            .await
    );
    assert!(w.get(&missing).await.is_none());
}

#[tokio::test]
async fn a_record_mid_fold_is_not_claimable_until_its_last_commit() {
    let w = world().await;
    let key = group("requests", "2026-11-30T10");
    let r1 = w.raw("2026-11-30T10:00:00Z", "a", 1).await;
    let r2 = w.raw("2026-11-30T10:01:00Z", "b", 2).await;
    let mut partial = record(&key, 1, 1);
    partial.folding = true;
    w.commit(partial, None, &[&r1], "2026-11-30T11:00:00Z")
        .await;
    let read = w.get(&key).await.unwrap();
    assert!(read.folding);
    let c = claim("c1", "2026-11-30T11:01:00Z", "2026-11-30T11:10:00Z");
    assert!(w.claim(&key, 1, &c).await.is_none());
    // The last commit clears the marker.
    w.commit(record(&key, 3, 2), Some(1), &[&r2], "2026-11-30T11:02:00Z")
        .await;
    assert!(!w.get(&key).await.unwrap().folding);
    assert!(w.claim(&key, 2, &c).await.is_some());
}

#[tokio::test]
async fn pending_page_returns_whole_records_over_several_pages() {
    let w = world().await;
    let aggregated = DynamoAggregatedStore::new(w.db.clone(), AGGREGATED)
        .claiming_rows_of(USAGE)
        .with_page_limit(2);
    for i in 0..5 {
        let key = group(&format!("dim{i}"), "2026-11-30T10");
        put_direct(&aggregated, &record(&key, i, 1), "2026-11-30T11:00:00Z").await;
    }
    let other_hour = record(&group("dim0", "2026-11-30T09"), 1, 1);
    put_direct(&aggregated, &other_hour, "2026-11-30T11:00:00Z").await;
    let pages = all_pages(|cursor| aggregated.pending_page(hour("2026-11-30T10"), cursor)).await;
    assert!(pages.len() >= 3, "{} pages", pages.len());
    let mut all: Vec<_> = pages.into_iter().flat_map(|page| page.items).collect();
    all.sort_by_key(|r| r.quantity);
    assert_eq!(all.len(), 5);
    assert_eq!(all[3], record(&group("dim3", "2026-11-30T10"), 3, 1));
}

#[tokio::test]
async fn put_direct_is_idempotent_and_seller_rows_without_bookkeeping_read_as_version_0() {
    let w = world().await;
    let key = group("requests", "2026-11-30T10");
    let rec = record(&key, 42, 0);
    assert_eq!(
        put_direct(&w.aggregated, &rec, "2026-11-30T11:00:00Z").await,
        PutOutcome::Created
    );
    let mut other = rec.clone();
    other.quantity = 1;
    assert_eq!(
        put_direct(&w.aggregated, &other, "2026-11-30T11:01:00Z").await,
        PutOutcome::AlreadyExists
    );
    assert_eq!(w.get(&key).await.unwrap().quantity, 42);

    // A seller's direct-submit row: only the documented attributes, no version,
    // attemptCount, meteringStatus or productCode.
    let seller = group("storage", "2026-11-30T10");
    let nine = AttributeValue::N("9".into());
    w.put_seller_row(&seller.aggregated_sort_key(), "storage", nine)
        .await;
    let read = w.get(&seller).await.unwrap();
    assert_eq!(read.version, 0);
    assert_eq!(read.attempt_count, 0);
    assert_eq!(read.status, AggregatedStatus::Pending);
    assert_eq!(read.product_code, "");
    assert!(
        w.claim(
            &seller,
            0,
            &claim("c1", "2026-11-30T11:00:00Z", "2026-11-30T11:05:00Z")
        )
        .await
        .is_some()
    );
    assert_eq!(w.get(&seller).await.unwrap().attempt_count, 1);

    // A corrupt seller row is reported, naming the attribute.
    let twelve = AttributeValue::S("twelve".into());
    w.put_seller_row(&format!("{ACCOUNT}#bad#2026-11-30T10"), "bad", twelve)
        .await;
    let err = w
        .aggregated
        .get(&group("bad", "2026-11-30T10"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("quantity"), "{err}");
}

#[tokio::test]
async fn malformed_seller_rows_are_listed_apart_and_closed_by_their_stored_keys() {
    let w = world().await;
    let good = group("requests", "2026-11-30T10");
    put_direct(&w.aggregated, &record(&good, 5, 0), "2026-11-30T11:00:00Z").await;
    // GIVEN an unreadable row and one whose sort key contradicts its attributes
    w.put_seller_row(
        &format!("{ACCOUNT}#storage#2026-11-30T10"),
        "storage",
        AttributeValue::S("twelve".into()),
    )
    .await;
    w.put_seller_row(
        &format!("{ACCOUNT}#storage-typo#2026-11-30T10"),
        "storage",
        AttributeValue::N("3".into()),
    )
    .await;

    // WHEN the pending index is read
    let page = w.pending("2026-11-30T10").await;

    // THEN the good record is there and the two bad ones are listed apart
    assert_eq!(page.items.len(), 1);
    assert_eq!(page.items[0].key, good);
    assert_eq!(page.malformed.len(), 2, "{:?}", page.malformed);
    assert!(
        page.malformed
            .iter()
            .any(|m| m.problem.contains("quantity")),
        "{:?}",
        page.malformed
    );
    assert!(
        page.malformed
            .iter()
            .any(|m| m.sort_key.contains("storage-typo") && m.problem.contains("does not match")),
        "{:?}",
        page.malformed
    );
    // AND each can be closed Error by its stored keys, once
    for item in &page.malformed {
        let reject = || async {
            w.aggregated
                .reject_malformed(item, "MalformedItem: x", None, t("2026-11-30T11:01:00Z"))
                .await
                .unwrap()
        };
        assert!(reject().await, "first close of {item:?}");
        assert!(!reject().await, "second close of {item:?}");
    }
    let after = w.pending("2026-11-30T10").await;
    assert!(after.malformed.is_empty());
    assert_eq!(after.items.len(), 1);
}

#[tokio::test]
async fn the_sweep_finds_pending_records_outside_the_live_hours_only() {
    let w = world().await;
    for h in ["2026-11-25T10", "2026-11-30T10"] {
        let rec = record(&group("requests", h), 1, 0);
        put_direct(&w.aggregated, &rec, "2026-11-30T11:00:00Z").await;
    }
    let live = awsmp_core::time::live_buckets(t("2026-11-30T11:00:00Z"));
    let page = w.aggregated.stray_pending_page(&live, None).await.unwrap();
    let hours: Vec<String> = page.items.iter().map(|r| r.key.hour.to_string()).collect();
    assert_eq!(hours, vec!["2026-11-25T10".to_string()]);
}

//! The aggregator's use case on the in-memory ports: commits, claims, late rows and racing aggregators.

use std::sync::Mutex;

use async_trait::async_trait;

use super::*;
use crate::memory::{
    AggregatedDecorator, Decorator, MemoryAggregatedStore, StoreOp, claim_read, reference_row,
};
use crate::model::{AggregatedStatus, Allocation, Attr, Tag};
use crate::pipeline::testkit::*;
use crate::ports::{AggregationCommit, PortError, SubmissionUpdate, metric};

const NOW: &str = "2026-11-30T10:30:00Z";

fn aggregate_message(key: &GroupKey) -> WorkMessage {
    WorkMessage::Aggregate {
        group: key.clone(),
        flush: false,
        price: None,
    }
}

/// The group most tests fold: license `l`, account A, `requests`, hour 09.
fn requests(l: &str) -> GroupKey {
    group(l, ACCOUNT_A, "requests", "2026-11-30T09")
}

/// A world at [`NOW`] with one `requests` row of 3 at 09:05 for license 1.
struct OneRow {
    now: Instant,
    world: World,
    l: String,
    /// The row's sort key.
    sk: String,
    key: GroupKey,
}

fn one_row() -> OneRow {
    let now = t(NOW);
    let world = World::new(now);
    let l = license(1);
    let sk = world.put(&l, ACCOUNT_A, "requests", "2026-11-30T09:05:00Z", 3);
    let key = requests(&l);
    OneRow {
        now,
        world,
        l,
        sk,
        key,
    }
}

/// `n` `requests` rows of `quantity`, one a second from 09:00:00.
fn put_per_second(world: &World, l: &str, n: u32, quantity: i64) {
    for i in 0..n {
        world.put(
            l,
            ACCOUNT_A,
            "requests",
            &format!("2026-11-30T09:{:02}:{:02}Z", i / 60, i % 60),
            quantity,
        );
    }
}

/// A `requests` row at `ts` whose quantity attribute is the number `quantity`.
fn put_bad_quantity(world: &World, l: &str, ts: &str, quantity: &str) -> String {
    let mut bad = reference_row(l, ACCOUNT_A, "requests", ts, 1);
    bad.attrs
        .insert(attr::QUANTITY.into(), Attr::N(quantity.into()));
    world.put_row(bad)
}

/// One delivery of the group's aggregate message.
async fn try_fold(
    world: &World,
    key: &GroupKey,
    now: Instant,
) -> Result<AggregateReport, PipelineError> {
    world.aggregate(&aggregate_message(key), now).await
}

/// One delivery of the group's aggregate message, which succeeds.
async fn fold(world: &World, key: &GroupKey, now: Instant) -> AggregateReport {
    try_fold(world, key, now).await.unwrap()
}

/// One delivery of the group's aggregate message with `aggregated` as the store.
async fn fold_via(
    world: &World,
    key: &GroupKey,
    now: Instant,
    aggregated: Arc<dyn AggregatedStore>,
) -> Result<AggregateReport, PipelineError> {
    let ports = AggregatePorts {
        aggregated,
        ..world.aggregate_ports()
    };
    aggregate_group(
        &aggregate_message(key),
        now,
        &world.aggregate_settings(),
        &ports,
    )
    .await
}

/// A submitter's claim `id` on the record at `version`, leased for 15 minutes.
async fn claim(
    world: &World,
    key: &GroupKey,
    version: u64,
    id: &str,
    now: Instant,
) -> Option<crate::ports::ClaimGrant> {
    claim_read(&world.aggregated, key, version, &claim_at(id, now, 15))
        .await
        .unwrap()
}

/// The submitter writes `update` to the record (holding `claim_id`, if any).
async fn record_update(
    world: &World,
    key: &GroupKey,
    claim_id: Option<&str>,
    update: &SubmissionUpdate,
    now: Instant,
) {
    world
        .aggregated
        .record(key, claim_id, update, now)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_group_is_counted_and_finalized_by_its_commit_and_rejections_by_cleanup() {
    // GIVEN three valid rows and one bad row in one group
    let now = t(NOW);
    let world = World::new(now);
    let l = license(1);
    let a = world.put(&l, ACCOUNT_A, "requests", "2026-11-30T09:05:00Z", 3);
    let b = world.put(&l, ACCOUNT_A, "requests", "2026-11-30T09:10:00Z", 4);
    let c = world.put(&l, ACCOUNT_A, "requests", "2026-11-30T09:59:59Z", 0);
    let bad = put_bad_quantity(&world, &l, "2026-11-30T09:20:00Z", "1.5");
    let key = requests(&l);

    // WHEN the aggregator handles the group, and cleanup its message
    let report = fold(&world, &key, now).await;
    assert_eq!((report.counted, report.rejected, report.commits), (3, 1, 1));
    let record = world.record(&key).unwrap();
    assert_eq!(
        (record.quantity, record.version, record.status),
        (7, 1, AggregatedStatus::Pending)
    );
    assert_eq!(record.product_code, PRODUCT);
    // The commit counts and finalizes: counted rows carry the claim and are
    // Aggregated, out of the pending index, before cleanup runs.
    for sk in [&a, &b, &c] {
        let row = world.row(&l, sk);
        assert!(row.attrs.contains_key(attr::AGGREGATED_INTO));
        assert!(!row.attrs.contains_key(attr::METERING_PENDING));
        assert_eq!(world.status(&l, sk).as_deref(), Some("Aggregated"));
    }
    assert!(
        !world
            .row(&l, &bad)
            .attrs
            .contains_key(attr::AGGREGATED_INTO)
    );
    let cleanup = world.cleanup_all(now).await;

    // THEN cleanup has only the bad row to reject, with its reason
    assert_eq!((cleanup.aggregated, cleanup.rejected), (0, 1));
    assert_eq!(
        world.status(&l, &bad).as_deref(),
        Some("RejectedClientSide")
    );
    assert_eq!(
        world.reason(&l, &bad).as_deref(),
        Some("NonIntegerQuantity")
    );
    assert_eq!(
        world.metrics.get(
            metric::USAGE_RECORD_REJECTED,
            &[("Reason", "NonIntegerQuantity")]
        ),
        1
    );
}

#[tokio::test]
async fn redelivery_recounts_nothing_and_rows_counted_but_pending_go_to_cleanup() {
    let OneRow {
        now, world, l, key, ..
    } = one_row();
    world.put(&l, ACCOUNT_A, "requests", "2026-11-30T09:06:00Z", 5);
    let message = aggregate_message(&key);

    // GIVEN the first delivery committed (its rows counted and finalized)
    let first = world.aggregate(&message, now).await.unwrap();
    assert_eq!((first.counted, first.commits), (2, 1));
    assert!(
        world.cleanup_queue.drain().is_empty(),
        "nothing left for cleanup"
    );

    // WHEN the message is delivered again (twice)
    let again = world.aggregate(&message, now).await.unwrap();
    world.aggregate(&message, now).await.unwrap();

    // THEN nothing is recounted
    assert_eq!((again.counted, again.recovered, again.commits), (0, 0, 0));
    assert_eq!(world.record(&key).unwrap().quantity, 8);
    assert_eq!(world.record(&key).unwrap().version, 1);

    // AND a row an earlier version counted but left pending is handed to cleanup
    let mut legacy = reference_row(&l, ACCOUNT_A, "requests", "2026-11-30T09:07:00Z", 0);
    legacy.attrs.insert(
        attr::AGGREGATED_INTO.into(),
        Attr::S(key.aggregated_sort_key()),
    );
    let legacy = world.put_row(legacy);
    let recovered = world.aggregate(&message, now).await.unwrap();
    assert_eq!((recovered.counted, recovered.recovered), (0, 1));
    let cleanup = world.cleanup_all(now).await;
    assert_eq!(cleanup.aggregated, 1);
    assert_eq!(world.status(&l, &legacy).as_deref(), Some("Aggregated"));
}

#[tokio::test]
async fn late_rows_fold_into_an_unsubmitted_hour_exactly_once() {
    let OneRow {
        now, world, l, key, ..
    } = one_row();
    fold(&world, &key, now).await;
    world.cleanup_all(now).await;

    let late = world.put(&l, ACCOUNT_A, "requests", "2026-11-30T09:45:00Z", 10);
    let later = t("2026-11-30T10:40:00Z");
    let report = fold(&world, &key, later).await;
    assert_eq!(report.counted, 1);
    let record = world.record(&key).unwrap();
    assert_eq!((record.quantity, record.version), (13, 2));
    world.cleanup_all(later).await;
    assert_eq!(world.status(&l, &late).as_deref(), Some("Aggregated"));
}

#[tokio::test]
async fn late_rows_for_a_submitted_hour_are_rejected_and_reported() {
    let OneRow {
        now, world, l, key, ..
    } = one_row();
    fold(&world, &key, now).await;
    world.cleanup_all(now).await;
    let billed = SubmissionUpdate::new(AggregatedStatus::Success, None, Some("mr-1".into()));
    record_update(&world, &key, None, &billed, now).await;

    let late = world.put(&l, ACCOUNT_A, "requests", "2026-11-30T09:50:00Z", 10);
    let report = fold(&world, &key, now).await;
    assert_eq!((report.counted, report.rejected), (0, 1));
    world.cleanup_all(now).await;
    assert_eq!(
        world.reason(&l, &late).as_deref(),
        Some("HourAlreadySubmitted")
    );
    assert_eq!(world.record(&key).unwrap().quantity, 3);
    assert_eq!(world.metrics.total(metric::LATE_USAGE_AFTER_SUBMISSION), 1);
    assert_eq!(
        world.metrics.get(
            metric::USAGE_RECORD_REJECTED,
            &[("Reason", "HourAlreadySubmitted")]
        ),
        1
    );
    // A redelivered cleanup never counts the rejection twice.
    fold(&world, &key, now).await;
    world.cleanup_all(now).await;
    assert_eq!(world.metrics.total(metric::LATE_USAGE_AFTER_SUBMISSION), 1);
}

#[tokio::test]
async fn a_record_held_by_a_submitter_is_never_folded() {
    let OneRow {
        now, world, l, key, ..
    } = one_row();
    fold(&world, &key, now).await;
    assert!(claim(&world, &key, 1, "c1", now).await.is_some());
    let late = world.put(&l, ACCOUNT_A, "requests", "2026-11-30T09:50:00Z", 10);

    let held = try_fold(&world, &key, now).await;
    assert!(
        matches!(held, Err(PipelineError::RecordInFlight { .. })),
        "{held:?}"
    );
    assert!(
        !world
            .row(&l, &late)
            .attrs
            .contains_key(attr::AGGREGATED_INTO)
    );
    // Once the submitter releases it as definitely not sent (throttled), the late
    // row folds.
    record_update(
        &world,
        &key,
        Some("c1"),
        &SubmissionUpdate::release(false),
        now,
    )
    .await;
    let report = fold(&world, &key, now).await;
    assert_eq!(report.counted, 1);
    assert_eq!(world.record(&key).unwrap().quantity, 13);
}

#[tokio::test]
async fn after_a_send_that_may_have_billed_late_rows_are_late_usage() {
    let OneRow {
        now, world, l, key, ..
    } = one_row();
    fold(&world, &key, now).await;
    // GIVEN a send whose response was lost (released, possibly billed 3) ...
    claim(&world, &key, 1, "c1", now).await.unwrap();
    record_update(
        &world,
        &key,
        Some("c1"),
        &SubmissionUpdate::release(true),
        now,
    )
    .await;
    // ... and another whose submitter died holding the claim (lease lapsed).
    let other = group(&l, ACCOUNT_A, "storage", "2026-11-30T09");
    world.put(&l, ACCOUNT_A, "storage", "2026-11-30T09:05:00Z", 4);
    fold(&world, &other, now).await;
    claim(&world, &other, 1, "c2", now).await.unwrap();
    let late = world.put(&l, ACCOUNT_A, "requests", "2026-11-30T09:50:00Z", 10);
    let late_other = world.put(&l, ACCOUNT_A, "storage", "2026-11-30T09:50:00Z", 10);

    // WHEN late rows arrive after the lease has run out
    let much_later = now + chrono::Duration::minutes(20);
    for k in [&key, &other] {
        let report = fold(&world, k, much_later).await;
        assert_eq!((report.counted, report.rejected), (0, 1));
    }
    world.cleanup_all(much_later).await;

    // THEN the quantity that may be billed never grows: the rows are late usage
    assert_eq!(world.record(&key).unwrap().quantity, 3);
    assert_eq!(world.record(&other).unwrap().quantity, 4);
    for (k, sk) in [(&l, &late), (&l, &late_other)] {
        assert_eq!(world.reason(k, sk).as_deref(), Some("HourAlreadySubmitted"));
    }
}

#[tokio::test]
async fn an_interrupted_fold_resumes_and_only_its_last_commit_makes_it_submittable() {
    let now = t(NOW);
    let world = World::new(now);
    let l = license(1);
    put_per_second(&world, &l, 150, 1);
    let key = requests(&l);
    // GIVEN the second of two commits fails for good (the aggregator dies)
    world.tables.fail_after(
        StoreOp::AggregatedCommit,
        1,
        PortError::Failed {
            operation: "commit",
            message: "crash".into(),
        },
    );
    assert!(try_fold(&world, &key, now).await.is_err());
    // THEN the half-folded record is marked and no submitter may claim it
    let half = world.record(&key).unwrap();
    assert_eq!((half.quantity, half.folding), (99, true));
    assert!(claim(&world, &key, half.version, "c1", now).await.is_none());
    assert!(!crate::aggregate::submission_due(
        &half,
        now,
        ZeroQuantityPolicy::Defer
    ));
    // WHEN the message is redelivered, the fold resumes where it stopped
    let report = fold(&world, &key, now).await;
    assert_eq!(
        (report.counted, report.recovered, report.commits),
        (51, 0, 1)
    );
    let whole = world.record(&key).unwrap();
    assert_eq!((whole.quantity, whole.folding), (150, false));
    assert!(
        claim(&world, &key, whole.version, "c2", now)
            .await
            .is_some()
    );
}

#[tokio::test]
async fn large_groups_commit_in_chunks_of_at_most_99_rows() {
    let now = t(NOW);
    let world = World::new(now);
    let l = license(1);
    put_per_second(&world, &l, 250, 2);
    let key = requests(&l);
    let report = fold(&world, &key, now).await;
    assert_eq!((report.counted, report.commits), (250, 3));
    let record = world.record(&key).unwrap();
    assert_eq!((record.quantity, record.version), (500, 3));
    assert!(
        world
            .tables
            .raw_rows()
            .iter()
            .all(|r| r.attrs.get(attr::METERING_STATUS) == Some(&Attr::S("Aggregated".into()))),
        "every commit finalized its rows"
    );
}

/// An aggregated store where a rival aggregator folds a row in just before our
/// first `conflicts` commits.
struct RivalStore {
    inner: MemoryAggregatedStore,
    world: World,
    conflicts: Mutex<u32>,
    /// Greedy rivals count every pending row (ours too); narrow ones only their own.
    greedy: bool,
}

impl RivalStore {
    fn new(world: &World, conflicts: u32, greedy: bool) -> Self {
        Self {
            inner: world.aggregated.clone(),
            world: world.clone(),
            conflicts: Mutex::new(conflicts),
            greedy,
        }
    }
}

impl Decorator for RivalStore {}

#[async_trait]
impl AggregatedDecorator for RivalStore {
    type Inner = MemoryAggregatedStore;
    fn inner(&self) -> &MemoryAggregatedStore {
        &self.inner
    }

    async fn before_commit(&self, commit: &AggregationCommit) -> Option<CommitOutcome> {
        let rival = {
            let mut left = self.conflicts.lock().unwrap();
            let go = *left > 0;
            *left = left.saturating_sub(1);
            go
        };
        if rival {
            // The rival counts one new row of its own into the same record first.
            let n = self.inner.tables().raw_rows().len();
            let ts = format!("2026-11-30T09:40:{:02}Z", n % 60);
            let key = commit.record.key.clone();
            let sk = self
                .world
                .put(&key.license_arn, ACCOUNT_A, "requests", &ts, 100);
            if self.greedy {
                fold_via(&self.world, &key, commit.now, Arc::new(self.inner.clone()))
                    .await
                    .unwrap();
            } else {
                let row = self.world.row(&key.license_arn, &sk);
                let ctx = GuardrailContext::new(commit.now, PRODUCT);
                let valid = crate::guardrails::validate_row(&row, &ctx).unwrap();
                let existing = self.inner.get(&key).await.unwrap();
                let commits = crate::aggregate::plan_commits(
                    &key,
                    PRODUCT,
                    existing.as_ref(),
                    &[valid],
                    commit.now,
                )
                .unwrap();
                for c in &commits {
                    assert_eq!(
                        self.inner.commit(c).await.unwrap(),
                        CommitOutcome::Committed
                    );
                }
            }
        }
        None
    }
}

#[tokio::test]
async fn a_lost_race_is_re_read_and_recomputed() {
    let OneRow {
        now, world, key, ..
    } = one_row();
    let rival = RivalStore::new(&world, 1, true);

    let report = fold_via(&world, &key, now, Arc::new(rival)).await.unwrap();

    // The rival counted both rows (3 + 100); our retry found them final.
    assert_eq!((report.counted, report.recovered), (0, 0));
    assert_eq!(world.record(&key).unwrap().quantity, 103);
}

#[tokio::test]
async fn endless_contention_fails_the_message_for_redelivery() {
    let OneRow {
        now, world, key, ..
    } = one_row();
    let rival = RivalStore::new(&world, 100, false);
    let result = fold_via(&world, &key, now, Arc::new(rival)).await;
    assert!(
        matches!(
            result,
            Err(PipelineError::CommitContention {
                attempts: MAX_COMMIT_ATTEMPTS,
                ..
            })
        ),
        "{result:?}"
    );
    // Our row stays pending and unclaimed; every rival row is counted exactly once.
    let ours = world
        .tables
        .raw_rows()
        .into_iter()
        .filter(|r| !r.attrs.contains_key(attr::AGGREGATED_INTO))
        .count();
    assert_eq!(ours, 1);
    let total: i64 = world
        .tables
        .raw_rows()
        .iter()
        .filter_map(|r| match r.attrs.get(attr::QUANTITY) {
            Some(Attr::N(q)) => q.parse::<i64>().ok(),
            _ => None,
        })
        .sum();
    assert_eq!(world.record(&key).unwrap().quantity, total - 3);
}

#[tokio::test]
async fn skip_policy_closes_all_zero_groups_without_a_record() {
    let now = t(NOW);
    let mut world = World::new(now);
    world.zero_policy = ZeroQuantityPolicy::Skip;
    let l = license(1);
    let z1 = world.put(&l, ACCOUNT_A, "requests", "2026-11-30T09:05:00Z", 0);
    let z2 = world.put(&l, ACCOUNT_A, "requests", "2026-11-30T09:06:00Z", 0);
    world.put(&l, ACCOUNT_A, "storage", "2026-11-30T09:06:00Z", 0);
    world.put(&l, ACCOUNT_A, "storage", "2026-11-30T09:07:00Z", 4);
    let zero_key = requests(&l);
    let mixed_key = group(&l, ACCOUNT_A, "storage", "2026-11-30T09");

    let report = fold(&world, &zero_key, now).await;
    fold(&world, &mixed_key, now).await;
    world.cleanup_all(now).await;

    assert_eq!((report.zero_rows_closed, report.commits), (2, 0));
    assert!(world.record(&zero_key).is_none());
    assert_eq!(world.status(&l, &z1).as_deref(), Some("Aggregated"));
    assert_eq!(world.status(&l, &z2).as_deref(), Some("Aggregated"));
    // A group with usage still gets its record (its zero rows are counted as 0).
    assert_eq!(world.record(&mixed_key).unwrap().quantity, 4);
    assert!(
        world
            .raw_statuses()
            .iter()
            .all(|(_, s)| s.as_deref() == Some("Aggregated"))
    );
}

#[tokio::test]
async fn a_still_locked_hour_waits_unless_it_is_a_flush() {
    let OneRow {
        now,
        mut world,
        l,
        sk,
        key,
    } = one_row();
    world.lock = MeteringLockHours::new(3).unwrap();
    let early = fold(&world, &key, now).await;
    assert!(early.early);
    assert!(world.record(&key).is_none());
    assert!(world.cleanup_queue.is_empty());
    let flush = WorkMessage::Aggregate {
        group: key.clone(),
        flush: true,
        price: None,
    };
    let report = world.aggregate(&flush, now).await.unwrap();
    assert_eq!(report.counted, 1);
    world.cleanup_all(now).await;
    assert_eq!(world.status(&l, &sk).as_deref(), Some("Aggregated"));
}

#[tokio::test]
async fn vmt_rows_merge_and_mixed_groups_are_rejected() {
    let now = t(NOW);
    let world = World::new(now);
    let l = license(1);
    let tagged = |ts: &str, parts: &[(i64, &str)]| {
        let total = parts.iter().map(|p| p.0).sum();
        let mut row = reference_row(&l, ACCOUNT_A, "requests", ts, total);
        let allocations: Vec<Allocation> = parts
            .iter()
            .map(|(q, team)| Allocation {
                quantity: *q,
                tags: vec![Tag {
                    key: "team".into(),
                    value: team.to_string(),
                }],
            })
            .collect();
        row.attrs.insert(
            attr::USAGE_ALLOCATIONS.into(),
            crate::memory::allocations_attr(&allocations),
        );
        row
    };
    world.put_row(tagged("2026-11-30T09:01:00Z", &[(2, "red"), (3, "blue")]));
    world.put_row(tagged("2026-11-30T09:02:00Z", &[(4, "red")]));
    let key = requests(&l);
    fold(&world, &key, now).await;
    let record = world.record(&key).unwrap();
    assert_eq!(record.quantity, 9);
    let mut allocations = record.allocations.unwrap();
    allocations.sort_by(|a, b| a.tags.cmp(&b.tags));
    assert_eq!(
        allocations.iter().map(|a| a.quantity).collect::<Vec<_>>(),
        vec![3, 6]
    );
    // A late untagged non-zero row cannot join a tagged record.
    let untagged = world.put(&l, ACCOUNT_A, "requests", "2026-11-30T09:03:00Z", 5);
    fold(&world, &key, now).await;
    world.cleanup_all(now).await;
    assert_eq!(
        world.reason(&l, &untagged).as_deref(),
        Some("MixedAllocatedAndUnallocated")
    );
    assert_eq!(world.record(&key).unwrap().quantity, 9);
}

#[tokio::test]
async fn a_refused_cleanup_message_fails_the_delivery_and_redelivery_recovers() {
    let OneRow {
        now,
        world,
        l,
        sk,
        key,
    } = one_row();
    let bad = put_bad_quantity(&world, &l, "2026-11-30T09:20:00Z", "-2");
    world.cleanup_queue.fail_next_send(PortError::Transient {
        operation: "send",
        message: "throttled".into(),
    });
    let failed = try_fold(&world, &key, now).await;
    assert!(matches!(failed, Err(PipelineError::Port(_))), "{failed:?}");
    world.cleanup_queue.fail_where(|_| true);
    let refused = try_fold(&world, &key, now).await;
    assert!(
        matches!(
            refused,
            Err(PipelineError::QueueRejected {
                failed: 1,
                total: 1
            })
        ),
        "{refused:?}"
    );
    world.cleanup_queue.clear_failures();
    let report = fold(&world, &key, now).await;
    // The rejection is screened again and reaches cleanup; the count stands.
    assert_eq!((report.counted, report.rejected), (0, 1));
    world.cleanup_all(now).await;
    assert_eq!(world.status(&l, &sk).as_deref(), Some("Aggregated"));
    assert_eq!(
        world.status(&l, &bad).as_deref(),
        Some("RejectedClientSide")
    );
    assert_eq!(world.record(&key).unwrap().quantity, 3);
}

#[tokio::test]
async fn transient_store_errors_are_retried_with_backoff() {
    let OneRow {
        now, world, key, ..
    } = one_row();
    let blip = || PortError::Transient {
        operation: "x",
        message: "ProvisionedThroughputExceeded".into(),
    };
    world.tables.fail_next(StoreOp::UsageGroupRows, blip());
    world.tables.fail_next(StoreOp::AggregatedCommit, blip());
    world.tables.fail_next(StoreOp::AggregatedCommit, blip());
    let report = fold(&world, &key, now).await;
    assert_eq!(report.counted, 1);
    assert_eq!(world.clock.sleeps().len(), 3);
}

#[tokio::test]
async fn a_cleanup_message_is_the_wrong_kind() {
    let world = World::new(t(NOW));
    let key = requests(&license(1));
    let message = WorkMessage::Cleanup {
        group: key,
        aggregated: vec![],
        rejected: vec![],
    };
    let result = world.aggregate(&message, t(NOW)).await;
    assert!(matches!(
        result,
        Err(PipelineError::WrongMessageKind { .. })
    ));
}

#[tokio::test]
async fn cleanup_work_is_split_into_bounded_messages() {
    let now = t(NOW);
    let world = World::new(now);
    let l = license(1);
    for i in 0..2500 {
        world.put(
            &l,
            ACCOUNT_A,
            "requests",
            &format!("2026-11-30T09:{:02}:{:02}Z#{i}", (i / 60) % 60, i % 60),
            1,
        );
    }
    let key = requests(&l);
    fold(&world, &key, now).await;
    let messages = world.cleanup_queue.messages();
    assert_eq!(messages.len(), 3);
    let cleanup = world.cleanup_all(now).await;
    assert_eq!(cleanup.aggregated + cleanup.rejected, 2500);
}

#[tokio::test]
async fn the_record_keeps_the_unit_price_its_last_priced_message_carried() {
    use crate::charges::{PriceBasis, UnitPrice};
    let OneRow {
        now, world, l, key, ..
    } = one_row();
    let price = |p: i64| UnitPrice {
        agreement_id: "agmt-1".into(),
        basis: PriceBasis::Priced {
            price: rust_decimal::Decimal::new(p, 3),
            currency: "USD".into(),
        },
    };
    let priced = |p: Option<UnitPrice>| WorkMessage::Aggregate {
        group: key.clone(),
        flush: false,
        price: p,
    };
    // A priced message prices the new record.
    world.aggregate(&priced(Some(price(5))), now).await.unwrap();
    assert_eq!(world.record(&key).unwrap().unit_price, Some(price(5)));
    // A later fold sent while the card could not be read keeps it.
    world.put(&l, ACCOUNT_A, "requests", "2026-11-30T09:06:00Z", 1);
    world.aggregate(&priced(None), now).await.unwrap();
    let record = world.record(&key).unwrap();
    assert_eq!((record.quantity, record.unit_price), (4, Some(price(5))));
    // One sent after an amendment re-prices it.
    world.put(&l, ACCOUNT_A, "requests", "2026-11-30T09:07:00Z", 1);
    world.aggregate(&priced(Some(price(7))), now).await.unwrap();
    let record = world.record(&key).unwrap();
    assert_eq!((record.quantity, record.unit_price), (5, Some(price(7))));
}

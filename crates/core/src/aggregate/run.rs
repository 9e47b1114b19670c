//! The aggregator's use case: count one group's pending raw rows into its single
//! aggregated record with the atomic commit (record fold + row claims, ≤ 99 rows per
//! commit), then hand the rows to cleanup. The claim is the commit point: a raw row is
//! counted if and only if it carries `aggregatedInto`, so redelivery, duplicate
//! messages and racing aggregators never count a row twice, and late rows fold in
//! exactly once while the hour is unsubmitted.

use std::collections::HashSet;
use std::sync::Arc;

use tracing::{debug, info, warn};

use crate::aggregate::{FoldError, ZeroQuantityPolicy, plan_aggregation};
use crate::guardrails::GuardrailContext;
use crate::model::{GroupKey, RawStatus, RawUsageRow, ReasonCode, attr};
use crate::pipeline::error::PipelineError;
use crate::pipeline::retry::{RetryPolicy, retry_transient};
use crate::ports::{
    AggregatedStore, Clock, CommitOutcome, RowClaim, RowFinal, UsageStore, WorkMessage, WorkQueue,
};
use crate::retention::Retention;
use crate::time::{Instant, MeteringLockHours, bucket_expired, bucket_unlocked};

/// Commits tried (each after a fresh read) before the message is failed for SQS to
/// redeliver later.
pub const MAX_COMMIT_ATTEMPTS: u32 = 5;

/// Most rows named in one cleanup message: sort keys are at most ~1 KB, so this keeps
/// a message well under the SQS body limit (256 KiB) for realistic keys (~80 bytes).
pub const MAX_ROWS_PER_CLEANUP_MESSAGE: usize = 1000;

/// The ports the aggregator uses.
#[derive(Clone)]
pub struct AggregatePorts {
    /// Raw usage table.
    pub usage: Arc<dyn UsageStore>,
    /// Aggregated-usage table.
    pub aggregated: Arc<dyn AggregatedStore>,
    /// Cleanup work queue.
    pub cleanup_queue: Arc<dyn WorkQueue>,
    /// Clock (backoff sleeps).
    pub clock: Arc<dyn Clock>,
}

/// The aggregator's knobs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AggregateSettings {
    /// The stack's product code (`PRODUCT_CODE`).
    pub product_code: String,
    /// `MeteringLockHours`: a normal (non-flush) message for a still-locked hour is early.
    pub lock: MeteringLockHours,
    /// `ZERO_QUANTITY_POLICY`.
    pub zero_policy: ZeroQuantityPolicy,
    /// `DATA_RETENTION_DAYS`: the `expiresAt` of the rows this stage finalizes.
    pub retention: Retention,
}

/// What one message did.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AggregateReport {
    /// Rows counted by this delivery's commits.
    pub counted: usize,
    /// Rows counted but still pending (counted before commits finalized rows; handed to cleanup).
    pub recovered: usize,
    /// Rows rejected client-side (handed to cleanup).
    pub rejected: usize,
    /// Zero-quantity rows finalized `Aggregated` directly under the `skip` policy.
    pub zero_rows_closed: usize,
    /// Valid rows of a neighbouring group found by the prefix query (left pending).
    pub other_group: usize,
    /// Commits applied.
    pub commits: usize,
    /// The message named a still-locked hour without `flush`; dropped, rediscovered later.
    pub early: bool,
}

/// Aggregates the group of one `WorkMessage::Aggregate` at `now`.
///
/// - Reads the group's rows with the targeted sort-key query and its record. Rows
///   already terminal are ignored; rows claimed but still pending (counted by a
///   version that left their finalization to cleanup) are handed to cleanup.
/// - A record held by a submitter (`inFlightUntil` set, even if the lease has run out:
///   an interrupted send may have billed it) fails the message; SQS retries it later.
/// - A record already submitted: the pending rows get `HourAlreadySubmitted`.
/// - Otherwise guardrails, VMT merge and fold ([`plan_aggregation`]) and one commit per
///   ≤ 99 rows, each conditional on the record version; on a conflict everything is
///   re-read and recomputed, up to [`MAX_COMMIT_ATTEMPTS`] times.
/// - Policy `skip`: a group with no record whose counted rows are all zero creates no
///   record (it would never be sent); its rows are finalized `Aggregated` here, which
///   keeps conservation (they add nothing to any billed quantity). A zero record that
///   exists anyway is handled by the submitter.
/// - Each commit counts its rows and finalizes them (`Aggregated`, out of the pending
///   index) in the same transaction. Only rejected rows (and recovered ones) go to the
///   cleanup queue, in one or more `WorkMessage::Cleanup`; if the queue refuses them the
///   message fails and redelivery re-screens the still-pending rejected rows.
pub async fn aggregate_group(
    message: &WorkMessage,
    now: Instant,
    settings: &AggregateSettings,
    ports: &AggregatePorts,
) -> Result<AggregateReport, PipelineError> {
    let WorkMessage::Aggregate { group, flush } = message else {
        return Err(PipelineError::WrongMessageKind {
            stage: "aggregator",
            kind: "cleanup",
        });
    };
    let mut report = AggregateReport::default();
    if !flush
        && !bucket_unlocked(group.hour, now, settings.lock)
        && !bucket_expired(group.hour, now)
    {
        // Counting a still-open hour early would turn its later usage into late folds;
        // the rows stay pending and discovery enqueues the group once the lock passes.
        info!(group = %group, "hour still locked; message dropped until discovery re-enqueues it");
        report.early = true;
        return Ok(report);
    }

    let policy = RetryPolicy::STORE;
    let ctx = GuardrailContext::new(now, settings.product_code.clone());
    let mut attempt = 0;
    let (claimed, rejected) = loop {
        attempt += 1;
        let rows = retry_transient(ports.clock.as_ref(), policy, || {
            ports.usage.group_rows(group)
        })
        .await?;
        let (candidates, recovered) = split_rows(rows);
        report.recovered = recovered.len();
        let existing =
            retry_transient(ports.clock.as_ref(), policy, || ports.aggregated.get(group)).await?;
        // A live claim may still end "not sent" and reopen the record to folds: wait
        // for it (SQS retries the message). A lapsed claim or a possibly-billed send
        // makes the record's quantity final: the rows become late usage below.
        if let Some(record) = existing.as_ref().filter(|r| r.is_pending())
            && record.in_flight_until.is_some_and(|until| until > now)
        {
            return Err(PipelineError::RecordInFlight {
                group: group.clone(),
            });
        }
        // Each commit finalizes the rows it counts: they get the retention's expiry.
        let plan = plan_aggregation(group, &candidates, existing.as_ref(), &ctx)
            .map_err(|e| fold_error(group, e))?
            .with_row_expiry(settings.retention.expiry(now));
        report.other_group = plan.other_group.len();

        let skip_zero = settings.zero_policy == ZeroQuantityPolicy::Skip
            && existing.is_none()
            && plan.final_record().is_some_and(|r| r.quantity == 0);
        if skip_zero {
            // Final in this write: `Aggregated`, with the retention's expiry.
            let final_row =
                RowFinal::new(RawStatus::Aggregated, None).expiring(settings.retention.expiry(now));
            for commit in &plan.commits {
                for (license, sort_key) in &commit.claimed_rows {
                    let changed = retry_transient(ports.clock.as_ref(), policy, || {
                        ports.usage.finalize_row(
                            license,
                            sort_key,
                            RowClaim::Uncounted,
                            final_row,
                            now,
                        )
                    })
                    .await?;
                    report.zero_rows_closed += usize::from(changed);
                }
            }
            break (recovered, plan.rejected);
        }

        let claimed = recovered;
        let mut conflicted = false;
        for commit in &plan.commits {
            match retry_transient(ports.clock.as_ref(), policy, || {
                ports.aggregated.commit(commit)
            })
            .await?
            {
                // The commit finalized its rows (`Aggregated`): nothing left for cleanup.
                CommitOutcome::Committed => {
                    report.commits += 1;
                    report.counted += commit.claimed_rows.len();
                }
                CommitOutcome::Conflict => {
                    conflicted = true;
                    break;
                }
            }
        }
        if !conflicted {
            break (claimed, plan.rejected);
        }
        debug!(group = %group, attempt, "commit conflict; re-reading the group");
        if attempt >= MAX_COMMIT_ATTEMPTS {
            return Err(PipelineError::CommitContention {
                group: group.clone(),
                attempts: attempt,
            });
        }
        // Rows counted by this attempt's applied commits are claimed now; the re-read
        // finds them among the recovered rows, so they are neither lost nor recounted.
        report.counted = 0;
        report.commits = 0;
        report.zero_rows_closed = 0;
    };
    report.rejected = rejected.len();

    let late = rejected
        .iter()
        .filter(|r| r.reason == ReasonCode::HourAlreadySubmitted)
        .count();
    if late > 0 {
        warn!(group = %group, rows = late, "late usage for an hour already submitted");
    }
    let rejected: Vec<(String, ReasonCode)> = rejected.into_iter().map(Into::into).collect();
    send_cleanup(group, claimed, rejected, ports.cleanup_queue.as_ref()).await?;
    info!(
        group = %group,
        counted = report.counted,
        recovered = report.recovered,
        rejected = report.rejected,
        commits = report.commits,
        "group aggregated"
    );
    Ok(report)
}

/// Splits a group's rows into unclaimed pending rows (to screen and count) and the sort
/// keys of rows already claimed but still pending (counted; cleanup still owed).
fn split_rows(rows: Vec<RawUsageRow>) -> (Vec<RawUsageRow>, Vec<String>) {
    let mut candidates = Vec::new();
    let mut recovered = Vec::new();
    for row in rows.into_iter().filter(RawUsageRow::is_pending) {
        if row.attrs.contains_key(attr::AGGREGATED_INTO) {
            recovered.push(row.sort_key);
        } else {
            candidates.push(row);
        }
    }
    (candidates, recovered)
}

fn fold_error(group: &GroupKey, error: FoldError) -> PipelineError {
    match error {
        FoldError::InFlight { .. } => PipelineError::RecordInFlight {
            group: group.clone(),
        },
        other => PipelineError::Fold(other.to_string()),
    }
}

/// Sends the cleanup work in messages of at most [`MAX_ROWS_PER_CLEANUP_MESSAGE`] rows.
async fn send_cleanup(
    group: &GroupKey,
    claimed: Vec<String>,
    rejected: Vec<(String, ReasonCode)>,
    queue: &dyn WorkQueue,
) -> Result<(), PipelineError> {
    let mut claimed = dedup(claimed);
    let mut rejected = rejected;
    let mut messages = Vec::new();
    while !claimed.is_empty() || !rejected.is_empty() {
        let take_claimed = claimed.len().min(MAX_ROWS_PER_CLEANUP_MESSAGE);
        let aggregated: Vec<String> = claimed.drain(..take_claimed).collect();
        let take_rejected = rejected
            .len()
            .min(MAX_ROWS_PER_CLEANUP_MESSAGE - take_claimed);
        let rejected_part: Vec<(String, ReasonCode)> = rejected.drain(..take_rejected).collect();
        messages.push(WorkMessage::Cleanup {
            group: group.clone(),
            aggregated,
            rejected: rejected_part,
        });
    }
    if messages.is_empty() {
        return Ok(());
    }
    let total = messages.len();
    let sent = queue.send(&messages).await?;
    if sent.failed.is_empty() {
        Ok(())
    } else {
        Err(PipelineError::QueueRejected {
            failed: sent.failed.len(),
            total,
        })
    }
}

fn dedup(keys: Vec<String>) -> Vec<String> {
    let mut seen = HashSet::new();
    keys.into_iter()
        .filter(|k| seen.insert(k.clone()))
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
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
}

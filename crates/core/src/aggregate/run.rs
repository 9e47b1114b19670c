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
/// - Each commit keeps the message's unit price on the record (a message without one
///   leaves the record's as it was).
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
    let WorkMessage::Aggregate {
        group,
        flush,
        price,
    } = message
    else {
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
            .with_row_expiry(settings.retention.expiry(now))
            .priced(price.as_ref());
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
mod tests;

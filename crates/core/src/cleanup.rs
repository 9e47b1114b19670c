//! The cleanup use case: give the raw rows an aggregation message names their terminal
//! status. Rows that carry the aggregation claim become `Aggregated`; rows rejected
//! client-side become `RejectedClientSide` with their reason. Idempotent (a terminal
//! row is left alone), and it never contradicts the commit point: a claimed row is
//! counted, so it is never rejected, and an unclaimed row is never called counted.

use std::collections::HashMap;
use std::sync::Arc;

use tracing::{info, warn};

use crate::model::{Attr, GroupKey, RawStatus, RawUsageRow, ReasonCode, attr};
use crate::pipeline::error::PipelineError;
use crate::pipeline::retry::{RetryPolicy, retry_transient};
use crate::ports::{Clock, MetricsSink, RowClaim, RowFinal, UsageStore, WorkMessage, metric};
use crate::retention::Retention;
use crate::time::Instant;

/// The ports cleanup uses.
#[derive(Clone)]
pub struct CleanupPorts {
    /// Raw usage table.
    pub usage: Arc<dyn UsageStore>,
    /// Metrics.
    pub metrics: Arc<dyn MetricsSink>,
    /// Clock (backoff sleeps).
    pub clock: Arc<dyn Clock>,
}

/// What one message did.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CleanupReport {
    /// Rows moved to `Aggregated`.
    pub aggregated: usize,
    /// Rows moved to `RejectedClientSide`.
    pub rejected: usize,
    /// Rows that were already terminal (redelivery, or age-out got there first).
    pub already_final: usize,
    /// Rows named as counted that carry no claim: left pending for rediscovery.
    pub unclaimed: usize,
    /// Rows named that no longer exist.
    pub missing: usize,
}

impl CleanupReport {
    fn add(&mut self, other: &CleanupReport) {
        self.aggregated += other.aggregated;
        self.rejected += other.rejected;
        self.already_final += other.already_final;
        self.unclaimed += other.unclaimed;
        self.missing += other.missing;
    }
}

/// Applies one `WorkMessage::Cleanup` at `now`: finalizes the raw rows it names, each
/// with `retention`'s `expiresAt` in the same write. Transient store errors are retried with
/// jittered backoff; anything left failing fails the message (SQS redelivers it and
/// the rows already finalized are skipped).
///
/// `UsageRecordRejected{Reason}` (and `LateUsageAfterSubmission` for
/// `HourAlreadySubmitted`) are emitted here, when this write made the row final (its
/// [`FinalWriteId`](crate::ports::FinalWriteId) tells a retry whose answer was lost
/// that it did), so a redelivered message or a racing cleanup never counts a rejection
/// twice and a lost answer never loses it.
pub async fn finalize_named_rows(
    message: &WorkMessage,
    now: Instant,
    retention: Retention,
    ports: &CleanupPorts,
) -> Result<CleanupReport, PipelineError> {
    let WorkMessage::Cleanup {
        group,
        aggregated,
        rejected,
    } = message
    else {
        return Err(PipelineError::WrongMessageKind {
            stage: "cleanup",
            kind: "aggregate",
        });
    };
    let policy = RetryPolicy::STORE;
    let rows: HashMap<String, RawUsageRow> = retry_transient(ports.clock.as_ref(), policy, || {
        ports.usage.group_rows(group)
    })
    .await?
    .into_iter()
    .map(|row| (row.sort_key.clone(), row))
    .collect();
    let mut run = Cleanup {
        group,
        rows,
        now,
        retention,
        ports,
        policy,
        report: CleanupReport::default(),
    };
    for sort_key in aggregated {
        run.settle(sort_key, None).await?;
    }
    for (sort_key, reason) in rejected {
        run.settle(sort_key, Some(*reason)).await?;
    }
    info!(
        group = %group,
        aggregated = run.report.aggregated,
        rejected = run.report.rejected,
        already_final = run.report.already_final,
        unclaimed = run.report.unclaimed,
        "cleanup applied"
    );
    Ok(run.report)
}

/// Applies several messages' worth of reports into one (handler summaries).
pub fn merge_reports<'a>(reports: impl IntoIterator<Item = &'a CleanupReport>) -> CleanupReport {
    let mut total = CleanupReport::default();
    for report in reports {
        total.add(report);
    }
    total
}

struct Cleanup<'a> {
    group: &'a GroupKey,
    rows: HashMap<String, RawUsageRow>,
    now: Instant,
    retention: Retention,
    ports: &'a CleanupPorts,
    policy: RetryPolicy,
    report: CleanupReport,
}

impl Cleanup<'_> {
    /// Settles one row: `reason = None` for a row named as counted.
    async fn settle(
        &mut self,
        sort_key: &str,
        reason: Option<ReasonCode>,
    ) -> Result<(), PipelineError> {
        let license = self.group.license_arn.as_str();
        let row = match self.rows.get(sort_key) {
            Some(row) => Some(row.clone()),
            // Not in the group's range (the message names it anyway): read it by key.
            None => {
                retry_transient(self.ports.clock.as_ref(), self.policy, || {
                    self.ports.usage.get_row(license, sort_key)
                })
                .await?
            }
        };
        let Some(row) = row else {
            warn!(group = %self.group, sort_key, "row named by cleanup no longer exists");
            self.report.missing += 1;
            return Ok(());
        };
        if !row.is_pending() {
            self.report.already_final += 1;
            return Ok(());
        }
        let into = row
            .attrs
            .get(attr::AGGREGATED_INTO)
            .and_then(Attr::as_s)
            .map(str::to_string);
        let claimed = into.is_some();
        // The write re-checks the claim it read: a row counted meanwhile is never
        // rejected, and only a row still counted into that record becomes Aggregated.
        let claim = into
            .as_deref()
            .map_or(RowClaim::Uncounted, RowClaim::Counted);
        let (status, reason) = match (claimed, reason) {
            (true, None) => (RawStatus::Aggregated, None),
            // Counted by an aggregation (a racing one, or an earlier delivery): the
            // commit point says it is counted, so it is Aggregated, never rejected.
            (true, Some(reason)) => {
                warn!(group = %self.group, sort_key, reason = %reason,
                    "row named as rejected carries the claim; it was counted, finalizing Aggregated");
                (RawStatus::Aggregated, None)
            }
            (false, Some(reason)) => (RawStatus::RejectedClientSide, Some(reason)),
            (false, None) => {
                warn!(group = %self.group, sort_key,
                    "row named as counted carries no claim; leaving it pending for rediscovery");
                self.report.unclaimed += 1;
                return Ok(());
            }
        };
        // One write across its retries: one id, so a retry that finds it applied (the
        // answer was lost) still answers `true`, and the metric below is counted.
        let outcome = RowFinal::new(status, reason).expiring(self.retention.expiry(self.now));
        let changed = retry_transient(self.ports.clock.as_ref(), self.policy, || {
            self.ports
                .usage
                .finalize_row(license, sort_key, claim, outcome, self.now)
        })
        .await?;
        if !changed {
            self.report.already_final += 1;
            return Ok(());
        }
        match reason {
            None => self.report.aggregated += 1,
            Some(reason) => {
                self.report.rejected += 1;
                warn!(group = %self.group, sort_key, reason = %reason, "raw row rejected client-side");
                self.ports.metrics.count(
                    metric::USAGE_RECORD_REJECTED,
                    &[("Reason", reason.as_str())],
                    1,
                );
                if reason == ReasonCode::HourAlreadySubmitted {
                    self.ports
                        .metrics
                        .count(metric::LATE_USAGE_AFTER_SUBMISSION, &[], 1);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::memory::{StoreOp, reference_row};
    use crate::pipeline::testkit::*;
    use crate::ports::PortError;

    const NOW: &str = "2026-11-30T10:30:00Z";

    fn claimed(world: &World, license_arn: &str, ts: &str) -> String {
        let mut row = reference_row(license_arn, ACCOUNT_A, "requests", ts, 1);
        row.attrs.insert(
            attr::AGGREGATED_INTO.into(),
            Attr::S("111122223333#requests#2026-11-30T09".into()),
        );
        world.put_row(row)
    }

    /// The group every test's rows are in.
    fn group_09(license_arn: &str) -> GroupKey {
        group(license_arn, ACCOUNT_A, "requests", "2026-11-30T09")
    }

    /// A cleanup message naming `sort_keys` as counted and nothing as rejected.
    fn counted_message(license_arn: &str, sort_keys: &[&str]) -> WorkMessage {
        WorkMessage::Cleanup {
            group: group_09(license_arn),
            aggregated: sort_keys.iter().map(|k| k.to_string()).collect(),
            rejected: vec![],
        }
    }

    /// Applies `message` at [`NOW`], as the cleanup Lambda would.
    async fn apply(world: &World, message: &WorkMessage) -> Result<CleanupReport, PipelineError> {
        finalize_named_rows(message, t(NOW), world.retention, &world.cleanup_ports()).await
    }

    /// The next `times` finalize writes are throttled.
    fn throttle(world: &World, times: u32) {
        for _ in 0..times {
            world.tables.fail_next(
                StoreOp::UsageFinalizeRow,
                PortError::Transient {
                    operation: "UpdateItem",
                    message: "ThrottlingException".into(),
                },
            );
        }
    }

    #[tokio::test]
    async fn only_claimed_rows_become_aggregated_and_claimed_rows_are_never_rejected() {
        let world = World::new(t(NOW));
        let l = license(1);
        let counted = claimed(&world, &l, "2026-11-30T09:01:00Z");
        let not_counted = world.put(&l, ACCOUNT_A, "requests", "2026-11-30T09:02:00Z", 1);
        let counted_but_named_rejected = claimed(&world, &l, "2026-11-30T09:03:00Z");
        let rejected = world.put(&l, ACCOUNT_A, "requests", "2026-11-30T09:04:00Z", 1);
        let message = WorkMessage::Cleanup {
            group: group_09(&l),
            aggregated: vec![
                counted.clone(),
                not_counted.clone(),
                "111122223333#requests#gone".into(),
            ],
            rejected: vec![
                (
                    counted_but_named_rejected.clone(),
                    ReasonCode::TimestampOutOfWindow,
                ),
                (rejected.clone(), ReasonCode::TimestampOutOfWindow),
            ],
        };

        let report = apply(&world, &message).await.unwrap();

        for (sort_key, status) in [
            (&counted, Some("Aggregated")),
            (&not_counted, None),
            (&counted_but_named_rejected, Some("Aggregated")),
        ] {
            assert_eq!(world.status(&l, sort_key).as_deref(), status, "{sort_key}");
        }
        assert!(
            world
                .row(&l, &not_counted)
                .attrs
                .contains_key(attr::METERING_PENDING)
        );
        assert_eq!(
            world.reason(&l, &rejected).as_deref(),
            Some("TimestampOutOfWindow")
        );
        assert_eq!(
            report,
            CleanupReport {
                aggregated: 2,
                rejected: 1,
                already_final: 0,
                unclaimed: 1,
                missing: 1
            }
        );

        // Redelivery: nothing changes, nothing is counted twice.
        let again = apply(&world, &message).await.unwrap();
        assert_eq!(
            (again.aggregated, again.rejected, again.already_final),
            (0, 0, 3)
        );
        assert_eq!(world.metrics.total(metric::USAGE_RECORD_REJECTED), 1);
    }

    #[tokio::test]
    async fn throttled_writes_are_retried_with_jittered_backoff() {
        let world = World::new(t(NOW));
        let l = license(1);
        let sk = claimed(&world, &l, "2026-11-30T09:01:00Z");
        throttle(&world, 2);
        let report = apply(&world, &counted_message(&l, &[&sk])).await.unwrap();
        assert_eq!(report.aggregated, 1);
        assert_eq!(world.clock.sleeps().len(), 2);

        // Persistent throttling fails the message (SQS redelivers it later).
        let sk2 = claimed(&world, &l, "2026-11-30T09:02:00Z");
        throttle(&world, RetryPolicy::STORE.attempts);
        let failed = apply(&world, &counted_message(&l, &[&sk2])).await;
        assert!(
            matches!(
                failed,
                Err(PipelineError::Port(PortError::Transient { .. }))
            ),
            "{failed:?}"
        );
        assert_eq!(world.status(&l, &sk2), None);
    }

    #[tokio::test]
    async fn a_rejection_whose_answer_was_lost_is_counted_once() {
        // GIVEN a late row, and a usage store whose first final write takes effect and
        // then loses its answer (a timeout; the retry's condition then fails)
        let world = World::new(t(NOW));
        let l = license(1);
        let late = world.put(&l, ACCOUNT_A, "requests", "2026-11-30T09:04:00Z", 1);
        let message = WorkMessage::Cleanup {
            group: group_09(&l),
            aggregated: vec![],
            rejected: vec![(late.clone(), ReasonCode::HourAlreadySubmitted)],
        };
        let lossy = Arc::new(LostAnswers::new(
            world.usage.clone(),
            StoreOp::UsageFinalizeRow,
            1,
        ));
        let ports = CleanupPorts {
            usage: lossy.clone(),
            ..world.cleanup_ports()
        };

        // WHEN cleanup rejects it (the retry finds its own write applied)
        let report = finalize_named_rows(&message, t(NOW), world.retention, &ports)
            .await
            .unwrap();

        // THEN the rejection and its metrics are counted, once
        assert!(lossy.exhausted());
        assert_eq!(
            world.reason(&l, &late).as_deref(),
            Some("HourAlreadySubmitted")
        );
        assert_eq!((report.rejected, report.already_final), (1, 0));
        assert_eq!(
            world.metrics.get(
                metric::USAGE_RECORD_REJECTED,
                &[("Reason", "HourAlreadySubmitted")]
            ),
            1
        );
        assert_eq!(world.metrics.total(metric::LATE_USAGE_AFTER_SUBMISSION), 1);

        // AND a redelivery counts nothing more
        let again = apply(&world, &message).await.unwrap();
        assert_eq!((again.rejected, again.already_final), (0, 1));
        assert_eq!(world.metrics.total(metric::USAGE_RECORD_REJECTED), 1);
        assert_eq!(world.metrics.total(metric::LATE_USAGE_AFTER_SUBMISSION), 1);
    }

    #[tokio::test]
    async fn an_aggregate_message_is_the_wrong_kind() {
        let world = World::new(t(NOW));
        let message = WorkMessage::Aggregate {
            group: group_09(&license(1)),
            flush: false,
            price: None,
        };
        let result = apply(&world, &message).await;
        assert!(matches!(
            result,
            Err(PipelineError::WrongMessageKind {
                stage: "cleanup",
                ..
            })
        ));
    }
}

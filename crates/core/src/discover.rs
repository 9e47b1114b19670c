//! The discoverer's use case: find pending raw usage through the sparse
//! `metering_pending` index (never a table scan) and enqueue one aggregation message per
//! `(licenseArn, account, dimension, hour)` group: deprovisioning flushes first (lock
//! bypassed, onto their own queue), then completed hours oldest-first; then sweep the
//! index for rows no hour query visits (expired hours, non-bucket markers). Stops
//! cleanly at the budget's deadline and reports what it left for the next run.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

use chrono::Duration;
use tracing::{error, info, warn};

use crate::guardrails::{self, GuardrailContext};
use crate::model::{Attr, GroupKey, RawStatus, RawUsageRow, ReasonCode, SubscriptionStatus, attr};
use crate::pipeline::budget::Budget;
use crate::pipeline::error::PipelineError;
use crate::pipeline::retry::{RetryPolicy, retry_transient};
use crate::ports::{
    Clock, MetricsSink, PendingRawRef, RowClaim, RowFinal, SubscriberStore, UsageStore,
    WorkMessage, WorkQueue, metric,
};
use crate::retention::Retention;
use crate::time::{self, HourBucket, Instant, MeteringLockHours};

/// Default minutes before `deprovisioningExpiry` by which the open hour is flushed: one
/// submitter period (`rate(5 minutes)`) for the next submitter run to send it, plus a
/// minute for the call itself. Any larger margin only moves the last billable minute
/// earlier; a smaller one risks the send landing after the window closed.
///
/// With a discoverer every 15 minutes, the flush happens in the last run at or before
/// `expiry - margin`, so usage written up to 6 to 21 minutes (with this default) before
/// `deprovisioningExpiry` is billed; later rows for that hour become
/// `HourAlreadySubmitted` once the record is sent (reported, metric
/// `LateUsageAfterSubmission`).
pub const DEFAULT_FLUSH_MARGIN_MINUTES: i64 = 6;

/// Minutes between discoverer runs (the templates' `rate(15 minutes)`). The open hour
/// is flushed by the last run that still comes before `expiry - margin`: waiting for a
/// run inside the margin would miss the window whenever no run falls in it (two times
/// in three with a 10-minute margin and a 15-minute schedule).
pub const DISCOVERY_PERIOD_MINUTES: i64 = 15;

/// The ports the discoverer uses.
#[derive(Clone)]
pub struct DiscoverPorts {
    /// Raw usage table.
    pub usage: Arc<dyn UsageStore>,
    /// Subscribers table (deprovisioning index).
    pub subscribers: Arc<dyn SubscriberStore>,
    /// Normal aggregation work.
    pub work_queue: Arc<dyn WorkQueue>,
    /// Deprovisioning-flush work (consumed ahead of normal work).
    pub deprovision_queue: Arc<dyn WorkQueue>,
    /// Metrics.
    pub metrics: Arc<dyn MetricsSink>,
    /// Clock (budget checks only; decisions use the run's `now`).
    pub clock: Arc<dyn Clock>,
}

/// The discoverer's knobs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscoverSettings {
    /// The stack's product code (for judging unroutable rows).
    pub product_code: String,
    /// `MeteringLockHours`.
    pub lock: MeteringLockHours,
    /// The open hour of a deprovisioning license is flushed by `expiry - margin`.
    pub flush_margin: Duration,
    /// Time between discoverer runs (see [`DISCOVERY_PERIOD_MINUTES`]).
    pub discovery_period: Duration,
    /// `DATA_RETENTION_DAYS`: the `expiresAt` of the rows it rejects or ages out.
    pub retention: Retention,
}

impl DiscoverSettings {
    /// Settings with the default flush margin and age-out lookback, keeping every item.
    pub fn new(product_code: impl Into<String>, lock: MeteringLockHours) -> Self {
        DiscoverSettings {
            product_code: product_code.into(),
            lock,
            flush_margin: Duration::minutes(DEFAULT_FLUSH_MARGIN_MINUTES),
            discovery_period: Duration::minutes(DISCOVERY_PERIOD_MINUTES),
            retention: Retention::FOREVER,
        }
    }
}

/// What one run did, and what it left.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DiscoverReport {
    /// Flush groups enqueued on the deprovisioning queue.
    pub flush_groups: usize,
    /// Normal groups enqueued on the work queue.
    pub groups: usize,
    /// Rows the index could not place in a group, rejected here (see [`discover`]).
    pub rejected_rows: usize,
    /// Raw rows aged out (`AggregationExpired`).
    pub expired_rows: usize,
    /// Aged-out-bucket rows that had already been counted, finalized `Aggregated`.
    pub counted_rows_finalized: usize,
    /// Messages the queues refused (their rows stay pending and are found again).
    pub unsent_messages: usize,
    /// Buckets not (fully) visited because the deadline came; the next run does them.
    pub unvisited_buckets: Vec<String>,
    /// Why the deprovisioning flush was skipped, if it was.
    pub flush_error: Option<String>,
    /// Rows pending under a non-bucket `meteringPending`, re-filed under their hour.
    pub refiled_rows: usize,
    /// The sweep of the pending index did not finish before the deadline.
    pub sweep_incomplete: bool,
}

impl DiscoverReport {
    /// Whether the run covered everything it meant to.
    pub fn complete(&self) -> bool {
        self.unvisited_buckets.is_empty()
            && self.flush_error.is_none()
            && self.unsent_messages == 0
            && !self.sweep_incomplete
    }
}

/// Which pass a bucket walk belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pass {
    /// Deprovisioning flush: only the listed licenses, onto the deprovisioning queue.
    Flush,
    /// Normal work: every license except the flushing ones.
    Normal,
}

/// Runs one discovery at `now` (the triggering event's time, so a run replays).
///
/// Order: (1) deprovisioning flush: for every license the subscribers table lists as
/// `deprovisioning`, its pending groups in every completed live hour (lock bypassed) and,
/// once `now >= deprovisioningExpiry - flush_margin`, in the current open hour, onto the
/// deprovisioning queue with `flush = true`; (2) completed unlocked hours oldest-first
/// for everyone else, onto the work queue; (3) the sweep of the whole sparse index
/// (`Run::sweep`): age-out of rows in expired hours, however old, and re-filing or
/// rejection of rows pending under a value that is not an hour bucket.
///
/// Rows the index cannot place in a findable group (projection lacks the account or the
/// dimension, the sort key does not start with `<account>#<dimension>#<hour>`, or that
/// hour is not the `meteringPending` bucket the row was found in) are
/// read and judged here with the per-row guardrails and finalized `RejectedClientSide`
/// directly: the discoverer has no cleanup queue, and such a row can never be counted
/// (the aggregator's targeted query would never find it), so there is no claim to
/// respect. A row that passes the guardrails (`meteringPending` merely names another
/// hour than its valid timestamp) is routed to the group its timestamp names.
///
/// A failing subscribers read skips the flush (reported), never normal metering.
/// A store failure ends the run with an error; everything done so far stands. A row's
/// final write (rejection, age-out) is retried when transient first, as one write, so
/// a lost answer neither ends the run nor loses the metric.
pub async fn discover(
    now: Instant,
    settings: &DiscoverSettings,
    ports: &DiscoverPorts,
    budget: Budget,
) -> Result<DiscoverReport, PipelineError> {
    let mut run = Run {
        now,
        settings,
        ports,
        budget,
        report: DiscoverReport::default(),
        seen: HashSet::new(),
    };
    let current = HourBucket::containing(now);

    let mut flushing = BTreeSet::new();
    let mut open_hour_due = BTreeSet::new();
    match ports.subscribers.deprovisioning().await {
        Ok(rows) => {
            for row in rows
                .into_iter()
                .filter(|r| r.subscription_status == Some(SubscriptionStatus::Deprovisioning))
            {
                // No expiry recorded: the window's end is unknown, so flush the open hour now.
                let due = row.deprovisioning_expiry.is_none_or(|expiry| {
                    now >= expiry - settings.flush_margin - settings.discovery_period
                });
                if due {
                    open_hour_due.insert(row.license_arn.clone());
                }
                flushing.insert(row.license_arn);
            }
        }
        Err(e) => {
            error!(error = %e, "deprovisioning index unreadable; flush skipped this run");
            run.report.flush_error = Some(e.to_string());
        }
    }

    if !flushing.is_empty() {
        let mut buckets: Vec<HourBucket> = time::live_buckets(now)
            .into_iter()
            .filter(|b| *b < current)
            .collect();
        if !open_hour_due.is_empty() {
            buckets.push(current);
        }
        for (i, bucket) in buckets.iter().enumerate() {
            let licenses = if *bucket == current {
                &open_hour_due
            } else {
                &flushing
            };
            if !run.walk(*bucket, Pass::Flush, licenses).await? {
                run.leave(&buckets[i..]);
                return Ok(run.finish());
            }
        }
    }

    let buckets = time::completed_buckets(now, settings.lock);
    for (i, bucket) in buckets.iter().enumerate() {
        if !run.walk(*bucket, Pass::Normal, &flushing).await? {
            run.leave(&buckets[i..]);
            return Ok(run.finish());
        }
    }

    if !run.sweep().await? {
        run.report.sweep_incomplete = true;
    }
    Ok(run.finish())
}

/// State of one discovery run.
struct Run<'a> {
    now: Instant,
    settings: &'a DiscoverSettings,
    ports: &'a DiscoverPorts,
    budget: Budget,
    report: DiscoverReport,
    /// Groups already enqueued this run (a group's rows span pages and passes).
    seen: HashSet<GroupKey>,
}

impl Run<'_> {
    fn leave(&mut self, buckets: &[HourBucket]) {
        warn!(
            left = buckets.len(),
            "deadline reached; leaving buckets for the next run"
        );
        self.report
            .unvisited_buckets
            .extend(buckets.iter().map(|b| b.to_string()));
    }

    fn finish(self) -> DiscoverReport {
        if !self.report.complete() {
            self.ports
                .metrics
                .count(metric::INCOMPLETE_RUN, &[("Function", "discoverer")], 1);
        }
        info!(
            flush_groups = self.report.flush_groups,
            groups = self.report.groups,
            rejected = self.report.rejected_rows,
            expired = self.report.expired_rows,
            unvisited = self.report.unvisited_buckets.len(),
            "discovery finished"
        );
        self.report
    }

    /// Walks every page of one bucket. `licenses` are the flushing licenses: the only
    /// ones taken in the flush pass, the ones skipped in the normal pass. Returns
    /// `Ok(false)` when the deadline came first.
    async fn walk(
        &mut self,
        bucket: HourBucket,
        pass: Pass,
        licenses: &BTreeSet<String>,
    ) -> Result<bool, PipelineError> {
        let mut cursor = None;
        loop {
            if self.budget.exhausted(self.ports.clock.as_ref()) {
                return Ok(false);
            }
            let page = self.ports.usage.pending_page(bucket, cursor).await?;
            let mut messages = Vec::new();
            for pending in page.items {
                let flushing = licenses.contains(&pending.license_arn);
                if flushing != (pass == Pass::Flush) {
                    continue;
                }
                let Some(group) = self.locate(bucket, &pending).await? else {
                    continue;
                };
                if self.seen.insert(group.clone()) {
                    messages.push(WorkMessage::Aggregate {
                        group,
                        flush: pass == Pass::Flush,
                    });
                }
            }
            self.send(pass, messages).await?;
            match page.next {
                Some(next) => cursor = Some(next),
                None => return Ok(true),
            }
        }
    }

    async fn send(&mut self, pass: Pass, messages: Vec<WorkMessage>) -> Result<(), PipelineError> {
        if messages.is_empty() {
            return Ok(());
        }
        let queue = match pass {
            Pass::Flush => self.ports.deprovision_queue.as_ref(),
            Pass::Normal => self.ports.work_queue.as_ref(),
        };
        let sent = queue.send(&messages).await?;
        let accepted = messages.len() - sent.failed.len().min(messages.len());
        if !sent.failed.is_empty() {
            // The rows stay pending; the next run finds them again.
            warn!(
                failed = sent.failed.len(),
                "queue refused work messages; their groups are retried next run"
            );
            self.report.unsent_messages += sent.failed.len();
            for index in &sent.failed {
                if let Some(WorkMessage::Aggregate { group, .. }) = messages.get(*index) {
                    self.seen.remove(group);
                }
            }
        }
        match pass {
            Pass::Flush => self.report.flush_groups += accepted,
            Pass::Normal => self.report.groups += accepted,
        }
        Ok(())
    }

    /// The group a pending index entry belongs to, or `None` when the row was judged
    /// and rejected here (or vanished meanwhile).
    async fn locate(
        &mut self,
        bucket: HourBucket,
        pending: &PendingRawRef,
    ) -> Result<Option<GroupKey>, PipelineError> {
        if let (Some(account), Some(dimension)) =
            (&pending.customer_aws_account_id, &pending.dimension)
            && let Some(hour) = hour_in_sort_key(&pending.sort_key, account, dimension)
            && hour == bucket
        {
            return Ok(Some(GroupKey {
                license_arn: pending.license_arn.clone(),
                customer_aws_account_id: account.clone(),
                dimension: dimension.clone(),
                hour,
            }));
        }
        // The index cannot place it, or `meteringPending` names another hour than its
        // timestamp (a future or out-of-window timestamp filed under a completed hour
        // would otherwise never be judged): read it and let the guardrails decide.
        self.judge_unroutable(pending).await
    }

    /// Reads a row the index could not place and runs the per-row guardrails on it.
    async fn judge_unroutable(
        &mut self,
        pending: &PendingRawRef,
    ) -> Result<Option<GroupKey>, PipelineError> {
        let Some(row) = self
            .ports
            .usage
            .get_row(&pending.license_arn, &pending.sort_key)
            .await?
        else {
            return Ok(None);
        };
        if !row.is_pending() {
            return Ok(None);
        }
        match guardrails::validate_row(
            &row,
            &GuardrailContext::new(self.now, self.settings.product_code.clone()),
        ) {
            Ok(valid) => Ok(Some(GroupKey {
                license_arn: valid.license_arn,
                customer_aws_account_id: valid.customer_aws_account_id,
                dimension: valid.dimension,
                hour: HourBucket::containing(valid.timestamp),
            })),
            Err(reason) => {
                self.reject(&row, reason).await?;
                Ok(None)
            }
        }
    }

    async fn reject(&mut self, row: &RawUsageRow, reason: ReasonCode) -> Result<(), PipelineError> {
        let outcome = RowFinal::new(RawStatus::RejectedClientSide, Some(reason))
            .expiring(self.settings.retention.expiry(self.now));
        let changed = self.finalize(row, RowClaim::Uncounted, outcome).await?;
        if changed {
            warn!(
                license = %row.license_arn,
                sort_key = %row.sort_key,
                reason = %reason,
                "row rejected client-side: the index cannot place it in a group"
            );
            self.ports.metrics.count(
                metric::USAGE_RECORD_REJECTED,
                &[("Reason", reason.as_str())],
                1,
            );
            self.report.rejected_rows += 1;
        }
        Ok(())
    }

    /// Makes `row` final with `outcome` (one write: one [`RowFinal::write_id`] across
    /// its retries), retrying transient failures: `true` when this write made the
    /// transition, even if the answer of the attempt that applied it was lost, so the
    /// caller counts its metric exactly once.
    async fn finalize(
        &self,
        row: &RawUsageRow,
        claim: RowClaim<'_>,
        outcome: RowFinal,
    ) -> Result<bool, PipelineError> {
        Ok(
            retry_transient(self.ports.clock.as_ref(), RetryPolicy::STORE, || {
                self.ports.usage.finalize_row(
                    &row.license_arn,
                    &row.sort_key,
                    claim,
                    outcome,
                    self.now,
                )
            })
            .await?,
        )
    }

    /// Sweeps the whole sparse pending index (a Scan of the index, which holds only
    /// pending rows) for what the per-hour queries never visit, so that every row ends
    /// terminal: rows pending in an hour that left the window (however old) are aged
    /// out ([`Run::expire`]); rows whose `meteringPending` is not an hour bucket (e.g.
    /// `"true"`, as other samples write) are re-filed under the hour their timestamp
    /// names when it is live (metered from the next run on), and otherwise rejected
    /// with the guardrails' reason (or `MalformedMeteringPending`). Rows pending in a
    /// future hour are left for when it comes. Returns `Ok(false)` when the deadline
    /// came first (the next run sweeps again).
    async fn sweep(&mut self) -> Result<bool, PipelineError> {
        let live = time::live_buckets(self.now);
        let current = HourBucket::containing(self.now);
        let mut cursor = None;
        loop {
            if self.budget.exhausted(self.ports.clock.as_ref()) {
                return Ok(false);
            }
            let page = self.ports.usage.stray_pending_page(&live, cursor).await?;
            for stray in page.items {
                let Some(row) = self
                    .ports
                    .usage
                    .get_row(&stray.license_arn, &stray.sort_key)
                    .await?
                else {
                    continue;
                };
                if !row.is_pending() {
                    continue;
                }
                match stray.metering_pending.parse::<HourBucket>() {
                    Ok(bucket) if bucket > current => {}
                    Ok(bucket) => self.expire(&row, bucket).await?,
                    Err(_) => self.refile(&row, &stray.metering_pending).await?,
                }
            }
            match page.next {
                Some(next) => cursor = Some(next),
                None => return Ok(true),
            }
        }
    }

    /// A row pending under a value that is not an hour bucket: re-filed under its
    /// timestamp's hour when the guardrails accept it and that hour is live, else
    /// rejected.
    async fn refile(&mut self, row: &RawUsageRow, marker: &str) -> Result<(), PipelineError> {
        if row.attrs.contains_key(attr::AGGREGATED_INTO) {
            // Counted, then its marker was rewritten by someone else: it is counted.
            return self.expire(row, HourBucket::containing(self.now)).await;
        }
        let ctx = GuardrailContext::new(self.now, self.settings.product_code.clone());
        match guardrails::validate_row(row, &ctx) {
            Ok(valid) => {
                let hour = HourBucket::containing(valid.timestamp);
                let repaired = self
                    .ports
                    .usage
                    .repair_pending(&row.license_arn, &row.sort_key, marker, hour, self.now)
                    .await?;
                if repaired {
                    warn!(license = %row.license_arn, sort_key = %row.sort_key, marker, hour = %hour,
                        "meteringPending was not an hour bucket; re-filed under the row's hour");
                    self.report.refiled_rows += 1;
                }
                Ok(())
            }
            Err(reason) => {
                let reason = if reason == ReasonCode::MalformedTimestamp {
                    ReasonCode::MalformedMeteringPending
                } else {
                    reason
                };
                self.reject(row, reason).await
            }
        }
    }

    /// Ages out one row still pending in an expired bucket. A row that already carries
    /// an aggregation claim was counted into its aggregated record, so it is finalized
    /// `Aggregated` (what cleanup would have done), never `AggregationExpired`.
    async fn expire(&mut self, row: &RawUsageRow, bucket: HourBucket) -> Result<(), PipelineError> {
        let into = row
            .attrs
            .get(attr::AGGREGATED_INTO)
            .and_then(Attr::as_s)
            .map(str::to_string);
        let (claim, status) = match &into {
            Some(record) => (RowClaim::Counted(record), RawStatus::Aggregated),
            None => (RowClaim::Uncounted, RawStatus::AggregationExpired),
        };
        let outcome =
            RowFinal::new(status, None).expiring(self.settings.retention.expiry(self.now));
        if !self.finalize(row, claim, outcome).await? {
            return Ok(());
        }
        if into.is_some() {
            self.report.counted_rows_finalized += 1;
        } else {
            warn!(
                license = %row.license_arn,
                sort_key = %row.sort_key,
                hour = %bucket,
                "raw row aged out before it was aggregated"
            );
            self.ports
                .metrics
                .count(metric::USAGE_AGGREGATION_EXPIRED, &[], 1);
            self.report.expired_rows += 1;
        }
        Ok(())
    }
}

/// The hour a usage sort key names, when it starts `<account>#<dimension>#<YYYY-MM-DDTHH>`
/// (the prefix the aggregator's targeted query uses); `None` otherwise.
fn hour_in_sort_key(sort_key: &str, account: &str, dimension: &str) -> Option<HourBucket> {
    let rest = sort_key
        .strip_prefix(account)?
        .strip_prefix('#')?
        .strip_prefix(dimension)?
        .strip_prefix('#')?;
    rest.get(..13)?.parse().ok()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;

    use super::*;
    use crate::memory::StoreOp;
    use crate::model::Attr;
    use crate::pipeline::testkit::*;
    use crate::ports::PortError;

    const NOW: &str = "2026-11-30T10:30:00Z";

    fn aggregate_groups(messages: &[WorkMessage]) -> Vec<(GroupKey, bool)> {
        messages
            .iter()
            .map(|m| match m {
                WorkMessage::Aggregate { group, flush } => (group.clone(), *flush),
                other => panic!("unexpected {other:?}"),
            })
            .collect()
    }

    #[tokio::test]
    async fn completed_hours_are_enqueued_oldest_first_once_per_group() {
        // GIVEN rows in completed hours (several per group), the current hour, and
        // enough groups to span index pages
        let now = t(NOW);
        let world = World::new(now);
        let l1 = license(1);
        let l2 = license(2);
        world.put_each(&[
            (&l1, ACCOUNT_A, "requests", "2026-11-30T09:05:00Z", 3),
            (&l1, ACCOUNT_A, "requests", "2026-11-30T09:10:00Z", 4),
            (&l1, ACCOUNT_A, "requests", "2026-11-30T09:59:59", 1),
            (&l1, ACCOUNT_A, "storage", "2026-11-30T09:00:00Z", 7),
            (&l1, ACCOUNT_A, "requests", "2026-11-30T08:00:00Z", 2),
            (&l2, ACCOUNT_B, "requests", "2026-11-29T11:00:00Z", 2),
            (&l2, ACCOUNT_B, "requests", "2026-11-30T10:05:00Z", 5),
        ]);

        // WHEN the discoverer runs
        let report = world.discover(now).await;

        // THEN each completed group is enqueued once, oldest hour first; the open hour waits
        let groups = aggregate_groups(&world.work.messages());
        assert_eq!(
            groups,
            vec![
                (group(&l2, ACCOUNT_B, "requests", "2026-11-29T11"), false),
                (group(&l1, ACCOUNT_A, "requests", "2026-11-30T08"), false),
                (group(&l1, ACCOUNT_A, "requests", "2026-11-30T09"), false),
                (group(&l1, ACCOUNT_A, "storage", "2026-11-30T09"), false),
            ]
        );
        assert_eq!(report.groups, 4);
        assert!(report.complete());
        assert!(world.deprovision.is_empty());
        // Discovery writes nothing to the rows.
        assert!(world.raw_statuses().iter().all(|(_, s)| s.is_none()));
    }

    #[tokio::test]
    async fn deprovisioning_licenses_flush_first_with_the_lock_bypassed() {
        // GIVEN a 3-hour lock, a license whose final-usage window closes in 5 minutes
        // (inside the 10-minute margin) and one whose window closes in an hour
        let now = t(NOW);
        let mut world = World::new(now);
        world.lock = MeteringLockHours::new(3).unwrap();
        let active = license(1);
        let closing = license(3);
        let later = license(4);
        world.deprovisioning(&closing, ACCOUNT_A, "2026-11-30T10:35:00Z");
        world.deprovisioning(&later, ACCOUNT_B, "2026-11-30T11:30:00Z");
        world.put_each(&[
            (&active, ACCOUNT_A, "requests", "2026-11-30T07:10:00Z", 1),
            (&active, ACCOUNT_A, "requests", "2026-11-30T09:10:00Z", 1),
            (&closing, ACCOUNT_A, "requests", "2026-11-30T06:20:00Z", 1),
            (&closing, ACCOUNT_A, "requests", "2026-11-30T09:20:00Z", 1),
            (&closing, ACCOUNT_A, "requests", "2026-11-30T10:10:00Z", 1),
            (&later, ACCOUNT_B, "requests", "2026-11-30T09:40:00Z", 1),
            (&later, ACCOUNT_B, "requests", "2026-11-30T10:20:00Z", 1),
        ]);

        let report = world.discover(now).await;

        // THEN the deprovisioning licenses' completed hours (locked or not) are flushed,
        // the open hour only for the license whose window is about to close
        let requests = |l: &str, account, h, flush| (group(l, account, "requests", h), flush);
        assert_eq!(
            aggregate_groups(&world.deprovision.messages()),
            vec![
                requests(&closing, ACCOUNT_A, "2026-11-30T06", true),
                requests(&closing, ACCOUNT_A, "2026-11-30T09", true),
                requests(&later, ACCOUNT_B, "2026-11-30T09", true),
                requests(&closing, ACCOUNT_A, "2026-11-30T10", true),
            ]
        );
        // AND normal work honours the lock and never repeats a flushed group
        assert_eq!(
            aggregate_groups(&world.work.messages()),
            vec![requests(&active, ACCOUNT_A, "2026-11-30T07", false)]
        );
        assert_eq!((report.flush_groups, report.groups), (4, 1));
    }

    #[tokio::test]
    async fn unreadable_subscribers_skip_the_flush_but_not_metering() {
        let now = t(NOW);
        let world = World::new(now);
        let l = license(1);
        world.put(&l, ACCOUNT_A, "requests", "2026-11-30T09:10:00Z", 1);
        world.subscribers.fail_next(
            StoreOp::SubscriberDeprovisioning,
            PortError::Failed {
                operation: "query",
                message: "AccessDenied".into(),
            },
        );
        let report = world.discover(now).await;
        assert_eq!(report.groups, 1);
        assert!(
            report
                .flush_error
                .as_deref()
                .unwrap()
                .contains("AccessDenied")
        );
        assert!(!report.complete());
    }

    #[tokio::test]
    async fn expired_rows_age_out_and_counted_ones_are_finalized_aggregated() {
        // GIVEN rows whose hours left the 24 h window, one of them already counted
        let now = t(NOW);
        let world = World::new(now);
        let l = license(1);
        let lost = world.put(&l, ACCOUNT_A, "requests", "2026-11-29T09:30:00Z", 5);
        let edge = world.put(&l, ACCOUNT_A, "requests", "2026-11-29T10:45:00Z", 5);
        let mut counted_row =
            crate::memory::reference_row(&l, ACCOUNT_A, "storage", "2026-11-29T10:15:00Z", 2);
        counted_row.attrs.insert(
            attr::AGGREGATED_INTO.into(),
            Attr::S("111122223333#storage#2026-11-29T10".into()),
        );
        let counted = world.put_row(counted_row);
        let live = world.put(&l, ACCOUNT_A, "requests", "2026-11-29T11:00:00Z", 5);

        let report = world.discover(now).await;

        for aged_out in [&lost, &edge] {
            assert_eq!(
                world.status(&l, aged_out).as_deref(),
                Some("AggregationExpired")
            );
        }
        assert_eq!(world.status(&l, &counted).as_deref(), Some("Aggregated"));
        assert_eq!(world.status(&l, &live), None);
        assert!(
            !world
                .row(&l, &lost)
                .attrs
                .contains_key(attr::METERING_PENDING)
        );
        assert_eq!((report.expired_rows, report.counted_rows_finalized), (2, 1));
        assert_eq!(world.metrics.total(metric::USAGE_AGGREGATION_EXPIRED), 2);
        // Re-running changes nothing and counts nothing twice.
        world.discover(now).await;
        assert_eq!(world.metrics.total(metric::USAGE_AGGREGATION_EXPIRED), 2);
    }

    #[tokio::test]
    async fn expiries_and_rejections_whose_answers_were_lost_are_counted_once() {
        // GIVEN a row of an expired hour and a row the index cannot place, and a usage
        // store whose final writes each take effect and then lose their answer
        let now = t(NOW);
        let world = World::new(now);
        let l = license(1);
        let expired = world.put(&l, ACCOUNT_A, "requests", "2026-11-29T09:30:00Z", 5);
        let mut no_dimension =
            crate::memory::reference_row(&l, ACCOUNT_A, "requests", "2026-11-30T09:01:00Z", 1);
        no_dimension.attrs.remove(attr::DIMENSION);
        let no_dimension = world.put_row(no_dimension);
        let lossy = Arc::new(LostAnswers::new(
            world.usage.clone(),
            StoreOp::UsageFinalizeRow,
            2,
        ));
        let ports = DiscoverPorts {
            usage: lossy.clone(),
            ..world.discover_ports()
        };

        // WHEN the discoverer runs (each write's retry finds it applied)
        let report = discover(now, &world.discover_settings(), &ports, Budget::UNLIMITED)
            .await
            .unwrap();

        // THEN both are final and each metric is counted once
        assert!(lossy.exhausted(), "both writes lost an answer");
        assert_eq!(
            world.status(&l, &expired).as_deref(),
            Some("AggregationExpired")
        );
        assert_eq!(
            world.reason(&l, &no_dimension).as_deref(),
            Some("MissingDimension")
        );
        assert_eq!((report.expired_rows, report.rejected_rows), (1, 1));
        assert_eq!(world.metrics.total(metric::USAGE_AGGREGATION_EXPIRED), 1);
        assert_eq!(
            world.metrics.get(
                metric::USAGE_RECORD_REJECTED,
                &[("Reason", "MissingDimension")]
            ),
            1
        );
        // AND the next run counts nothing more
        world.discover(now).await;
        assert_eq!(world.metrics.total(metric::USAGE_AGGREGATION_EXPIRED), 1);
        assert_eq!(world.metrics.total(metric::USAGE_RECORD_REJECTED), 1);
    }

    #[tokio::test]
    async fn rows_the_index_cannot_place_are_judged_and_rejected_here() {
        let now = t(NOW);
        let world = World::new(now);
        let l = license(1);
        let row = |ts: &str| crate::memory::reference_row(&l, ACCOUNT_A, "requests", ts, 1);
        // Filed under hour 09 whatever its timestamp says.
        let filed_under_09 = |ts: &str| {
            let mut row = row(ts);
            row.attrs.insert(
                attr::METERING_PENDING.into(),
                Attr::S("2026-11-30T09".into()),
            );
            row
        };
        let mut no_dimension = row("2026-11-30T09:01:00Z");
        no_dimension.attrs.remove(attr::DIMENSION);
        let no_dimension = world.put_row(no_dimension);
        let mut bad_key = row("2026-11-30T09:02:00Z");
        bad_key.sort_key = "junk".into();
        let bad_key = world.put_row(bad_key);
        world.put_row(filed_under_09("2026-11-30T08:02:00Z"));
        let future = world.put_row(filed_under_09("2026-11-30T11:00:00Z"));
        let stale = world.put_row(filed_under_09("2026-11-29T09:00:00Z"));

        let report = world.discover(now).await;

        for (sort_key, reason) in [
            (&future, "TimestampInFuture"),
            (&stale, "TimestampOutOfWindow"),
            (&no_dimension, "MissingDimension"),
            (&bad_key, "MalformedSortKey"),
        ] {
            assert_eq!(
                world.reason(&l, sort_key).as_deref(),
                Some(reason),
                "{sort_key}"
            );
        }
        assert_eq!(
            world.status(&l, &bad_key).as_deref(),
            Some("RejectedClientSide")
        );
        assert_eq!(report.rejected_rows, 4);
        assert_eq!(
            world.metrics.get(
                metric::USAGE_RECORD_REJECTED,
                &[("Reason", "MissingDimension")]
            ),
            1
        );
        // The row filed under the wrong hour is routed by its timestamp.
        assert_eq!(
            aggregate_groups(&world.work.messages()),
            vec![(group(&l, ACCOUNT_A, "requests", "2026-11-30T08"), false)]
        );
    }

    #[tokio::test]
    async fn the_deadline_stops_the_walk_and_the_next_run_finishes() {
        // GIVEN pending groups in many hours and an index that takes a second per page
        let now = t(NOW);
        let world = World::new(now);
        for h in 0..10 {
            world.put(
                &license(1),
                ACCOUNT_A,
                "requests",
                &format!("2026-11-30T0{h}:10:00Z"),
                1,
            );
        }
        let pages = Arc::new(AtomicUsize::new(0));
        let slow = SlowUsage {
            inner: world.usage.clone(),
            clock: world.clock.clone(),
            step: std::time::Duration::from_secs(1),
            pages: pages.clone(),
        };
        let mut ports = world.discover_ports();
        ports.usage = Arc::new(slow);
        let budget = Budget::until(world.clock.now() + Duration::seconds(5));

        // WHEN the budget runs out part-way
        let report = discover(now, &world.discover_settings(), &ports, budget)
            .await
            .unwrap();

        // THEN it stopped before the deadline, reporting the hours it left
        assert_eq!(pages.load(std::sync::atomic::Ordering::SeqCst), 5);
        assert!(!report.complete());
        assert_eq!(report.unvisited_buckets.len(), 23 - 5);
        assert_eq!(
            report.unvisited_buckets.first().map(String::as_str),
            Some("2026-11-29T16")
        );
        let first_run = world.work.len();
        // AND the next run covers the rest
        let report = world.discover(now).await;
        assert!(report.complete());
        let all: BTreeMap<_, _> = aggregate_groups(&world.work.messages())
            .into_iter()
            .collect();
        assert_eq!(all.len(), 10);
        assert!(first_run < 10);
    }

    #[tokio::test]
    async fn refused_messages_are_reported_and_found_again() {
        let now = t(NOW);
        let world = World::new(now);
        let l = license(1);
        world.put(&l, ACCOUNT_A, "requests", "2026-11-30T09:10:00Z", 1);
        world.put(&l, ACCOUNT_A, "storage", "2026-11-30T09:10:00Z", 1);
        world.work.fail_where(
            |m| matches!(m, WorkMessage::Aggregate { group, .. } if group.dimension == "storage"),
        );
        let report = world.discover(now).await;
        assert_eq!((report.groups, report.unsent_messages), (1, 1));
        world.work.clear_failures();
        world.work.drain();
        let report = world.discover(now).await;
        assert_eq!(report.groups, 2);
    }

    #[test]
    fn sort_key_hours() {
        assert_eq!(
            hour_in_sort_key(
                "111122223333#a#b#2026-11-30T09:10:00Z#e1",
                "111122223333",
                "a#b"
            ),
            Some(hour("2026-11-30T09"))
        );
        assert_eq!(
            hour_in_sort_key("111122223333#x#2026-11-30T09", "111122223333", "x"),
            Some(hour("2026-11-30T09"))
        );
        assert_eq!(
            hour_in_sort_key("111122223333#x#garbage", "111122223333", "x"),
            None
        );
        assert_eq!(
            hour_in_sort_key("999#x#2026-11-30T09:00:00", "111122223333", "x"),
            None
        );
    }

    #[tokio::test]
    async fn the_open_hour_is_flushed_by_the_last_run_before_the_margin() {
        // GIVEN a window closing at 10:50: the 10-minute margin starts at 10:40, and with
        // runs every 15 minutes the 10:30 run may be the last one before it
        let now = t(NOW);
        let closing = license(5);
        let closing_at = |expiry| {
            let world = World::new(now);
            world.deprovisioning(&closing, ACCOUNT_A, expiry);
            world.put(&closing, ACCOUNT_A, "requests", "2026-11-30T10:20:00Z", 3);
            world
        };
        let world = closing_at("2026-11-30T10:50:00Z");

        // WHEN the discoverer runs at 10:30
        world.discover(now).await;

        // THEN the open hour is flushed now rather than by a run that may never come
        assert_eq!(
            aggregate_groups(&world.deprovision.messages()),
            vec![(
                group(&closing, ACCOUNT_A, "requests", "2026-11-30T10"),
                true
            )]
        );

        // AND a window closing later than the next run's margin still waits
        let later = closing_at("2026-11-30T10:56:00Z");
        later.discover(now).await;
        assert!(aggregate_groups(&later.deprovision.messages()).is_empty());
    }
}

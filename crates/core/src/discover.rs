//! The discoverer's use case: find pending raw usage through the sparse
//! `metering_pending` index (never a table scan) and enqueue one aggregation message per
//! `(licenseArn, account, dimension, hour)` group: deprovisioning flushes first (lock
//! bypassed, onto their own queue), then completed hours oldest-first; then sweep the
//! index for rows no hour query visits (expired hours, non-bucket markers). Before each
//! send, the groups' dimensions are held against their buyers' kept rate cards
//! ([`unpriced`]). Stops cleanly at the budget's deadline and reports what it left for
//! the next run.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

use chrono::Duration;
use tracing::{error, info, warn};

use crate::guardrails::{self, GuardrailContext};
use crate::model::{
    Attr, GroupKey, RawStatus, RawUsageRow, ReasonCode, Subscriber, SubscriptionStatus, attr,
};
use crate::pipeline::budget::Budget;
use crate::pipeline::error::PipelineError;
use crate::pipeline::retry::{RetryPolicy, retry_transient};
use crate::ports::{
    Clock, MetricsSink, PendingRawRef, ProfileStore, RowClaim, RowFinal, SubscriberStore,
    UsageStore, WorkMessage, WorkQueue, metric,
};
use crate::retention::Retention;
use crate::time::{self, HourBucket, Instant, MeteringLockHours};

/// Default minutes before `deprovisioningExpiry` by which the open hour is flushed: one
/// submitter period for the next submitter run to send it, plus a minute for the call
/// itself. It was sized for a 5-minute period; the submitter now runs every minute
/// (`submit::schedule`), so 6 leaves room to spare. Any larger margin only moves the
/// last billable minute earlier; a smaller one risks the send landing after the window
/// closed.
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
    /// Subscribers table (deprovisioning index; the enqueued buyers' rate cards).
    pub subscribers: Arc<dyn SubscriberStore>,
    /// Normal aggregation work.
    pub work_queue: Arc<dyn WorkQueue>,
    /// Deprovisioning-flush work (consumed ahead of normal work).
    pub deprovision_queue: Arc<dyn WorkQueue>,
    /// The customer-profile table, when profiles expire after deprovisioning
    /// ([`DiscoverSettings::profile_retention`]).
    pub profiles: Option<Arc<dyn ProfileStore>>,
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
    /// `PROFILE_RETENTION_DAYS`: how long a buyer's profile is kept once the license's
    /// deprovisioning window ends (`None` = for ever).
    pub profile_retention: Option<Duration>,
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
            profile_retention: None,
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
    /// Profiles of deprovisioning licenses whose expiry this run wrote.
    pub profiles_expiring: usize,
    /// Why setting a profile's expiry failed, if it did (the next run tries again).
    pub profile_error: Option<String>,
    /// Dimensions of the enqueued groups their buyer's rate card does not price.
    pub unpriced: Vec<UnpricedDimension>,
    /// Buyers of the enqueued groups whose row holds no rate card of its agreement.
    pub without_rate_card: usize,
    /// Why the buyers' rows could not be read for that check, if they could not.
    pub rate_cards_unread: Option<String>,
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
        unpriced: UnpricedCheck::default(),
    };
    run.all().await?;
    run.report.unpriced = run.unpriced.unpriced();
    run.report.without_rate_card = run.unpriced.without_rate_card();
    run.report.rate_cards_unread = run.unpriced.error.clone();
    Ok(run.finish())
}

impl Run<'_> {
    /// The flush, the completed hours and the sweep; `Ok` also when the deadline came.
    async fn all(&mut self) -> Result<(), PipelineError> {
        let now = self.now;
        let settings = self.settings;
        let ports = self.ports;
        let current = HourBucket::containing(now);

        let mut flushing = BTreeSet::new();
        let mut open_hour_due = BTreeSet::new();
        match ports.subscribers.deprovisioning().await {
            Ok(rows) => {
                let rows: Vec<_> = rows
                    .into_iter()
                    .filter(|r| r.subscription_status == Some(SubscriptionStatus::Deprovisioning))
                    .collect();
                self.expire_profiles(&rows).await;
                for row in rows {
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
                self.report.flush_error = Some(e.to_string());
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
                if !self.walk(*bucket, Pass::Flush, licenses).await? {
                    self.leave(&buckets[i..]);
                    return Ok(());
                }
            }
        }

        let buckets = time::completed_buckets(now, settings.lock);
        for (i, bucket) in buckets.iter().enumerate() {
            if !self.walk(*bucket, Pass::Normal, &flushing).await? {
                self.leave(&buckets[i..]);
                return Ok(());
            }
        }

        if !self.sweep().await? {
            self.report.sweep_incomplete = true;
        }
        Ok(())
    }
}

impl Run<'_> {
    /// Writes each deprovisioning buyer's profile expiry: the end of the license's
    /// deprovisioning window (when it becomes inactive) plus the retention. Rows of
    /// other products (the subscribers table is shared) and rows without an expiry are
    /// left alone; a failure is reported and retried by the next run, which writes only
    /// what is not written yet.
    async fn expire_profiles(&mut self, rows: &[Subscriber]) {
        let (Some(profiles), Some(retention)) =
            (&self.ports.profiles, self.settings.profile_retention)
        else {
            return;
        };
        for row in rows {
            let (Some(expiry), Some(product)) = (row.deprovisioning_expiry, &row.product_code)
            else {
                continue;
            };
            if *product != self.settings.product_code {
                continue;
            }
            match profiles
                .expire(
                    &row.license_arn,
                    &row.customer_aws_account_id,
                    expiry + retention,
                )
                .await
            {
                Ok(true) => {
                    info!(
                        license = %row.license_arn,
                        account = %row.customer_aws_account_id,
                        expires_at = %(expiry + retention),
                        "profile of a deprovisioned license set to expire"
                    );
                    self.report.profiles_expiring += 1;
                }
                Ok(false) => {}
                Err(e) => {
                    error!(error = %e, license = %row.license_arn, "profile expiry not written; the next run retries");
                    self.report.profile_error = Some(e.to_string());
                    self.ports
                        .metrics
                        .count(metric::PROFILE_EXPIRY_FAILED, &[], 1);
                }
            }
        }
    }
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
    /// The enqueued groups' dimensions held against their buyers' rate cards.
    unpriced: UnpricedCheck,
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
                        price: None,
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

    async fn send(
        &mut self,
        pass: Pass,
        mut messages: Vec<WorkMessage>,
    ) -> Result<(), PipelineError> {
        if messages.is_empty() {
            return Ok(());
        }
        let groups = messages.iter().filter_map(|m| match m {
            WorkMessage::Aggregate { group, .. } => Some(group),
            _ => None,
        });
        self.unpriced
            .before_send(
                self.ports.subscribers.as_ref(),
                self.ports.metrics.as_ref(),
                self.ports.clock.as_ref(),
                groups,
            )
            .await;
        for message in &mut messages {
            if let WorkMessage::Aggregate { group, price, .. } = message {
                *price = self.unpriced.price_of(group);
            }
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

pub mod unpriced;

use unpriced::UnpricedCheck;
pub use unpriced::UnpricedDimension;

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;

//! One submitter run: drain the pending index oldest-first, claim each batch, send it
//! with bisection under the pacing, write its outcomes back while the next batch goes
//! out, then age out what can no longer be submitted.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::Arc;

use futures_util::StreamExt;
use tracing::{error, info, warn};

use crate::aggregate::{is_skipped_zero, submission_due};
use crate::model::{AggregatedRecord, AggregatedStatus, GroupKey, Subscriber, SubscriptionStatus};
use crate::pipeline::budget::Budget;
use crate::pipeline::error::PipelineError;
use crate::pipeline::retry::{RetryPolicy, random_u64, retry_transient};
use crate::ports::{
    AggregatedStore, Claim, ClaimRequest, Clock, Cursor, MAX_BATCH_WRITES, MalformedItem,
    MeteringApi, MeteringRecord, MetricsSink, OutcomeWrite, Page, RecordVerdict, SubmissionUpdate,
    SubscriberStore, metric,
};
use crate::submit::batch::plan_batches;
use crate::submit::bisect::{BisectReport, RecordResult, send_with_bisection};
use crate::submit::outcome::{
    EarlierSends, Outcome, RunAction, may_have_billed, next_state, report_metrics,
};
use crate::submit::pacing::PacedMeteringApi;
use crate::time::{self, HourBucket, Instant};

use super::settings::{MeteringMode, SubmitSettings};
use super::{
    REASON_INTERRUPTED_SUBMISSION, REASON_MALFORMED_ITEM, REASON_METERING_DISABLED,
    REASON_REQUEST_TOO_LARGE, REASON_ZERO_QUANTITY_SKIPPED,
};

/// The request-level exception of a dimension the product's catalog lacks: every
/// record of that dimension fails the same way, whatever it is batched with.
const INVALID_DIMENSION: &str = "InvalidUsageDimensionException";

/// Hour buckets read at once: one round trip covers this many hours, and at most this
/// many buckets' records are in memory beside the two batches planned ahead.
const READ_AHEAD: usize = 4;

/// Batches planned ahead below which the next buckets are read while calls go out:
/// about 0.8 s of calls, time for a bucket's read to finish unseen.
const PLANNED_AHEAD: usize = 8;

/// The ports the submitter uses.
#[derive(Clone)]
pub struct SubmitPorts {
    /// Aggregated-usage table.
    pub aggregated: Arc<dyn AggregatedStore>,
    /// Subscribers table (deprovisioning index; the CustomerNotSubscribed rule).
    pub subscribers: Arc<dyn SubscriberStore>,
    /// `BatchMeterUsage`.
    pub metering: Arc<dyn MeteringApi>,
    /// Metrics.
    pub metrics: Arc<dyn MetricsSink>,
    /// Clock (pacing, backoff, deadline).
    pub clock: Arc<dyn Clock>,
}

/// What one run did.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SubmitReport {
    /// `BatchMeterUsage` calls made.
    pub api_calls: u64,
    /// Records billed (`Success`).
    pub success: usize,
    /// Records answered `DuplicateRecord`.
    pub duplicate: usize,
    /// Records closed `CustomerNotSubscribed`.
    pub not_subscribed: usize,
    /// `CustomerNotSubscribed` kept pending (no active subscriber row yet).
    pub awaiting_subscription: usize,
    /// Records closed `Error`.
    pub errors: usize,
    /// Records left pending after the unprocessed retry.
    pub unprocessed: usize,
    /// Records left pending for any other reason (depth cap, throttling, a stop before
    /// their call).
    pub left_pending: usize,
    /// Records a claim could not be taken for (moved since read; next run).
    pub claim_skipped: usize,
    /// Dry run: records marked `DryRunSubmitted`.
    pub dry_run_submitted: usize,
    /// Dry run: records of accounts not on the allowlist, left pending.
    pub dry_run_skipped: usize,
    /// Records aged out (`SubmissionExpired`).
    pub expired: usize,
    /// Why the run stopped early, if it did (`deadline`, `throttled`, `disabled`, ...).
    pub stopped: Option<String>,
    /// Records sent whose outcome is unknown (kept with their sent quantity).
    pub ambiguous: usize,
    /// Seller-written items that cannot be read, closed `Error`.
    pub malformed: usize,
    /// Why the deprovisioning-first pass could not run, if it could not.
    pub flush_error: Option<String>,
    /// Records this run found pending past their lock and due for submission (in a
    /// dry run, of allowlisted accounts only: the others are never sent). Emitted every
    /// run as `PendingPastLock`, zero included, for the heartbeat alarm.
    pub pending_past_lock: usize,
}

impl SubmitReport {
    /// Whether the run did everything it should: it read the deprovisioning index and
    /// was not stopped (by the deadline, throttling or a disabled API) with work left.
    pub fn complete(&self) -> bool {
        self.flush_error.is_none() && self.stopped.is_none()
    }
}

/// Why the run must stop sending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    Deadline,
    Throttled,
    Disabled,
}

impl Stop {
    fn as_str(self) -> &'static str {
        match self {
            Stop::Deadline => "deadline",
            Stop::Throttled => "throttled",
            Stop::Disabled => "disabled",
        }
    }
}

/// Runs one submission at `now` (the triggering event's time).
///
/// Order: (1) records of `deprovisioning` licenses in every live hour, the current one
/// included (their final-usage window is closing); (2) everyone else's records in
/// completed hours, oldest first; (3) age-out of records in expired hours. Within a
/// product, records are batched in that order, a batch spanning hours where one ends
/// part-full (`Run::send_pass`); each batch's records are claimed
/// (`inFlightUntil`, conditional on the record being as read, so one folded or claimed
/// meanwhile is skipped this run), sent, and their outcomes written while the next batch is sent.
///
/// Store failures end the run with an error after what was done; the records of a
/// batch whose outcome could not be written keep their claim until its lease ends
/// and are then re-sent (Marketplace deduplicates; see the module table).
pub async fn submit(
    now: Instant,
    settings: &SubmitSettings,
    ports: &SubmitPorts,
    budget: Budget,
) -> Result<SubmitReport, PipelineError> {
    info!(now = %now, deployment = %settings.deployment, zero_policy = %settings.zero_policy,
        dry_run = matches!(settings.mode, MeteringMode::DryRun { .. }), "submission run");
    let paced = PacedMeteringApi::new(
        ports.metering.as_ref(),
        ports.clock.as_ref(),
        settings.min_call_interval,
    );
    // Leases are wall-clock (a retried invocation with a stale event time must not
    // compute a lease that other stages already see as lapsed) and end when the
    // invocation must end: a claim never outlives the function that holds it.
    let lease = match budget.end() {
        Some(end) => Lease::Until(end),
        None => Lease::For(settings.claim_lease),
    };
    let mut run = Run {
        now,
        lease,
        settings,
        ports,
        paced: &paced,
        budget,
        report: SubmitReport::default(),
        subscribers: HashMap::new(),
        refused_dimensions: HashSet::new(),
        consecutive_throttles: 0,
    };
    let current = HourBucket::containing(now);

    let deprovisioning: BTreeSet<String> = match ports.subscribers.deprovisioning().await {
        Ok(rows) => rows
            .into_iter()
            .filter(|r| r.subscription_status == Some(SubscriptionStatus::Deprovisioning))
            .map(|r| r.license_arn)
            .collect(),
        Err(e) => {
            // Their completed hours still go out with everyone else's; the open hour
            // waits, so the run is reported incomplete (metric, alarm, failed invocation).
            error!(error = %e, "deprovisioning index unreadable; no flush-first ordering this run");
            run.report.flush_error = Some(e.to_string());
            BTreeSet::new()
        }
    };

    let outcome = async {
        if !deprovisioning.is_empty() {
            run.send_pass(&time::live_buckets(now), |r| {
                deprovisioning.contains(&r.key.license_arn)
            })
            .await?;
        }
        let completed: Vec<HourBucket> = time::live_buckets(now)
            .into_iter()
            .filter(|b| *b < current)
            .collect();
        run.send_pass(&completed, |r| !deprovisioning.contains(&r.key.license_arn))
            .await
    }
    .await;
    match outcome {
        Ok(()) => {}
        Err(RunError::Stop(stop)) => run.report.stopped = Some(stop.as_str().to_string()),
        Err(RunError::Pipeline(e)) => {
            run.report.api_calls = paced.calls();
            return Err(e);
        }
    }
    // Age-out runs even when the Region refuses metering: a permanent
    // DisabledApiException must still end every record (`SubmissionExpired`).
    if run.report.stopped.as_deref() != Some(Stop::Deadline.as_str()) {
        match run.age_out().await {
            Ok(()) => {}
            Err(RunError::Stop(stop)) => run.report.stopped = Some(stop.as_str().to_string()),
            Err(RunError::Pipeline(e)) => return Err(e),
        }
    }
    run.report.api_calls = paced.calls();
    // Every run, zero included: the heartbeat alarm needs a data point per run to tell
    // "nothing was due" from "records were due and none was billed".
    ports.metrics.count(
        metric::PENDING_PAST_LOCK,
        &[],
        u64::try_from(run.report.pending_past_lock).unwrap_or(u64::MAX),
    );
    if !run.report.complete() {
        ports
            .metrics
            .count(metric::INCOMPLETE_RUN, &[("Function", "submitter")], 1);
    }
    info!(
        api_calls = run.report.api_calls,
        success = run.report.success,
        errors = run.report.errors,
        left_pending = run.report.left_pending,
        expired = run.report.expired,
        stopped = ?run.report.stopped,
        "submission finished"
    );
    Ok(run.report)
}

enum RunError {
    Stop(Stop),
    Pipeline(PipelineError),
}

impl<E: Into<PipelineError>> From<E> for RunError {
    fn from(e: E) -> Self {
        RunError::Pipeline(e.into())
    }
}

/// How long a claim is held: to the invocation's end, or (no deadline: tools, tests)
/// for the settings' lease from the claim's time.
#[derive(Debug, Clone, Copy)]
enum Lease {
    Until(Instant),
    For(chrono::Duration),
}

struct Run<'a> {
    now: Instant,
    lease: Lease,
    settings: &'a SubmitSettings,
    ports: &'a SubmitPorts,
    paced: &'a PacedMeteringApi<'a>,
    budget: Budget,
    report: SubmitReport,
    /// Per-run cache of subscribers rows by (license, account).
    subscribers: HashMap<(String, String), Option<Subscriber>>,
    /// (product, dimension) pairs Marketplace refused this run with
    /// `InvalidUsageDimensionException`: their records are sent alone.
    refused_dimensions: HashSet<(String, String)>,
    consecutive_throttles: u32,
}

impl Run<'_> {
    /// The wire record, with the stack's product when the record names none.
    fn metering_record(&self, record: &AggregatedRecord) -> MeteringRecord {
        let mut wire = metering_record(record);
        if wire.product_code.is_empty() {
            wire.product_code = self.settings.product_code.clone();
        }
        wire
    }

    fn check_budget(&self) -> Result<(), RunError> {
        if self.budget.exhausted(self.ports.clock.as_ref()) {
            Err(RunError::Stop(Stop::Deadline))
        } else {
            Ok(())
        }
    }

    /// Whether this run's mode sends `record` at all (a dry run only sends allowlisted
    /// accounts' records).
    fn meant_to_send(&self, record: &AggregatedRecord) -> bool {
        match &self.settings.mode {
            MeteringMode::Live => true,
            MeteringMode::DryRun { allowlist } => {
                allowlist.contains(&record.key.customer_aws_account_id)
            }
        }
    }

    /// Sends every due record of `buckets` (oldest first) selected by `take`.
    ///
    /// The buckets are read [`READ_AHEAD`] at a time while the calls go out, so a day
    /// with few busy hours costs a few round trips rather than one per hour, and no call
    /// waits on a read, a write-back or a claim at an hour's end. Batches are planned as
    /// the records arrive, a batch spanning hours where one ends part-full (fewer calls).
    /// Records read ahead may change before their claim: the claim is conditional on the
    /// record as read, so a changed one is skipped this run, as before.
    async fn send_pass(
        &mut self,
        buckets: &[HourBucket],
        take: impl Fn(&AggregatedRecord) -> bool,
    ) -> Result<(), RunError> {
        let mut source = Source {
            reads: page_reads(self.ports, self.budget, buckets),
            buffer: Vec::new(),
            ready: VecDeque::new(),
            exhausted: false,
        };
        if let MeteringMode::DryRun { allowlist } = &self.settings.mode {
            let allowlist = allowlist.clone();
            while let Some(page) = source.reads.next().await {
                self.take_due(page?, &take, &mut source.buffer).await?;
            }
            return self
                .dry_run(std::mem::take(&mut source.buffer), &allowlist)
                .await;
        }
        self.refill(&mut source, &take).await?;
        self.send_batches(&mut source, &take).await
    }

    /// Reads pages until a batch after the next one is planned, or none is left.
    async fn refill(
        &mut self,
        source: &mut Source<'_>,
        take: &impl Fn(&AggregatedRecord) -> bool,
    ) -> Result<(), RunError> {
        while source.ready.len() < 2 && !source.exhausted {
            let page = source.reads.next().await;
            self.arrived(source, page, take).await?;
        }
        Ok(())
    }

    /// Takes one page (`None`: no page is left) into the plan.
    async fn arrived(
        &mut self,
        source: &mut Source<'_>,
        page: Option<Result<Page<AggregatedRecord>, RunError>>,
        take: &impl Fn(&AggregatedRecord) -> bool,
    ) -> Result<(), RunError> {
        match page {
            Some(page) => self.take_due(page?, take, &mut source.buffer).await?,
            None => source.exhausted = true,
        }
        self.plan(source).await
    }

    /// Plans the buffered records into batches: every batch but each product's last
    /// (more of its records may still arrive) is ready; once no bucket is left, all are.
    /// A record too large to send even alone is closed `Error` here.
    async fn plan(&mut self, source: &mut Source<'_>) -> Result<(), RunError> {
        if source.buffer.is_empty() {
            return Ok(());
        }
        let records = std::mem::take(&mut source.buffer);
        let metering: Vec<MeteringRecord> =
            records.iter().map(|r| self.metering_record(r)).collect();
        let plan = plan_batches(&metering, self.settings.limits);
        for oversized in &plan.oversized {
            warn!(group = %oversized.key, bytes = oversized.body_bytes,
                "record exceeds the request size limit even alone; it cannot be sent");
            let update = SubmissionUpdate::new(
                AggregatedStatus::Error,
                Some(REASON_REQUEST_TOO_LARGE.to_string()),
                None,
            );
            if self.write(&oversized.key, None, &update).await? {
                self.report.errors += 1;
                self.ports.metrics.count(
                    metric::BATCH_METER_USAGE_EXCEPTION,
                    &[("Exception", REASON_REQUEST_TOO_LARGE)],
                    1,
                );
            }
        }
        let product_of = |batch: &crate::submit::batch::Batch| {
            batch
                .input_indexes()
                .first()
                .and_then(|i| metering.get(*i))
                .map(|r| r.product_code.as_str())
        };
        let mut records: Vec<Option<AggregatedRecord>> = records.into_iter().map(Some).collect();
        for (n, batch) in plan.batches.iter().enumerate() {
            let last_of_product = plan
                .batches
                .get(n + 1)
                .is_none_or(|next| product_of(next) != product_of(batch));
            let members = batch
                .input_indexes()
                .iter()
                .filter_map(|i| records.get_mut(*i).and_then(Option::take));
            if last_of_product && !source.exhausted {
                source.buffer.extend(members);
            } else {
                source.ready.push_back(members.map(Arc::new).collect());
            }
        }
        Ok(())
    }

    /// Closes the page's malformed items and adds its records selected by `take` and
    /// due under the zero policy to `out`.
    async fn take_due(
        &mut self,
        page: Page<AggregatedRecord>,
        take: &impl Fn(&AggregatedRecord) -> bool,
        out: &mut Vec<AggregatedRecord>,
    ) -> Result<(), RunError> {
        for item in &page.malformed {
            self.reject_malformed(item).await?;
        }
        let due: Vec<AggregatedRecord> = page
            .items
            .into_iter()
            .filter(|r| take(r) && submission_due(r, self.now, self.settings.zero_policy))
            .collect();
        self.report.pending_past_lock += due.iter().filter(|r| self.meant_to_send(r)).count();
        out.extend(due);
        Ok(())
    }

    /// Claims, sends and records the planned batches as a pipeline: while batch `i` is
    /// sent, batch `i + 1` is claimed, the outcomes of batch `i - 1` are written and, when
    /// fewer than [`PLANNED_AHEAD`] batches are planned, the next pages are read (their
    /// reads go on across calls), so the database's latency hides behind the paced calls
    /// and each call costs two store requests (one claim, one write-back) whatever its
    /// size. A crash anywhere leaves at most two batches claimed with their sent
    /// quantity: re-sent after their lease, Marketplace answers `DuplicateRecord` for
    /// what was billed.
    async fn send_batches(
        &mut self,
        source: &mut Source<'_>,
        take: &impl Fn(&AggregatedRecord) -> bool,
    ) -> Result<(), RunError> {
        let Some(first) = source.ready.pop_front() else {
            return Ok(());
        };
        self.check_budget()?;
        let mut claimed = self.claim_members(&first).await;
        let mut unwritten: Vec<OutcomeWrite> = Vec::new();
        loop {
            let current = match claimed {
                Ok(current) => current,
                Err(error) => {
                    self.finish(&unwritten, &[]).await;
                    return Err(error);
                }
            };
            self.report.claim_skipped += current.skipped;
            if let Err(stop) = self.check_budget() {
                self.finish(&unwritten, &current.held).await;
                return Err(stop);
            }
            let next = source.ready.pop_front();
            let read_more = source.ready.len() < PLANNED_AHEAD && !source.exhausted;
            // The reads go on while the batch is out, and wait for the next batch if they
            // are not done: a read never holds a call back.
            let mut pages = None;
            let (sent, next_claimed, written) = {
                let work = futures_util::future::join3(
                    self.send_held(&current.held),
                    async {
                        match &next {
                            Some(members) => self.claim_members(members).await,
                            None => Ok(Claimed::default()),
                        }
                    },
                    self.write_outcomes(&unwritten),
                );
                let mut work = std::pin::pin!(work);
                let reads = &mut source.reads;
                std::future::poll_fn(|cx| {
                    if read_more
                        && pages.is_none()
                        && let std::task::Poll::Ready(item) = reads.poll_next_unpin(cx)
                    {
                        pages = Some(item);
                    }
                    work.as_mut().poll(cx)
                })
                .await
            };
            claimed = next_claimed;
            let judged = self.judge(&current.held, sent).await;
            unwritten = judged.updates;
            let mut failure = written.err().or(judged.lookup_failure);
            if let (None, Some(pages)) = (&failure, pages) {
                failure = self.arrived(source, pages, take).await.err();
            }
            let mut verdict = match failure {
                Some(error) => Err(error),
                None => self.after_batch(judged.action, judged.stop).await,
            };
            if verdict.is_ok() && next.is_none() {
                // No batch was planned when this one went out (the reads fell behind):
                // read on, and claim the next one before its send.
                verdict = self.refill(source, take).await;
                match (&verdict, source.ready.pop_front()) {
                    (Ok(()), Some(members)) => claimed = self.claim_members(&members).await,
                    (Ok(()), None) => break,
                    (Err(_), _) => {}
                }
            }
            if let Err(error) = verdict {
                let held = claimed.as_ref().map_or(&[][..], |c| c.held.as_slice());
                self.finish(&unwritten, held).await;
                return Err(error);
            }
        }
        self.write_outcomes(&unwritten).await
    }

    /// Before the loop ends early: writes the outcomes not yet stored and gives back the
    /// claims taken for a batch that will not be sent (so late usage can fold in).
    /// Best effort: what cannot be written lapses with its lease.
    async fn finish(&self, unwritten: &[OutcomeWrite], unsent: &[Held]) {
        let mut writes = unwritten.to_vec();
        writes.extend(unsent.iter().map(|h| OutcomeWrite {
            key: h.record.key.clone(),
            claim_id: Some(h.claim_id.clone()),
            update: h.release(),
        }));
        if let Err(RunError::Pipeline(error)) = self.write_outcomes(&writes).await {
            warn!(error = %error, records = writes.len(),
                "outcomes not written; their claims lapse and the records are re-sent");
        }
    }

    /// A claim for one record, taken at the wall clock's now and held until the lease
    /// ends.
    fn new_claim(&self) -> Claim {
        let wall = self.ports.clock.now();
        let until = match self.lease {
            Lease::Until(end) => end,
            Lease::For(lease) => wall + lease,
        };
        Claim {
            id: new_claim_id(),
            now: wall,
            until,
        }
    }

    /// Claims `members` in one store request (as read; a record moved since is skipped).
    async fn claim_members(&self, members: &[Arc<AggregatedRecord>]) -> Result<Claimed, RunError> {
        let requests: Vec<ClaimRequest> = members
            .iter()
            .map(|record| ClaimRequest::of(record, self.new_claim()))
            .collect();
        let mut claimed = Claimed::default();
        if requests.is_empty() {
            return Ok(claimed);
        }
        let grants = retry_transient(self.ports.clock.as_ref(), RetryPolicy::STORE, || {
            self.ports.aggregated.claim_all(&requests)
        })
        .await?;
        for ((record, request), grant) in members.iter().zip(requests).zip(grants) {
            match grant {
                Some(grant) => claimed.held.push(Held {
                    claim_id: request.claim.id,
                    previously_sent: grant.previously_sent,
                    // Granted only on the record exactly as read: true at the claim.
                    possibly_billed: record.may_have_been_billed(),
                    record: Arc::clone(record),
                }),
                None => claimed.skipped += 1,
            }
        }
        Ok(claimed)
    }

    /// Sends the held records. Records of a (product, dimension) Marketplace already
    /// refused this run (`InvalidUsageDimensionException`, which fails the whole request)
    /// go alone, after the others as one batch: a known-bad dimension costs one call per
    /// record instead of a bisection of every batch it lands in. Stops at the first stop.
    async fn send_held(&self, held: &[Held]) -> BisectReport {
        let (suspects, clean): (Vec<usize>, Vec<usize>) = (0..held.len()).partition(|i| {
            held.get(*i).is_some_and(|h| {
                self.refused_dimensions
                    .contains(&self.dimension_of(&h.record))
            })
        });
        if suspects.is_empty() {
            return self.send_group(held).await;
        }
        let mut report = BisectReport {
            results: vec![RecordResult::NotAnswered; held.len()],
            ..BisectReport::default()
        };
        let groups = std::iter::once(clean).chain(suspects.into_iter().map(|i| vec![i]));
        for group in groups.filter(|g| !g.is_empty()) {
            let members: Vec<Held> = group.iter().filter_map(|i| held.get(*i).cloned()).collect();
            let part = self.send_group(&members).await;
            for (index, result) in group.iter().zip(part.results) {
                if let Some(slot) = report.results.get_mut(*index) {
                    *slot = result;
                }
            }
            report.api_calls += part.api_calls;
            report.validation_failures += part.validation_failures;
            if part.stopped.is_some() {
                report.stopped = part.stopped;
                break;
            }
        }
        report
    }

    /// The (product, dimension) a record is billed under.
    fn dimension_of(&self, record: &AggregatedRecord) -> (String, String) {
        let wire = self.metering_record(record);
        (wire.product_code, wire.key.dimension)
    }

    /// Sends `held` as one batch (bisecting rejections), retrying unprocessed records
    /// once after a jittered backoff; emits the call metrics.
    async fn send_group(&self, held: &[Held]) -> BisectReport {
        if held.is_empty() {
            return BisectReport::default();
        }
        let batch: Vec<MeteringRecord> = held
            .iter()
            .map(|h| self.metering_record(&h.record))
            .collect();
        let mut sent = send_with_bisection(self.paced, &batch).await;
        let mut events = report_metrics(&sent);

        // UnprocessedRecords: retry once, after a jittered backoff, unless the call stopped.
        let unprocessed: Vec<usize> = unprocessed_indexes(&sent);
        if !unprocessed.is_empty() && sent.stopped.is_none() {
            let delay = self.settings.backoff(1);
            warn!(
                records = unprocessed.len(),
                ?delay,
                "unprocessed records; retrying once"
            );
            self.ports.clock.sleep(delay).await;
            let retry: Vec<MeteringRecord> = unprocessed
                .iter()
                .filter_map(|i| batch.get(*i).cloned())
                .collect();
            let again = send_with_bisection(self.paced, &retry).await;
            events.extend(report_metrics(&again));
            for (position, index) in unprocessed.iter().enumerate() {
                if let (Some(slot), Some(result)) =
                    (sent.results.get_mut(*index), again.results.get(position))
                {
                    *slot = result.clone();
                }
            }
            sent.stopped = again.stopped;
        }
        for event in &events {
            event.emit(self.ports.metrics.as_ref());
        }
        sent
    }

    /// Each held record's outcome (counted, its metric emitted) and what the run does next.
    async fn judge(&mut self, held: &[Held], sent: BisectReport) -> Judged {
        let stop = sent.stopped.as_ref().map(|s| s.kind());
        let mut judged = Judged {
            updates: Vec::with_capacity(held.len()),
            action: RunAction::Continue,
            stop,
            lookup_failure: None,
        };
        // A subscribers-table failure must not discard the outcomes already known: it
        // only keeps a CustomerNotSubscribed pending (retried next run), and is
        // returned after every outcome is written.
        for (hold, result) in held.iter().zip(sent.results.iter()) {
            let subscriber = match result {
                RecordResult::Answered(RecordVerdict::CustomerNotSubscribed) => {
                    match self.subscriber(&hold.record.key).await {
                        Ok(row) => row,
                        Err(e) => {
                            judged.lookup_failure = Some(e);
                            None
                        }
                    }
                }
                _ => None,
            };
            if let RecordResult::Isolated { exception, .. } = result
                && exception == INVALID_DIMENSION
            {
                let refused = self.dimension_of(&hold.record);
                self.refused_dimensions.insert(refused);
            }
            let outcome = next_state(result, stop, subscriber.as_ref(), hold.earlier());
            self.count(&hold.record, result, &outcome);
            if let Some(metric) = &outcome.metric {
                metric.emit(self.ports.metrics.as_ref());
            }
            // A claim whose call never reached Marketplace (DisabledApiException) is
            // released rather than left to lapse, so late usage can still fold in.
            let update = outcome.update.clone().unwrap_or_else(|| hold.release());
            judged.updates.push(OutcomeWrite {
                key: hold.record.key.clone(),
                claim_id: Some(hold.claim_id.clone()),
                update,
            });
            judged.action = match (judged.action, outcome.action) {
                (RunAction::StopRun, _) | (_, RunAction::StopRun) => RunAction::StopRun,
                (RunAction::BackOff, _) | (_, RunAction::BackOff) => RunAction::BackOff,
                _ => RunAction::Continue,
            };
        }
        judged
    }

    /// What the run does after a batch: go on, back off, or stop.
    async fn after_batch(
        &mut self,
        action: RunAction,
        stop: Option<crate::submit::bisect::StopKind>,
    ) -> Result<(), RunError> {
        match action {
            RunAction::Continue => {
                self.consecutive_throttles = 0;
                Ok(())
            }
            RunAction::StopRun => {
                error!(
                    "BatchMeterUsage is disabled in this Region (DisabledApiException); stopping the run"
                );
                Err(RunError::Stop(Stop::Disabled))
            }
            RunAction::BackOff => {
                self.consecutive_throttles += 1;
                if self.consecutive_throttles >= self.settings.max_throttled_batches {
                    warn!(
                        ?stop,
                        batches = self.consecutive_throttles,
                        "still throttled; leaving the rest pending"
                    );
                    return Err(RunError::Stop(Stop::Throttled));
                }
                let delay = self.settings.backoff(self.consecutive_throttles);
                warn!(
                    ?stop,
                    ?delay,
                    "BatchMeterUsage throttled or failing; backing off"
                );
                self.ports.clock.sleep(delay).await;
                Ok(())
            }
        }
    }

    async fn claim(&mut self, record: &AggregatedRecord) -> Result<Option<String>, RunError> {
        let claimed = self.claim_members(&[Arc::new(record.clone())]).await?;
        Ok(claimed.held.into_iter().next().map(|h| h.claim_id))
    }

    /// Records one outcome: under `claim_id`, or (without one) only while no live claim
    /// holds the record.
    async fn write(
        &mut self,
        key: &GroupKey,
        claim_id: Option<&str>,
        update: &SubmissionUpdate,
    ) -> Result<bool, RunError> {
        let policy = RetryPolicy::STORE;
        let wall = self.ports.clock.now();
        let update = self.expiring(key, update, wall);
        Ok(retry_transient(self.ports.clock.as_ref(), policy, || {
            self.ports.aggregated.record(key, claim_id, &update, wall)
        })
        .await?)
    }

    /// `update` with the `expiresAt` its status gets when written at `wall`: none while
    /// pending, the retention from `wall` for a final status (from the replay window's
    /// close for `Error`; [`Retention::record_expiry`]). Every outcome write goes
    /// through here, so no final write is without it and no pending one carries it.
    fn expiring(
        &self,
        key: &GroupKey,
        update: &SubmissionUpdate,
        wall: Instant,
    ) -> SubmissionUpdate {
        let expires_at = self
            .settings
            .retention
            .record_expiry(key.hour, update.status, wall);
        update.clone().expiring(expires_at)
    }

    /// Writes outcomes, [`MAX_BATCH_WRITES`] per store request.
    async fn write_outcomes(&self, writes: &[OutcomeWrite]) -> Result<(), RunError> {
        let wall = self.ports.clock.now();
        let writes: Vec<OutcomeWrite> = writes
            .iter()
            .map(|w| OutcomeWrite {
                update: self.expiring(&w.key, &w.update, wall),
                ..w.clone()
            })
            .collect();
        for chunk in writes.chunks(MAX_BATCH_WRITES) {
            retry_transient(self.ports.clock.as_ref(), RetryPolicy::STORE, || {
                self.ports.aggregated.record_all(chunk, wall)
            })
            .await?;
        }
        Ok(())
    }

    /// Closes a seller-written item the pipeline cannot read: `Error` with what is
    /// wrong, so it neither blocks the rest nor stays pending forever.
    async fn reject_malformed(&mut self, item: &MalformedItem) -> Result<(), RunError> {
        let reason = format!("{REASON_MALFORMED_ITEM}: {}", item.problem);
        let policy = RetryPolicy::STORE;
        let expires_at = self
            .settings
            .retention
            .unreadable_record_expiry(self.ports.clock.now());
        let changed = retry_transient(self.ports.clock.as_ref(), policy, || {
            self.ports
                .aggregated
                .reject_malformed(item, &reason, expires_at, self.now)
        })
        .await?;
        if changed {
            error!(license = %item.license_arn, sort_key = %item.sort_key, problem = %item.problem,
                "aggregated item cannot be read; closed Error");
            self.report.malformed += 1;
            self.ports
                .metrics
                .count(metric::MALFORMED_ITEM, &[("Table", "aggregated")], 1);
        }
        Ok(())
    }

    /// Tallies one record's outcome in the run report (and logs the notable ones).
    fn count(&mut self, record: &AggregatedRecord, result: &RecordResult, outcome: &Outcome) {
        let status = outcome.update.as_ref().map(|u| u.status);
        match (result, status) {
            (_, Some(AggregatedStatus::Success)) => self.report.success += 1,
            (_, Some(AggregatedStatus::DuplicateRecord)) => {
                self.report.duplicate += 1;
                warn!(group = %record.key, quantity = record.quantity,
                    "DuplicateRecord: Marketplace already holds this hour (first write wins)");
            }
            (_, Some(AggregatedStatus::CustomerNotSubscribed)) => self.report.not_subscribed += 1,
            (RecordResult::Answered(RecordVerdict::CustomerNotSubscribed), _) => {
                self.report.awaiting_subscription += 1;
                info!(group = %record.key,
                    "CustomerNotSubscribed before License Updated arrived; retrying on later runs");
            }
            (RecordResult::Answered(RecordVerdict::Unprocessed), _) => self.report.unprocessed += 1,
            (result, _) if may_have_billed(result) => {
                self.report.ambiguous += 1;
                let why = match result {
                    RecordResult::Answered(RecordVerdict::Ambiguous { why }) => why.to_string(),
                    _ => "no definite answer to its call".to_string(),
                };
                warn!(group = %record.key, quantity = record.quantity_to_send(), %why,
                    "the call may have billed this record; re-sent later with exactly this quantity");
            }
            (RecordResult::Isolated { exception, message }, _) => {
                self.report.errors += 1;
                error!(group = %record.key, exception = %exception, message = %message,
                    "BatchMeterUsage rejects this record");
            }
            _ => self.report.left_pending += 1,
        }
    }

    /// The subscribers row of the record's license and account (cached per run): it
    /// decides whether `CustomerNotSubscribed` is final (ARCHITECTURE.md: status transitions).
    async fn subscriber(&mut self, key: &GroupKey) -> Result<Option<Subscriber>, RunError> {
        let cache_key = (key.license_arn.clone(), key.customer_aws_account_id.clone());
        if let Some(row) = self.subscribers.get(&cache_key) {
            return Ok(row.clone());
        }
        let policy = RetryPolicy::STORE;
        let row = retry_transient(self.ports.clock.as_ref(), policy, || {
            self.ports
                .subscribers
                .get(&key.license_arn, &key.customer_aws_account_id)
        })
        .await?;
        self.subscribers.insert(cache_key, row.clone());
        Ok(row)
    }

    async fn dry_run(
        &mut self,
        records: Vec<AggregatedRecord>,
        allowlist: &BTreeSet<String>,
    ) -> Result<(), RunError> {
        for record in records {
            self.check_budget()?;
            if !allowlist.contains(&record.key.customer_aws_account_id) {
                info!(group = %record.key, quantity = record.quantity,
                    "dry run: account not on the test allowlist; left pending");
                self.report.dry_run_skipped += 1;
                continue;
            }
            let Some(claim_id) = self.claim(&record).await? else {
                self.report.claim_skipped += 1;
                continue;
            };
            info!(group = %record.key, quantity = record.quantity, "dry run: would submit");
            let update = SubmissionUpdate::new(AggregatedStatus::DryRunSubmitted, None, None);
            if self.write(&record.key, Some(&claim_id), &update).await? {
                self.report.dry_run_submitted += 1;
            }
        }
        Ok(())
    }

    /// Gives every record still pending in an expired hour `SubmissionExpired`, however
    /// old: a sweep of the whole sparse index (it holds only pending records), so no
    /// record outlives its window unseen. Items that cannot be read are closed `Error`.
    async fn age_out(&mut self) -> Result<(), RunError> {
        let live = time::live_buckets(self.now);
        let mut cursor = None;
        loop {
            self.check_budget()?;
            let policy = RetryPolicy::STORE;
            let page = retry_transient(self.ports.clock.as_ref(), policy, || {
                self.ports
                    .aggregated
                    .stray_pending_page(&live, cursor.clone())
            })
            .await?;
            for item in &page.malformed {
                self.reject_malformed(item).await?;
            }
            // Expired by the run's stamp and by the wall clock: a stale or early stamp
            // never ages out an hour the other still has in its window.
            let (now, wall) = (self.now, self.ports.clock.now());
            for record in page.items.into_iter().filter(|r| {
                time::bucket_expired(r.key.hour, now) && time::bucket_expired(r.key.hour, wall)
            }) {
                let quiet = is_skipped_zero(&record, self.settings.zero_policy);
                let reason = if quiet {
                    Some(REASON_ZERO_QUANTITY_SKIPPED.to_string())
                } else if record.may_have_been_billed() {
                    Some(REASON_INTERRUPTED_SUBMISSION.to_string())
                } else if self.report.stopped.as_deref() == Some(Stop::Disabled.as_str()) {
                    Some(REASON_METERING_DISABLED.to_string())
                } else {
                    None
                };
                // One write across its retries (`once`): a retry that finds it applied
                // (the answer was lost) answers `true`, so the metric is counted.
                let update =
                    SubmissionUpdate::new(AggregatedStatus::SubmissionExpired, reason, None).once();
                if !self.write(&record.key, None, &update).await? {
                    continue;
                }
                self.report.expired += 1;
                if !quiet {
                    warn!(group = %record.key, quantity = record.quantity,
                        "aggregated record aged out before it was submitted");
                    self.ports
                        .metrics
                        .count(metric::USAGE_SUBMISSION_EXPIRED, &[], 1);
                }
            }
            match page.next {
                Some(next) => cursor = Some(next),
                None => return Ok(()),
            }
        }
    }
}

/// One page of `bucket`'s pending records, transient failures retried; none once the
/// run's time is up.
async fn read_page(
    ports: &SubmitPorts,
    budget: Budget,
    bucket: HourBucket,
    cursor: Option<Cursor>,
) -> Result<Page<AggregatedRecord>, RunError> {
    if budget.exhausted(ports.clock.as_ref()) {
        return Err(RunError::Stop(Stop::Deadline));
    }
    let page = retry_transient(ports.clock.as_ref(), RetryPolicy::STORE, || {
        ports.aggregated.pending_page(bucket, cursor.clone())
    })
    .await?;
    Ok(page)
}

/// Every page of `buckets`, in order: each bucket's first page [`READ_AHEAD`] buckets
/// at a time, then that bucket's further pages one after another. A page is handed on
/// as soon as it is read, so the first calls need only the first page.
fn page_reads<'a>(
    ports: &'a SubmitPorts,
    budget: Budget,
    buckets: &'a [HourBucket],
) -> PageReads<'a> {
    let first_pages = futures_util::stream::iter(buckets.iter().copied())
        .map(move |bucket| async move { (bucket, read_page(ports, budget, bucket, None).await) })
        .buffered(READ_AHEAD);
    let state = (first_pages, None::<(HourBucket, Cursor)>);
    Box::pin(futures_util::stream::unfold(
        state,
        move |(mut first_pages, more)| async move {
            let (bucket, page) = match more {
                Some((bucket, cursor)) => {
                    (bucket, read_page(ports, budget, bucket, Some(cursor)).await)
                }
                None => first_pages.next().await?,
            };
            let more = match &page {
                Ok(page) => page.next.clone().map(|cursor| (bucket, cursor)),
                Err(_) => None,
            };
            Some((page, (first_pages, more)))
        },
    ))
}

/// The pages of a pass's buckets, in order (see [`page_reads`]).
type PageReads<'a> = std::pin::Pin<
    Box<dyn futures_util::Stream<Item = Result<Page<AggregatedRecord>, RunError>> + Send + 'a>,
>;

/// A pass's records on their way to the calls: the bucket reads still to come, the
/// records read but not yet batched, and the batches planned.
struct Source<'a> {
    reads: PageReads<'a>,
    buffer: Vec<AggregatedRecord>,
    ready: VecDeque<Vec<Arc<AggregatedRecord>>>,
    /// No bucket is left to read.
    exhausted: bool,
}

fn unprocessed_indexes(report: &BisectReport) -> Vec<usize> {
    report
        .results
        .iter()
        .enumerate()
        .filter(|(_, r)| matches!(r, RecordResult::Answered(RecordVerdict::Unprocessed)))
        .map(|(i, _)| i)
        .collect()
}

/// The `BatchMeterUsage` record of an aggregated record: once a send may have billed
/// it, exactly the quantity sent then ([`AggregatedRecord::quantity_to_send`]).
pub fn metering_record(record: &AggregatedRecord) -> MeteringRecord {
    MeteringRecord {
        key: record.key.clone(),
        product_code: record.product_code.clone(),
        quantity: record.quantity_to_send(),
        allocations: record.allocations.clone(),
    }
}

/// The claims taken for one batch.
#[derive(Debug, Default)]
struct Claimed {
    held: Vec<Held>,
    /// Records that moved since they were read (claimed by nobody here).
    skipped: usize,
}

/// The outcomes of one sent batch, not yet written, and what the run does next.
struct Judged {
    updates: Vec<OutcomeWrite>,
    action: RunAction,
    stop: Option<crate::submit::bisect::StopKind>,
    lookup_failure: Option<RunError>,
}

/// A claim this run holds.
#[derive(Debug, Clone)]
struct Held {
    record: Arc<AggregatedRecord>,
    claim_id: String,
    /// Its quantity is pinned ([`crate::ports::ClaimGrant::previously_sent`]).
    previously_sent: bool,
    /// A call of ours may have billed it ([`AggregatedRecord::may_have_been_billed`]).
    possibly_billed: bool,
}

impl Held {
    /// What the claim read about the record's earlier sends.
    fn earlier(&self) -> EarlierSends {
        EarlierSends {
            quantity_pinned: self.previously_sent,
            possibly_billed: self.possibly_billed,
        }
    }

    /// Gives the claim back unsent: pending, keeping what earlier sends pinned.
    fn release(&self) -> SubmissionUpdate {
        SubmissionUpdate::release(self.previously_sent).with_possibly_billed(self.possibly_billed)
    }
}

/// A fresh claim id (unique per claim; outcomes are written only under it).
fn new_claim_id() -> String {
    format!("{:016x}{:08x}", random_u64(), std::process::id())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::sync::Mutex;

    use async_trait::async_trait;

    use super::*;
    use crate::aggregate::ZeroQuantityPolicy;
    use crate::memory::{MemoryMeteringApi, claim_read};
    use crate::model::{Allocation, SubscriptionStatus, Tag};
    use crate::pipeline::testkit::*;
    use crate::ports::{MeteringError, OperatorStore, PortError, UnclearAnswer};
    use crate::submit::DeploymentMode;
    use crate::submit::batch::BatchLimits;
    use crate::submit::pacing::MIN_CALL_INTERVAL;

    const NOW: &str = "2026-11-30T10:30:00Z";

    fn pending(key: &GroupKey, quantity: i64) -> AggregatedRecord {
        crate::memory::fixtures::pending_record(key.clone(), PRODUCT, quantity, 1)
    }

    /// Stores `n` pending records (dimension `d0..`) for license 1 in `hour`, entitled.
    fn seed(world: &World, n: usize, hour: &str, quantity: i64) -> Vec<GroupKey> {
        let l = license(1);
        world.api.entitle(&l, ACCOUNT_A);
        (0..n)
            .map(|i| {
                let key = group(&l, ACCOUNT_A, &format!("d{i:03}"), hour);
                world
                    .tables
                    .insert_aggregated(pending(&key, quantity), world.clock.now());
                key
            })
            .collect()
    }

    fn status(world: &World, key: &GroupKey) -> AggregatedStatus {
        world.record(key).unwrap().status
    }

    /// One run at `now` with `settings` and the world's ports, no deadline; the clock is
    /// left as it is.
    async fn run(
        world: &World,
        now: Instant,
        settings: &SubmitSettings,
    ) -> Result<SubmitReport, PipelineError> {
        submit(now, settings, &world.submit_ports(), Budget::UNLIMITED).await
    }

    /// One run at `now` with the world's settings and ports but `api` as Marketplace.
    async fn run_via(world: &World, now: Instant, api: Arc<dyn MeteringApi>) -> SubmitReport {
        let ports = SubmitPorts {
            metering: api,
            ..world.submit_ports()
        };
        submit(now, &world.submit_settings(), &ports, Budget::UNLIMITED)
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn completed_hours_are_billed_in_paced_batches_of_25() {
        let now = t(NOW);
        let world = World::new(now);
        let keys = seed(&world, 30, "2026-11-30T09", 5);
        let open_hour = seed(&world, 1, "2026-11-30T10", 5);

        let report = world.submit(now).await;

        assert_eq!((report.success, report.api_calls), (30, 2));
        assert_eq!(
            world.api.calls().iter().map(Vec::len).collect::<Vec<_>>(),
            vec![25, 5]
        );
        for key in &keys {
            let record = world.record(key).unwrap();
            assert_eq!(record.status, AggregatedStatus::Success);
            assert!(record.metering_record_id.is_some());
            assert_eq!(record.in_flight_until, None);
            assert_eq!(record.attempt_count, 1);
            assert_eq!(world.api.ledger()[key].quantity, 5);
        }
        // The open hour waits for the next runs.
        assert_eq!(status(&world, &open_hour[0]), AggregatedStatus::Pending);
        // Paced: the second call waited out the 100 ms interval.
        assert_eq!(world.clock.sleeps(), vec![MIN_CALL_INTERVAL]);
        assert_eq!(world.metrics.total(metric::USAGE_RECORD_SUBMITTED), 30);
        // A second run sends nothing again.
        let again = world.submit(now).await;
        assert_eq!(again.api_calls, 0);
    }

    #[tokio::test]
    async fn oldest_hours_go_first_and_deprovisioning_licenses_before_everyone() {
        let now = t(NOW);
        let world = World::new(now);
        let l1 = license(1);
        let l9 = license(9);
        world.api.entitle(&l1, ACCOUNT_A);
        world.api.entitle(&l9, ACCOUNT_B);
        world.subscribe(
            &l9,
            ACCOUNT_B,
            SubscriptionStatus::Deprovisioning,
            Some(t("2026-11-30T11:00:00Z")),
        );
        let newer = group(&l1, ACCOUNT_A, "a", "2026-11-30T09");
        let older = group(&l1, ACCOUNT_A, "a", "2026-11-29T20");
        let flush_open = group(&l9, ACCOUNT_B, "a", "2026-11-30T10");
        let flush_done = group(&l9, ACCOUNT_B, "a", "2026-11-30T08");
        for key in [&newer, &older, &flush_open, &flush_done] {
            world.tables.insert_aggregated(pending(key, 1), now);
        }
        let report = world.submit(now).await;
        assert_eq!(report.success, 4);
        let order: Vec<GroupKey> = world
            .api
            .calls()
            .into_iter()
            .flatten()
            .map(|r| r.key)
            .collect();
        assert_eq!(order, vec![flush_done, flush_open, older, newer]);
    }

    #[tokio::test]
    async fn an_undefined_dimension_is_isolated_and_its_batch_mates_still_bill() {
        let now = t(NOW);
        let world = World::new(now);
        let keys = seed(&world, 25, "2026-11-30T09", 2);
        world
            .api
            .reject_dimension("d007", "InvalidUsageDimensionException");

        let report = world.submit(now).await;

        assert_eq!((report.success, report.errors), (24, 1));
        let bad = world.record(&keys[7]).unwrap();
        assert_eq!(bad.status, AggregatedStatus::Error);
        assert_eq!(
            bad.status_reason.as_deref(),
            Some("InvalidUsageDimensionException")
        );
        assert!(!world.api.ledger().contains_key(&keys[7]));
        assert_eq!(
            world.metrics.get(
                metric::BATCH_METER_USAGE_EXCEPTION,
                &[("Exception", "InvalidUsageDimensionException")]
            ),
            1
        );
        // Bisection stays within ceil(log2(25)) levels: at most 2n - 1 calls, paced.
        assert!(report.api_calls <= 49);
        assert_eq!(world.clock.sleeps().len() as u64, report.api_calls - 1);
    }

    #[tokio::test]
    async fn a_dimension_refused_once_is_sent_alone_in_later_batches() {
        let now = t(NOW);
        let world = World::new(now);
        // Four batches of 25, each holding one record of the undefined dimension.
        let mut bad = Vec::new();
        let mut keys = Vec::new();
        for n in 0..4u32 {
            let l = license(10 + n);
            world.api.entitle(&l, ACCOUNT_A);
            for d in 0..25 {
                let dimension = if d == 12 {
                    "undefined".to_string()
                } else {
                    format!("d{d:03}")
                };
                let key = group(&l, ACCOUNT_A, &dimension, "2026-11-30T09");
                world.tables.insert_aggregated(pending(&key, 1), now);
                if d == 12 {
                    bad.push(key.clone());
                }
                keys.push(key);
            }
        }
        world
            .api
            .reject_dimension("undefined", "InvalidUsageDimensionException");

        let report = world.submit(now).await;

        // Every record has its own verdict: the four bad ones Error, the rest billed.
        assert_eq!((report.success, report.errors), (96, 4));
        for key in &bad {
            assert_eq!(status(&world, key), AggregatedStatus::Error);
        }
        // The first batch is bisected; each later one costs its clean 24 records in one
        // call and the known-bad record alone in another.
        let calls = world.api.calls();
        let first_batch_calls = calls.len() - 3 * 2;
        assert!(first_batch_calls < 2 * 25, "{} calls", calls.len());
        assert!(
            calls[first_batch_calls..]
                .iter()
                .all(|c| c.len() == 24 || (c.len() == 1 && c[0].key.dimension == "undefined")),
            "{:?}",
            calls.iter().map(Vec::len).collect::<Vec<_>>()
        );
        assert_eq!(report.api_calls as usize, calls.len());
    }

    #[tokio::test]
    async fn customer_not_subscribed_waits_for_license_updated_then_bills() {
        let now = t(NOW);
        let world = World::new(now);
        let l = license(2);
        let early = group(&l, ACCOUNT_A, "a", "2026-11-30T08");
        world.tables.insert_aggregated(pending(&early, 4), now);
        let ended = group(&license(3), ACCOUNT_B, "a", "2026-11-30T08");
        world.subscribe(&license(3), ACCOUNT_B, SubscriptionStatus::Inactive, None);
        world.tables.insert_aggregated(pending(&ended, 4), now);

        // GIVEN License Updated has not arrived for `early`
        let report = world.submit(now).await;
        assert_eq!(
            (report.awaiting_subscription, report.not_subscribed),
            (1, 1)
        );
        assert_eq!(status(&world, &early), AggregatedStatus::Pending);
        assert_eq!(world.record(&early).unwrap().in_flight_until, None);
        assert_eq!(
            status(&world, &ended),
            AggregatedStatus::CustomerNotSubscribed
        );
        assert_eq!(world.metrics.total(metric::CUSTOMER_NOT_SUBSCRIBED), 1);

        // WHEN it arrives and Marketplace entitles the buyer
        world.subscribe(&l, ACCOUNT_A, SubscriptionStatus::Active, None);
        world.api.entitle(&l, ACCOUNT_A);
        let later = t("2026-11-30T10:35:00Z");
        let report = world.submit(later).await;
        assert_eq!(report.success, 1);
        assert_eq!(status(&world, &early), AggregatedStatus::Success);
    }

    /// Bills `key` with `quantity` as some other writer would (another stack, a script).
    async fn billed_elsewhere(world: &World, key: &GroupKey, quantity: i64) {
        let mut record = metering_record(&pending(key, quantity));
        record.product_code = PRODUCT.into();
        let verdicts = world.api.batch_meter_usage(&[record]).await.unwrap();
        assert!(matches!(verdicts[0], RecordVerdict::Success { .. }));
    }

    #[tokio::test]
    async fn a_duplicate_of_a_record_only_kept_pending_before_activation_raises_the_alarm() {
        let now = t(NOW);
        let world = World::new(now);
        let l = license(2);
        let early = group(&l, ACCOUNT_A, "a", "2026-11-30T08");
        world.tables.insert_aggregated(pending(&early, 4), now);
        // GIVEN a CustomerNotSubscribed kept pending before License Updated: its
        // quantity is pinned, but nothing of ours billed it
        world.submit(now).await;
        let kept = world.record(&early).unwrap();
        assert_eq!(kept.sent_quantity, Some(4));
        // AND something else bills the hour meanwhile, with another quantity
        world.subscribe(&l, ACCOUNT_A, SubscriptionStatus::Active, None);
        world.api.entitle(&l, ACCOUNT_A);
        billed_elsewhere(&world, &early, 9).await;

        // WHEN our re-send is answered DuplicateRecord
        let report = world.submit(t("2026-11-30T10:35:00Z")).await;

        // THEN it is no earlier attempt of ours: UnexpectedDuplicate, with the alarm metric
        assert_eq!(report.duplicate, 1);
        let record = world.record(&early).unwrap();
        assert_eq!(record.status, AggregatedStatus::DuplicateRecord);
        assert_eq!(
            record.status_reason.as_deref(),
            Some(crate::submit::outcome::REASON_UNEXPECTED_DUPLICATE)
        );
        assert_eq!(world.metrics.total(metric::UNEXPECTED_DUPLICATE_RECORD), 1);
    }

    #[tokio::test]
    async fn an_item_from_before_possibly_billed_reads_its_sent_quantity_as_before() {
        let now = t(NOW);
        let world = World::new(now);
        let key = seed(&world, 1, "2026-11-30T09", 5)[0].clone();
        // GIVEN a record an earlier version left pending with sentQuantity after an
        // ambiguous send, without possiblyBilled, and Marketplace holding the hour
        let mut old = pending(&key, 5);
        old.sent_quantity = Some(5);
        old.attempt_count = 1;
        assert_eq!(old.possibly_billed, None);
        world.tables.insert_aggregated(old, now);
        billed_elsewhere(&world, &key, 6).await;

        world.submit(now).await;

        // THEN the DuplicateRecord is read as our earlier attempt, as before: no alarm
        let record = world.record(&key).unwrap();
        assert_eq!(record.status, AggregatedStatus::DuplicateRecord);
        assert_eq!(
            record.status_reason.as_deref(),
            Some(crate::submit::outcome::REASON_BILLED_BY_EARLIER_ATTEMPT)
        );
        assert_eq!(world.metrics.total(metric::UNEXPECTED_DUPLICATE_RECORD), 0);
    }

    #[tokio::test]
    async fn a_duplicate_of_a_replayed_error_nothing_of_ours_billed_raises_the_alarm() {
        let now = t(NOW);
        let world = World::new(now);
        let keys = seed(&world, 1, "2026-11-30T09", 3);
        // GIVEN a record Marketplace refused (Error), replayed by the operator
        world
            .api
            .reject_dimension("d000", "InvalidUsageDimensionException");
        world.submit(now).await;
        assert_eq!(status(&world, &keys[0]), AggregatedStatus::Error);
        world.api.accept_dimension("d000");
        let record = world.record(&keys[0]).unwrap();
        assert!(
            world
                .tables
                .operator_store()
                .replay(&record, now)
                .await
                .unwrap()
        );
        // AND something else billed the hour with another quantity
        billed_elsewhere(&world, &keys[0], 8).await;

        // WHEN the replay's send is answered DuplicateRecord
        world.submit(t("2026-11-30T10:35:00Z")).await;

        // THEN nothing of ours billed it: UnexpectedDuplicate, with the alarm metric
        let record = world.record(&keys[0]).unwrap();
        assert_eq!(record.status, AggregatedStatus::DuplicateRecord);
        assert_eq!(
            record.status_reason.as_deref(),
            Some(crate::submit::outcome::REASON_UNEXPECTED_DUPLICATE)
        );
        assert_eq!(world.metrics.total(metric::UNEXPECTED_DUPLICATE_RECORD), 1);
    }

    /// Marketplace that leaves chosen dimensions unprocessed the first `times` calls
    /// that carry them.
    struct Unprocessing {
        inner: MemoryMeteringApi,
        dimension: String,
        times: Mutex<u32>,
    }

    impl Unprocessing {
        fn new(world: &World, dimension: &str, times: u32) -> Self {
            Self {
                inner: world.api.clone(),
                dimension: dimension.into(),
                times: Mutex::new(times),
            }
        }
    }

    #[async_trait]
    impl MeteringApi for Unprocessing {
        async fn batch_meter_usage(
            &self,
            records: &[MeteringRecord],
        ) -> Result<Vec<RecordVerdict>, MeteringError> {
            let hit = records.iter().any(|r| r.key.dimension == self.dimension) && {
                let mut left = self.times.lock().unwrap();
                let go = *left > 0;
                *left = left.saturating_sub(1);
                go
            };
            if !hit {
                return self.inner.batch_meter_usage(records).await;
            }
            let others: Vec<MeteringRecord> = records
                .iter()
                .filter(|r| r.key.dimension != self.dimension)
                .cloned()
                .collect();
            let mut answers = self.inner.batch_meter_usage(&others).await?.into_iter();
            Ok(records
                .iter()
                .map(|r| {
                    if r.key.dimension == self.dimension {
                        RecordVerdict::Unprocessed
                    } else {
                        answers.next().unwrap()
                    }
                })
                .collect())
        }
    }

    #[tokio::test]
    async fn unprocessed_records_are_retried_once_then_left_for_the_next_run() {
        let now = t(NOW);
        let world = World::new(now);
        let keys = seed(&world, 3, "2026-11-30T09", 1);
        let api = Arc::new(Unprocessing::new(&world, "d001", 2));

        let report = run_via(&world, now, api.clone()).await;

        // Sent, unprocessed, retried once after a backoff, still unprocessed: pending.
        assert_eq!(
            (report.success, report.unprocessed, report.api_calls),
            (2, 1, 2)
        );
        assert_eq!(status(&world, &keys[1]), AggregatedStatus::Pending);
        assert_eq!(world.metrics.total(metric::USAGE_RECORD_UNPROCESSED), 1);
        // The next run bills it, exactly once.
        let report = run_via(&world, now, api.clone()).await;
        assert_eq!(report.success, 1);
        assert_eq!(world.api.ledger().len(), 3);

        // An unprocessed record that goes through on the retry is billed in the same run.
        let more = seed(&world, 1, "2026-11-30T08", 1);
        let api = Arc::new(Unprocessing::new(&world, "d000", 1));
        let report = run_via(&world, now, api.clone()).await;
        assert_eq!((report.success, report.unprocessed), (1, 0));
        assert_eq!(status(&world, &more[0]), AggregatedStatus::Success);
    }

    #[tokio::test]
    async fn throttling_backs_off_with_jitter_and_stops_after_repeated_failures() {
        let now = t(NOW);
        let world = World::new(now);
        let keys = seed(&world, 100, "2026-11-30T09", 1);
        world
            .api
            .fail_next(MeteringError::Throttled("Rate exceeded".into()));
        world
            .api
            .fail_next(MeteringError::Throttled("Rate exceeded".into()));
        world.api.fail_next(MeteringError::Transient(
            "InternalServiceErrorException".into(),
        ));

        let report = world.submit(now).await;

        // Three failing batches in a row: the run stops, their records stay pending and
        // unclaimed; nothing after them was sent.
        assert_eq!(report.stopped.as_deref(), Some("throttled"));
        assert_eq!(
            (
                report.success,
                report.left_pending,
                report.ambiguous,
                report.api_calls
            ),
            (0, 50, 25, 3)
        );
        assert!(
            keys.iter()
                .all(|k| world.record(k).unwrap().in_flight_until.is_none())
        );
        // Backoff with jitter between the failures, on top of pacing.
        let backoffs: Vec<_> = world
            .clock
            .sleeps()
            .into_iter()
            .filter(|d| *d != MIN_CALL_INTERVAL)
            .collect();
        assert!(!backoffs.is_empty());
        // Further runs bill everything exactly once.
        world.submit(now).await;
        world.submit(now).await;
        assert!(
            keys.iter()
                .all(|k| status(&world, k) == AggregatedStatus::Success)
        );
        assert_eq!(world.api.ledger().len(), 100);
    }

    #[tokio::test]
    async fn an_internal_error_mid_bisection_pins_only_the_records_of_that_call() {
        let now = t(NOW);
        let world = World::new(now);
        let keys = seed(&world, 25, "2026-11-30T09", 2);
        // GIVEN a batch that fails validation (d022), whose left half is answered, whose
        // right half fails validation too and whose right half's first sub-call (d013 to
        // d018) gets an internal error
        world
            .api
            .reject_dimension("d022", "InvalidUsageDimensionException");
        world.api.fail_after(
            3,
            MeteringError::Transient("InternalServiceErrorException".into()),
        );

        let report = world.submit(now).await;

        assert_eq!(report.success, 13);
        assert_eq!(world.api.calls()[3].len(), 6);
        // THEN the records of the failed call may have been billed: their quantity is
        // pinned, and they are counted ambiguous once each
        for key in &keys[13..19] {
            let record = world.record(key).unwrap();
            assert_eq!(record.status, AggregatedStatus::Pending);
            assert_eq!(record.sent_quantity, Some(2), "{key}");
            assert!(!record.accepts_folds());
        }
        assert_eq!(world.metrics.total(metric::AMBIGUOUS_SUBMISSION), 6);
        assert_eq!(report.ambiguous, 6);
        // AND the records never sent in a call that may have billed are released as
        // never sent: late rows still fold into them
        for key in &keys[19..25] {
            let record = world.record(key).unwrap();
            assert_eq!(record.status, AggregatedStatus::Pending);
            assert_eq!(record.sent_quantity, None, "{key}");
            assert!(record.accepts_folds(), "{key}");
        }
    }

    #[tokio::test]
    async fn a_record_the_answer_leaves_unclear_is_resent_with_the_same_quantity() {
        let now = t(NOW);
        let world = World::new(now);
        let keys = seed(&world, 3, "2026-11-30T09", 4);
        // GIVEN an answer that bills every record but leaves the last one unclear
        // (missing from both lists, an unknown status, or another record echoed)
        world.api.answer_unclearly(1, UnclearAnswer::Missing);

        let report = world.submit(now).await;

        // THEN it may have been billed: pending, its quantity pinned, counted ambiguous,
        // not unprocessed
        assert_eq!(
            (report.success, report.ambiguous, report.unprocessed),
            (2, 1, 0)
        );
        let unclear = world.record(&keys[2]).unwrap();
        assert_eq!(unclear.status, AggregatedStatus::Pending);
        assert_eq!(unclear.sent_quantity, Some(4));
        assert!(
            !unclear.accepts_folds(),
            "late rows must not change the quantity"
        );
        assert_eq!(world.metrics.total(metric::AMBIGUOUS_SUBMISSION), 1);
        assert_eq!(world.metrics.total(metric::USAGE_RECORD_UNPROCESSED), 0);
        // AND the next run re-sends exactly that quantity; billed once
        let again = world.submit(now).await;
        assert_eq!(again.success + again.duplicate, 1);
        assert!(status(&world, &keys[2]).is_terminal());
        assert_eq!(world.api.ledger()[&keys[2]].quantity, 4);
        assert!(
            world.api.calls()[1].iter().all(|r| r.quantity == 4),
            "re-sent with the pinned quantity"
        );
    }

    #[tokio::test]
    async fn a_disabled_api_stops_the_run_without_marking_records() {
        let now = t(NOW);
        let world = World::new(now);
        let keys = seed(&world, 30, "2026-11-30T09", 1);
        world.api.fail_next(MeteringError::Disabled(
            "The API is disabled in the Region.".into(),
        ));
        let report = world.submit(now).await;
        assert_eq!(report.stopped.as_deref(), Some("disabled"));
        assert_eq!(report.api_calls, 1);
        assert_eq!(world.metrics.total(metric::METERING_API_DISABLED), 1);
        for key in &keys {
            let record = world.record(key).unwrap();
            assert_eq!(
                (record.status, record.in_flight_until),
                (AggregatedStatus::Pending, None)
            );
        }
    }

    /// Marketplace that checks, on every call, that the records sent are claimed and
    /// that the outcomes of the batch before the previous one are stored (the previous
    /// one's are written while this call is made).
    struct OrderChecking {
        inner: MemoryMeteringApi,
        world: World,
        batches: Mutex<Vec<Vec<GroupKey>>>,
    }

    #[async_trait]
    impl MeteringApi for OrderChecking {
        async fn batch_meter_usage(
            &self,
            records: &[MeteringRecord],
        ) -> Result<Vec<RecordVerdict>, MeteringError> {
            {
                let mut batches = self.batches.lock().unwrap();
                if let Some(two_back) = batches.len().checked_sub(2).and_then(|i| batches.get(i)) {
                    for key in two_back {
                        assert_eq!(
                            self.world.record(key).unwrap().status,
                            AggregatedStatus::Success,
                            "{key} not recorded while the batch after it was sent"
                        );
                    }
                }
                // Every record in flight was claimed first.
                for record in records {
                    assert!(
                        self.world
                            .record(&record.key)
                            .unwrap()
                            .in_flight_until
                            .is_some()
                    );
                }
                batches.push(records.iter().map(|r| r.key.clone()).collect());
            }
            self.inner.batch_meter_usage(records).await
        }
    }

    #[tokio::test]
    async fn each_batch_is_claimed_before_sending_and_recorded_while_the_next_is_sent() {
        let now = t(NOW);
        let world = World::new(now);
        let keys = seed(&world, 80, "2026-11-30T09", 1);
        let api = Arc::new(OrderChecking {
            inner: world.api.clone(),
            world: world.clone(),
            batches: Mutex::new(vec![]),
        });
        let report = run_via(&world, now, api.clone()).await;
        assert_eq!((report.success, report.api_calls), (80, 4));
        assert_eq!(api.batches.lock().unwrap().len(), 4);
        for key in &keys {
            let record = world.record(key).unwrap();
            assert_eq!(
                (record.status, record.claim_id),
                (AggregatedStatus::Success, None),
                "the last batch is recorded before the run ends"
            );
        }
    }

    #[tokio::test]
    async fn a_run_stopped_mid_pipeline_writes_what_it_knows_and_releases_the_next_batch() {
        let now = t(NOW);
        let world = World::new(now);
        let keys = seed(&world, 60, "2026-11-30T09", 1);
        // The first batch bills; the second finds the Region disabled, which stops the
        // run while the third batch is already claimed.
        world
            .api
            .fail_after(1, MeteringError::Disabled("disabled in the Region".into()));
        let report = world.submit(now).await;
        assert_eq!(report.stopped.as_deref(), Some("disabled"));
        assert_eq!(report.success, 25);
        for key in &keys {
            let record = world.record(key).unwrap();
            assert_eq!(record.claim_id, None, "{key}: no claim left behind");
            assert_eq!(record.in_flight_until, None);
        }
        let billed = keys
            .iter()
            .filter(|k| status(&world, k) == AggregatedStatus::Success)
            .count();
        assert_eq!(billed, 25);
    }

    #[tokio::test]
    async fn a_subscribers_failure_after_the_send_still_writes_every_known_outcome() {
        let now = t(NOW);
        let world = World::new(now);
        let billed = seed(&world, 1, "2026-11-30T09", 3)[0].clone();
        // A license Marketplace does not entitle: its CustomerNotSubscribed needs the
        // subscribers row, whose read fails.
        let refused = group(&license(7), ACCOUNT_B, "a", "2026-11-30T09");
        world.tables.insert_aggregated(pending(&refused, 2), now);
        world.subscribers.fail_next(
            crate::memory::StoreOp::SubscriberGet,
            PortError::Failed {
                operation: "GetItem",
                message: "AccessDenied".into(),
            },
        );

        let result = run(&world, now, &world.submit_settings()).await;

        // The run reports the failure, but the billed record is recorded billed and the
        // other released, pending, for the next run.
        assert!(result.is_err());
        assert_eq!(status(&world, &billed), AggregatedStatus::Success);
        let other = world.record(&refused).unwrap();
        assert_eq!(other.status, AggregatedStatus::Pending);
        assert_eq!(other.in_flight_until, None);
        assert_eq!(
            other.sent_quantity,
            Some(2),
            "Marketplace saw the record: its quantity is final"
        );
    }

    #[tokio::test]
    async fn an_unreadable_deprovisioning_index_makes_the_run_incomplete_not_silent() {
        let now = t(NOW);
        let world = World::new(now);
        let keys = seed(&world, 1, "2026-11-30T09", 3);
        world.subscribers.fail_next(
            crate::memory::StoreOp::SubscriberDeprovisioning,
            PortError::Failed {
                operation: "Query",
                message: "AccessDenied".into(),
            },
        );
        let report = world.submit(now).await;
        // Completed hours still bill; the run says it was incomplete, with a metric.
        assert_eq!(status(&world, &keys[0]), AggregatedStatus::Success);
        assert!(report.flush_error.is_some());
        assert!(!report.complete());
        assert_eq!(
            world
                .metrics
                .get(metric::INCOMPLETE_RUN, &[("Function", "submitter")]),
            1
        );
    }

    #[tokio::test]
    async fn records_held_or_moved_are_skipped_this_run() {
        let now = t(NOW);
        let world = World::new(now);
        let keys = seed(&world, 2, "2026-11-30T09", 1);
        assert!(
            claim_read(&world.aggregated, &keys[0], 1, &claim_at("other", now, 5))
                .await
                .unwrap()
                .is_some()
        );
        let report = world.submit(now).await;
        assert_eq!((report.success, report.claim_skipped), (1, 1));
        assert_eq!(status(&world, &keys[0]), AggregatedStatus::Pending);
    }

    #[tokio::test]
    async fn an_interrupted_send_is_resent_after_its_lease_and_closes_without_double_billing() {
        let now = t(NOW);
        let world = World::new(now);
        let keys = seed(&world, 1, "2026-11-30T09", 6);
        // GIVEN a run that claimed and sent the record, then died before recording it
        assert!(
            claim_read(&world.aggregated, &keys[0], 1, &claim_at("died", now, 15))
                .await
                .unwrap()
                .is_some()
        );
        world
            .api
            .batch_meter_usage(&[metering_record(&world.record(&keys[0]).unwrap())])
            .await
            .unwrap();
        // WHEN a later run finds the lease expired
        let later = now + chrono::Duration::minutes(20);
        let report = world.submit(later).await;
        // THEN it re-sends the same quantity; Marketplace deduplicates; billed once
        assert_eq!(report.success + report.duplicate, 1);
        assert!(status(&world, &keys[0]).is_terminal());
        assert_eq!(world.api.ledger()[&keys[0]].quantity, 6);
        assert_eq!(world.api.ledger().len(), 1);
    }

    #[tokio::test]
    async fn expired_records_age_out_loudly_and_zero_skips_quietly() {
        let now = t(NOW);
        let mut world = World::new(now);
        world.zero_policy = ZeroQuantityPolicy::Skip;
        let l = license(1);
        let lost = group(&l, ACCOUNT_A, "a", "2026-11-29T10");
        let zero = group(&l, ACCOUNT_A, "b", "2026-11-29T10");
        let held = group(&l, ACCOUNT_A, "c", "2026-11-29T09");
        world.tables.insert_aggregated(pending(&lost, 3), now);
        world.tables.insert_aggregated(pending(&zero, 0), now);
        let mut interrupted = pending(&held, 3);
        interrupted.in_flight_until = Some(t("2026-11-29T10:05:00Z"));
        world.tables.insert_aggregated(interrupted, now);
        let live_zero = group(&l, ACCOUNT_A, "b", "2026-11-30T08");
        world.tables.insert_aggregated(pending(&live_zero, 0), now);

        let report = world.submit(now).await;

        assert_eq!(report.expired, 3);
        assert_eq!(report.api_calls, 0, "a zero hour is never sent under skip");
        assert_eq!(status(&world, &lost), AggregatedStatus::SubmissionExpired);
        assert_eq!(
            world.record(&zero).unwrap().status_reason.as_deref(),
            Some(REASON_ZERO_QUANTITY_SKIPPED)
        );
        assert_eq!(
            world.record(&held).unwrap().status_reason.as_deref(),
            Some(REASON_INTERRUPTED_SUBMISSION)
        );
        assert_eq!(world.metrics.total(metric::USAGE_SUBMISSION_EXPIRED), 2);
        assert_eq!(status(&world, &live_zero), AggregatedStatus::Pending);
    }

    #[tokio::test]
    async fn an_age_out_whose_answer_was_lost_is_counted_once() {
        // GIVEN an expired pending record, and an aggregated store whose first outcome
        // write takes effect and then loses its answer (the retry's condition fails)
        let now = t(NOW);
        let world = World::new(now);
        let l = license(1);
        let lost = group(&l, ACCOUNT_A, "a", "2026-11-29T10");
        world.tables.insert_aggregated(pending(&lost, 3), now);
        let lossy = Arc::new(LostAnswers::new(
            world.aggregated.clone(),
            crate::memory::StoreOp::AggregatedRecord,
            1,
        ));
        let ports = SubmitPorts {
            aggregated: lossy.clone(),
            ..world.submit_ports()
        };

        // WHEN the submitter ages it out
        let report = submit(now, &world.submit_settings(), &ports, Budget::UNLIMITED)
            .await
            .unwrap();

        // THEN it is expired and counted, once
        assert!(lossy.exhausted());
        assert_eq!(status(&world, &lost), AggregatedStatus::SubmissionExpired);
        assert_eq!(report.expired, 1);
        assert_eq!(world.metrics.total(metric::USAGE_SUBMISSION_EXPIRED), 1);
        // AND the next run counts nothing more
        assert_eq!(world.submit(now).await.expired, 0);
        assert_eq!(world.metrics.total(metric::USAGE_SUBMISSION_EXPIRED), 1);
    }

    #[tokio::test]
    async fn a_run_stamped_before_an_hour_began_never_ages_that_hour_out() {
        // GIVEN a deprovisioning license whose final hour (11) was flushed early, and a
        // direct-submit row written for hour 11 a little ahead of time
        let world = World::new(t("2026-11-30T11:00:05Z"));
        let l = license(1);
        world.api.entitle(&l, ACCOUNT_A);
        let next_hour = group(&l, ACCOUNT_A, "a", "2026-11-30T11");
        world
            .tables
            .insert_aggregated(pending(&next_hour, 4), world.clock.now());
        // WHEN a run whose event time is 10:59:40 (its schedule fired before the hour)
        // sweeps the index
        let report = world.submit(t("2026-11-30T10:59:40Z")).await;
        // THEN the hour is not expired: it is billed by a later run
        assert_eq!(report.expired, 0);
        assert_eq!(status(&world, &next_hour), AggregatedStatus::Pending);
        let later = world.submit(t("2026-11-30T12:05:00Z")).await;
        assert_eq!(later.success, 1);
        assert_eq!(world.api.ledger()[&next_hour].quantity, 4);
    }

    /// Marketplace that notes each sent record's lease as stored while the call is out,
    /// and lets a minute pass per call.
    struct LeaseWatch {
        inner: MemoryMeteringApi,
        tables: crate::memory::MemoryTables,
        clock: crate::memory::ManualClock,
        leases: Mutex<Vec<Option<Instant>>>,
    }

    #[async_trait]
    impl MeteringApi for LeaseWatch {
        async fn batch_meter_usage(
            &self,
            records: &[MeteringRecord],
        ) -> Result<Vec<RecordVerdict>, MeteringError> {
            for record in records {
                let stored = self.tables.aggregated_records();
                let stored = stored.iter().find(|r| r.key == record.key).unwrap();
                self.leases.lock().unwrap().push(stored.in_flight_until);
            }
            self.clock.advance(std::time::Duration::from_secs(60));
            self.inner.batch_meter_usage(records).await
        }
    }

    #[tokio::test]
    async fn a_claim_ends_when_the_invocation_that_holds_it_ends() {
        // GIVEN an invocation that Lambda ends at 10:34 (the run stops 20 s before)
        let now = t(NOW);
        let world = World::new(now);
        seed(&world, 60, "2026-11-30T09", 1);
        let end = t("2026-11-30T10:34:00Z");
        let api = Arc::new(LeaseWatch {
            inner: world.api.clone(),
            tables: world.tables.clone(),
            clock: world.clock.clone(),
            leases: Mutex::new(Vec::new()),
        });
        let ports = SubmitPorts {
            metering: api.clone(),
            ..world.submit_ports()
        };
        // WHEN it claims batches minutes apart
        let budget = Budget::before(end, chrono::Duration::seconds(20));
        submit(now, &world.submit_settings(), &ports, budget)
            .await
            .unwrap();
        // THEN every claim, early or late, lapses at the invocation's end, never after
        let leases = api.leases.lock().unwrap().clone();
        assert_eq!(leases.len(), 60);
        assert!(leases.iter().all(|l| *l == Some(end)), "{leases:?}");
    }

    #[tokio::test]
    async fn a_stale_run_expires_only_what_the_wall_clock_expires_too() {
        // GIVEN an hour that has aged out by the event time but not by the wall clock
        // (an invocation replayed with a later time, or a skewed clock)
        let world = World::new(t("2026-11-30T10:30:00Z"));
        let l = license(1);
        world.api.entitle(&l, ACCOUNT_A);
        let edge = group(&l, ACCOUNT_A, "a", "2026-11-29T11");
        world
            .tables
            .insert_aggregated(pending(&edge, 2), world.clock.now());
        // WHEN a run stamped after the hour's window closed sweeps the index
        let settings = world.submit_settings();
        let report = run(&world, t("2026-11-30T11:00:10Z"), &settings)
            .await
            .unwrap();
        // THEN it waits for the wall clock to agree; the hour is still billed in time
        assert_eq!(report.expired, 0);
        assert_eq!(status(&world, &edge), AggregatedStatus::Pending);
        let billed = world.submit(t("2026-11-30T10:31:00Z")).await;
        assert_eq!(billed.success, 1);
    }

    #[tokio::test]
    async fn deferred_zero_hours_go_out_only_at_the_oldest_edge() {
        let now = t(NOW);
        let world = World::new(now);
        world.api.entitle(&license(1), ACCOUNT_A);
        let edge = group(&license(1), ACCOUNT_A, "a", "2026-11-29T11");
        let recent = group(&license(1), ACCOUNT_A, "a", "2026-11-30T08");
        world.tables.insert_aggregated(pending(&edge, 0), now);
        world.tables.insert_aggregated(pending(&recent, 0), now);
        let report = world.submit(now).await;
        assert_eq!(report.success, 1);
        assert_eq!(status(&world, &edge), AggregatedStatus::Success);
        assert_eq!(status(&world, &recent), AggregatedStatus::Pending);
    }

    #[tokio::test]
    async fn every_run_reports_the_records_pending_past_their_lock() {
        let now = t(NOW);
        let world = World::new(now);
        let past_lock = |w: &World| w.metrics.get(metric::PENDING_PAST_LOCK, &[]);
        // GIVEN nothing pending: the run still reports, with zero (a heartbeat data point)
        let report = world.submit(now).await;
        assert_eq!(report.pending_past_lock, 0);
        assert!(
            world
                .metrics
                .snapshot()
                .contains_key(&(metric::PENDING_PAST_LOCK.to_string(), vec![]))
        );
        // GIVEN two due records of a completed hour and one of the open hour (not due)
        seed(&world, 2, "2026-11-30T09", 5);
        seed(&world, 1, "2026-11-30T10", 5);
        // WHEN Marketplace refuses the Region: the run finds both, bills neither
        world
            .api
            .fail_next(MeteringError::Disabled("not in this Region".into()));
        let report = world.submit(now).await;
        assert_eq!((report.pending_past_lock, report.success), (2, 0));
        assert_eq!(past_lock(&world), 2);
        assert_eq!(world.metrics.total(metric::USAGE_RECORD_SUBMITTED), 0);
        // WHEN the next run bills them, and the one after finds nothing due
        let report = world.submit(now).await;
        assert_eq!((report.pending_past_lock, report.success), (2, 2));
        let report = world.submit(now).await;
        assert_eq!(report.pending_past_lock, 0);
        // THEN the metric counted what each run found due
        assert_eq!(past_lock(&world), 4);
        assert_eq!(world.metrics.total(metric::USAGE_RECORD_SUBMITTED), 2);
    }

    #[tokio::test]
    async fn dry_run_never_calls_marketplace() {
        let now = t(NOW);
        let world = World::new(now);
        let test_account = group(&license(1), ACCOUNT_A, "a", "2026-11-30T09");
        let real_buyer = group(&license(2), ACCOUNT_B, "a", "2026-11-30T09");
        world
            .tables
            .insert_aggregated(pending(&test_account, 2), now);
        world.tables.insert_aggregated(pending(&real_buyer, 2), now);
        let mut settings = world.submit_settings();
        settings.mode = MeteringMode::from_parts("dry-run", &[ACCOUNT_A.to_string()]).unwrap();
        let report = run(&world, now, &settings).await.unwrap();
        assert_eq!(
            (
                report.dry_run_submitted,
                report.dry_run_skipped,
                report.api_calls
            ),
            (1, 1, 0)
        );
        // Only the test account's record is meant to be sent: the other never is.
        assert_eq!(report.pending_past_lock, 1);
        assert!(world.api.calls().is_empty());
        assert_eq!(
            status(&world, &test_account),
            AggregatedStatus::DryRunSubmitted
        );
        assert_eq!(status(&world, &real_buyer), AggregatedStatus::Pending);
    }
    #[tokio::test]
    async fn the_deadline_stops_sending_between_batches() {
        let now = t(NOW);
        let world = World::new(now);
        let keys = seed(&world, 100, "2026-11-30T09", 1);
        // Pacing sleeps 100 ms per call on the manual clock: calls start at 0, 100 and
        // 200 ms; at 200 ms the 150 ms deadline has passed, so no fourth batch starts.
        let budget = Budget::until(world.clock.now() + chrono::Duration::milliseconds(150));
        let report = submit(now, &world.submit_settings(), &world.submit_ports(), budget)
            .await
            .unwrap();
        assert_eq!(report.stopped.as_deref(), Some("deadline"));
        assert_eq!((report.api_calls, report.success), (3, 75));
        let pending_left = keys
            .iter()
            .filter(|k| status(&world, k) == AggregatedStatus::Pending)
            .count();
        assert_eq!(pending_left, 25);
        assert!(
            keys.iter()
                .all(|k| world.record(k).unwrap().in_flight_until.is_none())
        );
    }

    #[tokio::test]
    async fn a_record_too_large_to_send_is_closed_as_an_error() {
        let now = t(NOW);
        let world = World::new(now);
        let keys = seed(&world, 1, "2026-11-30T09", 1);
        let mut big = pending(&group(&license(1), ACCOUNT_A, "big", "2026-11-30T09"), 2);
        big.allocations = Some(vec![
            Allocation {
                quantity: 1,
                tags: vec![Tag {
                    key: "k".into(),
                    value: "v".repeat(200),
                }],
            },
            Allocation {
                quantity: 1,
                tags: vec![Tag {
                    key: "k".into(),
                    value: "w".repeat(200),
                }],
            },
        ]);
        world.tables.insert_aggregated(big.clone(), now);
        let mut settings = world.submit_settings();
        settings.limits = BatchLimits::new(25, 400).unwrap();
        let report = run(&world, now, &settings).await.unwrap();
        assert_eq!((report.success, report.errors), (1, 1));
        assert_eq!(
            world.record(&big.key).unwrap().status_reason.as_deref(),
            Some(REASON_REQUEST_TOO_LARGE)
        );
        assert_eq!(status(&world, &keys[0]), AggregatedStatus::Success);
    }

    #[tokio::test]
    async fn store_failures_end_the_run_with_an_error() {
        let now = t(NOW);
        let world = World::new(now);
        seed(&world, 1, "2026-11-30T09", 1);
        for _ in 0..RetryPolicy::STORE.attempts {
            world.tables.fail_next(
                crate::memory::StoreOp::AggregatedPendingPage,
                PortError::Transient {
                    operation: "Query",
                    message: "throttled".into(),
                },
            );
        }
        let result = run(&world, now, &world.submit_settings()).await;
        assert!(matches!(result, Err(PipelineError::Port(_))), "{result:?}");
    }

    #[tokio::test]
    async fn direct_submit_rows_are_submitted_the_same_way() {
        // GIVEN the seller writes a finalized hourly total straight into the table,
        // without a product code
        let now = t(NOW);
        let world = World::new(now);
        world.api.entitle(&license(1), ACCOUNT_A);
        let key = group(&license(1), ACCOUNT_A, "a", "2026-11-30T09");
        let mut direct = pending(&key, 42);
        direct.product_code = String::new();
        assert_eq!(
            world.aggregated.put_direct(&direct, now).await.unwrap(),
            crate::ports::PutOutcome::Created
        );
        let mut settings = world.submit_settings();
        settings.deployment = DeploymentMode::DirectSubmit;
        let report = run(&world, now, &settings).await.unwrap();
        assert_eq!(report.success, 1);
        assert_eq!(world.api.ledger()[&key].quantity, 42);
        assert_eq!(world.api.ledger()[&key].product_code, PRODUCT);
    }

    /// Counts the pending-index reads in flight at once; each read waits one poll, so
    /// reads issued together are seen together.
    struct Overlap {
        inner: crate::memory::MemoryAggregatedStore,
        /// (in flight, most in flight at once)
        state: Mutex<(usize, usize)>,
    }

    #[async_trait]
    impl crate::memory::Decorator for Overlap {
        async fn around<T: Send>(
            &self,
            call: crate::memory::StoreCall,
            inner: impl std::future::Future<Output = Result<T, PortError>> + Send,
        ) -> Result<T, PortError> {
            if call.op != crate::memory::StoreOp::AggregatedPendingPage {
                return inner.await;
            }
            {
                let mut s = self.state.lock().unwrap();
                s.0 += 1;
                s.1 = s.1.max(s.0);
            }
            crate::memory::yield_now().await;
            self.state.lock().unwrap().0 -= 1;
            inner.await
        }
    }

    #[async_trait]
    impl crate::memory::AggregatedDecorator for Overlap {
        type Inner = crate::memory::MemoryAggregatedStore;
        fn inner(&self) -> &Self::Inner {
            &self.inner
        }
    }

    #[tokio::test]
    async fn hours_are_read_four_at_a_time_and_their_records_share_calls() {
        // GIVEN 10 pending records in each of three completed hours of the day
        let now = t(NOW);
        let world = World::new(now);
        for hour in ["2026-11-30T01", "2026-11-30T05", "2026-11-30T09"] {
            for i in 0..10 {
                let key = group(&license(1), ACCOUNT_A, &format!("{hour}-{i}"), hour);
                world
                    .tables
                    .insert_aggregated(pending(&key, 1), world.clock.now());
            }
        }
        world.api.entitle(&license(1), ACCOUNT_A);
        let store = Arc::new(Overlap {
            inner: world.aggregated.clone(),
            state: Mutex::new((0, 0)),
        });
        // WHEN one run goes over the 23 completed live hours
        let ports = SubmitPorts {
            aggregated: store.clone(),
            ..world.submit_ports()
        };
        let report = submit(now, &world.submit_settings(), &ports, Budget::UNLIMITED)
            .await
            .unwrap();
        // THEN the hours were read READ_AHEAD at a time, and the 30 records went out in
        // two calls (25 + 5) rather than three part-full ones
        let (_, most_at_once) = *store.state.lock().unwrap();
        assert_eq!(most_at_once, READ_AHEAD);
        assert_eq!(report.success, 30);
        let sizes: Vec<usize> = world.api.calls().iter().map(Vec::len).collect();
        assert_eq!(sizes, vec![25, 5]);
    }

    #[tokio::test]
    async fn the_whole_pipeline_bills_each_group_exactly_its_aggregated_rows() {
        // GIVEN usage over several licenses (two on one account), dimensions and hours
        let now = t(NOW);
        let world = World::new(now);
        let (l1, l2, l3) = (license(1), license(2), license(3));
        for (l, account) in [(&l1, ACCOUNT_A), (&l2, ACCOUNT_A), (&l3, ACCOUNT_B)] {
            world.api.entitle(l, account);
            for (i, h) in ["07", "08", "09"].iter().enumerate() {
                for m in 0..5 {
                    world.put(
                        l,
                        account,
                        "requests",
                        &format!("2026-11-30T{h}:{:02}:00Z", m * 7),
                        (i as i64 + 1) * 10 + m,
                    );
                    world.put(
                        l,
                        account,
                        "storage",
                        &format!("2026-11-30T{h}:{:02}:30Z", m * 7),
                        1,
                    );
                }
            }
        }
        // WHEN every stage runs (twice, as schedules and redeliveries would)
        world.run_upstream(now).await;
        world.submit(now).await;
        world.run_upstream(now).await;
        world.submit(now).await;
        // THEN every raw row is Aggregated and each group billed exactly its sum
        assert!(
            world
                .raw_statuses()
                .iter()
                .all(|(_, s)| s.as_deref() == Some("Aggregated"))
        );
        let ledger = world.api.ledger();
        assert_eq!(ledger.len(), 18);
        for (key, entry) in &ledger {
            let sum: i64 = world
                .tables
                .raw_rows()
                .iter()
                .filter(|r| {
                    r.license_arn == key.license_arn
                        && r.sort_key.starts_with(&key.usage_sort_key_prefix())
                })
                .map(|r| match r.attrs.get(crate::model::attr::QUANTITY) {
                    Some(crate::model::Attr::N(q)) => q.parse::<i64>().unwrap(),
                    _ => 0,
                })
                .sum();
            assert_eq!(entry.quantity, sum, "{key}");
            assert_eq!(world.record(key).unwrap().status, AggregatedStatus::Success);
        }
        // The three hours' 18 records share one call (a batch may span hours), oldest first.
        let calls = world.api.calls();
        assert_eq!(calls.len(), 1);
        let hours: Vec<HourBucket> = calls[0].iter().map(|r| r.key.hour).collect();
        assert!(hours.is_sorted(), "{hours:?}");
    }
}

//! One submitter run: drain the pending index oldest-first, claim each batch, send it
//! with bisection under the pacing, write its outcomes back while the next batch goes
//! out, then age out what can no longer be submitted. A batch on the wire is `send.rs`,
//! its answers judged and written back `outcomes.rs`, the age-out `age_out.rs`.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::Arc;

use futures_util::StreamExt;
use tracing::{error, info, warn};

use crate::aggregate::submission_due;
use crate::model::{AggregatedRecord, AggregatedStatus, GroupKey, Subscriber, SubscriptionStatus};
use crate::pipeline::budget::Budget;
use crate::pipeline::error::PipelineError;
use crate::pipeline::retry::{RetryPolicy, retry_transient};
use crate::ports::{
    AggregatedStore, Claim, ClaimRequest, Clock, Cursor, MAX_BATCH_WRITES, MalformedItem,
    MeteringApi, MeteringRecord, MetricsSink, OutcomeWrite, Page, RecordVerdict, SubmissionUpdate,
    SubscriberStore, metric,
};
use crate::random::random_u64;
use crate::submit::batch::plan_batches;
use crate::submit::bisect::{BisectReport, RecordResult};
use crate::submit::outcome::{
    EarlierSends, MetricEvent, Outcome, RunAction, may_have_billed, next_state,
};
use crate::submit::pacing::PacedMeteringApi;
use crate::time::{self, HourBucket, Instant};

use super::settings::{MeteringMode, SubmitSettings};
use super::{REASON_MALFORMED_ITEM, REASON_REQUEST_TOO_LARGE};

mod age_out;
mod outcomes;
mod send;
pub use send::SEND_MARGIN;

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
    /// Why the run stopped early, if it did (`deadline`, `throttled`, `disabled`,
    /// `refused`).
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
    /// Calls kept being refused before processing (credentials, role, signature, a
    /// connection that cannot be made).
    Refused,
}

impl Stop {
    fn as_str(self) -> &'static str {
        match self {
            Stop::Deadline => "deadline",
            Stop::Throttled => "throttled",
            Stop::Disabled => "disabled",
            Stop::Refused => "refused",
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
        started: ports.clock.now(),
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
    /// The wall clock when the run began: `now` plus the time since is the run's clock
    /// as each call goes out (a replayed run keeps its event's timeline).
    started: Instant,
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
mod tests;

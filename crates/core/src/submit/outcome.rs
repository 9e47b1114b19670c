//! Mapping of one record's `BatchMeterUsage` result to its aggregated row's next state,
//! the metric it emits and what the run does next (ARCHITECTURE.md:
//! status transitions; docs/design.md: aggregation commit). Pure: no I/O. The
//! full-jitter backoff between retries is [`crate::backoff`].
//!
//! | result | next row state | metric (per record) | run |
//! |---|---|---|---|
//! | `Success` | `Success` + `meteringRecordId` | `UsageRecordSubmitted` | continue |
//! | `DuplicateRecord`, an earlier call of ours may have billed it (`possiblyBilled`, or a lapsed claim; same quantity, by protocol) | `DuplicateRecord` + reason `BilledByEarlierAttempt` | | continue |
//! | `DuplicateRecord` where nothing of ours may have billed it (a first send, a replayed `Error`, a `CustomerNotSubscribed` kept pending) | `DuplicateRecord` + reason `UnexpectedDuplicate` | `UnexpectedDuplicateRecord` (alarm: something else billed the hour) | continue |
//! | `CustomerNotSubscribed`, subscription known | `CustomerNotSubscribed` | `CustomerNotSubscribed` | continue |
//! | `CustomerNotSubscribed`, no row or no `subscriptionStatus` yet | `Pending`, `sentQuantity` kept (re-sent with it; ages out to `SubmissionExpired`) | | continue |
//! | `Unprocessed`: listed in `UnprocessedRecords` (after the one retry) | `Pending` | `UsageRecordUnprocessed` | continue |
//! | answered ambiguously: in neither `Results` nor `UnprocessedRecords`, an unknown `Status`, or a result that does not echo the record sent: the call may have billed | `Pending`, `sentQuantity` kept: no more folds, re-sent with exactly that quantity | `AmbiguousSubmission` | continue |
//! | isolated `TimestampOutOfBoundsException` on a re-send an earlier call of ours may have billed (`possiblyBilled`) | `SubmissionExpired` + reason `InterruptedSubmission` (may have been billed) | `UsageSubmissionExpired` | continue |
//! | isolated validation exception | `Error`, reason = exception name | `BatchMeterUsageException{Exception}` | continue |
//! | sub-batch at the depth cap | `Pending` | (`BisectDepthExceeded` once per sub-batch, [`report_metrics`]) | continue |
//! | ambiguous: in the call that failed transiently (internal error, timeout, transport) or was answered with the wrong number of verdicts: the call may have billed | `Pending`, `sentQuantity` kept: no more folds, re-sent with exactly that quantity | `AmbiguousSubmission` | back off |
//! | not answered: throttled, or never sent (the bisection stopped first, whatever stopped it) | `Pending` (claim released; nothing billed) | (once per stop, [`report_metrics`]) | back off (stop if disabled) |
//! | not answered: `DisabledApiException` | `Pending` (claim released; nothing billed) | (`MeteringApiDisabled`, [`report_metrics`]) | stop |
//! | not answered: refused before processing (an authentication, authorization or signature exception, a connection that failed before the request was written) | `Pending` (claim released; nothing billed, `sentQuantity` not pinned by it) | (`BatchMeterUsageRefused{Exception}`, [`report_metrics`]) | back off (the run stops after repeated refusals) |
//!
//! Every `Pending` release keeps `sentQuantity` when the record's quantity is pinned
//! ([`EarlierSends::quantity_pinned`]), so a definite "not billed now" never reopens a
//! record an earlier call may have billed. Every update says whether a call of ours may
//! have billed the record, now or earlier (`possiblyBilled`, never cleared); a
//! `DuplicateRecord` is `BilledByEarlierAttempt` only then
//! ([`EarlierSends::possibly_billed`]), pinned or not.

use crate::model::{AggregatedStatus, Subscriber};
use crate::ports::{MeteringError, MetricsSink, RecordVerdict, SubmissionUpdate, metric};
use crate::submit::REASON_INTERRUPTED_SUBMISSION;
use crate::submit::bisect::{BisectReport, BisectStop, RecordResult, StopKind};

/// Dimension name carrying the exception on `BatchMeterUsageException` and
/// `BisectDepthExceeded`.
pub const EXCEPTION_DIMENSION: &str = "Exception";

/// What the run does after this record's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunAction {
    /// Go on with the next batch.
    Continue,
    /// Wait a [`backoff_delay`] before the next call (throttling, internal error).
    BackOff,
    /// Send nothing more this run (`DisabledApiException`).
    StopRun,
}

/// One count to add to a metric (value 1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricEvent {
    /// Metric name (one of [`crate::ports::metric`]).
    pub name: &'static str,
    /// Dimensions, in order.
    pub dimensions: Vec<(&'static str, String)>,
}

impl MetricEvent {
    fn plain(name: &'static str) -> Self {
        MetricEvent {
            name,
            dimensions: Vec::new(),
        }
    }

    fn with_exception(name: &'static str, exception: &str) -> Self {
        MetricEvent {
            name,
            dimensions: vec![(EXCEPTION_DIMENSION, exception.to_string())],
        }
    }

    /// Adds each of `events` to `sink` as one count per metric and dimensions (the
    /// number of events that share them): one EMF line per series for a whole batch,
    /// not one per record. Sums, and so alarms, are the same.
    pub fn emit_tallied(events: &[MetricEvent], sink: &dyn MetricsSink) {
        let mut tally: Vec<(&MetricEvent, u64)> = Vec::new();
        for event in events {
            match tally.iter_mut().find(|(seen, _)| *seen == event) {
                Some((_, n)) => *n += 1,
                None => tally.push((event, 1)),
            }
        }
        for (event, n) in tally {
            event.emit_count(sink, n);
        }
    }

    /// Adds 1 to the metric in `sink`.
    pub fn emit(&self, sink: &dyn MetricsSink) {
        self.emit_count(sink, 1);
    }

    fn emit_count(&self, sink: &dyn MetricsSink, n: u64) {
        let dimensions: Vec<(&str, &str)> = self
            .dimensions
            .iter()
            .map(|(name, value)| (*name, value.as_str()))
            .collect();
        sink.count(self.name, &dimensions, n);
    }
}

/// The next state of one aggregated row after a send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// What to record on the row; `None` leaves it untouched (its claim lapses by itself).
    pub update: Option<SubmissionUpdate>,
    /// The per-record metric, if any.
    pub metric: Option<MetricEvent>,
    /// What the run does next.
    pub action: RunAction,
}

/// Whether `CustomerNotSubscribed` is final for a license: the subscribers row exists
/// and License Updated has set its `subscriptionStatus` (any value). Without that the
/// buyer may simply not be activated yet, so the record stays pending (ARCHITECTURE.md: status transitions).
pub fn subscription_known(subscriber: Option<&Subscriber>) -> bool {
    subscriber.is_some_and(|row| row.subscription_status.is_some())
}

/// The row state, metric and run action for one record's result.
///
/// `stop` is the bisection's stop cause ([`BisectReport::stopped`]); it only decides
/// what the run does after a [`RecordResult::NotAnswered`]. `subscriber` is the subscribers row for the record's
/// license and account; it only matters for `CustomerNotSubscribed`.
///
/// `Unprocessed` is mapped as final: the caller retries unprocessed records once (see
/// [`is_unprocessed`]) and maps only the result of that retry.
pub fn next_state(
    result: &RecordResult,
    stop: Option<StopKind>,
    subscriber: Option<&Subscriber>,
    earlier: EarlierSends,
) -> Outcome {
    let mut outcome = answer_state(result, stop, subscriber, earlier.possibly_billed);
    if let Some(update) = outcome.update.as_mut() {
        update.possibly_billed = earlier.possibly_billed || may_have_billed(result);
        if !update.status.is_terminal() {
            update.possibly_sent = earlier.quantity_pinned || reached_marketplace(result);
        }
    }
    outcome
}

/// What a claim read about the record's earlier sends (true at the claim: it is taken
/// only on the record exactly as read).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EarlierSends {
    /// Its quantity is pinned (`sentQuantity`, or a lapsed claim): a release keeps it
    /// ([`crate::ports::ClaimGrant::previously_sent`]).
    pub quantity_pinned: bool,
    /// A call of ours may have billed it
    /// ([`crate::model::AggregatedRecord::may_have_been_billed`]): a `DuplicateRecord`
    /// now is that call's, with this same quantity. Pinned without it (a replayed
    /// `Error`, a `CustomerNotSubscribed` kept pending), a `DuplicateRecord` is
    /// something else's.
    pub possibly_billed: bool,
}

impl EarlierSends {
    /// Never sent.
    pub const NONE: EarlierSends = EarlierSends {
        quantity_pinned: false,
        possibly_billed: false,
    };
    /// An earlier call may have billed it (so its quantity is pinned too).
    pub const POSSIBLY_BILLED: EarlierSends = EarlierSends {
        quantity_pinned: true,
        possibly_billed: true,
    };
}

/// Whether this send reached Marketplace's processing of the record, so its quantity
/// is the group's from now on (a record once sent is never folded into again,
/// ARCHITECTURE.md: status transitions): it may have billed ([`may_have_billed`]), or Marketplace
/// answered it (`CustomerNotSubscribed` kept pending before activation). Throttling,
/// `DisabledApiException`, `UnprocessedRecords`, a bisection's depth cap and a stop
/// before the record's call leave it unprocessed: it may still take late rows.
pub fn reached_marketplace(result: &RecordResult) -> bool {
    may_have_billed(result)
        || matches!(
            result,
            RecordResult::Answered(RecordVerdict::CustomerNotSubscribed)
        )
}

/// Whether this send may have billed the record without saying so: it was in the call
/// that failed without a definite answer (an internal error, a timeout or transport
/// failure, an answer with the wrong number of verdicts: [`RecordResult::Ambiguous`]),
/// or the call's answer left it unclear (missing from both lists, an unknown status, a
/// result that does not echo it: [`RecordVerdict::Ambiguous`]). A record the bisection
/// never sent in such a call was not billed by it, whatever stopped the batch;
/// throttling, `DisabledApiException` and `UnprocessedRecords` are definite.
pub fn may_have_billed(result: &RecordResult) -> bool {
    matches!(
        result,
        RecordResult::Ambiguous | RecordResult::Answered(RecordVerdict::Ambiguous { .. })
    )
}

/// Marketplace's refusal of a record whose hour has left its window.
const TIMESTAMP_OUT_OF_BOUNDS: &str = "TimestampOutOfBoundsException";

/// Reason on a `DuplicateRecord` that answers a re-send: our earlier call billed it.
pub const REASON_BILLED_BY_EARLIER_ATTEMPT: &str = "BilledByEarlierAttempt";
/// Reason on a `DuplicateRecord` that answers a first send: something else billed it.
pub const REASON_UNEXPECTED_DUPLICATE: &str = "UnexpectedDuplicate";

fn answer_state(
    result: &RecordResult,
    stop: Option<StopKind>,
    subscriber: Option<&Subscriber>,
    possibly_billed: bool,
) -> Outcome {
    match result {
        RecordResult::Answered(RecordVerdict::Success { metering_record_id }) => Outcome {
            update: Some(update(
                AggregatedStatus::Success,
                None,
                Some(metering_record_id.clone()),
            )),
            metric: Some(MetricEvent::plain(metric::USAGE_RECORD_SUBMITTED)),
            action: RunAction::Continue,
        },
        RecordResult::Answered(RecordVerdict::DuplicateRecord { metering_record_id }) => {
            // Every re-send carries the quantity of the first possibly-billing send, so a
            // duplicate after a call of ours may have billed means that quantity is billed.
            // Otherwise (a first send, a replayed Error, a CustomerNotSubscribed kept
            // pending) another writer billed the hour, maybe with another quantity.
            let (reason, metric) = if possibly_billed {
                (REASON_BILLED_BY_EARLIER_ATTEMPT, None)
            } else {
                (
                    REASON_UNEXPECTED_DUPLICATE,
                    Some(MetricEvent::plain(metric::UNEXPECTED_DUPLICATE_RECORD)),
                )
            };
            Outcome {
                update: Some(update(
                    AggregatedStatus::DuplicateRecord,
                    Some(reason.to_string()),
                    metering_record_id.clone(),
                )),
                metric,
                action: RunAction::Continue,
            }
        }
        RecordResult::Answered(RecordVerdict::CustomerNotSubscribed) => {
            if subscription_known(subscriber) {
                Outcome {
                    update: Some(update(AggregatedStatus::CustomerNotSubscribed, None, None)),
                    metric: Some(MetricEvent::plain(metric::CUSTOMER_NOT_SUBSCRIBED)),
                    action: RunAction::Continue,
                }
            } else {
                stays_pending(None, RunAction::Continue)
            }
        }
        RecordResult::Answered(RecordVerdict::Ambiguous { .. }) => stays_pending(
            Some(MetricEvent::plain(metric::AMBIGUOUS_SUBMISSION)),
            RunAction::Continue,
        ),
        RecordResult::Answered(RecordVerdict::Unprocessed) => stays_pending(
            Some(MetricEvent::plain(metric::USAGE_RECORD_UNPROCESSED)),
            RunAction::Continue,
        ),
        // A re-send of a record an earlier call of ours may have billed, refused because
        // its hour has since left the window: the window closed on a send whose answer
        // never came, as an age-out over it says ("may have been billed"), not Error.
        RecordResult::Isolated { exception, .. }
            if possibly_billed && exception == TIMESTAMP_OUT_OF_BOUNDS =>
        {
            Outcome {
                update: Some(update(
                    AggregatedStatus::SubmissionExpired,
                    Some(REASON_INTERRUPTED_SUBMISSION.to_string()),
                    None,
                )),
                metric: Some(MetricEvent::plain(metric::USAGE_SUBMISSION_EXPIRED)),
                action: RunAction::Continue,
            }
        }
        RecordResult::Isolated { exception, .. } => Outcome {
            update: Some(update(
                AggregatedStatus::Error,
                Some(exception.clone()),
                None,
            )),
            metric: Some(MetricEvent::with_exception(
                metric::BATCH_METER_USAGE_EXCEPTION,
                exception,
            )),
            action: RunAction::Continue,
        },
        RecordResult::DepthExceeded { .. } => stays_pending(None, RunAction::Continue),
        RecordResult::Ambiguous => stays_pending(
            Some(MetricEvent::plain(metric::AMBIGUOUS_SUBMISSION)),
            RunAction::BackOff,
        ),
        // Never in a call that may have taken effect: nothing billed it.
        RecordResult::NotAnswered => match stop {
            Some(StopKind::Disabled) => stays_pending(None, RunAction::StopRun),
            Some(
                StopKind::Throttled
                | StopKind::Transient
                | StopKind::Refused
                | StopKind::MalformedResponse,
            ) => stays_pending(None, RunAction::BackOff),
            // Unanswered without a stop does not come out of a bisection; pending loses nothing.
            None => stays_pending(None, RunAction::Continue),
        },
    }
}

/// Whether the record came back in `UnprocessedRecords` and earns its one retry.
pub fn is_unprocessed(result: &RecordResult) -> bool {
    matches!(result, RecordResult::Answered(RecordVerdict::Unprocessed))
}

/// The metrics a whole bisection emits once, beside the per-record ones:
/// `BisectDepthExceeded{Exception}` per depth-capped sub-batch, and for a stop
/// `MeteringApiDisabled` (disabled), `BatchMeterUsageRefused{Exception}` (refused
/// before processing) or `BatchMeterUsageException{Exception}` (others).
pub fn report_metrics(report: &BisectReport) -> Vec<MetricEvent> {
    let mut events: Vec<MetricEvent> = report
        .depth_exceeded
        .iter()
        .map(|batch| MetricEvent::with_exception(metric::BISECT_DEPTH_EXCEEDED, &batch.exception))
        .collect();
    if let Some(stop) = &report.stopped {
        events.push(stop_metric(stop));
    }
    events
}

/// The metric for a bisection stop.
pub fn stop_metric(stop: &BisectStop) -> MetricEvent {
    match stop {
        BisectStop::Api(MeteringError::Disabled(_)) => {
            MetricEvent::plain(metric::METERING_API_DISABLED)
        }
        BisectStop::Api(MeteringError::Refused { name, .. }) => {
            MetricEvent::with_exception(metric::BATCH_METER_USAGE_REFUSED, name)
        }
        BisectStop::Api(error) => {
            MetricEvent::with_exception(metric::BATCH_METER_USAGE_EXCEPTION, exception_name(error))
        }
        BisectStop::MalformedResponse { .. } => {
            MetricEvent::with_exception(metric::BATCH_METER_USAGE_EXCEPTION, MALFORMED_RESPONSE)
        }
    }
}

/// `Exception` dimension value for an answer with the wrong number of verdicts.
pub const MALFORMED_RESPONSE: &str = "MalformedResponse";
/// `Exception` dimension value for [`MeteringError::Transient`]: an
/// `InternalServiceErrorException` or a transport failure (the port does not tell them apart).
pub const TRANSIENT_FAILURE: &str = "TransientFailure";

/// The exception name of a request-level failure, for the `Exception` dimension.
pub fn exception_name(error: &MeteringError) -> &str {
    match error {
        MeteringError::Validation { name, .. } => name,
        MeteringError::Throttled(_) => "ThrottlingException",
        MeteringError::Transient(_) => TRANSIENT_FAILURE,
        MeteringError::Disabled(_) => "DisabledApiException",
        MeteringError::Refused { name, .. } => name,
    }
}

fn update(
    status: AggregatedStatus,
    reason: Option<String>,
    metering_record_id: Option<String>,
) -> SubmissionUpdate {
    SubmissionUpdate::new(status, reason, metering_record_id)
}

/// Pending releases the claim and nothing else; the why goes to logs and metrics, not
/// to `meteringStatusReason` (a stale reason would outlive the record's final status).
fn stays_pending(metric: Option<MetricEvent>, action: RunAction) -> Outcome {
    Outcome {
        update: Some(update(AggregatedStatus::Pending, None, None)),
        metric,
        action,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;

//! Mapping of one record's `BatchMeterUsage` result to its aggregated row's next state,
//! the metric it emits and what the run does next (ARCHITECTURE.md:
//! status transitions, aggregation commit), plus
//! the full-jitter backoff between retries. Pure: no I/O, randomness passed in.
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
//! | isolated validation exception | `Error`, reason = exception name | `BatchMeterUsageException{Exception}` | continue |
//! | sub-batch at the depth cap | `Pending` | (`BisectDepthExceeded` once per sub-batch, [`report_metrics`]) | continue |
//! | ambiguous: in the call that failed transiently (internal error, timeout, transport) or was answered with the wrong number of verdicts: the call may have billed | `Pending`, `sentQuantity` kept: no more folds, re-sent with exactly that quantity | `AmbiguousSubmission` | back off |
//! | not answered: throttled, or never sent (the bisection stopped first, whatever stopped it) | `Pending` (claim released; nothing billed) | (once per stop, [`report_metrics`]) | back off (stop if disabled) |
//! | not answered: `DisabledApiException` | `Pending` (claim released; nothing billed) | (`MeteringApiDisabled`, [`report_metrics`]) | stop |
//!
//! Every `Pending` release keeps `sentQuantity` when the record's quantity is pinned
//! ([`EarlierSends::quantity_pinned`]), so a definite "not billed now" never reopens a
//! record an earlier call may have billed. Every update says whether a call of ours may
//! have billed the record, now or earlier (`possiblyBilled`, never cleared); a
//! `DuplicateRecord` is `BilledByEarlierAttempt` only then
//! ([`EarlierSends::possibly_billed`]), pinned or not.

use std::time::Duration;

use crate::model::{AggregatedStatus, Subscriber};
use crate::ports::{MeteringError, MetricsSink, RecordVerdict, SubmissionUpdate, metric};
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

    /// Adds 1 to the metric in `sink`.
    pub fn emit(&self, sink: &dyn MetricsSink) {
        let dimensions: Vec<(&str, &str)> = self
            .dimensions
            .iter()
            .map(|(name, value)| (*name, value.as_str()))
            .collect();
        sink.count(self.name, &dimensions, 1);
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
            Some(StopKind::Throttled | StopKind::Transient | StopKind::MalformedResponse) => {
                stays_pending(None, RunAction::BackOff)
            }
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
/// `MeteringApiDisabled` (disabled) or `BatchMeterUsageException{Exception}` (others).
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

/// Exponential backoff with full jitter: retry `n` waits a uniformly random time in
/// `[0, min(cap, base * 2^(n-1)))`. Jitter spreads concurrent retries apart. The one
/// backoff: `BatchMeterUsage` retries ([`Backoff::METERING`]) and store retries
/// ([`crate::pipeline::retry::RetryPolicy`]) both wait with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// Ceiling of the first retry's wait.
    pub base: Duration,
    /// Largest ceiling.
    pub cap: Duration,
}

impl Backoff {
    /// `BatchMeterUsage` retries: 200 ms doubling to 5 s, inside a 5-minute submitter run
    /// whose calls are paced at the 10 requests/s quota.
    pub const METERING: Backoff = Backoff {
        base: Duration::from_millis(200),
        cap: Duration::from_secs(5),
    };

    /// The wait before retry `retry` (1-based; 0 is read as 1), given 64 uniformly random
    /// bits `random`. The same inputs always give the same wait.
    pub fn delay(&self, retry: u32, random: u64) -> Duration {
        let doublings = retry.saturating_sub(1).min(63);
        let ceiling = self
            .base
            .as_nanos()
            .saturating_mul(1u128 << doublings)
            .min(self.cap.as_nanos());
        // `random / 2^64` is a fraction in [0, 1); the product cannot overflow u128.
        let nanos = (ceiling * u128::from(random)) >> 64;
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }
}

/// [`Backoff::METERING`]'s wait before retry `retry`, with randomness `random`.
pub fn backoff_delay(retry: u32, random: u64) -> Duration {
    Backoff::METERING.delay(retry, random)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::model::SubscriptionStatus;
    use crate::ports::UnclearAnswer;
    use crate::submit::bisect::DepthExceededBatch;
    use proptest::prelude::*;
    use std::sync::Mutex;

    const LICENSE: &str = "arn:aws:license-manager::123456789012:license:l-0123456789abcdef";

    fn answered(verdict: RecordVerdict) -> RecordResult {
        RecordResult::Answered(verdict)
    }

    fn subscriber(status: Option<SubscriptionStatus>) -> Subscriber {
        let mut row = Subscriber::new(LICENSE, "111122223333");
        row.subscription_status = status;
        row
    }

    fn pending() -> Option<SubmissionUpdate> {
        Some(update(AggregatedStatus::Pending, None, None))
    }

    #[test]
    fn success_bills_with_the_record_id() {
        let outcome = next_state(
            &answered(RecordVerdict::Success {
                metering_record_id: "mr-1".into(),
            }),
            None,
            None,
            EarlierSends::NONE,
        );
        assert_eq!(
            outcome.update,
            Some(update(AggregatedStatus::Success, None, Some("mr-1".into())))
        );
        assert_eq!(
            outcome.metric,
            Some(MetricEvent::plain("UsageRecordSubmitted"))
        );
        assert_eq!(outcome.action, RunAction::Continue);
    }

    #[test]
    fn duplicate_is_terminal_with_or_without_an_id() {
        for id in [None, Some("mr-0".to_string())] {
            // A re-send after a possibly-billing send: our own earlier call billed it.
            let outcome = next_state(
                &answered(RecordVerdict::DuplicateRecord {
                    metering_record_id: id.clone(),
                }),
                None,
                None,
                EarlierSends::POSSIBLY_BILLED,
            );
            let update = outcome.update.unwrap();
            assert_eq!(update.status, AggregatedStatus::DuplicateRecord);
            assert!(update.status.is_terminal());
            assert_eq!(update.metering_record_id, id);
            assert_eq!(update.reason.as_deref(), Some("BilledByEarlierAttempt"));
            assert_eq!(outcome.metric, None);
        }
    }

    #[test]
    fn a_duplicate_where_nothing_of_ours_may_have_billed_raises_the_alarm_metric() {
        // Pinned without a possible billing: a replayed Error, a CustomerNotSubscribed
        // kept pending before activation.
        let pinned_only = EarlierSends {
            quantity_pinned: true,
            possibly_billed: false,
        };
        let outcome = next_state(
            &answered(RecordVerdict::DuplicateRecord {
                metering_record_id: None,
            }),
            None,
            None,
            pinned_only,
        );
        let update = outcome.update.unwrap();
        assert_eq!(update.reason.as_deref(), Some("UnexpectedDuplicate"));
        assert!(!update.possibly_billed);
        assert_eq!(
            outcome.metric,
            Some(MetricEvent::plain("UnexpectedDuplicateRecord"))
        );
    }

    #[test]
    fn every_update_says_whether_a_call_of_ours_may_have_billed() {
        let success = answered(RecordVerdict::Success {
            metering_record_id: "mr".into(),
        });
        let isolated = RecordResult::Isolated {
            exception: "InvalidTagException".into(),
            message: "m".into(),
        };
        let unclear = answered(RecordVerdict::Ambiguous {
            why: UnclearAnswer::Missing,
        });
        let cases = [
            (&success, EarlierSends::NONE, false),
            (&isolated, EarlierSends::NONE, false),
            // An Error keeps what an earlier call may have done, for a replay.
            (&isolated, EarlierSends::POSSIBLY_BILLED, true),
            (&RecordResult::Ambiguous, EarlierSends::NONE, true),
            (&unclear, EarlierSends::NONE, true),
            (&RecordResult::NotAnswered, EarlierSends::NONE, false),
            (
                &RecordResult::NotAnswered,
                EarlierSends::POSSIBLY_BILLED,
                true,
            ),
        ];
        for (result, earlier, billed) in cases {
            let stop = Some(StopKind::Transient);
            let update = next_state(result, stop, None, earlier).update.unwrap();
            assert_eq!(
                update.possibly_billed, billed,
                "{result:?} after {earlier:?}"
            );
        }
    }

    #[test]
    fn a_duplicate_answering_a_first_send_raises_the_alarm_metric() {
        let outcome = next_state(
            &answered(RecordVerdict::DuplicateRecord {
                metering_record_id: None,
            }),
            None,
            None,
            EarlierSends::NONE,
        );
        let update = outcome.update.unwrap();
        assert_eq!(update.status, AggregatedStatus::DuplicateRecord);
        assert_eq!(update.reason.as_deref(), Some("UnexpectedDuplicate"));
        assert_eq!(
            outcome.metric,
            Some(MetricEvent::plain("UnexpectedDuplicateRecord"))
        );
    }

    #[test]
    fn customer_not_subscribed_is_final_once_the_subscription_is_known() {
        // GIVEN a subscribers row License Updated has touched, in any lifecycle state
        for status in [
            SubscriptionStatus::Active,
            SubscriptionStatus::Deprovisioning,
            SubscriptionStatus::Inactive,
        ] {
            let row = subscriber(Some(status));
            // WHEN the service answers CustomerNotSubscribed
            let outcome = next_state(
                &answered(RecordVerdict::CustomerNotSubscribed),
                None,
                Some(&row),
                EarlierSends::NONE,
            );
            // THEN the record closes CustomerNotSubscribed
            assert_eq!(
                outcome.update,
                Some(update(AggregatedStatus::CustomerNotSubscribed, None, None)),
                "{status:?}"
            );
            assert_eq!(
                outcome.metric,
                Some(MetricEvent::plain("CustomerNotSubscribed"))
            );
        }
    }

    #[test]
    fn customer_not_subscribed_before_activation_stays_pending() {
        // GIVEN no subscribers row, or one created by registration before License Updated
        let registered_only = subscriber(None);
        for row in [None, Some(&registered_only)] {
            // WHEN the service answers CustomerNotSubscribed
            let outcome = next_state(
                &answered(RecordVerdict::CustomerNotSubscribed),
                None,
                row,
                EarlierSends::NONE,
            );
            // THEN it stays pending for a later run, with no metric, and its quantity
            // is final (Marketplace saw it)
            assert_eq!(outcome.update, Some(SubmissionUpdate::release(true)));
            assert_eq!(outcome.metric, None);
            assert_eq!(outcome.action, RunAction::Continue);
        }
    }

    #[test]
    fn unprocessed_stays_pending_with_its_metric() {
        let result = answered(RecordVerdict::Unprocessed);
        assert!(is_unprocessed(&result));
        let outcome = next_state(&result, None, None, EarlierSends::NONE);
        assert_eq!(outcome.update, pending());
        assert_eq!(
            outcome.metric,
            Some(MetricEvent::plain("UsageRecordUnprocessed"))
        );
        assert!(!is_unprocessed(&answered(
            RecordVerdict::CustomerNotSubscribed
        )));
    }

    #[test]
    fn an_answer_that_leaves_a_record_unclear_keeps_its_quantity() {
        // Only UnprocessedRecords says "not processed"; anything else unanswered may
        // have been billed: re-sent later with exactly the quantity sent.
        for why in [
            UnclearAnswer::Missing,
            UnclearAnswer::UnknownStatus("Pending".into()),
            UnclearAnswer::NotEchoed,
        ] {
            let result = answered(RecordVerdict::Ambiguous { why: why.clone() });
            assert!(!is_unprocessed(&result), "{why}: no immediate retry");
            let outcome = next_state(&result, None, None, EarlierSends::NONE);
            assert_eq!(
                outcome.update,
                Some(SubmissionUpdate::release(true).with_possibly_billed(true)),
                "{why}"
            );
            assert_eq!(
                outcome.metric,
                Some(MetricEvent::plain("AmbiguousSubmission")),
                "{why}"
            );
            assert_eq!(outcome.action, RunAction::Continue, "{why}");
        }
    }

    #[test]
    fn every_isolated_exception_becomes_error_with_its_name() {
        for &name in crate::ports::VALIDATION_EXCEPTIONS {
            let result = RecordResult::Isolated {
                exception: name.into(),
                message: "m".into(),
            };
            let outcome = next_state(&result, None, None, EarlierSends::NONE);
            assert_eq!(
                outcome.update,
                Some(update(AggregatedStatus::Error, Some(name.into()), None))
            );
            assert_eq!(
                outcome.metric,
                Some(MetricEvent {
                    name: "BatchMeterUsageException",
                    dimensions: vec![("Exception", name.to_string())],
                })
            );
            assert_eq!(outcome.action, RunAction::Continue);
        }
    }

    #[test]
    fn depth_capped_records_stay_pending() {
        let outcome = next_state(
            &RecordResult::DepthExceeded {
                exception: "InvalidTagException".into(),
            },
            None,
            None,
            EarlierSends::NONE,
        );
        assert_eq!(outcome.update, pending());
        assert_eq!(
            outcome.metric, None,
            "counted once per sub-batch by report_metrics"
        );
    }

    #[test]
    fn unanswered_records_follow_the_stop() {
        // Never sent in a call that may have taken effect: nothing billed them, whatever
        // stopped the batch; the run backs off or stops as the stop says.
        let cases = [
            (Some(StopKind::Throttled), RunAction::BackOff),
            (Some(StopKind::Transient), RunAction::BackOff),
            (Some(StopKind::MalformedResponse), RunAction::BackOff),
            (Some(StopKind::Disabled), RunAction::StopRun),
            (None, RunAction::Continue),
        ];
        for (stop, expected_action) in cases {
            let outcome = next_state(&RecordResult::NotAnswered, stop, None, EarlierSends::NONE);
            assert_eq!(outcome.update, pending(), "{stop:?}");
            assert_eq!(outcome.action, expected_action, "{stop:?}");
            assert_eq!(outcome.metric, None, "{stop:?}");
        }
    }

    #[test]
    fn only_the_records_of_a_call_that_may_have_billed_keep_their_quantity() {
        // In the call that failed without a definite answer: it may have billed them.
        for stop in [StopKind::Transient, StopKind::MalformedResponse] {
            let outcome = next_state(
                &RecordResult::Ambiguous,
                Some(stop),
                None,
                EarlierSends::NONE,
            );
            assert_eq!(
                outcome.update,
                Some(SubmissionUpdate::release(true).with_possibly_billed(true)),
                "{stop:?}"
            );
            assert_eq!(
                outcome.metric,
                Some(MetricEvent::plain("AmbiguousSubmission")),
                "{stop:?}"
            );
            assert_eq!(outcome.action, RunAction::BackOff, "{stop:?}");
        }
    }

    #[test]
    fn a_release_after_an_earlier_possible_billing_keeps_the_sent_quantity() {
        // Throttled now (definitely not billed now), but an earlier send may have billed.
        let outcome = next_state(
            &RecordResult::NotAnswered,
            Some(StopKind::Throttled),
            None,
            EarlierSends::POSSIBLY_BILLED,
        );
        assert_eq!(
            outcome.update,
            Some(SubmissionUpdate::release(true).with_possibly_billed(true))
        );
    }

    #[test]
    fn answered_records_keep_their_verdict_whatever_stopped_the_batch() {
        let result = answered(RecordVerdict::Success {
            metering_record_id: "mr".into(),
        });
        let outcome = next_state(&result, Some(StopKind::Disabled), None, EarlierSends::NONE);
        assert_eq!(outcome.update.unwrap().status, AggregatedStatus::Success);
        assert_eq!(outcome.action, RunAction::Continue);
    }

    #[test]
    fn report_metrics_count_sub_batches_and_stops_once() {
        let report = BisectReport {
            depth_exceeded: vec![
                DepthExceededBatch {
                    range: 0..4,
                    exception: "InvalidTagException".into(),
                    message: String::new(),
                },
                DepthExceededBatch {
                    range: 8..12,
                    exception: "InvalidTagException".into(),
                    message: String::new(),
                },
            ],
            stopped: Some(BisectStop::Api(MeteringError::Throttled("slow".into()))),
            ..BisectReport::default()
        };
        let tag = |name, exception: &str| MetricEvent {
            name,
            dimensions: vec![("Exception", exception.to_string())],
        };
        assert_eq!(
            report_metrics(&report),
            vec![
                tag("BisectDepthExceeded", "InvalidTagException"),
                tag("BisectDepthExceeded", "InvalidTagException"),
                tag("BatchMeterUsageException", "ThrottlingException"),
            ]
        );
        assert_eq!(
            stop_metric(&BisectStop::Api(MeteringError::Disabled("off".into()))),
            MetricEvent::plain("MeteringApiDisabled")
        );
        assert_eq!(
            stop_metric(&BisectStop::Api(MeteringError::Transient("500".into()))),
            tag("BatchMeterUsageException", "TransientFailure")
        );
        assert_eq!(
            stop_metric(&BisectStop::MalformedResponse {
                sent: 2,
                received: 1
            }),
            tag("BatchMeterUsageException", "MalformedResponse")
        );
        assert!(report_metrics(&BisectReport::default()).is_empty());
    }

    #[test]
    fn metric_events_reach_the_sink() {
        type Count = (String, Vec<(String, String)>, u64);
        #[derive(Default)]
        struct Recorder(Mutex<Vec<Count>>);
        impl MetricsSink for Recorder {
            fn count(&self, name: &str, dimensions: &[(&str, &str)], value: u64) {
                let dims = dimensions
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect();
                self.0.lock().unwrap().push((name.to_string(), dims, value));
            }
        }
        let sink = Recorder::default();
        MetricEvent::with_exception("BatchMeterUsageException", "InvalidTagException").emit(&sink);
        assert_eq!(
            sink.0.lock().unwrap().as_slice(),
            &[(
                "BatchMeterUsageException".to_string(),
                vec![("Exception".to_string(), "InvalidTagException".to_string())],
                1
            )]
        );
    }

    #[test]
    fn backoff_doubles_to_the_cap() {
        let max = u64::MAX;
        assert_eq!(backoff_delay(0, 0), Duration::ZERO);
        // Just under the ceiling with all-ones randomness.
        let near =
            |d: Duration, ceiling: Duration| d < ceiling && ceiling - d < Duration::from_micros(1);
        assert!(near(backoff_delay(1, max), Duration::from_millis(200)));
        assert!(near(backoff_delay(2, max), Duration::from_millis(400)));
        assert!(near(backoff_delay(5, max), Duration::from_millis(3200)));
        assert!(near(backoff_delay(6, max), Duration::from_secs(5)));
        assert!(near(backoff_delay(u32::MAX, max), Duration::from_secs(5)));
        assert_eq!(backoff_delay(0, max), backoff_delay(1, max));
        // Half the randomness range is half the ceiling.
        assert_eq!(backoff_delay(3, 1 << 63), Duration::from_millis(400));
    }

    proptest! {
        #[test]
        fn backoff_stays_within_the_jittered_ceiling(retry in 0u32..100, random: u64, other: u64) {
            let delay = backoff_delay(retry, random);
            let ceiling = Duration::from_millis(200)
                .saturating_mul(1u32 << retry.saturating_sub(1).min(20))
                .min(Duration::from_secs(5));
            prop_assert!(delay < ceiling);
            prop_assert_eq!(delay, backoff_delay(retry, random), "deterministic");
            // More randomness never waits less.
            let (low, high) = if random <= other { (random, other) } else { (other, random) };
            prop_assert!(backoff_delay(retry, low) <= backoff_delay(retry, high));
        }
    }
}

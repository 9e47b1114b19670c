//! Each BatchMeterUsage result mapped to its record's next state, metric and what the run does next.

use super::*;
use crate::model::SubscriptionStatus;
use crate::ports::UnclearAnswer;
use crate::submit::bisect::DepthExceededBatch;
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

/// The window closed on a re-send of a record an earlier call of ours may have billed:
/// it may have been billed, as an age-out over it says, so it is not an `Error`. Only
/// that exception, and only after such a call: a first send refused as old is `Error`.
#[test]
fn a_resend_refused_as_past_the_window_after_a_call_that_may_have_billed_expires_interrupted() {
    let refused = |name: &str| RecordResult::Isolated {
        exception: name.into(),
        message: "m".into(),
    };
    let outcome = next_state(
        &refused("TimestampOutOfBoundsException"),
        None,
        None,
        EarlierSends::POSSIBLY_BILLED,
    );
    let update_written = outcome.update.expect("an update");
    assert_eq!(update_written.status, AggregatedStatus::SubmissionExpired);
    assert_eq!(
        update_written.reason.as_deref(),
        Some(crate::submit::REASON_INTERRUPTED_SUBMISSION)
    );
    assert!(update_written.possibly_billed, "it may have been billed");
    assert_eq!(
        outcome.metric,
        Some(MetricEvent::plain("UsageSubmissionExpired"))
    );
    for (name, earlier) in [
        ("TimestampOutOfBoundsException", EarlierSends::NONE),
        (
            "InvalidUsageDimensionException",
            EarlierSends::POSSIBLY_BILLED,
        ),
    ] {
        let outcome = next_state(&refused(name), None, None, earlier);
        assert_eq!(
            outcome.update.map(|u| u.status),
            Some(AggregatedStatus::Error),
            "{name}"
        );
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
        (Some(StopKind::Refused), RunAction::BackOff),
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
        stop_metric(&BisectStop::Api(MeteringError::Refused {
            name: "ExpiredTokenException".into(),
            message: "expired".into()
        })),
        tag("BatchMeterUsageRefused", "ExpiredTokenException")
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

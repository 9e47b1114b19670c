//! Sending with bisection: what is isolated, what stops a batch, and which records may have been billed.

use super::*;
use crate::model::GroupKey;
use async_trait::async_trait;
use proptest::prelude::*;
use std::collections::{BTreeSet, VecDeque};
use std::sync::Mutex;

const POISON: &str = "poison";

fn record(dimension: &str) -> MeteringRecord {
    MeteringRecord {
        key: GroupKey {
            license_arn: "arn:aws:license-manager::123456789012:license:l-0123456789abcdef"
                .to_string(),
            customer_aws_account_id: "111122223333".to_string(),
            dimension: dimension.to_string(),
            hour: "2026-01-01T00".parse().unwrap(),
        },
        product_code: "prod".to_string(),
        quantity: 1,
        allocations: None,
    }
}

/// `n` records named `r<i>`, those at `poisoned` named `poison<i>`.
fn records(n: usize, poisoned: &BTreeSet<usize>) -> Vec<MeteringRecord> {
    (0..n)
        .map(|i| {
            if poisoned.contains(&i) {
                record(&format!("{POISON}{i}"))
            } else {
                record(&format!("r{i}"))
            }
        })
        .collect()
}

/// A scripted `BatchMeterUsage`: a call fails with the next scripted error if one is
/// queued for its call number; otherwise it rejects any batch holding a poisoned
/// dimension with `InvalidUsageDimensionException`, and answers Success otherwise.
#[derive(Default)]
struct FakeMetering {
    scripted: Mutex<VecDeque<(usize, MeteringError)>>,
    calls: Mutex<Vec<Vec<String>>>,
    short_answer_on_call: Option<usize>,
}

impl FakeMetering {
    fn failing_call(call: usize, error: MeteringError) -> Self {
        FakeMetering {
            scripted: Mutex::new(VecDeque::from([(call, error)])),
            ..FakeMetering::default()
        }
    }

    fn calls(&self) -> Vec<Vec<String>> {
        self.calls.lock().unwrap().clone()
    }
}

#[async_trait]
impl MeteringApi for FakeMetering {
    async fn batch_meter_usage(
        &self,
        records: &[MeteringRecord],
    ) -> Result<Vec<RecordVerdict>, MeteringError> {
        let call = {
            let mut calls = self.calls.lock().unwrap();
            calls.push(records.iter().map(|r| r.key.dimension.clone()).collect());
            calls.len()
        };
        assert!(
            !records.is_empty() && records.len() <= 25,
            "sent {} records",
            records.len()
        );
        {
            let mut scripted = self.scripted.lock().unwrap();
            if scripted.front().is_some_and(|(at, _)| *at == call)
                && let Some((_, error)) = scripted.pop_front()
            {
                return Err(error);
            }
        }
        if self.short_answer_on_call == Some(call) {
            return Ok(vec![]);
        }
        if records.iter().any(|r| r.key.dimension.starts_with(POISON)) {
            return Err(MeteringError::Validation {
                name: "InvalidUsageDimensionException".into(),
                message: "unknown dimension".into(),
            });
        }
        Ok(records
            .iter()
            .map(|r| RecordVerdict::Success {
                metering_record_id: format!("id-{}", r.key.dimension),
            })
            .collect())
    }
}

/// What the fake answers for the clean record `r<i>`.
fn success(i: usize) -> RecordResult {
    RecordResult::Answered(RecordVerdict::Success {
        metering_record_id: format!("id-r{i}"),
    })
}

/// Every record of the run has `result`.
fn all_are(report: &BisectReport, result: &RecordResult) -> bool {
    report.results.iter().all(|r| r == result)
}

/// A first call failing with `error` ends the run: no bisection, no verdict, every
/// record `result` (ambiguous when the call may have taken effect).
async fn assert_stops_at_the_first_call(
    error: MeteringError,
    batch: &[MeteringRecord],
    kind: StopKind,
    result: RecordResult,
) {
    let api = FakeMetering::failing_call(1, error);
    let report = send_with_bisection(&api, batch).await;
    assert_eq!(report.api_calls, 1);
    assert!(all_are(&report, &result), "{:?}", report.results);
    assert_eq!(report.stopped.as_ref().map(BisectStop::kind), Some(kind));
}

fn isolated() -> RecordResult {
    RecordResult::Isolated {
        exception: "InvalidUsageDimensionException".into(),
        message: "unknown dimension".into(),
    }
}

#[test]
fn depth_cap_is_ceil_log2() {
    let expected = [
        (0, 0),
        (1, 0),
        (2, 1),
        (3, 2),
        (4, 2),
        (5, 3),
        (8, 3),
        (9, 4),
        (16, 4),
        (17, 5),
        (25, 5),
        (32, 5),
        (33, 6),
    ];
    for (len, depth) in expected {
        assert_eq!(default_max_depth(len), depth, "len {len}");
    }
}

#[tokio::test]
async fn a_clean_batch_takes_one_call() {
    let api = FakeMetering::default();
    let batch = records(25, &BTreeSet::new());
    let report = send_with_bisection(&api, &batch).await;
    assert_eq!(report.api_calls, 1);
    assert_eq!(report.validation_failures, 0);
    assert!(report.stopped.is_none());
    assert_eq!(report.results[7], success(7));
}

#[tokio::test]
async fn empty_batch_sends_nothing() {
    let api = FakeMetering::default();
    let report = send_with_bisection(&api, &[]).await;
    assert_eq!(report, BisectReport::default());
    assert!(api.calls().is_empty());
}

#[tokio::test]
async fn one_poison_record_among_25_is_isolated_and_the_rest_meter() {
    // GIVEN 25 records, the 18th has a dimension the product does not have
    let api = FakeMetering::default();
    let batch = records(25, &BTreeSet::from([17]));
    // WHEN sent
    let report = send_with_bisection(&api, &batch).await;
    // THEN it alone is isolated; the 24 others are billed
    assert_eq!(report.results[17], isolated());
    for (i, result) in report.results.iter().enumerate().filter(|(i, _)| *i != 17) {
        assert_eq!(result, &success(i));
    }
    // AND the calls walk one path down: 1 + 2 per level for 5 levels
    assert_eq!(report.api_calls, 11);
    assert_eq!(report.validation_failures, 6);
    assert!(report.depth_exceeded.is_empty());
    // AND halves go out left first, in input order
    let calls = api.calls();
    assert_eq!(calls[1].len(), 13);
    assert_eq!(calls[1][0], "r0");
    assert_eq!(calls[2][0], "r13");
}

#[tokio::test]
async fn a_lone_record_that_fails_is_isolated_with_one_call() {
    let api = FakeMetering::default();
    let report = send_with_bisection(&api, &records(1, &BTreeSet::from([0]))).await;
    assert_eq!(report.results, vec![isolated()]);
    assert_eq!(report.api_calls, 1);
}

#[tokio::test]
async fn a_sub_batch_at_a_lower_cap_stays_pending_and_is_reported() {
    // GIVEN 8 records with the poison at 5 and a cap of one split
    let api = FakeMetering::default();
    let batch = records(8, &BTreeSet::from([5]));
    let report = send_with_bisection_capped(&api, &batch, 1).await;
    // THEN the clean half meters and the failing half stays pending, reported once
    for i in 0..4 {
        assert_eq!(report.results[i], success(i));
    }
    for i in 4..8 {
        assert_eq!(
            report.results[i],
            RecordResult::DepthExceeded {
                exception: "InvalidUsageDimensionException".into()
            }
        );
    }
    assert_eq!(report.depth_exceeded.len(), 1);
    assert_eq!(report.depth_exceeded[0].range, 4..8);
    assert_eq!(report.api_calls, 3);
    assert!(report.stopped.is_none());
}

#[tokio::test]
async fn throttling_mid_bisection_stops_and_keeps_earlier_verdicts() {
    // GIVEN a poison at 20; the third call (the right half) is throttled
    let api = FakeMetering::failing_call(3, MeteringError::Throttled("slow down".into()));
    let batch = records(25, &BTreeSet::from([20]));
    // WHEN sent
    let report = send_with_bisection(&api, &batch).await;
    // THEN the left half keeps its verdicts, the right half is unanswered, nothing else is sent
    assert_eq!(report.api_calls, 3);
    for i in 0..13 {
        assert_eq!(report.results[i], success(i));
    }
    for i in 13..25 {
        assert_eq!(report.results[i], RecordResult::NotAnswered);
    }
    assert_eq!(
        report.stopped,
        Some(BisectStop::Api(MeteringError::Throttled(
            "slow down".into()
        )))
    );
    assert_eq!(
        report.stopped.as_ref().map(BisectStop::kind),
        Some(StopKind::Throttled)
    );
}

#[tokio::test]
async fn a_transient_failure_mid_bisection_marks_only_the_records_of_that_call() {
    // GIVEN 25 records with a poison at 22: the batch fails validation (nothing
    // billed), the left half (0..13) is answered, the right half (13..25) fails
    // validation too, and its first sub-call (13..19) gets an internal error
    let api = FakeMetering::failing_call(4, MeteringError::Transient("HTTP 500".into()));
    let batch = records(25, &BTreeSet::from([22]));
    // WHEN sent
    let report = send_with_bisection(&api, &batch).await;
    // THEN only the records of the failed call may have been billed
    assert_eq!(report.api_calls, 4);
    assert_eq!(api.calls()[3].len(), 6);
    for i in 0..13 {
        assert_eq!(report.results[i], success(i));
    }
    for i in 13..19 {
        assert_eq!(report.results[i], RecordResult::Ambiguous, "record {i}");
    }
    // AND the records never sent in a call that may have taken effect are unanswered
    for i in 19..25 {
        assert_eq!(report.results[i], RecordResult::NotAnswered, "record {i}");
    }
    assert_eq!(
        report.stopped.as_ref().map(BisectStop::kind),
        Some(StopKind::Transient)
    );
}

#[tokio::test]
async fn a_malformed_answer_mid_bisection_marks_only_the_records_of_that_call() {
    let api = FakeMetering {
        short_answer_on_call: Some(2),
        ..FakeMetering::default()
    };
    let batch = records(8, &BTreeSet::from([6]));
    let report = send_with_bisection(&api, &batch).await;
    // The first half was sent and answered wrongly: it may have been billed; the
    // second half was never sent.
    for i in 0..4 {
        assert_eq!(report.results[i], RecordResult::Ambiguous, "record {i}");
    }
    for i in 4..8 {
        assert_eq!(report.results[i], RecordResult::NotAnswered, "record {i}");
    }
}

#[tokio::test]
async fn throttling_and_internal_errors_are_never_bisected() {
    assert_stops_at_the_first_call(
        MeteringError::Throttled("slow down".into()),
        &records(25, &BTreeSet::from([3])),
        StopKind::Throttled,
        RecordResult::NotAnswered,
    )
    .await;
    assert_stops_at_the_first_call(
        MeteringError::Transient("HTTP 500".into()),
        &records(25, &BTreeSet::from([3])),
        StopKind::Transient,
        RecordResult::Ambiguous,
    )
    .await;
}

#[tokio::test]
async fn disabled_api_stops_with_nothing_marked() {
    assert_stops_at_the_first_call(
        MeteringError::Disabled("Region disabled".into()),
        &records(4, &BTreeSet::from([1])),
        StopKind::Disabled,
        RecordResult::NotAnswered,
    )
    .await;
}

#[tokio::test]
async fn a_refusal_before_processing_mid_bisection_marks_nothing() {
    // GIVEN a bisection whose fourth call is refused for the caller's role
    let api = FakeMetering::failing_call(
        4,
        crate::submit::answer::refusal("AccessDeniedException", "not authorized"),
    );
    let batch = records(25, &BTreeSet::from([22]));
    let report = send_with_bisection(&api, &batch).await;
    // THEN the answered records keep their verdicts and the refused call's records,
    // like those never sent, are not answered: nothing may have billed them
    for i in 0..13 {
        assert_eq!(report.results[i], success(i));
    }
    for i in 13..25 {
        assert_eq!(report.results[i], RecordResult::NotAnswered, "record {i}");
    }
    assert_eq!(
        report.stopped.as_ref().map(BisectStop::kind),
        Some(StopKind::Refused)
    );
}

#[tokio::test]
async fn a_short_answer_is_not_trusted() {
    let api = FakeMetering {
        short_answer_on_call: Some(1),
        ..FakeMetering::default()
    };
    let report = send_with_bisection(&api, &records(3, &BTreeSet::new())).await;
    assert!(all_are(&report, &RecordResult::Ambiguous));
    assert_eq!(
        report.stopped,
        Some(BisectStop::MalformedResponse {
            sent: 3,
            received: 0
        })
    );
    assert_eq!(
        report.stopped.as_ref().map(ToString::to_string).as_deref(),
        Some("BatchMeterUsage answered 0 results for 3 records")
    );
}

#[tokio::test]
async fn per_record_verdicts_are_kept_as_answered() {
    // A fake that answers every status shape, to show verdicts pass through untouched.
    struct Mixed;
    #[async_trait]
    impl MeteringApi for Mixed {
        async fn batch_meter_usage(
            &self,
            records: &[MeteringRecord],
        ) -> Result<Vec<RecordVerdict>, MeteringError> {
            Ok(records
                .iter()
                .enumerate()
                .map(|(i, _)| match i % 4 {
                    0 => RecordVerdict::Success {
                        metering_record_id: "a".into(),
                    },
                    1 => RecordVerdict::DuplicateRecord {
                        metering_record_id: None,
                    },
                    2 => RecordVerdict::CustomerNotSubscribed,
                    _ => RecordVerdict::Unprocessed,
                })
                .collect())
        }
    }
    let report = send_with_bisection(&Mixed, &records(4, &BTreeSet::new())).await;
    assert_eq!(
        report.results,
        vec![
            RecordResult::Answered(RecordVerdict::Success {
                metering_record_id: "a".into()
            }),
            RecordResult::Answered(RecordVerdict::DuplicateRecord {
                metering_record_id: None
            }),
            RecordResult::Answered(RecordVerdict::CustomerNotSubscribed),
            RecordResult::Answered(RecordVerdict::Unprocessed),
        ]
    );
}

fn run<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(future)
}

proptest! {
    #[test]
    fn any_single_poison_is_isolated_within_the_cap(n in 1usize..=25, at in 0usize..25) {
        let at = at % n;
        let api = FakeMetering::default();
        let batch = records(n, &BTreeSet::from([at]));
        let report = run(send_with_bisection(&api, &batch));
        prop_assert_eq!(&report.results[at], &isolated());
        for (i, result) in report.results.iter().enumerate().filter(|(i, _)| *i != at) {
            prop_assert_eq!(result, &success(i));
        }
        prop_assert!(report.depth_exceeded.is_empty());
        prop_assert!(report.api_calls < 2 * n);
        // One path from the root to the leaf: one failing call per level plus its sibling.
        prop_assert!(report.api_calls <= 1 + 2 * default_max_depth(n) as usize);
        prop_assert_eq!(report.api_calls, api.calls().len());
    }

    #[test]
    fn several_poisons_never_mark_a_good_record_error(
        n in 1usize..=25,
        poisoned in prop::collection::btree_set(0usize..25, 0..25),
        cap in prop::option::of(0u32..6),
    ) {
        let poisoned: BTreeSet<usize> = poisoned.into_iter().filter(|i| *i < n).collect();
        let api = FakeMetering::default();
        let batch = records(n, &poisoned);
        let report = match cap {
            Some(cap) => run(send_with_bisection_capped(&api, &batch, cap)),
            None => run(send_with_bisection(&api, &batch)),
        };
        prop_assert!(report.api_calls < 2 * n);
        prop_assert!(report.stopped.is_none());
        for (i, result) in report.results.iter().enumerate() {
            if poisoned.contains(&i) {
                prop_assert!(
                    matches!(result, RecordResult::Isolated { .. } | RecordResult::DepthExceeded { .. }),
                    "poison {} got {:?}", i, result
                );
            } else {
                prop_assert!(
                    matches!(result, RecordResult::Answered(_) | RecordResult::DepthExceeded { .. }),
                    "good record {} got {:?}", i, result
                );
            }
            if cap.is_none() {
                // At the default cap bisection always reaches single records.
                prop_assert!(
                    !matches!(result, RecordResult::DepthExceeded { .. }),
                    "record {} depth-capped at the default cap", i
                );
            }
        }
        // Every depth-exceeded range holds more than one record and a poison.
        for batch in &report.depth_exceeded {
            prop_assert!(batch.range.len() > 1);
            prop_assert!(batch.range.clone().any(|i| poisoned.contains(&i)));
        }
        // Outside depth-capped ranges, every good record is billed and every poison isolated.
        let capped: BTreeSet<usize> = report.depth_exceeded.iter().flat_map(|b| b.range.clone()).collect();
        for (i, result) in report.results.iter().enumerate().filter(|(i, _)| !capped.contains(i)) {
            if poisoned.contains(&i) {
                prop_assert_eq!(result, &isolated());
            } else {
                prop_assert_eq!(result, &success(i));
            }
        }
    }

    #[test]
    fn a_stop_anywhere_leaves_unsent_records_unanswered(
        n in 2usize..=25,
        at in 0usize..25,
        stop_call in 1usize..12,
        transient: bool,
    ) {
        let at = at % n;
        let error = if transient {
            MeteringError::Transient("x".into())
        } else {
            MeteringError::Throttled("x".into())
        };
        let api = FakeMetering::failing_call(stop_call, error);
        let batch = records(n, &BTreeSet::from([at]));
        let report = run(send_with_bisection(&api, &batch));
        let calls = api.calls();
        prop_assert_eq!(report.api_calls, calls.len());
        if report.stopped.is_some() {
            prop_assert_eq!(report.api_calls, stop_call);
            // The records of the failed call are ambiguous if it may have taken
            // effect (transient), unanswered if refused (throttled).
            let failed: Vec<&String> = calls[stop_call - 1].iter().collect();
            let of_failed = if transient { RecordResult::Ambiguous } else { RecordResult::NotAnswered };
            // Records sent in no call at all have no verdict, and were not billed.
            let sent: BTreeSet<&String> = calls.iter().flatten().collect();
            for (i, result) in report.results.iter().enumerate() {
                let dimension = &batch[i].key.dimension;
                if failed.contains(&dimension) {
                    prop_assert_eq!(result, &of_failed);
                } else if !sent.contains(dimension) {
                    prop_assert_eq!(result, &RecordResult::NotAnswered);
                } else {
                    prop_assert!(
                        !matches!(result, RecordResult::Ambiguous),
                        "record {} outside the failed call is ambiguous", i
                    );
                }
                prop_assert!(
                    !matches!(result, RecordResult::DepthExceeded { .. }),
                    "record {} depth-capped at the default cap", i
                );
            }
        }
    }
}

//! Sending a batch with bisection: when `BatchMeterUsage` rejects a whole batch with a
//! request-level validation exception, the batch is split in halves and resent until
//! the offending records are isolated, so co-batched good records still meter
//! (ARCHITECTURE.md: aggregation commit). Throttling, internal errors and a disabled API are never
//! bisected: they stop the batch and leave what is unanswered pending.

use std::ops::Range;

use crate::ports::{MeteringApi, MeteringError, MeteringRecord, RecordVerdict};

/// What became of one record of the batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordResult {
    /// The service answered for it (`Results[]` or `UnprocessedRecords`).
    Answered(RecordVerdict),
    /// Sent alone, it still failed the request: it is the bad record.
    Isolated {
        /// Exception name, e.g. `InvalidUsageDimensionException`.
        exception: String,
        /// Service message.
        message: String,
    },
    /// Its sub-batch failed validation at the depth cap with more than one record, so
    /// the bad record among them was not found; it stays pending.
    DepthExceeded {
        /// The exception the sub-batch failed with.
        exception: String,
    },
    /// No answer, and no call that may have taken effect carried it: the bisection
    /// stopped (see [`BisectReport::stopped`]) before it was sent, or it was in a call
    /// refused as a whole (throttling, `DisabledApiException`). Nothing billed it; it
    /// stays pending.
    NotAnswered,
    /// It was in the call that failed without a definite answer (an internal error, a
    /// timeout or transport failure, an answer with the wrong number of verdicts): that
    /// call may have billed it. It stays pending with its sent quantity.
    Ambiguous,
}

/// Why the bisection stopped before every record had an answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BisectStop {
    /// `ThrottlingException`, an internal error or transport failure, or
    /// `DisabledApiException`; never a validation exception (those are bisected).
    #[error(transparent)]
    Api(MeteringError),
    /// The port broke its contract: not one verdict per record sent. Nothing in that
    /// call is trusted; the records stay pending (resending is safe: Marketplace
    /// deduplicates identical records).
    #[error("BatchMeterUsage answered {received} results for {sent} records")]
    MalformedResponse {
        /// Records sent in the call.
        sent: usize,
        /// Verdicts received.
        received: usize,
    },
}

/// The cause of a stop, without its message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StopKind {
    /// `ThrottlingException`: back off with jitter.
    Throttled,
    /// `InternalServiceErrorException` or a transport failure: back off with jitter.
    Transient,
    /// `DisabledApiException`: the Region cannot meter; stop the run.
    Disabled,
    /// The port answered the wrong number of verdicts.
    MalformedResponse,
}

impl BisectStop {
    /// The cause, without its message.
    pub fn kind(&self) -> StopKind {
        match self {
            BisectStop::Api(MeteringError::Throttled(_)) => StopKind::Throttled,
            BisectStop::Api(MeteringError::Disabled(_)) => StopKind::Disabled,
            // Validation never stops a bisection; were one stored here, backing off
            // and retrying later is the safe reading.
            BisectStop::Api(MeteringError::Transient(_) | MeteringError::Validation { .. }) => {
                StopKind::Transient
            }
            BisectStop::MalformedResponse { .. } => StopKind::MalformedResponse,
        }
    }
}

/// A multi-record sub-batch that still failed validation at the depth cap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DepthExceededBatch {
    /// Its records, as indexes into the input.
    pub range: Range<usize>,
    /// The exception it failed with.
    pub exception: String,
    /// Service message.
    pub message: String,
}

/// Everything one [`send_with_bisection`] did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BisectReport {
    /// One result per input record, at the record's index.
    pub results: Vec<RecordResult>,
    /// `BatchMeterUsage` calls made (at most `2n - 1` for `n` records).
    pub api_calls: usize,
    /// Calls rejected with a validation exception.
    pub validation_failures: usize,
    /// Sub-batches left pending at the depth cap (one `BisectDepthExceeded` each).
    pub depth_exceeded: Vec<DepthExceededBatch>,
    /// Why the bisection stopped early, if it did.
    pub stopped: Option<BisectStop>,
}

/// The default depth cap for a batch of `len` records: `ceil(log2(len))` (5 for 25).
/// At that depth halving has reached single records, so the cap only bites when a
/// caller sets a smaller one.
pub fn default_max_depth(len: usize) -> u32 {
    match len {
        0 | 1 => 0,
        n => usize::BITS - (n - 1).leading_zeros(),
    }
}

/// Sends `records` (one planned batch) and bisects on validation exceptions, with the
/// depth cap [`default_max_depth`].
pub async fn send_with_bisection(
    api: &dyn MeteringApi,
    records: &[MeteringRecord],
) -> BisectReport {
    send_with_bisection_capped(api, records, default_max_depth(records.len())).await
}

/// Sends `records` and bisects on validation exceptions, splitting at most `max_depth`
/// times (the whole batch is depth 0).
///
/// - Success: each record gets its verdict.
/// - `MeteringError::Validation` on one record: it is [`RecordResult::Isolated`].
/// - `MeteringError::Validation` on several records below the cap: the left half
///   (the larger when odd) is sent, then the right half, recursively.
/// - `MeteringError::Validation` on several records at the cap: they become
///   [`RecordResult::DepthExceeded`] and the range is listed in
///   [`BisectReport::depth_exceeded`].
/// - Throttled, transient or disabled, or an answer with the wrong number of verdicts:
///   nothing more is sent; answered records keep their verdicts, the records of a call
///   that may have taken effect (transient, wrong answer) are
///   [`RecordResult::Ambiguous`], the rest (never sent, or refused as a whole) stay
///   [`RecordResult::NotAnswered`], and [`BisectReport::stopped`] says why.
///
/// Every call is a node of a binary tree whose leaves are disjoint ranges, so at most
/// `2n - 1` calls are made. Records are sent oldest first, in input order.
pub async fn send_with_bisection_capped(
    api: &dyn MeteringApi,
    records: &[MeteringRecord],
    max_depth: u32,
) -> BisectReport {
    let mut report = BisectReport {
        results: vec![RecordResult::NotAnswered; records.len()],
        ..BisectReport::default()
    };
    if records.is_empty() {
        return report;
    }
    // Depth-first, left before right, so records go out in input order. An explicit
    // stack keeps the future unboxed.
    let mut pending: Vec<(Range<usize>, u32)> = vec![(0..records.len(), 0)];
    while let Some((range, depth)) = pending.pop() {
        let Some(slice) = records.get(range.clone()) else {
            continue;
        };
        report.api_calls += 1;
        match api.batch_meter_usage(slice).await {
            Ok(verdicts) if verdicts.len() == slice.len() => {
                for (index, verdict) in range.zip(verdicts) {
                    if let Some(slot) = report.results.get_mut(index) {
                        *slot = RecordResult::Answered(verdict);
                    }
                }
            }
            Ok(verdicts) => {
                tracing::error!(
                    sent = slice.len(),
                    received = verdicts.len(),
                    "BatchMeterUsage port returned the wrong number of verdicts; leaving the records pending"
                );
                report.stopped = Some(BisectStop::MalformedResponse {
                    sent: slice.len(),
                    received: verdicts.len(),
                });
                mark_ambiguous(&mut report.results, range);
                break;
            }
            Err(MeteringError::Validation { name, message }) => {
                report.validation_failures += 1;
                if range.len() == 1 {
                    tracing::warn!(
                        record = %slice.first().map(|r| r.key.to_string()).unwrap_or_default(),
                        exception = %name,
                        "isolated a record BatchMeterUsage rejects"
                    );
                    if let Some(slot) = report.results.get_mut(range.start) {
                        *slot = RecordResult::Isolated {
                            exception: name,
                            message,
                        };
                    }
                } else if depth >= max_depth {
                    tracing::warn!(
                        records = range.len(),
                        depth,
                        exception = %name,
                        "bisection depth cap reached; sub-batch stays pending"
                    );
                    for slot in report.results.get_mut(range.clone()).into_iter().flatten() {
                        *slot = RecordResult::DepthExceeded {
                            exception: name.clone(),
                        };
                    }
                    report.depth_exceeded.push(DepthExceededBatch {
                        range,
                        exception: name,
                        message,
                    });
                } else {
                    let middle = range.start + range.len().div_ceil(2);
                    tracing::debug!(
                        records = range.len(),
                        depth,
                        exception = %name,
                        "splitting a rejected batch"
                    );
                    pending.push((middle..range.end, depth + 1));
                    pending.push((range.start..middle, depth + 1));
                }
            }
            Err(error) => {
                tracing::warn!(%error, records = range.len(), "BatchMeterUsage failed; stopping this batch");
                if matches!(error, MeteringError::Transient(_)) {
                    mark_ambiguous(&mut report.results, range);
                }
                report.stopped = Some(BisectStop::Api(error));
                break;
            }
        }
    }
    report
}

/// The records of a call that may have taken effect without a definite answer.
fn mark_ambiguous(results: &mut [RecordResult], range: Range<usize>) {
    for slot in results.get_mut(range).into_iter().flatten() {
        *slot = RecordResult::Ambiguous;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
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
}

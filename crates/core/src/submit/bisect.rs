//! Sending a batch with bisection: when `BatchMeterUsage` rejects a whole batch with a
//! request-level validation exception, the batch is split in halves and resent until
//! the offending records are isolated, so co-batched good records still meter
//! (docs/design.md: aggregation commit). Throttling, internal errors and a disabled API are never
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
    /// refused as a whole before processing (throttling, `DisabledApiException`, an
    /// authentication, authorization or signature exception, a connection that failed
    /// before the request was written). Nothing billed it; it stays pending.
    NotAnswered,
    /// It was in the call that failed without a definite answer (an internal error, a
    /// timeout or transport failure, an answer with the wrong number of verdicts): that
    /// call may have billed it. It stays pending with its sent quantity.
    Ambiguous,
}

/// Why the bisection stopped before every record had an answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BisectStop {
    /// `ThrottlingException`, an internal error or transport failure,
    /// `DisabledApiException`, or a refusal before processing; never a validation
    /// exception (those are bisected).
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
    /// Refused before processing (credentials, role, signature, a connection that
    /// failed before the request was written): back off, nothing billed.
    Refused,
    /// The port answered the wrong number of verdicts.
    MalformedResponse,
}

impl BisectStop {
    /// The cause, without its message.
    pub fn kind(&self) -> StopKind {
        match self {
            BisectStop::Api(MeteringError::Throttled(_)) => StopKind::Throttled,
            BisectStop::Api(MeteringError::Disabled(_)) => StopKind::Disabled,
            BisectStop::Api(MeteringError::Refused { .. }) => StopKind::Refused,
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
/// - Throttled, transient, disabled or refused, or an answer with the wrong number of
///   verdicts: nothing more is sent; answered records keep their verdicts, the records
///   of a call that may have taken effect (transient, wrong answer) are
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
mod tests;

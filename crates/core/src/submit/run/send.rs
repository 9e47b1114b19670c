//! One batch on the wire: records of a dimension refused this run go alone, the rest
//! as one call with bisection under the pacing, unprocessed records retried once.
//! Each call's records are checked against the clock as it goes out, not the run's
//! start: a record whose hour left the window meanwhile stays unsent.

use tracing::warn;

use crate::model::AggregatedRecord;
use crate::ports::MeteringRecord;
use crate::submit::bisect::{BisectReport, RecordResult, send_with_bisection};
use crate::submit::outcome::{MetricEvent, report_metrics};
use crate::time::{self, Instant};

use super::{Held, Run, unprocessed_indexes};

/// How long before its hour leaves the window a record is no longer sent: the pacing's
/// wait and a whole batch's bisection (at most 49 calls at 10 a second) fit in it, and
/// the host's clock may be off Marketplace's by a little. Marketplace would refuse the
/// record (`TimestampOutOfBoundsException`), costing calls and ending it `Error`; left
/// unsent, it ages out (`SubmissionExpired`).
pub const SEND_MARGIN: chrono::Duration = chrono::Duration::seconds(5);

impl Run<'_> {
    /// Sends the held records. Records of a (product, dimension) Marketplace already
    /// refused this run (`InvalidUsageDimensionException`, which fails the whole request)
    /// go alone, after the others as one batch: a known-bad dimension costs one call per
    /// record instead of a bisection of every batch it lands in. Stops at the first stop.
    pub(super) async fn send_held(&self, held: &[Held]) -> BisectReport {
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
    pub(super) fn dimension_of(&self, record: &AggregatedRecord) -> (String, String) {
        let wire = self.metering_record(record);
        (wire.product_code, wire.key.dimension)
    }

    /// Whether `record`'s hour is still in Marketplace's window when a call goes out
    /// now ([`SEND_MARGIN`] ahead, at [`Self::sending_at`]): a long run (backoffs, slow
    /// calls) may cross an hour's edge after it read the record.
    fn sendable_now(&self, record: &MeteringRecord) -> bool {
        let soon = self.sending_at() + SEND_MARGIN;
        let sendable = !time::bucket_expired(record.key.hour, soon);
        if !sendable {
            warn!(group = %record.key, "the hour left the 24 h window during the run; not sent (it ages out)");
        }
        sendable
    }

    /// The time a call going out now is judged at. Marketplace judges by its service
    /// time, which the wall clock follows: a stale event (a retried invocation, hours
    /// late at most) is judged by the wall clock when it is later than the run's own
    /// time (its event's `now` plus what has passed since it began). A run whose event is
    /// a window or more from the wall clock is a replay on a timeline of its own (a test,
    /// a virtual clock) and keeps it.
    fn sending_at(&self) -> Instant {
        let wall = self.ports.clock.now();
        let run_time = self.now + (wall - self.started);
        let window = chrono::Duration::hours(time::WINDOW_HOURS);
        if (wall - run_time).abs() < window {
            run_time.max(wall)
        } else {
            run_time
        }
    }

    /// Sends those of `batch` still in the window now, bisecting rejections; the others
    /// are not answered (released; they age out).
    async fn send_in_window(&self, batch: &[MeteringRecord]) -> BisectReport {
        // Judged when the call's slot is due, so no wait comes between the check and
        // the call.
        self.paced.ready().await;
        let (sendable, late): (Vec<usize>, Vec<usize>) =
            (0..batch.len()).partition(|i| batch.get(*i).is_some_and(|r| self.sendable_now(r)));
        if late.is_empty() {
            return send_with_bisection(self.paced, batch).await;
        }
        let records: Vec<MeteringRecord> = sendable
            .iter()
            .filter_map(|i| batch.get(*i).cloned())
            .collect();
        let mut part = send_with_bisection(self.paced, &records).await;
        let mut results = vec![RecordResult::NotAnswered; batch.len()];
        for (index, result) in sendable.iter().zip(std::mem::take(&mut part.results)) {
            if let Some(slot) = results.get_mut(*index) {
                *slot = result;
            }
        }
        BisectReport { results, ..part }
    }

    /// Sends `held` as one batch (bisecting rejections), retrying unprocessed records
    /// once after a jittered backoff; emits the call metrics.
    pub(super) async fn send_group(&self, held: &[Held]) -> BisectReport {
        if held.is_empty() {
            return BisectReport::default();
        }
        let batch: Vec<MeteringRecord> = held
            .iter()
            .map(|h| self.metering_record(&h.record))
            .collect();
        let mut sent = self.send_in_window(&batch).await;
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
            let again = self.send_in_window(&retry).await;
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
        MetricEvent::emit_tallied(&events, self.ports.metrics.as_ref());
        sent
    }
}

//! The end of a run: what can no longer be submitted ages out.

use tracing::warn;

use crate::aggregate::is_skipped_zero;
use crate::model::AggregatedStatus;
use crate::pipeline::retry::{RetryPolicy, retry_transient};
use crate::ports::{SubmissionUpdate, metric};
use crate::submit::{
    REASON_INTERRUPTED_SUBMISSION, REASON_METERING_DISABLED, REASON_METERING_REFUSED,
    REASON_ZERO_QUANTITY_SKIPPED,
};
use crate::time;

use super::{Run, RunError, Stop};

impl Run<'_> {
    /// Gives every record still pending in an expired hour `SubmissionExpired`, however
    /// old: a sweep of the whole sparse index (it holds only pending records), so no
    /// record outlives its window unseen. Items that cannot be read are closed `Error`.
    pub(super) async fn age_out(&mut self) -> Result<(), RunError> {
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
                } else if self.report.stopped.as_deref() == Some(Stop::Refused.as_str()) {
                    Some(REASON_METERING_REFUSED.to_string())
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

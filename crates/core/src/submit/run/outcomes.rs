//! What each batch's answers mean, written back: every held record's outcome judged
//! (counted, its metric emitted) and what the run does next, each outcome written under
//! its claim (or only while no live claim holds the record), with its `expiresAt` when
//! final, and the subscribers the judging reads.

use super::*;

impl Run<'_> {
    /// Each held record's outcome (counted, its metric emitted) and what the run does next.
    pub(super) async fn judge(&mut self, held: &[Held], sent: BisectReport) -> Judged {
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
        let mut metrics = Vec::new();
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
                metrics.push(metric.clone());
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
        // One count per metric and dimensions for the whole batch, not a line per record.
        MetricEvent::emit_tallied(&metrics, self.ports.metrics.as_ref());
        judged
    }

    /// What the run does after a batch: go on, back off, or stop.
    pub(super) async fn after_batch(
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
                    let refused = stop == Some(crate::submit::bisect::StopKind::Refused);
                    warn!(
                        ?stop,
                        batches = self.consecutive_throttles,
                        "still throttled or refused; leaving the rest pending"
                    );
                    return Err(RunError::Stop(if refused {
                        Stop::Refused
                    } else {
                        Stop::Throttled
                    }));
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

    pub(super) async fn claim(
        &mut self,
        record: &AggregatedRecord,
    ) -> Result<Option<String>, RunError> {
        let claimed = self.claim_members(&[Arc::new(record.clone())]).await?;
        Ok(claimed.held.into_iter().next().map(|h| h.claim_id))
    }

    /// Records one outcome: under `claim_id`, or (without one) only while no live claim
    /// holds the record.
    pub(super) async fn write(
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
    pub(super) async fn write_outcomes(&self, writes: &[OutcomeWrite]) -> Result<(), RunError> {
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
    pub(super) async fn reject_malformed(&mut self, item: &MalformedItem) -> Result<(), RunError> {
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
}

//! When Marketplace fails: unprocessed records, throttling, errors mid-bisection, unclear answers, a disabled API, refusals before processing.

use super::*;

/// Marketplace that leaves chosen dimensions unprocessed the first `times` calls
/// that carry them.
struct Unprocessing {
    inner: MemoryMeteringApi,
    dimension: String,
    times: Mutex<u32>,
}

impl Unprocessing {
    fn new(world: &World, dimension: &str, times: u32) -> Self {
        Self {
            inner: world.api.clone(),
            dimension: dimension.into(),
            times: Mutex::new(times),
        }
    }
}

#[async_trait]
impl MeteringApi for Unprocessing {
    async fn batch_meter_usage(
        &self,
        records: &[MeteringRecord],
    ) -> Result<Vec<RecordVerdict>, MeteringError> {
        let hit = records.iter().any(|r| r.key.dimension == self.dimension) && {
            let mut left = self.times.lock().unwrap();
            let go = *left > 0;
            *left = left.saturating_sub(1);
            go
        };
        if !hit {
            return self.inner.batch_meter_usage(records).await;
        }
        let others: Vec<MeteringRecord> = records
            .iter()
            .filter(|r| r.key.dimension != self.dimension)
            .cloned()
            .collect();
        let mut answers = self.inner.batch_meter_usage(&others).await?.into_iter();
        Ok(records
            .iter()
            .map(|r| {
                if r.key.dimension == self.dimension {
                    RecordVerdict::Unprocessed
                } else {
                    answers.next().unwrap()
                }
            })
            .collect())
    }
}

#[tokio::test]
async fn unprocessed_records_are_retried_once_then_left_for_the_next_run() {
    let now = t(NOW);
    let world = World::new(now);
    let keys = seed(&world, 3, "2026-11-30T09", 1);
    let api = Arc::new(Unprocessing::new(&world, "d001", 2));

    let report = run_via(&world, now, api.clone()).await;

    // Sent, unprocessed, retried once after a backoff, still unprocessed: pending.
    assert_eq!(
        (report.success, report.unprocessed, report.api_calls),
        (2, 1, 2)
    );
    assert_eq!(status(&world, &keys[1]), AggregatedStatus::Pending);
    assert_eq!(world.metrics.total(metric::USAGE_RECORD_UNPROCESSED), 1);
    // The next run bills it, exactly once.
    let report = run_via(&world, now, api.clone()).await;
    assert_eq!(report.success, 1);
    assert_eq!(world.api.ledger().len(), 3);

    // An unprocessed record that goes through on the retry is billed in the same run.
    let more = seed(&world, 1, "2026-11-30T08", 1);
    let api = Arc::new(Unprocessing::new(&world, "d000", 1));
    let report = run_via(&world, now, api.clone()).await;
    assert_eq!((report.success, report.unprocessed), (1, 0));
    assert_eq!(status(&world, &more[0]), AggregatedStatus::Success);
}

#[tokio::test]
async fn throttling_backs_off_with_jitter_and_stops_after_repeated_failures() {
    let now = t(NOW);
    let world = World::new(now);
    let keys = seed(&world, 100, "2026-11-30T09", 1);
    world
        .api
        .fail_next(MeteringError::Throttled("Rate exceeded".into()));
    world
        .api
        .fail_next(MeteringError::Throttled("Rate exceeded".into()));
    world.api.fail_next(MeteringError::Transient(
        "InternalServiceErrorException".into(),
    ));

    let report = world.submit(now).await;

    // Three failing batches in a row: the run stops, their records stay pending and
    // unclaimed; nothing after them was sent.
    assert_eq!(report.stopped.as_deref(), Some("throttled"));
    assert_eq!(
        (
            report.success,
            report.left_pending,
            report.ambiguous,
            report.api_calls
        ),
        (0, 50, 25, 3)
    );
    assert!(
        keys.iter()
            .all(|k| world.record(k).unwrap().in_flight_until.is_none())
    );
    // Backoff with jitter between the failures, on top of pacing.
    let backoffs: Vec<_> = world
        .clock
        .sleeps()
        .into_iter()
        .filter(|d| *d != MIN_CALL_INTERVAL)
        .collect();
    assert!(!backoffs.is_empty());
    // Further runs bill everything exactly once.
    world.submit(now).await;
    world.submit(now).await;
    assert!(
        keys.iter()
            .all(|k| status(&world, k) == AggregatedStatus::Success)
    );
    assert_eq!(world.api.ledger().len(), 100);
}

#[tokio::test]
async fn an_internal_error_mid_bisection_pins_only_the_records_of_that_call() {
    let now = t(NOW);
    let world = World::new(now);
    let keys = seed(&world, 25, "2026-11-30T09", 2);
    // GIVEN a batch that fails validation (d022), whose left half is answered, whose
    // right half fails validation too and whose right half's first sub-call (d013 to
    // d018) gets an internal error
    world
        .api
        .reject_dimension("d022", "InvalidUsageDimensionException");
    world.api.fail_after(
        3,
        MeteringError::Transient("InternalServiceErrorException".into()),
    );

    let report = world.submit(now).await;

    assert_eq!(report.success, 13);
    assert_eq!(world.api.calls()[3].len(), 6);
    // THEN the records of the failed call may have been billed: their quantity is
    // pinned, and they are counted ambiguous once each
    for key in &keys[13..19] {
        let record = world.record(key).unwrap();
        assert_eq!(record.status, AggregatedStatus::Pending);
        assert_eq!(record.sent_quantity, Some(2), "{key}");
        assert!(!record.accepts_folds());
    }
    assert_eq!(world.metrics.total(metric::AMBIGUOUS_SUBMISSION), 6);
    assert_eq!(report.ambiguous, 6);
    // AND the records never sent in a call that may have billed are released as
    // never sent: late rows still fold into them
    for key in &keys[19..25] {
        let record = world.record(key).unwrap();
        assert_eq!(record.status, AggregatedStatus::Pending);
        assert_eq!(record.sent_quantity, None, "{key}");
        assert!(record.accepts_folds(), "{key}");
    }
}

#[tokio::test]
async fn a_record_the_answer_leaves_unclear_is_resent_with_the_same_quantity() {
    let now = t(NOW);
    let world = World::new(now);
    let keys = seed(&world, 3, "2026-11-30T09", 4);
    // GIVEN an answer that bills every record but leaves the last one unclear
    // (missing from both lists, an unknown status, or another record echoed)
    world.api.answer_unclearly(1, UnclearAnswer::Missing);

    let report = world.submit(now).await;

    // THEN it may have been billed: pending, its quantity pinned, counted ambiguous,
    // not unprocessed
    assert_eq!(
        (report.success, report.ambiguous, report.unprocessed),
        (2, 1, 0)
    );
    let unclear = world.record(&keys[2]).unwrap();
    assert_eq!(unclear.status, AggregatedStatus::Pending);
    assert_eq!(unclear.sent_quantity, Some(4));
    assert!(
        !unclear.accepts_folds(),
        "late rows must not change the quantity"
    );
    assert_eq!(world.metrics.total(metric::AMBIGUOUS_SUBMISSION), 1);
    assert_eq!(world.metrics.total(metric::USAGE_RECORD_UNPROCESSED), 0);
    // AND the next run re-sends exactly that quantity; billed once
    let again = world.submit(now).await;
    assert_eq!(again.success + again.duplicate, 1);
    assert!(status(&world, &keys[2]).is_terminal());
    assert_eq!(world.api.ledger()[&keys[2]].quantity, 4);
    assert!(
        world.api.calls()[1].iter().all(|r| r.quantity == 4),
        "re-sent with the pinned quantity"
    );
}

#[tokio::test]
async fn a_disabled_api_stops_the_run_without_marking_records() {
    let now = t(NOW);
    let world = World::new(now);
    let keys = seed(&world, 30, "2026-11-30T09", 1);
    world.api.fail_next(MeteringError::Disabled(
        "The API is disabled in the Region.".into(),
    ));
    let report = world.submit(now).await;
    assert_eq!(report.stopped.as_deref(), Some("disabled"));
    assert_eq!(report.api_calls, 1);
    assert_eq!(world.metrics.total(metric::METERING_API_DISABLED), 1);
    for key in &keys {
        let record = world.record(key).unwrap();
        assert_eq!(
            (record.status, record.in_flight_until),
            (AggregatedStatus::Pending, None)
        );
    }
}

#[tokio::test]
async fn a_refusal_before_processing_releases_the_claims_unpinned_and_backs_off() {
    let now = t(NOW);
    let world = World::new(now);
    let keys = seed(&world, 50, "2026-11-30T09", 2);
    // GIVEN a role edited away from BatchMeterUsage for the first call only
    world.api.fail_next(crate::submit::answer::refusal(
        "AccessDeniedException",
        "User is not authorized to perform: aws-marketplace:BatchMeterUsage",
    ));

    let report = world.submit(now).await;

    // THEN the refused batch is released as never sent: not ambiguous, not pinned,
    // not possibly billed, late rows still fold in; the next batch bills after a backoff
    assert_eq!(
        (report.success, report.ambiguous, report.left_pending),
        (25, 0, 25)
    );
    for key in &keys[..25] {
        let record = world.record(key).unwrap();
        assert_eq!(
            (record.status, record.sent_quantity, record.in_flight_until),
            (AggregatedStatus::Pending, None, None),
            "{key}"
        );
        assert!(!record.may_have_been_billed(), "{key}");
        assert!(record.accepts_folds(), "{key}");
    }
    assert_eq!(world.metrics.total(metric::AMBIGUOUS_SUBMISSION), 0);
    assert_eq!(
        world.metrics.get(
            metric::BATCH_METER_USAGE_REFUSED,
            &[("Exception", "AccessDeniedException")]
        ),
        1
    );
    assert!(
        world.clock.sleeps().iter().any(|d| *d != MIN_CALL_INTERVAL),
        "backed off"
    );
    // AND once the role is fixed, the next run bills them: a first send, no duplicate
    let again = world.submit(now).await;
    assert_eq!((again.success, again.duplicate), (25, 0));
    assert_eq!(world.metrics.total(metric::UNEXPECTED_DUPLICATE_RECORD), 0);
}

#[tokio::test]
async fn a_run_refused_again_and_again_stops_refused_and_its_expiries_say_so() {
    // GIVEN an hour at its window's edge and every call refused (expired credentials)
    let world = World::new(t("2026-11-30T10:59:00Z"));
    let keys = seed(&world, 80, "2026-11-29T11", 1);
    for _ in 0..3 {
        world.api.fail_next(crate::submit::answer::refusal(
            "ExpiredTokenException",
            "The security token included in the request is expired",
        ));
    }
    let report = world.submit(t("2026-11-30T10:59:00Z")).await;
    assert_eq!(report.stopped.as_deref(), Some("refused"));
    assert_eq!(report.api_calls, 3);
    assert!(
        keys.iter()
            .all(|k| !world.record(k).unwrap().may_have_been_billed())
    );
    // WHEN the window closes while still refused (the run's other records refused too)
    let others = seed(&world, 80, "2026-11-30T09", 1);
    for _ in 0..3 {
        world.api.fail_next(crate::submit::answer::refusal(
            "ExpiredTokenException",
            "expired",
        ));
    }
    let late = world.submit(t("2026-11-30T11:00:30Z")).await;
    // THEN they age out as never billed, saying why (not InterruptedSubmission)
    assert_eq!(late.stopped.as_deref(), Some("refused"));
    assert_eq!(late.expired, 80);
    for key in &keys {
        let record = world.record(key).unwrap();
        assert_eq!(record.status, AggregatedStatus::SubmissionExpired);
        assert_eq!(
            record.status_reason.as_deref(),
            Some(crate::submit::REASON_METERING_REFUSED)
        );
    }
    assert!(
        others
            .iter()
            .all(|k| status(&world, k) == AggregatedStatus::Pending)
    );
}

//! Leases and age-out: interrupted sends, expired and deferred hours, claims that end with the invocation, records pending past their lock.

use super::*;

#[tokio::test]
async fn an_interrupted_send_is_resent_after_its_lease_and_closes_without_double_billing() {
    let now = t(NOW);
    let world = World::new(now);
    let keys = seed(&world, 1, "2026-11-30T09", 6);
    // GIVEN a run that claimed and sent the record, then died before recording it
    assert!(
        claim_read(&world.aggregated, &keys[0], 1, &claim_at("died", now, 15))
            .await
            .unwrap()
            .is_some()
    );
    world
        .api
        .batch_meter_usage(&[metering_record(&world.record(&keys[0]).unwrap())])
        .await
        .unwrap();
    // WHEN a later run finds the lease expired
    let later = now + chrono::Duration::minutes(20);
    let report = world.submit(later).await;
    // THEN it re-sends the same quantity; Marketplace deduplicates; billed once
    assert_eq!(report.success + report.duplicate, 1);
    assert!(status(&world, &keys[0]).is_terminal());
    assert_eq!(world.api.ledger()[&keys[0]].quantity, 6);
    assert_eq!(world.api.ledger().len(), 1);
}

#[tokio::test]
async fn expired_records_age_out_loudly_and_zero_skips_quietly() {
    let now = t(NOW);
    let mut world = World::new(now);
    world.zero_policy = ZeroQuantityPolicy::Skip;
    let l = license(1);
    let lost = group(&l, ACCOUNT_A, "a", "2026-11-29T10");
    let zero = group(&l, ACCOUNT_A, "b", "2026-11-29T10");
    let held = group(&l, ACCOUNT_A, "c", "2026-11-29T09");
    world.tables.insert_aggregated(pending(&lost, 3), now);
    world.tables.insert_aggregated(pending(&zero, 0), now);
    let mut interrupted = pending(&held, 3);
    interrupted.in_flight_until = Some(t("2026-11-29T10:05:00Z"));
    world.tables.insert_aggregated(interrupted, now);
    let live_zero = group(&l, ACCOUNT_A, "b", "2026-11-30T08");
    world.tables.insert_aggregated(pending(&live_zero, 0), now);

    let report = world.submit(now).await;

    assert_eq!(report.expired, 3);
    assert_eq!(report.api_calls, 0, "a zero hour is never sent under skip");
    assert_eq!(status(&world, &lost), AggregatedStatus::SubmissionExpired);
    assert_eq!(
        world.record(&zero).unwrap().status_reason.as_deref(),
        Some(REASON_ZERO_QUANTITY_SKIPPED)
    );
    assert_eq!(
        world.record(&held).unwrap().status_reason.as_deref(),
        Some(REASON_INTERRUPTED_SUBMISSION)
    );
    assert_eq!(world.metrics.total(metric::USAGE_SUBMISSION_EXPIRED), 2);
    assert_eq!(status(&world, &live_zero), AggregatedStatus::Pending);
}

#[tokio::test]
async fn an_age_out_whose_answer_was_lost_is_counted_once() {
    // GIVEN an expired pending record, and an aggregated store whose first outcome
    // write takes effect and then loses its answer (the retry's condition fails)
    let now = t(NOW);
    let world = World::new(now);
    let l = license(1);
    let lost = group(&l, ACCOUNT_A, "a", "2026-11-29T10");
    world.tables.insert_aggregated(pending(&lost, 3), now);
    let lossy = Arc::new(LostAnswers::new(
        world.aggregated.clone(),
        crate::memory::StoreOp::AggregatedRecord,
        1,
    ));
    let ports = SubmitPorts {
        aggregated: lossy.clone(),
        ..world.submit_ports()
    };

    // WHEN the submitter ages it out
    let report = submit(now, &world.submit_settings(), &ports, Budget::UNLIMITED)
        .await
        .unwrap();

    // THEN it is expired and counted, once
    assert!(lossy.exhausted());
    assert_eq!(status(&world, &lost), AggregatedStatus::SubmissionExpired);
    assert_eq!(report.expired, 1);
    assert_eq!(world.metrics.total(metric::USAGE_SUBMISSION_EXPIRED), 1);
    // AND the next run counts nothing more
    assert_eq!(world.submit(now).await.expired, 0);
    assert_eq!(world.metrics.total(metric::USAGE_SUBMISSION_EXPIRED), 1);
}

#[tokio::test]
async fn a_run_stamped_before_an_hour_began_never_ages_that_hour_out() {
    // GIVEN a deprovisioning license whose final hour (11) was flushed early, and a
    // direct-submit row written for hour 11 a little ahead of time
    let world = World::new(t("2026-11-30T11:00:05Z"));
    let l = license(1);
    world.api.entitle(&l, ACCOUNT_A);
    let next_hour = group(&l, ACCOUNT_A, "a", "2026-11-30T11");
    world
        .tables
        .insert_aggregated(pending(&next_hour, 4), world.clock.now());
    // WHEN a run whose event time is 10:59:40 (its schedule fired before the hour)
    // sweeps the index
    let report = world.submit(t("2026-11-30T10:59:40Z")).await;
    // THEN the hour is not expired: it is billed by a later run
    assert_eq!(report.expired, 0);
    assert_eq!(status(&world, &next_hour), AggregatedStatus::Pending);
    let later = world.submit(t("2026-11-30T12:05:00Z")).await;
    assert_eq!(later.success, 1);
    assert_eq!(world.api.ledger()[&next_hour].quantity, 4);
}

/// Marketplace that notes each sent record's lease as stored while the call is out,
/// and lets a minute pass per call.
struct LeaseWatch {
    inner: MemoryMeteringApi,
    tables: crate::memory::MemoryTables,
    clock: crate::clock::ManualClock,
    leases: Mutex<Vec<Option<Instant>>>,
}

#[async_trait]
impl MeteringApi for LeaseWatch {
    async fn batch_meter_usage(
        &self,
        records: &[MeteringRecord],
    ) -> Result<Vec<RecordVerdict>, MeteringError> {
        for record in records {
            let stored = self.tables.aggregated_records();
            let stored = stored.iter().find(|r| r.key == record.key).unwrap();
            self.leases.lock().unwrap().push(stored.in_flight_until);
        }
        self.clock.advance(std::time::Duration::from_secs(60));
        self.inner.batch_meter_usage(records).await
    }
}

#[tokio::test]
async fn a_claim_ends_when_the_invocation_that_holds_it_ends() {
    // GIVEN an invocation that Lambda ends at 10:34 (the run stops 20 s before)
    let now = t(NOW);
    let world = World::new(now);
    seed(&world, 60, "2026-11-30T09", 1);
    let end = t("2026-11-30T10:34:00Z");
    let api = Arc::new(LeaseWatch {
        inner: world.api.clone(),
        tables: world.tables.clone(),
        clock: world.clock.clone(),
        leases: Mutex::new(Vec::new()),
    });
    let ports = SubmitPorts {
        metering: api.clone(),
        ..world.submit_ports()
    };
    // WHEN it claims batches minutes apart
    let budget = Budget::before(end, chrono::Duration::seconds(20));
    submit(now, &world.submit_settings(), &ports, budget)
        .await
        .unwrap();
    // THEN every claim, early or late, lapses at the invocation's end, never after
    let leases = api.leases.lock().unwrap().clone();
    assert_eq!(leases.len(), 60);
    assert!(leases.iter().all(|l| *l == Some(end)), "{leases:?}");
}

#[tokio::test]
async fn a_stale_run_expires_only_what_the_wall_clock_expires_too() {
    // GIVEN an hour that has aged out by the event time but not by the wall clock
    // (an invocation replayed with a later time, or a skewed clock)
    let world = World::new(t("2026-11-30T10:30:00Z"));
    let l = license(1);
    world.api.entitle(&l, ACCOUNT_A);
    let edge = group(&l, ACCOUNT_A, "a", "2026-11-29T11");
    world
        .tables
        .insert_aggregated(pending(&edge, 2), world.clock.now());
    // WHEN a run stamped after the hour's window closed sweeps the index
    let settings = world.submit_settings();
    let report = run(&world, t("2026-11-30T11:00:10Z"), &settings)
        .await
        .unwrap();
    // THEN it waits for the wall clock to agree; the hour is still billed in time
    assert_eq!(report.expired, 0);
    assert_eq!(status(&world, &edge), AggregatedStatus::Pending);
    let billed = world.submit(t("2026-11-30T10:31:00Z")).await;
    assert_eq!(billed.success, 1);
}

#[tokio::test]
async fn deferred_zero_hours_go_out_only_at_the_oldest_edge() {
    let now = t(NOW);
    let world = World::new(now);
    world.api.entitle(&license(1), ACCOUNT_A);
    let edge = group(&license(1), ACCOUNT_A, "a", "2026-11-29T11");
    let recent = group(&license(1), ACCOUNT_A, "a", "2026-11-30T08");
    world.tables.insert_aggregated(pending(&edge, 0), now);
    world.tables.insert_aggregated(pending(&recent, 0), now);
    let report = world.submit(now).await;
    assert_eq!(report.success, 1);
    assert_eq!(status(&world, &edge), AggregatedStatus::Success);
    assert_eq!(status(&world, &recent), AggregatedStatus::Pending);
}

#[tokio::test]
async fn every_run_reports_the_records_pending_past_their_lock() {
    let now = t(NOW);
    let world = World::new(now);
    let past_lock = |w: &World| w.metrics.get(metric::PENDING_PAST_LOCK, &[]);
    // GIVEN nothing pending: the run still reports, with zero (a heartbeat data point)
    let report = world.submit(now).await;
    assert_eq!(report.pending_past_lock, 0);
    assert!(
        world
            .metrics
            .snapshot()
            .contains_key(&(metric::PENDING_PAST_LOCK.to_string(), vec![]))
    );
    // GIVEN two due records of a completed hour and one of the open hour (not due)
    seed(&world, 2, "2026-11-30T09", 5);
    seed(&world, 1, "2026-11-30T10", 5);
    // WHEN Marketplace refuses the Region: the run finds both, bills neither
    world
        .api
        .fail_next(MeteringError::Disabled("not in this Region".into()));
    let report = world.submit(now).await;
    assert_eq!((report.pending_past_lock, report.success), (2, 0));
    assert_eq!(past_lock(&world), 2);
    assert_eq!(world.metrics.total(metric::USAGE_RECORD_SUBMITTED), 0);
    // WHEN the next run bills them, and the one after finds nothing due
    let report = world.submit(now).await;
    assert_eq!((report.pending_past_lock, report.success), (2, 2));
    let report = world.submit(now).await;
    assert_eq!(report.pending_past_lock, 0);
    // THEN the metric counted what each run found due
    assert_eq!(past_lock(&world), 4);
    assert_eq!(world.metrics.total(metric::USAGE_RECORD_SUBMITTED), 2);
}

/// Marketplace a slow network away: each call arrives `latency` after it was made, and
/// is refused as a whole with `TimestampOutOfBoundsException` if one of its records'
/// hours has left the window by then (as AWS refuses it).
struct SlowWindowed {
    inner: MemoryMeteringApi,
    clock: crate::clock::ManualClock,
    latency: std::time::Duration,
}

#[async_trait]
impl MeteringApi for SlowWindowed {
    async fn batch_meter_usage(
        &self,
        records: &[MeteringRecord],
    ) -> Result<Vec<RecordVerdict>, MeteringError> {
        self.clock.sleep(self.latency).await;
        let now = self.clock.now();
        if let Some(late) = records
            .iter()
            .find(|r| crate::time::bucket_expired(r.key.hour, now))
        {
            return Err(MeteringError::Validation {
                name: "TimestampOutOfBoundsException".into(),
                message: format!("{} is outside the 24 h window at {now}", late.key),
            });
        }
        self.inner.batch_meter_usage(records).await
    }
}

#[tokio::test]
async fn a_record_whose_hour_closes_during_the_run_is_not_sent_and_ages_out() {
    // GIVEN 100 records of the hour whose window closes at 11:00:00, a run started at
    // 10:59:35, and calls that take 10 s to reach Marketplace
    let start = t("2026-11-30T10:59:35Z");
    let world = World::new(start);
    let keys = seed(&world, 100, "2026-11-29T11", 3);
    let api = Arc::new(SlowWindowed {
        inner: world.api.clone(),
        clock: world.clock.clone(),
        latency: std::time::Duration::from_secs(10),
    });

    let report = run_via(&world, start, api).await;

    // THEN the first two batches bill, and the batches the window closed on are not
    // sent at all: no refused call, no bisection, no Error
    assert_eq!(report.success, 50);
    assert_eq!(report.errors, 0);
    assert_eq!(report.api_calls, 2);
    assert_eq!(world.metrics.total(metric::BATCH_METER_USAGE_EXCEPTION), 0);
    for key in &keys[50..] {
        let record = world.record(key).unwrap();
        assert_eq!(
            (record.status, record.sent_quantity, record.in_flight_until),
            (AggregatedStatus::Pending, None, None),
            "{key}"
        );
        assert!(!record.may_have_been_billed(), "{key}");
    }
    // AND the next run ages them out as never sent
    let next = world.submit(t("2026-11-30T11:01:00Z")).await;
    assert_eq!(next.expired, 50);
    for key in &keys[50..] {
        let record = world.record(key).unwrap();
        assert_eq!(record.status, AggregatedStatus::SubmissionExpired, "{key}");
        assert_eq!(record.status_reason, None, "{key}");
    }
}

//! The run as a pipeline: claims before sends, outcomes written while the next batch goes out, stops and store failures mid-run, hours read ahead.

use super::*;

/// Marketplace that checks, on every call, that the records sent are claimed and
/// that the outcomes of the batch before the previous one are stored (the previous
/// one's are written while this call is made).
struct OrderChecking {
    inner: MemoryMeteringApi,
    world: World,
    batches: Mutex<Vec<Vec<GroupKey>>>,
}

#[async_trait]
impl MeteringApi for OrderChecking {
    async fn batch_meter_usage(
        &self,
        records: &[MeteringRecord],
    ) -> Result<Vec<RecordVerdict>, MeteringError> {
        {
            let mut batches = self.batches.lock().unwrap();
            if let Some(two_back) = batches.len().checked_sub(2).and_then(|i| batches.get(i)) {
                for key in two_back {
                    assert_eq!(
                        self.world.record(key).unwrap().status,
                        AggregatedStatus::Success,
                        "{key} not recorded while the batch after it was sent"
                    );
                }
            }
            // Every record in flight was claimed first.
            for record in records {
                assert!(
                    self.world
                        .record(&record.key)
                        .unwrap()
                        .in_flight_until
                        .is_some()
                );
            }
            batches.push(records.iter().map(|r| r.key.clone()).collect());
        }
        self.inner.batch_meter_usage(records).await
    }
}

#[tokio::test]
async fn each_batch_is_claimed_before_sending_and_recorded_while_the_next_is_sent() {
    let now = t(NOW);
    let world = World::new(now);
    let keys = seed(&world, 80, "2026-11-30T09", 1);
    let api = Arc::new(OrderChecking {
        inner: world.api.clone(),
        world: world.clone(),
        batches: Mutex::new(vec![]),
    });
    let report = run_via(&world, now, api.clone()).await;
    assert_eq!((report.success, report.api_calls), (80, 4));
    assert_eq!(api.batches.lock().unwrap().len(), 4);
    for key in &keys {
        let record = world.record(key).unwrap();
        assert_eq!(
            (record.status, record.claim_id),
            (AggregatedStatus::Success, None),
            "the last batch is recorded before the run ends"
        );
    }
}

#[tokio::test]
async fn a_run_stopped_mid_pipeline_writes_what_it_knows_and_releases_the_next_batch() {
    let now = t(NOW);
    let world = World::new(now);
    let keys = seed(&world, 60, "2026-11-30T09", 1);
    // The first batch bills; the second finds the Region disabled, which stops the
    // run while the third batch is already claimed.
    world
        .api
        .fail_after(1, MeteringError::Disabled("disabled in the Region".into()));
    let report = world.submit(now).await;
    assert_eq!(report.stopped.as_deref(), Some("disabled"));
    assert_eq!(report.success, 25);
    for key in &keys {
        let record = world.record(key).unwrap();
        assert_eq!(record.claim_id, None, "{key}: no claim left behind");
        assert_eq!(record.in_flight_until, None);
    }
    let billed = keys
        .iter()
        .filter(|k| status(&world, k) == AggregatedStatus::Success)
        .count();
    assert_eq!(billed, 25);
}

#[tokio::test]
async fn a_subscribers_failure_after_the_send_still_writes_every_known_outcome() {
    let now = t(NOW);
    let world = World::new(now);
    let billed = seed(&world, 1, "2026-11-30T09", 3)[0].clone();
    // A license Marketplace does not entitle: its CustomerNotSubscribed needs the
    // subscribers row, whose read fails.
    let refused = group(&license(7), ACCOUNT_B, "a", "2026-11-30T09");
    world.tables.insert_aggregated(pending(&refused, 2), now);
    world.subscribers.fail_next(
        crate::memory::StoreOp::SubscriberGet,
        PortError::Failed {
            operation: "GetItem",
            message: "AccessDenied".into(),
        },
    );

    let result = run(&world, now, &world.submit_settings()).await;

    // The run reports the failure, but the billed record is recorded billed and the
    // other released, pending, for the next run.
    assert!(result.is_err());
    assert_eq!(status(&world, &billed), AggregatedStatus::Success);
    let other = world.record(&refused).unwrap();
    assert_eq!(other.status, AggregatedStatus::Pending);
    assert_eq!(other.in_flight_until, None);
    assert_eq!(
        other.sent_quantity,
        Some(2),
        "Marketplace saw the record: its quantity is final"
    );
}

#[tokio::test]
async fn an_unreadable_deprovisioning_index_makes_the_run_incomplete_not_silent() {
    let now = t(NOW);
    let world = World::new(now);
    let keys = seed(&world, 1, "2026-11-30T09", 3);
    world.subscribers.fail_next(
        crate::memory::StoreOp::SubscriberDeprovisioning,
        PortError::Failed {
            operation: "Query",
            message: "AccessDenied".into(),
        },
    );
    let report = world.submit(now).await;
    // Completed hours still bill; the run says it was incomplete, with a metric.
    assert_eq!(status(&world, &keys[0]), AggregatedStatus::Success);
    assert!(report.flush_error.is_some());
    assert!(!report.complete());
    assert_eq!(
        world
            .metrics
            .get(metric::INCOMPLETE_RUN, &[("Function", "submitter")]),
        1
    );
}

#[tokio::test]
async fn records_held_or_moved_are_skipped_this_run() {
    let now = t(NOW);
    let world = World::new(now);
    let keys = seed(&world, 2, "2026-11-30T09", 1);
    assert!(
        claim_read(&world.aggregated, &keys[0], 1, &claim_at("other", now, 5))
            .await
            .unwrap()
            .is_some()
    );
    let report = world.submit(now).await;
    assert_eq!((report.success, report.claim_skipped), (1, 1));
    assert_eq!(status(&world, &keys[0]), AggregatedStatus::Pending);
}

/// Counts the pending-index reads in flight at once; each read waits one poll, so
/// reads issued together are seen together.
struct Overlap {
    inner: crate::memory::MemoryAggregatedStore,
    /// (in flight, most in flight at once)
    state: Mutex<(usize, usize)>,
}

#[async_trait]
impl crate::memory::Decorator for Overlap {
    async fn around<T: Send>(
        &self,
        call: crate::memory::StoreCall,
        inner: impl std::future::Future<Output = Result<T, PortError>> + Send,
    ) -> Result<T, PortError> {
        if call.op != crate::memory::StoreOp::AggregatedPendingPage {
            return inner.await;
        }
        {
            let mut s = self.state.lock().unwrap();
            s.0 += 1;
            s.1 = s.1.max(s.0);
        }
        crate::memory::yield_now().await;
        self.state.lock().unwrap().0 -= 1;
        inner.await
    }
}

#[async_trait]
impl crate::memory::AggregatedDecorator for Overlap {
    type Inner = crate::memory::MemoryAggregatedStore;
    fn inner(&self) -> &Self::Inner {
        &self.inner
    }
}

#[tokio::test]
async fn hours_are_read_four_at_a_time_and_their_records_share_calls() {
    // GIVEN 10 pending records in each of three completed hours of the day
    let now = t(NOW);
    let world = World::new(now);
    for hour in ["2026-11-30T01", "2026-11-30T05", "2026-11-30T09"] {
        for i in 0..10 {
            let key = group(&license(1), ACCOUNT_A, &format!("{hour}-{i}"), hour);
            world
                .tables
                .insert_aggregated(pending(&key, 1), world.clock.now());
        }
    }
    world.api.entitle(&license(1), ACCOUNT_A);
    let store = Arc::new(Overlap {
        inner: world.aggregated.clone(),
        state: Mutex::new((0, 0)),
    });
    // WHEN one run goes over the 23 completed live hours
    let ports = SubmitPorts {
        aggregated: store.clone(),
        ..world.submit_ports()
    };
    let report = submit(now, &world.submit_settings(), &ports, Budget::UNLIMITED)
        .await
        .unwrap();
    // THEN the hours were read READ_AHEAD at a time, and the 30 records went out in
    // two calls (25 + 5) rather than three part-full ones
    let (_, most_at_once) = *store.state.lock().unwrap();
    assert_eq!(most_at_once, READ_AHEAD);
    assert_eq!(report.success, 30);
    let sizes: Vec<usize> = world.api.calls().iter().map(Vec::len).collect();
    assert_eq!(sizes, vec![25, 5]);
}

#[tokio::test]
async fn the_whole_pipeline_bills_each_group_exactly_its_aggregated_rows() {
    // GIVEN usage over several licenses (two on one account), dimensions and hours
    let now = t(NOW);
    let world = World::new(now);
    let (l1, l2, l3) = (license(1), license(2), license(3));
    for (l, account) in [(&l1, ACCOUNT_A), (&l2, ACCOUNT_A), (&l3, ACCOUNT_B)] {
        world.api.entitle(l, account);
        for (i, h) in ["07", "08", "09"].iter().enumerate() {
            for m in 0..5 {
                world.put(
                    l,
                    account,
                    "requests",
                    &format!("2026-11-30T{h}:{:02}:00Z", m * 7),
                    (i as i64 + 1) * 10 + m,
                );
                world.put(
                    l,
                    account,
                    "storage",
                    &format!("2026-11-30T{h}:{:02}:30Z", m * 7),
                    1,
                );
            }
        }
    }
    // WHEN every stage runs (twice, as schedules and redeliveries would)
    world.run_upstream(now).await;
    world.submit(now).await;
    world.run_upstream(now).await;
    world.submit(now).await;
    // THEN every raw row is Aggregated and each group billed exactly its sum
    assert!(
        world
            .raw_statuses()
            .iter()
            .all(|(_, s)| s.as_deref() == Some("Aggregated"))
    );
    let ledger = world.api.ledger();
    assert_eq!(ledger.len(), 18);
    for (key, entry) in &ledger {
        let sum: i64 = world
            .tables
            .raw_rows()
            .iter()
            .filter(|r| {
                r.license_arn == key.license_arn
                    && r.sort_key.starts_with(&key.usage_sort_key_prefix())
            })
            .map(|r| match r.attrs.get(crate::model::attr::QUANTITY) {
                Some(crate::model::Attr::N(q)) => q.parse::<i64>().unwrap(),
                _ => 0,
            })
            .sum();
        assert_eq!(entry.quantity, sum, "{key}");
        assert_eq!(world.record(key).unwrap().status, AggregatedStatus::Success);
    }
    // The three hours' 18 records share one call (a batch may span hours), oldest first.
    let calls = world.api.calls();
    assert_eq!(calls.len(), 1);
    let hours: Vec<HourBucket> = calls[0].iter().map(|r| r.key.hour).collect();
    assert!(hours.is_sorted(), "{hours:?}");
}

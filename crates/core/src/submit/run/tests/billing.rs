//! Billing in paced batches: order, metric lines, dimensions refused, subscriptions not yet active, duplicates.

use super::*;

#[tokio::test]
async fn completed_hours_are_billed_in_paced_batches_of_25() {
    let now = t(NOW);
    let world = World::new(now);
    let keys = seed(&world, 30, "2026-11-30T09", 5);
    let open_hour = seed(&world, 1, "2026-11-30T10", 5);

    let report = world.submit(now).await;

    assert_eq!((report.success, report.api_calls), (30, 2));
    assert_eq!(
        world.api.calls().iter().map(Vec::len).collect::<Vec<_>>(),
        vec![25, 5]
    );
    for key in &keys {
        let record = world.record(key).unwrap();
        assert_eq!(record.status, AggregatedStatus::Success);
        assert!(record.metering_record_id.is_some());
        assert_eq!(record.in_flight_until, None);
        assert_eq!(record.attempt_count, 1);
        assert_eq!(world.api.ledger()[key].quantity, 5);
    }
    // The open hour waits for the next runs.
    assert_eq!(status(&world, &open_hour[0]), AggregatedStatus::Pending);
    // Paced: the second call waited out the 100 ms interval.
    assert_eq!(world.clock.sleeps(), vec![MIN_CALL_INTERVAL]);
    assert_eq!(world.metrics.total(metric::USAGE_RECORD_SUBMITTED), 30);
    // A second run sends nothing again.
    let again = world.submit(now).await;
    assert_eq!(again.api_calls, 0);
}

/// A sink that keeps every call, to see how many lines a run writes.
#[derive(Default)]
struct Lines(Mutex<Vec<(String, u64)>>);

impl crate::ports::MetricsSink for Lines {
    fn count(&self, name: &str, _dimensions: &[(&str, &str)], value: u64) {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push((name.to_string(), value));
    }
}

#[tokio::test]
async fn a_batch_writes_one_metric_line_per_series_not_one_per_record() {
    let now = t(NOW);
    let world = World::new(now);
    seed(&world, 30, "2026-11-30T09", 5);
    let lines = Arc::new(Lines::default());
    let ports = SubmitPorts {
        metrics: lines.clone(),
        ..world.submit_ports()
    };
    let report = submit(now, &world.submit_settings(), &ports, Budget::UNLIMITED)
        .await
        .unwrap();
    assert_eq!(report.success, 30);
    let submitted: Vec<u64> = lines
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|(name, _)| name == metric::USAGE_RECORD_SUBMITTED)
        .map(|(_, n)| *n)
        .collect();
    // Two batches (25 and 5): two lines, the same sum as one per record.
    assert_eq!(submitted, vec![25, 5]);
}

#[tokio::test]
async fn oldest_hours_go_first_and_deprovisioning_licenses_before_everyone() {
    let now = t(NOW);
    let world = World::new(now);
    let l1 = license(1);
    let l9 = license(9);
    world.api.entitle(&l1, ACCOUNT_A);
    world.api.entitle(&l9, ACCOUNT_B);
    world.subscribe(
        &l9,
        ACCOUNT_B,
        SubscriptionStatus::Deprovisioning,
        Some(t("2026-11-30T11:00:00Z")),
    );
    let newer = group(&l1, ACCOUNT_A, "a", "2026-11-30T09");
    let older = group(&l1, ACCOUNT_A, "a", "2026-11-29T20");
    let flush_open = group(&l9, ACCOUNT_B, "a", "2026-11-30T10");
    let flush_done = group(&l9, ACCOUNT_B, "a", "2026-11-30T08");
    for key in [&newer, &older, &flush_open, &flush_done] {
        world.tables.insert_aggregated(pending(key, 1), now);
    }
    let report = world.submit(now).await;
    assert_eq!(report.success, 4);
    let order: Vec<GroupKey> = world
        .api
        .calls()
        .into_iter()
        .flatten()
        .map(|r| r.key)
        .collect();
    assert_eq!(order, vec![flush_done, flush_open, older, newer]);
}

#[tokio::test]
async fn an_undefined_dimension_is_isolated_and_its_batch_mates_still_bill() {
    let now = t(NOW);
    let world = World::new(now);
    let keys = seed(&world, 25, "2026-11-30T09", 2);
    world
        .api
        .reject_dimension("d007", "InvalidUsageDimensionException");

    let report = world.submit(now).await;

    assert_eq!((report.success, report.errors), (24, 1));
    let bad = world.record(&keys[7]).unwrap();
    assert_eq!(bad.status, AggregatedStatus::Error);
    assert_eq!(
        bad.status_reason.as_deref(),
        Some("InvalidUsageDimensionException")
    );
    assert!(!world.api.ledger().contains_key(&keys[7]));
    assert_eq!(
        world.metrics.get(
            metric::BATCH_METER_USAGE_EXCEPTION,
            &[("Exception", "InvalidUsageDimensionException")]
        ),
        1
    );
    // Bisection stays within ceil(log2(25)) levels: at most 2n - 1 calls, paced.
    assert!(report.api_calls <= 49);
    assert_eq!(world.clock.sleeps().len() as u64, report.api_calls - 1);
}

#[tokio::test]
async fn a_dimension_refused_once_is_sent_alone_in_later_batches() {
    let now = t(NOW);
    let world = World::new(now);
    // Four batches of 25, each holding one record of the undefined dimension.
    let mut bad = Vec::new();
    let mut keys = Vec::new();
    for n in 0..4u32 {
        let l = license(10 + n);
        world.api.entitle(&l, ACCOUNT_A);
        for d in 0..25 {
            let dimension = if d == 12 {
                "undefined".to_string()
            } else {
                format!("d{d:03}")
            };
            let key = group(&l, ACCOUNT_A, &dimension, "2026-11-30T09");
            world.tables.insert_aggregated(pending(&key, 1), now);
            if d == 12 {
                bad.push(key.clone());
            }
            keys.push(key);
        }
    }
    world
        .api
        .reject_dimension("undefined", "InvalidUsageDimensionException");

    let report = world.submit(now).await;

    // Every record has its own verdict: the four bad ones Error, the rest billed.
    assert_eq!((report.success, report.errors), (96, 4));
    for key in &bad {
        assert_eq!(status(&world, key), AggregatedStatus::Error);
    }
    // The first batch is bisected; each later one costs its clean 24 records in one
    // call and the known-bad record alone in another.
    let calls = world.api.calls();
    let first_batch_calls = calls.len() - 3 * 2;
    assert!(first_batch_calls < 2 * 25, "{} calls", calls.len());
    assert!(
        calls[first_batch_calls..]
            .iter()
            .all(|c| c.len() == 24 || (c.len() == 1 && c[0].key.dimension == "undefined")),
        "{:?}",
        calls.iter().map(Vec::len).collect::<Vec<_>>()
    );
    assert_eq!(report.api_calls as usize, calls.len());
}

#[tokio::test]
async fn customer_not_subscribed_waits_for_license_updated_then_bills() {
    let now = t(NOW);
    let world = World::new(now);
    let l = license(2);
    let early = group(&l, ACCOUNT_A, "a", "2026-11-30T08");
    world.tables.insert_aggregated(pending(&early, 4), now);
    let ended = group(&license(3), ACCOUNT_B, "a", "2026-11-30T08");
    world.subscribe(&license(3), ACCOUNT_B, SubscriptionStatus::Inactive, None);
    world.tables.insert_aggregated(pending(&ended, 4), now);

    // GIVEN License Updated has not arrived for `early`
    let report = world.submit(now).await;
    assert_eq!(
        (report.awaiting_subscription, report.not_subscribed),
        (1, 1)
    );
    assert_eq!(status(&world, &early), AggregatedStatus::Pending);
    assert_eq!(world.record(&early).unwrap().in_flight_until, None);
    assert_eq!(
        status(&world, &ended),
        AggregatedStatus::CustomerNotSubscribed
    );
    assert_eq!(world.metrics.total(metric::CUSTOMER_NOT_SUBSCRIBED), 1);

    // WHEN it arrives and Marketplace entitles the buyer
    world.subscribe(&l, ACCOUNT_A, SubscriptionStatus::Active, None);
    world.api.entitle(&l, ACCOUNT_A);
    let later = t("2026-11-30T10:35:00Z");
    let report = world.submit(later).await;
    assert_eq!(report.success, 1);
    assert_eq!(status(&world, &early), AggregatedStatus::Success);
}

/// Bills `key` with `quantity` as some other writer would (another stack, a script).
async fn billed_elsewhere(world: &World, key: &GroupKey, quantity: i64) {
    let mut record = metering_record(&pending(key, quantity));
    record.product_code = PRODUCT.into();
    let verdicts = world.api.batch_meter_usage(&[record]).await.unwrap();
    assert!(matches!(verdicts[0], RecordVerdict::Success { .. }));
}

#[tokio::test]
async fn a_duplicate_of_a_record_only_kept_pending_before_activation_raises_the_alarm() {
    let now = t(NOW);
    let world = World::new(now);
    let l = license(2);
    let early = group(&l, ACCOUNT_A, "a", "2026-11-30T08");
    world.tables.insert_aggregated(pending(&early, 4), now);
    // GIVEN a CustomerNotSubscribed kept pending before License Updated: its
    // quantity is pinned, but nothing of ours billed it
    world.submit(now).await;
    let kept = world.record(&early).unwrap();
    assert_eq!(kept.sent_quantity, Some(4));
    // AND something else bills the hour meanwhile, with another quantity
    world.subscribe(&l, ACCOUNT_A, SubscriptionStatus::Active, None);
    world.api.entitle(&l, ACCOUNT_A);
    billed_elsewhere(&world, &early, 9).await;

    // WHEN our re-send is answered DuplicateRecord
    let report = world.submit(t("2026-11-30T10:35:00Z")).await;

    // THEN it is no earlier attempt of ours: UnexpectedDuplicate, with the alarm metric
    assert_eq!(report.duplicate, 1);
    let record = world.record(&early).unwrap();
    assert_eq!(record.status, AggregatedStatus::DuplicateRecord);
    assert_eq!(
        record.status_reason.as_deref(),
        Some(crate::submit::outcome::REASON_UNEXPECTED_DUPLICATE)
    );
    assert_eq!(world.metrics.total(metric::UNEXPECTED_DUPLICATE_RECORD), 1);
}

#[tokio::test]
async fn an_item_from_before_possibly_billed_reads_its_sent_quantity_as_before() {
    let now = t(NOW);
    let world = World::new(now);
    let key = seed(&world, 1, "2026-11-30T09", 5)[0].clone();
    // GIVEN a record an earlier version left pending with sentQuantity after an
    // ambiguous send, without possiblyBilled, and Marketplace holding the hour
    let mut old = pending(&key, 5);
    old.sent_quantity = Some(5);
    old.attempt_count = 1;
    assert_eq!(old.possibly_billed, None);
    world.tables.insert_aggregated(old, now);
    billed_elsewhere(&world, &key, 6).await;

    world.submit(now).await;

    // THEN the DuplicateRecord is read as our earlier attempt, as before: no alarm
    let record = world.record(&key).unwrap();
    assert_eq!(record.status, AggregatedStatus::DuplicateRecord);
    assert_eq!(
        record.status_reason.as_deref(),
        Some(crate::submit::outcome::REASON_BILLED_BY_EARLIER_ATTEMPT)
    );
    assert_eq!(world.metrics.total(metric::UNEXPECTED_DUPLICATE_RECORD), 0);
}

#[tokio::test]
async fn a_duplicate_of_a_replayed_error_nothing_of_ours_billed_raises_the_alarm() {
    let now = t(NOW);
    let world = World::new(now);
    let keys = seed(&world, 1, "2026-11-30T09", 3);
    // GIVEN a record Marketplace refused (Error), replayed by the operator
    world
        .api
        .reject_dimension("d000", "InvalidUsageDimensionException");
    world.submit(now).await;
    assert_eq!(status(&world, &keys[0]), AggregatedStatus::Error);
    world.api.accept_dimension("d000");
    let record = world.record(&keys[0]).unwrap();
    assert!(
        world
            .tables
            .operator_store()
            .replay(&record, now)
            .await
            .unwrap()
    );
    // AND something else billed the hour with another quantity
    billed_elsewhere(&world, &keys[0], 8).await;

    // WHEN the replay's send is answered DuplicateRecord
    world.submit(t("2026-11-30T10:35:00Z")).await;

    // THEN nothing of ours billed it: UnexpectedDuplicate, with the alarm metric
    let record = world.record(&keys[0]).unwrap();
    assert_eq!(record.status, AggregatedStatus::DuplicateRecord);
    assert_eq!(
        record.status_reason.as_deref(),
        Some(crate::submit::outcome::REASON_UNEXPECTED_DUPLICATE)
    );
    assert_eq!(world.metrics.total(metric::UNEXPECTED_DUPLICATE_RECORD), 1);
}

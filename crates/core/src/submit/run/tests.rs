//! The submitter's run on the in-memory ports: claims, sends, bisection, outcomes, write-backs and age-out.

use std::sync::Mutex;

use async_trait::async_trait;

use super::*;
use crate::aggregate::ZeroQuantityPolicy;
use crate::memory::{MemoryMeteringApi, claim_read};
use crate::model::{Allocation, SubscriptionStatus, Tag};
use crate::pipeline::testkit::*;
use crate::ports::{MeteringError, OperatorStore, PortError, UnclearAnswer};
use crate::submit::DeploymentMode;
use crate::submit::batch::BatchLimits;
use crate::submit::pacing::MIN_CALL_INTERVAL;
use crate::submit::{REASON_INTERRUPTED_SUBMISSION, REASON_ZERO_QUANTITY_SKIPPED};

const NOW: &str = "2026-11-30T10:30:00Z";

fn pending(key: &GroupKey, quantity: i64) -> AggregatedRecord {
    crate::memory::fixtures::pending_record(key.clone(), PRODUCT, quantity, 1)
}

/// Stores `n` pending records (dimension `d0..`) for license 1 in `hour`, entitled.
fn seed(world: &World, n: usize, hour: &str, quantity: i64) -> Vec<GroupKey> {
    let l = license(1);
    world.api.entitle(&l, ACCOUNT_A);
    (0..n)
        .map(|i| {
            let key = group(&l, ACCOUNT_A, &format!("d{i:03}"), hour);
            world
                .tables
                .insert_aggregated(pending(&key, quantity), world.clock.now());
            key
        })
        .collect()
}

fn status(world: &World, key: &GroupKey) -> AggregatedStatus {
    world.record(key).unwrap().status
}

/// One run at `now` with `settings` and the world's ports, no deadline; the clock is
/// left as it is.
async fn run(
    world: &World,
    now: Instant,
    settings: &SubmitSettings,
) -> Result<SubmitReport, PipelineError> {
    submit(now, settings, &world.submit_ports(), Budget::UNLIMITED).await
}

/// One run at `now` with the world's settings and ports but `api` as Marketplace.
async fn run_via(world: &World, now: Instant, api: Arc<dyn MeteringApi>) -> SubmitReport {
    let ports = SubmitPorts {
        metering: api,
        ..world.submit_ports()
    };
    submit(now, &world.submit_settings(), &ports, Budget::UNLIMITED)
        .await
        .unwrap()
}

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

#[tokio::test]
async fn dry_run_never_calls_marketplace() {
    let now = t(NOW);
    let world = World::new(now);
    let test_account = group(&license(1), ACCOUNT_A, "a", "2026-11-30T09");
    let real_buyer = group(&license(2), ACCOUNT_B, "a", "2026-11-30T09");
    world
        .tables
        .insert_aggregated(pending(&test_account, 2), now);
    world.tables.insert_aggregated(pending(&real_buyer, 2), now);
    let mut settings = world.submit_settings();
    settings.mode = MeteringMode::from_parts("dry-run", &[ACCOUNT_A.to_string()]).unwrap();
    let report = run(&world, now, &settings).await.unwrap();
    assert_eq!(
        (
            report.dry_run_submitted,
            report.dry_run_skipped,
            report.api_calls
        ),
        (1, 1, 0)
    );
    // Only the test account's record is meant to be sent: the other never is.
    assert_eq!(report.pending_past_lock, 1);
    assert!(world.api.calls().is_empty());
    assert_eq!(
        status(&world, &test_account),
        AggregatedStatus::DryRunSubmitted
    );
    assert_eq!(status(&world, &real_buyer), AggregatedStatus::Pending);
}
#[tokio::test]
async fn the_deadline_stops_sending_between_batches() {
    let now = t(NOW);
    let world = World::new(now);
    let keys = seed(&world, 100, "2026-11-30T09", 1);
    // Pacing sleeps 100 ms per call on the manual clock: calls start at 0, 100 and
    // 200 ms; at 200 ms the 150 ms deadline has passed, so no fourth batch starts.
    let budget = Budget::until(world.clock.now() + chrono::Duration::milliseconds(150));
    let report = submit(now, &world.submit_settings(), &world.submit_ports(), budget)
        .await
        .unwrap();
    assert_eq!(report.stopped.as_deref(), Some("deadline"));
    assert_eq!((report.api_calls, report.success), (3, 75));
    let pending_left = keys
        .iter()
        .filter(|k| status(&world, k) == AggregatedStatus::Pending)
        .count();
    assert_eq!(pending_left, 25);
    assert!(
        keys.iter()
            .all(|k| world.record(k).unwrap().in_flight_until.is_none())
    );
}

#[tokio::test]
async fn a_record_too_large_to_send_is_closed_as_an_error() {
    let now = t(NOW);
    let world = World::new(now);
    let keys = seed(&world, 1, "2026-11-30T09", 1);
    let mut big = pending(&group(&license(1), ACCOUNT_A, "big", "2026-11-30T09"), 2);
    big.allocations = Some(vec![
        Allocation {
            quantity: 1,
            tags: vec![Tag {
                key: "k".into(),
                value: "v".repeat(200),
            }],
        },
        Allocation {
            quantity: 1,
            tags: vec![Tag {
                key: "k".into(),
                value: "w".repeat(200),
            }],
        },
    ]);
    world.tables.insert_aggregated(big.clone(), now);
    let mut settings = world.submit_settings();
    settings.limits = BatchLimits::new(25, 400).unwrap();
    let report = run(&world, now, &settings).await.unwrap();
    assert_eq!((report.success, report.errors), (1, 1));
    assert_eq!(
        world.record(&big.key).unwrap().status_reason.as_deref(),
        Some(REASON_REQUEST_TOO_LARGE)
    );
    assert_eq!(status(&world, &keys[0]), AggregatedStatus::Success);
}

#[tokio::test]
async fn store_failures_end_the_run_with_an_error() {
    let now = t(NOW);
    let world = World::new(now);
    seed(&world, 1, "2026-11-30T09", 1);
    for _ in 0..RetryPolicy::STORE.attempts {
        world.tables.fail_next(
            crate::memory::StoreOp::AggregatedPendingPage,
            PortError::Transient {
                operation: "Query",
                message: "throttled".into(),
            },
        );
    }
    let result = run(&world, now, &world.submit_settings()).await;
    assert!(matches!(result, Err(PipelineError::Port(_))), "{result:?}");
}

#[tokio::test]
async fn direct_submit_rows_are_submitted_the_same_way() {
    // GIVEN the seller writes a finalized hourly total straight into the table,
    // without a product code
    let now = t(NOW);
    let world = World::new(now);
    world.api.entitle(&license(1), ACCOUNT_A);
    let key = group(&license(1), ACCOUNT_A, "a", "2026-11-30T09");
    let mut direct = pending(&key, 42);
    direct.product_code = String::new();
    assert_eq!(
        world.aggregated.put_direct(&direct, now).await.unwrap(),
        crate::ports::PutOutcome::Created
    );
    let mut settings = world.submit_settings();
    settings.deployment = DeploymentMode::DirectSubmit;
    let report = run(&world, now, &settings).await.unwrap();
    assert_eq!(report.success, 1);
    assert_eq!(world.api.ledger()[&key].quantity, 42);
    assert_eq!(world.api.ledger()[&key].product_code, PRODUCT);
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

//! Dry runs, deadlines, records too large, store failures and direct-submit rows.

use super::*;

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

//! Proof 8: a seeded randomized run. Many rows (some malformed, some late), stages run
//! in a random order with random skips, redeliveries and Marketplace faults between them.
//! At the end the conservation invariant must hold over the tables and the ledger.
//! The seed is printed; `AWSMP_E2E_SEED=<n>` replays a run.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use awsmp_core::time::format_instant;
use awsmp_e2e::common::*;
use awsmp_e2e::license;
use awsmp_marketplace_sim::{FaultKind, FaultSpec, FaultTarget};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

const DIMENSIONS: [&str; 3] = ["requests", "storage", "users"];

#[tokio::test]
async fn randomized_faults_between_stages_conserve_every_row() {
    let seed: u64 = std::env::var("AWSMP_E2E_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20261130);
    println!("randomized run seed: {seed} (AWSMP_E2E_SEED={seed} replays it)");
    let mut rng = StdRng::seed_from_u64(seed);

    let stack = stack("2026-11-30T06:00:00Z").await;
    // Two licenses on one account, one on another; the fourth activates late.
    let buyers = [
        (license(1), ACCOUNT_A),
        (license(2), ACCOUNT_A),
        (license(3), ACCOUNT_B),
        (license(4), ACCOUNT_B),
    ];
    for (l, account) in &buyers[..3] {
        stack.license_updated(l, account).await.unwrap();
    }
    let mut written = 0usize;
    let ticks = 12;
    for tick in 0..ticks {
        // The seller writes usage: mostly this and the last two hours, some late.
        let now = stack.now();
        for _ in 0..rng.random_range(5..20) {
            let (l, account) = &buyers[rng.random_range(0..buyers.len())];
            let dimension = DIMENSIONS[rng.random_range(0..DIMENSIONS.len())];
            let back = if rng.random_bool(0.1) {
                rng.random_range(3 * 3600..8 * 3600)
            } else {
                rng.random_range(0..3 * 3600)
            };
            let ts = format_instant(now - chrono::Duration::seconds(back));
            let quantity = rng.random_range(0..50);
            let mut item = awsmp_e2e::Stack::usage_item(l, account, dimension, &ts, quantity);
            if rng.random_bool(0.08) {
                match rng.random_range(0..3) {
                    0 => item.insert(
                        "quantity".into(),
                        aws_sdk_dynamodb::types::AttributeValue::N("-1".into()),
                    ),
                    1 => item.insert(
                        "quantity".into(),
                        aws_sdk_dynamodb::types::AttributeValue::N("2.5".into()),
                    ),
                    _ => item.insert(
                        "productCode".into(),
                        aws_sdk_dynamodb::types::AttributeValue::S("prod-other".into()),
                    ),
                };
            }
            // Same-second writes would overwrite (the reference key has no event id):
            // suffix the key, as the ingestion API does, so every write is a new row.
            let sk = item["customerAWSAccountId_dimension_timestamp"]
                .as_s()
                .unwrap()
                .clone();
            item.insert(
                "customerAWSAccountId_dimension_timestamp".into(),
                aws_sdk_dynamodb::types::AttributeValue::S(format!("{sk}#e{written}")),
            );
            stack.put_item(item).await.unwrap();
            written += 1;
        }
        if tick == ticks / 2 {
            let (l, account) = &buyers[3];
            stack.license_updated(l, account).await.unwrap();
        }
        // Faults at Marketplace.
        if rng.random_bool(0.35) {
            let kind = match rng.random_range(0..3) {
                0 => FaultKind::Throttling,
                1 => FaultKind::InternalError,
                _ => FaultKind::Unprocessed {
                    records: rng.random_range(1..4),
                },
            };
            stack
                .sim
                .handle()
                .inject_fault(FaultSpec {
                    kind,
                    count: rng.random_range(1..3),
                    operation: FaultTarget::BatchMeterUsage,
                })
                .unwrap();
        }
        // Stages in a random subset, each possibly twice, with redeliveries between.
        if rng.random_bool(0.8) {
            stack.run_discoverer().await.unwrap();
        }
        if rng.random_bool(0.2) {
            stack.redeliver_everything().await.unwrap();
        }
        if rng.random_bool(0.75) {
            stack.drain_aggregator().await.unwrap();
        }
        if rng.random_bool(0.15) {
            stack.run_discoverer().await.unwrap();
            stack.drain_aggregator().await.unwrap();
        }
        if rng.random_bool(0.7) {
            stack.drain_cleanup().await.unwrap();
        }
        if rng.random_bool(0.7) {
            stack.run_submitter().await.unwrap();
        }
        let violations = stack.conservation(false).await.unwrap();
        assert!(
            violations.is_empty(),
            "seed {seed}, tick {tick}:\n{}",
            violations.join("\n")
        );
        stack.advance(chrono::Duration::minutes(rng.random_range(10..40)));
    }

    // Heal, let the open hours complete, and drain everything.
    stack.sim.handle().clear_faults();
    for _ in 0..3 {
        stack.advance(chrono::Duration::hours(1));
        stack.redeliver_everything().await.unwrap();
        stack.run_pipeline().await.unwrap();
        stack.drain_cleanup().await.unwrap();
    }
    assert_conserved(&stack, false).await;
    let billed_rows = stack
        .raw_rows()
        .await
        .unwrap()
        .iter()
        .filter(|r| r.status.as_deref() == Some("Aggregated"))
        .count();
    assert!(
        billed_rows > written / 2,
        "seed {seed}: only {billed_rows} of {written} rows counted"
    );

    // Past every window: whatever is left ages out, and every row and record is final.
    stack.advance(chrono::Duration::hours(30));
    stack.run_pipeline().await.unwrap();
    assert_conserved(&stack, true).await;
    assert_eq!(stack.raw_rows().await.unwrap().len(), written);
}

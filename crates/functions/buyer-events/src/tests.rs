//! The handler on the documented stream event, against the in-memory bus (the
//! environment it reads is held by crates/cli/tests/env_contract.rs).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use awsmp_core::memory::MemoryBus;
use awsmp_core::ports::PortError;
use lambda_runtime::{Context, LambdaEvent};

use super::*;

/// The handler on `event` with `bus` as its bus: the changes it names for redelivery.
async fn run(bus: &MemoryBus, event: StreamEvent) -> Vec<String> {
    let state = State {
        config: Arc::new(Config {
            subscribers_table: "awsmp-subscribers-test".into(),
        }),
        bus: Arc::new(bus.clone()),
    };
    let response = handler(&state, LambdaEvent::new(event, Context::default()))
        .await
        .unwrap();
    failed_positions(&response)
        .into_iter()
        .map(str::to_string)
        .collect()
}

fn fixture() -> StreamEvent {
    serde_json::from_str(include_str!(
        "../tests/fixtures/subscribers-stream-event.json"
    ))
    .unwrap()
}

#[tokio::test]
async fn a_license_updated_then_deprovisioned_tells_subscribed_then_deprovisioning() {
    let bus = MemoryBus::new();
    let failures = run(&bus, fixture()).await;
    assert!(failures.is_empty(), "{failures:?}");
    let taken = bus.taken();
    let types: Vec<&str> = taken.iter().map(|e| e.detail_type).collect();
    assert_eq!(types, vec!["Buyer Subscribed", "Buyer Deprovisioning"]);
    assert!(taken.iter().all(|e| e.source == "awsmp.buyers"));
    let subscribed: serde_json::Value = serde_json::from_str(&taken[0].detail).unwrap();
    assert_eq!(subscribed["agreementId"], "agmt-1111111111111111111111111");
    assert_eq!(subscribed["productCode"], "prodcode123");
    assert_eq!(subscribed["customerAWSAccountId"], "111122223333");
    let deprovisioning: serde_json::Value = serde_json::from_str(&taken[1].detail).unwrap();
    assert_eq!(deprovisioning["billedUntil"], "2026-12-03T13:00:00Z");
    assert_eq!(deprovisioning["detailVersion"], 1);
    assert_eq!(
        taken[1].resources,
        vec!["arn:aws:license-manager::123456789012:license:l-0123456789abcdef0".to_string()]
    );
    // A redelivery tells the same ids.
    let again = MemoryBus::new();
    run(&again, fixture()).await;
    assert_eq!(again.taken(), taken);
}

#[tokio::test]
async fn what_the_bus_did_not_take_comes_back_and_another_tables_stream_is_skipped() {
    // The Deprovisioning entry refused: its change (the second) is delivered again; a
    // record of a table the function does not read tells nothing and never fails.
    let refusing = MemoryBus::new();
    refusing.refuse_next(&[1], "InternalFailure");
    let mut batch = fixture();
    let mut foreign = batch.records[1].clone();
    foreign.event_source_arn = "arn:aws:dynamodb:us-east-1:1:table/awsmp-other/stream/x".into();
    batch.records.insert(0, foreign);
    assert_eq!(
        run(&refusing, batch).await,
        ["111100000000000000000002"],
        "only the refused change"
    );
    let types: Vec<&str> = refusing.taken().iter().map(|e| e.detail_type).collect();
    assert_eq!(types, ["Buyer Subscribed"]);

    // The whole call failing: every change of the batch comes back.
    let failing = MemoryBus::new();
    failing.fail_next_put(PortError::Transient {
        operation: "PutEvents",
        message: "throttled".into(),
    });
    assert_eq!(
        run(&failing, fixture()).await,
        ["111100000000000000000001", "111100000000000000000002"]
    );
}

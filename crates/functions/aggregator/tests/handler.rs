//! The handler with a real SQS batch fixture, over the in-memory ports: partial batch
//! failures are reported by message id.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use aws_lambda_events::sqs::SqsEvent;
use awsmp_aggregator::{State, handler};
use awsmp_core::aggregate::ZeroQuantityPolicy;
use awsmp_core::aggregate::run::{AggregatePorts, AggregateSettings};
use awsmp_core::clock::ManualClock;
use awsmp_core::memory::fixtures::tables_with_one_row;
use awsmp_core::memory::{MemoryTables, MemoryWorkQueue};
use awsmp_core::time::{Instant, MeteringLockHours, parse_usage_timestamp};
use lambda_runtime::{Context, LambdaEvent};

/// The aggregator over `tables` and `cleanup`, its clock at `now`.
fn state(tables: &MemoryTables, cleanup: &MemoryWorkQueue, now: Instant) -> State {
    State {
        settings: Arc::new(AggregateSettings {
            product_code: "prod-abc123".into(),
            lock: MeteringLockHours::DEFAULT,
            zero_policy: ZeroQuantityPolicy::Defer,
            retention: awsmp_core::retention::Retention::FOREVER,
        }),
        ports: AggregatePorts {
            usage: Arc::new(tables.usage_store()),
            aggregated: Arc::new(tables.aggregated_store()),
            cleanup_queue: Arc::new(cleanup.clone()),
            clock: Arc::new(ManualClock::new(now)),
        },
    }
}

fn half_past_ten() -> Instant {
    parse_usage_timestamp("2026-11-30T10:30:00Z").unwrap()
}

#[tokio::test]
async fn malformed_bodies_fail_alone_by_message_id() {
    let tables = tables_with_one_row();
    let cleanup = MemoryWorkQueue::new();
    let state = state(&tables, &cleanup, half_past_ten());
    let payload: SqsEvent = serde_json::from_str(include_str!("fixtures/sqs-batch.json")).unwrap();

    let response = handler(&state, LambdaEvent::new(payload, Context::default()))
        .await
        .unwrap();

    let failed: Vec<&str> = response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.as_str())
        .collect();
    assert_eq!(failed, vec!["2e1424d4-f796-459a-8184-9c92662be6da"]);
    assert_eq!(tables.aggregated_records()[0].quantity, 4);
    // The commit counted and finalized the row: nothing is left for cleanup.
    assert!(cleanup.messages().is_empty());
    assert!(tables.raw_rows().iter().all(|r| {
        !r.attrs
            .contains_key(awsmp_core::model::attr::METERING_PENDING)
    }));
}

#[tokio::test]
async fn a_message_without_an_id_fails_the_whole_batch() {
    let tables = MemoryTables::new();
    let state = state(&tables, &MemoryWorkQueue::new(), half_past_ten());
    let fixture = include_str!("fixtures/sqs-batch.json").replace(
        "\"messageId\": \"2e1424d4-f796-459a-8184-9c92662be6da\",",
        "",
    );
    let payload: SqsEvent = serde_json::from_str(&fixture).unwrap();
    let result = handler(&state, LambdaEvent::new(payload, Context::default())).await;
    assert!(result.is_err());
}

#[tokio::test]
async fn messages_not_started_before_the_deadline_margin_are_left_for_redelivery() {
    let tables = tables_with_one_row();
    let now = half_past_ten();
    let state = state(&tables, &MemoryWorkQueue::new(), now);
    let payload: SqsEvent = serde_json::from_str(include_str!("fixtures/sqs-batch.json")).unwrap();
    let ids: Vec<String> = payload
        .records
        .iter()
        .filter_map(|r| r.message_id.clone())
        .collect();
    // GIVEN an invocation with 20 s left, less than the margin a message may need
    let mut context = Context::default();
    context.deadline =
        u64::try_from((now + chrono::Duration::seconds(20)).timestamp_millis()).unwrap();

    let response = handler(&state, LambdaEvent::new(payload, context))
        .await
        .unwrap();

    // THEN no message was started: each is reported for redelivery, nothing counted
    let failed: Vec<String> = response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.clone())
        .collect();
    assert_eq!(failed, ids);
    assert!(tables.aggregated_records().is_empty());
}

//! The handler with a real scheduled-event fixture, over the in-memory ports.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use aws_lambda_events::eventbridge::EventBridgeEvent;
use awsmp_core::clock::ManualClock;
use awsmp_core::discover::{DiscoverPorts, DiscoverSettings};
use awsmp_core::memory::fixtures::tables_with_one_row;
use awsmp_core::memory::{MemorySubscriberStore, MemoryTables, MemoryWorkQueue, RecordingMetrics};
use awsmp_core::ports::WorkMessage;
use awsmp_core::time::{MeteringLockHours, parse_usage_timestamp};
use awsmp_discoverer::{State, handler};
use lambda_runtime::{Context, LambdaEvent};

fn state(tables: &MemoryTables, work: &MemoryWorkQueue, clock_at: &str) -> State {
    State {
        settings: Arc::new(DiscoverSettings::new(
            "prod-abc123",
            MeteringLockHours::DEFAULT,
        )),
        ports: DiscoverPorts {
            usage: Arc::new(tables.usage_store()),
            subscribers: Arc::new(MemorySubscriberStore::new()),
            work_queue: Arc::new(work.clone()),
            deprovision_queue: Arc::new(MemoryWorkQueue::new()),
            profiles: None,
            metrics: Arc::new(RecordingMetrics::new()),
            clock: Arc::new(ManualClock::new(parse_usage_timestamp(clock_at).unwrap())),
        },
    }
}

fn event(json: &str) -> LambdaEvent<EventBridgeEvent> {
    LambdaEvent::new(serde_json::from_str(json).unwrap(), Context::default())
}

#[tokio::test]
async fn now_comes_from_the_event_time_so_a_run_replays() {
    // GIVEN usage in the hour before the event's time, and a clock a day later
    let tables = tables_with_one_row();
    let work = MemoryWorkQueue::new();
    let state = state(&tables, &work, "2026-12-01T10:30:00Z");

    // WHEN the scheduled event fires (time 2026-11-30T10:30:00Z)
    let report = handler(&state, event(include_str!("fixtures/scheduled-event.json")))
        .await
        .unwrap();

    // THEN the run worked at the event's time: the row's hour is completed, not expired
    assert_eq!(report.groups, 1);
    assert_eq!(report.expired_rows, 0);
    assert!(matches!(
        &work.messages()[..],
        [WorkMessage::Aggregate { flush: false, .. }]
    ));
}

#[tokio::test]
async fn without_an_event_time_the_clock_decides() {
    let tables = tables_with_one_row();
    let work = MemoryWorkQueue::new();
    // A day later by the clock, the row has aged out.
    let state = state(&tables, &work, "2026-12-01T10:30:00Z");
    let fixture = include_str!("fixtures/scheduled-event.json")
        .replace("\"time\": \"2026-11-30T10:30:00Z\",", "");
    let report = handler(&state, event(&fixture)).await.unwrap();
    assert_eq!((report.groups, report.expired_rows), (0, 1));
}

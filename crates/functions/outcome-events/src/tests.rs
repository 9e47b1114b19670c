//! The handler on the documented stream event, against the in-memory bus.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use awsmp_core::memory::MemoryBus;
use awsmp_core::model::Attr;
use awsmp_core::ports::PortError;
use lambda_runtime::{Context, LambdaEvent};

use super::*;

fn config() -> Config {
    Config {
        usage_table: "awsmp-prod-usage-test".into(),
        aggregated_table: "awsmp-prod-aggregated-usage-test".into(),
    }
}

fn fixture() -> StreamEvent {
    let text = include_str!("../tests/fixtures/aggregated-stream-event.json");
    serde_json::from_str(text).unwrap()
}

fn state(bus: &MemoryBus) -> State {
    State {
        config: Arc::new(config()),
        bus: Arc::new(bus.clone()),
    }
}

async fn run(state: &State, event: StreamEvent) -> Vec<String> {
    handler(state, LambdaEvent::new(event, Context::default()))
        .await
        .unwrap()
        .batch_item_failures
        .into_iter()
        .map(|f| f.item_identifier.unwrap())
        .collect()
}

#[test]
fn reads_exactly_its_declared_variables() {
    let asked = std::cell::RefCell::new(Vec::new());
    let config = Config::from_lookup(&|n| {
        asked.borrow_mut().push(n.to_string());
        Some(format!("table-{n}"))
    })
    .unwrap();
    assert_eq!(config.usage_table, "table-USAGE_TABLE");
    assert_eq!(asked.into_inner(), ENV_VARS);
    let err = Config::from_lookup(&|_| None).unwrap_err();
    for name in ENV_VARS {
        assert!(
            err.to_string().contains(&format!("{name} is not set")),
            "{err}"
        );
    }
}

#[test]
fn the_table_is_read_from_the_stream_arn() {
    let arn = "arn:aws:dynamodb:us-east-1:123456789012:table/awsmp-prod-usage-test/stream/2026-12-01T00:00:00.000";
    assert_eq!(table_name_of(arn), Some("awsmp-prod-usage-test"));
    assert_eq!(config().table_of(arn), Some(Table::Usage));
    assert_eq!(table_name_of("arn:aws:sqs:us-east-1:1:queue"), None);
    assert_eq!(
        config().table_of("arn:aws:dynamodb:us-east-1:1:table/other/stream/x"),
        None
    );
}

#[test]
fn dynamodb_json_reads_as_attributes() {
    let value = serde_json::json!({"M": {"a": {"L": [{"N": "1"}, {"BOOL": false}, {"NULL": true}]}, "b": {"SS": ["x"]}, "c": {"B": "AA=="}}});
    let Attr::M(map) = dynamodb_attr(&value) else {
        panic!("not a map");
    };
    assert_eq!(
        map["a"],
        Attr::L(vec![Attr::N("1".into()), Attr::Bool(false), Attr::Null])
    );
    assert_eq!(map["b"], Attr::Ss(vec!["x".into()]));
    assert_eq!(map["c"], Attr::Other("B".into()));
}

#[test]
fn attributes_written_as_dynamodb_json_read_back_the_same() {
    let item = std::collections::BTreeMap::from([
        ("s".to_string(), Attr::S("x".into())),
        ("n".to_string(), Attr::N("-3".into())),
        ("b".to_string(), Attr::Bool(true)),
        ("z".to_string(), Attr::Null),
        (
            "m".to_string(),
            Attr::M(std::collections::BTreeMap::from([(
                "l".to_string(),
                Attr::L(vec![Attr::N("1".into()), Attr::Ss(vec!["a".into()])]),
            )])),
        ),
        ("o".to_string(), Attr::Other("B".into())),
    ]);
    let image = dynamodb_image(&item);
    assert_eq!(image["n"], serde_json::json!({"N": "-3"}));
    let back: std::collections::BTreeMap<String, Attr> = image
        .iter()
        .map(|(k, v)| (k.clone(), dynamodb_attr(v)))
        .collect();
    assert_eq!(back, item);
}

#[tokio::test]
async fn each_terminal_change_becomes_one_event() {
    let bus = MemoryBus::new();
    let failures = run(&state(&bus), fixture()).await;
    assert!(failures.is_empty(), "{failures:?}");
    let taken = bus.taken();
    assert_eq!(taken.len(), 2);
    let first: serde_json::Value = serde_json::from_str(&taken[0].detail).unwrap();
    assert_eq!(first["status"], "Success");
    assert_eq!(first["outcomeId"], "c4ca4238a0b923820dcc509a6f75849b");
    assert_eq!(
        first["meteringRecordId"],
        "6f1c2a4e-0000-4000-8000-000000000001"
    );
    let second: serde_json::Value = serde_json::from_str(&taken[1].detail).unwrap();
    assert_eq!(second["status"], "CustomerNotSubscribed");
    assert_eq!(second["billed"], false);
}

#[tokio::test]
async fn a_refused_event_is_reported_for_redelivery_and_unknown_tables_are_skipped() {
    let bus = MemoryBus::new();
    bus.refuse_next(&[1], "InternalFailure");
    let mut event = fixture();
    let mut stranger = event.records[0].clone();
    stranger.event_source_arn = "arn:aws:dynamodb:us-east-1:1:table/someone-else/stream/x".into();
    event.records.push(stranger);
    let failures = run(&state(&bus), event).await;
    assert_eq!(failures, vec!["111100000000000000000002".to_string()]);
    assert_eq!(bus.taken().len(), 1);

    bus.fail_next_put(PortError::Transient {
        operation: "PutEvents",
        message: "throttled".into(),
    });
    let failures = run(&state(&bus), fixture()).await;
    assert_eq!(failures.len(), 2);
}

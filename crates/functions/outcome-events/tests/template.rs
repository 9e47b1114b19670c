//! The template's wiring of outcome-events, held to the code: each table's stream
//! mapping filters for exactly the statuses [`Table::told_statuses`] tells (a status
//! missing there is an outcome silently never sent), reports partial batch failures
//! (else one refused event re-sends the whole batch), and the function reads the two
//! tables the mappings name.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use awsmp_core::outcomes::Table;
use awsmp_local_aws::{EventSource, StackTemplate, workspace_root};

#[test]
fn each_mapping_filters_for_exactly_the_told_statuses() {
    let template = StackTemplate::load(
        &workspace_root().join("template-main.yaml"),
        &[
            ("ProductCode", "abc"),
            ("StageName", "test"),
            ("OutcomeEvents", "enabled"),
        ],
    )
    .unwrap();
    let function = template.function("outcome-events").unwrap();
    let mut seen = Vec::new();
    for source in &function.events {
        let EventSource::DynamoDbStream {
            table,
            report_batch_item_failures,
            filters,
            ..
        } = source
        else {
            panic!("outcome-events has a source other than a stream: {source:?}");
        };
        let kind = match table.as_str() {
            "UsageTable" => Table::Usage,
            "AggregatedUsageTable" => Table::Aggregated,
            other => panic!("a stream of {other}"),
        };
        assert!(report_batch_item_failures, "{table}");
        assert_eq!(filters.len(), 1, "{table}: {filters:?}");
        let pattern: serde_json::Value = serde_json::from_str(&filters[0]).unwrap();
        let statuses: Vec<&str> = pattern["dynamodb"]["NewImage"]["meteringStatus"]["S"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap())
            .collect();
        assert_eq!(statuses, kind.told_statuses(), "{table}'s filter");
        assert_eq!(
            pattern["eventName"],
            serde_json::json!(["INSERT", "MODIFY"])
        );
        seen.push(table.clone());
    }
    seen.sort();
    assert_eq!(seen, ["AggregatedUsageTable", "UsageTable"]);
    // Without the parameter, no function and no streams.
    let off = StackTemplate::load(
        &workspace_root().join("template-main.yaml"),
        &[("ProductCode", "abc"), ("StageName", "test")],
    )
    .unwrap();
    assert!(!off.condition("CreateOutcomeEvents").unwrap());
}

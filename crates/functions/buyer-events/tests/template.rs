//! The template's wiring of buyer-events, held to the code: one stream mapping, on the
//! subscribers table, passing inserts and modifications (a change the filter drops is
//! a buyer event silently never sent), reporting partial batch failures (else one
//! refused event re-sends the whole batch); the table's stream and the function exist
//! only with `BuyerEvents=enabled`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use awsmp_local_aws::{EventSource, StackTemplate, workspace_root};

#[test]
fn one_mapping_on_the_subscribers_stream_passing_every_insert_and_modification() {
    let template = StackTemplate::load(
        &workspace_root().join("template-events.yaml"),
        &[("StageName", "test"), ("BuyerEvents", "enabled")],
    )
    .unwrap();
    let function = template.function("buyer-events").unwrap();
    assert_eq!(function.events.len(), 1, "{:?}", function.events);
    let EventSource::DynamoDbStream {
        table,
        report_batch_item_failures,
        filters,
        ..
    } = &function.events[0]
    else {
        panic!("buyer-events has a source other than a stream");
    };
    assert_eq!(table, "SubscribersTable");
    assert!(report_batch_item_failures);
    assert_eq!(filters.len(), 1, "{filters:?}");
    let pattern: serde_json::Value = serde_json::from_str(&filters[0]).unwrap();
    assert_eq!(
        pattern,
        serde_json::json!({"eventName": ["INSERT", "MODIFY"]})
    );
    // Without the parameter, no function and no stream.
    let off = StackTemplate::load(
        &workspace_root().join("template-events.yaml"),
        &[("StageName", "test")],
    )
    .unwrap();
    assert!(!off.condition("CreateBuyerEvents").unwrap());
    assert_eq!(
        off.function("buyer-events").unwrap().condition.as_deref(),
        Some("CreateBuyerEvents")
    );
}

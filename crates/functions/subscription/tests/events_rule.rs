//! The events stack's EventBridge rule and the lifecycle parser agree: the rule's
//! `detail-type` list in `template-events.yaml` is exactly the set of detail-types the
//! parser consumes (an event the parser would use but the rule drops is never
//! delivered; one the rule delivers but the parser ignores is wasted work).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use awsmp_core::lifecycle::{CONSUMED_DETAIL_TYPES, MarketplaceEvent};
use awsmp_local_aws::event_rule_detail_types;
use awsmp_local_aws::moto::workspace_root;
use serde_json::json;

#[test]
fn the_events_rule_matches_exactly_the_detail_types_the_parser_consumes() {
    let template = workspace_root().join("template-events.yaml");
    let rule = event_rule_detail_types(&template, "MarketplaceEventsRule").unwrap();
    let mut consumed: Vec<String> = CONSUMED_DETAIL_TYPES
        .iter()
        .map(|d| d.to_string())
        .collect();
    consumed.sort();
    assert_eq!(
        rule, consumed,
        "template-events.yaml MarketplaceEventsRule detail-type"
    );

    // And the parser really uses every one of them (none comes back Ignored).
    for detail_type in &rule {
        let event = json!({
            "source": "aws.agreement-marketplace",
            "detail-type": detail_type,
            "time": "2026-11-30T12:00:00Z",
            "detail": {
                "agreement": {"id": "agmt-1"},
                "acceptor": {"accountId": "111122223333"},
                "license": {"arn": "arn:aws:license-manager::123456789012:license:l-1"},
                "product": {"code": "prodcode123"}
            }
        });
        let parsed = MarketplaceEvent::from_json(&event).unwrap();
        assert!(
            !matches!(parsed, MarketplaceEvent::Ignored { .. }),
            "the rule delivers {detail_type:?} but the parser ignores it"
        );
    }
}

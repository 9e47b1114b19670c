//! Target `work_message`: the input is an SQS message body on the work or cleanup
//! queue. It is parsed as a [`WorkMessage`] as both handlers parse it, then handed, in
//! a one-message batch, to the aggregator Lambda's real handler and then to the
//! cleanup Lambda's, over in-memory tables that hold a few rows of one group (two
//! valid, one malformed) so a message naming that group does real work.
//!
//! Properties: nothing panics; a body that parses serializes back to the same message;
//! each handler answers the batch, with at most this one message as a batch item
//! failure (SQS redelivers it, then dead-letters it); no raw row is lost or duplicated.

use std::sync::Arc;

use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use awsmp_core::aggregate::ZeroQuantityPolicy;
use awsmp_core::aggregate::run::{AggregatePorts, AggregateSettings};
use awsmp_core::cleanup::CleanupPorts;
use awsmp_core::clock::ManualClock;
use awsmp_core::memory::{MemoryTables, MemoryWorkQueue, RecordingMetrics, reference_row};
use awsmp_core::ports::WorkMessage;
use awsmp_core::time::MeteringLockHours;
use lambda_runtime::{Context, LambdaEvent};

use super::{ACCOUNT, LICENSE, PRODUCT};

/// Checks one message body.
pub fn check(data: &[u8]) {
    let Ok(body) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(message) = serde_json::from_str::<WorkMessage>(body) {
        let text = serde_json::to_string(&message).expect("a work message serializes");
        let back: WorkMessage =
            serde_json::from_str(&text).expect("a serialized work message parses");
        assert_eq!(back, message, "{text}");
    }

    let tables = MemoryTables::new();
    for (timestamp, quantity) in [("2026-11-30T09:15:00Z", 4), ("2026-11-30T09:45:10Z", 0)] {
        tables.insert_raw_row(reference_row(
            LICENSE, ACCOUNT, "requests", timestamp, quantity,
        ));
    }
    tables.insert_raw_row(reference_row(
        LICENSE,
        ACCOUNT,
        "requests",
        "2026-11-30T09:5",
        1,
    ));
    let rows_before = tables.raw_rows().len();
    let clock = Arc::new(ManualClock::new(super::now()));

    let aggregator = awsmp_aggregator::State {
        settings: Arc::new(AggregateSettings {
            product_code: PRODUCT.into(),
            lock: MeteringLockHours::DEFAULT,
            zero_policy: ZeroQuantityPolicy::Defer,
            retention: awsmp_core::retention::Retention::FOREVER,
        }),
        ports: AggregatePorts {
            usage: Arc::new(tables.usage_store()),
            aggregated: Arc::new(tables.aggregated_store()),
            cleanup_queue: Arc::new(MemoryWorkQueue::new()),
            clock: clock.clone(),
        },
    };
    let response = super::block_on(awsmp_aggregator::handler(&aggregator, batch(body)))
        .expect("a batch whose message has an id is answered");
    check_response(&response);

    let cleanup = awsmp_cleanup::State {
        ports: CleanupPorts {
            usage: Arc::new(tables.usage_store()),
            metrics: Arc::new(RecordingMetrics::default()),
            clock,
        },
        retention: awsmp_core::retention::Retention::FOREVER,
    };
    let response = super::block_on(awsmp_cleanup::handler(&cleanup, batch(body)))
        .expect("a batch whose message has an id is answered");
    check_response(&response);

    assert_eq!(
        tables.raw_rows().len(),
        rows_before,
        "raw rows appeared or vanished"
    );
}

fn batch(body: &str) -> LambdaEvent<SqsEvent> {
    let mut message = SqsMessage::default();
    message.message_id = Some("m-1".into());
    message.body = Some(body.to_string());
    let mut event = SqsEvent::default();
    event.records = vec![message];
    LambdaEvent::new(event, Context::default())
}

fn check_response(response: &SqsBatchResponse) {
    assert!(
        response.batch_item_failures.len() <= 1
            && response
                .batch_item_failures
                .iter()
                .all(|f| f.item_identifier == "m-1"),
        "{response:?}"
    );
}

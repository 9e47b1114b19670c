//! Lambda events as AWS delivers them: an EventBridge scheduled event and an SQS
//! batch, built from the documented JSON shapes (not from struct literals) so the
//! handlers are exercised with what the runtime really deserializes.

use aws_lambda_events::eventbridge::EventBridgeEvent;
use aws_lambda_events::sqs::SqsEvent;
use awsmp_core::time::Instant;
use lambda_runtime::{Context, LambdaEvent};
use serde_json::json;

use crate::HarnessError;

/// Account id the fake event sources use.
pub const EVENT_ACCOUNT: &str = "123456789012";

/// The `Scheduled Event` EventBridge sends for a `rate(...)` rule firing at `time`.
pub fn scheduled_event(
    rule: &str,
    time: Instant,
) -> Result<LambdaEvent<EventBridgeEvent>, HarnessError> {
    let payload = awsmp_local_aws::scheduled_event(EVENT_ACCOUNT, "us-east-1", rule, time);
    let event = serde_json::from_value(payload).map_err(|e| HarnessError::Event(e.to_string()))?;
    Ok(LambdaEvent::new(event, Context::default()))
}

/// One received SQS message, as the harness hands it to a handler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivered {
    /// `messageId`.
    pub message_id: String,
    /// `receiptHandle`.
    pub receipt_handle: String,
    /// The body.
    pub body: String,
}

/// The SQS event the Lambda event-source mapping delivers for `messages` of `queue`.
pub fn sqs_event(
    queue: &str,
    messages: &[Delivered],
) -> Result<LambdaEvent<SqsEvent>, HarnessError> {
    let records: Vec<serde_json::Value> = messages
        .iter()
        .map(|m| {
            json!({
                "messageId": m.message_id,
                "receiptHandle": m.receipt_handle,
                "body": m.body,
                "attributes": {
                    "ApproximateReceiveCount": "1",
                    "SentTimestamp": "1764497742000",
                    "SenderId": EVENT_ACCOUNT,
                    "ApproximateFirstReceiveTimestamp": "1764497742001"
                },
                "messageAttributes": {},
                "md5OfBody": "",
                "eventSource": "aws:sqs",
                "eventSourceARN": format!("arn:aws:sqs:us-east-1:{EVENT_ACCOUNT}:{queue}"),
                "awsRegion": "us-east-1"
            })
        })
        .collect();
    let event = serde_json::from_value(json!({ "Records": records }))
        .map_err(|e| HarnessError::Event(e.to_string()))?;
    Ok(LambdaEvent::new(event, Context::default()))
}

//! Lambda events as AWS delivers them: an EventBridge scheduled event and an SQS
//! batch, built from the documented JSON shapes (not from struct literals) so the
//! handlers are exercised with what the runtime really deserializes.

use std::collections::BTreeMap;

use aws_lambda_events::eventbridge::EventBridgeEvent;
use aws_lambda_events::sqs::SqsEvent;
use awsmp_core::time::Instant;
use awsmp_local_aws::SqsRecord;
use lambda_runtime::{Context, LambdaEvent};

use crate::HarnessError;

/// Account id the fake event sources use.
pub const EVENT_ACCOUNT: &str = "123456789012";

/// The ARN of the queue `name` in `region`, in the account of the fake event sources.
pub fn queue_arn(region: &str, name: &str) -> String {
    format!("arn:aws:sqs:{region}:{EVENT_ACCOUNT}:{name}")
}

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

/// The SQS event the Lambda event-source mapping delivers for `messages` of the queue
/// `queue_arn`.
pub fn sqs_event(
    queue_arn: &str,
    messages: &[Delivered],
) -> Result<LambdaEvent<SqsEvent>, HarnessError> {
    let records: Vec<SqsRecord> = messages
        .iter()
        .map(|m| SqsRecord {
            message_id: m.message_id.clone(),
            receipt_handle: m.receipt_handle.clone(),
            body: m.body.clone(),
            md5_of_body: String::new(),
            attributes: BTreeMap::from(
                [
                    ("ApproximateReceiveCount", "1"),
                    ("SentTimestamp", "1764497742000"),
                    ("SenderId", EVENT_ACCOUNT),
                    ("ApproximateFirstReceiveTimestamp", "1764497742001"),
                ]
                .map(|(k, v)| (k.to_string(), v.to_string())),
            ),
        })
        .collect();
    let payload = awsmp_local_aws::sqs_event(queue_arn, &records);
    let event = serde_json::from_value(payload).map_err(|e| HarnessError::Event(e.to_string()))?;
    Ok(LambdaEvent::new(event, Context::default()))
}

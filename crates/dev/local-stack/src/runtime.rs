//! The local Lambda runtime: invokes handlers the way the templates wire them, with
//! SQS event-source mappings (batch size, partial batch failures, redelivery through
//! the queue's own visibility timeout and redrive) and schedules on a virtual clock;
//! stream mappings are [`crate::streams`].

use std::time::Duration;

use async_trait::async_trait;
use aws_lambda_events::event::apigw::{ApiGatewayProxyRequest, ApiGatewayProxyResponse};
use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use aws_sdk_sqs::types::{DeleteMessageBatchRequestEntry, MessageSystemAttributeName};
use awsmp_core::ports::Clock;
use awsmp_core::time::Instant;
use awsmp_local_aws::SqsRecord;
use lambda_runtime::{Context, LambdaEvent};

use crate::LocalError;

/// A handler the local runtime can invoke.
#[async_trait]
pub trait LocalFunction: Send + Sync {
    /// The binary (function) name.
    fn name(&self) -> &str;
    /// Handles an SQS batch; returns the partial batch failures.
    async fn sqs(&self, _event: LambdaEvent<SqsEvent>) -> Result<SqsBatchResponse, LocalError> {
        Err(LocalError::Wiring(format!(
            "{} takes no SQS events",
            self.name()
        )))
    }
    /// Handles an API Gateway proxy request.
    async fn api(
        &self,
        _request: ApiGatewayProxyRequest,
    ) -> Result<ApiGatewayProxyResponse, LocalError> {
        Err(LocalError::Wiring(format!(
            "{} takes no API requests",
            self.name()
        )))
    }
    /// Handles a batch of DynamoDB stream records (the event as JSON); returns the
    /// partial batch response as JSON.
    async fn stream(
        &self,
        _event: LambdaEvent<serde_json::Value>,
    ) -> Result<serde_json::Value, LocalError> {
        Err(LocalError::Wiring(format!(
            "{} takes no stream records",
            self.name()
        )))
    }
    /// Handles a scheduled event at virtual time `time`.
    async fn scheduled(&self, _event: LambdaEvent<serde_json::Value>) -> Result<(), LocalError> {
        Err(LocalError::Wiring(format!(
            "{} takes no scheduled events",
            self.name()
        )))
    }
}

/// A Lambda context with a deadline `timeout` after `now`, the stack's clock (the
/// handler's budget reads the same clock).
pub fn context(function: &str, timeout: Duration, now: Instant) -> Context {
    let mut ctx = Context::default();
    ctx.request_id = format!("local-{function}-{}", chrono::Utc::now().timestamp_micros());
    ctx.deadline = u64::try_from(
        (now + chrono::Duration::from_std(timeout).unwrap_or_default()).timestamp_millis(),
    )
    .unwrap_or(0);
    ctx.invoked_function_arn = format!(
        "arn:aws:lambda:{}:{}:function:{function}",
        crate::resources::LOCAL_REGION,
        crate::resources::LOCAL_ACCOUNT
    );
    ctx
}

/// The EventBridge scheduled event EventBridge sends at `time`, in the local account
/// and Region.
pub fn scheduled_event(rule: &str, time: Instant) -> serde_json::Value {
    awsmp_local_aws::scheduled_event(
        crate::resources::LOCAL_ACCOUNT,
        crate::resources::LOCAL_REGION,
        rule,
        time,
    )
}

/// What one poll of an event-source mapping did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PollStats {
    /// Messages handed to the function.
    pub received: usize,
    /// Messages the function reported as failed (left for redelivery).
    pub failed: usize,
}

/// One SQS event-source mapping: a queue feeding a function.
pub struct SqsMapping<'a> {
    /// The SQS client.
    pub sqs: &'a aws_sdk_sqs::Client,
    /// Queue URL.
    pub queue_url: String,
    /// Queue ARN (`eventSourceARN` of each record).
    pub queue_arn: String,
    /// Batch size from the template.
    pub batch_size: u32,
    /// Whether the template asks for partial batch failures.
    pub report_batch_item_failures: bool,
    /// Function timeout.
    pub timeout: Duration,
    /// The stack's clock (each invocation's deadline).
    pub clock: &'a crate::clock::LocalClock,
}

impl SqsMapping<'_> {
    /// Receives one batch and invokes the function, deleting what succeeded. Failed
    /// messages stay on the queue and come back after the visibility timeout, then go
    /// to the DLQ after the redrive count, exactly as with a real mapping.
    pub async fn poll_once(&self, function: &dyn LocalFunction) -> Result<PollStats, LocalError> {
        let out = self
            .sqs
            .receive_message()
            .queue_url(&self.queue_url)
            .max_number_of_messages(self.batch_size.clamp(1, 10) as i32)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .send()
            .await
            .map_err(|e| LocalError::Aws(format!("ReceiveMessage {}: {e}", self.queue_url)))?;
        let messages = out.messages.unwrap_or_default();
        if messages.is_empty() {
            return Ok(PollStats::default());
        }
        let records: Vec<SqsRecord> = messages
            .iter()
            .map(|m| SqsRecord {
                message_id: m.message_id.clone().unwrap_or_default(),
                receipt_handle: m.receipt_handle.clone().unwrap_or_default(),
                body: m.body.clone().unwrap_or_default(),
                md5_of_body: m.md5_of_body.clone().unwrap_or_default(),
                attributes: m
                    .attributes
                    .iter()
                    .flatten()
                    .map(|(k, v)| (k.as_str().to_string(), v.clone()))
                    .collect(),
            })
            .collect();
        let event: SqsEvent =
            serde_json::from_value(awsmp_local_aws::sqs_event(&self.queue_arn, &records)).map_err(
                |e| LocalError::Wiring(format!("SQS event for {}: {e}", self.queue_arn)),
            )?;
        let result = function
            .sqs(LambdaEvent::new(
                event,
                context(function.name(), self.timeout, self.clock.now()),
            ))
            .await;
        let failed_ids: Vec<String> = match result {
            Ok(response) if self.report_batch_item_failures => response
                .batch_item_failures
                .into_iter()
                .map(|f| f.item_identifier)
                .collect(),
            Ok(_) => Vec::new(),
            Err(e) => {
                tracing::warn!(function = function.name(), error = %e, "invocation failed; the whole batch will be redelivered");
                messages
                    .iter()
                    .filter_map(|m| m.message_id.clone())
                    .collect()
            }
        };
        let delete: Vec<DeleteMessageBatchRequestEntry> = messages
            .iter()
            .filter(|m| {
                m.message_id
                    .as_ref()
                    .is_some_and(|id| !failed_ids.contains(id))
            })
            .enumerate()
            .filter_map(|(i, m)| {
                DeleteMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .receipt_handle(m.receipt_handle.clone()?)
                    .build()
                    .ok()
            })
            .collect();
        if !delete.is_empty() {
            self.sqs
                .delete_message_batch()
                .queue_url(&self.queue_url)
                .set_entries(Some(delete))
                .send()
                .await
                .map_err(|e| LocalError::Aws(format!("DeleteMessageBatch: {e}")))?;
        }
        Ok(PollStats {
            received: messages.len(),
            failed: failed_ids.len(),
        })
    }
}

/// Messages visible plus in flight on a queue.
pub async fn queue_depth(sqs: &aws_sdk_sqs::Client, url: &str) -> Result<u64, LocalError> {
    use aws_sdk_sqs::types::QueueAttributeName as A;
    let out = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(A::ApproximateNumberOfMessages)
        .attribute_names(A::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await
        .map_err(|e| LocalError::Aws(format!("GetQueueAttributes {url}: {e}")))?;
    let attrs = out.attributes.unwrap_or_default();
    let get = |k: A| {
        attrs
            .get(&k)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Ok(get(A::ApproximateNumberOfMessages) + get(A::ApproximateNumberOfMessagesNotVisible))
}

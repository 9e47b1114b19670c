//! The SQS partial-batch loop every SQS-triggered function runs: each message handled
//! on its own, each failure reported by message id in `batchItemFailures` (the
//! template sets `FunctionResponseTypes: [ReportBatchItemFailures]`), so SQS redelivers
//! only those, then dead-letters them after the redrive count.
//!
//! A message without an id: every record's `messageId` is checked first, before any
//! message is handled. A record whose id is missing or empty could not be reported on
//! its own, so the whole invocation fails ([`BatchError::MessageWithoutId`]) and SQS
//! redelivers the whole batch, with nothing of it handled: nothing is lost, and nothing
//! is handled twice because of it.

use std::future::Future;

use aws_lambda_events::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent};
use lambda_runtime::Diagnostic;

use super::{FunctionError, diagnostic};

/// Why one message was not handled now: reported by id, so SQS redelivers it.
pub trait MessageFailure: std::fmt::Display {
    /// Logs the failure, once, at the level its cause deserves (the loop logs nothing
    /// else about it). By default a warning.
    fn log(&self, message_id: &str) {
        tracing::warn!(message_id, error = %self, "message failed; SQS will redeliver it");
    }
}

/// A failure of the whole batch (SQS redelivers every message of it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    /// A record without a `messageId` (or with an empty one) cannot be reported
    /// individually, so the batch fails before any message is handled.
    #[error("SQS record {index} has no messageId; the whole batch is retried")]
    MessageWithoutId {
        /// Position of the record in the batch.
        index: usize,
    },
}

impl FunctionError for BatchError {
    fn error_type(&self) -> &'static str {
        match self {
            BatchError::MessageWithoutId { .. } => "SqsMessageWithoutId",
        }
    }
}

impl From<BatchError> for Diagnostic {
    fn from(error: BatchError) -> Diagnostic {
        diagnostic(&error)
    }
}

/// Runs `handle(message_id, body)` on every message of `event`, in order, and answers
/// the batch: every message whose `handle` failed is in `batch_item_failures` (its
/// failure logged through [`MessageFailure::log`]); the others are deleted by SQS.
///
/// Fails, before handling any message, when a record has no `messageId` (see the
/// module docs).
pub async fn sqs_batch<'a, E, F, Fut>(
    event: &'a SqsEvent,
    mut handle: F,
) -> Result<SqsBatchResponse, BatchError>
where
    E: MessageFailure,
    F: FnMut(&'a str, Option<&'a str>) -> Fut,
    Fut: Future<Output = Result<(), E>>,
{
    let mut ids = Vec::with_capacity(event.records.len());
    for (index, record) in event.records.iter().enumerate() {
        match record.message_id.as_deref() {
            Some(id) if !id.is_empty() => ids.push(id),
            _ => return Err(BatchError::MessageWithoutId { index }),
        }
    }
    let mut response = SqsBatchResponse::default();
    for (record, id) in event.records.iter().zip(ids) {
        if let Err(failure) = handle(id, record.body.as_deref()).await {
            failure.log(id);
            let mut item = BatchItemFailure::default();
            item.item_identifier = id.to_string();
            response.batch_item_failures.push(item);
        }
    }
    Ok(response)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use aws_lambda_events::sqs::SqsMessage;

    #[derive(Debug, thiserror::Error)]
    #[error("refused {0}")]
    struct Refused(String);

    impl MessageFailure for Refused {}

    fn event(messages: &[(Option<&str>, &str)]) -> SqsEvent {
        let mut event = SqsEvent::default();
        event.records = messages
            .iter()
            .map(|(id, body)| {
                let mut message = SqsMessage::default();
                message.message_id = id.map(str::to_string);
                message.body = Some((*body).to_string());
                message
            })
            .collect();
        event
    }

    #[tokio::test]
    async fn only_the_failed_messages_are_reported_in_order() {
        let event = event(&[(Some("a"), "ok"), (Some("b"), "bad"), (Some("c"), "bad")]);
        let mut seen = Vec::new();
        let response = sqs_batch(&event, |id, body| {
            seen.push(id);
            async move {
                match body {
                    Some("ok") => Ok(()),
                    _ => Err(Refused(id.to_string())),
                }
            }
        })
        .await
        .unwrap();
        assert_eq!(seen, ["a", "b", "c"]);
        let failed: Vec<&str> = response
            .batch_item_failures
            .iter()
            .map(|f| f.item_identifier.as_str())
            .collect();
        assert_eq!(failed, ["b", "c"]);
    }

    #[tokio::test]
    async fn a_message_without_an_id_fails_the_batch_before_any_is_handled() {
        for missing in [None, Some("")] {
            let event = event(&[(Some("a"), "ok"), (missing, "ok"), (Some("c"), "ok")]);
            let mut handled = 0;
            let error = sqs_batch(&event, |_, _| {
                handled += 1;
                async { Ok::<(), Refused>(()) }
            })
            .await
            .unwrap_err();
            assert_eq!(error, BatchError::MessageWithoutId { index: 1 });
            assert_eq!(handled, 0);
            assert_eq!(Diagnostic::from(error).error_type, "SqsMessageWithoutId");
        }
    }

    #[tokio::test]
    async fn an_empty_batch_is_answered_with_no_failure() {
        let response = sqs_batch(&SqsEvent::default(), |_, _| async { Ok::<(), Refused>(()) })
            .await
            .unwrap();
        assert!(response.batch_item_failures.is_empty());
    }
}

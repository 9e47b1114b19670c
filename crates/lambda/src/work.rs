//! The loop of the functions fed work messages over SQS (aggregator, cleanup): each
//! record's body read as a [`WorkMessage`] and handled at its own "now", inside the
//! invocation's [`Budget`]; each failure typed ([`MessageError`]) and logged once.

use std::future::Future;

use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent};
use awsmp_core::pipeline::budget::Budget;
use awsmp_core::pipeline::error::PipelineError;
use awsmp_core::ports::{Clock, WorkMessage};
use awsmp_core::time::Instant;
use tracing::{error, info, warn};

use super::{BatchError, MessageFailure, message_now, sqs_batch};
use awsmp_aws::message::{WorkMessageError, parse_work_message};

/// Why one work message was not handled now (reported by id; SQS redelivers it).
#[derive(Debug, thiserror::Error)]
pub enum MessageError {
    /// Too little time was left before the invocation deadline to start it.
    #[error("deadline near; message left for redelivery")]
    DeadlineNear,
    /// The SQS record has no body.
    #[error("empty message body")]
    MissingBody,
    /// The body is not a work message.
    #[error("malformed work message: {0}")]
    Malformed(#[from] WorkMessageError),
    /// The use case failed (store failure after its retries, record in flight,
    /// contention, wrong kind of message, refused cleanup).
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
}

impl MessageFailure for MessageError {
    /// A message left for the deadline is a warning, a record in flight at the
    /// submitter is expected (info), anything else an error.
    fn log(&self, message_id: &str) {
        match self {
            MessageError::DeadlineNear => {
                warn!(message_id, "deadline near; message left for redelivery");
            }
            MessageError::Pipeline(PipelineError::RecordInFlight { .. }) => {
                info!(message_id, error = %self, "record in flight; SQS will redeliver the message later");
            }
            MessageError::MissingBody | MessageError::Malformed(_) | MessageError::Pipeline(_) => {
                error!(message_id, error = %self, "work message failed; SQS will redeliver it");
            }
        }
    }
}

/// Runs `handle(message, now)` on every work message of `event` ([`sqs_batch`]): a
/// message not started before `budget` runs out, one without a body and one that is
/// not a work message fail alone, as does every one whose `handle` fails; "now" is
/// [`message_now`] on `clock`, taken when the message is read.
pub async fn work_batch<F, Fut>(
    event: &SqsEvent,
    clock: &dyn Clock,
    budget: Budget,
    handle: F,
) -> Result<SqsBatchResponse, BatchError>
where
    F: Fn(WorkMessage, Instant) -> Fut,
    Fut: Future<Output = Result<(), PipelineError>>,
{
    let handle = &handle;
    sqs_batch(event, |_, body| async move {
        if budget.exhausted(clock) {
            return Err(MessageError::DeadlineNear);
        }
        let message = parse_work_message(body.ok_or(MessageError::MissingBody)?)?;
        handle(message, message_now(clock)).await?;
        Ok(())
    })
    .await
}

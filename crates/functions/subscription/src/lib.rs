//! The subscription Lambda (events stack, us-east-1): reads AWS Marketplace
//! EventBridge events from SQS and applies each to the PII-free subscribers table
//! through the use case [`awsmp_core::lifecycle::subscription`] (parse, find the row(s),
//! apply the order-safe transition, write at the version read).
//!
//! A message that cannot be handled now (malformed, a store failure, an Ended whose
//! License Updated has not arrived yet) is reported in `batchItemFailures`, so SQS
//! redelivers it and moves it to the DLQ after the redrive count; the other messages of
//! the batch are unaffected. Malformed events are detected before any write, so they
//! never write anything.

pub mod error;

use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent};
use awsmp_lambda::{BatchError, sqs_batch};
use lambda_runtime::LambdaEvent;

pub use awsmp_core::lifecycle::subscription::{
    EventError, EventOutcome, MAX_WRITE_ATTEMPTS, apply_event,
};
/// The function's settings (`SUBSCRIBERS_TABLE`), its state (the table and the clock)
/// and the variables its template sets: those of every subscribers-table function.
pub use awsmp_lambda::{
    SUBSCRIBERS_TABLE_ENV_VARS as ENV_VARS, SubscribersTableConfig as Config,
    SubscribersTableState as State,
};
pub use error::Failure;

/// The Lambda entry point: one SQS batch in, the ids of the messages to retry out.
///
/// Fails as a whole only when a record has no `messageId` (it could not be reported
/// individually); that check happens before any message is handled ([`sqs_batch`]).
pub async fn handler(
    state: &State,
    event: LambdaEvent<SqsEvent>,
) -> Result<SqsBatchResponse, BatchError> {
    sqs_batch(&event.payload, |message_id, body| async move {
        let outcome = handle_message(state, message_id, body)
            .await
            .map_err(Failure)?;
        tracing::debug!(message_id, ?outcome, "message handled");
        Ok::<(), Failure>(())
    })
    .await
}

/// Handles one message body (an EventBridge event as JSON): the use case
/// [`apply_event`] over this function's table and clock.
pub async fn handle_message(
    state: &State,
    message_id: &str,
    body: Option<&str>,
) -> Result<EventOutcome, EventError> {
    apply_event(
        state.subscribers.as_ref(),
        state.clock.as_ref(),
        message_id,
        body,
    )
    .await
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests;

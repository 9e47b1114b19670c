//! The subscription Lambda (events stack, us-east-1): reads AWS Marketplace
//! EventBridge events from SQS and applies each to the PII-free subscribers table
//! through the use case [`awsmp_core::pipeline::subscription`] (parse, find the row(s),
//! apply the order-safe transition, write at the version read).
//!
//! A message that cannot be handled now (malformed, a store failure, an Ended whose
//! License Updated has not arrived yet) is reported in `batchItemFailures`, so SQS
//! redelivers it and moves it to the DLQ after the redrive count; the other messages of
//! the batch are unaffected. Malformed events are detected before any write, so they
//! never write anything.

pub mod error;

use std::sync::Arc;

use aws_config::SdkConfig;
use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent};
use awsmp_aws::lambda::{BatchError, ConfigError, EnvReader, process_env, sqs_batch};
use awsmp_core::ports::{Clock, SubscriberStore};
use lambda_runtime::LambdaEvent;

pub use awsmp_core::pipeline::subscription::{
    EventError, EventOutcome, MAX_WRITE_ATTEMPTS, apply_event,
};
pub use error::Failure;

/// Every variable the template sets for this function.
pub const ENV_VARS: &[&str] = &["SUBSCRIBERS_TABLE"];

/// The subscription function's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `SUBSCRIBERS_TABLE`: the subscribers table.
    pub subscribers_table: String,
}

impl Config {
    /// Reads the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(&process_env)
    }

    /// Reads through `lookup` (tests pass a map).
    pub fn from_lookup(lookup: &dyn Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let mut env = EnvReader::new(lookup);
        let subscribers_table = env.required("SUBSCRIBERS_TABLE");
        env.finish(Config { subscribers_table })
    }
}

/// The handler's dependencies, built once per process.
#[derive(Clone)]
pub struct State {
    /// Settings.
    pub config: Arc<Config>,
    /// The subscribers table.
    pub subscribers: Arc<dyn SubscriberStore>,
    /// Time, for the audit stamps.
    pub clock: Arc<dyn Clock>,
}

impl State {
    /// Builds the AWS clients once, on `sdk`, for `config`: the DynamoDB adapter.
    pub fn connect(sdk: &SdkConfig, config: &Config) -> Self {
        State {
            subscribers: Arc::new(awsmp_aws::DynamoSubscriberStore::new(
                aws_sdk_dynamodb::Client::new(sdk),
                &config.subscribers_table,
            )),
            clock: Arc::new(awsmp_aws::SystemClock),
            config: Arc::new(config.clone()),
        }
    }
}

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

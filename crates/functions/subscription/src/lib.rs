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

use std::sync::Arc;

use aws_config::SdkConfig;
use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent};
use awsmp_core::config::ConfigError;
use awsmp_core::lifecycle::MarketplaceEvent;
use awsmp_core::lifecycle::reconcile::ReconcilePorts;
use awsmp_core::ports::{AgreementApi, Clock, SubscriberStore};
use awsmp_lambda::{BatchError, EnvReader, sqs_batch};
use lambda_runtime::LambdaEvent;

pub use awsmp_core::lifecycle::reconcile::rate_cards::keep_after_event;
pub use awsmp_core::lifecycle::subscription::{
    EventError, EventOutcome, MAX_WRITE_ATTEMPTS, apply_event,
};
pub use error::Failure;

/// Every variable the template sets for it.
pub const ENV_VARS: &[&str] = &["SUBSCRIBERS_TABLE", "RATE_CARDS"];

/// The function's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `SUBSCRIBERS_TABLE`.
    pub subscribers_table: String,
    /// `RATE_CARDS`: `enabled` (read each activated or amended agreement's terms) or
    /// `disabled`.
    pub rate_cards: bool,
}

impl Config {
    /// Reads through `lookup` (the process environment in Lambda; tests pass a map).
    pub fn from_lookup(lookup: &dyn Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let mut env = EnvReader::new(lookup);
        let subscribers_table = env.subscribers_table();
        let rate_cards = match env.required("RATE_CARDS").as_str() {
            "enabled" => true,
            "disabled" | "" => false,
            other => {
                env.problem(format!(
                    "RATE_CARDS must be enabled or disabled, not {other:?}"
                ));
                false
            }
        };
        env.finish(Config {
            subscribers_table,
            rate_cards,
        })
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
    /// The Agreement API (us-east-1), with `RATE_CARDS=enabled` only.
    pub agreements: Option<Arc<dyn AgreementApi>>,
}

impl State {
    /// Builds the AWS clients once, on `sdk`: DynamoDB, and the Agreement API when
    /// rate cards are read.
    pub fn connect(sdk: &SdkConfig, config: &Config) -> Self {
        State {
            subscribers: Arc::new(awsmp_aws::DynamoSubscriberStore::new(
                aws_sdk_dynamodb::Client::new(sdk),
                &config.subscribers_table,
            )),
            clock: Arc::new(awsmp_aws::SystemClock),
            agreements: config.rate_cards.then(|| {
                Arc::new(awsmp_aws::SdkAgreementApi::new(
                    awsmp_aws::agreement_client(sdk),
                )) as Arc<dyn AgreementApi>
            }),
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
/// [`apply_event`] over this function's table and clock, then (with rate cards on) the
/// cards it calls for.
pub async fn handle_message(
    state: &State,
    message_id: &str,
    body: Option<&str>,
) -> Result<EventOutcome, EventError> {
    let outcome = apply_event(
        state.subscribers.as_ref(),
        state.clock.as_ref(),
        message_id,
        body,
    )
    .await?;
    if let (Some(agreements), Some(body)) = (&state.agreements, body) {
        keep_cards(state, agreements.as_ref(), message_id, body).await;
    }
    Ok(outcome)
}

/// Keeps the rate cards the applied event calls for; a card not kept is logged for the
/// reconciliation, never a failure of the message.
async fn keep_cards(state: &State, agreements: &dyn AgreementApi, message_id: &str, body: &str) {
    // Parsed once already by `apply_event`, so this cannot fail.
    let Ok(event) = MarketplaceEvent::from_json_str(body) else {
        return;
    };
    let ports = ReconcilePorts {
        agreements,
        subscribers: state.subscribers.as_ref(),
        clock: state.clock.as_ref(),
    };
    let done = keep_after_event(ports, &event).await;
    for (license, error) in &done.failed {
        tracing::warn!(
            message_id,
            license = %license,
            error = %error,
            "rate card not read after the event; the agreement reconciliation reads it"
        );
    }
    if done.kept > 0 {
        tracing::info!(message_id, kept = done.kept, "rate cards kept");
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests;

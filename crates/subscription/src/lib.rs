//! The subscription Lambda (events stack, us-east-1): reads AWS Marketplace
//! EventBridge events from SQS and applies them to the PII-free subscribers table with
//! the order-safe rules of [`awsmp_core::lifecycle`].
//!
//! Per message: parse, find the row(s) (license events by key, agreement events through
//! the agreement index), apply the transition, and write it with `put_lifecycle` at the
//! version read, re-reading and re-applying on a version conflict. A message that cannot
//! be handled now (malformed, a store failure, an Ended whose License Updated has not
//! arrived yet) is reported in `batchItemFailures`, so SQS redelivers it and moves it to
//! the DLQ after the redrive count; the other messages of the batch are unaffected.
//! Malformed events are detected before any write, so they never write anything.

pub mod error;

use std::sync::Arc;

use aws_config::SdkConfig;
use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent};
use awsmp_aws::lambda::{BatchError, ConfigError, EnvReader, message_now, process_env, sqs_batch};
use awsmp_core::lifecycle::{EventTarget, MarketplaceEvent, Transition, apply};
use awsmp_core::model::Subscriber;
use awsmp_core::ports::{Clock, SubscriberStore};
use lambda_runtime::LambdaEvent;

pub use error::MessageError;

/// Every variable the template sets for this function.
pub const ENV_VARS: &[&str] = &["SUBSCRIBERS_TABLE"];

/// Most write attempts per row when concurrent writers keep moving its version.
pub const MAX_WRITE_ATTEMPTS: usize = 5;

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

/// What handling one message did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MessageOutcome {
    /// Rows written (one for license events; every matching row for agreement events).
    Written(usize),
    /// Nothing to write: a duplicate, a stale event, or an event that changes nothing.
    Unchanged,
    /// The event would have reactivated a license or agreement; refused and logged.
    ReactivationRefused,
    /// No row matches the event (and waiting would not help); acknowledged.
    NoMatchingRow,
    /// A detail-type the lifecycle does not use (`Purchase Agreement Created - *`, ...).
    Ignored,
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
        let outcome = handle_message(state, message_id, body).await?;
        tracing::debug!(message_id, ?outcome, "message handled");
        Ok::<(), MessageError>(())
    })
    .await
}

/// Handles one message body (an EventBridge event as JSON).
pub async fn handle_message(
    state: &State,
    message_id: &str,
    body: Option<&str>,
) -> Result<MessageOutcome, MessageError> {
    let body = body.ok_or(MessageError::MissingBody)?;
    let event = MarketplaceEvent::from_json_str(body)?;
    match event.target() {
        EventTarget::Nothing => {
            tracing::debug!(
                message_id,
                detail_type = event.name(),
                "event type not used by the subscriber lifecycle: acknowledged"
            );
            Ok(MessageOutcome::Ignored)
        }
        EventTarget::Row {
            license_arn,
            account,
        } => {
            let current = state.subscribers.get(license_arn, account).await?;
            apply_to_row(state, message_id, &event, license_arn, account, current).await
        }
        EventTarget::Agreement { agreement_id } => {
            apply_to_agreement(state, message_id, &event, agreement_id).await
        }
    }
}

async fn apply_to_agreement(
    state: &State,
    message_id: &str,
    event: &MarketplaceEvent,
    agreement_id: &str,
) -> Result<MessageOutcome, MessageError> {
    let rows = state.subscribers.by_agreement(agreement_id).await?;
    if rows.is_empty() {
        return match event {
            // Ending must not be lost: the License Updated that creates the row may still
            // be on its way, so let SQS redeliver (and, if it never comes, dead-letter it).
            MarketplaceEvent::AgreementEnded { .. } => Err(MessageError::AwaitingLicense {
                agreement_id: agreement_id.to_string(),
            }),
            // An amendment carries no state the later License Updated would not set.
            _ => {
                tracing::info!(
                    message_id,
                    agreement = agreement_id,
                    event = event.name(),
                    "no subscriber row for this agreement: nothing to keep current"
                );
                Ok(MessageOutcome::NoMatchingRow)
            }
        };
    }
    let mut written = 0;
    let mut combined = MessageOutcome::NoMatchingRow;
    for row in rows {
        let license = row.license_arn.clone();
        let account = row.customer_aws_account_id.clone();
        let outcome = apply_to_row(state, message_id, event, &license, &account, Some(row)).await?;
        combined = match (&combined, &outcome) {
            (_, MessageOutcome::Written(n)) => {
                written += n;
                MessageOutcome::Written(written)
            }
            (MessageOutcome::Written(_), _) => combined,
            (MessageOutcome::NoMatchingRow, other) => other.clone(),
            _ => combined,
        };
    }
    if combined == MessageOutcome::NoMatchingRow {
        tracing::warn!(
            message_id,
            agreement = agreement_id,
            event = event.name(),
            "the agreement's rows belong to another buyer account than the event: acknowledged"
        );
    }
    Ok(combined)
}

/// Applies `event` to one row, starting from `current` (as read), and writes the result
/// at the version read; on a version conflict re-reads and re-applies.
async fn apply_to_row(
    state: &State,
    message_id: &str,
    event: &MarketplaceEvent,
    license_arn: &str,
    account: &str,
    mut current: Option<Subscriber>,
) -> Result<MessageOutcome, MessageError> {
    for attempt in 1..=MAX_WRITE_ATTEMPTS {
        match apply(current.as_ref(), event) {
            Transition::Write { row, reason } => {
                let now = message_now(state.clock.as_ref());
                if state.subscribers.put_lifecycle(&row, now).await? {
                    tracing::info!(
                        message_id,
                        license = license_arn,
                        account,
                        event = event.name(),
                        agreement_status = row.agreement_status.map(|s| s.as_str()),
                        subscription_status = row.subscription_status.map(|s| s.as_str()),
                        reason,
                        "subscriber row updated"
                    );
                    return Ok(MessageOutcome::Written(1));
                }
                tracing::debug!(
                    message_id,
                    license = license_arn,
                    account,
                    attempt,
                    "version conflict: re-reading the row"
                );
                current = state.subscribers.get(license_arn, account).await?;
            }
            Transition::Unchanged { reason } => {
                tracing::info!(
                    message_id,
                    license = license_arn,
                    account,
                    event = event.name(),
                    reason,
                    "subscriber row unchanged"
                );
                return Ok(MessageOutcome::Unchanged);
            }
            Transition::ReactivationRefused { reason } => {
                tracing::warn!(
                    message_id,
                    license = license_arn,
                    account,
                    event = event.name(),
                    reason,
                    "reactivation refused"
                );
                return Ok(MessageOutcome::ReactivationRefused);
            }
            Transition::NoMatchingRow { reason } => {
                tracing::info!(
                    message_id,
                    license = license_arn,
                    account,
                    event = event.name(),
                    reason,
                    "event does not apply to this row"
                );
                return Ok(MessageOutcome::NoMatchingRow);
            }
        }
    }
    Err(MessageError::Contention {
        license_arn: license_arn.to_string(),
        account: account.to_string(),
        attempts: MAX_WRITE_ATTEMPTS,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests;

//! The subscription use case (events stack): one AWS Marketplace EventBridge event
//! applied to the PII-free subscribers table with the order-safe rules of
//! [`crate::lifecycle`].
//!
//! Parse, find the row(s) (license events by key, agreement events through the
//! agreement index), apply the transition, and write it at the version read
//! ([`super::subscribers::update_subscriber`]), re-reading and re-applying on a version
//! conflict. A message that cannot be handled now (malformed, a store failure, an Ended
//! whose License Updated has not arrived yet) is an [`EventError`]: the Lambda reports
//! it as a batch item failure, so SQS redelivers it and eventually dead-letters it.
//! Malformed events are detected before any write, so they never write anything.

use crate::lifecycle::{EventParseError, EventTarget, MarketplaceEvent, Transition, apply};
use crate::model::Subscriber;
use crate::ports::{Clock, PortError, SubscriberStore};

use super::subscribers::{Decision, UpdateError, Updated, update_subscriber};

/// Most write attempts per row when concurrent writers keep moving its version.
pub const MAX_WRITE_ATTEMPTS: usize = 5;

/// What handling one event did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventOutcome {
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

/// Why one event was not handled (the Lambda has SQS retry it, then dead-letter it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EventError {
    /// The SQS record has no body.
    #[error("the SQS message has no body")]
    MissingBody,
    /// The body is not a usable Marketplace event (bad JSON, wrong source, missing field).
    #[error("malformed Marketplace event: {0}")]
    Malformed(#[from] EventParseError),
    /// Purchase Agreement Ended arrived before any row of its agreement exists.
    #[error(
        "Purchase Agreement Ended for agreement {agreement_id} arrived before its License Updated: retried until the row exists"
    )]
    AwaitingLicense {
        /// The agreement.
        agreement_id: String,
    },
    /// The subscribers table failed.
    #[error("subscribers table: {0}")]
    Store(#[from] PortError),
    /// Concurrent writers kept moving the row's version.
    #[error("row {license_arn}/{account} kept changing under {attempts} write attempts")]
    Contention {
        /// Partition key.
        license_arn: String,
        /// Sort key.
        account: String,
        /// Attempts made.
        attempts: usize,
    },
}

impl EventError {
    /// A stable name for logs and metrics filters.
    pub fn kind(&self) -> &'static str {
        match self {
            EventError::MissingBody | EventError::Malformed(_) => "MalformedEvent",
            EventError::AwaitingLicense { .. } => "AwaitingLicenseUpdated",
            EventError::Store(_) => "SubscribersTableError",
            EventError::Contention { .. } => "WriteContention",
        }
    }
}

/// Handles one message body (an EventBridge event as JSON); each write is stamped with
/// `clock`'s whole-second "now".
pub async fn apply_event(
    store: &dyn SubscriberStore,
    clock: &dyn Clock,
    message_id: &str,
    body: Option<&str>,
) -> Result<EventOutcome, EventError> {
    let body = body.ok_or(EventError::MissingBody)?;
    let event = MarketplaceEvent::from_json_str(body)?;
    let apply = Apply {
        store,
        clock,
        message_id,
        event: &event,
    };
    match event.target() {
        EventTarget::Nothing => {
            tracing::debug!(
                message_id,
                detail_type = event.name(),
                "event type not used by the subscriber lifecycle: acknowledged"
            );
            Ok(EventOutcome::Ignored)
        }
        EventTarget::Row {
            license_arn,
            account,
        } => {
            let current = store.get(license_arn, account).await?;
            apply.to_row(license_arn, account, current).await
        }
        EventTarget::Agreement { agreement_id } => apply.to_agreement(agreement_id).await,
    }
}

struct Apply<'a> {
    store: &'a dyn SubscriberStore,
    clock: &'a dyn Clock,
    message_id: &'a str,
    event: &'a MarketplaceEvent,
}

impl Apply<'_> {
    async fn to_agreement(&self, agreement_id: &str) -> Result<EventOutcome, EventError> {
        let (message_id, event) = (self.message_id, self.event);
        let rows = self.store.by_agreement(agreement_id).await?;
        if rows.is_empty() {
            return match event {
                // Ending must not be lost: the License Updated that creates the row may
                // still be on its way, so let SQS redeliver (and, if it never comes,
                // dead-letter it).
                MarketplaceEvent::AgreementEnded { .. } => Err(EventError::AwaitingLicense {
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
                    Ok(EventOutcome::NoMatchingRow)
                }
            };
        }
        let mut written = 0;
        let mut combined = EventOutcome::NoMatchingRow;
        for row in rows {
            let license = row.license_arn.clone();
            let account = row.customer_aws_account_id.clone();
            let outcome = self.to_row(&license, &account, Some(row)).await?;
            combined = match (&combined, &outcome) {
                (_, EventOutcome::Written(n)) => {
                    written += n;
                    EventOutcome::Written(written)
                }
                (EventOutcome::Written(_), _) => combined,
                (EventOutcome::NoMatchingRow, other) => other.clone(),
                _ => combined,
            };
        }
        if combined == EventOutcome::NoMatchingRow {
            tracing::warn!(
                message_id,
                agreement = agreement_id,
                event = event.name(),
                "the agreement's rows belong to another buyer account than the event: acknowledged"
            );
        }
        Ok(combined)
    }

    /// Applies the event to one row, starting from `current` (as read), and writes the
    /// result at the version read; on a version conflict re-reads and re-applies.
    async fn to_row(
        &self,
        license_arn: &str,
        account: &str,
        current: Option<Subscriber>,
    ) -> Result<EventOutcome, EventError> {
        let (message_id, event) = (self.message_id, self.event);
        let clock = self.clock;
        let updated = update_subscriber(
            self.store,
            &|| crate::pipeline::now_from_event(None, clock),
            license_arn,
            account,
            current,
            MAX_WRITE_ATTEMPTS,
            |current: Option<&Subscriber>, _attempt| {
                let (outcome, reason, what) = match apply(current, event) {
                    Transition::Write { row, reason } => return Decision::Write(row, reason),
                    Transition::Unchanged { reason } => {
                        (EventOutcome::Unchanged, reason, "subscriber row unchanged")
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
                        return Decision::Done(EventOutcome::ReactivationRefused);
                    }
                    Transition::NoMatchingRow { reason } => (
                        EventOutcome::NoMatchingRow,
                        reason,
                        "event does not apply to this row",
                    ),
                };
                tracing::info!(
                    message_id,
                    license = license_arn,
                    account,
                    event = event.name(),
                    reason,
                    "{what}"
                );
                Decision::Done(outcome)
            },
        )
        .await;
        match updated {
            Ok(Updated::Written(reason, row)) => {
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
                Ok(EventOutcome::Written(1))
            }
            Ok(Updated::Done(outcome)) => Ok(outcome),
            Err(UpdateError::Store(e)) => Err(EventError::Store(e)),
            Err(UpdateError::Contention { attempts }) => Err(EventError::Contention {
                license_arn: license_arn.to_string(),
                account: account.to_string(),
                attempts,
            }),
        }
    }
}

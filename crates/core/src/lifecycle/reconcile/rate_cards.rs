//! Rate cards kept beside the subscribers, read with `GetAgreementTerms`:
//!
//! - when an event makes a license active on an agreement its row has no card of, or
//!   amends the agreement ([`keep_after_event`], run by the subscription function after
//!   the event's write): the card is there before the license's first usage is
//!   aggregated, not a day later;
//! - and by the reconciliation, holding each license's row against the Agreement API
//!   anyway ([`refresh`]): for a row with no card of the agreement it is active on, or
//!   a card read before the agreement's `lastUpdateTime` moved (an amendment; a card
//!   read on an event does not know that time, so the next run reads it once more).
//!
//! Either stores the card on the row ([`SubscriberStore::put_rate_card`]: only while the
//! row is still on that agreement, never over a card read later). A replacement is a new
//! agreement id, so its card is read when the row moves to it.
//!
//! A read that fails never touches the lifecycle, so metering never waits on it: after
//! an event it is logged and left to the reconciliation; the reconciliation retries it
//! the next run and reports it (the function fails, so its alarm tells). After a throttle
//! the reconciliation's remaining cards wait for the next run rather than press on
//! against the quota (10 `GetAgreementTerms` a second per account).

use serde::Serialize;

use crate::charges::{RateCard, StoredRateCard};
use crate::lifecycle::{EventTarget, MarketplaceEvent};
use crate::model::{Subscriber, SubscriptionStatus};
use crate::ports::{AgreementError, AgreementSummary, PortError};
use crate::time::Instant;

use super::ReconcilePorts;

/// What one run did about rate cards.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct RateCardReport {
    /// Licenses active on an agreement whose row already holds its current card.
    pub current: usize,
    /// Cards read and stored this run (`--dry-run`: that would be read).
    pub refreshed: usize,
    /// Cards left for the next run after a throttle.
    pub deferred: usize,
    /// Cards that could not be read or stored (the next run tries again).
    pub failed: Vec<RateCardFailure>,
}

/// A card the run could not refresh.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct RateCardFailure {
    /// The license.
    pub license_arn: String,
    /// The buyer.
    #[serde(rename = "customerAWSAccountId")]
    pub customer_aws_account_id: String,
    /// The agreement whose terms were asked for.
    pub agreement_id: String,
    /// Why, in words.
    pub error: String,
}

/// One license the reconciliation found active on `active`.
pub(super) struct Due<'a> {
    pub license_arn: &'a str,
    pub account: &'a str,
    pub active: &'a AgreementSummary,
}

/// Refreshes the card of every license in `due` whose row needs one.
pub(super) async fn refresh(
    ports: ReconcilePorts<'_>,
    now: Instant,
    dry_run: bool,
    due: Vec<Due<'_>>,
) -> RateCardReport {
    let mut report = RateCardReport::default();
    let mut throttled = false;
    for license in due {
        let fail = |error: String| RateCardFailure {
            license_arn: license.license_arn.to_string(),
            customer_aws_account_id: license.account.to_string(),
            agreement_id: license.active.agreement_id.clone(),
            error,
        };
        let row = match ports
            .subscribers
            .get(license.license_arn, license.account)
            .await
        {
            Ok(Some(row)) => row,
            // No row yet (a dry run that would create it): nothing to keep a card on.
            Ok(None) => continue,
            Err(e) => {
                report
                    .failed
                    .push(fail(format!("the row could not be read: {e}")));
                continue;
            }
        };
        let active = license.active;
        if row.subscription_status != Some(SubscriptionStatus::Active)
            || row.agreement_id.as_deref() != Some(active.agreement_id.as_str())
        {
            // Not (yet) on this agreement: the lifecycle decides first.
            continue;
        }
        if row
            .rate_card
            .as_ref()
            .is_some_and(|kept| kept.is_current(&active.agreement_id, active.last_update_time))
        {
            report.current += 1;
            continue;
        }
        if throttled {
            report.deferred += 1;
            continue;
        }
        if dry_run {
            report.refreshed += 1;
            continue;
        }
        let agreement = AgreementVersion {
            agreement_id: &active.agreement_id,
            start: active.start,
            updated_at: active.last_update_time,
        };
        match keep(ports, &row, agreement, now).await {
            Ok(true) => report.refreshed += 1,
            // The row moved on (or a later read was kept) since it was read: the next
            // run judges the row as it is then.
            Ok(false) => {}
            Err(e) => {
                throttled = matches!(&e, CardError::Read(read) if read.is_transient());
                tracing::warn!(
                    license = %license.license_arn,
                    agreement = %active.agreement_id,
                    error = %e,
                    "rate card not kept; the next run tries again"
                );
                report.failed.push(fail(e.to_string()));
            }
        }
    }
    report
}

/// The agreement a card is read for: its id, start, and `lastUpdateTime` when known.
#[derive(Debug, Clone, Copy)]
struct AgreementVersion<'a> {
    agreement_id: &'a str,
    start: Instant,
    updated_at: Option<Instant>,
}

/// Why a card was not kept.
#[derive(Debug, thiserror::Error)]
pub enum CardError {
    /// The Agreement API did not answer the terms (or the agreement).
    #[error(transparent)]
    Read(#[from] AgreementError),
    /// The row could not be read or written.
    #[error("the card could not be stored: {0}")]
    Store(#[from] PortError),
}

/// Reads `agreement`'s terms and stores them as `row`'s card. `Ok(false)`: the row
/// moved on (another agreement, or a card read later) meanwhile.
async fn keep(
    ports: ReconcilePorts<'_>,
    row: &Subscriber,
    agreement: AgreementVersion<'_>,
    now: Instant,
) -> Result<bool, CardError> {
    let terms = ports.agreements.terms(agreement.agreement_id).await?;
    let card = StoredRateCard {
        card: RateCard {
            agreement_id: agreement.agreement_id.to_string(),
            start: agreement.start,
            terms,
        },
        agreement_updated_at: agreement.updated_at,
        read_at: now,
    };
    Ok(ports
        .subscribers
        .put_rate_card(&row.license_arn, &row.customer_aws_account_id, &card, now)
        .await?)
}

/// What [`keep_after_event`] did.
#[derive(Debug, Default)]
pub struct KeptAfterEvent {
    /// Cards read and stored.
    pub kept: usize,
    /// Rows whose card was already of their agreement (nothing read), or that moved on
    /// (or got a later card) while it was read.
    pub current: usize,
    /// Cards not kept, by license: the reconciliation reads them.
    pub failed: Vec<(String, CardError)>,
}

/// After `event` was applied: reads the card of each row it touched that is now active
/// on an agreement it holds no card of (License Updated, a replacement's new agreement),
/// or whose agreement it amends. Two calls per card (`DescribeAgreement` for the start,
/// `GetAgreementTerms`); none for a row whose card is current.
pub async fn keep_after_event(
    ports: ReconcilePorts<'_>,
    event: &MarketplaceEvent,
) -> KeptAfterEvent {
    let mut done = KeptAfterEvent::default();
    let amended = match event {
        MarketplaceEvent::AgreementAmended { agreement_id, .. } => Some(agreement_id.as_str()),
        MarketplaceEvent::LicenseUpdated { .. } => None,
        // Nothing else makes a row active or changes what it is billed at.
        _ => return done,
    };
    let rows = match event.target() {
        EventTarget::Row {
            license_arn,
            account,
        } => ports
            .subscribers
            .get(license_arn, account)
            .await
            .map(|row| row.into_iter().collect()),
        EventTarget::Agreement { agreement_id } => {
            ports.subscribers.by_agreement(agreement_id).await
        }
        EventTarget::Nothing => Ok(Vec::new()),
    };
    let rows: Vec<Subscriber> = match rows {
        Ok(rows) => rows,
        Err(e) => {
            done.failed
                .push((event_license(event), CardError::Store(e)));
            return done;
        }
    };
    let now = ports.clock.now();
    for row in rows {
        let Some(agreement_id) = row.agreement_id.as_deref() else {
            continue;
        };
        if row.subscription_status != Some(SubscriptionStatus::Active) {
            continue;
        }
        let has_card = row
            .rate_card
            .as_ref()
            .is_some_and(|kept| kept.card.agreement_id == agreement_id);
        if has_card && amended != Some(agreement_id) {
            done.current += 1;
            continue;
        }
        let outcome = match ports.agreements.describe(agreement_id).await {
            Ok(Some(facts)) => {
                let agreement = AgreementVersion {
                    agreement_id,
                    start: facts.start,
                    updated_at: None,
                };
                keep(ports, &row, agreement, now).await
            }
            Ok(None) => Err(CardError::Read(AgreementError::NotFound {
                operation: "DescribeAgreement",
                agreement_id: agreement_id.to_string(),
            })),
            Err(e) => Err(CardError::Read(e)),
        };
        match outcome {
            Ok(true) => done.kept += 1,
            Ok(false) => done.current += 1,
            Err(e) => done.failed.push((row.license_arn.clone(), e)),
        }
    }
    done
}

/// The license an event names, or its agreement when it names none (for a log line).
fn event_license(event: &MarketplaceEvent) -> String {
    match event.target() {
        EventTarget::Row { license_arn, .. } => license_arn.to_string(),
        EventTarget::Agreement { agreement_id } => agreement_id.to_string(),
        EventTarget::Nothing => String::new(),
    }
}

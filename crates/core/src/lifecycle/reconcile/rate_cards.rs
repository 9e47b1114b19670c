//! Rate cards kept beside the subscribers: the reconciliation, holding each license's
//! row against the Agreement API anyway, reads the terms (`GetAgreementTerms`) of the
//! agreement a license is active on when its row has no card of that agreement, or a
//! card read before the agreement's `lastUpdateTime` moved (an amendment), and stores
//! them on the row ([`SubscriberStore::put_rate_card`]: only while the row is still on
//! that agreement, never over a card read later). A replacement is a new agreement id,
//! so its card is read the first run after the row moved to it.
//!
//! A read that fails is retried by the next run and reported (the function fails, so
//! its alarm tells); it never touches the lifecycle, so metering never waits on it.
//! After a throttle the remaining cards wait for the next run rather than press on
//! against the quota (10 `GetAgreementTerms` a second per account).

use serde::Serialize;

use crate::charges::{RateCard, StoredRateCard};
use crate::model::SubscriptionStatus;
use crate::ports::AgreementSummary;
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
        let terms = match ports.agreements.terms(&active.agreement_id).await {
            Ok(terms) => terms,
            Err(e) => {
                throttled = e.is_transient();
                tracing::warn!(
                    license = %license.license_arn,
                    agreement = %active.agreement_id,
                    error = %e,
                    "rate card not read; the next run tries again"
                );
                report.failed.push(fail(e.to_string()));
                continue;
            }
        };
        let card = StoredRateCard {
            card: RateCard {
                agreement_id: active.agreement_id.clone(),
                start: active.start,
                terms,
            },
            agreement_updated_at: active.last_update_time,
            read_at: now,
        };
        match ports
            .subscribers
            .put_rate_card(license.license_arn, license.account, &card, now)
            .await
        {
            Ok(true) => report.refreshed += 1,
            // The row moved on (or a later read was kept) since it was read: the next
            // run judges the row as it is then.
            Ok(false) => {}
            Err(e) => report
                .failed
                .push(fail(format!("the card could not be stored: {e}"))),
        }
    }
    report
}

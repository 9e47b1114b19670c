//! `GET /subscriptions/{licenseArn}`: is this buyer entitled, and will usage written now
//! be billed? One read of the subscribers row, answered from what the lifecycle events
//! wrote there: the two statuses, the Regions the buyer registered in, the agreement,
//! the deprovisioning window's end, and the write deadline that follows from them.
//!
//! The pipeline itself never gates on this row (Marketplace decides, and a
//! `CustomerNotSubscribed` for a license not yet activated stays pending): the answer
//! is for a seller's service, to gate access and to stop writing usage that can never
//! bill. It predicts Marketplace's verdict from the row:
//!
//! | row | `usage` | why |
//! |---|---|---|
//! | subscription `active` | `billed` | License Updated seen, no deprovisioning since |
//! | subscription `deprovisioning`, window open | `billedUntil` + `writeBy` | the final-usage window: usage written by `writeBy` (the window's end less [`PIPELINE_ROOM`], the time the pipeline may take) reaches Marketplace before it closes |
//! | subscription `deprovisioning`, past `writeBy` | `notBilled` | too late for the pipeline to send it in the window |
//! | subscription `inactive` | `notBilled` | the window has closed |
//! | no subscription status yet | `pendingActivation` | a registration or agreement event came first: usage is kept pending and billed if License Updated arrives before its hour's record leaves Marketplace's window |

use serde::Serialize;

use crate::guardrails::sendable::PIPELINE_ROOM;
use crate::model::{AgreementStatus, Subscriber, SubscriptionStatus};
use crate::ports::{PortError, SubscriberStore};
use crate::time::Instant;

/// Whether usage written now is billed, as the subscribers row predicts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum UsageBilling {
    /// Active: usage written now is billed.
    Billed,
    /// Deprovisioning: usage written by `writeBy` is billed; after it, nothing.
    BilledUntil,
    /// Not subscribed (any more): usage written now is never billed.
    NotBilled,
    /// No License Updated seen yet: billed only if it arrives in time.
    PendingActivation,
}

/// The entitlement answer for one license and buyer account.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Entitlement {
    /// The license.
    pub license_arn: String,
    /// The buyer account.
    #[serde(rename = "customerAWSAccountId")]
    pub customer_aws_account_id: String,
    /// The product, when an event or a registration named it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub product_code: Option<String>,
    /// The agreement the license belongs to, when an event named it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agreement_id: Option<String>,
    /// `active` or `inactive`; absent until an agreement or license event set it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agreement_status: Option<&'static str>,
    /// `active`, `deprovisioning` or `inactive`; absent until License Updated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subscription_status: Option<&'static str>,
    /// The Regions the buyer registered in (empty: not registered anywhere yet).
    pub registered_regions: Vec<String>,
    /// While deprovisioning: the end of the final-usage window, the last moment
    /// Marketplace takes this buyer's usage.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deprovisioning_ends_at: Option<Instant>,
    /// Whether usage written now is billed.
    pub usage: UsageBilling,
    /// With `billedUntil`: the last moment usage written is billed (the window's end
    /// less the time the pipeline may take to send it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub write_by: Option<Instant>,
}

impl Entitlement {
    /// The answer for `row` at `now`.
    pub fn of(row: &Subscriber, now: Instant) -> Self {
        let (usage, write_by) = match row.subscription_status {
            Some(SubscriptionStatus::Active) => (UsageBilling::Billed, None),
            Some(SubscriptionStatus::Deprovisioning) => match row.deprovisioning_expiry {
                Some(ends) if now + PIPELINE_ROOM <= ends => {
                    (UsageBilling::BilledUntil, Some(ends - PIPELINE_ROOM))
                }
                _ => (UsageBilling::NotBilled, None),
            },
            Some(SubscriptionStatus::Inactive) => (UsageBilling::NotBilled, None),
            None => (UsageBilling::PendingActivation, None),
        };
        Entitlement {
            license_arn: row.license_arn.clone(),
            customer_aws_account_id: row.customer_aws_account_id.clone(),
            product_code: row.product_code.clone(),
            agreement_id: row.agreement_id.clone(),
            agreement_status: row.agreement_status.map(|s| match s {
                AgreementStatus::Active => "active",
                AgreementStatus::Inactive => "inactive",
            }),
            subscription_status: row.subscription_status.map(|s| s.as_str()),
            registered_regions: row.registered_regions.clone(),
            deprovisioning_ends_at: row
                .deprovisioning_expiry
                .filter(|_| row.subscription_status == Some(SubscriptionStatus::Deprovisioning)),
            usage,
            write_by,
        }
    }
}

/// Why no entitlement could be answered.
#[derive(Debug, thiserror::Error)]
pub enum EntitlementError {
    /// No subscribers row for the license (and account, when given).
    #[error(
        "no subscription is known for license {license_arn}{}: no lifecycle event or registration has named it in this stage's subscribers table (check the license ARN, the buyer account, and the stage)",
        account.as_deref().map(|a| format!(" and buyer account {a}")).unwrap_or_default()
    )]
    Unknown {
        /// The license asked for.
        license_arn: String,
        /// The account asked for, if any.
        account: Option<String>,
    },
    /// The license has rows for several buyer accounts; the caller must name one.
    #[error(
        "license {license_arn} has rows for {count} buyer accounts; name one with customerAWSAccountId"
    )]
    Ambiguous {
        /// The license asked for.
        license_arn: String,
        /// How many accounts.
        count: usize,
    },
    /// The subscribers table could not be read.
    #[error(transparent)]
    Store(#[from] PortError),
}

/// The entitlement of `license_arn` (for `account`, or its only buyer account) at
/// `now`: one `GetItem` with an account, one `Query` without.
pub async fn entitlement(
    subscribers: &dyn SubscriberStore,
    license_arn: &str,
    account: Option<&str>,
    now: Instant,
) -> Result<Entitlement, EntitlementError> {
    let unknown = || EntitlementError::Unknown {
        license_arn: license_arn.to_string(),
        account: account.map(str::to_string),
    };
    let row = match account {
        Some(account) => subscribers
            .get(license_arn, account)
            .await?
            .ok_or_else(unknown)?,
        None => {
            let mut rows = subscribers.by_license(license_arn).await?;
            match rows.len() {
                0 => return Err(unknown()),
                1 => rows.remove(0),
                count => {
                    return Err(EntitlementError::Ambiguous {
                        license_arn: license_arn.to_string(),
                        count,
                    });
                }
            }
        }
    };
    Ok(Entitlement::of(&row, now))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use chrono::Duration;

    use super::*;
    use crate::memory::MemorySubscriberStore;
    use crate::time::parse_usage_timestamp;

    const LICENSE: &str = "arn:aws:license-manager::123456789012:license:l-1";

    fn t(s: &str) -> Instant {
        parse_usage_timestamp(s).unwrap()
    }

    fn row(status: Option<SubscriptionStatus>) -> Subscriber {
        let mut row = Subscriber::new(LICENSE, "111122223333");
        row.subscription_status = status;
        row.agreement_id = Some("agmt-1".into());
        row.registered_regions = vec!["us-east-1".into()];
        row
    }

    #[test]
    fn an_active_buyer_is_billed_with_no_deadline() {
        let answer = Entitlement::of(
            &row(Some(SubscriptionStatus::Active)),
            t("2026-12-07T10:00:00Z"),
        );
        assert_eq!(answer.usage, UsageBilling::Billed);
        assert_eq!(answer.write_by, None);
        assert_eq!(answer.deprovisioning_ends_at, None);
        let json = serde_json::to_value(&answer).unwrap();
        assert_eq!(json["usage"], "billed");
        assert_eq!(json["subscriptionStatus"], "active");
        assert_eq!(json["customerAWSAccountId"], "111122223333");
        assert_eq!(json["registeredRegions"][0], "us-east-1");
        assert!(json.get("writeBy").is_none());
    }

    #[test]
    fn a_deprovisioning_buyer_is_billed_until_the_pipeline_can_no_longer_reach_the_window() {
        let ends = t("2026-12-07T11:00:00Z");
        let mut deprovisioning = row(Some(SubscriptionStatus::Deprovisioning));
        deprovisioning.deprovisioning_expiry = Some(ends);
        let write_by = ends - PIPELINE_ROOM;

        let before = Entitlement::of(&deprovisioning, write_by - Duration::seconds(1));
        assert_eq!(before.usage, UsageBilling::BilledUntil);
        assert_eq!(before.write_by, Some(write_by));
        assert_eq!(before.deprovisioning_ends_at, Some(ends));

        let at = Entitlement::of(&deprovisioning, write_by);
        assert_eq!(at.usage, UsageBilling::BilledUntil);

        let after = Entitlement::of(&deprovisioning, write_by + Duration::seconds(1));
        assert_eq!(after.usage, UsageBilling::NotBilled);
        assert_eq!(after.write_by, None);
        // The window's end is still told: the seller suspends the tenant then.
        assert_eq!(after.deprovisioning_ends_at, Some(ends));
    }

    #[test]
    fn an_inactive_buyer_is_not_billed_and_one_not_yet_activated_is_pending() {
        let now = t("2026-12-07T10:00:00Z");
        let mut inactive = row(Some(SubscriptionStatus::Inactive));
        // An expiry left from the window that closed is not told as a window.
        inactive.deprovisioning_expiry = Some(now - Duration::hours(2));
        let answer = Entitlement::of(&inactive, now);
        assert_eq!(answer.usage, UsageBilling::NotBilled);
        assert_eq!(answer.deprovisioning_ends_at, None);

        let pending = Entitlement::of(&row(None), now);
        assert_eq!(pending.usage, UsageBilling::PendingActivation);
        assert_eq!(
            serde_json::to_value(&pending).unwrap()["usage"],
            "pendingActivation"
        );
    }

    #[tokio::test]
    async fn one_read_answers_by_account_or_by_the_licenses_only_account_and_says_what_is_unknown()
    {
        let store = MemorySubscriberStore::default();
        let now = t("2026-12-07T10:00:00Z");
        let err = entitlement(&store, LICENSE, Some("111122223333"), now)
            .await
            .unwrap_err();
        assert!(matches!(err, EntitlementError::Unknown { .. }), "{err}");
        assert!(
            err.to_string().contains("buyer account 111122223333"),
            "{err}"
        );

        store
            .put_lifecycle(&row(Some(SubscriptionStatus::Active)), now)
            .await
            .unwrap();
        let by_account = entitlement(&store, LICENSE, Some("111122223333"), now)
            .await
            .unwrap();
        let by_license = entitlement(&store, LICENSE, None, now).await.unwrap();
        assert_eq!(by_account, by_license);
        assert_eq!(by_license.usage, UsageBilling::Billed);

        let mut second = row(Some(SubscriptionStatus::Active));
        second.customer_aws_account_id = "444455556666".into();
        store.put_lifecycle(&second, now).await.unwrap();
        let err = entitlement(&store, LICENSE, None, now).await.unwrap_err();
        assert!(
            matches!(err, EntitlementError::Ambiguous { count: 2, .. }),
            "{err}"
        );
    }
}

//! [`SubscriberStore`] in memory, with the table's stream (`NEW_AND_OLD_IMAGES`) once
//! [`MemorySubscriberStore::record_changes`] is on.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use super::faults::{Faults, StoreOp};
use super::tables::TableKey;
use crate::charges::StoredRateCard;
use crate::lifecycle::buyer_events::subscriber_image;
use crate::model::{Subscriber, SubscriptionStatus};
use crate::outcomes::Change;
use crate::ports::{PortError, SubscriberStore};
use crate::stamp::AuditStamp;
use crate::sync::lock;
use crate::time::Instant;

#[derive(Debug, Clone, PartialEq)]
struct StoredSubscriber {
    row: Subscriber,
    stamp: AuditStamp,
}

/// [`SubscriberStore`] in memory.
///
/// - A row created by `add_registered_region` has no lifecycle and version 0, so a
///   `put_lifecycle` at version 0 ("no lifecycle yet") succeeds on it, as the DynamoDB
///   condition `attribute_not_exists(version)` does; the registration fields survive.
/// - `put_lifecycle` writes `agreementStatus`, `subscriptionStatus`,
///   `deprovisioningExpiry`, the two guards (each removed when `None`) and
///   `productCode`/`agreementId` (kept when `None`: a lifecycle write never erases
///   identity); stores `version + 1`; never touches `registeredRegions`.
/// - `put_rate_card` writes only `rateCard`, on a row of the card's agreement whose
///   kept card is not newer (as DynamoDB's condition on `agreementId` and
///   `rateCard.readAt`).
/// - `deprovisioning` lists rows that are `deprovisioning` with an expiry (the sparse
///   index needs both), by expiry.
#[derive(Debug, Clone, Default)]
pub struct MemorySubscriberStore {
    rows: Arc<Mutex<BTreeMap<TableKey, StoredSubscriber>>>,
    faults: Arc<Faults>,
    /// The stream, once recorded: every committed change, in commit order.
    stream: Arc<Mutex<Option<Vec<SubscriberChange>>>>,
}

/// One committed change of one subscribers row, as the table's stream tells it.
#[derive(Debug, Clone, PartialEq)]
pub struct SubscriberChange {
    /// The row before the change (absent for an insert).
    pub old: Option<Subscriber>,
    /// The row after it.
    pub new: Subscriber,
    /// The stream record: its id, its position (increasing) and the images.
    pub change: Change,
}

impl MemorySubscriberStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes the next call of `op` fail with `error` (queued, one-shot).
    pub fn fail_next(&self, op: StoreOp, error: PortError) {
        self.faults.push(op, error);
    }

    /// Writes a row exactly as given (overwriting, version included), stamped at `now`.
    pub fn insert(&self, row: Subscriber, now: Instant) {
        let mut rows = lock(&self.rows);
        let key = (row.license_arn.clone(), row.customer_aws_account_id.clone());
        let old = rows.get(&key).cloned();
        let stored = StoredSubscriber {
            row,
            stamp: AuditStamp::at(now),
        };
        rows.insert(key, stored.clone());
        self.record(old.as_ref(), &stored);
    }

    /// Starts recording the table's stream (off by default). Changes before this call
    /// are not recorded.
    pub fn record_changes(&self) {
        lock(&self.stream).get_or_insert_with(Vec::new);
    }

    /// The recorded changes from position `from` on (0: the first), in commit order.
    pub fn changes_from(&self, from: usize) -> Vec<SubscriberChange> {
        lock(&self.stream)
            .as_ref()
            .map(|stream| stream.get(from..).unwrap_or_default().to_vec())
            .unwrap_or_default()
    }

    /// How many changes are recorded.
    pub fn change_count(&self) -> usize {
        lock(&self.stream).as_ref().map_or(0, Vec::len)
    }

    /// Records a committed write (called with the rows' lock held, so the stream's
    /// order is the commit order). A write that changed nothing is no stream record.
    fn record(&self, old: Option<&StoredSubscriber>, new: &StoredSubscriber) {
        let mut stream = lock(&self.stream);
        let Some(stream) = stream.as_mut() else {
            return;
        };
        if old == Some(new) {
            return;
        }
        let n = stream.len();
        stream.push(SubscriberChange {
            old: old.map(|s| s.row.clone()),
            new: new.row.clone(),
            change: Change {
                change_id: format!("subscribers-{n}"),
                position: format!("{n:024}"),
                old: old.map(|s| subscriber_image(&s.row, Some(&s.stamp.updated_at))),
                new: Some(subscriber_image(&new.row, Some(&new.stamp.updated_at))),
            },
        });
    }

    /// Every row, ordered by (license, account).
    pub fn rows(&self) -> Vec<Subscriber> {
        lock(&self.rows).values().map(|s| s.row.clone()).collect()
    }

    /// The audit stamps of a row.
    pub fn audit(&self, license_arn: &str, account: &str) -> Option<AuditStamp> {
        lock(&self.rows)
            .get(&(license_arn.to_string(), account.to_string()))
            .map(|s| s.stamp.clone())
    }

    fn select(&self, keep: impl Fn(&Subscriber) -> bool) -> Vec<Subscriber> {
        lock(&self.rows)
            .values()
            .filter(|s| keep(&s.row))
            .map(|s| s.row.clone())
            .collect()
    }
}

#[async_trait]
impl SubscriberStore for MemorySubscriberStore {
    async fn get(&self, license_arn: &str, account: &str) -> Result<Option<Subscriber>, PortError> {
        self.faults.check(StoreOp::SubscriberGet)?;
        Ok(lock(&self.rows)
            .get(&(license_arn.to_string(), account.to_string()))
            .map(|s| s.row.clone()))
    }

    async fn get_many(&self, keys: &[(String, String)]) -> Result<Vec<Subscriber>, PortError> {
        self.faults.check(StoreOp::SubscriberGetMany)?;
        let rows = lock(&self.rows);
        Ok(keys
            .iter()
            .filter_map(|key| rows.get(key).map(|s| s.row.clone()))
            .collect())
    }

    async fn by_license(&self, license_arn: &str) -> Result<Vec<Subscriber>, PortError> {
        self.faults.check(StoreOp::SubscriberByLicense)?;
        Ok(self.select(|row| row.license_arn == license_arn))
    }

    async fn by_agreement(&self, agreement_id: &str) -> Result<Vec<Subscriber>, PortError> {
        self.faults.check(StoreOp::SubscriberByAgreement)?;
        Ok(self.select(|row| row.agreement_id.as_deref() == Some(agreement_id)))
    }

    async fn deprovisioning(&self) -> Result<Vec<Subscriber>, PortError> {
        self.faults.check(StoreOp::SubscriberDeprovisioning)?;
        let mut rows = self.select(|row| {
            row.subscription_status == Some(SubscriptionStatus::Deprovisioning)
                && row.deprovisioning_expiry.is_some()
        });
        rows.sort_by_key(|row| row.deprovisioning_expiry);
        Ok(rows)
    }

    async fn put_lifecycle(&self, row: &Subscriber, now: Instant) -> Result<bool, PortError> {
        self.faults.check(StoreOp::SubscriberPutLifecycle)?;
        let mut rows = lock(&self.rows);
        let key = (row.license_arn.clone(), row.customer_aws_account_id.clone());
        let before = rows.get(&key).cloned();
        let stored_version = before.as_ref().map_or(0, |s| s.row.version);
        if stored_version != row.version {
            return Ok(false);
        }
        let stamp = AuditStamp::at(now);
        let entry = rows.entry(key).or_insert_with(|| StoredSubscriber {
            row: Subscriber::new(row.license_arn.clone(), row.customer_aws_account_id.clone()),
            stamp: stamp.clone(),
        });
        let target = &mut entry.row;
        if row.product_code.is_some() {
            target.product_code = row.product_code.clone();
        }
        if row.agreement_id.is_some() {
            target.agreement_id = row.agreement_id.clone();
        }
        target.agreement_status = row.agreement_status;
        target.subscription_status = row.subscription_status;
        target.deprovisioning_expiry = row.deprovisioning_expiry;
        target.agreement_event_at = row.agreement_event_at;
        target.subscription_event_at = row.subscription_event_at;
        target.version = row.version + 1;
        entry.stamp.updated_at = stamp.updated_at;
        let after = entry.clone();
        self.record(before.as_ref(), &after);
        Ok(true)
    }

    async fn put_rate_card(
        &self,
        license_arn: &str,
        account: &str,
        card: &StoredRateCard,
        now: Instant,
    ) -> Result<bool, PortError> {
        self.faults.check(StoreOp::SubscriberPutRateCard)?;
        let mut rows = lock(&self.rows);
        let key = (license_arn.to_string(), account.to_string());
        let Some(entry) = rows.get_mut(&key) else {
            return Ok(false);
        };
        let on_agreement =
            entry.row.agreement_id.as_deref() == Some(card.card.agreement_id.as_str());
        let newer_kept = entry
            .row
            .rate_card
            .as_ref()
            .is_some_and(|kept| kept.read_at > card.read_at);
        if !on_agreement || newer_kept {
            return Ok(false);
        }
        let before = entry.clone();
        entry.row.rate_card = Some(Box::new(card.clone()));
        entry.stamp.updated_at = AuditStamp::at(now).updated_at;
        let after = entry.clone();
        self.record(Some(&before), &after);
        Ok(true)
    }

    async fn add_registered_region(
        &self,
        license_arn: &str,
        account: &str,
        product_code: &str,
        (region, fields): (&str, &[String]),
        now: Instant,
    ) -> Result<(), PortError> {
        self.faults.check(StoreOp::SubscriberAddRegisteredRegion)?;
        if region.is_empty() || fields.iter().any(String::is_empty) {
            // DynamoDB refuses an empty string in a String Set.
            return Err(PortError::Failed {
                operation: "add_registered_region",
                message: "the region to add, or a field name, is empty".to_string(),
            });
        }
        let mut rows = lock(&self.rows);
        let stamp = AuditStamp::at(now);
        let key = (license_arn.to_string(), account.to_string());
        let before = rows.get(&key).cloned();
        let entry = rows.entry(key).or_insert_with(|| StoredSubscriber {
            row: Subscriber::new(license_arn, account),
            stamp: stamp.clone(),
        });
        if entry.row.product_code.is_none() {
            entry.row.product_code = Some(product_code.to_string());
        }
        let regions = &mut entry.row.registered_regions;
        if !regions.iter().any(|r| r == region) {
            regions.push(region.to_string());
            regions.sort();
        }
        let told = &mut entry.row.registrations;
        told.count += 1;
        told.last_region = Some(region.to_string());
        for field in fields {
            if !told.fields.contains(field) {
                told.fields.push(field.clone());
            }
        }
        told.fields.sort();
        entry.stamp.updated_at = stamp.updated_at;
        let after = entry.clone();
        self.record(before.as_ref(), &after);
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::memory::fixtures::*;
    use crate::model::AgreementStatus;
    #[tokio::test]
    async fn subscriber_store_versions_lifecycle_and_never_touches_regions() {
        let store = MemorySubscriberStore::new();
        let now = t("2026-11-30T10:00:00Z");
        // Registration first: a row with regions and no lifecycle, version 0.
        store
            .add_registered_region(LICENSE, ACCOUNT, "prod", ("eu-west-1", &[]), now)
            .await
            .unwrap();
        store
            .add_registered_region(LICENSE, ACCOUNT, "other", ("eu-west-1", &[]), now)
            .await
            .unwrap();
        store
            .add_registered_region(LICENSE, ACCOUNT, "prod", ("ap-south-1", &[]), now)
            .await
            .unwrap();
        let registered = store.get(LICENSE, ACCOUNT).await.unwrap().unwrap();
        assert_eq!(
            registered.registered_regions,
            vec!["ap-south-1", "eu-west-1"]
        );
        assert_eq!(registered.product_code.as_deref(), Some("prod"));
        assert_eq!(registered.version, 0);
        assert!(
            store
                .add_registered_region(LICENSE, ACCOUNT, "prod", ("", &[]), now)
                .await
                .is_err()
        );

        // A lifecycle write computed before the registration (version 0) still lands.
        let mut active = Subscriber::new(LICENSE, ACCOUNT);
        active.agreement_id = Some("agmt-1".into());
        active.agreement_status = Some(AgreementStatus::Active);
        active.subscription_status = Some(SubscriptionStatus::Active);
        active.registered_regions = vec!["must-not-be-written".into()];
        assert!(store.put_lifecycle(&active, now).await.unwrap());
        let stored = store.get(LICENSE, ACCOUNT).await.unwrap().unwrap();
        assert_eq!(stored.version, 1);
        assert_eq!(stored.registered_regions, vec!["ap-south-1", "eu-west-1"]);
        assert_eq!(
            stored.product_code.as_deref(),
            Some("prod"),
            "None keeps identity"
        );
        // A stale version conflicts.
        assert!(!store.put_lifecycle(&active, now).await.unwrap());
        // Registration after the lifecycle never touches lifecycle fields.
        store
            .add_registered_region(LICENSE, ACCOUNT, "prod", ("us-east-1", &[]), now)
            .await
            .unwrap();
        let after = store.get(LICENSE, ACCOUNT).await.unwrap().unwrap();
        assert_eq!(after.subscription_status, Some(SubscriptionStatus::Active));
        assert_eq!(after.version, 1);

        assert_eq!(store.by_agreement("agmt-1").await.unwrap().len(), 1);
        assert!(store.by_agreement("agmt-2").await.unwrap().is_empty());
        assert_eq!(store.by_license(LICENSE).await.unwrap().len(), 1);
        assert!(store.deprovisioning().await.unwrap().is_empty());

        let mut deprovisioning = after.clone();
        deprovisioning.subscription_status = Some(SubscriptionStatus::Deprovisioning);
        deprovisioning.deprovisioning_expiry = Some(t("2026-11-30T11:00:00Z"));
        assert!(store.put_lifecycle(&deprovisioning, now).await.unwrap());
        let mut other =
            Subscriber::new("arn:aws:license-manager::123456789012:license:l-2", ACCOUNT);
        other.subscription_status = Some(SubscriptionStatus::Deprovisioning);
        other.deprovisioning_expiry = Some(t("2026-11-30T10:30:00Z"));
        assert!(store.put_lifecycle(&other, now).await.unwrap());
        let listed = store.deprovisioning().await.unwrap();
        assert_eq!(listed.len(), 2);
        assert_eq!(
            listed[0].deprovisioning_expiry,
            Some(t("2026-11-30T10:30:00Z"))
        );
    }
}

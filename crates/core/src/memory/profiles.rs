//! [`ProfileStore`] in memory.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use super::faults::{Faults, StoreOp};
use super::tables::TableKey;
use crate::items::check_item;
use crate::model::{CustomerProfile, attr};
use crate::ports::{PortError, ProfileStore, ProfileWrite};
use crate::stamp::AuditStamp;
use crate::sync::lock;
use crate::time::Instant;

/// [`ProfileStore`] in memory. The first upsert creates the row with every given
/// field; a later one sets `productCode` and only the fields still absent, so a second
/// registration never replaces what the first stored.
#[derive(Debug, Clone, Default)]
pub struct MemoryProfileStore {
    profiles: Arc<Mutex<BTreeMap<TableKey, (CustomerProfile, AuditStamp)>>>,
    expiries: Arc<Mutex<BTreeMap<TableKey, Instant>>>,
    faults: Arc<Faults>,
}

impl MemoryProfileStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes the next upsert fail with `error` (queued, one-shot).
    pub fn fail_next(&self, error: PortError) {
        self.faults.push(StoreOp::ProfileUpsert, error);
    }

    /// Makes the next expire fail with `error` (queued, one-shot).
    pub fn fail_next_expire(&self, error: PortError) {
        self.faults.push(StoreOp::ProfileExpire, error);
    }

    /// One profile.
    pub fn get(&self, license_arn: &str, account: &str) -> Option<CustomerProfile> {
        lock(&self.profiles)
            .get(&(license_arn.to_string(), account.to_string()))
            .map(|(profile, _)| profile.clone())
    }

    /// The profile's `expiresAt`, if set.
    pub fn expires_at(&self, license_arn: &str, account: &str) -> Option<Instant> {
        lock(&self.expiries)
            .get(&(license_arn.to_string(), account.to_string()))
            .copied()
    }

    /// Every profile, ordered by (license, account).
    pub fn all(&self) -> Vec<CustomerProfile> {
        lock(&self.profiles)
            .values()
            .map(|(profile, _)| profile.clone())
            .collect()
    }
}

#[async_trait]
impl ProfileStore for MemoryProfileStore {
    async fn upsert(
        &self,
        profile: &CustomerProfile,
        now: Instant,
    ) -> Result<ProfileWrite, PortError> {
        self.faults.check(StoreOp::ProfileUpsert)?;
        let stamp = AuditStamp::at(now);
        let mut profiles = lock(&self.profiles);
        let key = (
            profile.license_arn.clone(),
            profile.customer_aws_account_id.clone(),
        );
        // The item as it would be after the write, refused over DynamoDB's 400 KB.
        let write = if profiles.contains_key(&key) {
            ProfileWrite::Again
        } else {
            ProfileWrite::First
        };
        let mut fields = profile.fields.clone();
        if let Some((stored, _)) = profiles.get(&key) {
            fields.extend(stored.fields.clone());
        }
        let bytes = attr::LICENSE_ARN.len()
            + profile.license_arn.len()
            + attr::CUSTOMER_ACCOUNT.len()
            + profile.customer_aws_account_id.len()
            + attr::PRODUCT_CODE.len()
            + profile.product_code.len()
            + fields.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>()
            + attr::CREATED_AT.len()
            + stamp.created_at.len()
            + attr::UPDATED_AT.len()
            + stamp.updated_at.len();
        check_item(format_args!("{}/{}", key.0, key.1), bytes)
            .map_err(|e| e.port_error("upsert profile"))?;
        let (stored, stored_stamp) = profiles
            .entry((
                profile.license_arn.clone(),
                profile.customer_aws_account_id.clone(),
            ))
            .or_insert_with(|| {
                (
                    CustomerProfile {
                        license_arn: profile.license_arn.clone(),
                        customer_aws_account_id: profile.customer_aws_account_id.clone(),
                        product_code: profile.product_code.clone(),
                        fields: BTreeMap::new(),
                    },
                    stamp.clone(),
                )
            });
        stored.product_code = profile.product_code.clone();
        for (name, value) in &profile.fields {
            stored
                .fields
                .entry(name.clone())
                .or_insert_with(|| value.clone());
        }
        stored_stamp.updated_at = stamp.updated_at;
        Ok(write)
    }

    async fn expire(
        &self,
        license_arn: &str,
        account: &str,
        at: Instant,
    ) -> Result<bool, PortError> {
        self.faults.check(StoreOp::ProfileExpire)?;
        let key = (license_arn.to_string(), account.to_string());
        if !lock(&self.profiles).contains_key(&key) {
            return Ok(false);
        }
        Ok(lock(&self.expiries).insert(key, at) != Some(at))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::memory::fixtures::*;
    #[tokio::test]
    async fn a_later_registration_keeps_the_first_ones_fields_and_fills_absent_ones() {
        let store = MemoryProfileStore::new();
        let mut profile = CustomerProfile {
            license_arn: LICENSE.into(),
            customer_aws_account_id: ACCOUNT.into(),
            product_code: "prod".into(),
            fields: BTreeMap::new(),
        };
        let first = store
            .upsert(&profile, t("2026-11-30T10:00:00Z"))
            .await
            .unwrap();
        assert_eq!(first, ProfileWrite::First);
        assert_eq!(store.get(LICENSE, ACCOUNT).unwrap().fields.len(), 0);
        profile.fields.insert("company".into(), "Acme".into());
        let again = store
            .upsert(&profile, t("2026-11-30T10:01:00Z"))
            .await
            .unwrap();
        assert_eq!(again, ProfileWrite::Again);
        profile.fields = BTreeMap::from([
            ("email".to_string(), "a@example.com".to_string()),
            ("company".to_string(), "Someone Else".to_string()),
        ]);
        store
            .upsert(&profile, t("2026-11-30T10:02:00Z"))
            .await
            .unwrap();
        let stored = store.get(LICENSE, ACCOUNT).unwrap();
        assert_eq!(stored.fields.len(), 2);
        assert_eq!(stored.fields["company"], "Acme", "the first value is kept");
        store.fail_next(PortError::Failed {
            operation: "put",
            message: "denied".into(),
        });
        assert!(
            store
                .upsert(&profile, t("2026-11-30T10:03:00Z"))
                .await
                .is_err()
        );
        assert_eq!(store.all().len(), 1);
    }
}

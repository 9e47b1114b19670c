//! [`ProfileStore`] on DynamoDB: the in-Region customer-profile table as the pipeline
//! writes it (the register function's upsert, the discoverer's `expiresAt`). The
//! operator's one-buyer read and erasure of the same table is `pii.rs`.

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use awsmp_core::model::{CustomerProfile, attr};
use awsmp_core::ports::{PortError, ProfileStore, ProfileWrite};
use awsmp_core::time::Instant;
use tracing::instrument;

use crate::error::failed;
use crate::item::{ItemKey, Update, expiry, s};

/// The customer-profile table (`awsmp-<productCode>-customer-profile`, in-Region).
///
/// Item: keys, `productCode`, one top-level string attribute per allowlisted form
/// field, `createdAt` (write-once), `updatedAt`. The first registration writes every
/// field (conditional on the row being absent); a later one writes each field only
/// where it is absent (`if_not_exists`), so the first registration's contact fields
/// stand. A field named like one of those fixed attributes is refused.
#[derive(Debug, Clone)]
pub struct DynamoProfileStore {
    client: Client,
    table: String,
}

impl DynamoProfileStore {
    /// A store on `table`.
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        DynamoProfileStore {
            client,
            table: table.into(),
        }
    }

    /// The table name.
    pub fn table(&self) -> &str {
        &self.table
    }
}

#[async_trait]
impl ProfileStore for DynamoProfileStore {
    // Field values are buyer data: never logged, only their count.
    #[instrument(
        skip(self, profile),
        fields(table = %self.table, license = %profile.license_arn, fields = profile.fields.len())
    )]
    async fn upsert(
        &self,
        profile: &CustomerProfile,
        now: Instant,
    ) -> Result<ProfileWrite, PortError> {
        if let Some(name) = profile.fields.keys().find(|name| {
            name.is_empty() || awsmp_core::model::PROFILE_FIXED_ATTRS.contains(&name.as_str())
        }) {
            return Err(failed(
                "upsert profile",
                format!(
                    "form field name {name:?} is empty or reserved for the table's own attributes"
                ),
            ));
        }
        let key = ItemKey {
            table: &self.table,
            sort_attr: attr::CUSTOMER_ACCOUNT,
            license_arn: &profile.license_arn,
            sort_key: &profile.customer_aws_account_id,
        };
        // UpdateItem rather than PutItem, so createdAt is written once. Neither write
        // asks for the row back (the register role may not: dynamodb:ReturnValues).
        let write = |first: bool| {
            let mut update = Update::new();
            update.set(attr::PRODUCT_CODE, s(&profile.product_code));
            for (name, value) in &profile.fields {
                if first {
                    update.set(name, s(value));
                } else {
                    update.set_if_absent(name, s(value));
                }
            }
            update.stamp(now);
            update
        };
        let mut first = write(true);
        let absent = format!("attribute_not_exists({})", first.name(attr::LICENSE_ARN));
        if key
            .update(
                &self.client,
                &first,
                Some(absent),
                "UpdateItem customer-profile (first registration)",
            )
            .await?
        {
            return Ok(ProfileWrite::First);
        }
        key.update(
            &self.client,
            &write(false),
            None,
            "UpdateItem customer-profile (registered again)",
        )
        .await?;
        Ok(ProfileWrite::Again)
    }

    #[instrument(skip(self), fields(table = %self.table))]
    async fn expire(
        &self,
        license_arn: &str,
        account: &str,
        at: Instant,
    ) -> Result<bool, PortError> {
        let mut update = Update::new();
        update.set(attr::EXPIRES_AT, expiry(at));
        let (license, expires) = (
            update.name(attr::LICENSE_ARN),
            update.name(attr::EXPIRES_AT),
        );
        let value = update.value(expiry(at));
        // Only an existing row, and only when it does not say so already: a repeat
        // (every discoverer run during the window) changes nothing.
        let condition = format!(
            "attribute_exists({license}) AND (attribute_not_exists({expires}) OR {expires} <> {value})"
        );
        ItemKey {
            table: &self.table,
            sort_attr: attr::CUSTOMER_ACCOUNT,
            license_arn,
            sort_key: account,
        }
        .update(
            &self.client,
            &update,
            Some(condition),
            "UpdateItem customer-profile expiresAt",
        )
        .await
    }
}

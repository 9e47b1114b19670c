//! [`SubscriberStore`] on DynamoDB: the PII-free subscribers table (us-east-1, read
//! cross-Region) with its `agreement` and sparse `deprovisioning` indexes. The
//! customer-profile table's writes are in `profiles.rs`.

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{AttributeValue, KeysAndAttributes};
use awsmp_core::charges::StoredRateCard;
use awsmp_core::model::subscriber_attr as sa;
use awsmp_core::model::{RegistrationFacts, Subscriber, SubscriptionStatus, attr};
use awsmp_core::ports::{PortError, SubscriberStore};
use awsmp_core::time::Instant;
use tracing::instrument;

use crate::error::{failed, port_error};

/// Keys one `BatchGetItem` takes.
const MAX_BATCH_GET_KEYS: usize = 100;
/// Sends of one batch while DynamoDB leaves keys unprocessed.
const MAX_BATCH_GET_ATTEMPTS: u32 = 4;
use crate::item::page::all_pages;
use crate::item::{
    DynamoItem, ItemKey, Reader, Update, attr_from_dynamo, attr_to_dynamo, instant, n, s,
};

/// The subscribers table (`awsmp-subscribers-<stage>`).
///
/// Attributes, and nothing else ever: `licenseArn`, `customerAWSAccountId`,
/// `productCode`, `agreementId`, `agreementStatus`, `subscriptionStatus`,
/// `deprovisioningExpiry`, `registeredRegions`, `agreementEventAt`,
/// `subscriptionEventAt`, `version`, `deprovisioningIndex`, `rateCard` (prices and
/// dates of the license's agreement), `createdAt`, `updatedAt`.
#[derive(Debug, Clone)]
pub struct DynamoSubscriberStore {
    client: Client,
    table: String,
}

impl DynamoSubscriberStore {
    /// A store on `table` (build the client for the table's Region, us-east-1).
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        DynamoSubscriberStore {
            client,
            table: table.into(),
        }
    }

    /// The table name.
    pub fn table(&self) -> &str {
        &self.table
    }

    fn row_key<'a>(&'a self, license_arn: &'a str, account: &'a str) -> ItemKey<'a> {
        ItemKey {
            table: &self.table,
            sort_attr: attr::CUSTOMER_ACCOUNT,
            license_arn,
            sort_key: account,
        }
    }

    fn subscriber_from_item(&self, item: &DynamoItem) -> Result<Subscriber, PortError> {
        let reader = Reader::new(
            &self.table,
            item,
            &[attr::LICENSE_ARN, attr::CUSTOMER_ACCOUNT],
        );
        Ok(Subscriber {
            license_arn: reader.s(attr::LICENSE_ARN)?,
            customer_aws_account_id: reader.s(attr::CUSTOMER_ACCOUNT)?,
            product_code: reader.opt_s(attr::PRODUCT_CODE)?,
            agreement_id: reader.opt_s(sa::AGREEMENT_ID)?,
            agreement_status: reader.opt_parsed(sa::AGREEMENT_STATUS)?,
            subscription_status: reader.opt_parsed(sa::SUBSCRIPTION_STATUS)?,
            deprovisioning_expiry: reader.opt_instant(sa::DEPROVISIONING_EXPIRY)?,
            registered_regions: reader.string_set(sa::REGISTERED_REGIONS)?,
            agreement_event_at: reader.opt_instant(sa::AGREEMENT_EVENT_AT)?,
            subscription_event_at: reader.opt_instant(sa::SUBSCRIPTION_EVENT_AT)?,
            version: reader.opt_u64(attr::VERSION)?.unwrap_or(0),
            registrations: Box::new(RegistrationFacts {
                count: reader.opt_u64(sa::REGISTRATION_COUNT)?.unwrap_or(0),
                last_region: reader.opt_s(sa::LAST_REGISTERED_REGION)?,
                fields: reader.string_set(sa::REGISTERED_FIELDS)?,
            }),
            rate_card: item
                .get(sa::RATE_CARD)
                .map(|value| StoredRateCard::from_attr(&attr_from_dynamo(value)).map(Box::new))
                .transpose()
                .map_err(|message| reader.corrupt(message))?,
        })
    }

    /// Every item of a query, all pages.
    async fn query_all(
        &self,
        operation: &'static str,
        index: Option<&str>,
        key_attr: &str,
        key_value: &str,
        consistent: bool,
    ) -> Result<Vec<DynamoItem>, PortError> {
        all_pages(operation, |start| {
            self.client
                .query()
                .table_name(&self.table)
                .set_index_name(index.map(str::to_string))
                // Strong reads exist on the table only, not on a GSI.
                .set_consistent_read(consistent.then_some(true))
                .key_condition_expression("#k = :k")
                .expression_attribute_names("#k", key_attr)
                .expression_attribute_values(":k", s(key_value))
                .set_exclusive_start_key(start)
                .send()
        })
        .await
    }
}

#[async_trait]
impl SubscriberStore for DynamoSubscriberStore {
    #[instrument(skip(self), fields(table = %self.table))]
    async fn get(&self, license_arn: &str, account: &str) -> Result<Option<Subscriber>, PortError> {
        let item = self
            .row_key(license_arn, account)
            .get(&self.client, "GetItem subscribers")
            .await?;
        item.as_ref()
            .map(|item| self.subscriber_from_item(item))
            .transpose()
    }

    #[instrument(skip(self, keys), fields(table = %self.table, keys = keys.len()))]
    async fn get_many(&self, keys: &[(String, String)]) -> Result<Vec<Subscriber>, PortError> {
        // BatchGetItem refuses a repeated key and takes at most 100 keys a call.
        let unique: std::collections::BTreeSet<&(String, String)> = keys.iter().collect();
        let unique: Vec<&(String, String)> = unique.into_iter().collect();
        let mut rows = Vec::with_capacity(unique.len());
        for chunk in unique.chunks(MAX_BATCH_GET_KEYS) {
            let keys: Vec<DynamoItem> = chunk
                .iter()
                .map(|(license, account)| {
                    DynamoItem::from([
                        (attr::LICENSE_ARN.to_string(), s(license)),
                        (attr::CUSTOMER_ACCOUNT.to_string(), s(account)),
                    ])
                })
                .collect();
            let mut request = KeysAndAttributes::builder()
                .set_keys(Some(keys))
                .build()
                .map_err(|e| failed("BatchGetItem subscribers", e.to_string()))?;
            // Unprocessed keys (throttled or over 16 MB) are sent again, a few times.
            for attempt in 0.. {
                let out = self
                    .client
                    .batch_get_item()
                    .request_items(&self.table, request)
                    .send()
                    .await
                    .map_err(|e| port_error("BatchGetItem subscribers", e))?;
                for item in out
                    .responses
                    .and_then(|mut r| r.remove(&self.table))
                    .unwrap_or_default()
                {
                    rows.push(self.subscriber_from_item(&item)?);
                }
                match out.unprocessed_keys.and_then(|mut u| u.remove(&self.table)) {
                    Some(left) if !left.keys.is_empty() => {
                        if attempt + 1 >= MAX_BATCH_GET_ATTEMPTS {
                            return Err(PortError::Transient {
                                operation: "BatchGetItem subscribers",
                                message: format!(
                                    "{} keys still unprocessed after {MAX_BATCH_GET_ATTEMPTS} attempts",
                                    left.keys.len()
                                ),
                            });
                        }
                        tokio::time::sleep(std::time::Duration::from_millis(50 << attempt)).await;
                        request = left;
                    }
                    _ => break,
                }
            }
        }
        Ok(rows)
    }

    #[instrument(skip(self), fields(table = %self.table))]
    async fn by_license(&self, license_arn: &str) -> Result<Vec<Subscriber>, PortError> {
        self.query_all(
            "Query subscribers by license",
            None,
            attr::LICENSE_ARN,
            license_arn,
            true,
        )
        .await?
        .iter()
        .map(|item| self.subscriber_from_item(item))
        .collect()
    }

    #[instrument(skip(self), fields(table = %self.table))]
    async fn by_agreement(&self, agreement_id: &str) -> Result<Vec<Subscriber>, PortError> {
        // The index is KEYS_ONLY: read each row whole (there are a handful per agreement).
        let keys = self
            .query_all(
                "Query subscribers agreement index",
                Some(sa::AGREEMENT_INDEX_NAME),
                sa::AGREEMENT_ID,
                agreement_id,
                false,
            )
            .await?;
        let mut rows = Vec::with_capacity(keys.len());
        for key in &keys {
            let reader = Reader::new(
                &self.table,
                key,
                &[attr::LICENSE_ARN, attr::CUSTOMER_ACCOUNT],
            );
            let license = reader.s(attr::LICENSE_ARN)?;
            let account = reader.s(attr::CUSTOMER_ACCOUNT)?;
            // The index is eventually consistent: a row it still lists may have moved to
            // another agreement, or been deleted; the table read is the truth.
            if let Some(row) = self.get(&license, &account).await?
                && row.agreement_id.as_deref() == Some(agreement_id)
            {
                rows.push(row);
            }
        }
        Ok(rows)
    }

    #[instrument(skip(self), fields(table = %self.table))]
    async fn deprovisioning(&self) -> Result<Vec<Subscriber>, PortError> {
        let items = self
            .query_all(
                "Query subscribers deprovisioning index",
                Some(sa::DEPROVISIONING_INDEX_NAME),
                sa::DEPROVISIONING_INDEX,
                sa::DEPROVISIONING_MARKER,
                false,
            )
            .await?;
        let mut rows = items
            .iter()
            .map(|item| self.subscriber_from_item(item))
            .collect::<Result<Vec<_>, _>>()?;
        rows.retain(|row| row.subscription_status == Some(SubscriptionStatus::Deprovisioning));
        rows.sort_by_key(|row| row.deprovisioning_expiry);
        Ok(rows)
    }

    #[instrument(skip(self, row), fields(table = %self.table, license = %row.license_arn, version = row.version))]
    async fn put_lifecycle(&self, row: &Subscriber, now: Instant) -> Result<bool, PortError> {
        let mut update = Update::new();
        // Identity is kept when not given; lifecycle fields are written as given.
        if let Some(code) = &row.product_code {
            update.set(attr::PRODUCT_CODE, s(code));
        }
        if let Some(agreement) = &row.agreement_id {
            update.set(sa::AGREEMENT_ID, s(agreement));
        }
        let deprovisioning = row.subscription_status == Some(SubscriptionStatus::Deprovisioning)
            && row.deprovisioning_expiry.is_some();
        update
            .set_or_remove(
                sa::AGREEMENT_STATUS,
                row.agreement_status.map(|v| s(v.as_str())),
            )
            .set_or_remove(
                sa::SUBSCRIPTION_STATUS,
                row.subscription_status.map(|v| s(v.as_str())),
            )
            .set_or_remove(
                sa::DEPROVISIONING_EXPIRY,
                row.deprovisioning_expiry.map(instant),
            )
            .set_or_remove(sa::AGREEMENT_EVENT_AT, row.agreement_event_at.map(instant))
            .set_or_remove(
                sa::SUBSCRIPTION_EVENT_AT,
                row.subscription_event_at.map(instant),
            )
            .set_or_remove(
                sa::DEPROVISIONING_INDEX,
                deprovisioning.then(|| s(sa::DEPROVISIONING_MARKER)),
            )
            .set(attr::VERSION, n(row.version + 1))
            .stamp(now);
        let version = update.name(attr::VERSION);
        // Version 0 means "no lifecycle yet": the row is absent, or only registration
        // (which never writes `version`) created it.
        let condition = if row.version == 0 {
            format!("attribute_not_exists({version})")
        } else {
            let expected = update.value(n(row.version));
            format!("{version} = {expected}")
        };
        self.row_key(&row.license_arn, &row.customer_aws_account_id)
            .update(
                &self.client,
                &update,
                Some(condition),
                "UpdateItem subscribers lifecycle",
            )
            .await
    }

    #[instrument(skip(self, card), fields(table = %self.table, agreement = %card.card.agreement_id))]
    async fn put_rate_card(
        &self,
        license_arn: &str,
        account: &str,
        card: &StoredRateCard,
        now: Instant,
    ) -> Result<bool, PortError> {
        let mut update = Update::new();
        update
            .set(sa::RATE_CARD, attr_to_dynamo(&card.to_attr())?)
            .stamp(now);
        let agreement = update.name(sa::AGREEMENT_ID);
        let on_agreement = update.value(s(&card.card.agreement_id));
        let kept = update.name(sa::RATE_CARD);
        let read_at = update.name("readAt");
        let this_read = update.value(instant(card.read_at));
        // RFC 3339 instants in one format order as text.
        let condition = format!(
            "{agreement} = {on_agreement} AND (attribute_not_exists({kept}) OR {kept}.{read_at} <= {this_read})"
        );
        self.row_key(license_arn, account)
            .update(
                &self.client,
                &update,
                Some(condition),
                "UpdateItem subscribers rateCard",
            )
            .await
    }

    #[instrument(skip(self), fields(table = %self.table))]
    async fn add_registered_region(
        &self,
        license_arn: &str,
        account: &str,
        product_code: &str,
        (region, fields): (&str, &[String]),
        now: Instant,
    ) -> Result<(), PortError> {
        if region.is_empty() || fields.iter().any(String::is_empty) {
            // DynamoDB refuses an empty string in a String Set.
            return Err(failed(
                "add_registered_region",
                "the region to add, or a field name, is empty",
            ));
        }
        let mut update = Update::new();
        update
            .set_if_absent(attr::PRODUCT_CODE, s(product_code))
            .set(sa::LAST_REGISTERED_REGION, s(region))
            .stamp(now)
            .add(
                sa::REGISTERED_REGIONS,
                AttributeValue::Ss(vec![region.to_string()]),
            )
            .add(sa::REGISTRATION_COUNT, n(1));
        if !fields.is_empty() {
            // A String Set cannot be empty: a form with no fields adds none.
            update.add(sa::REGISTERED_FIELDS, AttributeValue::Ss(fields.to_vec()));
        }
        self.row_key(license_arn, account)
            .update(
                &self.client,
                &update,
                None,
                "UpdateItem subscribers registeredRegions",
            )
            .await?;
        Ok(())
    }
}

//! [`OperatorStore`] on DynamoDB, for the `awsmp` tool: pages of both tables (a query
//! by license, or a scan), the replay of an `Error` record as one conditional update,
//! and corrections (the `correction` map of a billed record, written conditionally on
//! the client token it holds).

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use awsmp_core::corrections::{CORRECTION_ATTR, Correction};
use awsmp_core::model::{AggregatedRecord, AggregatedStatus, GroupKey, RawUsageRow, attr};
use awsmp_core::ports::{Cursor, OperatorStore, Page, PortError};
use awsmp_core::time::Instant;
use tracing::instrument;

use crate::aggregated::{attempts_condition, malformed_item, record_from_item};
use crate::item::page::one_page;
use crate::item::{DynamoItem, ItemKey, Update, attr_from_dynamo, attr_to_dynamo, s};
use crate::usage::raw_row_from_item;

/// Both metering tables of one main stack, as the operator reads them.
#[derive(Debug, Clone)]
pub struct DynamoOperatorStore {
    client: Client,
    usage_table: String,
    aggregated_table: String,
    page_limit: Option<i32>,
}

impl DynamoOperatorStore {
    /// A store on the two tables.
    pub fn new(
        client: Client,
        usage_table: impl Into<String>,
        aggregated_table: impl Into<String>,
    ) -> Self {
        DynamoOperatorStore {
            client,
            usage_table: usage_table.into(),
            aggregated_table: aggregated_table.into(),
            page_limit: None,
        }
    }

    /// Caps each page at `limit` items (DynamoDB `Limit`); by default a page is what
    /// one request returns (up to 1 MB).
    pub fn with_page_limit(mut self, limit: i32) -> Self {
        self.page_limit = Some(limit.max(1));
        self
    }

    /// One page of `table`: a query of one partition when `license_arn` is given,
    /// else a scan.
    async fn page(
        &self,
        table: &str,
        license_arn: Option<&str>,
        cursor: Option<Cursor>,
        operation: &'static str,
    ) -> Result<(Vec<DynamoItem>, Option<Cursor>), PortError> {
        match license_arn {
            Some(license) => {
                one_page(operation, operation, cursor, |start| {
                    self.client
                        .query()
                        .table_name(table)
                        .key_condition_expression("#l = :l")
                        .expression_attribute_names("#l", attr::LICENSE_ARN)
                        .expression_attribute_values(":l", s(license))
                        .set_limit(self.page_limit)
                        .set_exclusive_start_key(start)
                        .send()
                })
                .await
            }
            None => {
                one_page(operation, operation, cursor, |start| {
                    self.client
                        .scan()
                        .table_name(table)
                        .set_limit(self.page_limit)
                        .set_exclusive_start_key(start)
                        .send()
                })
                .await
            }
        }
    }
}

impl DynamoOperatorStore {
    /// The aggregated item of `key`, whose sort key is `sort_key`
    /// (`key.aggregated_sort_key()`).
    fn record_item<'a>(&'a self, key: &'a GroupKey, sort_key: &'a str) -> ItemKey<'a> {
        ItemKey {
            table: &self.aggregated_table,
            sort_attr: attr::AGGREGATED_SORT_KEY,
            license_arn: &key.license_arn,
            sort_key,
        }
    }
}

/// The correction an item carries, if any; an unreadable one is an error naming the item.
fn correction_of(table: &str, item: &DynamoItem) -> Result<Option<Correction>, PortError> {
    item.get(CORRECTION_ATTR)
        .map(|value| {
            Correction::from_attr(&attr_from_dynamo(value)).map_err(|message| PortError::Failed {
                operation: "read correction",
                message: format!(
                    "{table} item {:?}/{:?}: {message}",
                    item.get(attr::LICENSE_ARN).and_then(|v| v.as_s().ok()),
                    item.get(attr::AGGREGATED_SORT_KEY)
                        .and_then(|v| v.as_s().ok())
                ),
            })
        })
        .transpose()
}

#[async_trait]
impl OperatorStore for DynamoOperatorStore {
    #[instrument(skip(self), fields(table = %self.usage_table))]
    async fn raw_rows_page(
        &self,
        license_arn: Option<&str>,
        cursor: Option<Cursor>,
    ) -> Result<Page<RawUsageRow>, PortError> {
        let (items, next) = self
            .page(&self.usage_table, license_arn, cursor, "read usage table")
            .await?;
        let mut page = Page {
            next,
            ..Page::default()
        };
        for item in items {
            page.items.push(raw_row_from_item(&self.usage_table, item)?);
        }
        Ok(page)
    }

    #[instrument(skip(self), fields(table = %self.aggregated_table))]
    async fn records_page(
        &self,
        license_arn: Option<&str>,
        cursor: Option<Cursor>,
    ) -> Result<Page<AggregatedRecord>, PortError> {
        let (items, next) = self
            .page(
                &self.aggregated_table,
                license_arn,
                cursor,
                "read aggregated table",
            )
            .await?;
        let mut page = Page {
            next,
            ..Page::default()
        };
        for item in &items {
            match record_from_item(&self.aggregated_table, item) {
                Ok(record) => page.items.push(record),
                Err(e) => page.malformed.push(malformed_item(item, e.to_string())),
            }
        }
        Ok(page)
    }

    #[instrument(skip(self, record), fields(table = %self.aggregated_table, key = %record.key))]
    async fn replay(&self, record: &AggregatedRecord, now: Instant) -> Result<bool, PortError> {
        let mut update = Update::new();
        update
            .set(attr::METERING_STATUS, s(AggregatedStatus::Pending.as_str()))
            .set(attr::METERING_PENDING, s(record.key.hour.to_string()))
            .remove(attr::METERING_STATUS_REASON)
            .remove(attr::IN_FLIGHT_UNTIL)
            .remove(attr::CLAIM_ID)
            // Pending again: DynamoDB must not delete it before it is billed.
            .expiry(None);
        let sent = update.name(attr::SENT_QUANTITY);
        let quantity = update.name(attr::QUANTITY);
        update
            .set_clause(format!("{sent} = if_not_exists({sent}, {quantity})"))
            .stamp(now);
        let status = update.name(attr::METERING_STATUS);
        let error = update.value(s(AggregatedStatus::Error.as_str()));
        let read_attempts = attempts_condition(&mut update, record.attempt_count);
        let sort_key = record.key.aggregated_sort_key();
        let key = ItemKey {
            table: &self.aggregated_table,
            sort_attr: attr::AGGREGATED_SORT_KEY,
            license_arn: &record.key.license_arn,
            sort_key: &sort_key,
        };
        let condition = format!("{status} = {error} AND {read_attempts}");
        key.update(&self.client, &update, Some(condition), "UpdateItem replay")
            .await
    }

    #[instrument(skip(self), fields(table = %self.aggregated_table))]
    async fn correction(
        &self,
        key: &GroupKey,
    ) -> Result<Option<(AggregatedRecord, Option<Correction>)>, PortError> {
        let sort_key = key.aggregated_sort_key();
        let item_key = self.record_item(key, &sort_key);
        let Some(item) = item_key.get(&self.client, "GetItem correction").await? else {
            return Ok(None);
        };
        let record = record_from_item(&self.aggregated_table, &item)?;
        Ok(Some((
            record,
            correction_of(&self.aggregated_table, &item)?,
        )))
    }

    #[instrument(skip(self), fields(table = %self.aggregated_table))]
    async fn corrections_page(
        &self,
        cursor: Option<Cursor>,
    ) -> Result<Page<(AggregatedRecord, Correction)>, PortError> {
        let operation = "scan corrections";
        let (items, next) = one_page(operation, operation, cursor, |start| {
            self.client
                .scan()
                .table_name(&self.aggregated_table)
                .filter_expression("attribute_exists(#c)")
                .expression_attribute_names("#c", CORRECTION_ATTR)
                .set_limit(self.page_limit)
                .set_exclusive_start_key(start)
                .send()
        })
        .await?;
        let mut page = Page {
            next,
            ..Page::default()
        };
        for item in &items {
            match (
                record_from_item(&self.aggregated_table, item),
                correction_of(&self.aggregated_table, item),
            ) {
                (Ok(record), Ok(Some(correction))) => page.items.push((record, correction)),
                (Ok(_), Ok(None)) => {}
                (Err(e), _) | (_, Err(e)) => {
                    page.malformed.push(malformed_item(item, e.to_string()))
                }
            }
        }
        Ok(page)
    }

    #[instrument(skip(self, correction), fields(table = %self.aggregated_table, key = %key))]
    async fn record_correction(
        &self,
        key: &GroupKey,
        expected: Option<&str>,
        correction: &Correction,
    ) -> Result<bool, PortError> {
        let mut update = Update::new();
        update.set(CORRECTION_ATTR, attr_to_dynamo(&correction.to_attr())?);
        let status = update.name(attr::METERING_STATUS);
        let success = update.value(s(AggregatedStatus::Success.as_str()));
        let duplicate = update.value(s(AggregatedStatus::DuplicateRecord.as_str()));
        let reason = update.name(attr::METERING_STATUS_REASON);
        let earlier = update.value(s(
            awsmp_core::submit::outcome::REASON_BILLED_BY_EARLIER_ATTEMPT,
        ));
        let holds = match expected {
            None => {
                let c = update.name(CORRECTION_ATTR);
                format!("attribute_not_exists({c})")
            }
            Some(token) => {
                let c = update.name(CORRECTION_ATTR);
                let t = update.name("clientToken");
                let v = update.value(s(token));
                format!("{c}.{t} = {v}")
            }
        };
        let sort_key = key.aggregated_sort_key();
        let item_key = self.record_item(key, &sort_key);
        // Billed: `Success`, or a `DuplicateRecord` an earlier send of ours billed.
        let condition = format!(
            "({status} = {success} OR ({status} = {duplicate} AND {reason} = {earlier})) AND {holds}"
        );
        item_key
            .update(
                &self.client,
                &update,
                Some(condition),
                "UpdateItem correction",
            )
            .await
    }
}

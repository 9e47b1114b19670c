//! [`OperatorStore`] on DynamoDB, for the `awsmp` tool: pages of both tables (a query
//! by license, or a scan) and the replay of an `Error` record as one conditional update.

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use awsmp_core::model::{AggregatedRecord, AggregatedStatus, RawUsageRow, attr};
use awsmp_core::ports::{Cursor, OperatorStore, Page, PortError};
use awsmp_core::time::Instant;
use tracing::instrument;

use crate::aggregated::{attempts_condition, malformed_item, record_from_item};
use crate::item::page::one_page;
use crate::item::{DynamoItem, ItemKey, Update, s};
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
}

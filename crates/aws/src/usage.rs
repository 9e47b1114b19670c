//! [`UsageStore`] on DynamoDB: the raw usage table and its sparse `metering_pending` GSI.

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{Put, ReturnValuesOnConditionCheckFailure, TransactWriteItem};
use awsmp_core::items::ingestion::judge_repeat;
use awsmp_core::items::{INGESTION_MARKER_ROW, IngestionWrite};
use awsmp_core::model::{Attr, GroupKey, RawUsageRow, attr};
use awsmp_core::ports::{
    Cursor, IngestOutcome, NewUsageRow, Page, PendingRawRef, PortError, RowClaim, RowFinal,
    StrayPending, UsageStore,
};
use awsmp_core::time::{HourBucket, Instant};
use tracing::instrument;

use crate::error::{failed, port_error};
use crate::item::page::{all_pages, one_page};
use crate::item::{
    DynamoItem, ItemKey, Reader, Update, attr_from_dynamo, pending_hour_query, raw_row_item, s,
};

/// The raw usage table (`awsmp-<productCode>-usage-<stage>`).
///
/// Item shape written by [`UsageStore::put_row`]: keys, `customerAWSAccountId`,
/// `dimension`, `timestamp` (`YYYY-MM-DDTHH:MM:SSZ`), `quantity` (N), optional
/// `usageAllocations` and `productCode`, `meteringPending` (the hour bucket),
/// `createdAt`, `updatedAt`; sort key `<account>#<dimension>#<timestamp>#<eventId>`.
/// With it, in the same transaction, the event's idempotency marker: sort key
/// `event#<eventId>`, `ingestedRow` (the row's sort key), `contentDigest` (what a
/// repeat of the event id must match), `createdAt`, `updatedAt`;
/// no `meteringPending`, so it is never in the sparse index, and it never matches a
/// group's sort-key prefix (those start with the 12-digit account).
#[derive(Debug, Clone)]
pub struct DynamoUsageStore {
    client: Client,
    table: String,
    page_limit: Option<i32>,
}

impl DynamoUsageStore {
    /// A store on `usage_table`.
    pub fn new(client: Client, usage_table: impl Into<String>) -> Self {
        DynamoUsageStore {
            client,
            table: usage_table.into(),
            page_limit: None,
        }
    }

    /// Caps each `pending_page` at `limit` items (DynamoDB `Limit`); by default a page
    /// is whatever one query returns (up to 1 MB).
    pub fn with_page_limit(mut self, limit: i32) -> Self {
        self.page_limit = Some(limit.max(1));
        self
    }

    /// The table name.
    pub fn table(&self) -> &str {
        &self.table
    }

    fn row_key<'a>(&'a self, license_arn: &'a str, sort_key: &'a str) -> ItemKey<'a> {
        ItemKey {
            table: &self.table,
            sort_attr: attr::USAGE_SORT_KEY,
            license_arn,
            sort_key,
        }
    }

    fn row_from_item(&self, item: DynamoItem) -> Result<RawUsageRow, PortError> {
        raw_row_from_item(&self.table, item)
    }
}

/// Reads a stored usage item (keys and every attribute as stored).
pub(crate) fn raw_row_from_item(table: &str, item: DynamoItem) -> Result<RawUsageRow, PortError> {
    let reader = Reader::new(table, &item, &[attr::LICENSE_ARN, attr::USAGE_SORT_KEY]);
    let license_arn = reader.s(attr::LICENSE_ARN)?;
    let sort_key = reader.s(attr::USAGE_SORT_KEY)?;
    let attrs = item
        .iter()
        .filter(|(k, _)| k.as_str() != attr::LICENSE_ARN && k.as_str() != attr::USAGE_SORT_KEY)
        .map(|(k, v)| (k.clone(), attr_from_dynamo(v)))
        .collect();
    Ok(RawUsageRow {
        license_arn,
        sort_key,
        attrs,
    })
}

impl DynamoUsageStore {
    /// The verdict on `row`, whose event id was written before: `at_key` is the item at
    /// the row's own key and `marker` the event's marker, as the cancelled transaction
    /// returned them; the row the marker names is read (consistently) when it is not
    /// the one at this key.
    async fn judge(
        &self,
        row: &NewUsageRow,
        row_key: &str,
        at_key: Option<RawUsageRow>,
        marker: Option<RawUsageRow>,
    ) -> Result<IngestOutcome, PortError> {
        let named = marker
            .as_ref()
            .and_then(|m| m.attrs.get(INGESTION_MARKER_ROW))
            .and_then(Attr::as_s)
            .map(str::to_string);
        let first = match named {
            Some(sort_key) if sort_key != row_key => {
                self.get_row(&row.license_arn, &sort_key).await?
            }
            _ => at_key,
        };
        Ok(judge_repeat(row, marker.as_ref(), first.as_ref()))
    }
}

#[async_trait]
impl UsageStore for DynamoUsageStore {
    #[instrument(skip(self), fields(table = %self.table))]
    async fn pending_page(
        &self,
        hour: HourBucket,
        cursor: Option<Cursor>,
    ) -> Result<Page<PendingRawRef>, PortError> {
        let (items, next) = one_page(
            "usage pending_page",
            "Query usage metering_pending",
            cursor,
            |start| {
                pending_hour_query(&self.client, &self.table, hour, self.page_limit)
                    .set_exclusive_start_key(start)
                    .send()
            },
        )
        .await?;
        let items = items
            .iter()
            .map(|item| {
                let reader = Reader::new(
                    &self.table,
                    item,
                    &[attr::LICENSE_ARN, attr::USAGE_SORT_KEY],
                );
                // A projected attribute of the wrong type reads as absent: guardrails
                // reject the row by its full item later, with a reason code.
                let projected = |name: &str| reader.opt_s(name).ok().flatten();
                Ok(PendingRawRef {
                    license_arn: reader.s(attr::LICENSE_ARN)?,
                    sort_key: reader.s(attr::USAGE_SORT_KEY)?,
                    customer_aws_account_id: projected(attr::CUSTOMER_ACCOUNT),
                    dimension: projected(attr::DIMENSION),
                })
            })
            .collect::<Result<Vec<_>, PortError>>()?;
        Ok(Page {
            items,
            malformed: Vec::new(),
            next,
        })
    }

    #[instrument(skip(self), fields(table = %self.table, group = %key))]
    async fn group_rows(&self, key: &GroupKey) -> Result<Vec<RawUsageRow>, PortError> {
        all_pages("Query usage group", |start| {
            self.client
                .query()
                .table_name(&self.table)
                .consistent_read(true)
                .key_condition_expression("#l = :l AND begins_with(#sk, :prefix)")
                .expression_attribute_names("#l", attr::LICENSE_ARN)
                .expression_attribute_names("#sk", attr::USAGE_SORT_KEY)
                .expression_attribute_values(":l", s(&key.license_arn))
                .expression_attribute_values(":prefix", s(key.usage_sort_key_prefix()))
                .set_exclusive_start_key(start)
                .send()
        })
        .await?
        .into_iter()
        .map(|item| self.row_from_item(item))
        .collect()
    }

    #[instrument(skip(self), fields(table = %self.table))]
    async fn get_row(
        &self,
        license_arn: &str,
        sort_key: &str,
    ) -> Result<Option<RawUsageRow>, PortError> {
        let item = self
            .row_key(license_arn, sort_key)
            .get(&self.client, "GetItem usage")
            .await?;
        item.map(|item| self.row_from_item(item)).transpose()
    }

    #[instrument(skip(self), fields(table = %self.table))]
    async fn finalize_row(
        &self,
        license_arn: &str,
        sort_key: &str,
        claim: RowClaim<'_>,
        outcome: RowFinal,
        now: Instant,
    ) -> Result<bool, PortError> {
        let mut update = Update::new();
        update
            .set(attr::METERING_STATUS, s(outcome.status.as_str()))
            .set_or_remove(
                attr::METERING_STATUS_REASON,
                outcome.reason.map(|r| s(r.as_str())),
            )
            .expiry(outcome.expires_at)
            .set(attr::FINAL_WRITE_ID, s(outcome.write_id.to_string()))
            .remove(attr::METERING_PENDING)
            .stamp(now);
        let pending = update.name(attr::METERING_PENDING);
        let into = update.name(attr::AGGREGATED_INTO);
        let claim = match claim {
            RowClaim::Counted(record) => {
                let value = update.value(s(record));
                format!("{into} = {value}")
            }
            RowClaim::Uncounted => format!("attribute_not_exists({into})"),
        };
        let condition = format!("attribute_exists({pending}) AND {claim}");
        let key = self.row_key(license_arn, sort_key);
        if key
            .update(
                &self.client,
                &update,
                Some(condition),
                "UpdateItem usage finalize",
            )
            .await?
        {
            return Ok(true);
        }
        // The condition failed: perhaps because this very write applied on an earlier
        // attempt whose answer was lost (the SDK's retry, or the caller's). The row
        // then carries its id, and the transition was ours.
        let stored = key.get(&self.client, "GetItem usage finalize").await?;
        Ok(stored
            .as_ref()
            .and_then(|item| item.get(attr::FINAL_WRITE_ID))
            .and_then(|v| v.as_s().ok())
            .is_some_and(|stored| *stored == outcome.write_id.to_string()))
    }

    #[instrument(skip(self, live), fields(table = %self.table))]
    async fn stray_pending_page(
        &self,
        live: &[HourBucket],
        cursor: Option<Cursor>,
    ) -> Result<Page<StrayPending>, PortError> {
        crate::item::stray_pending_page(
            &self.client,
            &self.table,
            attr::USAGE_SORT_KEY,
            live,
            cursor,
            self.page_limit,
        )
        .await
    }

    #[instrument(skip(self), fields(table = %self.table))]
    async fn repair_pending(
        &self,
        license_arn: &str,
        sort_key: &str,
        from: &str,
        hour: HourBucket,
        now: Instant,
    ) -> Result<bool, PortError> {
        let mut update = Update::new();
        update
            .set(attr::METERING_PENDING, s(hour.to_string()))
            .expiry(None)
            .stamp(now);
        let pending = update.name(attr::METERING_PENDING);
        let was = update.value(s(from));
        let condition = format!("{pending} = {was}");
        self.row_key(license_arn, sort_key)
            .update(
                &self.client,
                &update,
                Some(condition),
                "UpdateItem usage repair_pending",
            )
            .await
    }

    #[instrument(skip(self, row), fields(table = %self.table, license = %row.license_arn, event_id = %row.event_id))]
    async fn put_row(&self, row: &NewUsageRow, now: Instant) -> Result<IngestOutcome, PortError> {
        // The row and the event's marker (`event#<eventId>`, no `meteringPending`: never
        // in the sparse index, never under a group's prefix), shaped in the domain and
        // written in one transaction, each only if its key is new: a repeat of the event
        // id finds the marker, writes nothing, and is judged a duplicate or a conflict.
        let write = IngestionWrite::new(row, now).map_err(|e| e.port_error("put_row"))?;
        let item = raw_row_item(&write.row)?;
        let marker = raw_row_item(&write.marker)?;
        let put = |item: DynamoItem| {
            Put::builder()
                .table_name(&self.table)
                .set_item(Some(item))
                .condition_expression("attribute_not_exists(#sk)")
                .expression_attribute_names("#sk", attr::USAGE_SORT_KEY)
                // What is there comes back in the cancellation reasons: the marker says
                // what the first write of the event id carried.
                .return_values_on_condition_check_failure(
                    ReturnValuesOnConditionCheckFailure::AllOld,
                )
                .build()
                .map(|put| TransactWriteItem::builder().put(put).build())
                .map_err(|e| failed("put_row", format!("cannot build the ingestion write: {e}")))
        };
        let row_key = write.row.sort_key.clone();
        let result = self
            .client
            .transact_write_items()
            .transact_items(put(item)?)
            .transact_items(put(marker)?)
            .send()
            .await;
        let err = match result {
            Ok(_) => return Ok(IngestOutcome::Created),
            Err(err) => err,
        };
        if let Some(TransactWriteItemsError::TransactionCanceledException(canceled)) =
            err.as_service_error()
        {
            let reasons = canceled.cancellation_reasons();
            let codes: Vec<&str> = reasons.iter().map(|r| r.code().unwrap_or("None")).collect();
            // The row or the marker exists: this event id was written before. The items
            // as they are (ALL_OLD) say whether with this usage.
            if codes.contains(&"ConditionalCheckFailed") {
                let old = |i: usize| {
                    reasons
                        .get(i)
                        .and_then(|r| r.item())
                        .map(|item| self.row_from_item(item.clone()))
                        .transpose()
                };
                let (at_key, marker) = (old(0)?, old(1)?);
                return self.judge(row, &row_key, at_key, marker).await;
            }
            // DynamoDB cancels a transaction whose item is too large (over 400 KB) with
            // `ValidationError` (moto answers a plain `ValidationException` instead):
            // retrying cannot help.
            let message = format!(
                "ingestion write canceled: {} (reasons {codes:?})",
                canceled.message().unwrap_or_default()
            );
            if codes
                .iter()
                .any(|c| matches!(*c, "ValidationError" | "ItemCollectionSizeLimitExceeded"))
            {
                return Err(PortError::Failed {
                    operation: "TransactWriteItems usage put_row",
                    message,
                });
            }
            // A concurrent write of the same event holds an item: the caller retries
            // and then finds it written (or writes it).
            return Err(PortError::Transient {
                operation: "TransactWriteItems usage put_row",
                message,
            });
        }
        Err(port_error("TransactWriteItems usage put_row", err))
    }
}

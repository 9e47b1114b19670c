//! [`AggregatedStore`] on DynamoDB: the aggregated-usage table, its sparse
//! `metering_pending` GSI, and the aggregation commit as one `TransactWriteItems`.

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{Put, ReturnValue, TransactWriteItem, Update as TxUpdate};
use awsmp_core::items::{OPTIONAL_RECORD_ATTRS, aggregated_item, check_commit};
use awsmp_core::model::{AggregatedRecord, AggregatedStatus, GroupKey, attr};
use awsmp_core::ports::{
    AggregatedStore, AggregationCommit, Claim, ClaimGrant, CommitOutcome, Cursor, MalformedItem,
    Page, PortError, PutOutcome, SubmissionUpdate,
};
use awsmp_core::time::{HourBucket, Instant};
use tracing::instrument;

use crate::error::{describe, failed, is_conditional_check_failed, is_transient, port_error};
use crate::item::{
    DynamoItem, Reader, Update, decode_cursor, encode_cursor, instant, n, not_live_filter, s,
    stamp_attrs, to_dynamo_item,
};

/// The aggregated-usage table (`awsmp-<productCode>-aggregated-usage-<stage>`), plus
/// the usage table whose rows a commit claims.
///
/// Item shape: keys (`licenseArn`, `account_dimension_hour`), `customerAWSAccountId`,
/// `dimension`, `hourBucket`, `quantity` (N), optional `usageAllocations`,
/// `productCode` (absent when empty), `meteringStatus`, optional
/// `meteringStatusReason`/`meteringRecordId`/`inFlightUntil`, `attemptCount` (N),
/// `version` (N), `meteringPending` (the hour, only while `Pending`), `rawRowCount`
/// (N, rows counted in), `createdAt`, `updatedAt`.
///
/// Rows a seller writes in direct-submit mode may lack `version`, `attemptCount` and
/// `meteringStatus`: they read as version 0, no attempts, and `Pending` while
/// `meteringPending` is present; conditions on version 0 accept an absent `version`.
#[derive(Debug, Clone)]
pub struct DynamoAggregatedStore {
    client: Client,
    table: String,
    usage_table: String,
    page_limit: Option<i32>,
}

impl DynamoAggregatedStore {
    /// A store on `aggregated_table` that claims rows of `usage_table`.
    pub fn new(
        client: Client,
        aggregated_table: impl Into<String>,
        usage_table: impl Into<String>,
    ) -> Self {
        DynamoAggregatedStore {
            client,
            table: aggregated_table.into(),
            usage_table: usage_table.into(),
            page_limit: None,
        }
    }

    /// Caps each `pending_page` at `limit` items (DynamoDB `Limit`).
    pub fn with_page_limit(mut self, limit: i32) -> Self {
        self.page_limit = Some(limit.max(1));
        self
    }

    /// The aggregated table's name.
    pub fn table(&self) -> &str {
        &self.table
    }

    fn record_from_item(&self, item: &DynamoItem) -> Result<AggregatedRecord, PortError> {
        record_from_item(&self.table, item)
    }

    /// A record of the pending index for `hour`, or what makes it unusable: unreadable
    /// attributes, or keys that contradict them (a claim or an outcome addressed by the
    /// attributes would never find the item, so it would stay pending forever).
    fn pending_record(&self, item: &DynamoItem) -> Result<AggregatedRecord, String> {
        let record = self.record_from_item(item).map_err(|e| e.to_string())?;
        let stored_sort_key = item
            .get(attr::AGGREGATED_SORT_KEY)
            .and_then(|v| v.as_s().ok());
        let expected = record.key.aggregated_sort_key();
        if stored_sort_key != Some(&expected) {
            return Err(format!(
                "{} {:?} does not match its attributes (expected {expected:?})",
                attr::AGGREGATED_SORT_KEY,
                stored_sort_key.map(String::as_str).unwrap_or_default()
            ));
        }
        let pending = item.get(attr::METERING_PENDING).and_then(|v| v.as_s().ok());
        if pending != Some(&record.key.hour.to_string()) {
            return Err(format!(
                "{} {:?} does not match {} {}",
                attr::METERING_PENDING,
                pending.map(String::as_str).unwrap_or_default(),
                attr::HOUR_BUCKET,
                record.key.hour
            ));
        }
        Ok(record)
    }
}

impl DynamoAggregatedStore {
    /// One page of index items as records, the unusable ones listed apart.
    fn record_page(
        &self,
        items: &[DynamoItem],
        last_key: Option<&DynamoItem>,
    ) -> Result<Page<AggregatedRecord>, PortError> {
        let mut page = Page {
            next: last_key.map(encode_cursor).transpose()?,
            ..Page::default()
        };
        for item in items {
            match self.pending_record(item) {
                Ok(record) => page.items.push(record),
                Err(problem) => page.malformed.push(malformed_item(item, problem)),
            }
        }
        Ok(page)
    }
}

/// An item of the index by its stored keys, with what is wrong with it.
fn malformed_item(item: &DynamoItem, problem: String) -> MalformedItem {
    let key = |name: &str| {
        item.get(name)
            .and_then(|v| v.as_s().ok())
            .cloned()
            .unwrap_or_default()
    };
    MalformedItem {
        license_arn: key(attr::LICENSE_ARN),
        sort_key: key(attr::AGGREGATED_SORT_KEY),
        problem,
    }
}

/// The condition "stored version is `expected`", where version 0 also accepts a row
/// with no `version` (written by a seller in direct-submit mode).
fn version_condition(update: &mut Update, expected: u64) -> String {
    let version = update.name(attr::VERSION);
    let value = update.value(n(expected));
    if expected == 0 {
        format!("(attribute_not_exists({version}) OR {version} = {value})")
    } else {
        format!("{version} = {value}")
    }
}

/// "Not held by an unexpired claim at `now`".
fn not_in_flight_condition(update: &mut Update, now: Instant) -> String {
    let in_flight = update.name(attr::IN_FLIGHT_UNTIL);
    let now = update.value(instant(now));
    format!("(attribute_not_exists({in_flight}) OR {in_flight} <= {now})")
}

/// Every attribute of a record, keys included (audit stamps and `rawRowCount` aside),
/// in the domain's shape ([`aggregated_item`]).
pub fn record_item(record: &AggregatedRecord) -> Result<DynamoItem, PortError> {
    to_dynamo_item(&aggregated_item(record))
}

/// Reads a stored aggregated item as a record.
pub fn record_from_item(table: &str, item: &DynamoItem) -> Result<AggregatedRecord, PortError> {
    let reader = Reader::new(table, item, &[attr::LICENSE_ARN, attr::AGGREGATED_SORT_KEY]);
    let hour_text = reader.s(attr::HOUR_BUCKET)?;
    let hour: HourBucket = hour_text
        .parse()
        .map_err(|e| reader.corrupt(format!("{}: {e}", attr::HOUR_BUCKET)))?;
    let pending = reader.opt_s(attr::METERING_PENDING)?.is_some();
    let status = match reader.opt_parsed::<AggregatedStatus>(attr::METERING_STATUS)? {
        Some(status) => status,
        None if pending => AggregatedStatus::Pending,
        None => {
            return Err(reader.corrupt("no meteringStatus and no meteringPending"));
        }
    };
    let attempt_count = match reader.opt_u64(attr::ATTEMPT_COUNT)? {
        None => 0,
        Some(v) => u32::try_from(v)
            .map_err(|_| reader.corrupt(format!("{} too large: {v}", attr::ATTEMPT_COUNT)))?,
    };
    Ok(AggregatedRecord {
        key: GroupKey {
            license_arn: reader.s(attr::LICENSE_ARN)?,
            customer_aws_account_id: reader.s(attr::CUSTOMER_ACCOUNT)?,
            dimension: reader.s(attr::DIMENSION)?,
            hour,
        },
        product_code: reader.opt_s(attr::PRODUCT_CODE)?.unwrap_or_default(),
        quantity: reader.i64(attr::QUANTITY)?,
        allocations: reader.opt_allocations(attr::USAGE_ALLOCATIONS)?,
        status,
        status_reason: reader.opt_s(attr::METERING_STATUS_REASON)?,
        metering_record_id: reader.opt_s(attr::METERING_RECORD_ID)?,
        attempt_count,
        version: reader.opt_u64(attr::VERSION)?.unwrap_or(0),
        in_flight_until: reader.opt_instant(attr::IN_FLIGHT_UNTIL)?,
        claim_id: reader.opt_s(attr::CLAIM_ID)?,
        sent_quantity: reader.opt_i64(attr::SENT_QUANTITY)?,
        folding: item.contains_key(attr::AGGREGATION_IN_PROGRESS),
    })
}

fn build_error(what: &str, e: impl std::fmt::Display) -> PortError {
    failed("commit", format!("cannot build {what}: {e}"))
}

#[async_trait]
impl AggregatedStore for DynamoAggregatedStore {
    #[instrument(skip(self), fields(table = %self.table, group = %key))]
    async fn get(&self, key: &GroupKey) -> Result<Option<AggregatedRecord>, PortError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .consistent_read(true)
            .key(attr::LICENSE_ARN, s(&key.license_arn))
            .key(attr::AGGREGATED_SORT_KEY, s(key.aggregated_sort_key()))
            .send()
            .await
            .map_err(|e| port_error("GetItem aggregated", e))?;
        out.item
            .as_ref()
            .map(|item| self.record_from_item(item))
            .transpose()
    }

    #[instrument(
        skip(self, commit),
        fields(
            table = %self.table,
            group = %commit.record.key,
            expected_version = ?commit.expected_version,
            rows = commit.claimed_rows.len()
        )
    )]
    async fn commit(&self, commit: &AggregationCommit) -> Result<CommitOutcome, PortError> {
        check_commit(commit).map_err(|e| e.port_error("commit"))?;
        let record = &commit.record;
        let row_count = commit.claimed_rows.len();
        let mut items = Vec::with_capacity(row_count + 1);

        match commit.expected_version {
            None => {
                let mut item = record_item(record)?;
                item.insert(attr::RAW_ROW_COUNT.to_string(), n(row_count));
                stamp_attrs(&mut item, commit.now);
                let put = Put::builder()
                    .table_name(&self.table)
                    .set_item(Some(item))
                    .condition_expression("attribute_not_exists(#sk)")
                    .expression_attribute_names("#sk", attr::AGGREGATED_SORT_KEY)
                    .build()
                    .map_err(|e| build_error("Put", e))?;
                items.push(TransactWriteItem::builder().put(put).build());
            }
            Some(expected) => {
                let mut update = Update::new();
                let item = record_item(record)?;
                for (name, value) in &item {
                    if name != attr::LICENSE_ARN && name != attr::AGGREGATED_SORT_KEY {
                        update.set(name, value.clone());
                    }
                }
                for name in OPTIONAL_RECORD_ATTRS {
                    if !item.contains_key(*name) {
                        update.remove(name);
                    }
                }
                update
                    .add(attr::RAW_ROW_COUNT, n(row_count))
                    .stamp(commit.now);
                // Folds only into a record no submitter ever claimed: once claimed it
                // may be billed, and its quantity is final.
                let version = version_condition(&mut update, expected);
                let pending = update.name(attr::METERING_PENDING);
                let in_flight = update.name(attr::IN_FLIGHT_UNTIL);
                let sent = update.name(attr::SENT_QUANTITY);
                let condition = format!(
                    "{version} AND attribute_exists({pending}) AND attribute_not_exists({in_flight}) AND attribute_not_exists({sent})"
                );
                let tx = TxUpdate::builder()
                    .table_name(&self.table)
                    .key(attr::LICENSE_ARN, s(&record.key.license_arn))
                    .key(
                        attr::AGGREGATED_SORT_KEY,
                        s(record.key.aggregated_sort_key()),
                    )
                    .update_expression(update.expression())
                    .condition_expression(condition)
                    .set_expression_attribute_names(update.names())
                    .set_expression_attribute_values(update.values())
                    .build()
                    .map_err(|e| build_error("Update", e))?;
                items.push(TransactWriteItem::builder().update(tx).build());
            }
        }

        let claim = s(record.key.aggregated_sort_key());
        for (license_arn, sort_key) in &commit.claimed_rows {
            let mut update = Update::new();
            update
                .set(attr::AGGREGATED_INTO, claim.clone())
                .stamp(commit.now);
            let pending = update.name(attr::METERING_PENDING);
            let claimed = update.name(attr::AGGREGATED_INTO);
            let tx = TxUpdate::builder()
                .table_name(&self.usage_table)
                .key(attr::LICENSE_ARN, s(license_arn))
                .key(attr::USAGE_SORT_KEY, s(sort_key))
                .update_expression(update.expression())
                .condition_expression(format!(
                    "attribute_exists({pending}) AND attribute_not_exists({claimed})"
                ))
                .set_expression_attribute_names(update.names())
                .set_expression_attribute_values(update.values())
                .build()
                .map_err(|e| build_error("Update", e))?;
            items.push(TransactWriteItem::builder().update(tx).build());
        }

        let result = self
            .client
            .transact_write_items()
            .set_transact_items(Some(items))
            .send()
            .await;
        let err = match result {
            Ok(_) => return Ok(CommitOutcome::Committed),
            Err(err) => err,
        };
        if let Some(TransactWriteItemsError::TransactionCanceledException(canceled)) =
            err.as_service_error()
        {
            let codes: Vec<&str> = canceled
                .cancellation_reasons()
                .iter()
                .filter_map(|r| r.code())
                .filter(|c| *c != "None")
                .collect();
            // Another writer won (a condition failed, or a concurrent transaction held
            // an item): re-read and recompute.
            if codes
                .iter()
                .any(|c| *c == "ConditionalCheckFailed" || *c == "TransactionConflict")
            {
                tracing::debug!(?codes, "commit lost a race");
                return Ok(CommitOutcome::Conflict);
            }
            let message = format!(
                "transaction canceled: {} (reasons {codes:?})",
                canceled.message().unwrap_or_default()
            );
            let throttled = codes.iter().any(|c| {
                matches!(
                    *c,
                    "ThrottlingError" | "ProvisionedThroughputExceeded" | "RequestLimitExceeded"
                )
            });
            return Err(if throttled {
                PortError::Transient {
                    operation: "TransactWriteItems commit",
                    message,
                }
            } else {
                PortError::Failed {
                    operation: "TransactWriteItems commit",
                    message,
                }
            });
        }
        if is_transient(&err) {
            return Err(PortError::Transient {
                operation: "TransactWriteItems commit",
                message: describe(&err),
            });
        }
        Err(port_error("TransactWriteItems commit", err))
    }

    #[instrument(skip(self), fields(table = %self.table))]
    async fn pending_page(
        &self,
        hour: HourBucket,
        cursor: Option<Cursor>,
    ) -> Result<Page<AggregatedRecord>, PortError> {
        let start = cursor
            .as_deref()
            .map(|c| decode_cursor("aggregated pending_page", c))
            .transpose()?;
        let out = self
            .client
            .query()
            .table_name(&self.table)
            .index_name(attr::METERING_PENDING_INDEX)
            .key_condition_expression("#p = :hour")
            .expression_attribute_names("#p", attr::METERING_PENDING)
            .expression_attribute_values(":hour", s(hour.to_string()))
            .set_limit(self.page_limit)
            .set_exclusive_start_key(start)
            .send()
            .await
            .map_err(|e| port_error("Query aggregated metering_pending", e))?;
        self.record_page(out.items(), out.last_evaluated_key())
    }

    #[instrument(skip(self, claim), fields(table = %self.table, group = %key))]
    async fn claim(
        &self,
        key: &GroupKey,
        expected_version: u64,
        claim: &Claim,
    ) -> Result<Option<ClaimGrant>, PortError> {
        let mut update = Update::new();
        update
            .set(attr::IN_FLIGHT_UNTIL, instant(claim.until))
            .set(attr::CLAIM_ID, s(&claim.id));
        let attempts = update.name(attr::ATTEMPT_COUNT);
        let zero = update.value(n(0));
        let one = update.value(n(1));
        let sent = update.name(attr::SENT_QUANTITY);
        let quantity = update.name(attr::QUANTITY);
        update
            .set_clause(format!(
                "{attempts} = if_not_exists({attempts}, {zero}) + {one}"
            ))
            .set_clause(format!("{sent} = if_not_exists({sent}, {quantity})"))
            .stamp(claim.now);
        let version = version_condition(&mut update, expected_version);
        let pending = update.name(attr::METERING_PENDING);
        let folding = update.name(attr::AGGREGATION_IN_PROGRESS);
        let not_in_flight = not_in_flight_condition(&mut update, claim.now);
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(attr::LICENSE_ARN, s(&key.license_arn))
            .key(attr::AGGREGATED_SORT_KEY, s(key.aggregated_sort_key()))
            .update_expression(update.expression())
            .condition_expression(format!(
                "attribute_exists({pending}) AND attribute_not_exists({folding}) AND {version} AND {not_in_flight}"
            ))
            .set_expression_attribute_names(update.names())
            .set_expression_attribute_values(update.values())
            // The values before the claim tell, atomically, whether an earlier send
            // may have billed the record.
            .return_values(ReturnValue::AllOld)
            .send()
            .await;
        match result {
            Ok(out) => {
                let old = out.attributes.unwrap_or_default();
                Ok(Some(ClaimGrant {
                    previously_sent: old.contains_key(attr::SENT_QUANTITY)
                        || old.contains_key(attr::IN_FLIGHT_UNTIL),
                }))
            }
            Err(e) if is_conditional_check_failed(&e) => Ok(None),
            Err(e) => Err(port_error("UpdateItem aggregated claim", e)),
        }
    }

    #[instrument(skip(self, update), fields(table = %self.table, group = %key))]
    async fn record(
        &self,
        key: &GroupKey,
        claim_id: Option<&str>,
        update: &SubmissionUpdate,
        now: Instant,
    ) -> Result<bool, PortError> {
        let mut expr = Update::new();
        expr.remove(attr::IN_FLIGHT_UNTIL).remove(attr::CLAIM_ID);
        if update.status.is_terminal() {
            expr.set(attr::METERING_STATUS, s(update.status.as_str()))
                .set_or_remove(
                    attr::METERING_STATUS_REASON,
                    update.reason.as_deref().map(s),
                )
                .remove(attr::METERING_PENDING);
            // An absent record id keeps a stored one.
            if let Some(id) = &update.metering_record_id {
                expr.set(attr::METERING_RECORD_ID, s(id));
            }
        } else if !update.possibly_sent {
            expr.remove(attr::SENT_QUANTITY);
        }
        expr.stamp(now);
        let pending = expr.name(attr::METERING_PENDING);
        let holder = match claim_id {
            Some(id) => {
                let name = expr.name(attr::CLAIM_ID);
                let value = expr.value(s(id));
                format!("{name} = {value}")
            }
            None => not_in_flight_condition(&mut expr, now),
        };
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(attr::LICENSE_ARN, s(&key.license_arn))
            .key(attr::AGGREGATED_SORT_KEY, s(key.aggregated_sort_key()))
            .update_expression(expr.expression())
            .condition_expression(format!("attribute_exists({pending}) AND {holder}"))
            .set_expression_attribute_names(expr.names())
            .set_expression_attribute_values(expr.values())
            .send()
            .await;
        match result {
            Ok(_) => Ok(true),
            Err(e) if is_conditional_check_failed(&e) => Ok(false),
            Err(e) => Err(port_error("UpdateItem aggregated record", e)),
        }
    }

    #[instrument(skip(self, item), fields(table = %self.table, sort_key = %item.sort_key))]
    async fn reject_malformed(
        &self,
        item: &MalformedItem,
        reason: &str,
        now: Instant,
    ) -> Result<bool, PortError> {
        let mut expr = Update::new();
        expr.set(attr::METERING_STATUS, s(AggregatedStatus::Error.as_str()))
            .set(attr::METERING_STATUS_REASON, s(reason))
            .remove(attr::METERING_PENDING)
            .stamp(now);
        let pending = expr.name(attr::METERING_PENDING);
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(attr::LICENSE_ARN, s(&item.license_arn))
            .key(attr::AGGREGATED_SORT_KEY, s(&item.sort_key))
            .update_expression(expr.expression())
            .condition_expression(format!("attribute_exists({pending})"))
            .set_expression_attribute_names(expr.names())
            .set_expression_attribute_values(expr.values())
            .send()
            .await;
        match result {
            Ok(_) => Ok(true),
            Err(e) if is_conditional_check_failed(&e) => Ok(false),
            Err(e) => Err(port_error("UpdateItem aggregated reject_malformed", e)),
        }
    }

    #[instrument(skip(self, live), fields(table = %self.table))]
    async fn stray_pending_page(
        &self,
        live: &[HourBucket],
        cursor: Option<Cursor>,
    ) -> Result<Page<AggregatedRecord>, PortError> {
        let start = cursor
            .as_deref()
            .map(|c| decode_cursor("aggregated stray_pending_page", c))
            .transpose()?;
        let mut request = self
            .client
            .scan()
            .table_name(&self.table)
            .index_name(attr::METERING_PENDING_INDEX)
            .set_limit(self.page_limit)
            .set_exclusive_start_key(start);
        if let Some((filter, names, values)) = not_live_filter(live) {
            request = request
                .filter_expression(filter)
                .set_expression_attribute_names(Some(names))
                .set_expression_attribute_values(Some(values));
        }
        let out = request
            .send()
            .await
            .map_err(|e| port_error("Scan aggregated metering_pending", e))?;
        self.record_page(out.items(), out.last_evaluated_key())
    }

    #[instrument(skip(self, record), fields(table = %self.table, group = %record.key))]
    async fn put_direct(
        &self,
        record: &AggregatedRecord,
        now: Instant,
    ) -> Result<PutOutcome, PortError> {
        let mut item = record_item(record)?;
        stamp_attrs(&mut item, now);
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(#sk)")
            .expression_attribute_names("#sk", attr::AGGREGATED_SORT_KEY)
            .send()
            .await;
        match result {
            Ok(_) => Ok(PutOutcome::Created),
            Err(e) if is_conditional_check_failed(&e) => Ok(PutOutcome::AlreadyExists),
            Err(e) => Err(port_error("PutItem aggregated", e)),
        }
    }
}

//! [`AggregatedStore`] on DynamoDB: the aggregated-usage table, its sparse
//! `metering_pending` GSI, and the aggregation commit as one `TransactWriteItems`.

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{Put, TransactWriteItem, Update as TxUpdate};
use awsmp_core::charges::{UNIT_PRICE_ATTR, UnitPrice};
use awsmp_core::items::{CommitWrite, OPTIONAL_RECORD_ATTRS, aggregated_item};
use awsmp_core::model::{AggregatedRecord, AggregatedStatus, GroupKey, attr};
use awsmp_core::ports::{
    AggregatedStore, AggregationCommit, ClaimGrant, ClaimRequest, CommitOutcome, Cursor,
    MalformedItem, OutcomeWrite, Page, PortError, PutOutcome, check_batch_writes,
};
use awsmp_core::time::{HourBucket, Instant};
use tracing::instrument;

use crate::error::{describe, failed, is_conditional_check_failed, is_transient, port_error};
use crate::item::page::one_page;
use crate::item::{
    DynamoItem, ItemKey, Reader, Update, attr_from_dynamo, attr_to_dynamo, instant, n,
    not_live_filter, pending_hour_query, s, stamp_attrs, to_dynamo_item,
};

/// The aggregated-usage table (`awsmp-<productCode>-aggregated-usage-<stage>`), plus
/// the usage table whose rows a commit claims.
///
/// Item shape: keys (`licenseArn`, `account_dimension_hour`), `customerAWSAccountId`,
/// `dimension`, `hourBucket`, `quantity` (N), optional `usageAllocations`,
/// `productCode` (absent when empty), `meteringStatus`, optional
/// `meteringStatusReason`/`meteringRecordId`/`inFlightUntil`, `attemptCount` (N),
/// `version` (N), optional `claimId`/`sentQuantity` (N)/`possiblyBilled` (BOOL),
/// `meteringPending` (the hour, only while `Pending`), `rawRowCount`
/// (N, rows counted in), `createdAt`, `updatedAt`; `finalWriteId` on a record the
/// age-out finalized (the id of that write).
///
/// Rows a seller writes in direct-submit mode may lack `version`, `attemptCount` and
/// `meteringStatus`: they read as version 0, no attempts, and `Pending` while
/// `meteringPending` is present; conditions on version 0 accept an absent `version`.
#[derive(Debug, Clone)]
pub struct DynamoAggregatedStore {
    client: Client,
    table: String,
    /// The usage table whose rows a commit claims: only the aggregator's store has one.
    usage_table: Option<String>,
    page_limit: Option<i32>,
}

impl DynamoAggregatedStore {
    /// A store on `aggregated_table` that reads and updates records; it cannot commit
    /// an aggregation until it is told the usage table ([`Self::claiming_rows_of`]).
    pub fn new(client: Client, aggregated_table: impl Into<String>) -> Self {
        DynamoAggregatedStore {
            client,
            table: aggregated_table.into(),
            usage_table: None,
            page_limit: None,
        }
    }

    /// The aggregator's store: its commits claim rows of `usage_table`.
    pub fn claiming_rows_of(mut self, usage_table: impl Into<String>) -> Self {
        self.usage_table = Some(usage_table.into());
        self
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

    fn record_key<'a>(&'a self, license_arn: &'a str, sort_key: &'a str) -> ItemKey<'a> {
        ItemKey {
            table: &self.table,
            sort_attr: attr::AGGREGATED_SORT_KEY,
            license_arn,
            sort_key,
        }
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
        (items, next): (Vec<DynamoItem>, Option<Cursor>),
    ) -> Page<AggregatedRecord> {
        let mut page = Page {
            next,
            ..Page::default()
        };
        for item in &items {
            match self.pending_record(item) {
                Ok(record) => page.items.push(record),
                Err(problem) => page.malformed.push(malformed_item(item, problem)),
            }
        }
        page
    }
}

/// An item of the index by its stored keys, with what is wrong with it.
pub(crate) fn malformed_item(item: &DynamoItem, problem: String) -> MalformedItem {
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

/// The condition "stored attempt count is `expected`", where 0 also accepts a record
/// with no `attemptCount` (never claimed, or written by a seller in direct-submit mode).
pub(crate) fn attempts_condition(update: &mut Update, expected: u32) -> String {
    let attempts = update.name(attr::ATTEMPT_COUNT);
    if expected == 0 {
        let zero = update.value(n(0));
        format!("(attribute_not_exists({attempts}) OR {attempts} = {zero})")
    } else {
        let value = update.value(n(expected));
        format!("{attempts} = {value}")
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
        possibly_billed: reader.opt_bool(attr::POSSIBLY_BILLED)?,
        folding: item.contains_key(attr::AGGREGATION_IN_PROGRESS),
        unit_price: item
            .get(UNIT_PRICE_ATTR)
            .map(|value| UnitPrice::from_attr(&attr_from_dynamo(value)))
            .transpose()
            .map_err(|message| reader.corrupt(message))?,
    })
}

fn build_error(what: &str, e: impl std::fmt::Display) -> PortError {
    failed("commit", format!("cannot build {what}: {e}"))
}

impl DynamoAggregatedStore {
    /// The transaction item of one claim: the record exactly as read (version,
    /// attempt count, claim id), pending, not mid-fold, no unexpired claim.
    fn claim_item(&self, request: &ClaimRequest) -> Result<TransactWriteItem, PortError> {
        let claim = &request.claim;
        let expected = &request.expected;
        let mut update = Update::new();
        update
            .set(attr::IN_FLIGHT_UNTIL, instant(claim.until))
            .set(attr::CLAIM_ID, s(&claim.id))
            // Pending: a seller's direct-submit row may carry one; never keep it.
            .expiry(None);
        let attempts = update.name(attr::ATTEMPT_COUNT);
        let zero = update.value(n(0));
        let one = update.value(n(1));
        // `sentQuantity` is what this call sends, and the claim holds only while the
        // stored quantity is the one read (a direct-submit seller may update it).
        let quantity = update.name(attr::QUANTITY);
        let read_quantity = update.value(n(expected.quantity));
        update
            .set(attr::SENT_QUANTITY, n(request.sent_quantity))
            .set_clause(format!(
                "{attempts} = if_not_exists({attempts}, {zero}) + {one}"
            ))
            .stamp(claim.now);
        let version = version_condition(&mut update, expected.version);
        let read_attempts = attempts_condition(&mut update, expected.attempt_count);
        let claim_name = update.name(attr::CLAIM_ID);
        let read_claim = match &expected.claim_id {
            Some(id) => {
                let value = update.value(s(id));
                format!("{claim_name} = {value}")
            }
            None => format!("attribute_not_exists({claim_name})"),
        };
        let pending = update.name(attr::METERING_PENDING);
        let folding = update.name(attr::AGGREGATION_IN_PROGRESS);
        let not_in_flight = not_in_flight_condition(&mut update, claim.now);
        let tx = TxUpdate::builder()
            .table_name(&self.table)
            .key(attr::LICENSE_ARN, s(&request.key.license_arn))
            .key(
                attr::AGGREGATED_SORT_KEY,
                s(request.key.aggregated_sort_key()),
            )
            .update_expression(update.expression())
            .condition_expression(format!(
                "attribute_exists({pending}) AND attribute_not_exists({folding}) AND {version} \
                 AND {quantity} = {read_quantity} AND {read_attempts} AND {read_claim} \
                 AND {not_in_flight}"
            ))
            .set_expression_attribute_names(update.names())
            .set_expression_attribute_values(update.values())
            .build()
            .map_err(|e| build_error("claim Update", e))?;
        Ok(TransactWriteItem::builder().update(tx).build())
    }

    /// The transaction item of one outcome: under its claim, or while no unexpired
    /// claim holds the record; always only while it is pending.
    fn record_item(
        &self,
        write: &OutcomeWrite,
        now: Instant,
    ) -> Result<TransactWriteItem, PortError> {
        let update = &write.update;
        let mut expr = Update::new();
        expr.remove(attr::IN_FLIGHT_UNTIL).remove(attr::CLAIM_ID);
        if update.status.is_terminal() {
            expr.set(attr::METERING_STATUS, s(update.status.as_str()))
                .set_or_remove(
                    attr::METERING_STATUS_REASON,
                    update.reason.as_deref().map(s),
                )
                .expiry(update.expires_at)
                .remove(attr::METERING_PENDING);
            // An absent record id keeps a stored one.
            if let Some(id) = &update.metering_record_id {
                expr.set(attr::METERING_RECORD_ID, s(id));
            }
            if let Some(id) = update.final_write_id {
                expr.set(attr::FINAL_WRITE_ID, s(id.to_string()));
            }
        } else {
            expr.expiry(None);
            if !update.possibly_sent {
                expr.remove(attr::SENT_QUANTITY);
            }
        }
        // Never cleared: set when a call may have billed; under a claim, "no" where
        // nothing is stored yet (an item without it reads sentQuantity instead).
        if update.possibly_billed {
            expr.set(
                attr::POSSIBLY_BILLED,
                aws_sdk_dynamodb::types::AttributeValue::Bool(true),
            );
        } else if write.claim_id.is_some() {
            let billed = expr.name(attr::POSSIBLY_BILLED);
            let no = expr.value(aws_sdk_dynamodb::types::AttributeValue::Bool(false));
            expr.set_clause(format!("{billed} = if_not_exists({billed}, {no})"));
        }
        expr.stamp(now);
        let pending = expr.name(attr::METERING_PENDING);
        let holder = match &write.claim_id {
            Some(id) => {
                let name = expr.name(attr::CLAIM_ID);
                let value = expr.value(s(id));
                format!("{name} = {value}")
            }
            None => not_in_flight_condition(&mut expr, now),
        };
        let tx = TxUpdate::builder()
            .table_name(&self.table)
            .key(attr::LICENSE_ARN, s(&write.key.license_arn))
            .key(
                attr::AGGREGATED_SORT_KEY,
                s(write.key.aggregated_sort_key()),
            )
            .update_expression(expr.expression())
            .condition_expression(format!("attribute_exists({pending}) AND {holder}"))
            .set_expression_attribute_names(expr.names())
            .set_expression_attribute_values(expr.values())
            .build()
            .map_err(|e| build_error("record Update", e))?;
        Ok(TransactWriteItem::builder().update(tx).build())
    }

    /// Whether an outcome whose condition failed was applied by an earlier attempt of
    /// the same write (its answer lost): a terminal update with a `finalWriteId` the
    /// record carries (read strongly consistent). Without one, `false` (no read).
    async fn applied_earlier(&self, write: &OutcomeWrite) -> Result<bool, PortError> {
        let update = &write.update;
        let (Some(id), true) = (update.final_write_id, update.status.is_terminal()) else {
            return Ok(false);
        };
        let sort_key = write.key.aggregated_sort_key();
        let stored = self
            .record_key(&write.key.license_arn, &sort_key)
            .get(&self.client, "GetItem aggregated record")
            .await?;
        Ok(stored
            .as_ref()
            .and_then(|item| item.get(attr::FINAL_WRITE_ID))
            .and_then(|v| v.as_s().ok())
            .is_some_and(|stored| *stored == id.to_string()))
    }

    /// Applies each item whose condition holds, in as few transactions as it takes:
    /// one when every condition holds; when some fail, the transaction (which then
    /// changed nothing) is sent again without them. One answer per item: applied or
    /// not. A conflict with another transaction or throttling is transient (the whole
    /// call is retried by the caller; nothing was applied).
    async fn transact_each(
        &self,
        items: Vec<TransactWriteItem>,
        operation: &'static str,
    ) -> Result<Vec<bool>, PortError> {
        let mut applied = vec![false; items.len()];
        let mut live: Vec<usize> = (0..items.len()).collect();
        while !live.is_empty() {
            let batch: Vec<TransactWriteItem> =
                live.iter().filter_map(|i| items.get(*i).cloned()).collect();
            let result = self
                .client
                .transact_write_items()
                .set_transact_items(Some(batch))
                .send()
                .await;
            let err = match result {
                Ok(_) => {
                    for i in &live {
                        applied[*i] = true;
                    }
                    return Ok(applied);
                }
                Err(err) => err,
            };
            let Some(TransactWriteItemsError::TransactionCanceledException(canceled)) =
                err.as_service_error()
            else {
                return Err(if is_transient(&err) {
                    PortError::Transient {
                        operation,
                        message: describe(&err),
                    }
                } else {
                    port_error(operation, err)
                });
            };
            let codes: Vec<&str> = canceled
                .cancellation_reasons()
                .iter()
                .map(|r| r.code().unwrap_or("None"))
                .collect();
            let failed_conditions: Vec<usize> = codes
                .iter()
                .enumerate()
                .filter(|(_, c)| **c == "ConditionalCheckFailed")
                .map(|(position, _)| position)
                .collect();
            let other = codes
                .iter()
                .any(|c| *c != "None" && *c != "ConditionalCheckFailed");
            if codes.len() != live.len() || other || failed_conditions.is_empty() {
                let message = format!(
                    "transaction canceled: {} (reasons {codes:?})",
                    canceled.message().unwrap_or_default()
                );
                let transient = codes.iter().any(|c| {
                    matches!(
                        *c,
                        "TransactionConflict"
                            | "ThrottlingError"
                            | "ProvisionedThroughputExceeded"
                            | "RequestLimitExceeded"
                    )
                });
                return Err(if transient {
                    PortError::Transient { operation, message }
                } else {
                    PortError::Failed { operation, message }
                });
            }
            live = live
                .iter()
                .enumerate()
                .filter(|(position, _)| !failed_conditions.contains(position))
                .map(|(_, i)| *i)
                .collect();
        }
        Ok(applied)
    }
}

#[async_trait]
impl AggregatedStore for DynamoAggregatedStore {
    #[instrument(skip(self), fields(table = %self.table, group = %key))]
    async fn get(&self, key: &GroupKey) -> Result<Option<AggregatedRecord>, PortError> {
        let sort_key = key.aggregated_sort_key();
        let item = self
            .record_key(&key.license_arn, &sort_key)
            .get(&self.client, "GetItem aggregated")
            .await?;
        item.as_ref()
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
        let usage_table = self.usage_table.as_deref().ok_or_else(|| PortError::Failed {
            operation: "commit",
            message: format!(
                "the store on {} was built without the usage table, so it cannot claim rows (only the aggregator's store commits)",
                self.table
            ),
        })?;
        let write = CommitWrite::new(commit).map_err(|e| e.port_error("commit"))?;
        let record = &commit.record;
        let row_count = commit.claimed_rows.len();
        let mut items = Vec::with_capacity(row_count + 1);

        match commit.expected_version {
            None => {
                let mut item = to_dynamo_item(&write.record)?;
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
                let item = to_dynamo_item(&write.record)?;
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

        for (license_arn, sort_key) in &commit.claimed_rows {
            // Counted and finalized at once: the row leaves the pending index in the
            // transaction that adds it to the record (no per-row cleanup write). The
            // condition reads the item before the update.
            let mut update = Update::new();
            for (name, value) in &write.row_changes {
                update.set_or_remove(name, value.as_ref().map(attr_to_dynamo).transpose()?);
            }
            update.stamp(commit.now);
            let pending = update.name(attr::METERING_PENDING);
            let claimed = update.name(attr::AGGREGATED_INTO);
            let tx = TxUpdate::builder()
                .table_name(usage_table)
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
        let page = one_page(
            "aggregated pending_page",
            "Query aggregated metering_pending",
            cursor,
            |start| {
                pending_hour_query(&self.client, &self.table, hour, self.page_limit)
                    .set_exclusive_start_key(start)
                    .send()
            },
        )
        .await?;
        Ok(self.record_page(page))
    }

    #[instrument(skip(self, requests), fields(table = %self.table, records = requests.len()))]
    async fn claim_all(
        &self,
        requests: &[ClaimRequest],
    ) -> Result<Vec<Option<ClaimGrant>>, PortError> {
        check_batch_writes("TransactWriteItems aggregated claim", requests.len())?;
        let items = requests
            .iter()
            .map(|r| self.claim_item(r))
            .collect::<Result<Vec<_>, _>>()?;
        let applied = self
            .transact_each(items, "TransactWriteItems aggregated claim")
            .await?;
        Ok(requests
            .iter()
            .zip(applied)
            .map(|(request, ok)| ok.then(|| request.grant()))
            .collect())
    }

    #[instrument(skip(self, writes), fields(table = %self.table, records = writes.len()))]
    async fn record_all(
        &self,
        writes: &[OutcomeWrite],
        now: Instant,
    ) -> Result<Vec<bool>, PortError> {
        check_batch_writes("TransactWriteItems aggregated record", writes.len())?;
        let items = writes
            .iter()
            .map(|w| self.record_item(w, now))
            .collect::<Result<Vec<_>, _>>()?;
        let mut applied = self
            .transact_each(items, "TransactWriteItems aggregated record")
            .await?;
        for (write, applied) in writes.iter().zip(applied.iter_mut()) {
            if !*applied {
                *applied = self.applied_earlier(write).await?;
            }
        }
        Ok(applied)
    }

    #[instrument(skip(self, item), fields(table = %self.table, sort_key = %item.sort_key))]
    async fn reject_malformed(
        &self,
        item: &MalformedItem,
        reason: &str,
        expires_at: Option<Instant>,
        now: Instant,
    ) -> Result<bool, PortError> {
        let mut expr = Update::new();
        expr.set(attr::METERING_STATUS, s(AggregatedStatus::Error.as_str()))
            .set(attr::METERING_STATUS_REASON, s(reason))
            .expiry(expires_at)
            .remove(attr::METERING_PENDING)
            .stamp(now);
        let pending = expr.name(attr::METERING_PENDING);
        let condition = format!("attribute_exists({pending})");
        self.record_key(&item.license_arn, &item.sort_key)
            .update(
                &self.client,
                &expr,
                Some(condition),
                "UpdateItem aggregated reject_malformed",
            )
            .await
    }

    #[instrument(skip(self, live), fields(table = %self.table))]
    async fn stray_pending_page(
        &self,
        live: &[HourBucket],
        cursor: Option<Cursor>,
    ) -> Result<Page<AggregatedRecord>, PortError> {
        let mut request = self
            .client
            .scan()
            .table_name(&self.table)
            .index_name(attr::METERING_PENDING_INDEX)
            .set_limit(self.page_limit);
        if let Some((filter, names, values)) = not_live_filter(live) {
            request = request
                .filter_expression(filter)
                .set_expression_attribute_names(Some(names))
                .set_expression_attribute_values(Some(values));
        }
        let page = one_page(
            "aggregated stray_pending_page",
            "Scan aggregated metering_pending",
            cursor,
            |start| request.set_exclusive_start_key(start).send(),
        )
        .await?;
        Ok(self.record_page(page))
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

//! [`UsageStore`] over [`MemoryTables`], and the reference writer's row shape for tests.

use std::collections::{BTreeMap, BTreeSet};

use async_trait::async_trait;

use super::faults::StoreOp;
use super::page::paginate;
use super::tables::{MemoryTables, TableKey};
use crate::items::ingestion::judge_repeat;
use crate::items::size::raw_row_size;
use crate::items::{
    INGESTION_MARKER_ROW, IngestionWrite, MAX_PARTITION_KEY_BYTES, MAX_SORT_KEY_BYTES, check_item,
    set_expiry,
};
use crate::model::{Attr, GroupKey, RawUsageRow, attr};
use crate::outcomes::Table;
use crate::ports::{
    Cursor, IngestOutcome, NewUsageRow, Page, PendingRawRef, PortError, RowClaim, RowFinal,
    StrayPending, UsageStore,
};
use crate::stamp::AuditStamp;
use crate::sync::lock;
use crate::time::{HourBucket, Instant, parse_usage_timestamp};

/// A pending raw row in the reference writer's shape (sort key
/// `<account>#<dimension>#<timestamp>` with the timestamp text exactly as given, no
/// audit stamps), for tests. `meteringPending` is the timestamp's hour bucket, or its
/// first 13 characters when it does not parse (a malformed row a seller could write).
pub fn reference_row(
    license_arn: &str,
    account: &str,
    dimension: &str,
    timestamp: &str,
    quantity: i64,
) -> RawUsageRow {
    let pending = match parse_usage_timestamp(timestamp) {
        Ok(t) => HourBucket::containing(t).to_string(),
        Err(_) => timestamp.chars().take(13).collect(),
    };
    RawUsageRow {
        license_arn: license_arn.to_string(),
        sort_key: format!("{account}#{dimension}#{timestamp}"),
        attrs: BTreeMap::from([
            (
                attr::CUSTOMER_ACCOUNT.to_string(),
                Attr::S(account.to_string()),
            ),
            (attr::DIMENSION.to_string(), Attr::S(dimension.to_string())),
            (attr::TIMESTAMP.to_string(), Attr::S(timestamp.to_string())),
            (attr::QUANTITY.to_string(), Attr::N(quantity.to_string())),
            (attr::METERING_PENDING.to_string(), Attr::S(pending)),
        ]),
    }
}

/// [`UsageStore`] over [`MemoryTables`].
///
/// - `pending_page`: rows whose `meteringPending` is the string `hour` (a non-string
///   value keeps a row out of the sparse index, as in DynamoDB), ordered by
///   (license, sort key), paged by the tables' page size.
/// - `finalize_row`: sets `meteringStatus` (and `meteringStatusReason`, removed when
///   `None`), `expiresAt` (removed when `None`) and `finalWriteId`, removes
///   `meteringPending`, stamps `updatedAt`, only if the row exists,
///   still has `meteringPending` and its `aggregatedInto` is as the `RowClaim` says;
///   otherwise `Ok(true)` when the row carries the write's `finalWriteId` (an earlier
///   attempt applied), else `Ok(false)`.
/// - `put_row`: writes the [`IngestionWrite`] (row and event marker) together, or
///   neither when either key exists, and then answers what [`judge_repeat`] makes of
///   the marker and the row it names (a duplicate or a conflict); refuses what
///   `IngestionWrite::new` refuses (an empty event id, a `#` in a key part).
/// - Every write refuses an item over DynamoDB's 400 KB ([`crate::items::size`]) as
///   [`PortError::Failed`], changing nothing. Rows seeded with
///   [`MemoryTables::insert_raw_row`] are not checked (a seller's writer is not ours).
/// - Every call naming a key longer than DynamoDB takes (a partition key over
///   [`MAX_PARTITION_KEY_BYTES`], a sort key or sort-key prefix over
///   [`MAX_SORT_KEY_BYTES`]) is refused whole, as DynamoDB refuses it with a
///   `ValidationException`: [`PortError::Failed`], as the DynamoDB adapter reports that
///   exception, on every retry. `put_row` refuses such a row before any call, as
///   `IngestionWrite::new` does for the adapter too.
#[derive(Debug, Clone, Default)]
pub struct MemoryUsageStore {
    pub(crate) tables: MemoryTables,
}

impl MemoryTables {
    /// A usage-store handle on these tables.
    pub fn usage_store(&self) -> MemoryUsageStore {
        MemoryUsageStore {
            tables: self.clone(),
        }
    }
}

impl MemoryUsageStore {
    /// A store on fresh tables (use [`MemoryTables::usage_store`] to share them).
    pub fn new() -> Self {
        Self::default()
    }

    /// The tables behind this store (for helpers and the matching aggregated store).
    pub fn tables(&self) -> &MemoryTables {
        &self.tables
    }
}

/// Refuses, as DynamoDB does, a call of `operation` naming a partition key or a sort key
/// (or the prefix a query's sort-key condition names) longer than DynamoDB takes: the
/// [`PortError::Failed`] the DynamoDB adapter reports its `ValidationException` as.
fn check_keys(operation: &'static str, license_arn: &str, sort_key: &str) -> Result<(), PortError> {
    let message = if license_arn.len() > MAX_PARTITION_KEY_BYTES {
        format!(
            "Size of hashkey has exceeded the maximum size limit of {MAX_PARTITION_KEY_BYTES} bytes"
        )
    } else if sort_key.len() > MAX_SORT_KEY_BYTES {
        format!(
            "Aggregated size of all range keys has exceeded the size limit of {MAX_SORT_KEY_BYTES} bytes"
        )
    } else {
        return Ok(());
    };
    Err(PortError::Failed {
        operation,
        message: format!(
            "ValidationException: One or more parameter values were invalid: {message}"
        ),
    })
}

/// Refuses a usage-table item DynamoDB would refuse: over 400 KB, keys included.
pub(crate) fn check_row(row: &RawUsageRow, operation: &'static str) -> Result<(), PortError> {
    check_item(
        format_args!("{}/{}", row.license_arn, row.sort_key),
        raw_row_size(row),
    )
    .map_err(|e| e.port_error(operation))
}

#[async_trait]
impl UsageStore for MemoryUsageStore {
    async fn pending_page(
        &self,
        hour: HourBucket,
        cursor: Option<Cursor>,
    ) -> Result<Page<PendingRawRef>, PortError> {
        self.tables.faults.check(StoreOp::UsagePendingPage)?;
        let wanted = Attr::S(hour.to_string());
        let items: Vec<(TableKey, PendingRawRef)> = lock(&self.tables.state)
            .usage
            .iter()
            .filter(|(_, row)| row.attrs.get(attr::METERING_PENDING) == Some(&wanted))
            .map(|(key, row)| {
                let projected =
                    |name: &str| row.attrs.get(name).and_then(Attr::as_s).map(str::to_string);
                (
                    key.clone(),
                    PendingRawRef {
                        license_arn: row.license_arn.clone(),
                        sort_key: row.sort_key.clone(),
                        customer_aws_account_id: projected(attr::CUSTOMER_ACCOUNT),
                        dimension: projected(attr::DIMENSION),
                    },
                )
            })
            .collect();
        paginate(items, cursor, self.tables.page_size, "usage pending_page")
    }

    async fn group_rows(&self, key: &GroupKey) -> Result<Vec<RawUsageRow>, PortError> {
        self.tables.faults.check(StoreOp::UsageGroupRows)?;
        let prefix = key.usage_sort_key_prefix();
        check_keys("group_rows", &key.license_arn, &prefix)?;
        Ok(lock(&self.tables.state)
            .usage
            .values()
            .filter(|row| row.license_arn == key.license_arn && row.sort_key.starts_with(&prefix))
            .cloned()
            .collect())
    }

    async fn get_row(
        &self,
        license_arn: &str,
        sort_key: &str,
    ) -> Result<Option<RawUsageRow>, PortError> {
        self.tables.faults.check(StoreOp::UsageGetRow)?;
        check_keys("get_row", license_arn, sort_key)?;
        Ok(self.tables.raw_row(license_arn, sort_key))
    }

    async fn finalize_row(
        &self,
        license_arn: &str,
        sort_key: &str,
        claim: RowClaim<'_>,
        outcome: RowFinal,
        now: Instant,
    ) -> Result<bool, PortError> {
        self.tables.faults.check(StoreOp::UsageFinalizeRow)?;
        check_keys("finalize_row", license_arn, sort_key)?;
        let RowFinal {
            status,
            reason,
            expires_at,
            write_id,
        } = outcome;
        let key = (license_arn.to_string(), sort_key.to_string());
        let mut state = self.tables.write(|| vec![(Table::Usage, key.clone())]);
        let Some(row) = state.usage.get_mut(&key) else {
            return Ok(false);
        };
        let claim_ok = match (claim, row.attrs.get(attr::AGGREGATED_INTO)) {
            (RowClaim::Counted(record), Some(Attr::S(into))) => into == record,
            (RowClaim::Counted(_), _) => false,
            (RowClaim::Uncounted, found) => found.is_none(),
        };
        if !claim_ok || !row.is_pending() {
            // Applied by an earlier attempt of this very write (its answer was lost).
            return Ok(write_id.is(row.attrs.get(attr::FINAL_WRITE_ID)));
        }
        // Applied to a copy first: DynamoDB refuses an update that would make the item
        // larger than 400 KB, and then nothing changes.
        let mut updated = row.clone();
        updated.attrs.remove(attr::METERING_PENDING);
        updated.attrs.insert(
            attr::METERING_STATUS.to_string(),
            Attr::S(status.as_str().to_string()),
        );
        match reason {
            Some(reason) => {
                updated.attrs.insert(
                    attr::METERING_STATUS_REASON.to_string(),
                    Attr::S(reason.as_str().to_string()),
                );
            }
            None => {
                updated.attrs.remove(attr::METERING_STATUS_REASON);
            }
        }
        set_expiry(&mut updated.attrs, expires_at);
        updated
            .attrs
            .insert(attr::FINAL_WRITE_ID.to_string(), write_id.attr());
        AuditStamp::at(now).apply(&mut updated.attrs);
        check_row(&updated, "finalize_row")?;
        *row = updated;
        Ok(true)
    }

    async fn put_row(&self, row: &NewUsageRow, now: Instant) -> Result<IngestOutcome, PortError> {
        self.tables.faults.check(StoreOp::UsagePutRow)?;
        // The row and its event's marker, both or neither (one transaction in DynamoDB,
        // each conditional on its item not existing).
        let IngestionWrite { row: item, marker } =
            IngestionWrite::new(row, now).map_err(|e| e.port_error("put_row"))?;
        let key = (item.license_arn.clone(), item.sort_key.clone());
        let marker_key = (marker.license_arn.clone(), marker.sort_key.clone());
        let mut state = self.tables.write(|| {
            vec![
                (Table::Usage, key.clone()),
                (Table::Usage, marker_key.clone()),
            ]
        });
        // DynamoDB validates the items' sizes before it evaluates any condition.
        check_row(&item, "put_row")?;
        check_row(&marker, "put_row")?;
        let found_marker = state.usage.get(&marker_key);
        if found_marker.is_some() || state.usage.contains_key(&key) {
            // What the first write stored: the row its marker names, else the row at
            // this key (written before markers existed).
            let first_key = match found_marker
                .and_then(|m| m.attrs.get(INGESTION_MARKER_ROW))
                .and_then(Attr::as_s)
            {
                Some(sort_key) => (item.license_arn.clone(), sort_key.to_string()),
                None => key,
            };
            return Ok(judge_repeat(row, found_marker, state.usage.get(&first_key)));
        }
        state.usage.insert(key, item);
        state.usage.insert(marker_key, marker);
        Ok(IngestOutcome::Created)
    }

    async fn stray_pending_page(
        &self,
        live: &[HourBucket],
        cursor: Option<Cursor>,
    ) -> Result<Page<StrayPending>, PortError> {
        self.tables.faults.check(StoreOp::UsageStrayPendingPage)?;
        let live: BTreeSet<String> = live.iter().map(ToString::to_string).collect();
        let items: Vec<(TableKey, StrayPending)> = lock(&self.tables.state)
            .usage
            .iter()
            .filter_map(|(key, row)| match row.attrs.get(attr::METERING_PENDING) {
                Some(Attr::S(value)) if !live.contains(value) => Some((
                    key.clone(),
                    StrayPending {
                        license_arn: row.license_arn.clone(),
                        sort_key: row.sort_key.clone(),
                        metering_pending: value.clone(),
                    },
                )),
                _ => None,
            })
            .collect();
        paginate(
            items,
            cursor,
            self.tables.page_size,
            "usage stray_pending_page",
        )
    }

    async fn repair_pending(
        &self,
        license_arn: &str,
        sort_key: &str,
        from: &str,
        hour: HourBucket,
        now: Instant,
    ) -> Result<bool, PortError> {
        self.tables.faults.check(StoreOp::UsageRepairPending)?;
        check_keys("repair_pending", license_arn, sort_key)?;
        let key = (license_arn.to_string(), sort_key.to_string());
        let mut state = self.tables.write(|| vec![(Table::Usage, key.clone())]);
        let Some(row) = state.usage.get_mut(&key) else {
            return Ok(false);
        };
        if row.attrs.get(attr::METERING_PENDING) != Some(&Attr::S(from.to_string())) {
            return Ok(false);
        }
        let mut updated = row.clone();
        updated.attrs.insert(
            attr::METERING_PENDING.to_string(),
            Attr::S(hour.to_string()),
        );
        // Pending again: no expiry (a seller's row that set one is refused later).
        updated.attrs.remove(attr::EXPIRES_AT);
        AuditStamp::at(now).apply(&mut updated.attrs);
        check_row(&updated, "repair_pending")?;
        *row = updated;
        Ok(true)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::memory::fixtures::*;
    use crate::model::RawStatus;
    #[tokio::test]
    async fn put_row_writes_dynamodb_shapes_and_is_idempotent_on_the_event_id() {
        let store = MemoryUsageStore::new();
        let now = t("2026-11-30T10:20:00Z");
        let mut row = new_row("evt-1", "2026-11-30T10:15:42Z", 42);
        row.allocations = Some(team_allocation(42));
        row.product_code = Some("prod".into());
        assert_eq!(
            store.put_row(&row, now).await.unwrap(),
            IngestOutcome::Created
        );
        let sort_key = "111122223333#requests#2026-11-30T10:15:42Z#evt-1";
        let stored = store.get_row(LICENSE, sort_key).await.unwrap().unwrap();
        let a = &stored.attrs;
        assert_eq!(a["customerAWSAccountId"], Attr::S(ACCOUNT.into()));
        assert_eq!(a["dimension"], Attr::S("requests".into()));
        assert_eq!(a["timestamp"], Attr::S("2026-11-30T10:15:42Z".into()));
        assert_eq!(a["quantity"], Attr::N("42".into()));
        assert_eq!(a["meteringPending"], Attr::S("2026-11-30T10".into()));
        assert_eq!(a["productCode"], Attr::S("prod".into()));
        assert_eq!(a["createdAt"], Attr::S("2026-11-30T10:20:00Z".into()));
        let Attr::L(allocations) = &a["usageAllocations"] else {
            panic!("usageAllocations is not a list")
        };
        let Attr::M(first) = &allocations[0] else {
            panic!("allocation is not a map")
        };
        assert_eq!(first["allocatedUsageQuantity"], Attr::N("42".into()));
        assert!(!a.contains_key("meteringStatus"));

        // A retry with the same event id changes nothing; other usage under it is a
        // conflict that changes nothing either; a new id at the same second is kept.
        assert_eq!(
            store
                .put_row(&row, t("2026-11-30T10:21:00Z"))
                .await
                .unwrap(),
            IngestOutcome::Duplicate
        );
        let mut retry = row.clone();
        retry.quantity = 7;
        assert!(matches!(
            store
                .put_row(&retry, t("2026-11-30T10:21:00Z"))
                .await
                .unwrap(),
            IngestOutcome::Conflict(_)
        ));
        assert_eq!(
            store.get_row(LICENSE, sort_key).await.unwrap().unwrap(),
            stored
        );
        let same_second = new_row("evt-2", "2026-11-30T10:15:42Z", 1);
        assert_eq!(
            store.put_row(&same_second, now).await.unwrap(),
            IngestOutcome::Created
        );
        // Two rows, each with its event's idempotency marker (`event#<eventId>`).
        assert_eq!(store.tables().raw_rows().len(), 4);
    }

    #[tokio::test]
    async fn pending_index_pages_and_follows_the_cursor() {
        let tables = MemoryTables::with_page_size(2);
        let store = tables.usage_store();
        for (i, minute) in ["00", "10", "20", "30", "40"].iter().enumerate() {
            let row = new_row(&format!("e{i}"), &format!("2026-11-30T10:{minute}:00Z"), 1);
            store
                .put_row(&row, t("2026-11-30T11:00:00Z"))
                .await
                .unwrap();
        }
        // Another hour, a finalized row and a non-string marker stay out of the index.
        store
            .put_row(
                &new_row("other-hour", "2026-11-30T11:00:00Z", 1),
                t("2026-11-30T11:00:00Z"),
            )
            .await
            .unwrap();
        let mut odd = reference_row(LICENSE, ACCOUNT, "requests", "2026-11-30T10:50:00Z", 1);
        odd.attrs
            .insert("meteringPending".into(), Attr::N("2026113010".into()));
        tables.insert_raw_row(odd);

        let pages = all_pages(|cursor| store.pending_page(hour("2026-11-30T10"), cursor)).await;
        assert_eq!(pages.len(), 3);
        assert!(pages.iter().all(|page| page.items.len() <= 2));
        let seen: Vec<_> = pages.into_iter().flat_map(|page| page.items).collect();
        assert_eq!(seen.len(), 5);
        assert!(
            seen.iter()
                .all(|r| r.customer_aws_account_id.as_deref() == Some(ACCOUNT))
        );
        assert!(
            seen.iter()
                .all(|r| r.dimension.as_deref() == Some("requests"))
        );
        let keys: Vec<_> = seen.iter().map(|r| r.sort_key.clone()).collect();
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(keys, sorted);

        // A full last page carries a cursor to an empty page, as DynamoDB does.
        let tables = MemoryTables::with_page_size(5);
        let exact = tables.usage_store();
        for i in 0..5 {
            exact
                .put_row(
                    &new_row(&format!("x{i}"), "2026-11-30T10:00:00Z", 1),
                    t("2026-11-30T11:00:00Z"),
                )
                .await
                .unwrap();
        }
        let first = exact
            .pending_page(hour("2026-11-30T10"), None)
            .await
            .unwrap();
        assert_eq!(first.items.len(), 5);
        let last = exact
            .pending_page(hour("2026-11-30T10"), first.next)
            .await
            .unwrap();
        assert_eq!(
            last,
            Page {
                items: vec![],
                malformed: vec![],
                next: None
            }
        );

        let bad = exact
            .pending_page(hour("2026-11-30T10"), Some("not a cursor".into()))
            .await;
        assert!(matches!(bad, Err(PortError::Failed { .. })));
    }

    #[tokio::test]
    async fn group_rows_select_the_sort_key_range_in_any_status() {
        let tables = MemoryTables::new();
        let store = tables.usage_store();
        tables.insert_raw_row(reference_row(
            LICENSE,
            ACCOUNT,
            "requests",
            "2026-11-30T10:00:00",
            1,
        ));
        tables.insert_raw_row(reference_row(
            LICENSE,
            ACCOUNT,
            "requests",
            "2026-11-30T10:59:59Z",
            2,
        ));
        tables.insert_raw_row(reference_row(
            LICENSE,
            ACCOUNT,
            "requests",
            "2026-11-30T11:00:00Z",
            3,
        ));
        tables.insert_raw_row(reference_row(
            LICENSE,
            ACCOUNT,
            "requestsX",
            "2026-11-30T10:30:00Z",
            4,
        ));
        tables.insert_raw_row(reference_row(
            LICENSE,
            "999988887777",
            "requests",
            "2026-11-30T10:30:00Z",
            5,
        ));
        tables.insert_raw_row(reference_row(
            "arn:other",
            ACCOUNT,
            "requests",
            "2026-11-30T10:30:00Z",
            6,
        ));
        store
            .finalize_row(
                LICENSE,
                "111122223333#requests#2026-11-30T10:00:00",
                RowClaim::Uncounted,
                RowFinal::new(RawStatus::Aggregated, None),
                t("2026-11-30T12:00:00Z"),
            )
            .await
            .unwrap();
        let rows = store
            .group_rows(&group("requests", "2026-11-30T10"))
            .await
            .unwrap();
        let quantities: Vec<_> = rows.iter().map(|r| r.attrs["quantity"].clone()).collect();
        assert_eq!(quantities, vec![Attr::N("1".into()), Attr::N("2".into())]);
    }

    #[tokio::test]
    async fn a_key_longer_than_dynamodb_takes_is_refused_as_its_validation_exception() {
        let tables = MemoryTables::new();
        let store = tables.usage_store();
        let row = reference_row(LICENSE, ACCOUNT, "requests", "2026-11-30T10:00:00Z", 1);
        tables.insert_raw_row(row.clone());
        let refused = |result: Result<_, PortError>, operation: &str, limit: usize| {
            let Err(PortError::Failed {
                operation: op,
                message,
            }) = result
            else {
                panic!("{operation}: not refused as DynamoDB refuses it: {result:?}");
            };
            assert_eq!(op, operation);
            assert!(
                message.starts_with("ValidationException: ")
                    && message.contains(&format!("{limit} bytes")),
                "{message}"
            );
        };
        // At the limits: read as any key is.
        let longest_sort_key = "s".repeat(MAX_SORT_KEY_BYTES);
        let longest_license = "l".repeat(MAX_PARTITION_KEY_BYTES);
        assert_eq!(
            store.get_row(LICENSE, &longest_sort_key).await.unwrap(),
            None
        );
        assert_eq!(
            store
                .get_row(&longest_license, &row.sort_key)
                .await
                .unwrap(),
            None
        );
        // One byte over (UTF-8 bytes, not characters): refused, on every retry.
        let long_sort_key = format!("{}é", "s".repeat(MAX_SORT_KEY_BYTES - 1));
        let long_license = "l".repeat(MAX_PARTITION_KEY_BYTES + 1);
        for _ in 0..2 {
            refused(
                store.get_row(LICENSE, &long_sort_key).await.map(|_| ()),
                "get_row",
                MAX_SORT_KEY_BYTES,
            );
        }
        refused(
            store
                .get_row(&long_license, &row.sort_key)
                .await
                .map(|_| ()),
            "get_row",
            MAX_PARTITION_KEY_BYTES,
        );
        let final_write = RowFinal::new(RawStatus::Aggregated, None);
        let now = t("2026-11-30T12:00:00Z");
        refused(
            store
                .finalize_row(
                    LICENSE,
                    &long_sort_key,
                    RowClaim::Uncounted,
                    final_write,
                    now,
                )
                .await
                .map(|_| ()),
            "finalize_row",
            MAX_SORT_KEY_BYTES,
        );
        refused(
            store
                .repair_pending(
                    &long_license,
                    &row.sort_key,
                    "x",
                    hour("2026-11-30T10"),
                    now,
                )
                .await
                .map(|_| ()),
            "repair_pending",
            MAX_PARTITION_KEY_BYTES,
        );
        let mut long_group = group("requests", "2026-11-30T10");
        long_group.license_arn = long_license.clone();
        refused(
            store.group_rows(&long_group).await.map(|_| ()),
            "group_rows",
            MAX_PARTITION_KEY_BYTES,
        );
        // The refusals wrote nothing.
        assert_eq!(tables.raw_rows(), vec![row]);
    }
}

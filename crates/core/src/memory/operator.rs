//! [`OperatorStore`] over [`MemoryTables`]: the operator's pages of both tables, its
//! replay and its corrections, with the same conditions as the DynamoDB adapter.

use async_trait::async_trait;

use super::page::paginate;
use super::tables::{MemoryTables, aggregated_key};
use crate::corrections::Correction;
use crate::model::{AggregatedRecord, AggregatedStatus, GroupKey, RawUsageRow};
use crate::outcomes::Table;
use crate::ports::{Cursor, MalformedItem, OperatorStore, Page, PortError};
use crate::sync::lock;
use crate::time::{Instant, format_instant};

/// The operator's view of [`MemoryTables`].
///
/// - `raw_rows_page` / `records_page`: key-ordered pages of the tables' page size;
///   unreadable aggregated items come in `malformed` on the first page.
/// - `replay`: `Error` → `Pending` as [`OperatorStore::replay`] says (its `expiresAt`
///   removed), only while the record is `Error` with the attempt count read.
#[derive(Debug, Clone)]
pub struct MemoryOperatorStore {
    pub(crate) tables: MemoryTables,
}

impl MemoryTables {
    /// An operator-store handle on these tables.
    pub fn operator_store(&self) -> MemoryOperatorStore {
        MemoryOperatorStore {
            tables: self.clone(),
        }
    }
}

fn of_license<'a>(license_arn: Option<&'a str>) -> impl Fn(&(String, String)) -> bool + 'a {
    move |(pk, _)| license_arn.is_none_or(|l| l == pk)
}

#[async_trait]
impl OperatorStore for MemoryOperatorStore {
    async fn raw_rows_page(
        &self,
        license_arn: Option<&str>,
        cursor: Option<Cursor>,
    ) -> Result<Page<RawUsageRow>, PortError> {
        let rows: Vec<_> = lock(&self.tables.state)
            .usage
            .iter()
            .filter(|(k, _)| of_license(license_arn)(k))
            .map(|(k, row)| (k.clone(), row.clone()))
            .collect();
        paginate(
            rows,
            cursor,
            self.tables.page_size,
            "operator raw_rows_page",
        )
    }

    async fn records_page(
        &self,
        license_arn: Option<&str>,
        cursor: Option<Cursor>,
    ) -> Result<Page<AggregatedRecord>, PortError> {
        let state = lock(&self.tables.state);
        let records: Vec<_> = state
            .aggregated
            .iter()
            .filter(|(k, _)| of_license(license_arn)(k))
            .map(|(k, stored)| (k.clone(), stored.record.clone()))
            .collect();
        let first = cursor.is_none();
        let mut page = paginate(
            records,
            cursor,
            self.tables.page_size,
            "operator records_page",
        )?;
        if first {
            page.malformed = state
                .malformed_aggregated
                .iter()
                .filter(|(k, _)| of_license(license_arn)(k))
                .map(|((pk, sk), m)| MalformedItem {
                    license_arn: pk.clone(),
                    sort_key: sk.clone(),
                    problem: m.problem.clone(),
                })
                .collect();
        }
        Ok(page)
    }

    async fn replay(&self, record: &AggregatedRecord, now: Instant) -> Result<bool, PortError> {
        let key = aggregated_key(&record.key);
        let mut state = self.tables.write(|| vec![(Table::Aggregated, key.clone())]);
        let Some(stored) = state.aggregated.get_mut(&key) else {
            return Ok(false);
        };
        let current = &mut stored.record;
        if current.status != AggregatedStatus::Error
            || current.attempt_count != record.attempt_count
        {
            return Ok(false);
        }
        current.status = AggregatedStatus::Pending;
        current.status_reason = None;
        current.in_flight_until = None;
        current.claim_id = None;
        current.sent_quantity = Some(current.sent_quantity.unwrap_or(current.quantity));
        // Pending again: DynamoDB must not delete it before it is billed.
        stored.expires_at = None;
        stored.stamp.updated_at = format_instant(now);
        Ok(true)
    }

    async fn correction(
        &self,
        key: &GroupKey,
    ) -> Result<Option<(AggregatedRecord, Option<Correction>)>, PortError> {
        Ok(lock(&self.tables.state)
            .aggregated
            .get(&aggregated_key(key))
            .map(|stored| (stored.record.clone(), stored.correction.clone())))
    }

    async fn corrections_page(
        &self,
        cursor: Option<Cursor>,
    ) -> Result<Page<(AggregatedRecord, Correction)>, PortError> {
        let corrected: Vec<_> = lock(&self.tables.state)
            .aggregated
            .iter()
            .filter_map(|(k, stored)| {
                let c = stored.correction.clone()?;
                Some((k.clone(), (stored.record.clone(), c)))
            })
            .collect();
        paginate(
            corrected,
            cursor,
            self.tables.page_size,
            "operator corrections_page",
        )
    }

    async fn record_correction(
        &self,
        key: &GroupKey,
        expected: Option<&str>,
        correction: &Correction,
    ) -> Result<bool, PortError> {
        let table_key = aggregated_key(key);
        let mut state = self
            .tables
            .write(|| vec![(Table::Aggregated, table_key.clone())]);
        let Some(stored) = state.aggregated.get_mut(&table_key) else {
            return Ok(false);
        };
        let holds = stored.correction.as_ref().map(|c| c.client_token.as_str());
        let billed =
            crate::outcomes::billed(stored.record.status, stored.record.status_reason.as_deref());
        if !billed || holds != expected {
            return Ok(false);
        }
        stored.correction = Some(correction.clone());
        Ok(true)
    }
}

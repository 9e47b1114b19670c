//! What the operator tool reads, replays and corrects through: whole tables, page by
//! page, and one record's correction.

use async_trait::async_trait;

use crate::corrections::Correction;
use crate::model::{AggregatedRecord, GroupKey, RawUsageRow};
use crate::time::Instant;

use super::{Cursor, Page, PortError};

/// What the operator tool (`awsmp`) reads of the two metering tables, and its one
/// write. Reads page through one license's items (a query by partition key) or the
/// whole table (a scan: the operator pays one read of the table); the Lambdas never
/// use this port.
#[async_trait]
pub trait OperatorStore: Send + Sync {
    /// One page of raw usage items (ingestion markers included: the caller skips them),
    /// of `license_arn` only when given.
    async fn raw_rows_page(
        &self,
        license_arn: Option<&str>,
        cursor: Option<Cursor>,
    ) -> Result<Page<RawUsageRow>, PortError>;

    /// One page of aggregated records, of `license_arn` only when given; items that
    /// cannot be read as records in `malformed`.
    async fn records_page(
        &self,
        license_arn: Option<&str>,
        cursor: Option<Cursor>,
    ) -> Result<Page<AggregatedRecord>, PortError>;

    /// `awsmp replay`: puts an `Error` record back in the submitter's queue with the
    /// quantity it holds (`Pending`, `meteringPending` = its hour, reason and `expiresAt`
    /// removed, `sentQuantity` kept or set to its quantity so no late row folds in), only
    /// while it is still `Error` with the attempt count read. `Ok(false)` when it changed.
    async fn replay(&self, record: &AggregatedRecord, now: Instant) -> Result<bool, PortError>;

    /// One record and its correction (`awsmp adjust`); `None` when the table has no
    /// such record.
    async fn correction(
        &self,
        key: &GroupKey,
    ) -> Result<Option<(AggregatedRecord, Option<Correction>)>, PortError>;

    /// One page of the records that carry a correction (`awsmp adjustments`: a scan).
    async fn corrections_page(
        &self,
        cursor: Option<Cursor>,
    ) -> Result<Page<(AggregatedRecord, Correction)>, PortError>;

    /// Writes `correction` on a billed record (`Success`, or `DuplicateRecord` billed by
    /// an earlier send of ours: `outcomes::billed`), only while the record's
    /// correction is the one with client token `expected` (`None`: it has none).
    /// `Ok(false)` when the record is not billed or holds another correction.
    async fn record_correction(
        &self,
        key: &GroupKey,
        expected: Option<&str>,
        correction: &Correction,
    ) -> Result<bool, PortError>;
}

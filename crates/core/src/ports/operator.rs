//! What the operator tool reads and replays through: whole tables, page by page.

use async_trait::async_trait;

use crate::model::{AggregatedRecord, RawUsageRow};
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
}

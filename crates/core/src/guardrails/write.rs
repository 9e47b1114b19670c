//! The write-time check every writer of raw usage shares (`awsmp usage put`/`import`,
//! `awsmp_usage::Meter`): a row is written only if the aggregator would count it;
//! otherwise the writer gets the reason code the aggregator would give. And only into a
//! deployment that aggregates raw usage at all ([`accepts_raw_usage`]).

use crate::guardrails::{GuardrailContext, validate_row};
use crate::items::{IngestionWrite, ItemError};
use crate::model::ReasonCode;
use crate::ports::{IngestOutcome, NewUsageRow, PortError, UsageStore};
use crate::submit::DeploymentMode;
use crate::time::Instant;

/// Why a usage row is not written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RowProblem {
    /// The aggregator would reject it with this reason code.
    #[error("{0}")]
    Rejected(ReasonCode),
    /// It cannot be written at all (empty event id, `#` in a key part).
    #[error("{0}")]
    Unwritable(String),
}

/// Raw usage written into a direct-submit deployment: its discoverer, aggregator and
/// cleanup are not deployed, so the row would stay pending and never be billed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "the stack is deployed with DeploymentMode=direct-submit: nothing aggregates raw usage there, so a usage row would stay pending and never be billed. Nothing was written. Write finalized hourly records into the aggregated-usage table instead (docs/operate.md, \"Direct-submit mode\"), or deploy the stack with DeploymentMode=full"
)]
pub struct DirectSubmitRefusal;

/// Whether a deployment in `mode` takes raw usage rows (only `full` aggregates them).
pub fn accepts_raw_usage(mode: DeploymentMode) -> Result<(), DirectSubmitRefusal> {
    match mode {
        DeploymentMode::Full => Ok(()),
        DeploymentMode::DirectSubmit => Err(DirectSubmitRefusal),
    }
}

/// The write for `row` at `now`, or why the aggregator would not count it (checked
/// exactly as it checks a stored row, against the stack's product code).
pub fn check_row(
    row: &NewUsageRow,
    ctx: &GuardrailContext,
    now: Instant,
) -> Result<IngestionWrite, RowProblem> {
    let write = IngestionWrite::new(row, now)
        .map_err(|e: ItemError| RowProblem::Unwritable(e.to_string()))?;
    validate_row(&write.row, ctx).map_err(RowProblem::Rejected)?;
    Ok(write)
}

/// Why [`write_checked`] wrote nothing.
#[derive(Debug, thiserror::Error)]
pub enum WriteRefused {
    /// The deployment aggregates no raw usage.
    #[error(transparent)]
    DirectSubmit(#[from] DirectSubmitRefusal),
    /// The row would be rejected, or cannot be stored.
    #[error(transparent)]
    Row(#[from] RowProblem),
    /// The table could not be written.
    #[error(transparent)]
    Store(#[from] PortError),
}

/// Writes `row` into a deployment in `mode` at `now`, only if it would be billed: the
/// deployment aggregates raw usage ([`accepts_raw_usage`]) and the aggregator would
/// count the row ([`check_row`]); then the idempotent ingestion write (the row and its
/// event's marker). The one write path of `awsmp_usage::Meter` and the HTTP usage API.
pub async fn write_checked(
    store: &dyn UsageStore,
    mode: DeploymentMode,
    row: &NewUsageRow,
    ctx: &GuardrailContext,
    now: Instant,
) -> Result<IngestOutcome, WriteRefused> {
    accepts_raw_usage(mode)?;
    check_row(row, ctx, now)?;
    Ok(store.put_row(row, now).await?)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::model::{Allocation, Tag};
    use crate::time::parse_usage_timestamp;

    #[test]
    fn gives_the_aggregators_reason_code_and_writes_nothing_for_a_bad_row() {
        let now = parse_usage_timestamp("2026-11-30T12:30:00Z").unwrap();
        let ctx = GuardrailContext::new(now, "prod");
        let good = NewUsageRow {
            license_arn: "arn:aws:license-manager::123456789012:license:l-1".into(),
            customer_aws_account_id: "111122223333".into(),
            dimension: "api".into(),
            timestamp: parse_usage_timestamp("2026-11-30T11:00:00Z").unwrap(),
            quantity: 3,
            allocations: None,
            product_code: None,
            event_id: "e-1".into(),
            timestamp_defaulted: false,
        };
        assert!(check_row(&good, &ctx, now).is_ok());
        let mut tags = good.clone();
        tags.allocations = Some(vec![Allocation {
            quantity: 3,
            tags: (0..6)
                .map(|i| Tag {
                    key: format!("k{i}"),
                    value: "v".into(),
                })
                .collect(),
        }]);
        assert_eq!(
            check_row(&tags, &ctx, now).unwrap_err(),
            RowProblem::Rejected(ReasonCode::TooManyTags)
        );
        let mut old = good.clone();
        old.timestamp = parse_usage_timestamp("2026-11-29T11:00:00Z").unwrap();
        assert_eq!(
            check_row(&old, &ctx, now).unwrap_err(),
            RowProblem::Rejected(ReasonCode::TimestampOutOfWindow)
        );
        let mut hash = good;
        hash.dimension = "a#b".into();
        assert!(matches!(
            check_row(&hash, &ctx, now),
            Err(RowProblem::Unwritable(_))
        ));
    }
}

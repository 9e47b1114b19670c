//! The write-time check every writer of raw usage shares (`awsmp usage put`/`import`,
//! `awsmp_usage::Meter`, the usage API): a row is written only if the aggregator would
//! count it and its hour's record can still be sent ([`super::sendable`]); otherwise
//! the writer gets the reason code the aggregator would give, or why the record can no
//! longer be sent. And only into a deployment that aggregates raw usage at all
//! ([`accepts_raw_usage`]). A refused event whose id was written before (a retry after
//! the window closed) is answered with what that write recorded, never "refused".

use crate::guardrails::sendable::{Unsendable, check_sendable};
use crate::guardrails::{GuardrailContext, validate_row};
use crate::items::ingestion::judge_repeat;
use crate::items::{INGESTION_MARKER_ROW, IngestionWrite, ItemError, ingestion_marker_sort_key};
use crate::model::{Attr, ReasonCode};
use crate::ports::{IngestOutcome, NewUsageRow, PortError, UsageStore};
use crate::submit::DeploymentMode;
use crate::time::Instant;

/// Why a usage row is not written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RowProblem {
    /// The aggregator would reject it with this reason code.
    #[error("{0}")]
    Rejected(ReasonCode),
    /// It cannot be written at all (empty event id, `#` in a key part, a key longer
    /// than DynamoDB takes, an item too large).
    #[error("{0}")]
    Unwritable(String),
    /// The aggregator would count it, but its hour's record can no longer be sent
    /// (reason code `TimestampOutOfWindow`, the message says why).
    #[error(transparent)]
    Unsendable(#[from] Unsendable),
}

impl RowProblem {
    /// Whether the row is refused for the time it is judged at, not for what it says:
    /// its hour's record can no longer be sent, or its timestamp left the window. A
    /// retry of a write that took effect earlier is refused so once the clock moves on,
    /// and is answered what that write recorded instead. A row refused for its content
    /// (a malformed tag, an unknown dimension) is refused whatever was written before.
    pub fn is_the_clocks(&self) -> bool {
        matches!(
            self,
            RowProblem::Unsendable(_) | RowProblem::Rejected(ReasonCode::TimestampOutOfWindow)
        )
    }

    /// The reason code the writer reports: the aggregator's, or `TimestampOutOfWindow`
    /// for usage whose record can no longer be sent; `None` for an unwritable row.
    pub fn reason(&self) -> Option<ReasonCode> {
        match self {
            RowProblem::Rejected(code) => Some(*code),
            RowProblem::Unsendable(_) => Some(ReasonCode::TimestampOutOfWindow),
            RowProblem::Unwritable(_) => None,
        }
    }
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

/// Refuses a caller-chosen event id holding `#` (the sort-key separator): only a
/// CloudEvent's key ([`crate::items::ingestion::cloudevents_event_key`]) holds one, so
/// no caller's id can take a CloudEvent's key.
pub fn check_caller_event_id(event_id: &str) -> Result<(), RowProblem> {
    if event_id.contains('#') {
        return Err(RowProblem::Unwritable(
            ItemError::Separator {
                what: "event id",
                value: event_id.to_string(),
            }
            .to_string(),
        ));
    }
    Ok(())
}

/// The write for `row`, whose event id is the caller's own, at `now`, or why it is not
/// written: the id holds `#` ([`check_caller_event_id`]), the row cannot be stored, the
/// aggregator would not count it (checked exactly as it checks a stored row, against
/// the stack's product code), or its hour's record can no longer be sent.
pub fn check_row(
    row: &NewUsageRow,
    ctx: &GuardrailContext,
    now: Instant,
) -> Result<IngestionWrite, RowProblem> {
    check_caller_event_id(&row.event_id)?;
    check_keyed_row(row, ctx, now)
}

/// [`check_row`] for a row whose event id is a key the usage API made (a CloudEvent's).
pub(crate) fn check_keyed_row(
    row: &NewUsageRow,
    ctx: &GuardrailContext,
    now: Instant,
) -> Result<IngestionWrite, RowProblem> {
    let write = IngestionWrite::new(row, now)
        .map_err(|e: ItemError| RowProblem::Unwritable(e.to_string()))?;
    validate_row(&write.row, ctx).map_err(RowProblem::Rejected)?;
    check_sendable(row.timestamp, now)?;
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

/// Writes `row`, whose event id is the caller's own, into a deployment in `mode` at
/// `now`, only if it would be billed: the deployment aggregates raw usage
/// ([`accepts_raw_usage`]) and the row passes [`check_row`]; then the idempotent
/// ingestion write (the row and its event's marker). A row refused whose event id was
/// written before is judged as the repeat it is ([`judge_refused_repeat`]). The one
/// write path of `awsmp_usage::Meter` and the HTTP usage API.
pub async fn write_checked(
    store: &dyn UsageStore,
    mode: DeploymentMode,
    row: &NewUsageRow,
    ctx: &GuardrailContext,
    now: Instant,
) -> Result<IngestOutcome, WriteRefused> {
    accepts_raw_usage(mode)?;
    check_caller_event_id(&row.event_id)?;
    write_keyed(store, row, ctx, now).await
}

/// [`write_checked`] for a row whose event id is a key the usage API made.
pub(crate) async fn write_keyed(
    store: &dyn UsageStore,
    row: &NewUsageRow,
    ctx: &GuardrailContext,
    now: Instant,
) -> Result<IngestOutcome, WriteRefused> {
    match check_keyed_row(row, ctx, now) {
        Ok(_) => Ok(store.put_row(row, now).await?),
        Err(problem) if problem.is_the_clocks() => match judge_refused_repeat(store, row).await? {
            Some(outcome) => Ok(outcome),
            None => Err(problem.into()),
        },
        Err(problem) => Err(problem.into()),
    }
}

/// The verdict on a refused `row` whose event id was written before (a retry after the
/// clock passed the window, or the stack's checks changed): `duplicate` or `conflict`
/// with what that write recorded, whatever the refusal says now; `None` when the id was
/// never written. One read (the event's marker), only on refusal; its row too when the
/// usage differs, for the conflict's "recorded".
pub async fn judge_refused_repeat(
    store: &dyn UsageStore,
    row: &NewUsageRow,
) -> Result<Option<IngestOutcome>, PortError> {
    let Some(marker) = store
        .get_row(&row.license_arn, &ingestion_marker_sort_key(&row.event_id))
        .await?
    else {
        return Ok(None);
    };
    let outcome = judge_repeat(row, Some(&marker), None);
    if !matches!(outcome, IngestOutcome::Conflict(_)) {
        return Ok(Some(outcome));
    }
    let first = match marker.attrs.get(INGESTION_MARKER_ROW).and_then(Attr::as_s) {
        Some(key) => store.get_row(&row.license_arn, key).await?,
        None => None,
    };
    Ok(Some(judge_repeat(row, Some(&marker), first.as_ref())))
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

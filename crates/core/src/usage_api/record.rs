//! `POST /usage/events`: each event of a parsed batch checked and written exactly as
//! every other writer does ([`write_checked`]), and its verdict, in the batch's order.
//! Events with distinct keys are written concurrently; a repeated key (the same `id`,
//! or a CloudEvent's same `source` and `id`) waits for its earlier occurrence, so it is
//! judged against what that one wrote.

use std::collections::HashMap;

use futures_util::stream::{self, StreamExt};
use serde::Serialize;

use crate::guardrails::GuardrailContext;
use crate::guardrails::write::{DirectSubmitRefusal, RowProblem, WriteRefused, write_keyed};
use crate::model::ReasonCode;
use crate::ports::{IngestOutcome, PortError, UsageStore};
use crate::remedy;
use crate::submit::DeploymentMode;
use crate::time::Instant;

use super::envelope::{EventRefusal, PostedEvent};
use super::fate::{UsageView, recorded_content};

/// How many events of one batch are written at once (each a two-item transaction).
pub const WRITE_CONCURRENCY: usize = 16;

/// One event's verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "camelCase")]
pub enum Verdict {
    /// Written: the pipeline will bill it.
    #[serde(rename = "accepted")]
    Accepted {
        /// The event's id.
        id: String,
    },
    /// The id was written before with the same usage (a retry): nothing changed.
    #[serde(rename = "duplicate")]
    Duplicate {
        /// The event's id.
        id: String,
        /// What the first write recorded (its instant may be the first attempt's
        /// "when received"); `None` when its row was since deleted by retention or could
        /// not be read back just now.
        recorded: Option<UsageView>,
    },
    /// The id was written before with other usage: nothing was written.
    #[serde(rename = "conflict")]
    Conflict {
        /// The event's id.
        id: String,
        /// What the first write recorded; `None` when its row was since deleted.
        recorded: Option<UsageView>,
        /// What this event carries.
        this: UsageView,
        /// What differs, and what to do.
        message: String,
    },
    /// Refused: nothing was written.
    #[serde(rename = "rejected")]
    Rejected {
        /// The event's id, when it had one.
        id: Option<String>,
        /// The reason code.
        reason: String,
        /// The exception `BatchMeterUsage` would have raised, for the aggregator's
        /// reason codes that have one.
        #[serde(
            rename = "serverSideException",
            skip_serializing_if = "Option::is_none"
        )]
        server_side: Option<&'static str>,
        /// What is wrong and what to do.
        message: String,
    },
}

impl Verdict {
    fn rejected(id: Option<String>, refusal: EventRefusal) -> Self {
        Verdict::Rejected {
            id,
            reason: refusal.reason,
            server_side: refusal.code.and_then(remedy::server_side_pair),
            message: refusal.message,
        }
    }

    /// The verdict's name: `accepted`, `duplicate`, `conflict` or `rejected`.
    pub fn status(&self) -> &'static str {
        match self {
            Verdict::Accepted { .. } => "accepted",
            Verdict::Duplicate { .. } => "duplicate",
            Verdict::Conflict { .. } => "conflict",
            Verdict::Rejected { .. } => "rejected",
        }
    }
}

/// Why a whole batch got no verdicts.
#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    /// The stack is deployed in direct-submit mode: it takes no raw usage.
    #[error(transparent)]
    DirectSubmit(#[from] DirectSubmitRefusal),
    /// The usage table could not be written or read. Events before the failure may be
    /// written: a retry of the whole batch finds them `duplicate`.
    #[error(transparent)]
    Store(#[from] PortError),
}

/// What a batch is written into: the usage table of a deployment in `mode`, for the
/// stack's `product_code`.
#[derive(Clone, Copy)]
pub struct Target<'a> {
    /// The usage table.
    pub store: &'a dyn UsageStore,
    /// The stack's `DeploymentMode`.
    pub mode: DeploymentMode,
    /// The stack's product code.
    pub product_code: &'a str,
}

/// Writes every event of `events` received at `now` into `target`; the verdicts in the
/// batch's order.
pub async fn record_batch(
    target: Target<'_>,
    events: Vec<PostedEvent>,
    now: Instant,
) -> Result<Vec<Verdict>, BatchError> {
    crate::guardrails::write::accepts_raw_usage(target.mode)?;
    // Wave k holds the k-th occurrence of each key: no two writes of one key at once.
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut waves: Vec<Vec<usize>> = Vec::new();
    for (i, event) in events.iter().enumerate() {
        let wave = match event.key() {
            Some(key) => {
                let n = seen.entry(key).or_default();
                *n += 1;
                *n - 1
            }
            None => 0,
        };
        if waves.len() <= wave {
            waves.resize_with(wave + 1, Vec::new);
        }
        waves[wave].push(i);
    }
    let ctx = GuardrailContext::new(now, target.product_code);
    let mut verdicts: Vec<Option<Verdict>> = vec![None; events.len()];
    for wave in waves {
        let done: Vec<(usize, Result<Verdict, PortError>)> = stream::iter(wave)
            .map(|i| {
                let ctx = &ctx;
                let event = &events[i];
                async move { (i, one(target, event, ctx, now).await) }
            })
            .buffer_unordered(WRITE_CONCURRENCY)
            .collect()
            .await;
        for (i, verdict) in done {
            verdicts[i] = Some(verdict?);
        }
    }
    Ok(verdicts.into_iter().flatten().collect())
}

async fn one(
    target: Target<'_>,
    event: &PostedEvent,
    ctx: &GuardrailContext,
    now: Instant,
) -> Result<Verdict, PortError> {
    let (id, usage) = match (&event.id, &event.usage) {
        (Some(id), Ok(usage)) => (id, usage),
        (id, Err(refusal)) => return Ok(Verdict::rejected(id.clone(), refusal.clone())),
        (None, Ok(_)) => {
            return Ok(Verdict::rejected(
                None,
                EventRefusal::malformed("an event without an id"),
            ));
        }
    };
    let key = event.key().unwrap_or_else(|| id.clone());
    let row = usage.to_row(&key, now);
    // The mode was checked for the whole batch; a native id's `#` when it was read.
    match write_keyed(target.store, &row, ctx, now).await {
        Ok(IngestOutcome::Created) => Ok(Verdict::Accepted { id: id.clone() }),
        // The verdict is known; what the first write recorded is read back on a best
        // effort: a failed read answers `recorded: null` rather than failing the batch.
        Ok(IngestOutcome::Duplicate) => Ok(Verdict::Duplicate {
            id: id.clone(),
            recorded: match recorded_content(target.store, &row.license_arn, &key).await {
                Ok(content) => content.map(|content| UsageView::of(&row.license_arn, &content)),
                Err(e) => {
                    tracing::warn!(error = %e, "duplicate: the first write could not be read back");
                    None
                }
            },
        }),
        Ok(IngestOutcome::Conflict(mut conflict)) => Ok(Verdict::Conflict {
            id: id.clone(),
            // Told as it was posted, not as its key is stored.
            message: {
                if let Some(source) = &event.source {
                    conflict.event_id = format!("{id} of source {source}");
                }
                format!(
                    "{conflict}. Send new usage under a new id; resend this id only with the usage it was first sent with"
                )
            },
            recorded: conflict
                .recorded
                .as_ref()
                .map(|content| UsageView::of(&conflict.license_arn, content)),
            this: UsageView::of(&conflict.license_arn, &conflict.this),
        }),
        Err(WriteRefused::Row(RowProblem::Rejected(code))) => Ok(Verdict::rejected(
            Some(id.clone()),
            EventRefusal::rejected(code),
        )),
        Err(WriteRefused::Row(RowProblem::Unwritable(why))) => Ok(Verdict::rejected(
            Some(id.clone()),
            EventRefusal::unwritable(why),
        )),
        Err(WriteRefused::Row(RowProblem::Unsendable(why))) => Ok(Verdict::rejected(
            Some(id.clone()),
            EventRefusal {
                message: why.to_string(),
                ..EventRefusal::rejected(ReasonCode::TimestampOutOfWindow)
            },
        )),
        // Checked for the whole batch before any write.
        Err(WriteRefused::DirectSubmit(refusal)) => Ok(Verdict::rejected(
            Some(id.clone()),
            EventRefusal {
                reason: "DirectSubmitStack".into(),
                message: refusal.to_string(),
                code: None::<ReasonCode>,
            },
        )),
        Err(WriteRefused::Store(e)) => Err(e),
    }
}

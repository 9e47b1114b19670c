//! `awsmp replay`: sends `Error` records again after their cause was fixed, only
//! inside the 24 h window and only with their stored quantity; every refusal says why.

use awsmp_core::model::GroupKey;
use awsmp_core::ports::{AggregatedStore, OperatorStore};
use awsmp_core::time::Instant;
pub use awsmp_operate::replay::{ReplayLine, Selection};

use crate::commands::CommandError;
use crate::output::{Format, Outcome, json, spinner, table};

/// Parses `license|account|dimension|hour` (as `awsmp failures` prints it).
pub fn parse_group(text: &str) -> Result<GroupKey, CommandError> {
    text.parse()
        .map_err(|e: awsmp_core::model::MalformedGroupKey| {
            CommandError::Usage(format!("{e}, as `awsmp failures` prints it"))
        })
}

/// Replays the selection (or, with `dry_run`, says what it would do).
pub async fn replay(
    aggregated: &dyn AggregatedStore,
    operator: &dyn OperatorStore,
    selection: &Selection,
    now: Instant,
    dry_run: bool,
) -> Result<Vec<ReplayLine>, CommandError> {
    let bar = spinner("replaying");
    let lines =
        awsmp_operate::replay::replay(aggregated, operator, selection, now, dry_run).await?;
    bar.finish_and_clear();
    Ok(lines)
}

/// Renders the results; attention when any was refused.
pub fn render(lines: &[ReplayLine], format: Format) -> Outcome {
    let attention = lines.iter().any(|l| l.result == "refused");
    let text = match format {
        Format::Json => json(&lines),
        Format::Human if lines.is_empty() => "nothing to replay\n".to_string(),
        Format::Human => {
            let mut out = table(
                &["group", "result", "quantity", "why"],
                lines.iter().map(|l| {
                    vec![
                        l.group.clone(),
                        l.result.to_string(),
                        crate::output::cell(l.quantity),
                        l.why.clone().unwrap_or_default(),
                    ]
                }),
            );
            out.push('\n');
            if lines.iter().any(|l| l.result == "replayed") {
                out.push_str(
                    "the submitter sends replayed records on its next run (every few minutes)\n",
                );
            }
            out
        }
    };
    Outcome::flagged(text, attention)
}

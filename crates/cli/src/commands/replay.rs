//! `awsmp replay`: sends `Error` records again after their cause was fixed, only
//! inside the 24 h window and only with their stored quantity; every refusal says why.

use awsmp_aws::DynamoAggregatedStore;
use awsmp_core::model::GroupKey;
use awsmp_core::ports::{AggregatedStore, OperatorStore};
use awsmp_core::time::Instant;
pub use awsmp_operate::replay::{ReplayLine, Selection};

use super::{Ctx, since_hour_arg, stores};
use crate::error::CommandError;
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

/// Send Error records again after their cause was fixed (inside the 24 h window,
/// with their stored quantity).
///
/// Example: awsmp replay 'arn:aws:license-manager::123456789012:license:l-1|111122223333|api|2026-11-30T10'
#[derive(Debug, clap::Args)]
pub struct Command {
    /// Groups as `awsmp failures` prints them: license|account|dimension|hour.
    groups: Vec<String>,
    /// Instead of groups: every Error record of usage hours from `YYYY-MM-DDTHH`.
    #[arg(long, conflicts_with = "groups")]
    failed_since: Option<String>,
    /// Say what would be replayed; write nothing.
    #[arg(long)]
    dry_run: bool,
}

impl Command {
    /// Replays the selection in each deployment named.
    pub async fn run(self, ctx: &Ctx<'_>) -> Result<Vec<Outcome>, CommandError> {
        let selection = match self.failed_since {
            Some(text) => Selection::FailedSince(since_hour_arg("--failed-since", &text)?),
            None if self.groups.is_empty() => {
                return Err(CommandError::Usage(
                    "name the groups to replay (as `awsmp failures` prints them) or pass --failed-since HOUR".into(),
                ));
            }
            None => Selection::Groups(
                self.groups
                    .iter()
                    .map(|g| parse_group(g))
                    .collect::<Result<_, _>>()?,
            ),
        };
        let mut out = Vec::new();
        for s in stores(ctx.deployment).await? {
            let aggregated =
                DynamoAggregatedStore::new(s.client.clone(), s.deployment.aggregated_table.clone());
            let lines = replay(&aggregated, &s.operator, &selection, ctx.now, self.dry_run).await?;
            out.push(render(&lines, ctx.format));
        }
        Ok(out)
    }
}

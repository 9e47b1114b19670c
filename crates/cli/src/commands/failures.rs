//! `awsmp failures`: everything that ended unbilled since an hour, with both codes and
//! the remedy.

use awsmp_core::ports::OperatorStore;
use awsmp_core::time::{HourBucket, Instant};
use awsmp_operate::failures::{Failure, failures};

use super::{Ctx, all_records, all_rows, since_hour_arg, stores};
use crate::error::CommandError;
use crate::output::{Format, Outcome, cell, json, table};

/// Reads both tables and lists the failures of usage hours from `since`.
pub async fn read(
    store: &dyn OperatorStore,
    since: HourBucket,
    now: Instant,
) -> Result<Vec<Failure>, CommandError> {
    let rows = all_rows(store, None).await?;
    let (records, malformed) = all_records(store, None).await?;
    Ok(failures(&rows, &records, &malformed, since, now))
}

/// Renders the list; attention when it is not empty.
pub fn render(found: &[Failure], format: Format) -> Outcome {
    let text = match format {
        Format::Json => json(&found),
        Format::Human if found.is_empty() => "no failures\n".to_string(),
        Format::Human => {
            let mut out = table(
                &[
                    "status",
                    "reason",
                    "server-side",
                    "hour",
                    "license",
                    "key",
                    "quantity",
                    "replay",
                ],
                found.iter().map(|f| {
                    vec![
                        f.status.to_string(),
                        cell(f.reason.as_deref()),
                        cell(f.server_side.as_deref()),
                        cell(f.hour),
                        f.license_arn.clone(),
                        f.key.clone(),
                        cell(f.quantity),
                        if f.replayable { "yes" } else { "no" }.to_string(),
                    ]
                }),
            );
            out.push_str("\n\nwhat to do:\n");
            let mut seen = std::collections::BTreeSet::new();
            for f in found {
                let what = (f.status, f.reason.clone());
                if seen.insert(what) {
                    out.push_str(&format!(
                        "  {} {}: {}\n",
                        f.status,
                        f.reason.as_deref().unwrap_or(""),
                        f.remedy
                    ));
                }
            }
            let billed: Vec<&str> = found
                .iter()
                .filter(|f| f.possibly_billed)
                .map(|f| f.key.as_str())
                .collect();
            if !billed.is_empty() {
                out.push_str(&format!(
                    "possibly billed already (a call of ours may have billed them before they ended so; its answer was lost or unclear): {}. Check awsmp reconcile before settling any of them outside metering, or the buyer may pay twice\n",
                    billed.join(", ")
                ));
            }
            let replayable: Vec<&str> = found
                .iter()
                .filter(|f| f.replayable)
                .filter_map(|f| f.group.as_deref())
                .collect();
            if !replayable.is_empty() {
                out.push_str("replay a record once its cause is fixed (or every one: awsmp replay --failed-since HOUR):\n");
                for group in replayable {
                    out.push_str(&format!("  awsmp replay '{group}'\n"));
                }
            }
            out
        }
    };
    Outcome::flagged(text, !found.is_empty())
}

/// Every row and record that ended unbilled, with both codes and what to do.
///
/// Example: awsmp failures --stage prod --product-code abc123 --since 2026-11-30T00
#[derive(Debug, clap::Args)]
pub struct Command {
    /// First usage hour `YYYY-MM-DDTHH`, or an instant `YYYY-MM-DDTHH:MM:SSZ` for its
    /// hour (default: 48 hours ago).
    #[arg(long)]
    since: Option<String>,
}

impl Command {
    /// Lists each deployment's failures.
    pub async fn run(self, ctx: &Ctx<'_>) -> Result<Vec<Outcome>, CommandError> {
        let since = match self.since {
            Some(text) => since_hour_arg("--since", &text)?,
            None => HourBucket::containing(ctx.now).plus_hours(-48),
        };
        let mut out = Vec::new();
        for s in stores(ctx.deployment).await? {
            let found = read(&s.operator, since, ctx.now).await?;
            out.push(render(&found, ctx.format));
        }
        Ok(out)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use awsmp_core::model::AggregatedStatus;

    use super::*;

    /// GIVEN a replayable Error record WHEN failures are printed for people THEN the
    /// exact `awsmp replay` line for it is printed, in the format `replay` takes.
    #[test]
    fn prints_the_replay_command_of_each_replayable_record() {
        let now = awsmp_core::time::parse_usage_timestamp("2026-11-30T12:30:00Z").unwrap();
        let record = awsmp_core::memory::fixtures::operator_record(
            "api",
            "2026-11-30T11",
            AggregatedStatus::Error,
            4,
            Some("InvalidUsageDimensionException"),
        );
        let found = failures(&[], &[record], &[], "2026-11-30T00".parse().unwrap(), now);
        let shown = render(&found, Format::Human).text;
        let line = "  awsmp replay 'arn:aws:license-manager::123456789012:license:l-1|111122223333|api|2026-11-30T11'";
        assert!(shown.contains(line), "{shown}");
        // and the group parses back as `replay` reads it.
        let group = found[0].group.as_deref().unwrap();
        assert!(crate::commands::replay::parse_group(group).is_ok());
    }
}

//! `awsmp failures`: everything that ended unbilled since an hour, with both codes and
//! the remedy.

use awsmp_core::ports::OperatorStore;
use awsmp_core::time::{HourBucket, Instant};
use awsmp_operate::failures::{Failure, failures};

use super::{Ctx, all_records, all_rows, hour_arg, stores};
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
            if found.iter().any(|f| f.replayable) {
                out.push_str("replay a fixed record: awsmp replay '<license>|<account>|<dimension>|<hour>' (or --failed-since HOUR)\n");
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
    /// First usage hour `YYYY-MM-DDTHH` (default: 48 hours ago).
    #[arg(long)]
    since: Option<String>,
}

impl Command {
    /// Lists each deployment's failures.
    pub async fn run(self, ctx: &Ctx<'_>) -> Result<Vec<Outcome>, CommandError> {
        let since = match self.since {
            Some(text) => hour_arg("--since", &text)?,
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

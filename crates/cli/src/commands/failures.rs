//! `awsmp failures`: everything that ended unbilled since an hour, with both codes, the
//! remedy, and what each unbilled record is worth (estimated from the buyer's agreement).

use awsmp_core::charges::ESTIMATE_LABEL;
use awsmp_core::ports::{AgreementApi, OperatorStore, SubscriberStore};
use awsmp_core::time::{HourBucket, Instant};
use awsmp_operate::failures::{Failure, failures, price, unbilled_worth};
use awsmp_operate::report::rate_cards;

use super::{Ctx, all_records, all_rows, since_hour_arg, stores};
use crate::error::CommandError;
use crate::output::{Format, Outcome, cell, json, table};

/// Reads both tables and lists the failures of usage hours from `since`; with
/// `pricing` (the subscribers table and the Agreement API), each unbilled record says
/// what it is worth. A rate card that cannot be read leaves the failures unpriced,
/// and the second value says why.
pub async fn read(
    store: &dyn OperatorStore,
    since: HourBucket,
    now: Instant,
    pricing: Option<(&dyn SubscriberStore, &dyn AgreementApi)>,
) -> Result<(Vec<Failure>, Option<String>), CommandError> {
    let rows = all_rows(store, None).await?;
    let (records, malformed) = all_records(store, None).await?;
    let mut found = failures(&rows, &records, &malformed, since, now);
    let mut unpriced = None;
    if let Some((subscribers, agreements)) = pricing {
        let unbilled: Vec<_> = records
            .into_iter()
            .filter(|r| {
                found
                    .iter()
                    .any(|f| f.group.as_deref() == Some(&r.key.to_string()))
            })
            .collect();
        let (cards, unavailable) = rate_cards(&unbilled, since, subscribers, agreements).await;
        price(&mut found, &cards);
        unpriced = unavailable;
    }
    Ok((found, unpriced))
}

/// Renders the list; attention when it is not empty.
pub fn render(found: &[Failure], format: Format) -> Outcome {
    render_priced(found, None, format)
}

/// Renders the list with why it could not be priced, if so.
pub fn render_priced(found: &[Failure], unpriced: Option<&str>, format: Format) -> Outcome {
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
                    "worth (est.)",
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
                        match &f.worth {
                            Some(w) => match (&w.amount, &w.currency) {
                                (Some(a), Some(c)) => format!("{a} {c}"),
                                _ => w.basis.to_string(),
                            },
                            None => "-".to_string(),
                        },
                        if f.replayable { "yes" } else { "no" }.to_string(),
                    ]
                }),
            );
            let worth = unbilled_worth(found);
            if !worth.is_empty() {
                let total: Vec<String> = worth
                    .as_text()
                    .into_iter()
                    .map(|(c, a)| format!("{a} {c}"))
                    .collect();
                out.push_str(&format!(
                    "\n\nunbilled, estimated: {} ({ESTIMATE_LABEL})",
                    total.join(", ")
                ));
            }
            if let Some(why) = unpriced {
                out.push_str(&format!("\n\nnot priced: {why}"));
            }
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
    /// Leave out what each unbilled record is worth (it reads each buyer's rate card
    /// from the Agreement API: aws-marketplace:DescribeAgreement and GetAgreementTerms).
    #[arg(long)]
    no_charges: bool,
}

impl Command {
    /// Lists each deployment's failures.
    pub async fn run(self, ctx: &Ctx<'_>) -> Result<Vec<Outcome>, CommandError> {
        let since = match self.since {
            Some(text) => since_hour_arg("--since", &text)?,
            None => HourBucket::containing(ctx.now).plus_hours(-48),
        };
        let agreements = super::charges_api(ctx, self.no_charges).await;
        let mut out = Vec::new();
        for s in stores(ctx.deployment).await? {
            let pricing = super::pricing(&s, agreements.as_ref());
            let (found, unpriced) = read(&s.operator, since, ctx.now, pricing).await?;
            out.push(render_priced(&found, unpriced.as_deref(), ctx.format));
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

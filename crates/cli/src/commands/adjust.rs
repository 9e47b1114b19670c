//! `awsmp adjust` and `awsmp adjustments`: refunding over-billed records through AWS's
//! billing adjustments, and following them (the rules are
//! `awsmp_core::corrections`'s; the lines `awsmp_operate::corrections`'s).

use std::io::IsTerminal;

use awsmp_aws::{SdkAgreementApi, SystemClock, agreement_client};
use awsmp_core::corrections::{CorrectionPorts, CorrectionRequest};
use awsmp_operate::corrections::{CorrectionLine, adjust, adjustments, parse_request, totals};

use super::profile::confirm;
use super::{Ctx, Stores, stores, write_target};
use crate::deployment::EVENTS_REGION;
use crate::error::CommandError;
use crate::output::{Format, Outcome, cell, json, spinner, table};

/// How many times one run re-sends an adjustment request that failed transiently
/// (each with the same client token, so AWS makes it at most once).
pub const RETRIES: u32 = 2;

/// Refund an over-billed record through AWS's billing adjustments (reason
/// INCORRECT_METERING): the amount is (billed - correct) x the price on the buyer's
/// agreement, filed against the invoice of the usage's month. Shows the plan and asks
/// first (unless --yes); a rerun files nothing twice. Under-billing cannot be added
/// to an hour Marketplace already billed: it is reported, nothing is sent.
///
/// Example: awsmp adjust 'arn:aws:license-manager::123456789012:license:l-1|111122223333|requests|2026-10-20T10=600'
#[derive(Debug, clap::Args)]
pub struct Adjust {
    /// Records as `awsmp failures` prints their groups, each with the quantity that
    /// should have been billed: license|account|dimension|hour=quantity.
    corrections: Vec<String>,
    /// A file of such lines (one per line; # starts a comment).
    #[arg(long, conflicts_with = "corrections")]
    file: Option<std::path::PathBuf>,
    /// The agreement to refund under, when not the one the subscribers row names (the
    /// usage was billed under an agreement since replaced).
    #[arg(long)]
    agreement_id: Option<String>,
    /// File without asking.
    #[arg(long, conflicts_with = "dry_run")]
    yes: bool,
    /// Show what would be filed; file nothing.
    #[arg(long)]
    dry_run: bool,
}

/// The corrections filed so far, each pending one's status read from AWS and written
/// back, and what was refunded per currency.
///
/// Example: awsmp adjustments
#[derive(Debug, clap::Args)]
pub struct Adjustments {
    /// Show what the table holds; ask AWS nothing.
    #[arg(long)]
    no_refresh: bool,
}

/// The JSON of both commands.
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
pub struct CorrectionsJson {
    /// One line per record.
    pub corrections: Vec<CorrectionLine>,
    /// Per currency: refunded (completed) and pending, exact decimal strings.
    pub totals: std::collections::BTreeMap<String, CurrencyTotals>,
}

/// What was refunded and is pending, in one currency.
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
pub struct CurrencyTotals {
    /// Completed adjustments.
    pub refunded: String,
    /// Adjustments filed, not yet completed.
    pub pending: String,
}

fn requests(args: &Adjust) -> Result<Vec<CorrectionRequest>, CommandError> {
    let lines: Vec<String> = match &args.file {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| CommandError::Usage(format!("--file {}: {e}", path.display())))?
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(str::to_string)
            .collect(),
        None => args.corrections.clone(),
    };
    if lines.is_empty() {
        return Err(CommandError::Usage(
            "name the records to correct as license|account|dimension|hour=quantity (or --file)"
                .into(),
        ));
    }
    lines
        .iter()
        .map(|l| {
            let (key, correct_quantity) = parse_request(l).map_err(CommandError::Usage)?;
            Ok(CorrectionRequest {
                key,
                correct_quantity,
                agreement_id: args.agreement_id.clone(),
            })
        })
        .collect()
}

/// The Agreement API (us-east-1) with the deployment's credentials.
async fn agreements(ctx: &Ctx<'_>) -> SdkAgreementApi {
    let config = ctx.deployment.sdk_config(Some(EVENTS_REGION)).await;
    SdkAgreementApi::new(agreement_client(&config))
}

fn subscribers(s: &Stores) -> Result<&awsmp_aws::DynamoSubscriberStore, CommandError> {
    s.subscribers.as_ref().ok_or_else(|| {
        CommandError::NotFound(
            "the subscribers table was not found: name the events stack's stage (--stage) or the table (--subscribers-table)".into(),
        )
    })
}

impl Adjust {
    /// Plans, asks, files.
    pub async fn run(self, ctx: &Ctx<'_>) -> Result<Vec<Outcome>, CommandError> {
        let requests = requests(&self)?;
        let ask = !self.yes && !self.dry_run;
        if ask && !std::io::stdin().is_terminal() {
            return Err(CommandError::Usage(
                "adjust asks before filing, and stdin is not a terminal: pass --yes to file without asking (or --dry-run to see the plan)".into(),
            ));
        }
        let target = write_target(ctx.deployment, "adjust").await?;
        let agreements = agreements(ctx).await;
        let ports = CorrectionPorts {
            records: &target.operator,
            subscribers: subscribers(&target)?,
            agreements: &agreements,
            clock: &SystemClock,
        };
        let bar = spinner("planning the corrections");
        let plan = adjust(ports, &requests, false, 0).await;
        bar.finish_and_clear();
        if self.dry_run {
            return Ok(vec![render(
                &plan,
                ctx.format,
                Some("dry run: nothing was filed"),
            )]);
        }
        if ask {
            eprint!("{}", human(&plan, None));
            let question =
                "File these billing adjustments? AWS refunds the buyer at once and cannot undo it.";
            if !confirm(
                question,
                &mut std::io::stdin().lock(),
                &mut std::io::stderr(),
            )? {
                return Ok(vec![Outcome::flagged(
                    "not confirmed: nothing filed\n".into(),
                    true,
                )]);
            }
        }
        let bar = spinner("filing the billing adjustments");
        let filed = adjust(ports, &requests, true, RETRIES).await;
        bar.finish_and_clear();
        Ok(vec![render(
            &filed,
            ctx.format,
            Some("awsmp adjustments follows them until AWS completes them"),
        )])
    }
}

impl Adjustments {
    /// Lists (and follows) every correction of each deployment named.
    pub async fn run(self, ctx: &Ctx<'_>) -> Result<Vec<Outcome>, CommandError> {
        let agreements = agreements(ctx).await;
        let mut out = Vec::new();
        for s in stores(ctx.deployment).await? {
            let subscribers = subscribers(&s)?;
            let ports = CorrectionPorts {
                records: &s.operator,
                subscribers,
                agreements: &agreements,
                clock: &SystemClock,
            };
            let bar = spinner("reading the corrections");
            let lines = adjustments(ports, !self.no_refresh).await?;
            bar.finish_and_clear();
            out.push(render(&lines, ctx.format, None));
        }
        Ok(out)
    }
}

fn human(lines: &[CorrectionLine], footer: Option<&str>) -> String {
    if lines.is_empty() {
        return "no corrections\n".to_string();
    }
    let mut out = table(
        &[
            "group",
            "result",
            "billed",
            "correct",
            "refund",
            "invoice",
            "adjustment",
            "why",
        ],
        lines.iter().map(|l| {
            vec![
                l.group.clone(),
                l.result.clone(),
                cell(l.billed_quantity),
                cell(l.correct_quantity),
                match (&l.amount, &l.currency) {
                    (Some(a), Some(c)) => format!("{a} {c}"),
                    _ => String::new(),
                },
                l.invoice_id.clone().unwrap_or_default(),
                l.adjustment_id.clone().unwrap_or_default(),
                l.why.clone().unwrap_or_default(),
            ]
        }),
    );
    out.push('\n');
    for (currency, (refunded, pending)) in totals(lines) {
        out.push_str(&format!(
            "{currency}: refunded {refunded}, pending {pending}\n"
        ));
    }
    if let Some(footer) = footer {
        out.push_str(footer);
        out.push('\n');
    }
    out
}

/// Renders the lines; attention when any was refused, failed or is unconfirmed.
pub fn render(lines: &[CorrectionLine], format: Format, footer: Option<&str>) -> Outcome {
    let attention = lines.iter().any(CorrectionLine::needs_attention);
    let text = match format {
        Format::Json => json(&CorrectionsJson {
            corrections: lines.to_vec(),
            totals: totals(lines)
                .into_iter()
                .map(|(c, (refunded, pending))| {
                    (
                        c,
                        CurrencyTotals {
                            refunded: refunded.normalize().to_string(),
                            pending: pending.normalize().to_string(),
                        },
                    )
                })
                .collect(),
        }),
        Format::Human => human(lines, footer),
    };
    Outcome::flagged(text, attention)
}

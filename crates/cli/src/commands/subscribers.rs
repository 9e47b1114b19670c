//! `awsmp subscribers reconcile`: holds the subscribers table to the AWS Marketplace
//! Agreement API, repairing what a lost lifecycle event left behind (the rules are
//! `awsmp_core::lifecycle::reconcile`'s); `--dry-run` says what it would repair.

use awsmp_aws::{SdkAgreementApi, SystemClock, agreement_client};
use awsmp_core::lifecycle::reconcile::{
    DriftAction, Product, ReconcileError, ReconcilePorts, ReconcileReport, ReconcileSettings,
    reconcile,
};
use awsmp_core::ports::AgreementError;

use super::{Ctx, stores, write_target};
use crate::deployment::EVENTS_REGION;
use crate::error::CommandError;
use crate::output::{Format, Outcome, json, spinner, table};

/// The subscribers table (us-east-1, shared by every metering Region).
#[derive(Debug, clap::Args)]
pub struct Command {
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, clap::Subcommand)]
enum Action {
    /// Compare the subscribers table with the product's agreements in the Agreement API
    /// and repair what a lost Marketplace event left behind: a License Updated,
    /// License Deprovisioned or Purchase Agreement Ended that never arrived. Each repair
    /// is dated as the lost event would have been; a license is never reactivated.
    ///
    /// Example: awsmp --stage prod --product-code abc123 subscribers reconcile --product-id prod-abcdefgh --dry-run
    Reconcile(Reconcile),
}

#[derive(Debug, clap::Args)]
struct Reconcile {
    /// The product's id (`prod-...`, on its page in the AWS Marketplace Management
    /// Portal): the Agreement API names products by it, the rows by --product-code.
    #[arg(long)]
    product_id: String,
    /// Say what would be repaired; write nothing.
    #[arg(long)]
    dry_run: bool,
}

impl Command {
    /// Runs the subcommand.
    pub async fn run(self, ctx: &Ctx<'_>) -> Result<Vec<Outcome>, CommandError> {
        let Action::Reconcile(args) = self.action;
        let product_code = ctx.deployment.product_code.clone().ok_or_else(|| {
            CommandError::Usage(
                "name the product code the repaired rows carry: --product-code (or AWSMP_PRODUCT_CODE)".into(),
            )
        })?;
        if !args.product_id.starts_with("prod-") {
            return Err(CommandError::Usage(format!(
                "--product-id {}: a product id starts with prod- (the product code goes in --product-code)",
                args.product_id
            )));
        }
        let target = if args.dry_run {
            stores(ctx.deployment)
                .await?
                .into_iter()
                .next()
                .ok_or_else(|| CommandError::NotFound("no deployment found".into()))?
        } else {
            write_target(ctx.deployment, "subscribers reconcile").await?
        };
        let subscribers = target.subscribers.ok_or_else(|| {
            CommandError::NotFound(
                "the subscribers table was not found: name the events stack's stage (--stage) or the table (--subscribers-table)".into(),
            )
        })?;
        let config = ctx.deployment.sdk_config(Some(EVENTS_REGION)).await;
        let agreements = SdkAgreementApi::new(agreement_client(&config));
        let settings = ReconcileSettings {
            products: vec![Product {
                product_id: args.product_id,
                product_code,
            }],
            dry_run: args.dry_run,
        };
        let ports = ReconcilePorts {
            agreements: &agreements,
            subscribers: &subscribers,
            clock: &SystemClock,
        };
        let bar = spinner("reading the product's agreements");
        let report = reconcile(ports, &settings).await.map_err(command_error);
        bar.finish_and_clear();
        Ok(vec![render(&report?, ctx.format)])
    }
}

fn command_error(error: ReconcileError) -> CommandError {
    match &error {
        ReconcileError::Search {
            source: AgreementError::AccessDenied { .. },
            ..
        } => CommandError::Aws(format!(
            "{error}; run it with a role allowed aws-marketplace:SearchAgreements and aws-marketplace:GetAgreementTerms (the managed policy AWSMarketplaceSellerOfferManagement allows both)"
        )),
        ReconcileError::Search { source, .. } if source.is_transient() => CommandError::Aws(
            format!("{error}; nothing was written: run it again in a minute"),
        ),
        ReconcileError::NoProduct => CommandError::Usage(error.to_string()),
        ReconcileError::Search { .. } => CommandError::Aws(error.to_string()),
    }
}

/// Renders the report; attention when anything is left for a person or the next run.
pub fn render(report: &ReconcileReport, format: Format) -> Outcome {
    let cards = &report.rate_cards;
    let attention = report.unresolved() > 0 || !cards.failed.is_empty();
    let text = match format {
        Format::Json => json(report),
        Format::Human => {
            let mut out = format!(
                "{} agreements, {} licenses: {} in sync, {} not started, {} backfilled closed\n",
                report.agreements,
                report.licenses,
                report.in_sync,
                report.scheduled,
                report.backfilled
            );
            if report.drifts.is_empty() {
                out.push_str("no drift: every row agrees with the Agreement API\n");
            } else {
                out.push_str(&table(
                    &["license", "account", "agreement", "drift", "action", "why"],
                    report.drifts.iter().map(|d| {
                        vec![
                            d.license_arn.clone(),
                            d.customer_aws_account_id.clone(),
                            d.agreement_id.clone(),
                            format!("{:?}", d.kind),
                            action(d.action).to_string(),
                            d.detail.clone(),
                        ]
                    }),
                ));
                out.push('\n');
            }
            let refreshed = if report.dry_run {
                "would be read"
            } else {
                "read and kept"
            };
            out.push_str(&format!(
                "rate cards: {} current, {} {refreshed}, {} left for the next run, {} failed\n",
                cards.current,
                cards.refreshed,
                cards.deferred,
                cards.failed.len()
            ));
            for failed in &cards.failed {
                out.push_str(&format!(
                    "  {}/{} (agreement {}): {}; the role needs aws-marketplace:GetAgreementTerms\n",
                    failed.license_arn,
                    failed.customer_aws_account_id,
                    failed.agreement_id,
                    failed.error
                ));
            }
            if report.dry_run && (report.repaired() > 0 || cards.refreshed > 0) {
                out.push_str(
                    "dry run: nothing was written; run it again without --dry-run to repair\n",
                );
            }
            out
        }
    };
    Outcome::flagged(text, attention)
}

fn action(action: DriftAction) -> &'static str {
    match action {
        DriftAction::Repaired => "repaired",
        DriftAction::RepairedAndClosed => "repaired and closed",
        DriftAction::WouldRepair => "would repair",
        DriftAction::Reported => "reported",
        DriftAction::Failed => "failed: the next run retries",
    }
}

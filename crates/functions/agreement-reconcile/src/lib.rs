//! The agreement-reconcile Lambda (events stack, daily by default): runs the use case
//! [`awsmp_core::lifecycle::reconcile`] over the products `RECONCILE_PRODUCTS` names,
//! repairing each subscribers row a lost Marketplace event left behind and keeping each
//! active license's rate card on its row (`GetAgreementTerms`). A run that
//! leaves a drift for a person (reported) or for the next run (a write that failed), or
//! cannot read the agreements at all, or could not read a rate card, fails the invocation, so the function's error
//! metric and its alarm tell; what it repaired is in its summary log line.

use std::sync::Arc;

use aws_config::SdkConfig;
use aws_lambda_events::eventbridge::EventBridgeEvent;
use awsmp_core::lifecycle::reconcile::{
    Product, ReconcileError, ReconcilePorts, ReconcileReport, ReconcileSettings, reconcile,
};
use awsmp_core::ports::{AgreementApi, Clock, SubscriberStore};
use awsmp_lambda::{ConfigError, EnvReader, FunctionError, diagnostic};
use lambda_runtime::{Diagnostic, LambdaEvent};

/// Every variable the template sets for it.
pub const ENV_VARS: &[&str] = &["SUBSCRIBERS_TABLE", "RECONCILE_PRODUCTS"];

/// The function's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `SUBSCRIBERS_TABLE`.
    pub subscribers_table: String,
    /// `RECONCILE_PRODUCTS`: `prod-id=productCode` pairs, comma-separated.
    pub products: Vec<Product>,
}

impl Config {
    /// Reads through `lookup` (the process environment in Lambda; tests pass a map).
    pub fn from_lookup(lookup: &dyn Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let mut env = EnvReader::new(lookup);
        let subscribers_table = env.subscribers_table();
        let text = env.required("RECONCILE_PRODUCTS");
        let products = match parse_products(&text) {
            Ok(products) => products,
            Err(problem) => {
                if !text.is_empty() {
                    env.problem(problem);
                }
                Vec::new()
            }
        };
        env.finish(Config {
            subscribers_table,
            products,
        })
    }
}

/// Reads `prod-abc=code1,prod-def=code2` (the stack parameter `ReconcileProducts`).
pub fn parse_products(text: &str) -> Result<Vec<Product>, String> {
    let mut products = Vec::new();
    for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((id, code)) = pair.split_once('=') else {
            return Err(format!(
                "RECONCILE_PRODUCTS: {pair:?} is not productId=productCode (e.g. prod-abcdefgh=abc123)"
            ));
        };
        let (id, code) = (id.trim(), code.trim());
        if !id.starts_with("prod-") || code.is_empty() {
            return Err(format!(
                "RECONCILE_PRODUCTS: {pair:?} needs a product id starting prod- and a product code"
            ));
        }
        products.push(Product {
            product_id: id.to_string(),
            product_code: code.to_string(),
        });
    }
    if products.is_empty() {
        return Err("RECONCILE_PRODUCTS names no product".into());
    }
    Ok(products)
}

/// The handler's dependencies, built once per process.
#[derive(Clone)]
pub struct State {
    /// Settings.
    pub config: Arc<Config>,
    /// The subscribers table.
    pub subscribers: Arc<dyn SubscriberStore>,
    /// The Agreement API (us-east-1).
    pub agreements: Arc<dyn AgreementApi>,
    /// Now, and each write's stamp.
    pub clock: Arc<dyn Clock>,
}

impl State {
    /// Builds the AWS clients once, on `sdk`: DynamoDB and the Agreement API.
    pub fn connect(sdk: &SdkConfig, config: &Config) -> Self {
        State {
            subscribers: Arc::new(awsmp_aws::DynamoSubscriberStore::new(
                aws_sdk_dynamodb::Client::new(sdk),
                &config.subscribers_table,
            )),
            agreements: Arc::new(awsmp_aws::SdkAgreementApi::new(
                awsmp_aws::agreement_client(sdk),
            )),
            clock: Arc::new(awsmp_aws::SystemClock),
            config: Arc::new(config.clone()),
        }
    }
}

/// A run that left something undone.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunError {
    /// The agreements could not be read: nothing was compared or written.
    #[error(transparent)]
    Reconcile(#[from] ReconcileError),
    /// Drifts left for a person or the next run (the others were repaired).
    #[error("{}", unresolved(report))]
    Unresolved {
        /// What the run did.
        report: ReconcileReport,
    },
    /// Every row agrees, but rate cards could not be read or stored: the next run
    /// retries them; metering never waits on them.
    #[error("{}", rate_cards_unread(report))]
    RateCardsUnread {
        /// What the run did.
        report: ReconcileReport,
    },
}

fn rate_cards_unread(report: &ReconcileReport) -> String {
    let cards = &report.rate_cards;
    let rows: Vec<String> = cards
        .failed
        .iter()
        .map(|f| {
            format!(
                "{}/{} (agreement {}): {}",
                f.license_arn, f.customer_aws_account_id, f.agreement_id, f.error
            )
        })
        .collect();
    format!(
        "{} rate cards were not read ({} refreshed, {} left for the next run after a throttle; \
         the role needs aws-marketplace:GetAgreementTerms): {}",
        rows.len(),
        cards.refreshed,
        cards.deferred,
        rows.join("; ")
    )
}

fn unresolved(report: &ReconcileReport) -> String {
    let rows: Vec<String> = report
        .unresolved_drifts()
        .map(|d| {
            format!(
                "{}/{}: {}",
                d.license_arn, d.customer_aws_account_id, d.detail
            )
        })
        .collect();
    format!(
        "{} subscribers rows disagree with the Agreement API and were not repaired ({} repaired this run): {}",
        rows.len(),
        report.repaired(),
        rows.join("; ")
    )
}

impl FunctionError for RunError {
    fn error_type(&self) -> &'static str {
        match self {
            RunError::Reconcile(_) => "AgreementsUnreadable",
            RunError::Unresolved { .. } => "SubscriberDriftUnresolved",
            RunError::RateCardsUnread { .. } => "RateCardsUnread",
        }
    }
}

impl From<RunError> for Diagnostic {
    fn from(error: RunError) -> Diagnostic {
        diagnostic(&error)
    }
}

/// The Lambda entry point for the scheduled event.
pub async fn handler(
    state: &State,
    _event: LambdaEvent<EventBridgeEvent>,
) -> Result<ReconcileReport, RunError> {
    run(state).await
}

/// One reconciliation of every configured product.
pub async fn run(state: &State) -> Result<ReconcileReport, RunError> {
    let settings = ReconcileSettings {
        products: state.config.products.clone(),
        dry_run: false,
    };
    let ports = ReconcilePorts {
        agreements: state.agreements.as_ref(),
        subscribers: state.subscribers.as_ref(),
        clock: state.clock.as_ref(),
    };
    let report = reconcile(ports, &settings).await?;
    // Its `repaired` is what the alarm `agreement-drift-repaired` counts (the template's
    // metric filter on this line); each drift has its own line from the use case.
    tracing::info!(
        now = %report.now,
        agreements = report.agreements,
        licenses = report.licenses,
        in_sync = report.in_sync,
        scheduled = report.scheduled,
        backfilled = report.backfilled,
        repaired = report.repaired(),
        unresolved = report.unresolved(),
        rate_cards_current = report.rate_cards.current,
        rate_cards_refreshed = report.rate_cards.refreshed,
        rate_cards_deferred = report.rate_cards.deferred,
        rate_cards_failed = report.rate_cards.failed.len(),
        "agreement reconciliation finished"
    );
    if report.unresolved() > 0 {
        return Err(RunError::Unresolved { report });
    }
    if !report.rate_cards.failed.is_empty() {
        return Err(RunError::RateCardsUnread { report });
    }
    Ok(report)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests;

//! `awsmp inspect`: one license (its subscriber rows and every group's chain), or one
//! group's raw rows and record.

use std::fmt::Write as _;

use awsmp_aws::{DynamoAggregatedStore, DynamoUsageStore};
use awsmp_core::guardrails::is_license_arn;
use awsmp_core::model::{Attr, GroupKey, Subscriber, attr};
use awsmp_core::ports::{
    AggregatedStore, AgreementApi, OperatorStore, SubscriberStore, UsageStore,
};
use awsmp_operate::license::{ChainFilter, GroupChain, chains, price_chains};
use awsmp_operate::rows::{row_account_dimension, row_hour};
use serde::Serialize;

use super::{Ctx, all_records, all_rows, hour_arg, stores};
use crate::error::CommandError;
use crate::output::{Format, Outcome, cell, json, table};

/// What `inspect license` found.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct LicenseView {
    /// The license.
    pub license_arn: String,
    /// Its subscriber rows (one per buyer account), when the subscribers table is known.
    pub subscribers: Vec<SubscriberView>,
    /// Whether the subscribers table was read.
    pub subscribers_read: bool,
    /// Why the groups' worth could not be estimated (a rate card not read), if so.
    pub charges_unavailable: Option<String>,
    /// Every group's chain.
    pub groups: Vec<GroupChain>,
}

/// One subscriber row, PII-free as stored.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct SubscriberView {
    /// Buyer account.
    pub account: String,
    /// `agreementId`, when set.
    pub agreement_id: Option<String>,
    /// `agreementStatus`.
    pub agreement_status: String,
    /// `subscriptionStatus`.
    pub subscription_status: String,
    /// `deprovisioningExpiry`, when set.
    pub deprovisioning_expiry: Option<String>,
    /// `registeredRegions`.
    pub registered_regions: Vec<String>,
}

impl From<&Subscriber> for SubscriberView {
    fn from(s: &Subscriber) -> Self {
        SubscriberView {
            account: s.customer_aws_account_id.clone(),
            agreement_id: s.agreement_id.clone(),
            agreement_status: s
                .agreement_status
                .map_or_else(|| "-".into(), |a| a.as_str().to_string()),
            subscription_status: s
                .subscription_status
                .map_or_else(|| "-".into(), |a| a.as_str().to_string()),
            deprovisioning_expiry: s
                .deprovisioning_expiry
                .map(awsmp_core::time::format_instant),
            registered_regions: s.registered_regions.to_vec(),
        }
    }
}

/// Reads one license's subscriber rows and both tables' items; with `agreements`,
/// each group's record says what it is worth under its buyer's agreement.
pub async fn license(
    store: &dyn OperatorStore,
    subscribers: Option<&dyn SubscriberStore>,
    agreements: Option<&dyn AgreementApi>,
    license_arn: &str,
    filter: &ChainFilter,
) -> Result<LicenseView, CommandError> {
    let rows = all_rows(store, Some(license_arn)).await?;
    let (records, _) = all_records(store, Some(license_arn)).await?;
    let subs = match subscribers {
        Some(store) => Some(store.by_license(license_arn).await?),
        None => None,
    };
    let mut groups = chains(&rows, &records, filter);
    let mut charges_unavailable = None;
    if let Some(api) = agreements {
        let mut cards = std::collections::BTreeMap::new();
        for s in subs.iter().flatten() {
            match awsmp_core::charges::rate_card_of(s, api).await {
                Ok(Some(card)) => {
                    cards.insert(s.customer_aws_account_id.clone(), card);
                }
                Ok(None) => {}
                Err(e) => charges_unavailable = Some(e.to_string()),
            }
        }
        price_chains(&mut groups, &cards);
    }
    Ok(LicenseView {
        license_arn: license_arn.to_string(),
        subscribers_read: subs.is_some(),
        charges_unavailable,
        subscribers: subs
            .unwrap_or_default()
            .iter()
            .map(SubscriberView::from)
            .collect(),
        groups,
    })
}

/// Renders a license view.
pub fn render_license(view: &LicenseView, format: Format) -> Outcome {
    if format == Format::Json {
        return Outcome::ok(json(view));
    }
    let mut out = format!("license {}\n", view.license_arn);
    if !view.subscribers_read {
        out.push_str("subscribers: not read (pass --stage so the events stack's table is found, or --subscribers-table)\n");
    } else if view.subscribers.is_empty() {
        out.push_str("subscribers: no row (no License Updated event seen for this license)\n");
    } else {
        out.push_str(&table(
            &[
                "account",
                "agreement",
                "subscription",
                "deprovisioning until",
                "registered Regions",
            ],
            view.subscribers.iter().map(|s| {
                vec![
                    s.account.clone(),
                    s.agreement_status.clone(),
                    s.subscription_status.clone(),
                    cell(s.deprovisioning_expiry.as_deref()),
                    if s.registered_regions.is_empty() {
                        "-".to_string()
                    } else {
                        s.registered_regions.join(",")
                    },
                ]
            }),
        ));
        out.push('\n');
    }
    if view.groups.is_empty() {
        out.push_str("no usage\n");
        return Outcome::ok(out);
    }
    out.push_str(&table(
        &[
            "account",
            "dimension",
            "hour",
            "rows pending",
            "counted",
            "quantity counted",
            "rejected",
            "expired",
            "record",
            "quantity",
            "reason",
            "meteringRecordId",
            "attempts",
            "worth (est.)",
        ],
        view.groups.iter().map(|g| {
            vec![
                g.account.clone(),
                g.dimension.clone(),
                cell(g.hour),
                g.rows_pending.to_string(),
                g.rows_counted.to_string(),
                g.quantity_counted.to_string(),
                if g.rows_rejected.is_empty() {
                    "0".to_string()
                } else {
                    g.rows_rejected
                        .iter()
                        .map(|(r, n)| format!("{n} {r}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                },
                g.rows_expired.to_string(),
                cell(g.record_status.as_deref()),
                cell(g.record_quantity),
                cell(g.record_reason.as_deref()),
                cell(g.metering_record_id.as_deref()),
                cell(g.attempts),
                match &g.worth {
                    Some(w) => match (&w.amount, &w.currency) {
                        (Some(a), Some(c)) => format!("{a} {c}"),
                        _ => w.basis.to_string(),
                    },
                    None => "-".to_string(),
                },
            ]
        }),
    ));
    out.push('\n');
    if let Some(why) = &view.charges_unavailable {
        out.push_str(&format!("worth not estimated: {why}\n"));
    }
    Outcome::ok(out)
}
fn show(attrs: &std::collections::BTreeMap<String, Attr>, name: &str) -> Option<String> {
    match attrs.get(name) {
        Some(Attr::S(s)) | Some(Attr::N(s)) => Some(s.clone()),
        Some(other) => Some(format!("{other:?}")),
        None => None,
    }
}

/// One raw row as `inspect group` shows it (the stored attributes as text).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct RawRowView {
    /// The row's sort key (`account#dimension#timestamp[#eventId]`).
    pub sort_key: String,
    /// `quantity` as stored.
    pub quantity: Option<String>,
    /// `meteringStatus`, absent while pending.
    pub status: Option<String>,
    /// `meteringStatusReason` (a client-side reason code).
    pub reason: Option<String>,
    /// `meteringPending` (the hour bucket), present while the row is pending.
    pub pending: Option<String>,
}

/// The aggregated record as `inspect group` shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct RecordView {
    /// The hour's total.
    pub quantity: i64,
    /// Its status.
    pub status: String,
    /// `meteringStatusReason`.
    pub reason: Option<String>,
    /// Marketplace's id for a billed record.
    pub metering_record_id: Option<String>,
    /// Send attempts so far.
    pub attempts: u32,
}

/// One group's raw rows and its aggregated record (`awsmp inspect group`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct GroupView {
    /// `license|account|dimension|hour`.
    pub group: String,
    /// Every raw row of the group.
    pub rows: Vec<RawRowView>,
    /// The aggregated record; `null` before the hour is aggregated.
    pub record: Option<RecordView>,
    /// When the group has neither: the dimensions this license, account and hour do
    /// have usage under (dimensions are case-sensitive, so `Requests` is not `requests`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub other_dimensions: Vec<String>,
}

impl GroupView {
    /// Lines for people, or one JSON document.
    pub fn render(&self, format: Format) -> Outcome {
        if format == Format::Json {
            return Outcome::ok(json(self));
        }
        let dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
        let mut out = String::new();
        let _ = writeln!(out, "group {}", self.group);
        let _ = writeln!(out, "raw rows ({}):", self.rows.len());
        for row in &self.rows {
            let _ = writeln!(
                out,
                "  {}  quantity={}  status={}  reason={}  pending={}",
                row.sort_key,
                dash(&row.quantity),
                dash(&row.status),
                dash(&row.reason),
                dash(&row.pending),
            );
        }
        match &self.record {
            None if self.rows.is_empty() => {
                let _ = writeln!(out, "aggregated: none (no usage under this dimension)");
                if !self.other_dimensions.is_empty() {
                    let _ = writeln!(
                        out,
                        "this license, account and hour have usage under: {} (dimensions are case-sensitive)",
                        self.other_dimensions.join(", ")
                    );
                }
            }
            None => {
                let _ = writeln!(out, "aggregated: none yet (the hour is not aggregated)");
            }
            Some(r) => {
                let _ = writeln!(
                    out,
                    "aggregated: quantity={} status={} reason={} meteringRecordId={} attempts={}",
                    r.quantity,
                    r.status,
                    dash(&r.reason),
                    dash(&r.metering_record_id),
                    r.attempts
                );
            }
        }
        Outcome::ok(out)
    }
}

/// Reads every raw row of a group and its aggregated record.
pub async fn group(
    usage: &dyn UsageStore,
    aggregated: &dyn AggregatedStore,
    key: &GroupKey,
) -> Result<GroupView, CommandError> {
    let rows = usage.group_rows(key).await?;
    let record = aggregated.get(key).await?;
    Ok(GroupView {
        group: key.to_string(),
        rows: rows
            .iter()
            .map(|row| RawRowView {
                sort_key: row.sort_key.clone(),
                quantity: show(&row.attrs, attr::QUANTITY),
                status: show(&row.attrs, attr::METERING_STATUS),
                reason: show(&row.attrs, attr::METERING_STATUS_REASON),
                pending: show(&row.attrs, attr::METERING_PENDING),
            })
            .collect(),
        record: record.map(|r| RecordView {
            quantity: r.quantity,
            status: r.status.to_string(),
            reason: r.status_reason.clone(),
            metering_record_id: r.metering_record_id.clone(),
            attempts: r.attempt_count,
        }),
        other_dimensions: Vec::new(),
    })
}

/// What happened to a license, or to one group.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// A license: its subscriber rows and, per account, dimension and hour, raw rows ->
    /// aggregated record -> submission.
    ///
    /// Example: awsmp inspect license arn:aws:license-manager::123456789012:license:l-1 --hour 2026-11-30T10
    License {
        /// License ARN.
        license: String,
        /// Only this hour `YYYY-MM-DDTHH`.
        #[arg(long)]
        hour: Option<String>,
        /// Only this dimension.
        #[arg(long)]
        dimension: Option<String>,
        /// Leave out what each record is worth (it reads the buyer's rate card:
        /// aws-marketplace:DescribeAgreement and GetAgreementTerms).
        #[arg(long)]
        no_charges: bool,
    },
    /// One group: every raw row and its aggregated record.
    ///
    /// Example: awsmp inspect group --license ARN --account 111122223333 --dimension api --hour 2026-11-30T10
    Group {
        /// License ARN.
        #[arg(long)]
        license: String,
        /// Buyer AWS account id.
        #[arg(long)]
        account: String,
        /// Dimension.
        #[arg(long)]
        dimension: String,
        /// Hour bucket `YYYY-MM-DDTHH` (UTC).
        #[arg(long)]
        hour: String,
    },
}

/// The dimensions `key`'s license, account and hour have raw usage under.
async fn dimensions_in_hour(
    store: &dyn OperatorStore,
    key: &GroupKey,
) -> Result<Vec<String>, CommandError> {
    let rows = all_rows(store, Some(&key.license_arn)).await?;
    let mut found: Vec<String> = rows
        .iter()
        .filter(|row| row_hour(row) == Some(key.hour))
        .filter_map(|row| match row_account_dimension(row) {
            (Some(account), Some(dimension)) if account == key.customer_aws_account_id => {
                Some(dimension.to_string())
            }
            _ => None,
        })
        .collect();
    found.sort();
    found.dedup();
    Ok(found)
}

/// A license argument must be the license's ARN: the tables are keyed by it, so a bare
/// `l-…` id (as the demo and `trail` show it) would find nothing and say so wrongly.
pub(crate) fn license_arg(text: &str) -> Result<(), CommandError> {
    if is_license_arn(text) {
        return Ok(());
    }
    if text.starts_with("l-") {
        return Err(CommandError::Usage(format!(
            "{text:?} is a license id: name the license by its ARN, arn:aws:license-manager::<seller account id>:license:{text}, as `awsmp failures` prints it"
        )));
    }
    Err(CommandError::Usage(format!(
        "{text:?} is not a license ARN: name the license by its ARN, arn:aws:license-manager::<seller account id>:license:l-…"
    )))
}

impl Command {
    /// Reads and renders the license or the group in each deployment named.
    pub async fn run(self, ctx: &Ctx<'_>) -> Result<Vec<Outcome>, CommandError> {
        let mut out = Vec::new();
        match self {
            Command::License {
                license: arn,
                hour,
                dimension,
                no_charges,
            } => {
                license_arg(&arn)?;
                let filter = ChainFilter {
                    hour: hour.map(|h| hour_arg("--hour", &h)).transpose()?,
                    dimension,
                };
                let api = super::charges_api(ctx, no_charges).await;
                for s in stores(ctx.deployment).await? {
                    let subscribers = s.subscribers.as_ref().map(|s| s as &dyn SubscriberStore);
                    let agreements = api.as_ref().map(|a| a as &dyn AgreementApi);
                    let view = license(&s.operator, subscribers, agreements, &arn, &filter).await?;
                    out.push(render_license(&view, ctx.format));
                }
            }
            Command::Group {
                license,
                account,
                dimension,
                hour,
            } => {
                license_arg(&license)?;
                let key = GroupKey {
                    license_arn: license,
                    customer_aws_account_id: account,
                    dimension,
                    hour: hour_arg("--hour", &hour)?,
                };
                for s in stores(ctx.deployment).await? {
                    let usage =
                        DynamoUsageStore::new(s.client.clone(), s.deployment.usage_table.clone());
                    let aggregated =
                        DynamoAggregatedStore::new(s.client, s.deployment.aggregated_table);
                    let mut view = group(&usage, &aggregated, &key).await?;
                    if view.rows.is_empty() && view.record.is_none() {
                        view.other_dimensions = dimensions_in_hour(&s.operator, &key).await?;
                    }
                    out.push(view.render(ctx.format));
                }
            }
        }
        Ok(out)
    }
}

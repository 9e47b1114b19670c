//! `awsmp inspect`: one license (its subscriber rows and every group's chain), or one
//! group's raw rows and record.

use awsmp_core::model::Subscriber;
use awsmp_core::ports::{OperatorStore, SubscriberStore};
use awsmp_operate::license::{ChainFilter, GroupChain, chains};
use serde::Serialize;

use super::{all_records, all_rows};
use crate::commands::CommandError;
use crate::output::{Format, Outcome, cell, json, table};

/// What `inspect license` found.
#[derive(Debug, Clone, Serialize)]
pub struct LicenseView {
    /// The license.
    pub license_arn: String,
    /// Its subscriber rows (one per buyer account), when the subscribers table is known.
    pub subscribers: Vec<SubscriberView>,
    /// Whether the subscribers table was read.
    pub subscribers_read: bool,
    /// Every group's chain.
    pub groups: Vec<GroupChain>,
}

/// One subscriber row, PII-free as stored.
#[derive(Debug, Clone, Serialize)]
pub struct SubscriberView {
    /// Buyer account.
    pub account: String,
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

/// Reads one license's subscriber rows and both tables' items.
pub async fn license(
    store: &dyn OperatorStore,
    subscribers: Option<&dyn SubscriberStore>,
    license_arn: &str,
    filter: &ChainFilter,
) -> Result<LicenseView, CommandError> {
    let rows = all_rows(store, Some(license_arn)).await?;
    let (records, _) = all_records(store, Some(license_arn)).await?;
    let subs = match subscribers {
        Some(store) => Some(store.by_license(license_arn).await?),
        None => None,
    };
    Ok(LicenseView {
        license_arn: license_arn.to_string(),
        subscribers_read: subs.is_some(),
        subscribers: subs
            .unwrap_or_default()
            .iter()
            .map(SubscriberView::from)
            .collect(),
        groups: chains(&rows, &records, filter),
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
            ]
        }),
    ));
    out.push('\n');
    Outcome::ok(out)
}

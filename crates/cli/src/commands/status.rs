//! `awsmp status`: one screen per Region.

use awsmp_core::charges::ESTIMATE_LABEL;
use awsmp_core::ports::{AgreementApi, OperatorStore, SubscriberStore};
use awsmp_core::time::{HourBucket, Instant};
use awsmp_operate::report::rate_cards;
use awsmp_operate::status::{
    DEFAULT_REQUESTS_PER_SECOND, QueueDepth, StatusInputs, StatusReport, Urgency, minutes_text,
    status,
};
use serde::Serialize;

use super::{Ctx, all_records, all_rows, queues, stores};
use crate::error::CommandError;
use crate::output::{Format, Outcome, json, table};

/// Where the status was taken.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Place {
    /// Metering Region.
    pub region: String,
    /// Main stack, when known.
    pub stack: Option<String>,
}

#[derive(Serialize, schemars::JsonSchema)]
pub(crate) struct RegionStatus<'a> {
    #[serde(flatten)]
    place: &'a Place,
    #[serde(flatten)]
    report: &'a StatusReport,
}

/// Reads the tables and computes the status at `now` over the last `hours` hours; with
/// `pricing` (the subscribers table and the Agreement API), what the billed usage is
/// worth and which billed dimensions no agreement prices.
pub async fn read(
    store: &dyn OperatorStore,
    queues: &[QueueDepth],
    deprovisioning: u64,
    requests_per_second: Option<u32>,
    now: Instant,
    hours: u32,
    pricing: Option<(&dyn SubscriberStore, &dyn AgreementApi)>,
) -> Result<StatusReport, CommandError> {
    let rows = all_rows(store, None).await?;
    let (records, malformed) = all_records(store, None).await?;
    let from = HourBucket::containing(now).plus_hours(-i64::from(hours.saturating_sub(1)));
    let cards = match pricing {
        Some((subscribers, agreements)) => {
            Some(rate_cards(&records, from, subscribers, agreements).await)
        }
        None => None,
    };
    Ok(status(
        StatusInputs {
            rows: &rows,
            records: &records,
            records_unreadable: malformed.len() as u64,
            queues,
            deprovisioning,
            requests_per_second: requests_per_second.unwrap_or(DEFAULT_REQUESTS_PER_SECOND),
            rate_cards: cards
                .as_ref()
                .map(|(cards, unavailable)| (cards, unavailable.as_deref())),
        },
        now,
        hours,
    ))
}

/// Renders one Region's status; attention when anything urgent or failing was found.
pub fn render(place: &Place, report: &StatusReport, format: Format) -> Outcome {
    let attention = report.attention.iter().any(|a| a.urgency != Urgency::Info);
    let text = match format {
        Format::Json => json(&RegionStatus { place, report }),
        Format::Human => human(place, report),
    };
    Outcome::flagged(text, attention)
}

fn human(place: &Place, report: &StatusReport) -> String {
    let mut out = format!(
        "Region {}{} at {}\n",
        place.region,
        place
            .stack
            .as_deref()
            .map(|s| format!(" (stack {s})"))
            .unwrap_or_default(),
        awsmp_core::time::format_instant(report.now)
    );
    if report.hours.is_empty() {
        out.push_str(&format!("no usage since {}\n", report.from));
    } else {
        out.push_str(&table(
            &[
                "hour",
                "rows pending",
                "counted",
                "rejected",
                "expired",
                "records pending",
                "billed",
                "quantity billed",
                "error",
                "not subscribed",
                "expired unsent",
            ],
            report.hours.iter().map(|(hour, c)| {
                vec![
                    hour.to_string(),
                    c.rows_pending.to_string(),
                    c.rows_counted.to_string(),
                    c.rows_rejected.to_string(),
                    c.rows_expired.to_string(),
                    c.records_pending.to_string(),
                    c.records_billed.to_string(),
                    c.quantity_billed.to_string(),
                    c.records_error.to_string(),
                    c.records_not_subscribed.to_string(),
                    c.records_expired.to_string(),
                ]
            }),
        ));
        out.push('\n');
    }
    match (report.oldest_pending, report.oldest_pending_hours_left) {
        (Some(hour), Some(left)) => out.push_str(&format!(
            "oldest pending usage: {hour} ({left} h left in the 24 h window)\n"
        )),
        _ => out.push_str("nothing pending\n"),
    }
    let backlog = &report.backlog;
    let rows = match backlog.rows_pending {
        0 => String::new(),
        n => format!(", {n} raw row(s) to aggregate"),
    };
    if backlog.records_pending > 0 {
        out.push_str(&format!(
            "backlog: {} record(s) pending{rows}; at {} requests/s the submitter sends about {} records an hour: they drain in about {}\n",
            backlog.records_pending,
            backlog.requests_per_second,
            backlog.records_per_hour,
            minutes_text(backlog.drain_minutes)
        ));
    } else if backlog.rows_pending > 0 {
        out.push_str(&format!("backlog: no record pending yet{rows}\n"));
    }
    if !report.queues.is_empty() {
        let queues: Vec<String> = report
            .queues
            .iter()
            .map(|q| match q.dead_letters {
                Some(d) => format!("{} {} (DLQ {d})", q.name, q.depth),
                None => format!("{} {}", q.name, q.depth),
            })
            .collect();
        out.push_str(&format!("queues: {}\n", queues.join(", ")));
    }
    out.push_str(&format!(
        "subscribers deprovisioning: {}\n",
        report.deprovisioning
    ));
    if let Some(charges) = &report.charges
        && !charges.total.is_empty()
    {
        let total: Vec<String> = charges
            .total
            .iter()
            .map(|(currency, amount)| format!("{amount} {currency}"))
            .collect();
        out.push_str(&format!(
            "estimated charges of the billed usage shown: {} ({ESTIMATE_LABEL})\n",
            total.join(", ")
        ));
    }
    let limits = &report.limits;
    if let Some((hour, rows)) = limits.busiest_ingest_hour {
        out.push_str(&format!(
            "limits: busiest ingest hour {hour}: {rows} rows, {}.{}% of the {} rows an hour one metering_pending key takes ({} rows/s)\n",
            limits.ingest_per_mille / 10,
            limits.ingest_per_mille % 10,
            awsmp_operate::status::PENDING_KEY_ROWS_PER_SECOND * 3600,
            awsmp_operate::status::PENDING_KEY_ROWS_PER_SECOND
        ));
    }
    if let Some((hour, records)) = limits.busiest_records_hour {
        out.push_str(&format!(
            "limits: busiest hour {hour}: {records} records, {}.{}% of the {} per hour the submitter sends at {} requests/s\n",
            limits.records_per_mille / 10,
            limits.records_per_mille % 10,
            backlog.records_per_hour,
            backlog.requests_per_second
        ));
    }
    if report.attention.is_empty() {
        out.push_str("nothing needs attention\n");
    } else {
        out.push_str("needs attention:\n");
        for a in &report.attention {
            let label = match a.urgency {
                Urgency::Urgent => "URGENT ",
                Urgency::Warning => "warning",
                Urgency::Info => "info   ",
            };
            out.push_str(&format!("  {label} {}\n", a.message));
        }
    }
    out
}

/// Per hour, what is pending, billed and failed; queues; what needs attention first.
///
/// Example: awsmp status --stage prod --product-code abc123 --region us-east-1
#[derive(Debug, clap::Args)]
pub struct Command {
    /// Hours to show (1 to 744), ending with the current one (pending usage older than
    /// that is shown too).
    #[arg(long, default_value_t = 24, value_parser = clap::value_parser!(u32).range(1..=744))]
    hours: u32,
    /// Leave out the estimated charges and the unpriced-dimension check (they read each
    /// billed buyer's rate card: aws-marketplace:DescribeAgreement and GetAgreementTerms).
    #[arg(long)]
    no_charges: bool,
}

impl Command {
    /// Reads each deployment named and renders its status.
    pub async fn run(self, ctx: &Ctx<'_>) -> Result<Vec<Outcome>, CommandError> {
        let agreements = super::charges_api(ctx, self.no_charges).await;
        let mut out = Vec::new();
        for s in stores(ctx.deployment).await? {
            let pricing = super::pricing(&s, agreements.as_ref());
            let queues = queues::depths(&s.sqs, &s.deployment.queues).await?;
            let deprovisioning = match &s.subscribers {
                Some(store) => store.deprovisioning().await?.len() as u64,
                None => 0,
            };
            let report = read(
                &s.operator,
                &queues,
                deprovisioning,
                s.deployment.requests_per_second,
                ctx.now,
                self.hours,
                pricing,
            )
            .await?;
            let place = Place {
                region: s.deployment.region.clone(),
                stack: s.deployment.stack.clone(),
            };
            out.push(render(&place, &report, ctx.format));
        }
        Ok(out)
    }
}

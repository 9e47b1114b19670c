//! `awsmp trail`: what CloudTrail Event History recorded of our `BatchMeterUsage`
//! calls (in the metering Region, at most 90 days back, about 15 minutes behind),
//! each record and its answer next to our aggregated record of the same group.

use std::collections::{BTreeMap, BTreeSet};

use awsmp_aws::DynamoAggregatedStore;
use awsmp_core::model::{AggregatedRecord, GroupKey};
use awsmp_core::ports::{AggregatedStore, PortError};
use awsmp_core::time::{Instant, format_instant};
use awsmp_operate::reconcile::{
    EventHistoryWindow, TrailError, TrailEvents, TrailLog, TrailRow, UnreadableEvent, join_trail,
    read_trail,
};
use chrono::Duration;
use serde::Serialize;

use super::{Ctx, instant_arg, stores};
use crate::error::CommandError;
pub(crate) use crate::output::table;
use crate::output::{Format, Outcome};

/// Hours `awsmp trail` looks back without `--since`.
pub const DEFAULT_TRAIL_HOURS: i64 = 24;

/// A failed `trail` or `reconcile`, worded for the operator.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// A bad argument (exit code 2).
    #[error("{0}")]
    Usage(String),
    /// CloudTrail refused or failed (exit code 1).
    #[error(transparent)]
    Trail(#[from] TrailError),
    /// Our tables could not be read (exit code 1).
    #[error(transparent)]
    Store(#[from] PortError),
    /// A feed file could not be read (exit code 1).
    #[error("{0}")]
    Io(String),
    /// The data feed bucket could not be read (exit code 4 when something is not
    /// there, else 1).
    #[error(transparent)]
    Sdds(#[from] crate::commands::reconcile::s3::SddsS3Error),
}

impl From<ReportError> for CommandError {
    fn from(e: ReportError) -> Self {
        use crate::commands::reconcile::s3::SddsS3Error;
        match e {
            ReportError::Usage(m) => CommandError::Usage(m),
            ReportError::Trail(t) => CommandError::Aws(t.to_string()),
            ReportError::Store(p) => CommandError::Store(p),
            ReportError::Io(m) => CommandError::Io(m),
            ReportError::Sdds(e) => match e {
                SddsS3Error::NoBucket { .. }
                | SddsS3Error::NoFeed { .. }
                | SddsS3Error::NoMonthFile { .. } => CommandError::NotFound(e.to_string()),
                _ => CommandError::Aws(e.to_string()),
            },
        }
    }
}

/// What a report produced: its text, and whether something needs attention
/// (a disagreement, an unreadable event or line: exit code 3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// What to print on stdout (a table, or one JSON document).
    pub text: String,
    /// Whether something needs attention.
    pub attention: bool,
}

impl Report {
    /// What the command prints, flagged when something needs attention.
    pub fn outcome(self) -> Outcome {
        Outcome::flagged(self.text, self.attention)
    }

    /// `doc` as the report's text: one pretty JSON document on its own lines.
    pub(crate) fn json(doc: &impl Serialize, attention: bool) -> Result<Self, ReportError> {
        let text = serde_json::to_string_pretty(doc)
            .map_err(|e| ReportError::Io(format!("cannot encode the report as JSON: {e}")))?;
        Ok(Report {
            text: text + "\n",
            attention,
        })
    }
}

/// What `awsmp trail` shows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrailArgs {
    /// First call time (default: 24 hours ago; at most 90 days back).
    pub since: Option<Instant>,
    /// Last call time, in the same forms (default: now).
    pub until: Option<Instant>,
    /// Only records of this license.
    pub license: Option<String>,
    /// The metering Region (printed; the trail client must be in it).
    pub region: String,
    /// One JSON document instead of tables.
    pub json: bool,
}

/// Reads the trail for `window`, with a spinner counting events.
pub(crate) async fn read_window(
    trail: &dyn TrailEvents,
    window: &EventHistoryWindow,
    what: &'static str,
) -> Result<TrailLog, TrailError> {
    let bar = crate::output::spinner(&format!("{what}: reading CloudTrail Event History"));
    let log = read_trail(trail, window.since, window.until, |n| {
        bar.set_message(format!("{what}: {n} BatchMeterUsage calls read"));
        bar.tick();
    })
    .await;
    bar.finish_and_clear();
    log
}

/// `arn:...:license:l-0123…` shortened to its id for tables (JSON keeps it whole).
pub(crate) fn short_license(arn: &str) -> String {
    arn.rsplit([':', '/']).next().unwrap_or(arn).to_string()
}

/// The window lines every report starts with.
pub(crate) fn window_lines(region: &str, window: &EventHistoryWindow) -> String {
    let mut out = format!(
        "CloudTrail Event History, {region}: calls from {} to {}\n",
        format_instant(window.since),
        format_instant(window.until)
    );
    if window.clamped {
        out.push_str(
            "  Event History keeps 90 days: older calls are not shown (use the SDDS feed for older months).\n",
        );
    }
    if window.visible_until < window.until {
        out.push_str(&format!(
            "  Calls after {} may not be visible yet (Event History is about 15 minutes behind).\n",
            format_instant(window.visible_until)
        ));
    }
    out
}

/// Lists unreadable events and damaged records.
pub(crate) fn problem_lines(log: &TrailLog) -> Vec<String> {
    let mut lines: Vec<String> = log
        .unreadable
        .iter()
        .map(|UnreadableEvent { event_id, problem }| {
            format!(
                "event {}: {problem}",
                event_id.as_deref().unwrap_or("(no id)")
            )
        })
        .collect();
    for event in &log.events {
        for problem in &event.problems {
            lines.push(format!("event {}: {problem}", event.event_id));
        }
    }
    lines
}

#[derive(Serialize, schemars::JsonSchema)]
pub(crate) struct TrailJson<'a> {
    region: &'a str,
    window: &'a EventHistoryWindow,
    calls: usize,
    failed_calls: Vec<FailedCall>,
    rows: &'a [TrailRow],
    problems: Vec<String>,
}

#[derive(Serialize, schemars::JsonSchema)]
pub(crate) struct FailedCall {
    event_id: String,
    event_time: String,
    error_code: String,
    error_message: Option<String>,
    records: usize,
}

/// `awsmp trail`: reads CloudTrail `BatchMeterUsage` calls of the window and joins
/// each record to our aggregated record of its group (one `get` per group).
///
/// Needs: a [`TrailEvents`] in the metering Region (the CLI's
/// [`crate::cloudtrail::SdkTrailEvents`]) and the aggregated-usage store of that
/// Region. Fails only when CloudTrail or the table cannot be read; an unreadable
/// event is listed, and sets [`Report::attention`], as does any record whose answer
/// disagrees with our table.
pub async fn trail_report(
    trail: &dyn TrailEvents,
    aggregated: &dyn AggregatedStore,
    args: &TrailArgs,
    now: Instant,
) -> Result<Report, ReportError> {
    if let (Some(s), Some(u)) = (args.since, args.until)
        && s > u
    {
        return Err(ReportError::Usage(format!(
            "--since {} is after --until {}",
            format_instant(s),
            format_instant(u)
        )));
    }
    let since = args
        .since
        .unwrap_or(now - Duration::hours(DEFAULT_TRAIL_HOURS));
    let window = EventHistoryWindow::new(Some(since), args.until, now);
    let mut log = read_window(trail, &window, "trail").await?;
    if let Some(license) = &args.license {
        for event in &mut log.events {
            event
                .records
                .retain(|r| r.submitted.license_arn.as_deref() == Some(license.as_str()));
        }
        log.events.retain(|e| !e.records.is_empty());
    }
    let keys: BTreeSet<GroupKey> = log
        .events
        .iter()
        .flat_map(|e| e.records.iter().filter_map(|r| r.submitted.group_key()))
        .collect();
    let mut ours: BTreeMap<GroupKey, AggregatedRecord> = BTreeMap::new();
    for key in keys {
        if let Some(record) = aggregated.get(&key).await? {
            ours.insert(key, record);
        }
    }
    let rows = join_trail(&log.events, &ours);
    let problems = problem_lines(&log);
    let failed: Vec<FailedCall> = log
        .events
        .iter()
        .filter_map(|e| {
            e.error.as_ref().map(|err| FailedCall {
                event_id: e.event_id.clone(),
                event_time: format_instant(e.event_time),
                error_code: err.code.clone(),
                error_message: err.message.clone(),
                records: e.records.len(),
            })
        })
        .collect();
    let attention = !problems.is_empty() || rows.iter().any(|r| !r.consistent);
    if args.json {
        let doc = TrailJson {
            region: &args.region,
            window: &window,
            calls: log.events.len(),
            failed_calls: failed,
            rows: &rows,
            problems,
        };
        return Report::json(&doc, attention);
    }
    let mut out = window_lines(&args.region, &window);
    out.push_str(&format!(
        "{} BatchMeterUsage calls, {} records{}\n",
        log.events.len(),
        rows.len(),
        args.license
            .as_deref()
            .map(|l| format!(" of license {l}"))
            .unwrap_or_default()
    ));
    if !rows.is_empty() {
        let cells: Vec<Vec<String>> = rows
            .iter()
            .map(|r| {
                let (license, account, hour) = match &r.key {
                    Some(k) => (
                        short_license(&k.license_arn),
                        k.customer_aws_account_id.clone(),
                        k.hour.to_string(),
                    ),
                    None => ("-".into(), "-".into(), format_instant(r.timestamp)),
                };
                vec![
                    format_instant(r.event_time),
                    license,
                    account,
                    r.dimension.clone(),
                    hour,
                    r.quantity.to_string(),
                    r.outcome.clone(),
                    r.aws_record_id.clone().unwrap_or_else(|| "-".into()),
                    match (r.our_status, r.our_quantity) {
                        (Some(s), Some(q)) => format!("{s} {q}"),
                        _ => "-".into(),
                    },
                    if r.consistent {
                        "ok".into()
                    } else {
                        "CHECK".into()
                    },
                    r.note.clone(),
                ]
            })
            .collect();
        out.push_str(&table(
            &[
                "call (UTC)",
                "license",
                "account",
                "dimension",
                "hour",
                "quantity",
                "AWS answer",
                "meteringRecordId",
                "ours",
                "agrees",
                "note",
            ],
            cells,
        ));
        out.push('\n');
    }
    if !failed.is_empty() {
        out.push_str("Calls refused as a whole (nothing billed):\n");
        for f in &failed {
            out.push_str(&format!(
                "  {} {} ({} records): {}\n",
                f.event_time,
                f.error_code,
                f.records,
                f.error_message.as_deref().unwrap_or("")
            ));
        }
    }
    if !problems.is_empty() {
        out.push_str("Could not read:\n");
        for p in &problems {
            out.push_str(&format!("  {p}\n"));
        }
    }
    Ok(Report {
        text: out,
        attention,
    })
}

/// CloudTrail Event History of the BatchMeterUsage calls (about 15 minutes behind,
/// at most 90 days), each record joined to our aggregated record.
///
/// Example: awsmp trail --stage prod --product-code abc123 --since 2026-11-30T00:00:00Z
#[derive(Debug, clap::Args)]
pub struct Command {
    /// First call time `YYYY-MM-DDTHH:MM:SSZ`, or an hour `YYYY-MM-DDTHH` for its start
    /// (default: 24 hours ago).
    #[arg(long)]
    since: Option<String>,
    /// Last call time, in the same forms (default: now).
    #[arg(long)]
    until: Option<String>,
    /// Only this license's records.
    #[arg(long)]
    license: Option<String>,
}

impl Command {
    /// Reads each deployment's trail, in its Region.
    pub async fn run(self, ctx: &Ctx<'_>) -> Result<Vec<Outcome>, CommandError> {
        let since = self.since.map(|t| instant_arg("--since", &t)).transpose()?;
        let until = self.until.map(|t| instant_arg("--until", &t)).transpose()?;
        let mut out = Vec::new();
        for s in stores(ctx.deployment).await? {
            let config = ctx.deployment.sdk_config(Some(&s.deployment.region)).await;
            let trail = crate::cloudtrail::SdkTrailEvents::in_region(&config, &s.deployment.region);
            let aggregated =
                DynamoAggregatedStore::new(s.client.clone(), s.deployment.aggregated_table.clone());
            let args = TrailArgs {
                since,
                until,
                license: self.license.clone(),
                region: s.deployment.region.clone(),
                json: ctx.format == Format::Json,
            };
            out.push(
                trail_report(&trail, &aggregated, &args, ctx.now)
                    .await?
                    .outcome(),
            );
        }
        Ok(out)
    }
}

//! `awsmp reconcile`: what we billed against what AWS recorded, for one month.
//! Against CloudTrail Event History (per license, account, dimension and hour; the
//! last 90 days only), or against the SDDS Daily Usage feed joined through the
//! Account and Product feeds (per account, product, dimension and UTC day; local
//! files, or the feed's S3 bucket: [`s3`]). Lists every discrepancy with totals per
//! kind.

pub mod s3;

use std::path::PathBuf;

use awsmp_core::ports::{MalformedItem, OperatorStore};
use awsmp_core::time::{HourBucket, Instant, format_instant};
use awsmp_operate::reconcile::sdds::{
    ParsedFeed, parse_account_feed, parse_product_feed, parse_usage_feed,
};
use awsmp_operate::reconcile::{
    DayWindow, DiscrepancyKind, EventHistoryWindow, FeedFile, LineProblem, OurRecord,
    Reconciliation, TrailEvents, TrailWindow, join_feeds, reconcile_with_sdds,
    reconcile_with_trail,
};
use chrono::{Datelike, Duration, NaiveDate, TimeZone, Utc};
use serde::Serialize;

use super::{Ctx, stores};
use crate::commands::trail::{
    Report, ReportError, problem_lines, read_window, short_license, table, window_lines,
};
use crate::error::CommandError;
use crate::output::{Format, Outcome};

/// The three SDDS feeds' files, as text, each feed's oldest first (read from disk,
/// one file each, or from the bucket by [`s3::SddsBucket::read_month`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SddsFiles {
    /// The Daily Usage feed (`data.csv` of the month, and of the months after).
    pub daily_usage: Vec<FeedFile>,
    /// The Account feed.
    pub account: Vec<FeedFile>,
    /// The Product feed.
    pub product: Vec<FeedFile>,
    /// Where they came from (`local files`, `s3://bucket/prefix/`).
    pub source: String,
}

impl SddsFiles {
    /// Reads the three files; an unreadable one is an error naming it.
    pub fn read(
        daily_usage: &std::path::Path,
        account: &std::path::Path,
        product: &std::path::Path,
    ) -> Result<Self, ReportError> {
        // One file per feed: problems need not name it.
        let read = |path: &std::path::Path, what: &str| {
            std::fs::read_to_string(path)
                .map(|text| {
                    vec![FeedFile {
                        name: String::new(),
                        text,
                    }]
                })
                .map_err(|e| {
                    ReportError::Io(format!(
                        "cannot read the {what} feed file {}: {e}",
                        path.display()
                    ))
                })
        };
        Ok(SddsFiles {
            daily_usage: read(daily_usage, "daily usage")?,
            account: read(account, "account")?,
            product: read(product, "product")?,
            source: "local files".into(),
        })
    }

    /// Every file read, by name (empty for local files).
    pub fn names(&self) -> Vec<String> {
        self.daily_usage
            .iter()
            .chain(&self.account)
            .chain(&self.product)
            .map(|f| f.name.clone())
            .filter(|n| !n.is_empty())
            .collect()
    }
}

/// The feeds of `month` (`YYYY-MM`, default the current UTC month) from the data
/// feed bucket (see [`s3`]), which must be `owner`'s, with a spinner naming each file
/// as it is read.
pub async fn read_sdds_bucket(
    config: &aws_config::SdkConfig,
    bucket: &str,
    owner: &str,
    prefix: Option<&str>,
    month: Option<&str>,
    now: Instant,
) -> Result<SddsFiles, ReportError> {
    let month = month
        .map(str::to_string)
        .unwrap_or_else(|| format!("{:04}-{:02}", now.year(), now.month()));
    let (start, _) = month_bounds(&month)?;
    let bar = crate::output::spinner(&format!("listing s3://{bucket}"));
    let opened = s3::SddsBucket::open(config, bucket, owner, prefix).await;
    let files = match opened {
        Ok(b) => {
            b.read_month((start.year(), start.month()), &|key| {
                bar.set_message(format!("reading s3://{bucket}/{key}"))
            })
            .await
        }
        Err(e) => Err(e),
    };
    bar.finish_and_clear();
    Ok(files?)
}

/// The account the data feed bucket must belong to: `--sdds-bucket-owner`, else the
/// account of the main stack (from its stack id). With neither, a usage error: the
/// bucket is never read without an owner to hold it to.
pub fn bucket_owner(
    flag: Option<&str>,
    deployments: &[crate::deployment::Deployment],
) -> Result<String, CommandError> {
    if let Some(owner) = flag {
        return Ok(owner.to_string());
    }
    deployments
        .iter()
        .find_map(|d| d.account.clone())
        .ok_or_else(|| {
            CommandError::Usage(
                "--sdds-bucket: the account that owns the bucket is not known (no main stack was read, so its account is not known): pass --sdds-bucket-owner ACCOUNT, the 12-digit account of the data feed bucket; every S3 call names it, so a bucket of that name another account holds is refused"
                    .into(),
            )
        })
}

/// `--sdds-bucket-owner`: an AWS account id, 12 digits.
fn account_arg(text: &str) -> Result<String, String> {
    if crate::deployment::is_account_id(text) {
        Ok(text.to_string())
    } else {
        Err("an AWS account id is 12 digits, e.g. 123456789012".into())
    }
}

/// What AWS's side of the reconciliation is.
pub enum AwsRecords<'a> {
    /// CloudTrail Event History in the metering Region.
    CloudTrail(&'a dyn TrailEvents),
    /// The SDDS feeds.
    Sdds(&'a SddsFiles),
}

/// What `awsmp reconcile` compares.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReconcileArgs {
    /// The month `YYYY-MM` (default: the current UTC month).
    pub month: Option<String>,
    /// Only this license's records (ours; AWS's records of other licenses are then
    /// left out too).
    pub license: Option<String>,
    /// The metering Region (printed).
    pub region: String,
    /// One JSON document instead of tables.
    pub json: bool,
    /// Each license's rate card, to say what each discrepancy is worth (an estimate);
    /// `None`: quantities only.
    pub rate_cards: Option<std::collections::BTreeMap<String, awsmp_core::charges::RateCard>>,
}

/// Our aggregated records, every page of the operator store (of one license when
/// given), with the items that could not be read as records. The store keeps no
/// write time in the record, so `recorded_at` is unknown.
pub async fn load_our_records(
    store: &dyn OperatorStore,
    license: Option<&str>,
) -> Result<(Vec<OurRecord>, Vec<MalformedItem>), ReportError> {
    let mut records = Vec::new();
    let mut malformed = Vec::new();
    let mut cursor = None;
    loop {
        let page = store.records_page(license, cursor.take()).await?;
        records.extend(page.items.into_iter().map(|record| OurRecord {
            record,
            recorded_at: None,
        }));
        malformed.extend(page.malformed);
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    Ok((records, malformed))
}

/// The first instant of `month` (`YYYY-MM`) and of the month after.
pub fn month_bounds(month: &str) -> Result<(Instant, Instant), ReportError> {
    let bad = || ReportError::Usage(format!("--month {month:?}: expected YYYY-MM, e.g. 2026-03"));
    let (y, m) = month.split_once('-').ok_or_else(bad)?;
    if y.len() != 4 || m.len() != 2 {
        return Err(bad());
    }
    let year: i32 = y.parse().map_err(|_| bad())?;
    let month_no: u32 = m.parse().map_err(|_| bad())?;
    let start = NaiveDate::from_ymd_opt(year, month_no, 1).ok_or_else(bad)?;
    let next = if month_no == 12 {
        NaiveDate::from_ymd_opt(year + 1, 1, 1)
    } else {
        NaiveDate::from_ymd_opt(year, month_no + 1, 1)
    }
    .ok_or_else(bad)?;
    let at = |d: NaiveDate| {
        d.and_hms_opt(0, 0, 0)
            .map(|n| Utc.from_utc_datetime(&n))
            .ok_or_else(bad)
    };
    Ok((at(start)?, at(next)?))
}

#[derive(Serialize, schemars::JsonSchema)]
pub(crate) struct ReconcileJson<'a> {
    region: &'a str,
    month: String,
    compared_from: String,
    compared_to: String,
    trail_window: Option<EventHistoryWindow>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sdds_source: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sdds_files: Option<Vec<String>>,
    reconciliation: &'a Reconciliation,
    problems: Vec<String>,
}

/// `awsmp reconcile`: compares `ours` (from [`load_our_records`]) with AWS's records
/// of the month.
///
/// CloudTrail: the hours of the month that Event History still covers (90 days),
/// the calls read up to 24 hours past the month (late submissions), records sent in
/// the last 15 minutes listed as not yet visible. SDDS: the days of the month up to
/// yesterday (the feed is delivered at midnight UTC for the day before). Every
/// discrepancy, unreadable event, malformed feed line or unreadable item of ours
/// sets [`Report::attention`].
pub async fn reconcile_report(
    aws: AwsRecords<'_>,
    ours: &[OurRecord],
    our_malformed: &[MalformedItem],
    args: &ReconcileArgs,
    now: Instant,
) -> Result<Report, ReportError> {
    let month = args
        .month
        .clone()
        .unwrap_or_else(|| format!("{:04}-{:02}", now.year(), now.month()));
    let (month_start, month_end) = month_bounds(&month)?;
    if month_start > now {
        return Err(ReportError::Usage(format!(
            "--month {month} has not started yet"
        )));
    }
    let ours: Vec<OurRecord> = match &args.license {
        Some(l) => ours
            .iter()
            .filter(|o| &o.record.key.license_arn == l)
            .cloned()
            .collect(),
        None => ours.to_vec(),
    };
    let mut problems: Vec<String> = our_malformed
        .iter()
        .map(|m| {
            format!(
                "our aggregated item {} {}: {}",
                m.license_arn, m.sort_key, m.problem
            )
        })
        .collect();
    let mut sdds_source = None;
    let mut sdds_files = None;
    let (reconciliation, from, to, trail_window) = match aws {
        AwsRecords::CloudTrail(trail) => {
            let history = EventHistoryWindow::new(
                Some(month_start),
                Some(month_end + Duration::hours(24)),
                now,
            );
            let mut log = read_window(trail, &history, "reconcile").await?;
            if let Some(l) = &args.license {
                for e in &mut log.events {
                    e.records
                        .retain(|r| r.submitted.license_arn.as_deref() == Some(l.as_str()));
                }
            }
            problems.extend(problem_lines(&log));
            // The first whole hour Event History still covers.
            let covered = HourBucket::containing(history.since);
            let from = if covered.start() < history.since {
                covered.plus_hours(1)
            } else {
                covered
            }
            .max(HourBucket::containing(month_start));
            let to =
                HourBucket::containing(month_end).min(HourBucket::containing(now).plus_hours(1));
            let window = TrailWindow {
                from,
                to,
                visible_until: history.visible_until,
            };
            (
                reconcile_with_trail(&ours, &log.events, &window),
                from.to_string(),
                to.to_string(),
                Some(history),
            )
        }
        AwsRecords::Sdds(files) => {
            let usage = ParsedFeed::from_files(&files.daily_usage, parse_usage_feed);
            let accounts = ParsedFeed::from_files(&files.account, parse_account_feed);
            let products = ParsedFeed::from_files(&files.product, parse_product_feed);
            sdds_source = Some(files.source.clone());
            sdds_files = Some(files.names());
            let joined = join_feeds(&usage, &accounts, &products);
            problems.extend(joined.problems.iter().map(LineProblem::to_string));
            let today = now.date_naive();
            let window = DayWindow {
                from: month_start.date_naive(),
                to: month_end.date_naive().min(today),
            };
            (
                reconcile_with_sdds(&ours, &joined.usage, &window),
                window.from.to_string(),
                window.to.to_string(),
                None,
            )
        }
    };
    let mut reconciliation = reconciliation;
    if let Some(cards) = &args.rate_cards {
        awsmp_operate::reconcile::price_discrepancies(&mut reconciliation, cards);
    }
    let attention = !reconciliation.is_clean() || !problems.is_empty();
    if args.json {
        let doc = ReconcileJson {
            region: &args.region,
            month: month.clone(),
            compared_from: from,
            compared_to: to,
            trail_window,
            sdds_source,
            sdds_files,
            reconciliation: &reconciliation,
            problems,
        };
        return Report::json(&doc, attention);
    }
    let mut out = String::new();
    match &trail_window {
        Some(w) => out.push_str(&window_lines(&args.region, w)),
        None => {
            out.push_str(&format!(
                "SDDS Daily Usage feed (joined through the Account and Product feeds), from {}\n",
                sdds_source.as_deref().unwrap_or("local files")
            ));
            for name in sdds_files.iter().flatten() {
                out.push_str(&format!("  read {name}\n"));
            }
        }
    }
    out.push_str(&format!(
        "Month {month}: compared {from} to {to} (excluded); {} keys, {} agree\n",
        reconciliation.compared, reconciliation.agreed
    ));
    out.push_str(&format!(
        "Billed by us: {}; recorded by AWS: {}\n",
        reconciliation.ours_total, reconciliation.aws_total
    ));
    if !reconciliation.discrepancy_value.is_empty() {
        let worth: Vec<String> = reconciliation
            .discrepancy_value
            .iter()
            .map(|(currency, amount)| format!("{amount} {currency}"))
            .collect();
        out.push_str(&format!(
            "The discrepancies are worth {} ({})\n",
            worth.join(", "),
            awsmp_core::charges::ESTIMATE_LABEL
        ));
    }
    out.push_str(&table(
        &["discrepancy", "keys", "ours", "AWS"],
        DiscrepancyKind::ALL
            .iter()
            .map(|k| {
                let t = reconciliation.totals.get(k).copied().unwrap_or_default();
                vec![
                    k.label().to_string(),
                    t.count.to_string(),
                    t.ours.to_string(),
                    t.aws.to_string(),
                ]
            })
            .collect::<Vec<Vec<String>>>(),
    ));
    out.push('\n');
    let rows = |list: &[awsmp_operate::reconcile::Discrepancy]| -> Vec<Vec<String>> {
        list.iter()
            .map(|d| {
                vec![
                    d.kind.label().to_string(),
                    d.key.account.clone(),
                    d.key
                        .license
                        .as_deref()
                        .map(|l| {
                            l.split(", ")
                                .map(short_license)
                                .collect::<Vec<_>>()
                                .join(", ")
                        })
                        .unwrap_or_else(|| "-".into()),
                    d.key.dimension.clone(),
                    d.key.period.to_string(),
                    d.ours.map_or_else(|| "-".into(), |q| q.to_string()),
                    d.aws.map_or_else(|| "-".into(), |q| q.to_string()),
                    d.our_status.map_or_else(|| "-".into(), |s| s.to_string()),
                    match &d.value {
                        Some(w) => match (&w.amount, &w.currency) {
                            (Some(a), Some(c)) => format!("{a} {c}"),
                            _ => w.basis.to_string(),
                        },
                        None => "-".into(),
                    },
                    d.note.clone().unwrap_or_default(),
                ]
            })
            .collect()
    };
    let headers = [
        "discrepancy",
        "account",
        "license",
        "dimension",
        "period",
        "ours",
        "AWS",
        "our status",
        "worth (est.)",
        "note",
    ];
    if reconciliation.discrepancies.is_empty() {
        out.push_str("No discrepancies.\n");
    } else {
        out.push_str(&table(&headers, rows(&reconciliation.discrepancies)));
        out.push('\n');
    }
    if !reconciliation.not_yet_visible.is_empty() {
        out.push_str("Billed too recently for Event History to show (run again in 15 minutes):\n");
        out.push_str(&table(&headers, rows(&reconciliation.not_yet_visible)));
        out.push('\n');
    }
    if !problems.is_empty() {
        out.push_str("Could not read:\n");
        for p in &problems {
            out.push_str(&format!("  {p}\n"));
        }
    }
    if let Some(w) = &trail_window
        && w.since > month_start
    {
        out.push_str(&format!(
            "Hours before {} are not compared: Event History keeps 90 days; reconcile them against the SDDS feed.\n",
            format_instant(w.since)
        ));
    }
    Ok(Report {
        text: out,
        attention,
    })
}

/// What we billed against AWS's records: CloudTrail (last 90 days), or the Seller
/// Delivery Data Feed's daily usage with its account and product feeds, from the
/// feed's S3 bucket or local files.
///
/// Example: awsmp reconcile --month 2026-11 --sdds-bucket my-marketplace-feeds
///
/// Example: awsmp reconcile --month 2026-11 --sdds-usage data.csv --sdds-accounts account.csv --sdds-products product.csv
#[derive(Debug, clap::Args)]
pub struct Command {
    /// The month `YYYY-MM` (default: this month, UTC).
    #[arg(long)]
    month: Option<String>,
    /// Only this license.
    #[arg(long)]
    license: Option<String>,
    /// Leave out what each discrepancy is worth (it reads each billed buyer's rate
    /// card: aws-marketplace:DescribeAgreement and GetAgreementTerms).
    #[arg(long)]
    no_charges: bool,
    /// The data feed bucket: the three feeds' files of the month are found in it
    /// (`<Feed>_V<n>/year=YYYY/month=MM/data.csv`). Needs s3:ListBucket and
    /// s3:GetObject (and kms:Decrypt on the bucket's key). Read only if it belongs to
    /// --sdds-bucket-owner.
    #[arg(long, conflicts_with_all = ["sdds_usage", "sdds_accounts", "sdds_products"])]
    sdds_bucket: Option<String>,
    /// The account (12 digits) that must own the data feed bucket; default: the main
    /// stack's account (from its stack id). Every S3 call names it (ExpectedBucketOwner),
    /// so a bucket of that name held by another account is refused, never read.
    #[arg(long, value_name = "ACCOUNT", requires = "sdds_bucket", value_parser = account_arg)]
    sdds_bucket_owner: Option<String>,
    /// The folder in the bucket the feeds are under (the data feed configuration's prefix).
    #[arg(long, requires = "sdds_bucket")]
    sdds_prefix: Option<String>,
    /// SDDS daily usage feed (CSV); with --sdds-accounts and --sdds-products.
    #[arg(long, requires_all = ["sdds_accounts", "sdds_products"])]
    sdds_usage: Option<PathBuf>,
    /// SDDS account feed (CSV).
    #[arg(long)]
    sdds_accounts: Option<PathBuf>,
    /// SDDS product feed (CSV).
    #[arg(long)]
    sdds_products: Option<PathBuf>,
}

impl Command {
    /// Reconciles each deployment named with CloudTrail, or with the data feeds.
    pub async fn run(self, ctx: &Ctx<'_>) -> Result<Vec<Outcome>, CommandError> {
        let all = stores(ctx.deployment).await?;
        let sdds = match (self.sdds_usage, self.sdds_accounts, self.sdds_products) {
            (Some(u), Some(a), Some(p)) => Some(SddsFiles::read(&u, &a, &p)?),
            (None, None, None) => match &self.sdds_bucket {
                Some(bucket) => {
                    let deployments: Vec<_> = all.iter().map(|s| s.deployment.clone()).collect();
                    let owner = bucket_owner(self.sdds_bucket_owner.as_deref(), &deployments)?;
                    let region = all.first().map(|s| s.deployment.region.clone());
                    let config = ctx.deployment.sdk_config(region.as_deref()).await;
                    Some(
                        read_sdds_bucket(
                            &config,
                            bucket,
                            &owner,
                            self.sdds_prefix.as_deref(),
                            self.month.as_deref(),
                            ctx.now,
                        )
                        .await?,
                    )
                }
                None => None,
            },
            _ => {
                return Err(CommandError::Usage(
                    "give all three SDDS feeds: --sdds-usage, --sdds-accounts and --sdds-products"
                        .into(),
                ));
            }
        };
        let agreements = super::charges_api(ctx, self.no_charges).await;
        let mut out = Vec::new();
        for s in all {
            let config = ctx.deployment.sdk_config(Some(&s.deployment.region)).await;
            let trail = crate::cloudtrail::SdkTrailEvents::in_region(&config, &s.deployment.region);
            let (ours, malformed) = load_our_records(&s.operator, self.license.as_deref()).await?;
            let aws = match &sdds {
                Some(files) => AwsRecords::Sdds(files),
                None => AwsRecords::CloudTrail(&trail),
            };
            let rate_cards = match super::pricing(&s, agreements.as_ref()) {
                Some((subscribers, api)) => {
                    let month = self
                        .month
                        .clone()
                        .unwrap_or_else(|| format!("{:04}-{:02}", ctx.now.year(), ctx.now.month()));
                    let (start, _) = month_bounds(&month)?;
                    let records: Vec<_> = ours.iter().map(|o| o.record.clone()).collect();
                    let (cards, _) = awsmp_operate::report::rate_cards(
                        &records,
                        HourBucket::containing(start),
                        subscribers,
                        api,
                    )
                    .await;
                    Some(cards)
                }
                None => None,
            };
            let args = ReconcileArgs {
                month: self.month.clone(),
                license: self.license.clone(),
                region: s.deployment.region.clone(),
                json: ctx.format == Format::Json,
                rate_cards,
            };
            out.push(
                reconcile_report(aws, &ours, &malformed, &args, ctx.now)
                    .await?
                    .outcome(),
            );
        }
        Ok(out)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn deployment(account: Option<&str>) -> crate::deployment::Deployment {
        crate::deployment::Deployment {
            region: "us-east-1".into(),
            stack: None,
            usage_table: "u".into(),
            aggregated_table: "a".into(),
            subscribers: None,
            queues: Default::default(),
            mode: None,
            requests_per_second: None,
            profile_table: None,
            account: account.map(str::to_string),
        }
    }

    #[test]
    fn the_bucket_owner_is_the_flag_else_the_stacks_account_else_asked_for() {
        let stack = [deployment(Some("123456789012"))];
        assert_eq!(
            bucket_owner(Some("210987654321"), &stack).unwrap(),
            "210987654321"
        );
        assert_eq!(bucket_owner(None, &stack).unwrap(), "123456789012");
        let unknown = bucket_owner(None, &[deployment(None)]).unwrap_err();
        assert!(matches!(unknown, CommandError::Usage(_)), "{unknown:?}");
        assert!(
            unknown
                .to_string()
                .contains("pass --sdds-bucket-owner ACCOUNT"),
            "{unknown}"
        );
        assert!(account_arg("123456789012").is_ok());
        for bad in ["12345678901", "1234567890123", "12345678901x", ""] {
            assert!(account_arg(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn months_are_checked_and_bounded() {
        let (s, e) = month_bounds("2026-12").unwrap();
        assert_eq!(format_instant(s), "2026-12-01T00:00:00Z");
        assert_eq!(format_instant(e), "2027-01-01T00:00:00Z");
        for bad in ["2026-13", "2026-1", "26-01", "march", "2026-00", ""] {
            let err = month_bounds(bad).unwrap_err().to_string();
            assert!(err.contains("expected YYYY-MM"), "{bad}: {err}");
        }
    }
}

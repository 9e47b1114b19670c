//! Command-line arguments and dispatch of `awsmp`.

use std::path::PathBuf;
use std::process::ExitCode;

use awsmp_aws::{
    DynamoAggregatedStore, DynamoOperatorStore, DynamoSubscriberStore, DynamoUsageStore,
};
use awsmp_core::model::GroupKey;
use awsmp_core::ports::SubscriberStore;
use awsmp_core::time::HourBucket;
use awsmp_operate::license::ChainFilter;
use clap::{CommandFactory, Parser, Subcommand};

use crate::commands::{CommandError, UsagePut, inspect, parse_tag, usage_put};
use crate::deployment::{Deployment, DeploymentArgs};
use crate::ops;
use crate::output::{EXIT_ATTENTION, EXIT_CONFLICT, Format, Outcome};

/// awsmp: operate an awsmp-metering deployment, or run the whole system locally.
///
/// Name the deployment once (--stage and --product-code, or --stack; --region per
/// metering Region) and every command finds its tables and queues in the stacks'
/// outputs. Exit codes: 0 done, 1 could not run, 2 bad arguments, 3 something needs
/// attention, 4 deployment not found, 5 an event id reused with other usage.
#[derive(Debug, Parser)]
#[command(name = "awsmp", version, about, long_about)]
struct Args {
    /// Print JSON for scripts instead of tables.
    #[arg(long, global = true)]
    json: bool,
    #[command(flatten)]
    deployment: DeploymentArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The local stack: both stacks on this machine, no AWS account needed.
    Local {
        #[command(subcommand)]
        command: LocalCommand,
    },
    /// Write usage rows.
    Usage {
        #[command(subcommand)]
        command: UsageCommand,
    },
    /// Per hour, what is pending, billed and failed; queues; what needs attention first.
    ///
    /// Example: awsmp status --stage prod --product-code abc123 --region us-east-1
    Status {
        /// Hours to show, ending with the current one (pending usage older than that is shown too).
        #[arg(long, default_value_t = 24)]
        hours: u32,
    },
    /// One self-contained HTML page with charts: billed quantity per hour and dimension,
    /// status mix per hour, rejections and failures by reason (--json: the series).
    ///
    /// The page loads nothing and runs no script (open it from disk, mail it, archive it);
    /// each chart has its numbers in a table beneath it.
    ///
    /// Example: awsmp report --stage prod --product-code abc123 --region us-east-1 --html billing.html --hours 48
    Report {
        /// Write the page here (replaced whole). With --json the series is printed too.
        #[arg(long, value_name = "FILE")]
        html: Option<PathBuf>,
        /// Hours to chart (1 to 744), ending with the current one (pending usage older than
        /// that is shown too).
        #[arg(long, default_value_t = 24, value_parser = clap::value_parser!(u32).range(1..=744))]
        hours: u32,
    },
    /// Every row and record that ended unbilled, with both codes and what to do.
    ///
    /// Example: awsmp failures --stage prod --product-code abc123 --since 2026-11-30T00
    Failures {
        /// First usage hour `YYYY-MM-DDTHH` (default: 48 hours ago).
        #[arg(long)]
        since: Option<String>,
    },
    /// What happened to a license, or to one group.
    Inspect {
        #[command(subcommand)]
        command: InspectCommand,
    },
    /// Send Error records again after their cause was fixed (inside the 24 h window,
    /// with their stored quantity).
    ///
    /// Example: awsmp replay 'arn:aws:license-manager::123456789012:license:l-1|111122223333|api|2026-11-30T10'
    Replay {
        /// Groups as `awsmp failures` prints them: license|account|dimension|hour.
        groups: Vec<String>,
        /// Instead of groups: every Error record of usage hours from `YYYY-MM-DDTHH`.
        #[arg(long, conflicts_with = "groups")]
        failed_since: Option<String>,
        /// Say what would be replayed; write nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// CloudTrail Event History of the BatchMeterUsage calls (about 15 minutes behind,
    /// at most 90 days), each record joined to our aggregated record.
    ///
    /// Example: awsmp trail --stage prod --product-code abc123 --since 2026-11-30T00:00:00Z
    Trail {
        /// First call time `YYYY-MM-DDTHH:MM:SSZ` (default: 24 hours ago).
        #[arg(long)]
        since: Option<String>,
        /// Last call time (default: now).
        #[arg(long)]
        until: Option<String>,
        /// Only this license's records.
        #[arg(long)]
        license: Option<String>,
    },
    /// What we billed against AWS's records: CloudTrail (last 90 days), or the Seller
    /// Delivery Data Feed's daily usage with its account and product feeds, from the
    /// feed's S3 bucket or local files.
    ///
    /// Example: awsmp reconcile --month 2026-11 --sdds-bucket my-marketplace-feeds
    ///
    /// Example: awsmp reconcile --month 2026-11 --sdds-usage data.csv --sdds-accounts account.csv --sdds-products product.csv
    Reconcile {
        /// The month `YYYY-MM` (default: this month, UTC).
        #[arg(long)]
        month: Option<String>,
        /// Only this license.
        #[arg(long)]
        license: Option<String>,
        /// The data feed bucket: the three feeds' files of the month are found in it
        /// (`<Feed>_V<n>/year=YYYY/month=MM/data.csv`). Needs s3:ListBucket and
        /// s3:GetObject (and kms:Decrypt on the bucket's key).
        #[arg(long, conflicts_with_all = ["sdds_usage", "sdds_accounts", "sdds_products"])]
        sdds_bucket: Option<String>,
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
    },
    /// Dead-letter queues.
    Dlq {
        #[command(subcommand)]
        command: DlqCommand,
    },
    /// Shell completions on stdout.
    ///
    /// Example: awsmp completions bash > /etc/bash_completion.d/awsmp
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

#[derive(Debug, Subcommand)]
enum LocalCommand {
    /// Start everything, run the scripted buyer lifecycle, print what was billed.
    ///
    /// Example: awsmp local up --serve --speed 60 (./deploy.sh --local passes its options here)
    Up {
        /// Keep running after the demo and print the endpoints; Ctrl-C stops it all.
        #[arg(long)]
        serve: bool,
        /// In --serve mode, virtual seconds per real second (schedules fire on the virtual clock).
        #[arg(long, default_value_t = 1)]
        speed: u32,
        /// Repository root holding the templates and web/ (default: current directory).
        #[arg(long)]
        root: Option<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
enum InspectCommand {
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

#[derive(Debug, Subcommand)]
enum DlqCommand {
    /// Move messages from a queue's DLQ back to it (sent, then deleted: none lost).
    ///
    /// Example: awsmp dlq redrive work --count 10 --dry-run
    Redrive {
        /// The queue: work, cleanup, deprovision (from the stack outputs), or a queue URL.
        queue: String,
        /// At most this many messages.
        #[arg(long, default_value_t = 1000)]
        count: u64,
        /// Count and show up to 10 messages; move nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

#[derive(Debug, Subcommand)]
enum UsageCommand {
    /// Write one usage row into one deployment (one --region); a retry with the same
    /// --event-id and usage is a no-op, the same id with other usage a conflict (exit
    /// 5), and writes in the same second never overwrite each other.
    ///
    /// Example: awsmp usage put --license ARN --account 111122223333 --dimension api --quantity 3 --event-id req-42
    Put {
        /// License ARN.
        #[arg(long)]
        license: String,
        /// Buyer AWS account id.
        #[arg(long)]
        account: String,
        /// Dimension (as defined in your listing, case-sensitive).
        #[arg(long)]
        dimension: String,
        /// Quantity (0..=2147483647). A negative one is parsed, so that it is refused
        /// with its reason code (`NegativeQuantity`) as the aggregator would refuse it.
        #[arg(long, allow_negative_numbers = true)]
        quantity: i64,
        /// UTC timestamp `YYYY-MM-DDTHH:MM:SS[Z]` (default: now).
        #[arg(long)]
        timestamp: Option<String>,
        /// Your event's id (makes retries safe).
        #[arg(long)]
        event_id: String,
        /// VMT tag `key=value` for the whole quantity (repeatable, at most 5).
        #[arg(long = "tag")]
        tags: Vec<String>,
    },
    /// Write usage from a CSV or JSON Lines file into one deployment (one --region):
    /// every line checked first as the aggregator would; resumable per table and per
    /// version of the file; a rerun writes nothing twice; a line reusing an event id
    /// with other usage is a conflict (exit 5).
    ///
    /// Example: awsmp usage import usage.csv --product-code abc123 --stage prod
    Import {
        /// The file (`.csv` with a header line, or `.jsonl`).
        file: PathBuf,
        /// File format (default: from the extension).
        #[arg(long, value_enum)]
        format: Option<ops::import::FileFormat>,
        /// Write the valid lines even when some are bad.
        #[arg(long)]
        write_valid: bool,
        /// Ignore the progress kept from an earlier run; start at the first line.
        #[arg(long)]
        restart: bool,
    },
}

/// Parses arguments and runs the command; errors print one line that says what to do.
pub async fn run() -> ExitCode {
    let args = Args::parse();
    init_logs();
    let format = if args.json {
        Format::Json
    } else {
        Format::Human
    };
    match dispatch(args, format).await {
        Ok(outcomes) => {
            let mut attention = false;
            let mut conflict = false;
            for outcome in outcomes {
                print!("{}", outcome.text);
                if !outcome.text.ends_with('\n') {
                    println!();
                }
                attention |= outcome.attention;
                conflict |= outcome.conflict;
            }
            if conflict {
                ExitCode::from(EXIT_CONFLICT)
            } else if attention {
                ExitCode::from(EXIT_ATTENTION)
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(error) => {
            eprintln!("awsmp: {error}");
            error.exit_code()
        }
    }
}

fn instant_arg(flag: &str, text: &str) -> Result<awsmp_core::time::Instant, CommandError> {
    awsmp_core::time::parse_usage_timestamp(text).map_err(|e| {
        CommandError::Usage(format!(
            "{flag}: {e} (write it as YYYY-MM-DDTHH:MM:SSZ, UTC)"
        ))
    })
}

impl From<crate::trail::ReportError> for CommandError {
    fn from(e: crate::trail::ReportError) -> Self {
        use crate::trail::ReportError;
        match e {
            ReportError::Usage(m) => CommandError::Usage(m),
            ReportError::Trail(t) => CommandError::Aws(t.to_string()),
            ReportError::Store(p) => CommandError::Store(p),
            ReportError::Io(m) => CommandError::Io(m),
            ReportError::Sdds(e) => {
                use crate::reconcile::s3::SddsS3Error;
                match e {
                    SddsS3Error::NoBucket { .. }
                    | SddsS3Error::NoFeed { .. }
                    | SddsS3Error::NoMonthFile { .. } => CommandError::NotFound(e.to_string()),
                    _ => CommandError::Aws(e.to_string()),
                }
            }
        }
    }
}

fn report(r: crate::trail::Report) -> Outcome {
    Outcome::flagged(r.text, r.attention)
}

fn hour_arg(flag: &str, text: &str) -> Result<HourBucket, CommandError> {
    text.parse().map_err(|e| {
        CommandError::Usage(format!(
            "{flag}: {e} (write the hour as YYYY-MM-DDTHH, UTC)"
        ))
    })
}

/// One deployment's stores.
struct Stores {
    deployment: Deployment,
    client: aws_sdk_dynamodb::Client,
    sqs: aws_sdk_sqs::Client,
    operator: DynamoOperatorStore,
    subscribers: Option<DynamoSubscriberStore>,
}

async fn stores(args: &DeploymentArgs) -> Result<Vec<Stores>, CommandError> {
    let mut out = Vec::new();
    for deployment in args.resolve().await? {
        out.push(stores_of(args, deployment).await);
    }
    Ok(out)
}

/// The stores of the one deployment a write command (`command`) goes to
/// ([`DeploymentArgs::resolve_one_for_writes`]).
async fn write_target(args: &DeploymentArgs, command: &str) -> Result<Stores, CommandError> {
    let deployment = args.resolve_one_for_writes(command).await?;
    Ok(stores_of(args, deployment).await)
}

async fn stores_of(args: &DeploymentArgs, deployment: Deployment) -> Stores {
    let config = args.sdk_config(Some(&deployment.region)).await;
    let client = aws_sdk_dynamodb::Client::new(&config);
    let subscribers = match &deployment.subscribers {
        Some((table, region)) => {
            let config = args.sdk_config(Some(region)).await;
            Some(DynamoSubscriberStore::new(
                aws_sdk_dynamodb::Client::new(&config),
                table.clone(),
            ))
        }
        None => None,
    };
    Stores {
        operator: DynamoOperatorStore::new(
            client.clone(),
            deployment.usage_table.clone(),
            deployment.aggregated_table.clone(),
        ),
        sqs: aws_sdk_sqs::Client::new(&config),
        client,
        subscribers,
        deployment,
    }
}

async fn dispatch(args: Args, format: Format) -> Result<Vec<Outcome>, CommandError> {
    let now = chrono::Utc::now();
    let deployment = &args.deployment;
    match args.command {
        Command::Local {
            command: LocalCommand::Up { serve, speed, root },
        } => crate::local::up(root.as_deref(), serve, speed)
            .await
            .map(|()| Vec::new())
            .map_err(|e| CommandError::Io(e.to_string())),
        Command::Completions { shell } => {
            let mut text = Vec::new();
            clap_complete::generate(shell, &mut Args::command(), "awsmp", &mut text);
            Ok(vec![Outcome::ok(
                String::from_utf8_lossy(&text).into_owned(),
            )])
        }
        Command::Usage {
            command:
                UsageCommand::Put {
                    license,
                    account,
                    dimension,
                    quantity,
                    timestamp,
                    event_id,
                    tags,
                },
        } => {
            let tags = tags
                .iter()
                .map(|t| parse_tag(t))
                .collect::<Result<Vec<_>, _>>()?;
            let put = UsagePut {
                license_arn: license,
                account,
                dimension,
                quantity,
                timestamp,
                event_id,
                tags,
            };
            let s = write_target(deployment, "usage put").await?;
            let store = DynamoUsageStore::new(s.client, s.deployment.usage_table);
            Ok(vec![usage_put(&store, &put, now).await?.render(format)])
        }
        Command::Usage {
            command:
                UsageCommand::Import {
                    file,
                    format: file_format,
                    write_valid,
                    restart,
                },
        } => {
            let file_format = file_format
                .or_else(|| ops::import::FileFormat::of(&file))
                .ok_or_else(|| {
                    CommandError::Usage(format!(
                        "{}: name the format with --format csv|jsonl",
                        file.display()
                    ))
                })?;
            let product_code = deployment.product_code.clone().ok_or_else(|| {
                CommandError::Usage(
                    "--product-code is needed: rows are checked against the stack's product as the aggregator checks them".into(),
                )
            })?;
            let s = write_target(deployment, "usage import").await?;
            let options = ops::import::ImportOptions {
                format: file_format,
                product_code,
                write_valid,
                restart,
                region: s.deployment.region.clone(),
                usage_table: s.deployment.usage_table.clone(),
            };
            let store = DynamoUsageStore::new(s.client, s.deployment.usage_table);
            let report = ops::import::import(&store, &file, &options, now).await?;
            let written = report.bad.is_empty() || write_valid;
            Ok(vec![ops::import::render(&report, written, format)])
        }
        Command::Status { hours } => {
            let mut out = Vec::new();
            for s in stores(deployment).await? {
                let queues = ops::queues::depths(&s.sqs, &s.deployment.queues).await?;
                let deprovisioning = match &s.subscribers {
                    Some(store) => store.deprovisioning().await?.len() as u64,
                    None => 0,
                };
                let report =
                    ops::status::read(&s.operator, &queues, deprovisioning, now, hours).await?;
                let place = ops::status::Place {
                    region: s.deployment.region.clone(),
                    stack: s.deployment.stack.clone(),
                };
                out.push(ops::status::render(&place, &report, format));
            }
            Ok(out)
        }
        Command::Report { html, hours } => {
            if html.is_none() && format != Format::Json {
                return Err(CommandError::Usage(
                    "name the page to write with --html FILE (or pass --json for the series)"
                        .into(),
                ));
            }
            let mut regions = Vec::new();
            for s in stores(deployment).await? {
                regions.push(awsmp_operate::report::RegionReport {
                    series: ops::report::read(&s.operator, now, hours).await?,
                    region: s.deployment.region,
                    stack: s.deployment.stack,
                });
            }
            let page = awsmp_operate::report::ReportPage {
                product_code: deployment.product_code.clone(),
                stage: deployment.stage.clone(),
                generated: now,
                hours,
                regions,
            };
            let written = html
                .map(|path| ops::report::write_html(&page, &path))
                .transpose()?;
            Ok(vec![ops::report::render(&page, written.as_deref(), format)])
        }
        Command::Failures { since } => {
            let since = match since {
                Some(text) => hour_arg("--since", &text)?,
                None => HourBucket::containing(now).plus_hours(-48),
            };
            let mut out = Vec::new();
            for s in stores(deployment).await? {
                let found = ops::failures::read(&s.operator, since, now).await?;
                out.push(ops::failures::render(&found, format));
            }
            Ok(out)
        }
        Command::Inspect {
            command:
                InspectCommand::License {
                    license,
                    hour,
                    dimension,
                },
        } => {
            let filter = ChainFilter {
                hour: hour.map(|h| hour_arg("--hour", &h)).transpose()?,
                dimension,
            };
            let mut out = Vec::new();
            for s in stores(deployment).await? {
                let subscribers = s.subscribers.as_ref().map(|s| s as &dyn SubscriberStore);
                let view =
                    ops::inspect::license(&s.operator, subscribers, &license, &filter).await?;
                out.push(ops::inspect::render_license(&view, format));
            }
            Ok(out)
        }
        Command::Inspect {
            command:
                InspectCommand::Group {
                    license,
                    account,
                    dimension,
                    hour,
                },
        } => {
            let key = GroupKey {
                license_arn: license,
                customer_aws_account_id: account,
                dimension,
                hour: hour_arg("--hour", &hour)?,
            };
            let mut out = Vec::new();
            for s in stores(deployment).await? {
                let usage =
                    DynamoUsageStore::new(s.client.clone(), s.deployment.usage_table.clone());
                let aggregated =
                    DynamoAggregatedStore::new(s.client, s.deployment.aggregated_table);
                out.push(inspect(&usage, &aggregated, &key).await?.render(format));
            }
            Ok(out)
        }
        Command::Replay {
            groups,
            failed_since,
            dry_run,
        } => {
            let selection = match failed_since {
                Some(text) => {
                    ops::replay::Selection::FailedSince(hour_arg("--failed-since", &text)?)
                }
                None if groups.is_empty() => {
                    return Err(CommandError::Usage(
                        "name the groups to replay (as `awsmp failures` prints them) or pass --failed-since HOUR".into(),
                    ));
                }
                None => ops::replay::Selection::Groups(
                    groups
                        .iter()
                        .map(|g| ops::replay::parse_group(g))
                        .collect::<Result<_, _>>()?,
                ),
            };
            let mut out = Vec::new();
            for s in stores(deployment).await? {
                let aggregated = DynamoAggregatedStore::new(
                    s.client.clone(),
                    s.deployment.aggregated_table.clone(),
                );
                let lines =
                    ops::replay::replay(&aggregated, &s.operator, &selection, now, dry_run).await?;
                out.push(ops::replay::render(&lines, format));
            }
            Ok(out)
        }
        Command::Trail {
            since,
            until,
            license,
        } => {
            let since = since.map(|t| instant_arg("--since", &t)).transpose()?;
            let until = until.map(|t| instant_arg("--until", &t)).transpose()?;
            let mut out = Vec::new();
            for s in stores(deployment).await? {
                let config = deployment.sdk_config(Some(&s.deployment.region)).await;
                let trail =
                    crate::cloudtrail::SdkTrailEvents::in_region(&config, &s.deployment.region);
                let aggregated = DynamoAggregatedStore::new(
                    s.client.clone(),
                    s.deployment.aggregated_table.clone(),
                );
                let args = crate::trail::TrailArgs {
                    since,
                    until,
                    license: license.clone(),
                    region: s.deployment.region.clone(),
                    json: format == Format::Json,
                };
                out.push(report(
                    crate::trail::trail_report(&trail, &aggregated, &args, now).await?,
                ));
            }
            Ok(out)
        }
        Command::Reconcile {
            month,
            license,
            sdds_bucket,
            sdds_prefix,
            sdds_usage,
            sdds_accounts,
            sdds_products,
        } => {
            let all = stores(deployment).await?;
            let sdds = match (sdds_usage, sdds_accounts, sdds_products) {
                (Some(u), Some(a), Some(p)) => Some(crate::reconcile::SddsFiles::read(&u, &a, &p)?),
                (None, None, None) => match &sdds_bucket {
                    Some(bucket) => {
                        let region = all.first().map(|s| s.deployment.region.clone());
                        let config = deployment.sdk_config(region.as_deref()).await;
                        Some(
                            crate::reconcile::read_sdds_bucket(
                                &config,
                                bucket,
                                sdds_prefix.as_deref(),
                                month.as_deref(),
                                now,
                            )
                            .await?,
                        )
                    }
                    None => None,
                },
                _ => {
                    return Err(CommandError::Usage(
                        "give all three SDDS feeds: --sdds-usage, --sdds-accounts and --sdds-products".into(),
                    ));
                }
            };
            let mut out = Vec::new();
            for s in all {
                let config = deployment.sdk_config(Some(&s.deployment.region)).await;
                let trail =
                    crate::cloudtrail::SdkTrailEvents::in_region(&config, &s.deployment.region);
                let (ours, malformed) =
                    crate::reconcile::load_our_records(&s.operator, license.as_deref()).await?;
                let aws = match &sdds {
                    Some(files) => crate::reconcile::AwsRecords::Sdds(files),
                    None => crate::reconcile::AwsRecords::CloudTrail(&trail),
                };
                let args = crate::reconcile::ReconcileArgs {
                    month: month.clone(),
                    license: license.clone(),
                    region: s.deployment.region.clone(),
                    json: format == Format::Json,
                };
                out.push(report(
                    crate::reconcile::reconcile_report(aws, &ours, &malformed, &args, now).await?,
                ));
            }
            Ok(out)
        }
        Command::Dlq {
            command:
                DlqCommand::Redrive {
                    queue,
                    count,
                    dry_run,
                },
        } => {
            let mut out = Vec::new();
            for s in stores(deployment).await? {
                let url = if queue.starts_with("http") {
                    queue.clone()
                } else {
                    s.deployment.queues.get(&queue).cloned().ok_or_else(|| {
                        CommandError::NotFound(format!(
                            "no queue {queue:?} in the stack outputs (known: {}); pass its URL instead",
                            s.deployment.queues.keys().cloned().collect::<Vec<_>>().join(", ")
                        ))
                    })?
                };
                let report = ops::dlq::redrive(&s.sqs, &url, count, dry_run).await?;
                out.push(ops::dlq::render(&report, &queue, dry_run, format));
            }
            Ok(out)
        }
    }
}

/// Human-readable logs on stderr; `RUST_LOG` filters (default: warnings only, so the
/// local demo's story stays readable).
fn init_logs() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .compact()
        .try_init();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_argument_tree_is_consistent() {
        Args::command().debug_assert();
    }
}

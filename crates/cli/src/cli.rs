//! Command-line arguments and dispatch of `awsmp`.

use std::path::PathBuf;
use std::process::ExitCode;

use awsmp_aws::{DynamoAggregatedStore, DynamoUsageStore};
use awsmp_core::model::GroupKey;
use awsmp_core::time::HourBucket;
use clap::{Parser, Subcommand};

use crate::commands::{UsagePut, inspect, parse_tag, usage_put};

/// awsmp: operate an awsmp-metering deployment, or run the whole system locally.
#[derive(Debug, Parser)]
#[command(name = "awsmp", version, about)]
struct Args {
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
    /// Usage rows.
    Usage {
        #[command(subcommand)]
        command: UsageCommand,
    },
    /// Show what happened to one license, dimension and hour.
    Inspect {
        /// Usage table name.
        #[arg(long, env = "USAGE_TABLE")]
        usage_table: String,
        /// Aggregated-usage table name.
        #[arg(long, env = "AGGREGATED_TABLE")]
        aggregated_table: String,
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
enum LocalCommand {
    /// Start everything, run the scripted buyer lifecycle, print what was billed.
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
enum UsageCommand {
    /// Write one usage row; a retry with the same --event-id is a no-op, and writes in
    /// the same second never overwrite each other.
    Put {
        /// Usage table name.
        #[arg(long, env = "USAGE_TABLE")]
        table: String,
        /// License ARN.
        #[arg(long)]
        license: String,
        /// Buyer AWS account id.
        #[arg(long)]
        account: String,
        /// Dimension (as defined in your listing, case-sensitive).
        #[arg(long)]
        dimension: String,
        /// Quantity (0..=2147483647).
        #[arg(long)]
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
}

/// Parses arguments and runs the command; errors print one line that says what to do.
pub async fn run() -> ExitCode {
    let args = Args::parse();
    init_logs();
    let result = match args.command {
        Command::Local {
            command: LocalCommand::Up { serve, speed, root },
        } => crate::local::up(root.as_deref(), serve, speed)
            .await
            .map_err(|e| e.to_string()),
        Command::Usage {
            command:
                UsageCommand::Put {
                    table,
                    license,
                    account,
                    dimension,
                    quantity,
                    timestamp,
                    event_id,
                    tags,
                },
        } => async {
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
            let client = aws_sdk_dynamodb::Client::new(&awsmp_aws::load_sdk_config().await);
            let store = DynamoUsageStore::new(client, table);
            usage_put(&store, &put, chrono::Utc::now()).await
        }
        .await
        .map(|line| println!("{line}"))
        .map_err(|e| e.to_string()),
        Command::Inspect {
            usage_table,
            aggregated_table,
            license,
            account,
            dimension,
            hour,
        } => async {
            let hour: HourBucket = hour
                .parse()
                .map_err(|e| crate::commands::CommandError::Usage(format!("--hour: {e}")))?;
            let client = aws_sdk_dynamodb::Client::new(&awsmp_aws::load_sdk_config().await);
            let usage = DynamoUsageStore::new(client.clone(), usage_table.clone());
            let aggregated = DynamoAggregatedStore::new(client, aggregated_table, usage_table);
            let key = GroupKey {
                license_arn: license,
                customer_aws_account_id: account,
                dimension,
                hour,
            };
            inspect(&usage, &aggregated, &key).await
        }
        .await
        .map(|text| print!("{text}"))
        .map_err(|e| e.to_string()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("awsmp: {message}");
            ExitCode::FAILURE
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

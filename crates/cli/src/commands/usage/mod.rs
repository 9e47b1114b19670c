//! `awsmp usage`: write usage rows into one deployment, one row ([`put`]) or a file
//! ([`import`]).

pub mod import;
pub mod put;

use std::path::PathBuf;

use awsmp_aws::DynamoUsageStore;

use super::{Ctx, write_target};
use crate::error::CommandError;
use crate::output::Outcome;

/// Write usage rows.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
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
        /// Write even when the subscribers table shows the license inactive for the
        /// account (Marketplace will answer CustomerNotSubscribed).
        #[arg(long)]
        force: bool,
    },
    /// Write usage from a CSV or JSON Lines file into one deployment (one --region):
    /// every line checked first as the aggregator would; resumable per table and per
    /// version of the file; a rerun writes nothing twice; a line reusing an event id
    /// with other usage is a conflict (exit 5).
    ///
    /// Example: awsmp usage import usage.csv --product-code abc123 --stage prod
    #[command(after_long_help = import::FILE_HELP)]
    Import {
        /// The file (`.csv` with a header line, or `.jsonl`).
        file: PathBuf,
        /// File format (default: from the extension).
        #[arg(long, value_enum)]
        format: Option<import::FileFormat>,
        /// Write the valid lines even when some are bad.
        #[arg(long)]
        write_valid: bool,
        /// Ignore the progress kept from an earlier run; start at the first line.
        #[arg(long)]
        restart: bool,
    },
}

impl Command {
    /// Writes the row or the file into the one deployment named.
    pub async fn run(self, ctx: &Ctx<'_>) -> Result<Vec<Outcome>, CommandError> {
        match self {
            Command::Put {
                license,
                account,
                dimension,
                quantity,
                timestamp,
                event_id,
                tags,
                force,
            } => {
                let tags = tags
                    .iter()
                    .map(|t| put::parse_tag(t))
                    .collect::<Result<Vec<_>, _>>()?;
                let usage = put::UsagePut {
                    license_arn: license,
                    account,
                    dimension,
                    quantity,
                    timestamp,
                    event_id,
                    tags,
                };
                let s = write_target(ctx.deployment, "usage put").await?;
                // Only when the events stack was found: without it there is no
                // subscribers table to ask, and the write goes ahead as before. An
                // inactive license stops here; a warning is printed once written.
                let warning = match &s.subscribers {
                    Some(subscribers) => {
                        put::check_subscription(
                            subscribers,
                            &usage.license_arn,
                            &usage.account,
                            force,
                        )
                        .await?
                    }
                    None => None,
                };
                let store = DynamoUsageStore::new(s.client, s.deployment.usage_table);
                let written = put::put(&store, &usage, ctx.now).await?;
                if let Some(warning) = warning {
                    eprintln!("awsmp: warning: {warning}");
                }
                Ok(vec![written.render(ctx.format)])
            }
            Command::Import {
                file,
                format,
                write_valid,
                restart,
            } => {
                let format = format
                    .or_else(|| import::FileFormat::of(&file))
                    .ok_or_else(|| {
                        CommandError::Usage(format!(
                            "{}: name the format with --format csv|jsonl",
                            file.display()
                        ))
                    })?;
                let product_code = ctx.deployment.product_code.clone().ok_or_else(|| {
                    CommandError::Usage(
                        "--product-code is needed: rows are checked against the stack's product as the aggregator checks them".into(),
                    )
                })?;
                let s = write_target(ctx.deployment, "usage import").await?;
                let options = import::ImportOptions {
                    format,
                    product_code,
                    write_valid,
                    restart,
                    region: s.deployment.region.clone(),
                    usage_table: s.deployment.usage_table.clone(),
                };
                let store = DynamoUsageStore::new(s.client, s.deployment.usage_table);
                let report = import::import(&store, &file, &options, ctx.now).await?;
                let written = report.bad.is_empty() || write_valid;
                Ok(vec![import::render(&report, written, ctx.format)])
            }
        }
    }
}

//! `awsmp profile show|erase`: one buyer's registration profile (PII) in each Region's
//! customer-profile table, read or erased by its keys (never listed), the erasure
//! confirmed first and audited without the data. The rules are `awsmp_operate::pii`'s;
//! the table is `awsmp_aws::DynamoPiiTable` behind `awsmp_operate`'s port.

use std::io::{BufRead, IsTerminal, Write};

use async_trait::async_trait;
use awsmp_aws::{DynamoPiiTable, PiiTableError};
use awsmp_core::model::Attr;
use awsmp_operate::pii::{
    ErasureAudit, ErasureResult, PITR_RECOVERY_DAYS, ProfilePlace, RegionErasure, RegionProfile,
    erase, show,
};
use awsmp_operate::ports::{PiiTable, ProfileError, ProfileKey};
use serde::Serialize;

use super::Ctx;
use crate::deployment::{DeploymentArgs, is_account_id};
use crate::error::CommandError;
use crate::output::{Format, Outcome, json, printable, table};

/// The customer-profile table of one Region on the SDK, as `awsmp_operate`'s port.
pub struct SdkPiiTable(DynamoPiiTable);

impl SdkPiiTable {
    /// `table` in `region`, with the deployment's credentials.
    pub async fn connect(args: &DeploymentArgs, place: &ProfilePlace) -> Self {
        let config = args.sdk_config(Some(&place.region)).await;
        SdkPiiTable(DynamoPiiTable::new(
            aws_sdk_dynamodb::Client::new(&config),
            place.table.clone(),
        ))
    }
}

fn port_error(error: PiiTableError) -> ProfileError {
    match error {
        PiiTableError::Denied {
            operation,
            table,
            message,
        } => ProfileError::Denied {
            operation: operation.to_string(),
            table,
            message,
        },
        PiiTableError::NoTable { table, message, .. } => ProfileError::NoTable { table, message },
        failed @ PiiTableError::Failed { .. } => ProfileError::Failed(failed.to_string()),
    }
}

#[async_trait]
impl PiiTable for SdkPiiTable {
    async fn get(
        &self,
        key: &ProfileKey,
    ) -> Result<Option<std::collections::BTreeMap<String, Attr>>, ProfileError> {
        self.0
            .get(&key.license_arn, &key.customer_aws_account_id)
            .await
            .map_err(port_error)
    }

    async fn delete_existing(&self, key: &ProfileKey) -> Result<bool, ProfileError> {
        self.0
            .delete_existing(&key.license_arn, &key.customer_aws_account_id)
            .await
            .map_err(port_error)
    }
}

/// The customer-profile table of each Region named. With `--customer-profile-table`,
/// that table in each `--region` (or the profile's Region), reading no stack, so the
/// PII role needs no `cloudformation:DescribeStacks` (`--all-regions` still looks for
/// the main stack); else the `CustomerProfileTableName` output of each main stack.
pub async fn profile_places(args: &DeploymentArgs) -> Result<Vec<ProfilePlace>, CommandError> {
    if let Some(table) = &args.customer_profile_table {
        return Ok(args
            .named_regions()
            .await?
            .into_iter()
            .map(|region| ProfilePlace {
                region,
                table: table.clone(),
            })
            .collect());
    }
    args.resolve()
        .await?
        .into_iter()
        .map(|d| {
            let table = d.profile_table.ok_or_else(|| {
                CommandError::Usage(format!(
                    "stack {} in {} has no CustomerProfileTableName output: pass --customer-profile-table awsmp-<productCode>-customer-profile",
                    d.stack.as_deref().unwrap_or("-"),
                    d.region
                ))
            })?;
            Ok(ProfilePlace {
                region: d.region,
                table,
            })
        })
        .collect()
}

/// A refused, missing-table or failed call in `region`, worded for the operator.
fn command_error(region: &str, error: ProfileError) -> CommandError {
    match error {
        e @ ProfileError::NoTable { .. } => CommandError::NotFound(format!("{region}: {e}")),
        e => CommandError::Aws(format!("{region}: {e}")),
    }
}

/// A Region where the call failed while others answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct RegionFailure {
    /// The Region.
    pub region: String,
    /// Its customer-profile table.
    pub table: String,
    /// What went wrong, and what to do.
    pub error: String,
}

/// What `awsmp profile show` found: the buyer's row in each Region named.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct ProfileShown {
    /// The buyer's license.
    pub license_arn: String,
    /// The buyer's AWS account.
    pub customer_aws_account_id: String,
    /// Each Region that answered.
    pub regions: Vec<RegionProfile>,
    /// Each Region whose call failed (the exit code is then 1).
    pub failed: Vec<RegionFailure>,
}

/// What `awsmp profile erase` did in each Region named.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct ProfileErasure {
    /// The buyer's license.
    pub license_arn: String,
    /// The buyer's AWS account.
    pub customer_aws_account_id: String,
    /// `--dry-run`: nothing was erased.
    pub dry_run: bool,
    /// Each Region that answered, with the audit record of each erasure.
    pub regions: Vec<RegionErasure>,
    /// Each Region whose call failed (the exit code is then 1).
    pub failed: Vec<RegionFailure>,
}

/// One Region's table, as the commands use it.
pub type PlacedTable = (ProfilePlace, Box<dyn PiiTable>);

/// The table of each place, on the SDK.
pub async fn connect_all(args: &DeploymentArgs, places: Vec<ProfilePlace>) -> Vec<PlacedTable> {
    let mut tables: Vec<PlacedTable> = Vec::new();
    for place in places {
        let table = SdkPiiTable::connect(args, &place).await;
        tables.push((place, Box::new(table)));
    }
    tables
}

/// Collects each Region's answer, going on after a failure so that what was done in
/// the other Regions is still reported; when every Region failed, the first failure is
/// the command's error.
struct PerRegion<T> {
    done: Vec<T>,
    failed: Vec<RegionFailure>,
    first: Option<CommandError>,
}

impl<T> PerRegion<T> {
    fn new() -> Self {
        PerRegion {
            done: Vec::new(),
            failed: Vec::new(),
            first: None,
        }
    }

    fn push(&mut self, place: &ProfilePlace, answer: Result<T, ProfileError>) {
        match answer {
            Ok(answer) => self.done.push(answer),
            Err(error) => {
                self.failed.push(RegionFailure {
                    region: place.region.clone(),
                    table: place.table.clone(),
                    error: error.to_string(),
                });
                self.first
                    .get_or_insert_with(|| command_error(&place.region, error));
            }
        }
    }

    fn finish(self) -> Result<(Vec<T>, Vec<RegionFailure>), CommandError> {
        match self.first {
            Some(error) if self.done.is_empty() => Err(error),
            _ => Ok((self.done, self.failed)),
        }
    }
}

/// `awsmp profile show`: the buyer's row in each table (one `GetItem` each).
pub async fn show_all(
    tables: &[PlacedTable],
    key: &ProfileKey,
) -> Result<ProfileShown, CommandError> {
    let mut answers = PerRegion::new();
    for (place, table) in tables {
        answers.push(place, show(table.as_ref(), key, place).await);
    }
    let (regions, failed) = answers.finish()?;
    Ok(ProfileShown {
        license_arn: key.license_arn.clone(),
        customer_aws_account_id: key.customer_aws_account_id.clone(),
        regions,
        failed,
    })
}

/// `awsmp profile erase` (confirmed): the buyer's row erased in each table, each
/// erasure's audit record handed to `audit` as soon as it is done (so a later Region's
/// failure cannot lose it).
pub async fn erase_all(
    tables: &[PlacedTable],
    key: &ProfileKey,
    now: awsmp_core::time::Instant,
    aws_profile: Option<&str>,
    dry_run: bool,
    audit: &mut dyn FnMut(&ErasureAudit),
) -> Result<ProfileErasure, CommandError> {
    let mut answers = PerRegion::new();
    for (place, table) in tables {
        let done = erase(table.as_ref(), key, place, now, aws_profile, dry_run).await;
        if let Ok(RegionErasure {
            audit: Some(record),
            ..
        }) = &done
        {
            audit(record);
        }
        answers.push(place, done);
    }
    let (regions, failed) = answers.finish()?;
    Ok(ProfileErasure {
        license_arn: key.license_arn.clone(),
        customer_aws_account_id: key.customer_aws_account_id.clone(),
        dry_run,
        regions,
        failed,
    })
}

fn named(key: &ProfileKey) -> String {
    printable(&format!(
        "{} / {}",
        key.license_arn, key.customer_aws_account_id
    ))
}

fn failure_lines(failed: &[RegionFailure]) -> String {
    failed
        .iter()
        .map(|f| format!("{} ({}): failed: {}\n", f.region, f.table, f.error))
        .collect()
}

/// Renders `show`: each Region's row as a table of attributes (every stored string
/// escaped), or that it has none. Attention when no Region has the buyer's row.
pub fn render_show(shown: &ProfileShown, format: Format) -> Outcome {
    let found = shown.regions.iter().any(|r| r.found);
    let text = match format {
        Format::Json => json(shown),
        Format::Human => {
            let key = ProfileKey {
                license_arn: shown.license_arn.clone(),
                customer_aws_account_id: shown.customer_aws_account_id.clone(),
            };
            let mut out = String::new();
            for region in &shown.regions {
                let Some(profile) = &region.profile else {
                    out.push_str(&format!(
                        "{} ({}): no profile for {} in {}\n",
                        region.region,
                        region.table,
                        named(&key),
                        region.region
                    ));
                    continue;
                };
                out.push_str(&format!(
                    "{} ({}): the profile of {}\n",
                    region.region,
                    region.table,
                    named(&key)
                ));
                let fixed = [
                    ("productCode", &profile.product_code),
                    ("createdAt", &profile.created_at),
                    ("updatedAt", &profile.updated_at),
                ];
                // The TTL only when one is set (ProfileRetentionDays, after deprovisioning).
                let expiry = profile
                    .expires_at
                    .is_some()
                    .then_some(("expiresAt (deleted after)", &profile.expires_at));
                let rows = fixed
                    .iter()
                    .chain(expiry.iter())
                    .map(|(name, value)| {
                        vec![
                            name.to_string(),
                            value.as_deref().unwrap_or("-").to_string(),
                        ]
                    })
                    .chain(
                        profile
                            .fields
                            .iter()
                            .map(|(name, value)| vec![name.clone(), value.clone()]),
                    );
                out.push_str(&table(&["attribute", "value"], rows));
                out.push('\n');
            }
            out.push_str(&failure_lines(&shown.failed));
            out
        }
    };
    Outcome {
        failed: !shown.failed.is_empty(),
        ..Outcome::flagged(text, !found)
    }
}

/// Renders `erase`: what was done in each Region. Attention when no Region had the
/// buyer's row.
pub fn render_erase(erasure: &ProfileErasure, format: Format) -> Outcome {
    let found = erasure
        .regions
        .iter()
        .any(|r| r.result != ErasureResult::Absent);
    let text = match format {
        Format::Json => json(erasure),
        Format::Human => {
            let key = ProfileKey {
                license_arn: erasure.license_arn.clone(),
                customer_aws_account_id: erasure.customer_aws_account_id.clone(),
            };
            let mut out = String::new();
            for region in &erasure.regions {
                let what = match (region.result, &region.audit) {
                    (ErasureResult::Erased, Some(audit)) => format!(
                        "erased the profile of {}; point-in-time recovery can restore it until {} (the erasure is complete then)",
                        named(&key),
                        awsmp_core::time::format_instant(audit.recoverable_until)
                    ),
                    (ErasureResult::Erased, None) => {
                        format!("erased the profile of {}", named(&key))
                    }
                    (ErasureResult::WouldErase, _) => format!(
                        "would erase the profile of {} (dry run: nothing erased)",
                        named(&key)
                    ),
                    (ErasureResult::Absent, _) => format!(
                        "no profile for {} in {}; nothing erased",
                        named(&key),
                        region.region
                    ),
                };
                out.push_str(&format!("{} ({}): {what}\n", region.region, region.table));
            }
            out.push_str(&failure_lines(&erasure.failed));
            if erasure
                .regions
                .iter()
                .any(|r| r.result == ErasureResult::Erased)
            {
                out.push_str(
                    "Not erased by this: the buyer's IP addresses in the register API's API Gateway access logs (kept for the stack's LogRetentionInDays).\n",
                );
            }
            out
        }
    };
    Outcome {
        failed: !erasure.failed.is_empty(),
        ..Outcome::flagged(text, !found)
    }
}

/// Asks `question` on `prompt` and reads the answer from `input`: only `y` or `yes`
/// (any case) confirms; anything else, or no answer at all, does not.
pub fn confirm(
    question: &str,
    input: &mut dyn BufRead,
    prompt: &mut dyn Write,
) -> Result<bool, CommandError> {
    write!(prompt, "{question} [y/N] ")
        .and_then(|()| prompt.flush())
        .map_err(|e| CommandError::Io(format!("cannot ask for confirmation: {e}")))?;
    let mut answer = String::new();
    input
        .read_line(&mut answer)
        .map_err(|e| CommandError::Io(format!("cannot read the confirmation: {e}")))?;
    Ok(matches!(
        answer.trim().to_ascii_lowercase().as_str(),
        "y" | "yes"
    ))
}

/// The buyer a profile command names.
#[derive(Debug, Clone, clap::Args)]
pub struct Buyer {
    /// The buyer's license ARN (arn:aws:license-manager::<seller account>:license:l-…).
    #[arg(long)]
    license: String,
    /// The buyer's AWS account id (12 digits).
    #[arg(long)]
    account: String,
}

impl Buyer {
    /// The row's keys, once both are checked.
    pub fn key(&self) -> Result<ProfileKey, CommandError> {
        super::inspect::license_arg(&self.license)?;
        if !is_account_id(&self.account) {
            return Err(CommandError::Usage(format!(
                "--account {:?}: an AWS account id is 12 digits",
                printable(&self.account)
            )));
        }
        Ok(ProfileKey {
            license_arn: self.license.clone(),
            customer_aws_account_id: self.account.clone(),
        })
    }
}

/// One buyer's registration profile (PII) in the customer-profile table: show it, or
/// erase it.
///
/// Each Region named (--region, repeatable, or --all-regions) is its own table, and
/// each answers for itself. The table is only ever read or deleted by its keys: there
/// is no command that lists it.
///
/// Access: the table's resource policy lets only the register function's role and the
/// PII role named by the stack parameter ProfileAccessRoleArn read or delete its items,
/// so run `awsmp profile` with that role's credentials (--profile naming an AWS profile
/// that assumes it); anyone else gets AccessDenied, whatever IAM grants them. With
/// --customer-profile-table no stack is read, so the role needs no
/// cloudformation:DescribeStacks.
///
/// Retention: point-in-time recovery keeps an erased row restorable for 35 days (the
/// PITR window), so an erasure is complete 35 days after `awsmp profile erase`. The
/// register API's access logs hold buyers' IP addresses (personal data too), kept for
/// the stack's LogRetentionInDays.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Print the buyer's profile row in each Region (exit 3 when no Region has one).
    ///
    /// One GetItem per Region, by the row's keys. Run it with the credentials of the
    /// role the stack parameter ProfileAccessRoleArn names: the table's resource policy
    /// refuses everyone but that role and the register function's.
    ///
    /// Example: awsmp profile show --license arn:aws:license-manager::123456789012:license:l-1 --account 111122223333 --profile pii
    Show {
        /// The buyer.
        #[command(flatten)]
        buyer: Buyer,
    },
    /// Delete the buyer's profile row in each Region, after asking (unless --yes).
    ///
    /// One DeleteItem per Region, only if the row exists, returning none of its data.
    /// Each erasure writes an audit line on stderr (and in --json) with the license,
    /// account, Region, table, time and named AWS profile: never the data. No row in a
    /// Region says "no profile ... nothing erased"; exit 3 when no Region had one.
    /// Point-in-time recovery can restore the row for 35 days: the erasure is complete
    /// then. Run it with the credentials of the role the stack parameter
    /// ProfileAccessRoleArn names: the table's resource policy refuses everyone but
    /// that role and the register function's.
    ///
    /// Example: awsmp profile erase --license arn:aws:license-manager::123456789012:license:l-1 --account 111122223333 --all-regions --profile pii
    Erase {
        /// The buyer.
        #[command(flatten)]
        buyer: Buyer,
        /// Erase without asking (needed when stdin is not a terminal).
        #[arg(long)]
        yes: bool,
        /// Say in which Regions there is a row to erase (one GetItem each); erase nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

impl Command {
    /// Shows or erases the profile in each Region named.
    pub async fn run(self, ctx: &Ctx<'_>) -> Result<Vec<Outcome>, CommandError> {
        match self {
            Command::Show { buyer } => {
                let key = buyer.key()?;
                let places = profile_places(ctx.deployment).await?;
                let tables = connect_all(ctx.deployment, places).await;
                let shown = show_all(&tables, &key).await?;
                Ok(vec![render_show(&shown, ctx.format)])
            }
            Command::Erase {
                buyer,
                yes,
                dry_run,
            } => {
                let key = buyer.key()?;
                let ask = !yes && !dry_run;
                if ask && !std::io::stdin().is_terminal() {
                    return Err(CommandError::Usage(
                        "profile erase asks before erasing, and stdin is not a terminal: pass --yes to erase without asking (or --dry-run to see what would be erased)".into(),
                    ));
                }
                let places = profile_places(ctx.deployment).await?;
                if ask {
                    let question = format!(
                        "Erase the profile of {} from {}? awsmp cannot undo it (point-in-time recovery can restore it for {PITR_RECOVERY_DAYS} days).",
                        named(&key),
                        places
                            .iter()
                            .map(|p| format!("{} in {}", p.table, p.region))
                            .collect::<Vec<_>>()
                            .join(", ")
                    );
                    let confirmed = confirm(
                        &question,
                        &mut std::io::stdin().lock(),
                        &mut std::io::stderr(),
                    )?;
                    if !confirmed {
                        return Ok(vec![Outcome::flagged(
                            "not confirmed: nothing erased\n".into(),
                            true,
                        )]);
                    }
                }
                let tables = connect_all(ctx.deployment, places).await;
                let erasure = erase_all(
                    &tables,
                    &key,
                    ctx.now,
                    ctx.deployment.profile.as_deref(),
                    dry_run,
                    &mut |audit| eprintln!("awsmp: audit: {}", audit.line()),
                )
                .await?;
                Ok(vec![render_erase(&erasure, ctx.format)])
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;

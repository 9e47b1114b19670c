//! Finding a deployment: the operator names a stage and product (or a stack), and the
//! table names, queue URLs and the subscribers table come from the stacks' outputs, as
//! `deploy.sh` reads them, and the account from the main stack's id. Explicit
//! `--usage-table` etc. still win. Each metering Region is its own main stack, so a
//! command runs once per `--region`, or in every Region where the main stack exists
//! (`--all-regions`).

use std::collections::BTreeMap;

use aws_config::{Region, SdkConfig};
use clap::Args;

use awsmp_core::submit::DeploymentMode;

use crate::error::CommandError;

/// The Region the events stack (and the subscribers table) lives in.
pub const EVENTS_REGION: &str = "us-east-1";

/// The Regions `--all-regions` probes for the main stack: the commercial Regions (the
/// `aws` partition), where AWS Marketplace Metering is offered, as of 2026. The SDKs
/// expose no list of Regions (EC2 `DescribeRegions` would need another SDK and
/// `ec2:DescribeRegions`), so this is the one place to add a new Region; until then
/// `--region` names it.
pub const METERING_REGIONS: &[&str] = &[
    "us-east-1",
    "us-east-2",
    "us-west-1",
    "us-west-2",
    "af-south-1",
    "ap-east-1",
    "ap-east-2",
    "ap-northeast-1",
    "ap-northeast-2",
    "ap-northeast-3",
    "ap-south-1",
    "ap-south-2",
    "ap-southeast-1",
    "ap-southeast-2",
    "ap-southeast-3",
    "ap-southeast-4",
    "ap-southeast-5",
    "ap-southeast-7",
    "ca-central-1",
    "ca-west-1",
    "eu-central-1",
    "eu-central-2",
    "eu-north-1",
    "eu-south-1",
    "eu-south-2",
    "eu-west-1",
    "eu-west-2",
    "eu-west-3",
    "il-central-1",
    "me-central-1",
    "me-south-1",
    "mx-central-1",
    "sa-east-1",
];

/// Which deployment a command talks to.
#[derive(Debug, Clone, Default, Args)]
pub struct DeploymentArgs {
    /// Stage the stacks were deployed with (`./deploy.sh --stage`).
    #[arg(long, env = "AWSMP_STAGE", global = true)]
    pub stage: Option<String>,
    /// Product code of the main stack.
    #[arg(long, env = "AWSMP_PRODUCT_CODE", global = true)]
    pub product_code: Option<String>,
    /// The main stack's name, instead of --stage and --product-code.
    #[arg(long, global = true)]
    pub stack: Option<String>,
    /// Metering Region (repeatable: one main stack each); default: the profile's Region.
    #[arg(long = "region", global = true)]
    pub regions: Vec<String>,
    /// Every Region where the main stack exists (each metering Region is probed with
    /// DescribeStacks, in parallel).
    #[arg(long, global = true, conflicts_with = "regions")]
    pub all_regions: bool,
    /// Named AWS profile (SSO and credential_process work).
    #[arg(long, env = "AWS_PROFILE", global = true)]
    pub profile: Option<String>,
    /// Usage table name (overrides the stack output).
    #[arg(long, env = "USAGE_TABLE", global = true)]
    pub usage_table: Option<String>,
    /// Aggregated-usage table name (overrides the stack output).
    #[arg(long, env = "AGGREGATED_TABLE", global = true)]
    pub aggregated_table: Option<String>,
    /// Subscribers table name (overrides the events stack output).
    #[arg(long, global = true)]
    pub subscribers_table: Option<String>,
    /// Customer-profile table name (overrides the stack output; `awsmp profile` then
    /// reads no stack).
    #[arg(long, env = "CUSTOMER_PROFILE_TABLE", global = true)]
    pub customer_profile_table: Option<String>,
}

/// One main stack's resources in one Region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deployment {
    /// Metering Region.
    pub region: String,
    /// Main stack name, when found through it.
    pub stack: Option<String>,
    /// Usage table.
    pub usage_table: String,
    /// Aggregated-usage table.
    pub aggregated_table: String,
    /// Subscribers table and its Region, when known.
    pub subscribers: Option<(String, String)>,
    /// Queue role (`work`, `cleanup`, `deprovision`) -> URL, from the stack outputs.
    pub queues: BTreeMap<String, String>,
    /// The stack's `DeploymentMode` output; `None` when the tables were named without
    /// a stack (or the stack predates the output).
    pub mode: Option<DeploymentMode>,
    /// The submitter's share of the quota (the `MeteringRequestsPerSecond` output);
    /// `None` without it.
    pub requests_per_second: Option<u32>,
    /// The customer-profile table (`--customer-profile-table`, else the
    /// `CustomerProfileTableName` output); `None` without either.
    pub profile_table: Option<String>,
    /// The AWS account the main stack is deployed in (from its stack id); `None` when
    /// the tables were named without a stack.
    pub account: Option<String>,
}

/// Stack outputs that name a queue, and the role `awsmp` calls it by.
const QUEUE_OUTPUTS: &[(&str, &str)] = &[
    ("WorkQueueUrl", "work"),
    ("CleanupQueueUrl", "cleanup"),
    ("DeprovisionWorkQueueUrl", "deprovision"),
];

impl DeploymentArgs {
    /// The main stack's name, if the arguments name one.
    pub fn main_stack(&self) -> Option<String> {
        self.stack
            .clone()
            .or_else(|| match (&self.product_code, &self.stage) {
                (Some(product), Some(stage)) => Some(format!("awsmp-main-{product}-{stage}")),
                _ => None,
            })
    }

    /// The events stack's name, if the stage is known.
    pub fn events_stack(&self) -> Option<String> {
        self.stage.as_ref().map(|s| format!("awsmp-events-{s}"))
    }

    /// The SDK config for `region` with the chosen profile (endpoints from the SDK's
    /// own `AWS_ENDPOINT_URL*` variables, e.g. for the local stack).
    pub async fn sdk_config(&self, region: Option<&str>) -> SdkConfig {
        let mut loader = aws_config::defaults(awsmp_aws::behavior_version());
        if let Some(profile) = &self.profile {
            loader = loader.profile_name(profile);
        }
        if let Some(region) = region {
            loader = loader.region(Region::new(region.to_string()));
        }
        loader.load().await
    }

    /// The Region the environment (`AWS_REGION`, `AWS_DEFAULT_REGION`) or the profile
    /// names, if any. Never the instance metadata service: off EC2 its probes time out
    /// and print the SDK's warnings before the useful message (name the Region there).
    pub async fn configured_region(&self) -> Option<String> {
        use aws_config::environment::region::EnvironmentVariableRegionProvider;
        use aws_config::meta::region::RegionProviderChain;
        use aws_config::profile::ProfileFileRegionProvider;
        let mut profile = ProfileFileRegionProvider::builder();
        if let Some(name) = &self.profile {
            profile = profile.profile_name(name);
        }
        RegionProviderChain::first_try(EnvironmentVariableRegionProvider::new())
            .or_else(profile.build())
            .region()
            .await
            .map(|r| r.to_string())
    }

    /// The one deployment a write goes to. Marketplace deduplicates usage per Region,
    /// so usage written into several Regions' tables is billed once in each: a write
    /// names exactly one Region (or the profile's), never `--all-regions` or several
    /// `--region`, and the stack must aggregate raw usage (not direct-submit).
    pub async fn resolve_one_for_writes(&self, command: &str) -> Result<Deployment, CommandError> {
        use awsmp_operate::import::{SeveralDeployments, one_deployment};
        if self.all_regions {
            let several = SeveralDeployments {
                command: command.to_string(),
                given: "--all-regions".into(),
            };
            return Err(CommandError::Usage(several.to_string()));
        }
        let named = self.regions.iter().map(|r| format!("--region {r}"));
        one_deployment(command, named.collect()).map_err(|e| CommandError::Usage(e.to_string()))?;
        let mut found = self.resolve().await?;
        let deployment = found.pop().ok_or_else(|| {
            CommandError::NotFound(
                "no deployment found: name it with --stage, --product-code and --region".into(),
            )
        })?;
        if let Some(mode) = deployment.mode {
            awsmp_core::guardrails::write::accepts_raw_usage(mode)
                .map_err(|e| CommandError::Usage(format!("{command}: {e}")))?;
        }
        Ok(deployment)
    }

    /// The Regions the arguments name: every `--region`, those where the main stack
    /// exists (`--all-regions`), or the profile's; a name Marketplace Metering does not
    /// serve is warned about.
    pub async fn named_regions(&self) -> Result<Vec<String>, CommandError> {
        let regions = if self.all_regions {
            self.find_regions(METERING_REGIONS).await?
        } else if self.regions.is_empty() {
            let region = self
                .configured_region()
                .await
                .ok_or_else(|| {
                    CommandError::Usage(
                        "no Region: pass --region (the metering Region of the main stack) or set AWS_REGION / the profile's region".into(),
                    )
                })?;
            vec![region]
        } else {
            self.regions.clone()
        };
        for region in &regions {
            if !METERING_REGIONS.contains(&region.as_str()) {
                eprintln!(
                    "awsmp: warning: {region} is not one of the Regions AWS Marketplace Metering serves (a typo?): {}",
                    METERING_REGIONS.join(", ")
                );
            }
        }
        Ok(regions)
    }

    /// Every deployment the arguments name, one per Region.
    pub async fn resolve(&self) -> Result<Vec<Deployment>, CommandError> {
        let regions = self.named_regions().await?;
        let mut out = Vec::new();
        let mut missing = None;
        for region in regions {
            let config = self.sdk_config(Some(&region)).await;
            let events = match self.events_stack() {
                Some(stack) if self.subscribers_table.is_none() => {
                    let events_config = self.sdk_config(Some(EVENTS_REGION)).await;
                    stack_outputs(&events_config, &stack).await?
                }
                _ => None,
            };
            match self.resolve_in(&config, &region, events.as_ref()).await {
                Ok(deployment) => out.push(deployment),
                // Several Regions named: one without the stack is said, and the others
                // are answered for (only none found at all is an error).
                Err(CommandError::NotFound(why)) if self.regions.len() > 1 => {
                    eprintln!("awsmp: warning: {why}; answering for the other Regions");
                    missing.get_or_insert(why);
                }
                Err(e) => return Err(e),
            }
        }
        match missing {
            Some(why) if out.is_empty() => Err(CommandError::NotFound(why)),
            _ => Ok(out),
        }
    }

    /// The Regions among `candidates` where the main stack exists: DescribeStacks in
    /// each at once (a spinner meanwhile). A Region the account has not enabled, or
    /// where the stack does not exist, is skipped; other failures are warned about
    /// and skipped, and only finding no Region at all is an error.
    pub async fn find_regions(&self, candidates: &[&str]) -> Result<Vec<String>, CommandError> {
        let mut configs = Vec::new();
        for region in candidates {
            configs.push((region.to_string(), self.sdk_config(Some(region)).await));
        }
        self.find_regions_with(configs).await
    }

    /// [`DeploymentArgs::find_regions`] with the SDK config of each candidate Region
    /// given (in the order results are listed).
    pub async fn find_regions_with(
        &self,
        candidates: Vec<(String, SdkConfig)>,
    ) -> Result<Vec<String>, CommandError> {
        let order: Vec<String> = candidates.iter().map(|(r, _)| r.clone()).collect();
        let stack = self.main_stack().ok_or_else(|| {
            CommandError::Usage(
                "--all-regions finds the main stack by name: pass --stage S --product-code P, or --stack NAME".into(),
            )
        })?;
        let bar = crate::output::spinner(&format!(
            "looking for {stack} in {} Regions",
            candidates.len()
        ));
        let mut probes = tokio::task::JoinSet::new();
        for (region, config) in candidates {
            let stack = stack.clone();
            probes.spawn(async move {
                let found = probe(&config, &stack).await;
                (region, found)
            });
        }
        let mut found = Vec::new();
        let mut failed = Vec::new();
        while let Some(joined) = probes.join_next().await {
            let Ok((region, answer)) = joined else {
                continue;
            };
            match answer {
                Probe::Found => found.push(region),
                Probe::Absent | Probe::NotEnabled => {}
                Probe::Failed(why) => failed.push(format!("{region}: {why}")),
            }
        }
        bar.finish_and_clear();
        found.sort_by_key(|r| order.iter().position(|c| c == r));
        failed.sort();
        for f in &failed {
            tracing::warn!("--all-regions skipped {f}");
        }
        if found.is_empty() {
            return Err(CommandError::NotFound(format!(
                "no stack {stack} in any of the {} Regions probed{}: check --stage/--product-code (deploy with ./deploy.sh), or name the Region with --region",
                order.len(),
                if failed.is_empty() {
                    String::new()
                } else {
                    format!(
                        " ({} could not be asked: {})",
                        failed.len(),
                        failed.join("; ")
                    )
                }
            )));
        }
        Ok(found)
    }

    /// The deployment in `region`, reading the main stack's outputs with `config`.
    pub async fn resolve_in(
        &self,
        config: &SdkConfig,
        region: &str,
        events_outputs: Option<&BTreeMap<String, String>>,
    ) -> Result<Deployment, CommandError> {
        let stack = self.main_stack();
        let described = match &stack {
            Some(name) => Some(describe_stack(config, name).await?.ok_or_else(|| {
                CommandError::NotFound(format!(
                    "no stack {name} in {region}: check --stage/--product-code/--region (deploy with ./deploy.sh), or pass --usage-table and --aggregated-table"
                ))
            })?),
            None => None,
        };
        let account = described
            .as_ref()
            .and_then(|d| d.stack_id.as_deref())
            .and_then(stack_account);
        let outputs = described.map(|d| d.outputs);
        let output = |key: &str| outputs.as_ref().and_then(|o| o.get(key).cloned());
        let need = |given: &Option<String>, key: &str, flag: &str| {
            given.clone().or_else(|| output(key)).ok_or_else(|| {
                CommandError::Usage(match &stack {
                    Some(name) => format!("stack {name} has no {key} output; pass {flag}"),
                    None => format!(
                        "name the deployment: --stage S --product-code P (or --stack NAME), or pass {flag}"
                    ),
                })
            })
        };
        let usage_table = need(&self.usage_table, "UsageTableName", "--usage-table")?;
        let aggregated_table = need(
            &self.aggregated_table,
            "AggregatedUsageTableName",
            "--aggregated-table",
        )?;
        let subscribers_table = self
            .subscribers_table
            .clone()
            .or_else(|| output("SubscribersTableName"))
            .or_else(|| events_outputs.and_then(|o| o.get("SubscribersTableName").cloned()));
        let subscribers_region =
            output("SubscribersTableRegion").unwrap_or_else(|| EVENTS_REGION.into());
        let queues = QUEUE_OUTPUTS
            .iter()
            .filter_map(|(key, role)| output(key).map(|url| (role.to_string(), url)))
            .collect();
        let mode = output("DeploymentMode")
            .map(|text| {
                text.parse::<DeploymentMode>().map_err(|e| {
                    CommandError::Usage(format!(
                        "stack {}: the DeploymentMode output: {e}",
                        stack.as_deref().unwrap_or_default()
                    ))
                })
            })
            .transpose()?;
        let requests_per_second = output("MeteringRequestsPerSecond").and_then(|t| t.parse().ok());
        let profile_table = self
            .customer_profile_table
            .clone()
            .or_else(|| output("CustomerProfileTableName"));
        Ok(Deployment {
            mode,
            requests_per_second,
            profile_table,
            account,
            region: region.to_string(),
            stack,
            usage_table,
            aggregated_table,
            subscribers: subscribers_table.map(|t| (t, subscribers_region)),
            queues,
        })
    }
}

/// What DescribeStacks said in one Region.
enum Probe {
    Found,
    Absent,
    /// An opt-in Region this account has not enabled (its STS/CloudFormation
    /// endpoints refuse the credentials).
    NotEnabled,
    Failed(String),
}

async fn probe(config: &SdkConfig, stack: &str) -> Probe {
    use aws_sdk_cloudformation::error::ProvideErrorMetadata;
    let client = aws_sdk_cloudformation::Client::new(config);
    match client.describe_stacks().stack_name(stack).send().await {
        Ok(out) if !out.stacks().is_empty() => Probe::Found,
        Ok(_) => Probe::Absent,
        Err(e) => {
            let text = aws_sdk_cloudformation::error::DisplayErrorContext(&e).to_string();
            match e.code() {
                _ if text.contains("does not exist") => Probe::Absent,
                Some("InvalidClientTokenId" | "UnrecognizedClientException" | "OptInRequired") => {
                    Probe::NotEnabled
                }
                _ => Probe::Failed(e.message().map_or(text.clone(), str::to_string)),
            }
        }
    }
}

/// What `DescribeStacks` says of a stack that `awsmp` uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribedStack {
    /// Its outputs.
    pub outputs: BTreeMap<String, String>,
    /// Its id, `arn:aws:cloudformation:REGION:ACCOUNT:stack/NAME/ID`.
    pub stack_id: Option<String>,
}

/// The account of a stack id (`arn:PARTITION:cloudformation:REGION:ACCOUNT:stack/...`):
/// its fifth field, when it is 12 digits.
pub fn stack_account(stack_id: &str) -> Option<String> {
    let mut fields = stack_id.split(':');
    let account = (fields.next() == Some("arn"))
        .then(|| fields.nth(3))
        .flatten()?;
    is_account_id(account).then(|| account.to_string())
}

/// Whether `text` is an AWS account id: exactly 12 digits.
pub fn is_account_id(text: &str) -> bool {
    text.len() == 12 && text.bytes().all(|b| b.is_ascii_digit())
}

/// A stack's outputs, or `None` when the stack does not exist.
pub async fn stack_outputs(
    config: &SdkConfig,
    stack: &str,
) -> Result<Option<BTreeMap<String, String>>, CommandError> {
    Ok(describe_stack(config, stack).await?.map(|d| d.outputs))
}

/// A stack's outputs and id, or `None` when the stack does not exist.
pub async fn describe_stack(
    config: &SdkConfig,
    stack: &str,
) -> Result<Option<DescribedStack>, CommandError> {
    let client = aws_sdk_cloudformation::Client::new(config);
    match client.describe_stacks().stack_name(stack).send().await {
        Ok(out) => Ok(out.stacks().first().map(|s| DescribedStack {
            outputs: s
                .outputs()
                .iter()
                .filter_map(|o| Some((o.output_key()?.to_string(), o.output_value()?.to_string())))
                .collect(),
            stack_id: s.stack_id().map(str::to_string),
        })),
        Err(e) => {
            let text = aws_sdk_cloudformation::error::DisplayErrorContext(&e).to_string();
            if text.contains("does not exist") {
                return Ok(None);
            }
            let region = config.region().map_or("-", |r| r.as_ref());
            Err(CommandError::Aws(describe_failure(
                stack, region, &e, &text,
            )))
        }
    }
}

/// What a failed `DescribeStacks` means, said without the SDK's debug dump when the
/// call never got an AWS answer: an endpoint that does not resolve (a Region typo), a
/// network that does not reach it, or something other than CloudFormation answering
/// (a proxy, a wrong `AWS_ENDPOINT_URL`).
fn describe_failure<E>(
    stack: &str,
    region: &str,
    error: &aws_sdk_cloudformation::error::SdkError<
        E,
        aws_sdk_cloudformation::config::http::HttpResponse,
    >,
    text: &str,
) -> String {
    use aws_sdk_cloudformation::error::SdkError;
    let check = format!(
        "check the Region name (--region {region}), the network or proxy, and AWS_ENDPOINT_URL if set"
    );
    match error {
        SdkError::DispatchFailure(_) if text.contains("dns error") => format!(
            "DescribeStacks {stack}: CloudFormation's endpoint for {region} does not resolve: {check}"
        ),
        SdkError::DispatchFailure(_) | SdkError::TimeoutError(_) => format!(
            "DescribeStacks {stack}: CloudFormation in {region} could not be reached: {check}"
        ),
        SdkError::ResponseError(_) => format!(
            "DescribeStacks {stack}: what answered in {region} is not CloudFormation (its answer could not be read): {check}"
        ),
        // An answer that is no AWS error document (an HTML page from a proxy, an
        // emulator that does not know the Region): say what came, not the XML parser's
        // complaint about it.
        SdkError::ServiceError(context) if text.contains("error parsing XML") => {
            let raw = context.raw();
            format!(
                "DescribeStacks {stack}: what answered in {region} is not CloudFormation (HTTP {}, {}): {check}",
                raw.status().as_u16(),
                raw.headers()
                    .get("content-type")
                    .unwrap_or("no content type")
            )
        }
        _ => format!("DescribeStacks {stack}: {text}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_cloudformation::error::SdkError;
    use aws_sdk_cloudformation::operation::describe_stacks::DescribeStacksError;
    use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
    use aws_smithy_runtime_api::client::result::ConnectorError;

    type Failure = SdkError<DescribeStacksError, HttpResponse>;

    #[test]
    fn the_account_is_read_from_the_stack_id() {
        assert_eq!(
            stack_account(
                "arn:aws:cloudformation:eu-west-1:123456789012:stack/awsmp-main-p-s/0a1b2c3d-4e5f-6789-abcd-ef0123456789"
            )
            .as_deref(),
            Some("123456789012")
        );
        assert_eq!(
            stack_account("arn:aws-cn:cloudformation:cn-north-1:210987654321:stack/s/x").as_deref(),
            Some("210987654321")
        );
        for bad in [
            "",
            "awsmp-main-p-s",
            "arn:aws:cloudformation:eu-west-1::stack/s/x",
            "arn:aws:cloudformation:eu-west-1:12345:stack/s/x",
            "urn:aws:cloudformation:eu-west-1:123456789012:stack/s/x",
        ] {
            assert_eq!(stack_account(bad), None, "{bad}");
        }
        assert!(is_account_id("012345678901"));
        assert!(!is_account_id("12345678901a"));
        assert!(!is_account_id("1234567890123"));
    }

    #[test]
    fn a_call_that_never_reached_cloudformation_says_what_to_check() {
        let unresolved: Failure = SdkError::dispatch_failure(ConnectorError::io(
            "dns error: failed to lookup address information".into(),
        ));
        let text = aws_sdk_cloudformation::error::DisplayErrorContext(&unresolved).to_string();
        let said = describe_failure("awsmp-main-p-s", "us-east-11", &unresolved, &text);
        assert!(said.contains("does not resolve"), "{said}");
        assert!(said.contains("--region us-east-11"), "{said}");
        assert!(!said.contains("DispatchFailure"), "{said}");

        let refused: Failure =
            SdkError::dispatch_failure(ConnectorError::io("connection refused".into()));
        let text = aws_sdk_cloudformation::error::DisplayErrorContext(&refused).to_string();
        let said = describe_failure("awsmp-main-p-s", "eu-west-1", &refused, &text);
        assert!(said.contains("could not be reached"), "{said}");
    }
}

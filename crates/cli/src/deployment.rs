//! Finding a deployment: the operator names a stage and product (or a stack), and the
//! table names, queue URLs and the subscribers table come from the stacks' outputs, as
//! `deploy.sh` reads them. Explicit `--usage-table` etc. still win. Each metering
//! Region is its own main stack, so a command runs once per `--region`.

use std::collections::BTreeMap;

use aws_config::{Region, SdkConfig};
use clap::Args;

use crate::commands::CommandError;

/// The Region the events stack (and the subscribers table) lives in.
pub const EVENTS_REGION: &str = "us-east-1";

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
        let mut loader = aws_config::defaults(awsmp_aws::runtime::behavior_version());
        if let Some(profile) = &self.profile {
            loader = loader.profile_name(profile);
        }
        if let Some(region) = region {
            loader = loader.region(Region::new(region.to_string()));
        }
        loader.load().await
    }

    /// Every deployment the arguments name, one per Region.
    pub async fn resolve(&self) -> Result<Vec<Deployment>, CommandError> {
        let regions = if self.regions.is_empty() {
            let region = self
                .sdk_config(None)
                .await
                .region()
                .map(|r| r.to_string())
                .ok_or_else(|| {
                    CommandError::Usage(
                        "no Region: pass --region (the metering Region of the main stack) or set AWS_REGION / the profile's region".into(),
                    )
                })?;
            vec![region]
        } else {
            self.regions.clone()
        };
        let mut out = Vec::new();
        for region in regions {
            let config = self.sdk_config(Some(&region)).await;
            let events = match self.events_stack() {
                Some(stack) if self.subscribers_table.is_none() => {
                    let events_config = self.sdk_config(Some(EVENTS_REGION)).await;
                    stack_outputs(&events_config, &stack).await?
                }
                _ => None,
            };
            out.push(self.resolve_in(&config, &region, events.as_ref()).await?);
        }
        Ok(out)
    }

    /// The deployment in `region`, reading the main stack's outputs with `config`.
    pub async fn resolve_in(
        &self,
        config: &SdkConfig,
        region: &str,
        events_outputs: Option<&BTreeMap<String, String>>,
    ) -> Result<Deployment, CommandError> {
        let stack = self.main_stack();
        let outputs = match &stack {
            Some(name) => Some(stack_outputs(config, name).await?.ok_or_else(|| {
                CommandError::NotFound(format!(
                    "no stack {name} in {region}: check --stage/--product-code/--region (deploy with ./deploy.sh), or pass --usage-table and --aggregated-table"
                ))
            })?),
            None => None,
        };
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
        Ok(Deployment {
            region: region.to_string(),
            stack,
            usage_table,
            aggregated_table,
            subscribers: subscribers_table.map(|t| (t, subscribers_region)),
            queues,
        })
    }
}

/// A stack's outputs, or `None` when the stack does not exist.
pub async fn stack_outputs(
    config: &SdkConfig,
    stack: &str,
) -> Result<Option<BTreeMap<String, String>>, CommandError> {
    let client = aws_sdk_cloudformation::Client::new(config);
    match client.describe_stacks().stack_name(stack).send().await {
        Ok(out) => Ok(out.stacks().first().map(|s| {
            s.outputs()
                .iter()
                .filter_map(|o| Some((o.output_key()?.to_string(), o.output_value()?.to_string())))
                .collect()
        })),
        Err(e) => {
            let text = aws_sdk_cloudformation::error::DisplayErrorContext(&e).to_string();
            if text.contains("does not exist") {
                Ok(None)
            } else {
                Err(CommandError::Aws(format!("DescribeStacks {stack}: {text}")))
            }
        }
    }
}

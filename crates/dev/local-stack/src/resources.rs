//! Deploys both stacks' resources on the local emulator from the SAM templates: the
//! tables through `awsmp_local_aws::tables` (where every table is created), then their
//! streams and the queues; and binds them in each template so its references resolve
//! to those local resources (and to nothing else).

use std::collections::BTreeMap;
use std::path::Path;

use aws_config::SdkConfig;
use aws_sdk_sqs::types::QueueAttributeName;
use awsmp_lambda::ConfigError;
use awsmp_local_aws::create_tables;
use serde_norway::Value;

use crate::LocalError;
use awsmp_local_aws::cfn::StackTemplate;

/// Account id the local stack pretends to run in.
pub const LOCAL_ACCOUNT: &str = "123456789012";
/// Region of both local stacks.
pub const LOCAL_REGION: &str = "us-east-1";
/// The credentials the local usage API accepts (what `awsmp local up` prints for the
/// emulator too): access key id and secret.
pub const LOCAL_API_CREDENTIALS: (&str, &str) = ("test", "test");
/// Visibility timeout of local queues: short, so a failed message is retried within
/// the accelerated demo instead of after the template's real-world timeout.
pub const LOCAL_VISIBILITY_TIMEOUT_SECS: u32 = 1;

/// One template deployed locally: its parameters, tables and queues, bound in its
/// template so references resolve to them.
#[derive(Debug, Clone)]
pub struct LocalStack {
    /// The template, its tables and queues bound to the local ones.
    pub template: StackTemplate,
    /// Stack name (for `AWS::StackName`).
    pub stack_name: String,
    /// Region it is deployed in (for `AWS::Region` and its resources' ARNs).
    pub region: String,
    /// Table logical id -> table name.
    pub tables: BTreeMap<String, String>,
    /// Queue logical id -> (name, url).
    pub queues: BTreeMap<String, (String, String)>,
}

use super::template_error;

impl LocalStack {
    /// Creates the template's tables and queues on the emulator in [`LOCAL_REGION`],
    /// `parameters` given.
    pub async fn deploy(
        path: &Path,
        stack_name: &str,
        parameters: &[(&str, &str)],
        dynamodb: &aws_sdk_dynamodb::Client,
        sqs: &aws_sdk_sqs::Client,
    ) -> Result<Self, LocalError> {
        Self::deploy_in(path, stack_name, LOCAL_REGION, parameters, dynamodb, sqs).await
    }

    /// Creates the template's tables and queues on the emulator in `region` (the
    /// Region `dynamodb` and `sqs` are in), `parameters` given.
    pub async fn deploy_in(
        path: &Path,
        stack_name: &str,
        region: &str,
        parameters: &[(&str, &str)],
        dynamodb: &aws_sdk_dynamodb::Client,
        sqs: &aws_sdk_sqs::Client,
    ) -> Result<Self, LocalError> {
        let pseudo = [
            ("AWS::Region", region.to_string()),
            ("AWS::AccountId", LOCAL_ACCOUNT.to_string()),
            ("AWS::StackName", stack_name.to_string()),
            (
                "AWS::StackId",
                format!("arn:aws:cloudformation:{region}:{LOCAL_ACCOUNT}:stack/{stack_name}/local"),
            ),
        ];
        let parameters = pseudo.into_iter().map(|(k, v)| (k.to_string(), v)).chain(
            parameters
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string())),
        );
        let template = StackTemplate::load_with(path, parameters)
            .map_err(template_error)?
            .bound();
        // Every condition evaluates (a template error shows at deploy, not later).
        if let Some(Value::Mapping(conditions)) = template.section("Conditions") {
            for name in conditions.keys().filter_map(Value::as_str) {
                template.condition(name).map_err(template_error)?;
            }
        }
        let tables = template.tables(&BTreeMap::new()).map_err(template_error)?;
        let mut stack = LocalStack {
            template,
            stack_name: stack_name.to_string(),
            region: region.to_string(),
            tables: create_tables(dynamodb, &tables).await?,
            queues: BTreeMap::new(),
        };
        for (id, name) in &stack.tables {
            let arn = format!(
                "arn:aws:dynamodb:{}:{LOCAL_ACCOUNT}:table/{name}",
                stack.region
            );
            stack.template.bind(id, name, &[("Arn", &arn)]);
        }
        stack.enable_streams(dynamodb).await?;
        stack.create_queues(sqs).await?;
        Ok(stack)
    }

    /// Turns on the stream of every table whose `StreamSpecification` the parameters
    /// leave in place, and binds its `StreamArn`.
    async fn enable_streams(
        &mut self,
        dynamodb: &aws_sdk_dynamodb::Client,
    ) -> Result<(), LocalError> {
        use aws_sdk_dynamodb::types::{StreamSpecification, StreamViewType};
        for (id, name) in self.tables.clone() {
            let Some(spec) = self
                .template
                .properties(&id)
                .and_then(|p| p.get("StreamSpecification"))
                .cloned()
            else {
                continue;
            };
            let Some(spec) = self.template.resolve(&spec).map_err(template_error)? else {
                continue;
            };
            let view = spec
                .get("StreamViewType")
                .and_then(Value::as_str)
                .ok_or_else(|| {
                    LocalError::Template(format!(
                        "{id}: StreamSpecification without StreamViewType"
                    ))
                })?;
            let out = dynamodb
                .update_table()
                .table_name(&name)
                .stream_specification(
                    StreamSpecification::builder()
                        .stream_enabled(true)
                        .stream_view_type(StreamViewType::from(view))
                        .build()
                        .map_err(|e| LocalError::Aws(format!("StreamSpecification: {e}")))?,
                )
                .send()
                .await
                .map_err(|e| LocalError::Aws(format!("UpdateTable {name} (stream): {e}")))?;
            let stream_arn = out
                .table_description()
                .and_then(|t| t.latest_stream_arn())
                .ok_or_else(|| {
                    LocalError::Aws(format!("UpdateTable {name} returned no stream ARN"))
                })?
                .to_string();
            self.template.set_attribute(&id, "StreamArn", &stream_arn);
        }
        Ok(())
    }

    /// A property value resolved to text against the local resources.
    fn resolve(&self, value: &Value, what: &str) -> Result<String, LocalError> {
        self.template.string(value, what).map_err(template_error)
    }

    async fn create_queues(&mut self, sqs: &aws_sdk_sqs::Client) -> Result<(), LocalError> {
        let queues: Vec<String> = self
            .template
            .resources_of_type("AWS::SQS::Queue")
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        // Dead-letter queues first: the others' redrive policies name them.
        let (plain, redriven): (Vec<_>, Vec<_>) = queues.into_iter().partition(|id| {
            self.template
                .properties(id)
                .and_then(|p| p.get("RedrivePolicy"))
                .is_none()
        });
        for id in plain.iter().chain(redriven.iter()) {
            let props = self.template.properties(id).cloned().unwrap_or(Value::Null);
            let name = match props.get("QueueName") {
                Some(v) => self.resolve(v, &format!("{id} QueueName"))?,
                None => format!("{}-{}", self.stack_name, id),
            };
            let mut request = sqs.create_queue().queue_name(&name).attributes(
                QueueAttributeName::VisibilityTimeout,
                LOCAL_VISIBILITY_TIMEOUT_SECS.to_string(),
            );
            if let Some(policy) = props.get("RedrivePolicy") {
                let target = policy
                    .get("deadLetterTargetArn")
                    .map(|v| self.resolve(v, &format!("{id} deadLetterTargetArn")))
                    .transpose()?
                    .ok_or_else(|| {
                        LocalError::Template(format!(
                            "queue {id}: RedrivePolicy without deadLetterTargetArn"
                        ))
                    })?;
                let max = policy
                    .get("maxReceiveCount")
                    .map(|v| self.resolve(v, &format!("{id} maxReceiveCount")))
                    .transpose()?
                    .unwrap_or_else(|| "3".to_string());
                request = request.attributes(
                    QueueAttributeName::RedrivePolicy,
                    serde_json::json!({"deadLetterTargetArn": target, "maxReceiveCount": max})
                        .to_string(),
                );
            }
            let out = request
                .send()
                .await
                .map_err(|e| LocalError::Aws(format!("CreateQueue {name}: {e}")))?;
            let url = out
                .queue_url()
                .ok_or_else(|| LocalError::Aws(format!("CreateQueue {name} returned no URL")))?
                .to_string();
            let arn = format!("arn:aws:sqs:{}:{LOCAL_ACCOUNT}:{name}", self.region);
            self.template.bind(
                id,
                &url,
                &[("Arn", &arn), ("QueueUrl", &url), ("QueueName", &name)],
            );
            self.queues.insert(id.clone(), (name, url));
        }
        Ok(())
    }

    /// The environment the template gives the function `binary` (its condition must
    /// hold), resolved against the local resources, `overrides` applied, plus Lambda's
    /// own `AWS_REGION`: what its `Config::from_lookup` reads, as `lambda::init` has it
    /// read the process environment in Lambda.
    pub fn function_environment(
        &self,
        binary: &str,
        overrides: &BTreeMap<String, String>,
    ) -> Result<BTreeMap<String, String>, LocalError> {
        let spec = self.template.function(binary).map_err(template_error)?;
        if !self.exists(spec.condition.as_deref()) {
            return Err(LocalError::Wiring(format!(
                "{binary} is not deployed in {}: its condition {:?} does not hold",
                self.stack_name, spec.condition
            )));
        }
        self.spec_environment(&spec, overrides)
    }

    /// The function `binary` as its `main.rs` builds it with `lambda::init`: its
    /// `Config` read from [`LocalStack::function_environment`], its `State` connected on
    /// `sdk` in this stack's Region. The config comes back too (its product and stage
    /// name the local metrics).
    pub fn connect<C, S>(
        &self,
        binary: &str,
        overrides: &BTreeMap<String, String>,
        sdk: &SdkConfig,
        read_config: impl FnOnce(&dyn Fn(&str) -> Option<String>) -> Result<C, ConfigError>,
        connect: impl FnOnce(&SdkConfig, &C) -> S,
    ) -> Result<(S, C), LocalError> {
        let env = self.function_environment(binary, overrides)?;
        let config = read_config(&|k| env.get(k).cloned())
            .map_err(|e| LocalError::Wiring(format!("{binary}: {e}")))?;
        let sdk = awsmp_aws::in_region(sdk, &self.region);
        Ok((connect(&sdk, &config), config))
    }

    /// [`LocalStack::function_environment`] of a function already read from the template.
    pub fn spec_environment(
        &self,
        spec: &awsmp_local_aws::FunctionSpec,
        overrides: &BTreeMap<String, String>,
    ) -> Result<BTreeMap<String, String>, LocalError> {
        let mut env = self.environment(&spec.environment, overrides)?;
        // Lambda's own runtime variable (the register function records its Region).
        env.insert("AWS_REGION".into(), self.region.clone());
        Ok(env)
    }

    /// A function's environment, resolved against the local resources, plus overrides.
    pub fn environment(
        &self,
        raw: &BTreeMap<String, Value>,
        overrides: &BTreeMap<String, String>,
    ) -> Result<BTreeMap<String, String>, LocalError> {
        let mut env = BTreeMap::new();
        for (k, v) in raw {
            let value = match overrides.get(k) {
                Some(o) => o.clone(),
                None => self.resolve(v, k)?,
            };
            env.insert(k.clone(), value);
        }
        Ok(env)
    }

    /// The template's outputs as this local stack resolves them (outputs naming
    /// resources the local stack does not run, like the page's CloudFront
    /// distribution, are left out).
    pub fn outputs(&self) -> BTreeMap<String, String> {
        self.template
            .outputs()
            .into_iter()
            .filter(|(_, _, condition)| self.exists(condition.as_deref()))
            .filter_map(|(name, value, _)| {
                Some((name, self.template.string(value, "output").ok()?))
            })
            .collect()
    }

    /// Records this stack and its resolved outputs in the emulator's CloudFormation, so
    /// `awsmp --stage local ...` finds the local deployment as it finds a real one.
    pub async fn register_outputs(
        &self,
        cloudformation: &aws_sdk_cloudformation::Client,
    ) -> Result<(), LocalError> {
        let outputs: serde_json::Map<String, serde_json::Value> = self
            .outputs()
            .into_iter()
            .map(|(k, v)| (k, serde_json::json!({ "Value": v })))
            .collect();
        let body = serde_json::json!({
            "Resources": {"LocalStack": {"Type": "AWS::CloudFormation::WaitConditionHandle"}},
            "Outputs": outputs,
        });
        cloudformation
            .create_stack()
            .stack_name(&self.stack_name)
            .template_body(body.to_string())
            .send()
            .await
            .map_err(|e| {
                LocalError::Aws(format!(
                    "CreateStack {}: {}",
                    self.stack_name,
                    aws_sdk_cloudformation::error::DisplayErrorContext(&e)
                ))
            })?;
        Ok(())
    }

    /// The URL of a queue by logical id.
    pub fn queue_url(&self, logical_id: &str) -> Result<&str, LocalError> {
        self.queues
            .get(logical_id)
            .map(|(_, url)| url.as_str())
            .ok_or_else(|| {
                LocalError::Template(format!("no queue {logical_id} in {}", self.stack_name))
            })
    }

    /// Whether a resource's `Condition` holds (resources without one always exist).
    pub fn exists(&self, condition: Option<&str>) -> bool {
        condition.is_none_or(|c| self.template.condition(c).unwrap_or(false))
    }

    /// A bound resource's attribute (a queue's `Arn`, ...).
    pub fn attribute(&self, logical_id: &str, attribute: &str) -> Option<String> {
        self.template.attribute(logical_id, attribute).ok()
    }
}

//! Creates both stacks' tables and queues on the local emulator from the SAM
//! templates, and resolves the templates' references to those local resources.

use std::collections::BTreeMap;
use std::path::Path;

use aws_sdk_sqs::types::QueueAttributeName;
use awsmp_test_support::{TemplateOptions, create_tables_from_template};
use serde_norway::Value;

use crate::local::LocalError;
use crate::template::{Resolver, Template};

/// Account id the local stack pretends to run in.
pub const LOCAL_ACCOUNT: &str = "123456789012";
/// Region of both local stacks.
pub const LOCAL_REGION: &str = "us-east-1";
/// Visibility timeout of local queues: short, so a failed message is retried within
/// the accelerated demo instead of after the template's real-world timeout.
pub const LOCAL_VISIBILITY_TIMEOUT_SECS: u32 = 1;

/// One template deployed locally: its parameters, tables, queues and conditions.
#[derive(Debug, Clone)]
pub struct LocalStack {
    /// The template.
    pub template: Template,
    /// Stack name (for `AWS::StackName`).
    pub stack_name: String,
    /// Parameter values (defaults merged with overrides).
    pub parameters: BTreeMap<String, String>,
    /// Table logical id -> table name.
    pub tables: BTreeMap<String, String>,
    /// Queue logical id -> (name, url).
    pub queues: BTreeMap<String, (String, String)>,
    /// Evaluated conditions.
    pub conditions: BTreeMap<String, bool>,
}

impl LocalStack {
    /// Creates the template's tables and queues on the emulator.
    pub async fn deploy(
        path: &Path,
        stack_name: &str,
        overrides: &BTreeMap<String, String>,
        dynamodb: &aws_sdk_dynamodb::Client,
        sqs: &aws_sdk_sqs::Client,
    ) -> Result<Self, LocalError> {
        let template = Template::load(path)?;
        let mut parameters = template.parameter_defaults();
        parameters.extend(overrides.clone());
        let mut stack = LocalStack {
            template,
            stack_name: stack_name.to_string(),
            parameters,
            tables: BTreeMap::new(),
            queues: BTreeMap::new(),
            conditions: BTreeMap::new(),
        };
        stack.conditions = stack.template.evaluate_conditions(&stack)?;

        let mut options = TemplateOptions::new();
        for (k, v) in &stack.parameters {
            options = options.parameter(k, v);
        }
        stack.tables = create_tables_from_template(dynamodb, path, &options).await?;
        stack.create_queues(sqs).await?;
        Ok(stack)
    }

    async fn create_queues(&mut self, sqs: &aws_sdk_sqs::Client) -> Result<(), LocalError> {
        let queues: Vec<(String, Value)> = self
            .template
            .resources_of_type("AWS::SQS::Queue")
            .into_iter()
            .map(|(id, body)| (id, body.clone()))
            .collect();
        // Dead-letter queues first: the others' redrive policies name them.
        let (plain, redriven): (Vec<_>, Vec<_>) = queues.into_iter().partition(|(id, _)| {
            self.template
                .properties(id)
                .and_then(|p| p.get("RedrivePolicy"))
                .is_none()
        });
        for (id, _) in plain.iter().chain(redriven.iter()) {
            let props = self.template.properties(id).cloned().unwrap_or(Value::Null);
            let name = match props.get("QueueName") {
                Some(v) => self.template.resolve(v, &*self)?,
                None => format!("{}-{}", self.stack_name, id),
            };
            let mut request = sqs.create_queue().queue_name(&name).attributes(
                QueueAttributeName::VisibilityTimeout,
                LOCAL_VISIBILITY_TIMEOUT_SECS.to_string(),
            );
            if let Some(policy) = props.get("RedrivePolicy") {
                let target = policy
                    .get("deadLetterTargetArn")
                    .map(|v| self.template.resolve(v, &*self))
                    .transpose()?
                    .ok_or_else(|| {
                        LocalError::Template(format!(
                            "queue {id}: RedrivePolicy without deadLetterTargetArn"
                        ))
                    })?;
                let max = policy
                    .get("maxReceiveCount")
                    .map(|v| self.template.resolve(v, &*self))
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
            self.queues.insert(id.clone(), (name, url));
        }
        Ok(())
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
                None => self.template.resolve(v, self)?,
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
            .filter_map(|(name, value, _)| Some((name, self.template.resolve(value, self).ok()?)))
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
        condition.is_none_or(|c| self.conditions.get(c).copied().unwrap_or(false))
    }
}

impl Resolver for LocalStack {
    fn reference(&self, name: &str) -> Option<String> {
        match name {
            "AWS::Region" => return Some(LOCAL_REGION.into()),
            "AWS::AccountId" => return Some(LOCAL_ACCOUNT.into()),
            "AWS::Partition" => return Some("aws".into()),
            "AWS::URLSuffix" => return Some("amazonaws.com".into()),
            "AWS::StackName" => return Some(self.stack_name.clone()),
            "AWS::StackId" => {
                return Some(format!(
                    "arn:aws:cloudformation:{LOCAL_REGION}:{LOCAL_ACCOUNT}:stack/{}/local",
                    self.stack_name
                ));
            }
            _ => {}
        }
        if let Some(v) = self.parameters.get(name) {
            return Some(v.clone());
        }
        if let Some(t) = self.tables.get(name) {
            return Some(t.clone());
        }
        self.queues.get(name).map(|(_, url)| url.clone())
    }

    fn attribute(&self, resource: &str, attribute: &str) -> Option<String> {
        if let Some(table) = self.tables.get(resource) {
            return match attribute {
                "Arn" => Some(format!(
                    "arn:aws:dynamodb:{LOCAL_REGION}:{LOCAL_ACCOUNT}:table/{table}"
                )),
                _ => None,
            };
        }
        let (name, url) = self.queues.get(resource)?;
        match attribute {
            "Arn" => Some(format!("arn:aws:sqs:{LOCAL_REGION}:{LOCAL_ACCOUNT}:{name}")),
            "QueueUrl" => Some(url.clone()),
            "QueueName" => Some(name.clone()),
            _ => None,
        }
    }

    fn condition(&self, name: &str) -> Option<bool> {
        self.conditions.get(name).copied()
    }
}

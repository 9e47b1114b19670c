//! The stack's policies as the templates deploy them: each function's role with what
//! its event sources and logging need ([`FunctionWiring`]), and every resource's own
//! policy ([`ResourcePolicy`]: tables, keys, queues, the event bus).

use super::*;

/// A function of a template as IAM sees it: its role's policies and what its event
/// sources and logging need.
#[derive(Debug, Clone)]
pub struct FunctionWiring {
    /// The template file name.
    pub template: String,
    /// The function's logical id.
    pub logical_id: String,
    /// The role's logical id.
    pub role: String,
    /// Every statement of every policy attached to the role.
    pub policy: Policy,
    /// ARNs of the queues its SQS event source mappings read.
    pub sqs_sources: Vec<String>,
    /// ARNs of the streams its DynamoDB event source mappings read.
    pub stream_sources: Vec<String>,
    /// ARNs of the queues its mappings send a batch they gave up on
    /// (`DestinationConfig.OnFailure`), with the function's role.
    pub failure_destinations: Vec<String>,
    /// Its log group's ARN (`LoggingConfig.LogGroup`), if it names one.
    pub log_group_arn: Option<String>,
}

/// The wiring of the function whose binary (`Metadata.BuildProperties.Binary`) is
/// `binary`, resolved under the template's parameters.
pub fn function_wiring(
    template: &StackTemplate,
    binary: &str,
) -> Result<FunctionWiring, LocalAwsError> {
    let logical_id = template.function(binary)?.logical_id;
    let function = template.resource(&logical_id)?;
    let props = function
        .get("Properties")
        .ok_or_else(|| template.error(format!("{logical_id} has no Properties")))?;
    if props.get("Policies").is_some() {
        return Err(template.error(format!(
            "{logical_id}: SAM Policies (policy templates) are not expanded by this evaluator; \
             give the function an explicit Role, or teach crates/dev/local-aws/src/iam/stack.rs the template"
        )));
    }
    let role = match props.get("Role") {
        Some(Value::Tagged(t)) if t.tag == "GetAtt" => t.value.as_str().map(str::to_string),
        Some(Value::Mapping(m)) => m.get("Fn::GetAtt").and_then(|v| match v {
            Value::String(s) => Some(s.clone()),
            Value::Sequence(items) => items
                .first()
                .and_then(Value::as_str)
                .map(|r| format!("{r}.Arn")),
            _ => None,
        }),
        _ => None,
    }
    .and_then(|s| s.strip_suffix(".Arn").map(str::to_string))
    .ok_or_else(|| {
        template.error(format!(
            "{logical_id}: Role must be !GetAtt <Role>.Arn of a role in this template"
        ))
    })?;
    let policy = role_policy(template, &role)?;

    let mut sqs_sources = Vec::new();
    let mut stream_sources = Vec::new();
    let mut failure_destinations = Vec::new();
    if let Some(Value::Mapping(events)) = props.get("Events") {
        for (name, event) in events {
            let name = name.as_str().unwrap_or_default();
            let kind = event
                .get("Type")
                .and_then(Value::as_str)
                .unwrap_or_default();
            match kind {
                "SQS" => {
                    let queue = event
                        .get("Properties")
                        .and_then(|p| p.get("Queue"))
                        .ok_or_else(|| {
                            template.error(format!("{logical_id} event {name}: no Queue"))
                        })?;
                    sqs_sources
                        .push(template.string(queue, &format!("{logical_id} event {name}"))?);
                }
                "DynamoDB" => {
                    let what = format!("{logical_id} event {name}");
                    let properties = event.get("Properties");
                    let stream = properties
                        .and_then(|p| p.get("Stream"))
                        .ok_or_else(|| template.error(format!("{what}: no Stream")))?;
                    stream_sources.push(template.string(stream, &what)?);
                    if let Some(destination) = properties
                        .and_then(|p| p.get("DestinationConfig"))
                        .and_then(|d| d.get("OnFailure"))
                        .and_then(|o| o.get("Destination"))
                    {
                        failure_destinations.push(template.string(destination, &what)?);
                    }
                }
                "Schedule" | "ScheduleV2" | "Api" | "HttpApi" | "EventBridgeRule" => {}
                other => {
                    return Err(template.error(format!(
                        "{logical_id} event {name}: the evaluator does not know what a {other} \
                         event source needs of the role"
                    )));
                }
            }
        }
    }
    let log_group_arn = match props.get("LoggingConfig").and_then(|l| l.get("LogGroup")) {
        Some(value) => {
            let name = template.string(value, &format!("{logical_id} LoggingConfig.LogGroup"))?;
            Some(format!(
                "arn:{}:logs:{}:{}:log-group:{name}",
                template.parameter("AWS::Partition").unwrap_or("aws"),
                template.parameter("AWS::Region").unwrap_or_default(),
                template.parameter("AWS::AccountId").unwrap_or_default(),
            ))
        }
        None => None,
    };
    Ok(FunctionWiring {
        template: template.name(),
        logical_id,
        role,
        policy,
        sqs_sources,
        stream_sources,
        failure_destinations,
        log_group_arn,
    })
}

/// Every statement of the role's inline policies and of the `AWS::IAM::Policy`
/// resources attached to it.
fn role_policy(template: &StackTemplate, role: &str) -> Result<Policy, LocalAwsError> {
    let resource = template.resource(role)?;
    if template.resource_type(role)? != "AWS::IAM::Role" {
        return Err(template.error(format!("{role} is not an AWS::IAM::Role")));
    }
    let props = resource
        .get("Properties")
        .ok_or_else(|| template.error(format!("{role} has no Properties")))?;
    let resolved = template
        .resolve(props)?
        .ok_or_else(|| template.error(format!("{role} Properties resolve to nothing")))?;
    if resolved.get("ManagedPolicyArns").is_some() {
        return Err(template.error(format!(
            "{role}: ManagedPolicyArns cannot be evaluated here; use inline policies"
        )));
    }
    if resolved.get("PermissionsBoundary").is_some() {
        return Err(template.error(format!(
            "{role}: a permissions boundary is set under these parameters; the evaluator \
             cannot read it (evaluate with PermissionsBoundaryArn empty)"
        )));
    }
    let mut documents = Vec::new();
    if let Some(Value::Sequence(policies)) = resolved.get("Policies") {
        for p in policies {
            documents.push(p.get("PolicyDocument").cloned().ok_or_else(|| {
                template.error(format!("{role}: a policy without PolicyDocument"))
            })?);
        }
    }
    let role_name = template.reference(role)?;
    for (logical_id, r) in template.resources() {
        if r.get("Type").and_then(Value::as_str) != Some("AWS::IAM::Policy")
            || !template.is_deployed(&logical_id)?
        {
            continue;
        }
        let Some(props) = r.get("Properties") else {
            continue;
        };
        let roles = match props.get("Roles") {
            Some(v) => template.strings(v, &format!("{logical_id} Roles"))?,
            None => Vec::new(),
        };
        if roles.contains(&role_name)
            && let Some(document) = props.get("PolicyDocument")
            && let Some(document) = template.resolve(document)?
        {
            documents.push(document);
        }
    }
    let mut policy = Policy::default();
    for document in &documents {
        let mut p =
            Policy::from_document(document).map_err(|e| template.error(format!("{role}: {e}")))?;
        policy.statements.append(&mut p.statements);
    }
    Ok(policy)
}

/// A resource's own policy, as the template deploys it.
#[derive(Debug, Clone)]
pub struct ResourcePolicy {
    /// The resource's logical id.
    pub logical_id: String,
    /// The ARN a request names it by (`GetAtt Arn`; a table's indexes are under it).
    pub arn: String,
    /// Its statements.
    pub policy: Policy,
}

impl ResourcePolicy {
    /// Whether a request on `resource` is governed by this policy (the resource, or
    /// one of its indexes or streams).
    pub fn governs(&self, resource: &str) -> bool {
        resource == self.arn
            || resource
                .strip_prefix(&self.arn)
                .is_some_and(|rest| rest.starts_with('/'))
    }
}

/// Every deployed table's `ResourcePolicy`, KMS key's `KeyPolicy`, queue policy
/// (`AWS::SQS::QueuePolicy`, one entry per queue it is attached to), bucket policy
/// (`AWS::S3::BucketPolicy`, governing its bucket and the bucket's objects) and event bus
/// policy statement (`AWS::Events::EventBusPolicy`, governing the bus its `Resource`
/// names) of `template` under its parameters.
pub fn resource_policies(template: &StackTemplate) -> Result<Vec<ResourcePolicy>, LocalAwsError> {
    let mut out = queue_policies(template)?;
    out.extend(bus_policies(template)?);
    out.extend(bucket_policies(template)?);
    for (logical_id, resource) in template.resources() {
        let path: &[&str] = match resource.get("Type").and_then(Value::as_str) {
            Some("AWS::DynamoDB::Table") => &["ResourcePolicy", "PolicyDocument"],
            Some("AWS::KMS::Key") => &["KeyPolicy"],
            _ => continue,
        };
        if !template.is_deployed(&logical_id)? {
            continue;
        }
        let mut document = resource.get("Properties");
        for key in path {
            document = document.and_then(|d| d.get(*key));
        }
        let Some(document) = document else { continue };
        let Some(document) = template.resolve(document)? else {
            continue;
        };
        let policy = Policy::from_resource_document(&document)
            .map_err(|e| template.error(format!("{logical_id}: {e}")))?;
        out.push(ResourcePolicy {
            arn: template.attribute(&logical_id, "Arn")?,
            logical_id,
            policy,
        });
    }
    Ok(out)
}

/// Each deployed `AWS::Events::EventBusPolicy` in its `Statement` form: one statement
/// of the bus's policy, governing the bus its `Resource` names.
fn bus_policies(template: &StackTemplate) -> Result<Vec<ResourcePolicy>, LocalAwsError> {
    let mut out = Vec::new();
    for (logical_id, resource) in template.resources_of_type("AWS::Events::EventBusPolicy") {
        if !template.is_deployed(&logical_id)? {
            continue;
        }
        let Some(statement) = resource.get("Properties").and_then(|p| p.get("Statement")) else {
            return Err(template.error(format!(
                "{logical_id}: only the Statement form is read (not Action/Principal)"
            )));
        };
        let Some(statement) = template.resolve(statement)? else {
            continue;
        };
        let bus = statement
            .get("Resource")
            .and_then(Value::as_str)
            .ok_or_else(|| template.error(format!("{logical_id}: Statement needs one Resource")))?
            .to_string();
        let mut document = serde_norway::Mapping::new();
        document.insert(Value::from("Statement"), statement);
        let policy = Policy::from_resource_document(&Value::Mapping(document))
            .map_err(|e| template.error(format!("{logical_id}: {e}")))?;
        out.push(ResourcePolicy {
            logical_id,
            arn: bus,
            policy,
        });
    }
    Ok(out)
}

/// Each deployed `AWS::SQS::QueuePolicy`, once per queue of its `Queues` (URLs, which
/// name the template's queues by their `Ref`).
/// Each deployed `AWS::S3::BucketPolicy`, governing the bucket its `Bucket` names (a
/// `Ref` to a bucket of the template) and that bucket's objects.
fn bucket_policies(template: &StackTemplate) -> Result<Vec<ResourcePolicy>, LocalAwsError> {
    let mut out = Vec::new();
    let buckets = template.resources_of_type("AWS::S3::Bucket");
    for (logical_id, resource) in template.resources_of_type("AWS::S3::BucketPolicy") {
        if !template.is_deployed(&logical_id)? {
            continue;
        }
        let props = resource.get("Properties");
        let (Some(bucket), Some(document)) = (
            props.and_then(|p| p.get("Bucket")),
            props.and_then(|p| p.get("PolicyDocument")),
        ) else {
            return Err(template.error(format!("{logical_id}: needs Bucket and PolicyDocument")));
        };
        let name = template.strings(bucket, &format!("{logical_id} Bucket"))?;
        let Some(document) = template.resolve(document)? else {
            continue;
        };
        let policy = Policy::from_resource_document(&document)
            .map_err(|e| template.error(format!("{logical_id}: {e}")))?;
        for name in name {
            let bucket = buckets
                .iter()
                .find(|(id, _)| template.reference(id).is_ok_and(|r| r == name))
                .ok_or_else(|| {
                    template.error(format!(
                        "{logical_id}: bucket {name} is not in the template"
                    ))
                })?;
            out.push(ResourcePolicy {
                logical_id: logical_id.clone(),
                arn: template.attribute(&bucket.0, "Arn")?,
                policy: policy.clone(),
            });
        }
    }
    Ok(out)
}

fn queue_policies(template: &StackTemplate) -> Result<Vec<ResourcePolicy>, LocalAwsError> {
    let mut out = Vec::new();
    let queues = template.resources_of_type("AWS::SQS::Queue");
    for (logical_id, resource) in template.resources_of_type("AWS::SQS::QueuePolicy") {
        if !template.is_deployed(&logical_id)? {
            continue;
        }
        let props = resource.get("Properties");
        let (Some(urls), Some(document)) = (
            props.and_then(|p| p.get("Queues")),
            props.and_then(|p| p.get("PolicyDocument")),
        ) else {
            return Err(template.error(format!("{logical_id}: needs Queues and PolicyDocument")));
        };
        let urls = template.strings(urls, &format!("{logical_id} Queues"))?;
        let Some(document) = template.resolve(document)? else {
            continue;
        };
        let policy = Policy::from_resource_document(&document)
            .map_err(|e| template.error(format!("{logical_id}: {e}")))?;
        for url in urls {
            let queue = queues
                .iter()
                .find(|(id, _)| template.reference(id).is_ok_and(|r| r == url))
                .ok_or_else(|| {
                    template.error(format!("{logical_id}: queue {url} is not in the template"))
                })?;
            out.push(ResourcePolicy {
                logical_id: logical_id.clone(),
                arn: template.attribute(&queue.0, "Arn")?,
                policy: policy.clone(),
            });
        }
    }
    Ok(out)
}

//! The workspace's one CloudFormation/SAM template reader: a template with its
//! intrinsic functions resolved for one set of parameter values, as CloudFormation
//! would deploy it: `Ref` (parameters, pseudo parameters, `AWS::NoValue`, resources),
//! `Fn::Sub` (with `${Res}` and `${Res.Attr}`), `Fn::GetAtt`, `Fn::Join`,
//! `Fn::Select`, `Fn::Split`, `Fn::If` over the template's `Conditions`
//! (`Fn::Equals`, `Fn::Not`, `Fn::And`, `Fn::Or`, `Condition`), in short (`!Sub`) and
//! long (`Fn::Sub:`) forms. Resource names and ARNs are those CloudFormation gives:
//! tables and queues by their `TableName` / `QueueName`, log groups by
//! `LogGroupName`; or, once resources are bound ([`StackTemplate::bound`], the local
//! stack), exactly what was bound and nothing else. Anything it cannot resolve is an
//! error naming the value, never a guess; the one exception is `GetAtt` of an
//! attribute no IAM policy here names (a distribution's domain name, ...), which
//! resolves to a visible stand-in `<Resource.Attribute>` that matches no ARN.
//! The table reader ([`crate::tables`]), the IAM checks ([`crate::iam`]) and the
//! function specs ([`crate::function_specs`]) all read through it; so do the event
//! rules' detail types ([`event_rule_detail_types`]), on the stack templates at the
//! workspace root ([`workspace_templates`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_norway::{Mapping, Value};

use crate::error::LocalAwsError;

/// The account id the pseudo parameter `AWS::AccountId` resolves to by default (moto's).
pub const DEFAULT_ACCOUNT: &str = "123456789012";

/// A loaded template and the parameter values it is resolved with.
#[derive(Debug, Clone)]
pub struct StackTemplate {
    path: PathBuf,
    doc: Value,
    parameters: BTreeMap<String, String>,
    /// Bound resources: logical id -> what its `Ref` resolves to.
    references: BTreeMap<String, String>,
    /// Bound attributes: (logical id, attribute) -> value.
    attributes: BTreeMap<(String, String), String>,
    /// Whether only bound resources exist ([`StackTemplate::bound`]).
    bound_only: bool,
}

fn scalar_text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

impl StackTemplate {
    /// Reads `path` and resolves it with the template's parameter defaults, the pseudo
    /// parameters (`AWS::Region` us-east-1, `AWS::AccountId` [`DEFAULT_ACCOUNT`],
    /// `AWS::Partition` aws, ...), then `parameters` (which may also set pseudo
    /// parameters, e.g. `("AWS::Region", "eu-west-1")`).
    pub fn load(path: &Path, parameters: &[(&str, &str)]) -> Result<Self, LocalAwsError> {
        Self::load_with(
            path,
            parameters
                .iter()
                .map(|(k, v)| ((*k).to_string(), (*v).to_string())),
        )
    }

    /// [`StackTemplate::load`] with owned parameter values.
    pub fn load_with(
        path: &Path,
        parameters: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, LocalAwsError> {
        let text = std::fs::read_to_string(path).map_err(|e| LocalAwsError::Template {
            path: path.to_path_buf(),
            message: format!("cannot read: {e}"),
        })?;
        Self::parse(path, &text, parameters)
    }

    /// A template from its text (`path` names it in messages), resolved as
    /// [`StackTemplate::load_with`] resolves a file.
    pub fn parse(
        path: &Path,
        text: &str,
        parameters: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, LocalAwsError> {
        let doc: Value = serde_norway::from_str(text).map_err(|e| LocalAwsError::Template {
            path: path.to_path_buf(),
            message: format!("not valid YAML: {e}"),
        })?;
        let mut values: BTreeMap<String, String> = [
            ("AWS::Region", "us-east-1"),
            ("AWS::AccountId", DEFAULT_ACCOUNT),
            ("AWS::StackName", "awsmp-test"),
            ("AWS::Partition", "aws"),
            ("AWS::URLSuffix", "amazonaws.com"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        if let Some(Value::Mapping(params)) = doc.get("Parameters") {
            for (name, param) in params {
                if let (Value::String(name), Some(default)) =
                    (name, param.get("Default").and_then(scalar_text))
                {
                    values.insert(name.clone(), default);
                }
            }
        }
        values.extend(parameters);
        Ok(StackTemplate {
            path: path.to_path_buf(),
            doc,
            parameters: values,
            references: BTreeMap::new(),
            attributes: BTreeMap::new(),
            bound_only: false,
        })
    }

    /// From now on only bound resources exist ([`StackTemplate::bind`]): a `Ref` or
    /// `GetAtt` of any other is an error, whatever its `Condition` (the local stack,
    /// whose resources are the tables and queues it created).
    pub fn bound(mut self) -> Self {
        self.bound_only = true;
        self
    }

    /// Binds `logical_id`: its `Ref` is `reference`, its `GetAtt`s are `attributes`
    /// (and, once [`StackTemplate::bound`], nothing else).
    pub fn bind(&mut self, logical_id: &str, reference: &str, attributes: &[(&str, &str)]) {
        self.references
            .insert(logical_id.to_string(), reference.to_string());
        for (attribute, value) in attributes {
            self.set_attribute(logical_id, attribute, value);
        }
    }

    /// `GetAtt resource.attribute` resolves to `value` (what CloudFormation only knows
    /// once the resource exists: a distribution's domain name, ...).
    pub fn set_attribute(&mut self, resource: &str, attribute: &str, value: &str) {
        self.attributes.insert(
            (resource.to_string(), attribute.to_string()),
            value.to_string(),
        );
    }

    /// Every parameter and pseudo parameter value (defaults merged with the given).
    pub fn parameters(&self) -> &BTreeMap<String, String> {
        &self.parameters
    }

    /// The template file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file name, for messages.
    pub fn name(&self) -> String {
        self.path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    /// An error about this template.
    pub fn error(&self, message: impl Into<String>) -> LocalAwsError {
        LocalAwsError::Template {
            path: self.path.clone(),
            message: message.into(),
        }
    }

    /// A parameter's (or pseudo parameter's) value.
    pub fn parameter(&self, name: &str) -> Option<&str> {
        self.parameters.get(name).map(String::as_str)
    }

    /// Every resource: logical id -> definition.
    pub fn resources(&self) -> Vec<(String, &Value)> {
        match self.doc.get("Resources") {
            Some(Value::Mapping(map)) => map
                .iter()
                .filter_map(|(k, v)| k.as_str().map(|k| (k.to_string(), v)))
                .collect(),
            _ => Vec::new(),
        }
    }

    /// One resource's definition.
    pub fn resource(&self, logical_id: &str) -> Result<&Value, LocalAwsError> {
        self.doc
            .get("Resources")
            .and_then(|r| r.get(logical_id))
            .ok_or_else(|| self.error(format!("no resource {logical_id}")))
    }

    /// A resource's `Type`.
    pub fn resource_type(&self, logical_id: &str) -> Result<String, LocalAwsError> {
        self.resource(logical_id)?
            .get("Type")
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| self.error(format!("resource {logical_id} has no Type")))
    }

    /// Logical ids and definitions of every resource of type `kind`.
    pub fn resources_of_type(&self, kind: &str) -> Vec<(String, &Value)> {
        self.resources()
            .into_iter()
            .filter(|(_, r)| r.get("Type").and_then(Value::as_str) == Some(kind))
            .collect()
    }

    /// A resource's `Properties`, unresolved.
    pub fn properties(&self, logical_id: &str) -> Option<&Value> {
        self.doc
            .get("Resources")
            .and_then(|r| r.get(logical_id))
            .and_then(|r| r.get("Properties"))
    }

    /// A top-level section (`Globals`, `Outputs`, ...), unresolved.
    pub fn section(&self, name: &str) -> Option<&Value> {
        self.doc.get(name)
    }

    /// Every output: its name, `Value` (unresolved) and `Condition` (if any).
    pub fn outputs(&self) -> Vec<(String, &Value, Option<String>)> {
        match self.doc.get("Outputs") {
            Some(Value::Mapping(map)) => map
                .iter()
                .filter_map(|(k, o)| {
                    let condition = o.get("Condition").and_then(Value::as_str);
                    Some((
                        k.as_str()?.to_string(),
                        o.get("Value")?,
                        condition.map(str::to_string),
                    ))
                })
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Whether a resource is created under these parameters (its `Condition`).
    pub fn is_deployed(&self, logical_id: &str) -> Result<bool, LocalAwsError> {
        match self
            .resource(logical_id)?
            .get("Condition")
            .and_then(Value::as_str)
        {
            Some(condition) => self.condition(condition),
            None => Ok(true),
        }
    }

    /// A named condition of the template.
    pub fn condition(&self, name: &str) -> Result<bool, LocalAwsError> {
        let definition = self
            .doc
            .get("Conditions")
            .and_then(|c| c.get(name))
            .ok_or_else(|| self.error(format!("no condition {name}")))?;
        self.condition_value(definition)
    }

    fn condition_value(&self, value: &Value) -> Result<bool, LocalAwsError> {
        let (function, argument) = intrinsic(value)
            .ok_or_else(|| self.error(format!("condition {value:?} is not a function")))?;
        let args = |n: usize| -> Result<&Vec<Value>, LocalAwsError> {
            match argument {
                Value::Sequence(items) if n == 0 || items.len() == n => Ok(items),
                _ => Err(self.error(format!("Fn::{function} needs a list: {argument:?}"))),
            }
        };
        match function.as_str() {
            "Equals" => {
                let items = args(2)?;
                let a = self.string(&items[0], "Fn::Equals")?;
                let b = self.string(&items[1], "Fn::Equals")?;
                Ok(a == b)
            }
            "Not" => Ok(!self.condition_value(&args(1)?[0])?),
            "And" => {
                for item in args(0)? {
                    if !self.condition_value(item)? {
                        return Ok(false);
                    }
                }
                Ok(true)
            }
            "Or" => {
                for item in args(0)? {
                    if self.condition_value(item)? {
                        return Ok(true);
                    }
                }
                Ok(false)
            }
            "Condition" => match argument {
                Value::String(name) => self.condition(name),
                _ => Err(self.error(format!("Condition of a non-string {argument:?}"))),
            },
            other => Err(self.error(format!("unsupported condition function {other}"))),
        }
    }

    /// Resolves every intrinsic in `value`. `None` is `AWS::NoValue` (the property is
    /// left out); list items and map entries that resolve to it are dropped.
    pub fn resolve(&self, value: &Value) -> Result<Option<Value>, LocalAwsError> {
        if let Some((function, argument)) = intrinsic(value) {
            return self.intrinsic_function(&function, argument);
        }
        Ok(Some(match value {
            Value::Sequence(items) => {
                let mut out = Vec::new();
                for item in items {
                    if let Some(v) = self.resolve(item)? {
                        out.push(v);
                    }
                }
                Value::Sequence(out)
            }
            Value::Mapping(map) => {
                let mut out = Mapping::new();
                for (k, v) in map {
                    if let Some(v) = self.resolve(v)? {
                        out.insert(k.clone(), v);
                    }
                }
                Value::Mapping(out)
            }
            Value::Tagged(tagged) => {
                return Err(self.error(format!("unsupported tag !{}", tagged.tag)));
            }
            other => other.clone(),
        }))
    }

    /// Resolves `value` to one string (a scalar after resolution).
    pub fn string(&self, value: &Value, what: &str) -> Result<String, LocalAwsError> {
        let resolved = self
            .resolve(value)?
            .ok_or_else(|| self.error(format!("{what}: resolves to AWS::NoValue")))?;
        scalar_text(&resolved)
            .ok_or_else(|| self.error(format!("{what}: {value:?} is not a string")))
    }

    /// Resolves `value` to a list of strings (a single string is a list of one).
    pub fn strings(&self, value: &Value, what: &str) -> Result<Vec<String>, LocalAwsError> {
        match self.resolve(value)? {
            None => Ok(Vec::new()),
            Some(Value::Sequence(items)) => items
                .iter()
                .map(|v| {
                    scalar_text(v)
                        .ok_or_else(|| self.error(format!("{what}: {v:?} is not a string")))
                })
                .collect(),
            Some(other) => scalar_text(&other)
                .map(|s| vec![s])
                .ok_or_else(|| self.error(format!("{what}: {other:?} is not a string list"))),
        }
    }

    fn intrinsic_function(
        &self,
        function: &str,
        argument: &Value,
    ) -> Result<Option<Value>, LocalAwsError> {
        let list = |what: &str| -> Result<&Vec<Value>, LocalAwsError> {
            match argument {
                Value::Sequence(items) => Ok(items),
                _ => Err(self.error(format!("Fn::{what} needs a list: {argument:?}"))),
            }
        };
        match function {
            "Ref" => {
                let name = argument
                    .as_str()
                    .ok_or_else(|| self.error(format!("Ref of a non-string {argument:?}")))?;
                if name == "AWS::NoValue" {
                    return Ok(None);
                }
                self.reference(name).map(|s| Some(Value::String(s)))
            }
            "GetAtt" => {
                let (resource, attribute) = match argument {
                    Value::String(s) => s
                        .split_once('.')
                        .map(|(r, a)| (r.to_string(), a.to_string()))
                        .ok_or_else(|| self.error(format!("GetAtt {s:?} needs Res.Attr")))?,
                    Value::Sequence(items) if items.len() == 2 => (
                        self.string(&items[0], "GetAtt")?,
                        self.string(&items[1], "GetAtt")?,
                    ),
                    other => return Err(self.error(format!("GetAtt of {other:?}"))),
                };
                self.attribute(&resource, &attribute)
                    .map(|s| Some(Value::String(s)))
            }
            "Sub" => self.sub(argument).map(|s| Some(Value::String(s))),
            "Join" => {
                let items = list("Join")?;
                let [separator, parts] = items.as_slice() else {
                    return Err(self.error("Fn::Join needs [separator, list]"));
                };
                let separator = self.string(separator, "Fn::Join separator")?;
                let parts = self.strings(parts, "Fn::Join list")?;
                Ok(Some(Value::String(parts.join(&separator))))
            }
            "Select" => {
                let items = list("Select")?;
                let [index, values] = items.as_slice() else {
                    return Err(self.error("Fn::Select needs [index, list]"));
                };
                let index: usize = self
                    .string(index, "Fn::Select index")?
                    .parse()
                    .map_err(|_| self.error("Fn::Select index is not a number"))?;
                let values = self.strings(values, "Fn::Select list")?;
                values
                    .get(index)
                    .cloned()
                    .map(|v| Some(Value::String(v)))
                    .ok_or_else(|| self.error(format!("Fn::Select {index} out of range")))
            }
            "Split" => {
                let items = list("Split")?;
                let [separator, text] = items.as_slice() else {
                    return Err(self.error("Fn::Split needs [separator, string]"));
                };
                let separator = self.string(separator, "Fn::Split separator")?;
                let text = self.string(text, "Fn::Split string")?;
                Ok(Some(Value::Sequence(
                    text.split(separator.as_str())
                        .map(|s| Value::String(s.to_string()))
                        .collect(),
                )))
            }
            "If" => {
                let items = list("If")?;
                let [condition, then, otherwise] = items.as_slice() else {
                    return Err(self.error("Fn::If needs [condition, then, else]"));
                };
                let condition = condition
                    .as_str()
                    .ok_or_else(|| self.error("Fn::If condition must be a name"))?;
                if self.condition(condition)? {
                    self.resolve(then)
                } else {
                    self.resolve(otherwise)
                }
            }
            other => Err(self.error(format!("unsupported intrinsic Fn::{other}"))),
        }
    }

    fn sub(&self, argument: &Value) -> Result<String, LocalAwsError> {
        let (text, vars) = match argument {
            Value::String(s) => (s.as_str(), BTreeMap::new()),
            Value::Sequence(items) if items.len() == 2 => {
                let text = items[0]
                    .as_str()
                    .ok_or_else(|| self.error("Fn::Sub list needs a string first"))?;
                let Value::Mapping(map) = &items[1] else {
                    return Err(self.error("Fn::Sub list needs a map second"));
                };
                let mut vars = BTreeMap::new();
                for (k, v) in map {
                    let k = k
                        .as_str()
                        .ok_or_else(|| self.error(format!("Fn::Sub variable {k:?}")))?;
                    vars.insert(k.to_string(), self.string(v, &format!("Fn::Sub ${{{k}}}"))?);
                }
                (text, vars)
            }
            other => return Err(self.error(format!("unsupported Fn::Sub {other:?}"))),
        };
        let mut out = String::new();
        let mut rest = text;
        while let Some(start) = rest.find("${") {
            out.push_str(&rest[..start]);
            let after = &rest[start + 2..];
            let end = after
                .find('}')
                .ok_or_else(|| self.error(format!("unclosed ${{ in {text:?}")))?;
            let name = &after[..end];
            if let Some(literal) = name.strip_prefix('!') {
                out.push_str("${");
                out.push_str(literal);
                out.push('}');
            } else if let Some(v) = vars.get(name) {
                out.push_str(v);
            } else if let Some((resource, attribute)) =
                name.split_once('.').filter(|_| !name.starts_with("AWS::"))
            {
                out.push_str(&self.attribute(resource, attribute)?);
            } else {
                let value = self.reference(name).map_err(|e| {
                    self.error(format!("${{{name}}} in {text:?} has no value: {e}"))
                })?;
                out.push_str(&value);
            }
            rest = &after[end + 1..];
        }
        out.push_str(rest);
        Ok(out)
    }

    /// `Ref` of a parameter, pseudo parameter or resource.
    pub fn reference(&self, name: &str) -> Result<String, LocalAwsError> {
        if let Some(v) = self.parameters.get(name) {
            return Ok(v.clone());
        }
        if let Some(bound) = self.references.get(name) {
            return Ok(bound.clone());
        }
        if self.bound_only {
            return Err(self.error(format!("Ref {name}: not created locally")));
        }
        if self
            .doc
            .get("Resources")
            .and_then(|r| r.get(name))
            .is_none()
        {
            return Err(self.error(format!(
                "Ref {name}: no parameter value and no such resource (give the parameter a value)"
            )));
        }
        self.deployed(name)?;
        let kind = self.resource_type(name)?;
        match kind.as_str() {
            "AWS::DynamoDB::Table" => self.property(name, "TableName"),
            "AWS::SQS::Queue" => Ok(format!(
                "https://sqs.{}.{}/{}/{}",
                self.pseudo("AWS::Region"),
                self.pseudo("AWS::URLSuffix"),
                self.pseudo("AWS::AccountId"),
                self.property(name, "QueueName")?
            )),
            "AWS::Logs::LogGroup" => self.property(name, "LogGroupName"),
            "AWS::IAM::Role" => self.property(name, "RoleName").or(Ok(name.to_string())),
            // Names CloudFormation generates: the logical id stands in for them.
            _ => Ok(name.to_string()),
        }
    }

    /// `Fn::GetAtt resource.attribute`.
    pub fn attribute(&self, resource: &str, attribute: &str) -> Result<String, LocalAwsError> {
        let key = (resource.to_string(), attribute.to_string());
        if let Some(bound) = self.attributes.get(&key) {
            return Ok(bound.clone());
        }
        if self.bound_only {
            return Err(self.error(format!(
                "GetAtt {resource}.{attribute}: not created locally"
            )));
        }
        self.deployed(resource)?;
        let kind = self.resource_type(resource)?;
        let (partition, region, account) = (
            self.pseudo("AWS::Partition"),
            self.pseudo("AWS::Region"),
            self.pseudo("AWS::AccountId"),
        );
        match (kind.as_str(), attribute) {
            ("AWS::DynamoDB::Table", "Arn") => Ok(format!(
                "arn:{partition}:dynamodb:{region}:{account}:table/{}",
                self.property(resource, "TableName")?
            )),
            // A stream's label is the time it was enabled; any one stands in.
            ("AWS::DynamoDB::Table", "StreamArn") => Ok(format!(
                "arn:{partition}:dynamodb:{region}:{account}:table/{}/stream/2026-11-30T00:00:00.000",
                self.property(resource, "TableName")?
            )),
            ("AWS::SQS::Queue", "Arn") => Ok(format!(
                "arn:{partition}:sqs:{region}:{account}:{}",
                self.property(resource, "QueueName")?
            )),
            ("AWS::SQS::Queue", "QueueName") => self.property(resource, "QueueName"),
            ("AWS::SQS::Queue", "QueueUrl") => self.reference(resource),
            ("AWS::Logs::LogGroup", "Arn") => Ok(format!(
                "arn:{partition}:logs:{region}:{account}:log-group:{}:*",
                self.property(resource, "LogGroupName")?
            )),
            ("AWS::IAM::Role", "Arn") => Ok(format!(
                "arn:{partition}:iam::{account}:role/{}",
                self.reference(resource)?
            )),
            // Key ids are generated: the logical id stands in.
            ("AWS::KMS::Key", "Arn") => Ok(format!(
                "arn:{partition}:kms:{region}:{account}:key/{resource}"
            )),
            ("AWS::Serverless::Function", "Arn") => Ok(format!(
                "arn:{partition}:lambda:{region}:{account}:function:{}",
                self.property(resource, "FunctionName")
                    .unwrap_or_else(|_| resource.to_string())
            )),
            ("AWS::Events::Rule", "Arn") => Ok(format!(
                "arn:{partition}:events:{region}:{account}:rule/{}",
                self.property(resource, "Name")
                    .unwrap_or_else(|_| resource.to_string())
            )),
            // Attributes of resources the IAM contract never evaluates (domain names,
            // ids): a stand-in that says what it is.
            _ => Ok(format!("<{resource}.{attribute}>")),
        }
    }

    fn pseudo(&self, name: &str) -> String {
        self.parameters.get(name).cloned().unwrap_or_default()
    }

    fn deployed(&self, logical_id: &str) -> Result<(), LocalAwsError> {
        if self.is_deployed(logical_id)? {
            Ok(())
        } else {
            Err(self.error(format!(
                "{logical_id} is named but not created under these parameters (its Condition is false)"
            )))
        }
    }

    /// A resource's property, resolved to a string.
    pub fn property(&self, logical_id: &str, property: &str) -> Result<String, LocalAwsError> {
        let value = self
            .resource(logical_id)?
            .get("Properties")
            .and_then(|p| p.get(property))
            .ok_or_else(|| self.error(format!("{logical_id} has no {property}")))?;
        self.string(value, &format!("{logical_id} {property}"))
    }

    /// How this template would name `arn` (`!GetAtt UsageTable.Arn`, or
    /// `!Sub "${UsageTable.Arn}/index/NAME"` for an index), if one of its tables or
    /// queues has it.
    pub fn arn_expression(&self, arn: &str) -> Option<String> {
        for (logical_id, _) in self.resources() {
            let Ok(own) = self.attribute(&logical_id, "Arn") else {
                continue;
            };
            if own.starts_with('<') {
                continue;
            }
            if own == arn {
                return Some(format!("!GetAtt {logical_id}.Arn"));
            }
            if let Some(rest) = arn.strip_prefix(&own)
                && rest.starts_with('/')
            {
                return Some(format!("!Sub \"${{{logical_id}.Arn}}{rest}\""));
            }
        }
        None
    }
}

/// `(function, argument)` of an intrinsic in short (`!Sub x`) or long (`Fn::Sub: x`,
/// `Ref: x`, `Condition: x`) form.
pub(crate) fn intrinsic(value: &Value) -> Option<(String, &Value)> {
    match value {
        Value::Tagged(tagged) => {
            let tag = tagged.tag.to_string();
            Some((tag.trim_start_matches('!').to_string(), &tagged.value))
        }
        Value::Mapping(map) if map.len() == 1 => {
            let (key, argument) = map.iter().next()?;
            let key = key.as_str()?;
            if key == "Ref" || key == "Condition" {
                Some((key.to_string(), argument))
            } else {
                key.strip_prefix("Fn::").map(|f| (f.to_string(), argument))
            }
        }
        _ => None,
    }
}

/// The `detail-type` list of the `EventPattern` of the `AWS::Events::Rule` resource
/// `logical_id`, sorted (an error if the resource, its pattern or the list is missing).
pub fn event_rule_detail_types(
    path: &Path,
    logical_id: &str,
) -> Result<Vec<String>, LocalAwsError> {
    let template = StackTemplate::load(path, &[])?;
    let error = |message: String| template.error(message);
    let resource = template.resource(logical_id)?;
    if resource.get("Type").and_then(Value::as_str) != Some("AWS::Events::Rule") {
        return Err(error(format!("{logical_id} is not an AWS::Events::Rule")));
    }
    let list = resource
        .get("Properties")
        .and_then(|p| p.get("EventPattern"))
        .and_then(|p| p.get("detail-type"))
        .and_then(Value::as_sequence)
        .ok_or_else(|| error(format!("{logical_id} has no EventPattern detail-type list")))?;
    let mut detail_types = list
        .iter()
        .map(|v| {
            v.as_str().map(str::to_string).ok_or_else(|| {
                error(format!(
                    "{logical_id}: detail-type entry {v:?} is not a string"
                ))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    detail_types.sort();
    Ok(detail_types)
}

/// The stack templates at the workspace root (`template-*.yaml`), sorted.
pub fn workspace_templates() -> Vec<PathBuf> {
    let root = crate::moto::workspace_root();
    let mut found: Vec<PathBuf> = std::fs::read_dir(&root)
        .map(|dir| {
            dir.filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("template-") && n.ends_with(".yaml"))
                })
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
pub(crate) mod tests {
    use super::*;

    const TEMPLATE: &str = r#"
Parameters:
  Stage: { Type: String, Default: test }
  Name: { Type: String, Default: "" }
Conditions:
  DefaultName: !Equals [!Ref Name, ""]
  Custom: !Not [!Condition DefaultName]
  Both: !And [!Condition DefaultName, !Equals [!Ref Stage, test]]
  Either: { "Fn::Or": [ { "Condition": "Custom" }, { "Fn::Equals": [x, y] } ] }
Resources:
  Table:
    Type: AWS::DynamoDB::Table
    Properties: { TableName: !Sub "t-${Stage}" }
  Queue:
    Type: AWS::SQS::Queue
    Condition: Custom
    Properties: { QueueName: q }
  Thing:
    Type: Other
    Properties:
      A: !GetAtt Table.Arn
      B: !Sub "${Table.Arn}/index/i"
      C: !If [DefaultName, !Sub "n-${Stage}", !Ref Name]
      D: !Join ["-", [a, !Ref Stage, { "Fn::Select": [1, !Split [",", "x,y"]] }]]
      E: [one, !Ref "AWS::NoValue", !If [Custom, two, !Ref "AWS::NoValue"]]
      F: !Sub ["${X}/${AWS::Region}", { X: !Ref Table }]
      G: !Ref Queue
"#;

    /// `TEMPLATE` as `file`, resolved with `params`.
    pub(crate) fn parsed(file: &str, text: &str, params: &[(&str, &str)]) -> StackTemplate {
        let params = params.iter().map(|(k, v)| (k.to_string(), v.to_string()));
        StackTemplate::parse(Path::new(file), text, params).unwrap()
    }

    fn template(file: &str, params: &[(&str, &str)]) -> StackTemplate {
        parsed(file, TEMPLATE, params)
    }

    fn prop(t: &StackTemplate, name: &str) -> Result<Option<Value>, LocalAwsError> {
        t.resolve(
            t.resource("Thing")
                .unwrap()
                .get("Properties")
                .unwrap()
                .get(name)
                .unwrap(),
        )
    }

    #[test]
    fn intrinsics_resolve_as_cloudformation_does() {
        let t = template("a.yaml", &[("AWS::Region", "eu-west-1")]);
        let s = |name| prop(&t, name).unwrap().unwrap();
        assert_eq!(
            s("A"),
            Value::String("arn:aws:dynamodb:eu-west-1:123456789012:table/t-test".into())
        );
        assert_eq!(
            s("B"),
            Value::String("arn:aws:dynamodb:eu-west-1:123456789012:table/t-test/index/i".into())
        );
        assert_eq!(s("C"), Value::String("n-test".into()));
        assert_eq!(s("D"), Value::String("a-test-y".into()));
        assert_eq!(s("E"), Value::Sequence(vec![Value::String("one".into())]));
        assert_eq!(s("F"), Value::String("t-test/eu-west-1".into()));
        assert!(t.condition("Both").unwrap());
        assert!(!t.condition("Either").unwrap());
        // The queue is not created while the condition is false: naming it is an error.
        assert!(prop(&t, "G").is_err());
        assert_eq!(
            t.arn_expression("arn:aws:dynamodb:eu-west-1:123456789012:table/t-test/index/i")
                .as_deref(),
            Some("!Sub \"${Table.Arn}/index/i\"")
        );
    }

    #[test]
    fn parameters_switch_conditions() {
        let t = template("b.yaml", &[("Name", "mine")]);
        assert_eq!(
            prop(&t, "C").unwrap().unwrap(),
            Value::String("mine".into())
        );
        assert_eq!(
            prop(&t, "G").unwrap().unwrap(),
            Value::String("https://sqs.us-east-1.amazonaws.com/123456789012/q".into())
        );
        assert!(!t.condition("Both").unwrap());
    }
}

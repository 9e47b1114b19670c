//! Reads our SAM templates the way CloudFormation would wire them, for the local
//! stack and the env-contract test: functions (binary, environment, event sources),
//! tables and queues, with a small evaluator for the intrinsics the templates use
//! (`Ref`, `GetAtt`, `Sub`, `If`, `Join`, `Select`/`Split` are not needed and refused).

use std::collections::BTreeMap;
use std::path::Path;

use serde_norway::Value;

/// A template that cannot be read or wired.
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    /// The file could not be read.
    #[error("cannot read template {path}: {source}")]
    Read {
        /// Path given.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
    /// Not valid YAML.
    #[error("template {path} is not valid YAML: {source}")]
    Yaml {
        /// Path given.
        path: String,
        /// Cause.
        source: serde_norway::Error,
    },
    /// A resource or property is not shaped as expected.
    #[error("template {0}")]
    Shape(String),
    /// An intrinsic the local evaluator cannot resolve.
    #[error("cannot resolve {0} locally")]
    Unresolvable(String),
}

/// A parsed template.
#[derive(Debug, Clone)]
pub struct Template {
    root: Value,
}

/// How an intrinsic reference resolves in a local run.
pub trait Resolver {
    /// `!Ref name`: a parameter, pseudo parameter or resource.
    fn reference(&self, name: &str) -> Option<String>;
    /// `!GetAtt resource.attribute`.
    fn attribute(&self, resource: &str, attribute: &str) -> Option<String>;
    /// Whether a template condition holds.
    fn condition(&self, name: &str) -> Option<bool>;
}

/// An event source of a function.
#[derive(Debug, Clone, PartialEq)]
pub enum EventSource {
    /// An SQS event-source mapping.
    Sqs {
        /// Logical id of the queue.
        queue: String,
        /// Batch size (default 10).
        batch_size: u32,
        /// Whether partial batch failures are reported.
        report_batch_item_failures: bool,
    },
    /// A schedule (`rate(N minutes)` or `rate(N hours)`), in minutes.
    Schedule {
        /// Period in minutes.
        every_minutes: u32,
    },
    /// An API Gateway route.
    Api {
        /// Path.
        path: String,
        /// Method.
        method: String,
    },
}

/// One `AWS::Serverless::Function`.
#[derive(Debug, Clone)]
pub struct FunctionSpec {
    /// Logical id.
    pub logical_id: String,
    /// The cargo-lambda binary (`Metadata.BuildProperties.Binary`).
    pub binary: String,
    /// Environment variables, unresolved.
    pub environment: BTreeMap<String, Value>,
    /// Event sources.
    pub events: Vec<EventSource>,
    /// The function's `Condition`, if any.
    pub condition: Option<String>,
    /// `Timeout` in seconds (the function's, else `Globals.Function`'s).
    pub timeout_secs: Option<u64>,
}

fn get<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    v.as_mapping()
        .and_then(|m| m.get(Value::String(key.to_string())))
}

fn intrinsic(v: &Value) -> Option<(String, &Value)> {
    match v {
        Value::Tagged(t) => Some((
            t.tag.to_string().trim_start_matches('!').to_string(),
            &t.value,
        )),
        Value::Mapping(m) if m.len() == 1 => {
            let (k, inner) = m.iter().next()?;
            let k = k.as_str()?;
            if k == "Ref" || k == "Condition" {
                Some((k.to_string(), inner))
            } else {
                k.strip_prefix("Fn::").map(|name| (name.to_string(), inner))
            }
        }
        _ => None,
    }
}

impl Template {
    /// Reads a template file.
    pub fn load(path: &Path) -> Result<Self, TemplateError> {
        let text = std::fs::read_to_string(path).map_err(|source| TemplateError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text).map_err(|e| match e {
            TemplateError::Yaml { source, .. } => TemplateError::Yaml {
                path: path.display().to_string(),
                source,
            },
            other => other,
        })
    }

    /// Parses template text.
    pub fn parse(text: &str) -> Result<Self, TemplateError> {
        let root: Value = serde_norway::from_str(text).map_err(|source| TemplateError::Yaml {
            path: "<text>".into(),
            source,
        })?;
        Ok(Template { root })
    }

    /// Logical ids and bodies of every resource of a type.
    pub fn resources_of_type(&self, ty: &str) -> Vec<(String, &Value)> {
        get(&self.root, "Resources")
            .and_then(Value::as_mapping)
            .map(|m| {
                m.iter()
                    .filter(|(_, r)| get(r, "Type").and_then(Value::as_str) == Some(ty))
                    .filter_map(|(k, r)| Some((k.as_str()?.to_string(), r)))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Every output: its name, `Value` and `Condition` (if any).
    pub fn outputs(&self) -> Vec<(String, &Value, Option<String>)> {
        get(&self.root, "Outputs")
            .and_then(Value::as_mapping)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, o)| {
                        let condition = get(o, "Condition")
                            .and_then(Value::as_str)
                            .map(str::to_string);
                        Some((k.as_str()?.to_string(), get(o, "Value")?, condition))
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// A resource's `Properties`.
    pub fn properties(&self, logical_id: &str) -> Option<&Value> {
        get(&self.root, "Resources")
            .and_then(|r| get(r, logical_id))
            .and_then(|r| get(r, "Properties"))
    }

    /// Parameter defaults (as text).
    pub fn parameter_defaults(&self) -> BTreeMap<String, String> {
        get(&self.root, "Parameters")
            .and_then(Value::as_mapping)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, p)| {
                        let d = get(p, "Default")?;
                        let text = match d {
                            Value::String(s) => s.clone(),
                            Value::Number(n) => n.to_string(),
                            Value::Bool(b) => b.to_string(),
                            _ => return None,
                        };
                        Some((k.as_str()?.to_string(), text))
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The template's conditions, unevaluated.
    pub fn conditions(&self) -> BTreeMap<String, Value> {
        get(&self.root, "Conditions")
            .and_then(Value::as_mapping)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.as_str()?.to_string(), v.clone())))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Every serverless function, with `Globals.Function.Environment` merged in.
    pub fn functions(&self) -> Result<Vec<FunctionSpec>, TemplateError> {
        let global_timeout = get(&self.root, "Globals")
            .and_then(|g| get(g, "Function"))
            .and_then(|f| get(f, "Timeout"))
            .and_then(Value::as_u64);
        let global_env = get(&self.root, "Globals")
            .and_then(|g| get(g, "Function"))
            .and_then(|f| get(f, "Environment"))
            .and_then(|e| get(e, "Variables"))
            .and_then(Value::as_mapping)
            .cloned()
            .unwrap_or_default();
        let mut out = Vec::new();
        for (id, res) in self.resources_of_type("AWS::Serverless::Function") {
            let props = get(res, "Properties")
                .ok_or_else(|| TemplateError::Shape(format!("function {id} has no Properties")))?;
            let binary = get(res, "Metadata")
                .and_then(|m| get(m, "BuildProperties"))
                .and_then(|b| get(b, "Binary"))
                .and_then(Value::as_str)
                .ok_or_else(|| {
                    TemplateError::Shape(format!(
                        "function {id} has no Metadata.BuildProperties.Binary"
                    ))
                })?
                .to_string();
            let mut environment = BTreeMap::new();
            for (k, v) in global_env.iter() {
                if let Some(k) = k.as_str() {
                    environment.insert(k.to_string(), v.clone());
                }
            }
            if let Some(vars) = get(props, "Environment")
                .and_then(|e| get(e, "Variables"))
                .and_then(Value::as_mapping)
            {
                for (k, v) in vars {
                    if let Some(k) = k.as_str() {
                        environment.insert(k.to_string(), v.clone());
                    }
                }
            }
            let events = get(props, "Events")
                .and_then(Value::as_mapping)
                .map(|m| m.values().filter_map(parse_event).collect())
                .unwrap_or_default();
            out.push(FunctionSpec {
                logical_id: id,
                binary,
                environment,
                events,
                condition: get(res, "Condition")
                    .and_then(Value::as_str)
                    .map(str::to_string),
                timeout_secs: get(props, "Timeout")
                    .and_then(Value::as_u64)
                    .or(global_timeout),
            });
        }
        Ok(out)
    }

    /// Resolves a property value to text with `resolver`.
    pub fn resolve(&self, value: &Value, resolver: &dyn Resolver) -> Result<String, TemplateError> {
        match value {
            Value::String(s) => Ok(s.clone()),
            Value::Number(n) => Ok(n.to_string()),
            Value::Bool(b) => Ok(b.to_string()),
            other => {
                let (name, inner) = intrinsic(other)
                    .ok_or_else(|| TemplateError::Unresolvable(format!("{other:?}")))?;
                match name.as_str() {
                    "Ref" => {
                        let target = inner.as_str().unwrap_or_default();
                        resolver
                            .reference(target)
                            .ok_or_else(|| TemplateError::Unresolvable(format!("!Ref {target}")))
                    }
                    "GetAtt" => {
                        let (res, attr) = match inner {
                            Value::String(s) => s
                                .split_once('.')
                                .map(|(a, b)| (a.to_string(), b.to_string())),
                            Value::Sequence(seq) if seq.len() == 2 => Some((
                                seq[0].as_str().unwrap_or_default().to_string(),
                                seq[1].as_str().unwrap_or_default().to_string(),
                            )),
                            _ => None,
                        }
                        .ok_or_else(|| TemplateError::Unresolvable(format!("!GetAtt {inner:?}")))?;
                        resolver.attribute(&res, &attr).ok_or_else(|| {
                            TemplateError::Unresolvable(format!("!GetAtt {res}.{attr}"))
                        })
                    }
                    "Sub" => {
                        let (text, vars) = match inner {
                            Value::String(s) => (s.clone(), None),
                            Value::Sequence(seq) if !seq.is_empty() => {
                                (seq[0].as_str().unwrap_or_default().to_string(), seq.get(1))
                            }
                            _ => {
                                return Err(TemplateError::Unresolvable(format!("!Sub {inner:?}")));
                            }
                        };
                        self.substitute(&text, vars, resolver)
                    }
                    "If" => {
                        let seq = inner
                            .as_sequence()
                            .filter(|s| s.len() == 3)
                            .ok_or_else(|| TemplateError::Unresolvable(format!("!If {inner:?}")))?;
                        let cond = seq[0].as_str().unwrap_or_default();
                        let holds = resolver.condition(cond).ok_or_else(|| {
                            TemplateError::Unresolvable(format!("condition {cond}"))
                        })?;
                        self.resolve(if holds { &seq[1] } else { &seq[2] }, resolver)
                    }
                    "Join" => {
                        let seq =
                            inner
                                .as_sequence()
                                .filter(|s| s.len() == 2)
                                .ok_or_else(|| {
                                    TemplateError::Unresolvable(format!("!Join {inner:?}"))
                                })?;
                        let sep = seq[0].as_str().unwrap_or_default();
                        let parts = seq[1]
                            .as_sequence()
                            .ok_or_else(|| TemplateError::Unresolvable(format!("!Join {inner:?}")))?
                            .iter()
                            .map(|p| self.resolve(p, resolver))
                            .collect::<Result<Vec<_>, _>>()?;
                        Ok(parts.join(sep))
                    }
                    other => Err(TemplateError::Unresolvable(format!("!{other}"))),
                }
            }
        }
    }

    /// Evaluates every condition (`Equals`, `Not`, `And`, `Or`, `Condition`) with
    /// `resolver` for the values they compare.
    pub fn evaluate_conditions(
        &self,
        resolver: &dyn Resolver,
    ) -> Result<BTreeMap<String, bool>, TemplateError> {
        let conditions = self.conditions();
        let mut done = BTreeMap::new();
        for name in conditions.keys() {
            self.evaluate_condition(name, &conditions, resolver, &mut done, 0)?;
        }
        Ok(done)
    }

    fn evaluate_condition(
        &self,
        name: &str,
        all: &BTreeMap<String, Value>,
        resolver: &dyn Resolver,
        done: &mut BTreeMap<String, bool>,
        depth: usize,
    ) -> Result<bool, TemplateError> {
        if let Some(v) = done.get(name) {
            return Ok(*v);
        }
        let body = all
            .get(name)
            .ok_or_else(|| TemplateError::Unresolvable(format!("condition {name}")))?;
        let value = self.condition_value(body, all, resolver, done, depth)?;
        done.insert(name.to_string(), value);
        Ok(value)
    }

    fn condition_value(
        &self,
        body: &Value,
        all: &BTreeMap<String, Value>,
        resolver: &dyn Resolver,
        done: &mut BTreeMap<String, bool>,
        depth: usize,
    ) -> Result<bool, TemplateError> {
        if depth > 16 {
            return Err(TemplateError::Shape("conditions nest too deeply".into()));
        }
        let (op, inner) = intrinsic(body)
            .ok_or_else(|| TemplateError::Unresolvable(format!("condition {body:?}")))?;
        let items = || {
            inner
                .as_sequence()
                .cloned()
                .ok_or_else(|| TemplateError::Unresolvable(format!("!{op} {inner:?}")))
        };
        match op.as_str() {
            "Equals" => {
                let seq = items()?;
                if seq.len() != 2 {
                    return Err(TemplateError::Unresolvable(format!("!Equals {inner:?}")));
                }
                Ok(self.resolve(&seq[0], resolver)? == self.resolve(&seq[1], resolver)?)
            }
            "Not" => {
                let seq = items()?;
                let first = seq
                    .first()
                    .ok_or_else(|| TemplateError::Unresolvable("!Not []".into()))?;
                Ok(!self.condition_value(first, all, resolver, done, depth + 1)?)
            }
            "And" | "Or" => {
                let mut values = Vec::new();
                for item in items()? {
                    values.push(self.condition_value(&item, all, resolver, done, depth + 1)?);
                }
                Ok(if op == "And" {
                    values.iter().all(|v| *v)
                } else {
                    values.iter().any(|v| *v)
                })
            }
            "Condition" => {
                let name = inner.as_str().unwrap_or_default().to_string();
                self.evaluate_condition(&name, all, resolver, done, depth + 1)
            }
            other => Err(TemplateError::Unresolvable(format!("condition !{other}"))),
        }
    }

    fn substitute(
        &self,
        text: &str,
        vars: Option<&Value>,
        resolver: &dyn Resolver,
    ) -> Result<String, TemplateError> {
        let mut out = String::new();
        let mut rest = text;
        while let Some(start) = rest.find("${") {
            out.push_str(&rest[..start]);
            let after = &rest[start + 2..];
            let end = after
                .find('}')
                .ok_or_else(|| TemplateError::Unresolvable(format!("!Sub {text:?}")))?;
            let name = &after[..end];
            let local = vars.and_then(|v| get(v, name));
            let value = match local {
                Some(v) => self.resolve(v, resolver)?,
                None => match name.split_once('.') {
                    Some((res, attr)) if !name.starts_with("AWS::") => resolver
                        .attribute(res, attr)
                        .ok_or_else(|| TemplateError::Unresolvable(format!("${{{name}}}")))?,
                    _ => resolver
                        .reference(name)
                        .ok_or_else(|| TemplateError::Unresolvable(format!("${{{name}}}")))?,
                },
            };
            out.push_str(&value);
            rest = &after[end + 1..];
        }
        out.push_str(rest);
        Ok(out)
    }
}

fn parse_event(ev: &Value) -> Option<EventSource> {
    let ty = get(ev, "Type")?.as_str()?;
    let props = get(ev, "Properties")?;
    match ty {
        "SQS" => {
            let queue = match get(props, "Queue")? {
                v => match intrinsic(v) {
                    Some((name, inner)) if name == "GetAtt" => match inner {
                        Value::String(s) => s.split('.').next()?.to_string(),
                        Value::Sequence(seq) => seq.first()?.as_str()?.to_string(),
                        _ => return None,
                    },
                    Some((name, inner)) if name == "Ref" => inner.as_str()?.to_string(),
                    _ => return None,
                },
            };
            let batch_size = get(props, "BatchSize")
                .and_then(Value::as_u64)
                .unwrap_or(10) as u32;
            let report_batch_item_failures = get(props, "FunctionResponseTypes")
                .and_then(Value::as_sequence)
                .is_some_and(|s| {
                    s.iter()
                        .any(|v| v.as_str() == Some("ReportBatchItemFailures"))
                });
            Some(EventSource::Sqs {
                queue,
                batch_size,
                report_batch_item_failures,
            })
        }
        "Schedule" | "ScheduleV2" => {
            let expr = get(props, "Schedule")
                .or_else(|| get(props, "ScheduleExpression"))?
                .as_str()?;
            parse_rate(expr).map(|every_minutes| EventSource::Schedule { every_minutes })
        }
        "Api" => Some(EventSource::Api {
            path: get(props, "Path")?.as_str()?.to_string(),
            method: get(props, "Method")?.as_str()?.to_uppercase(),
        }),
        _ => None,
    }
}

/// Parses `rate(N minute|minutes|hour|hours)` into minutes.
pub fn parse_rate(expr: &str) -> Option<u32> {
    let inner = expr.trim().strip_prefix("rate(")?.strip_suffix(')')?;
    let (n, unit) = inner.trim().split_once(' ')?;
    let n: u32 = n.parse().ok()?;
    match unit.trim() {
        "minute" | "minutes" => Some(n),
        "hour" | "hours" => Some(n * 60),
        "day" | "days" => Some(n * 24 * 60),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed;
    impl Resolver for Fixed {
        fn reference(&self, name: &str) -> Option<String> {
            match name {
                "ProductCode" => Some("prod123".into()),
                "AWS::Region" => Some("us-west-2".into()),
                "WorkQueue" => Some("http://q/work".into()),
                _ => None,
            }
        }
        fn attribute(&self, resource: &str, attribute: &str) -> Option<String> {
            (resource == "UsageTable" && attribute == "Arn").then(|| "arn:usage".into())
        }
        fn condition(&self, name: &str) -> Option<bool> {
            (name == "IsDryRun").then_some(true)
        }
    }

    const TEMPLATE: &str = r#"
Parameters:
  ProductCode: { Type: String, Default: abc }
  LockHours: { Type: Number, Default: 1 }
Globals:
  Function:
    Environment:
      Variables:
        PRODUCT_CODE: !Ref ProductCode
Resources:
  WorkQueue: { Type: AWS::SQS::Queue }
  Aggregator:
    Type: AWS::Serverless::Function
    Metadata: { BuildMethod: rust-cargolambda, BuildProperties: { Binary: aggregator } }
    Properties:
      Environment:
        Variables:
          USAGE_TABLE: !Sub "awsmp-${ProductCode}-usage"
          QUEUE: !Ref WorkQueue
          ARN: !GetAtt UsageTable.Arn
          MODE: !If [IsDryRun, dry-run, live]
      Events:
        Work:
          Type: SQS
          Properties:
            Queue: !GetAtt WorkQueue.Arn
            BatchSize: 5
            FunctionResponseTypes: [ReportBatchItemFailures]
        Tick:
          Type: Schedule
          Properties: { Schedule: rate(15 minutes) }
"#;

    #[test]
    fn reads_functions_with_globals_events_and_intrinsics() {
        let t = Template::parse(TEMPLATE).unwrap();
        let f = &t.functions().unwrap()[0];
        assert_eq!(f.binary, "aggregator");
        let env: BTreeMap<_, _> = f
            .environment
            .iter()
            .map(|(k, v)| (k.clone(), t.resolve(v, &Fixed).unwrap()))
            .collect();
        assert_eq!(env["PRODUCT_CODE"], "prod123");
        assert_eq!(env["USAGE_TABLE"], "awsmp-prod123-usage");
        assert_eq!(env["QUEUE"], "http://q/work");
        assert_eq!(env["ARN"], "arn:usage");
        assert_eq!(env["MODE"], "dry-run");
        assert!(f.events.contains(&EventSource::Sqs {
            queue: "WorkQueue".into(),
            batch_size: 5,
            report_batch_item_failures: true
        }));
        assert!(
            f.events
                .contains(&EventSource::Schedule { every_minutes: 15 })
        );
        assert_eq!(t.parameter_defaults()["LockHours"], "1");
    }

    #[test]
    fn unknown_references_are_reported_by_name() {
        let t = Template::parse("Resources: {}").unwrap();
        let v: Value = serde_norway::from_str("!Ref Missing").unwrap();
        let err = t.resolve(&v, &Fixed).unwrap_err();
        assert!(err.to_string().contains("!Ref Missing"));
    }

    #[test]
    fn conditions_evaluate_equals_not_and_or() {
        let t = Template::parse(
            r#"
Parameters:
  Mode: { Type: String, Default: direct-submit }
Conditions:
  IsDirect: !Equals [!Ref Mode, direct-submit]
  IsFull: !Not [!Condition IsDirect]
  Both: !And [!Condition IsDirect, !Equals [a, a]]
  Either: { "Fn::Or": [ { "Condition": "IsFull" }, { "Fn::Equals": [x, y] } ] }
Resources: {}
"#,
        )
        .unwrap();
        struct Params;
        impl Resolver for Params {
            fn reference(&self, name: &str) -> Option<String> {
                (name == "Mode").then(|| "direct-submit".into())
            }
            fn attribute(&self, _: &str, _: &str) -> Option<String> {
                None
            }
            fn condition(&self, _: &str) -> Option<bool> {
                None
            }
        }
        let c = t.evaluate_conditions(&Params).unwrap();
        assert!(c["IsDirect"]);
        assert!(!c["IsFull"]);
        assert!(c["Both"]);
        assert!(!c["Either"]);
    }

    #[test]
    fn rates() {
        assert_eq!(parse_rate("rate(5 minutes)"), Some(5));
        assert_eq!(parse_rate("rate(1 hour)"), Some(60));
        assert_eq!(parse_rate("cron(0 * * * ? *)"), None);
    }
}

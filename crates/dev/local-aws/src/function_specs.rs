//! The serverless functions of a template as SAM wires them: binary, environment
//! (with `Globals.Function` merged in), event sources, condition and timeout; read
//! through the one template reader ([`StackTemplate`]) by the local stack, the
//! env-contract test and the IAM checks.

use std::collections::BTreeMap;

use serde_norway::Value;

use crate::cfn::{StackTemplate, intrinsic};
use crate::error::LocalAwsError;

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
    /// A schedule (`rate(N minutes)`, `rate(N hours)` or `rate(N days)`), in minutes.
    Schedule {
        /// Period in minutes.
        every_minutes: u32,
    },
    /// A DynamoDB stream event-source mapping.
    DynamoDbStream {
        /// Logical id of the table whose stream it reads.
        table: String,
        /// Batch size (default 100).
        batch_size: u32,
        /// Whether partial batch failures are reported.
        report_batch_item_failures: bool,
        /// `FilterCriteria.Filters[].Pattern`, each a JSON event pattern; a record is
        /// delivered when any matches (all, when there are none).
        filters: Vec<String>,
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

fn variables(environment: Option<&Value>) -> impl Iterator<Item = (String, Value)> + '_ {
    environment
        .and_then(|e| e.get("Variables"))
        .and_then(Value::as_mapping)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.as_str()?.to_string(), v.clone())))
}

impl StackTemplate {
    /// Every serverless function, with `Globals.Function.Environment` merged in.
    pub fn functions(&self) -> Result<Vec<FunctionSpec>, LocalAwsError> {
        let globals = self.section("Globals").and_then(|g| g.get("Function"));
        let global_timeout = globals
            .and_then(|f| f.get("Timeout"))
            .and_then(Value::as_u64);
        let mut out = Vec::new();
        for (id, res) in self.resources_of_type("AWS::Serverless::Function") {
            let props = res
                .get("Properties")
                .ok_or_else(|| self.error(format!("function {id} has no Properties")))?;
            let binary = res
                .get("Metadata")
                .and_then(|m| m.get("BuildProperties"))
                .and_then(|b| b.get("Binary"))
                .and_then(Value::as_str)
                .ok_or_else(|| {
                    self.error(format!(
                        "function {id} has no Metadata.BuildProperties.Binary"
                    ))
                })?
                .to_string();
            let mut environment: BTreeMap<String, Value> =
                variables(globals.and_then(|f| f.get("Environment"))).collect();
            environment.extend(variables(props.get("Environment")));
            let events = props
                .get("Events")
                .and_then(Value::as_mapping)
                .map(|m| m.values().filter_map(parse_event).collect())
                .unwrap_or_default();
            out.push(FunctionSpec {
                logical_id: id,
                binary,
                environment,
                events,
                condition: res
                    .get("Condition")
                    .and_then(Value::as_str)
                    .map(str::to_string),
                timeout_secs: props
                    .get("Timeout")
                    .and_then(Value::as_u64)
                    .or(global_timeout),
            });
        }
        Ok(out)
    }

    /// The function whose binary (`Metadata.BuildProperties.Binary`) is `binary`.
    pub fn function(&self, binary: &str) -> Result<FunctionSpec, LocalAwsError> {
        self.functions()?
            .into_iter()
            .find(|f| f.binary == binary)
            .ok_or_else(|| self.error(format!("no function with binary {binary}")))
    }
}

fn parse_event(ev: &Value) -> Option<EventSource> {
    let ty = ev.get("Type")?.as_str()?;
    let props = ev.get("Properties")?;
    match ty {
        "SQS" => {
            let queue = match intrinsic(props.get("Queue")?)? {
                (name, Value::String(s)) if name == "GetAtt" => s.split('.').next()?.to_string(),
                (name, Value::Sequence(seq)) if name == "GetAtt" => {
                    seq.first()?.as_str()?.to_string()
                }
                (name, inner) if name == "Ref" => inner.as_str()?.to_string(),
                _ => return None,
            };
            let batch_size = props
                .get("BatchSize")
                .and_then(Value::as_u64)
                .and_then(|n| u32::try_from(n).ok())
                .unwrap_or(10);
            Some(EventSource::Sqs {
                queue,
                batch_size,
                report_batch_item_failures: reports_batch_item_failures(props),
            })
        }
        "DynamoDB" => {
            let table = match intrinsic(props.get("Stream")?)? {
                (name, Value::String(s)) if name == "GetAtt" => s.split('.').next()?.to_string(),
                (name, Value::Sequence(seq)) if name == "GetAtt" => {
                    seq.first()?.as_str()?.to_string()
                }
                _ => return None,
            };
            let filters = props
                .get("FilterCriteria")
                .and_then(|f| f.get("Filters"))
                .and_then(Value::as_sequence)
                .map(|filters| {
                    filters
                        .iter()
                        .filter_map(|f| f.get("Pattern")?.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default();
            Some(EventSource::DynamoDbStream {
                table,
                batch_size: props
                    .get("BatchSize")
                    .and_then(Value::as_u64)
                    .and_then(|n| u32::try_from(n).ok())
                    .unwrap_or(100),
                report_batch_item_failures: reports_batch_item_failures(props),
                filters,
            })
        }
        "Schedule" | "ScheduleV2" => {
            let expr = props
                .get("Schedule")
                .or_else(|| props.get("ScheduleExpression"))?
                .as_str()?;
            parse_rate(expr).map(|every_minutes| EventSource::Schedule { every_minutes })
        }
        "Api" => Some(EventSource::Api {
            path: props.get("Path")?.as_str()?.to_string(),
            method: props.get("Method")?.as_str()?.to_uppercase(),
        }),
        _ => None,
    }
}

/// Whether a mapping's `FunctionResponseTypes` asks for partial batch failures.
fn reports_batch_item_failures(props: &Value) -> bool {
    props
        .get("FunctionResponseTypes")
        .and_then(Value::as_sequence)
        .is_some_and(|s| {
            s.iter()
                .any(|v| v.as_str() == Some("ReportBatchItemFailures"))
        })
}

/// Parses `rate(N minute|minutes|hour|hours|day|days)` into minutes.
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
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    const TEMPLATE: &str = r#"
Parameters:
  ProductCode: { Type: String, Default: abc }
  LockHours: { Type: Number, Default: 1 }
Conditions:
  IsDryRun: !Equals [!Ref ProductCode, prod123]
Globals:
  Function:
    Environment:
      Variables:
        PRODUCT_CODE: !Ref ProductCode
Resources:
  WorkQueue: { Type: AWS::SQS::Queue, Properties: { QueueName: work } }
  UsageTable: { Type: AWS::DynamoDB::Table, Properties: { TableName: usage } }
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

    fn template(file: &str, params: &[(&str, &str)]) -> StackTemplate {
        crate::cfn::tests::parsed(file, TEMPLATE, params)
    }

    #[test]
    fn reads_functions_with_globals_events_and_bound_resources() {
        let mut t = template("a.yaml", &[("ProductCode", "prod123")]);
        t.bind("WorkQueue", "http://q/work", &[("Arn", "arn:work")]);
        t.bind("UsageTable", "usage", &[("Arn", "arn:usage")]);
        let f = t.function("aggregator").unwrap();
        let env: BTreeMap<_, _> = f
            .environment
            .iter()
            .map(|(k, v)| (k.clone(), t.string(v, k).unwrap()))
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
        assert_eq!(t.parameter("LockHours"), Some("1"));
    }

    #[test]
    fn unbound_references_are_reported_by_name() {
        let t = template("b.yaml", &[]).bound();
        let v: Value = serde_norway::from_str("!Ref Missing").unwrap();
        let err = t.string(&v, "test").unwrap_err();
        assert!(err.to_string().contains("Ref Missing"), "{err}");
    }

    #[test]
    fn rates() {
        assert_eq!(parse_rate("rate(5 minutes)"), Some(5));
        assert_eq!(parse_rate("rate(1 hour)"), Some(60));
        assert_eq!(parse_rate("cron(0 * * * ? *)"), None);
    }
}

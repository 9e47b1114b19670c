//! Recording the AWS calls a function really makes, and what IAM authorizes for each.
//!
//! [`CallLog::sdk_config`] gives a function an `SdkConfig` whose HTTP client files
//! every request under the function's name before sending it: each client its
//! `State::connect` builds on that config (DynamoDB in either Region, SQS, Marketplace
//! Metering) is recorded, exactly as the function wires it. A request is read as it
//! goes on the wire, after signing: the operation from the `X-Amz-Target` header (the
//! JSON protocols) or the path (`/service/<Service>/operation/<Op>`: the Agreement API's
//! RPC v2 CBOR), the Region from the SigV4 credential scope,
//! and the JSON body (`TableName`, `IndexName`, `TransactItems`, `QueueUrl`, ...). The
//! calls land in a shared [`CallLog`].
//!
//! [`RecordedCall::authorizations`] then turns each call into the requests IAM
//! evaluates, as AWS documents them:
//!
//! | call | IAM action | resource |
//! |---|---|---|
//! | DynamoDB item and table operations | `dynamodb:<Operation>` | `table/NAME` |
//! | `Query` / `Scan` with `IndexName` | `dynamodb:Query` / `dynamodb:Scan` | `table/NAME/index/INDEX` |
//! | `TransactWriteItems` | per item: `PutItem`, `UpdateItem`, `DeleteItem`, `ConditionCheckItem` | each item's table |
//! | `TransactGetItems` | per item: `GetItem` | each item's table |
//! | `BatchGetItem` / `BatchWriteItem` | the operation itself | each table named |
//! | SQS `*Batch` operations | the single-message action (`SendMessageBatch` -> `sqs:SendMessage`) | the queue ARN from `QueueUrl` |
//! | other SQS operations | `sqs:<Operation>` | the queue ARN |
//! | Marketplace Metering, the Agreement API | `aws-marketplace:<Operation>` | `*` (no resource-level permissions) |
//!
//! ARNs carry the Region the call was signed for, so a cross-Region table (the
//! subscribers table lives in us-east-1) is checked against its real ARN.

use std::sync::{Arc, Mutex, PoisonError};

use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpClient,
    SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::HttpRequest;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_types::SdkConfig;
use serde_json::Value;

/// Every call recorded in one log, in order, across functions.
#[derive(Debug, Clone, Default)]
pub struct CallLog {
    calls: Arc<Mutex<Vec<RecordedCall>>>,
}

impl CallLog {
    /// An empty log.
    pub fn new() -> Self {
        Self::default()
    }

    /// `sdk` with an HTTP client that files every request here under `function`, then
    /// sends it with `sdk`'s own client (the Lambdas' one where `sdk` names none).
    pub fn sdk_config(&self, sdk: &SdkConfig, function: &str) -> SdkConfig {
        let client = RecordingClient {
            inner: sdk
                .http_client()
                .unwrap_or_else(awsmp_lambda::sdk::https_client),
            function: function.to_string(),
            log: self.clone(),
        };
        sdk.to_builder()
            .http_client(SharedHttpClient::new(client))
            .build()
    }

    /// The calls so far.
    pub fn calls(&self) -> Vec<RecordedCall> {
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The calls so far of one function.
    pub fn calls_of(&self, function: &str) -> Vec<RecordedCall> {
        self.calls()
            .into_iter()
            .filter(|c| c.function == function)
            .collect()
    }

    fn push(&self, call: RecordedCall) {
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(call);
    }
}

/// One request as it went on the wire.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedCall {
    /// The function whose client sent it.
    pub function: String,
    /// The `X-Amz-Target` header (`DynamoDB_20120810.Query`), empty when absent.
    pub target: String,
    /// The Region the request was signed for.
    pub region: String,
    /// The JSON body (`Null` when it was not JSON).
    pub body: Value,
}

/// One request IAM evaluates: an action on a resource.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Authorization {
    /// `service:Action`.
    pub action: String,
    /// The resource ARN, or `*` for actions without resource-level permissions.
    pub resource: String,
    /// The `dynamodb:Attributes` condition key of a single `UpdateItem`: its key
    /// attributes and every attribute its expressions name (through
    /// `ExpressionAttributeNames`, which the adapters use for every name), sorted. Empty
    /// for every other request.
    pub attributes: Vec<String>,
    /// The `dynamodb:ReturnValues` condition key of a single `UpdateItem` (or
    /// `PutItem`, `DeleteItem`) that names `ReturnValues`; `None` when it does not.
    pub return_values: Option<String>,
    /// For a KMS request a service makes on the caller's behalf (DynamoDB decrypting a
    /// table key, SQS a queue's data key): that service (`dynamodb`, `sqs`), the
    /// `kms:ViaService` condition key's first part.
    pub via_service: Option<String>,
}

impl Authorization {
    /// A request naming no condition keys.
    pub fn new(action: impl Into<String>, resource: impl Into<String>) -> Self {
        Authorization {
            action: action.into(),
            resource: resource.into(),
            attributes: Vec::new(),
            return_values: None,
            via_service: None,
        }
    }

    /// A KMS request `service` makes on the caller's behalf.
    pub fn via(action: &str, key: &str, service: &str) -> Self {
        Authorization {
            via_service: Some(service.to_string()),
            ..Authorization::new(action, key)
        }
    }
}

/// A recorded call whose authorization cannot be derived.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// No `X-Amz-Target`, or a service this module does not know.
    #[error("{function}: cannot tell the operation of a request with X-Amz-Target {target:?}")]
    UnknownTarget {
        /// The function.
        function: String,
        /// The header.
        target: String,
    },
    /// The body lacks what the operation's authorization depends on.
    #[error("{function}: {operation} request without {field} (body {body})")]
    MissingField {
        /// The function.
        function: String,
        /// The operation.
        operation: String,
        /// The field.
        field: String,
        /// The body, abridged.
        body: String,
    },
    /// The request was signed for no Region.
    #[error("{function}: {operation} request has no signing Region")]
    NoRegion {
        /// The function.
        function: String,
        /// The operation.
        operation: String,
    },
}

impl RecordedCall {
    /// The operation of the target (`Query` for `DynamoDB_20120810.Query`).
    pub fn operation(&self) -> &str {
        self.target
            .rsplit_once('.')
            .map(|(_, op)| op)
            .unwrap_or_default()
    }

    /// The IAM requests this call is authorized by (see the module docs). `account`
    /// is the caller's account, used for DynamoDB ARNs; queue ARNs take the account in
    /// the queue URL.
    pub fn authorizations(&self, account: &str) -> Result<Vec<Authorization>, CallError> {
        let (prefix, operation) =
            self.target
                .rsplit_once('.')
                .ok_or_else(|| CallError::UnknownTarget {
                    function: self.function.clone(),
                    target: self.target.clone(),
                })?;
        if self.region.is_empty() {
            return Err(CallError::NoRegion {
                function: self.function.clone(),
                operation: operation.to_string(),
            });
        }
        match prefix {
            p if p.starts_with("DynamoDB_") => self.dynamodb(operation, account),
            "AmazonSQS" => self.sqs(operation),
            "AWSEvents" => self.events(operation, account),
            "AWSMPMeteringService" | "AWSMPCommerceService_v20200301" => {
                Ok(vec![Authorization::new(
                    format!("aws-marketplace:{operation}"),
                    "*",
                )])
            }
            _ => Err(CallError::UnknownTarget {
                function: self.function.clone(),
                target: self.target.clone(),
            }),
        }
    }

    fn missing(&self, operation: &str, field: &str) -> CallError {
        let body: String = self.body.to_string().chars().take(300).collect();
        CallError::MissingField {
            function: self.function.clone(),
            operation: operation.to_string(),
            field: field.to_string(),
            body,
        }
    }

    fn table_arn(&self, account: &str, table: &str) -> String {
        if table.starts_with("arn:") {
            table.to_string()
        } else {
            format!(
                "arn:{}:dynamodb:{}:{account}:table/{table}",
                partition(&self.region),
                self.region
            )
        }
    }

    fn dynamodb(&self, operation: &str, account: &str) -> Result<Vec<Authorization>, CallError> {
        let str_field = |value: &Value, field: &str| -> Result<String, CallError> {
            value
                .get(field)
                .and_then(Value::as_str)
                .map(str::to_string)
                .ok_or_else(|| self.missing(operation, field))
        };
        match operation {
            "TransactWriteItems" | "TransactGetItems" => {
                let items = self
                    .body
                    .get("TransactItems")
                    .and_then(Value::as_array)
                    .ok_or_else(|| self.missing(operation, "TransactItems"))?;
                let mut out = Vec::new();
                for item in items {
                    let (kind, inner) = item
                        .as_object()
                        .and_then(|m| m.iter().next())
                        .ok_or_else(|| self.missing(operation, "TransactItems[].<kind>"))?;
                    let action = match kind.as_str() {
                        "Put" => "PutItem",
                        "Update" => "UpdateItem",
                        "Delete" => "DeleteItem",
                        "ConditionCheck" => "ConditionCheckItem",
                        "Get" => "GetItem",
                        _ => return Err(self.missing(operation, "a known TransactItems kind")),
                    };
                    let table = str_field(inner, "TableName")?;
                    out.push(Authorization::new(
                        format!("dynamodb:{action}"),
                        self.table_arn(account, &table),
                    ));
                }
                Ok(out)
            }
            "BatchGetItem" | "BatchWriteItem" => {
                let tables = self
                    .body
                    .get("RequestItems")
                    .and_then(Value::as_object)
                    .ok_or_else(|| self.missing(operation, "RequestItems"))?;
                Ok(tables
                    .keys()
                    .map(|table| {
                        Authorization::new(
                            format!("dynamodb:{operation}"),
                            self.table_arn(account, table),
                        )
                    })
                    .collect())
            }
            _ => {
                let table = str_field(&self.body, "TableName")?;
                let mut resource = self.table_arn(account, &table);
                if matches!(operation, "Query" | "Scan")
                    && let Some(index) = self.body.get("IndexName").and_then(Value::as_str)
                {
                    resource = format!("{resource}/index/{index}");
                }
                let mut request = Authorization::new(format!("dynamodb:{operation}"), resource);
                if operation == "UpdateItem" {
                    let names = |field: &str| -> Vec<String> {
                        self.body
                            .get(field)
                            .and_then(Value::as_object)
                            .map(|m| match field {
                                "Key" => m.keys().cloned().collect(),
                                _ => m
                                    .values()
                                    .filter_map(Value::as_str)
                                    .map(str::to_string)
                                    .collect(),
                            })
                            .unwrap_or_default()
                    };
                    let mut attributes = names("Key");
                    attributes.extend(names("ExpressionAttributeNames"));
                    attributes.sort();
                    attributes.dedup();
                    request.attributes = attributes;
                }
                if matches!(operation, "UpdateItem" | "PutItem" | "DeleteItem") {
                    request.return_values = self
                        .body
                        .get("ReturnValues")
                        .and_then(Value::as_str)
                        .map(str::to_string);
                }
                Ok(vec![request])
            }
        }
    }

    fn sqs(&self, operation: &str) -> Result<Vec<Authorization>, CallError> {
        let action = match operation {
            "SendMessageBatch" => "SendMessage",
            "DeleteMessageBatch" => "DeleteMessage",
            "ChangeMessageVisibilityBatch" => "ChangeMessageVisibility",
            other => other,
        };
        if operation == "ListQueues" {
            return Ok(vec![Authorization::new("sqs:ListQueues", "*")]);
        }
        let resource = if operation == "GetQueueUrl" {
            let name = self
                .body
                .get("QueueName")
                .and_then(Value::as_str)
                .ok_or_else(|| self.missing(operation, "QueueName"))?;
            let owner = self
                .body
                .get("QueueOwnerAWSAccountId")
                .and_then(Value::as_str)
                .unwrap_or("*");
            self.queue_arn(owner, name)
        } else {
            let url = self
                .body
                .get("QueueUrl")
                .and_then(Value::as_str)
                .ok_or_else(|| self.missing(operation, "QueueUrl"))?;
            // https://sqs.<region>.amazonaws.com/<account>/<name> (emulators keep the path).
            let mut segments = url.trim_end_matches('/').rsplit('/');
            match (segments.next(), segments.next()) {
                (Some(name), Some(owner)) if !name.is_empty() && !owner.is_empty() => {
                    self.queue_arn(owner, name)
                }
                _ => return Err(self.missing(operation, "a QueueUrl ending /<account>/<name>")),
            }
        };
        Ok(vec![Authorization::new(format!("sqs:{action}"), resource)])
    }

    /// `PutEvents`: one `events:PutEvents` per bus its entries name (the default bus
    /// when an entry names none).
    fn events(&self, operation: &str, account: &str) -> Result<Vec<Authorization>, CallError> {
        if operation != "PutEvents" {
            return Err(CallError::UnknownTarget {
                function: self.function.clone(),
                target: self.target.clone(),
            });
        }
        let entries = self
            .body
            .get("Entries")
            .and_then(Value::as_array)
            .ok_or_else(|| self.missing(operation, "Entries"))?;
        let mut buses: Vec<String> = entries
            .iter()
            .map(|e| {
                let bus = e
                    .get("EventBusName")
                    .and_then(Value::as_str)
                    .unwrap_or("default");
                if bus.starts_with("arn:") {
                    bus.to_string()
                } else {
                    format!(
                        "arn:{}:events:{}:{account}:event-bus/{bus}",
                        partition(&self.region),
                        self.region
                    )
                }
            })
            .collect();
        buses.sort();
        buses.dedup();
        Ok(buses
            .into_iter()
            .map(|bus| Authorization::new("events:PutEvents", bus))
            .collect())
    }

    fn queue_arn(&self, owner: &str, name: &str) -> String {
        format!(
            "arn:{}:sqs:{}:{owner}:{name}",
            partition(&self.region),
            self.region
        )
    }
}

/// The partition of a Region.
fn partition(region: &str) -> &'static str {
    if region.starts_with("cn-") {
        "aws-cn"
    } else if region.starts_with("us-gov-") {
        "aws-us-gov"
    } else {
        "aws"
    }
}

/// The Region of a SigV4 `Authorization` header's credential scope
/// (`Credential=AKID/20261130/us-east-1/dynamodb/aws4_request`).
fn signing_region(authorization: &str) -> Option<String> {
    let scope = authorization.split("Credential=").nth(1)?;
    let scope = scope.split([',', ' ']).next()?;
    scope.split('/').nth(2).map(str::to_string)
}

/// The recording HTTP client of one function: it hands out connectors that file each
/// request in the log, then pass it on. It never fails a request.
#[derive(Debug, Clone)]
struct RecordingClient {
    inner: SharedHttpClient,
    function: String,
    log: CallLog,
}

impl HttpClient for RecordingClient {
    fn http_connector(
        &self,
        settings: &HttpConnectorSettings,
        components: &RuntimeComponents,
    ) -> SharedHttpConnector {
        SharedHttpConnector::new(RecordingConnector {
            inner: self.inner.http_connector(settings, components),
            client: self.clone(),
        })
    }
}

#[derive(Debug)]
struct RecordingConnector {
    inner: SharedHttpConnector,
    client: RecordingClient,
}

/// The target of a Smithy RPC v2 CBOR request (`POST /service/<Service>/operation/<Op>`,
/// the Agreement API through the Rust SDK, which sends no `X-Amz-Target`), as
/// `<Service>.<Op>`.
fn rpc_v2_target(uri: &str) -> Option<String> {
    let path = uri.split_once("/service/")?.1;
    let (service, operation) = path.split_once("/operation/")?;
    let operation = operation.split(['?', '/']).next()?;
    Some(format!("{service}.{operation}"))
}

impl HttpConnector for RecordingConnector {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let headers = request.headers();
        let body = request
            .body()
            .bytes()
            .and_then(|bytes| serde_json::from_slice(bytes).ok())
            .unwrap_or(Value::Null);
        let target = headers
            .get("x-amz-target")
            .map(str::to_string)
            .or_else(|| rpc_v2_target(request.uri()))
            .unwrap_or_default();
        self.client.log.push(RecordedCall {
            function: self.client.function.clone(),
            target,
            region: headers
                .get("authorization")
                .and_then(signing_region)
                .unwrap_or_default(),
            body,
        });
        self.inner.call(request)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(target: &str, region: &str, body: Value) -> RecordedCall {
        RecordedCall {
            function: "f".into(),
            target: target.into(),
            region: region.into(),
            body,
        }
    }

    fn auths(c: &RecordedCall) -> Vec<(String, String)> {
        c.authorizations("123456789012")
            .unwrap()
            .into_iter()
            .map(|a| (a.action, a.resource))
            .collect()
    }

    #[test]
    fn an_rpc_v2_request_is_read_from_its_path_and_authorized_as_its_operation() {
        let target = rpc_v2_target(
            "https://agreement-marketplace.us-east-1.amazonaws.com/service/AWSMPCommerceService_v20200301/operation/SearchAgreements",
        )
        .unwrap();
        assert_eq!(target, "AWSMPCommerceService_v20200301.SearchAgreements");
        assert_eq!(
            auths(&call(&target, "us-east-1", Value::Null)),
            vec![("aws-marketplace:SearchAgreements".into(), "*".into())]
        );
        assert_eq!(rpc_v2_target("http://localhost:4566/"), None);
    }

    #[test]
    fn index_queries_are_authorized_on_the_index_arn() {
        let q = call(
            "DynamoDB_20120810.Query",
            "us-east-1",
            json!({"TableName": "subs", "IndexName": "deprovisioning"}),
        );
        assert_eq!(
            auths(&q),
            [(
                "dynamodb:Query".to_string(),
                "arn:aws:dynamodb:us-east-1:123456789012:table/subs/index/deprovisioning"
                    .to_string()
            )]
        );
        let get = call(
            "DynamoDB_20120810.GetItem",
            "eu-west-1",
            json!({"TableName": "usage", "IndexName": "ignored"}),
        );
        assert_eq!(
            auths(&get)[0].1,
            "arn:aws:dynamodb:eu-west-1:123456789012:table/usage"
        );
    }

    #[test]
    fn transactions_are_authorized_per_item() {
        let t = call(
            "DynamoDB_20120810.TransactWriteItems",
            "eu-west-1",
            json!({"TransactItems": [
                {"Put": {"TableName": "agg"}},
                {"Update": {"TableName": "usage"}},
                {"ConditionCheck": {"TableName": "agg"}},
                {"Delete": {"TableName": "usage"}},
            ]}),
        );
        let actions: Vec<String> = auths(&t).into_iter().map(|(a, _)| a).collect();
        assert_eq!(
            actions,
            [
                "dynamodb:PutItem",
                "dynamodb:UpdateItem",
                "dynamodb:ConditionCheckItem",
                "dynamodb:DeleteItem"
            ]
        );
        assert!(
            call(
                "DynamoDB_20120810.TransactWriteItems",
                "eu-west-1",
                json!({})
            )
            .authorizations("1")
            .is_err()
        );
    }

    #[test]
    fn sqs_batches_use_the_single_message_action_on_the_queue_arn() {
        let c = call(
            "AmazonSQS.SendMessageBatch",
            "eu-west-1",
            json!({"QueueUrl": "http://127.0.0.1:5000/123456789012/work"}),
        );
        assert_eq!(
            auths(&c),
            [(
                "sqs:SendMessage".to_string(),
                "arn:aws:sqs:eu-west-1:123456789012:work".to_string()
            )]
        );
    }

    #[test]
    fn marketplace_actions_have_no_resource() {
        let c = call(
            "AWSMPMeteringService.BatchMeterUsage",
            "eu-west-1",
            json!({}),
        );
        assert_eq!(
            auths(&c),
            [(
                "aws-marketplace:BatchMeterUsage".to_string(),
                "*".to_string()
            )]
        );
        assert!(
            call("Unknown.Op", "eu-west-1", json!({}))
                .authorizations("1")
                .is_err()
        );
        assert!(
            call("", "eu-west-1", json!({}))
                .authorizations("1")
                .is_err()
        );
    }

    #[test]
    fn the_region_comes_from_the_credential_scope() {
        let header = "AWS4-HMAC-SHA256 Credential=testing/20261130/eu-west-1/dynamodb/aws4_request, SignedHeaders=host, Signature=abc";
        assert_eq!(signing_region(header).as_deref(), Some("eu-west-1"));
        assert_eq!(signing_region("Bearer x"), None);
    }
}

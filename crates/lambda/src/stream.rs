//! The DynamoDB stream event Lambda's event-source mapping delivers (the documented
//! JSON: `Records[].eventID`, `eventName`, `eventSourceARN`, `dynamodb.SequenceNumber`,
//! `NewImage`, `OldImage` in DynamoDB's attribute-value JSON), read into
//! [`awsmp_core::outcomes::Change`]s, and the partial batch response naming the
//! changes to deliver again: shared by every stream function (outcome-events,
//! buyer-events).

use std::collections::BTreeMap;

use aws_lambda_events::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use awsmp_core::model::Attr;
use awsmp_core::outcomes::Change;
use serde::Deserialize;
use serde_json::Value;

/// The event: its records, in stream order.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct StreamEvent {
    /// `Records`.
    #[serde(rename = "Records", default)]
    pub records: Vec<StreamRecord>,
}

/// One stream record.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct StreamRecord {
    /// `eventID`: the same on every delivery of this change.
    #[serde(rename = "eventID")]
    pub event_id: String,
    /// `eventName`: `INSERT`, `MODIFY` or `REMOVE`.
    #[serde(rename = "eventName", default)]
    pub event_name: String,
    /// `eventSourceARN`: the table's stream.
    #[serde(rename = "eventSourceARN", default)]
    pub event_source_arn: String,
    /// `dynamodb`.
    pub dynamodb: StreamChange,
}

/// The change itself.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct StreamChange {
    /// `SequenceNumber`: what a batch item failure names.
    #[serde(rename = "SequenceNumber")]
    pub sequence_number: String,
    /// `NewImage` (absent for `REMOVE`).
    #[serde(rename = "NewImage", default)]
    pub new_image: Option<serde_json::Map<String, Value>>,
    /// `OldImage` (absent for `INSERT`).
    #[serde(rename = "OldImage", default)]
    pub old_image: Option<serde_json::Map<String, Value>>,
}

impl StreamRecord {
    /// The change as the domain reads it.
    pub fn change(&self) -> Change {
        let image = |image: &Option<serde_json::Map<String, Value>>| {
            image.as_ref().map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), dynamodb_attr(v)))
                    .collect::<BTreeMap<_, _>>()
            })
        };
        Change {
            change_id: self.event_id.clone(),
            position: self.dynamodb.sequence_number.clone(),
            old: image(&self.dynamodb.old_image),
            new: image(&self.dynamodb.new_image),
        }
    }
}

/// One attribute value in DynamoDB's JSON (`{"S": "..."}`, `{"N": "5"}`, ...).
pub fn dynamodb_attr(value: &Value) -> Attr {
    let Some((kind, inner)) = value.as_object().and_then(|o| o.iter().next()) else {
        return Attr::Other("not an attribute value".to_string());
    };
    match (kind.as_str(), inner) {
        ("S", Value::String(s)) => Attr::S(s.clone()),
        ("N", Value::String(n)) => Attr::N(n.clone()),
        ("BOOL", Value::Bool(b)) => Attr::Bool(*b),
        ("NULL", _) => Attr::Null,
        ("L", Value::Array(items)) => Attr::L(items.iter().map(dynamodb_attr).collect()),
        ("M", Value::Object(map)) => Attr::M(
            map.iter()
                .map(|(k, v)| (k.clone(), dynamodb_attr(v)))
                .collect(),
        ),
        ("SS", Value::Array(items)) => Attr::Ss(
            items
                .iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect(),
        ),
        (other, _) => Attr::Other(other.to_string()),
    }
}

/// One attribute in DynamoDB's JSON, as a stream record carries it: the inverse of
/// [`dynamodb_attr`] (an attribute of a type the domain does not read, `Other`, is
/// written as that type with an empty value).
pub fn dynamodb_json(attr: &Attr) -> Value {
    let (kind, inner) = match attr {
        Attr::S(s) => ("S", Value::String(s.clone())),
        Attr::N(n) => ("N", Value::String(n.clone())),
        Attr::Bool(b) => ("BOOL", Value::Bool(*b)),
        Attr::Null => ("NULL", Value::Bool(true)),
        Attr::L(items) => ("L", Value::Array(items.iter().map(dynamodb_json).collect())),
        Attr::M(map) => (
            "M",
            Value::Object(
                map.iter()
                    .map(|(k, v)| (k.clone(), dynamodb_json(v)))
                    .collect(),
            ),
        ),
        Attr::Ss(items) => (
            "SS",
            Value::Array(items.iter().cloned().map(Value::String).collect()),
        ),
        Attr::Other(kind) => (kind.as_str(), Value::String(String::new())),
    };
    Value::Object(std::iter::once((kind.to_string(), inner)).collect())
}

/// An item's image in DynamoDB's JSON (`NewImage`, `OldImage`).
pub fn dynamodb_image(item: &BTreeMap<String, Attr>) -> serde_json::Map<String, Value> {
    item.iter()
        .map(|(k, v)| (k.clone(), dynamodb_json(v)))
        .collect()
}

/// The table name in a stream ARN (`arn:aws:dynamodb:REGION:ACCOUNT:table/NAME/stream/LABEL`).
pub fn table_name_of(stream_arn: &str) -> Option<&str> {
    let resource = stream_arn.splitn(6, ':').nth(5)?;
    let mut parts = resource.split('/');
    (parts.next()? == "table").then_some(())?;
    parts.next()
}

/// The partial batch response naming `failed` (sequence numbers): Lambda checkpoints
/// before the lowest and delivers it and everything after it in the shard again.
pub fn batch_response(failed: Vec<String>) -> DynamoDbEventResponse {
    let mut response = DynamoDbEventResponse::default();
    response.batch_item_failures = failed
        .into_iter()
        .map(|position| {
            let mut failure = DynamoDbBatchItemFailure::default();
            failure.item_identifier = Some(position);
            failure
        })
        .collect();
    response
}

/// The names of the changes a partial batch response asks to be delivered again.
pub fn failed_positions(response: &DynamoDbEventResponse) -> Vec<&str> {
    response
        .batch_item_failures
        .iter()
        .filter_map(|f| f.item_identifier.as_deref())
        .collect()
}

//! Reading a `POST /usage/events` body: the envelope (media type, size, event count,
//! JSON shape), each event's fields as far as they parse, and why an event or the
//! whole envelope cannot be taken. Two shapes carry the same fields:
//!
//! - `application/json`: `{"events": [{"id", "licenseArn", "customerAWSAccountId",
//!   "dimension", "quantity", "timestamp"?, "tags"? | "usageAllocations"?}, ...]}`;
//! - `application/cloudevents-batch+json`: a JSON array of CloudEvents 1.0, the usage
//!   fields in `data`, the event's `time` as its timestamp; its `source` and `id`
//!   together are its idempotency key, as CloudEvents makes them unique
//!   ([`PostedEvent::key`]): two producers may both number their events 1, 2, ...

use chrono::{DateTime, SubsecRound, Utc};
use serde_json::{Map, Value};

use crate::guardrails::quantity_of_json;
use crate::guardrails::write::check_caller_event_id;
use crate::items::ingestion::cloudevents_event_key;
use crate::model::{Allocation, ReasonCode, Tag};
use crate::ports::NewUsageRow;
use crate::time::{Instant, parse_usage_timestamp};

use super::{MAX_BODY_BYTES, MAX_EVENTS};

/// The body's media type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MediaType {
    /// `application/json`: `{"events": [...]}`.
    Json,
    /// `application/cloudevents-batch+json`: `[CloudEvent, ...]`.
    CloudEventsBatch,
}

/// The `Content-Type` of the native shape.
pub const JSON: &str = "application/json";
/// The `Content-Type` of a CloudEvents 1.0 batch (JSON batch format).
pub const CLOUDEVENTS_BATCH: &str = "application/cloudevents-batch+json";

impl MediaType {
    /// The media type a `Content-Type` header names (parameters such as `charset`
    /// ignored, case-insensitive).
    pub fn of(content_type: Option<&str>) -> Result<MediaType, EnvelopeError> {
        let given = content_type.unwrap_or("").trim();
        let essence = given
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        match essence.as_str() {
            JSON => Ok(MediaType::Json),
            CLOUDEVENTS_BATCH => Ok(MediaType::CloudEventsBatch),
            _ => Err(EnvelopeError::MediaType(given.to_string())),
        }
    }
}

/// Why a whole envelope is refused (nothing in it was written).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvelopeError {
    /// Not JSON, or not the shape its media type says.
    #[error("{0}")]
    Malformed(String),
    /// A body over [`MAX_BODY_BYTES`].
    #[error(
        "the body is {0} bytes; a batch carries at most {MAX_BODY_BYTES} bytes (1 MB): split it into smaller batches"
    )]
    TooLarge(usize),
    /// More than [`MAX_EVENTS`] events.
    #[error(
        "the batch holds {0} events; a batch carries at most {MAX_EVENTS}: split it into smaller batches"
    )]
    TooManyEvents(usize),
    /// A `Content-Type` the API does not read.
    #[error(
        "Content-Type {0:?} is not read here: send {JSON} ({{\"events\": [...]}}) or {CLOUDEVENTS_BATCH} (a JSON array of CloudEvents 1.0)"
    )]
    MediaType(String),
}

impl EnvelopeError {
    /// The HTTP status the envelope gets: 400, 413 or 415.
    pub fn status(&self) -> u16 {
        match self {
            EnvelopeError::Malformed(_) => 400,
            EnvelopeError::TooLarge(_) | EnvelopeError::TooManyEvents(_) => 413,
            EnvelopeError::MediaType(_) => 415,
        }
    }

    /// The machine-readable code of the answer.
    pub fn code(&self) -> &'static str {
        match self {
            EnvelopeError::Malformed(_) => "MalformedBatch",
            EnvelopeError::TooLarge(_) => "BatchTooLarge",
            EnvelopeError::TooManyEvents(_) => "TooManyEvents",
            EnvelopeError::MediaType(_) => "UnsupportedMediaType",
        }
    }
}

/// Why one event of a batch is refused: a reason code (one of the aggregator's, or
/// `MissingId` / `MissingSource` / `MalformedEvent` / `Unwritable` for what only an API
/// request can get wrong) and what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventRefusal {
    /// The reason code.
    pub reason: String,
    /// What is wrong and what to do.
    pub message: String,
    /// The aggregator's reason code, when it is one.
    pub code: Option<ReasonCode>,
}

impl EventRefusal {
    /// The refusal the aggregator would give, with its remedy.
    pub fn rejected(code: ReasonCode) -> Self {
        EventRefusal {
            reason: code.to_string(),
            message: crate::remedy::for_reason(code).to_string(),
            code: Some(code),
        }
    }

    /// An event whose JSON is not the documented shape.
    pub fn malformed(message: impl Into<String>) -> Self {
        EventRefusal {
            reason: "MalformedEvent".into(),
            message: message.into(),
            code: None,
        }
    }

    /// An event that cannot be stored at all (a `#` in a key part, an item too large).
    pub fn unwritable(message: impl Into<String>) -> Self {
        EventRefusal {
            reason: "Unwritable".into(),
            message: message.into(),
            code: None,
        }
    }

    fn missing_id() -> Self {
        EventRefusal {
            reason: "MissingId".into(),
            message: "every event needs an id: a non-empty string your service already has for the event (a request or message id), the same on every retry".into(),
            code: None,
        }
    }
}

/// One event's usage as posted (before the aggregator's checks).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostedUsage {
    /// `licenseArn`.
    pub license_arn: String,
    /// `customerAWSAccountId`.
    pub account: String,
    /// `dimension`.
    pub dimension: String,
    /// `quantity`.
    pub quantity: i64,
    /// `timestamp` (`time` of a CloudEvent), whole seconds; `None`: when received.
    pub timestamp: Option<Instant>,
    /// `tags` or `usageAllocations`.
    pub allocations: Option<Vec<Allocation>>,
}

impl PostedUsage {
    /// The row this usage becomes under event key `id` ([`PostedEvent::key`]), received
    /// at `now`.
    pub fn to_row(&self, id: &str, now: Instant) -> NewUsageRow {
        NewUsageRow {
            license_arn: self.license_arn.clone(),
            customer_aws_account_id: self.account.clone(),
            dimension: self.dimension.clone(),
            timestamp: self.timestamp.unwrap_or_else(|| now.trunc_subsecs(0)),
            quantity: self.quantity,
            allocations: self.allocations.clone(),
            product_code: None,
            event_id: id.to_string(),
            timestamp_defaulted: self.timestamp.is_none(),
        }
    }
}

/// One event of a batch, parsed as far as it goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostedEvent {
    /// Its `id`, when it has a usable one.
    pub id: Option<String>,
    /// A CloudEvent's `source` (`None` in the native JSON format).
    pub source: Option<String>,
    /// Its usage, or why it is refused.
    pub usage: Result<PostedUsage, EventRefusal>,
}

impl PostedEvent {
    /// The event's idempotency key, the event id its row and marker are stored under:
    /// the native format's `id` as sent; a CloudEvent's `source` and `id` together
    /// ([`event_key`]). `None` without an id.
    pub fn key(&self) -> Option<String> {
        let id = self.id.as_deref()?;
        Some(event_key(self.source.as_deref(), id))
    }
}

/// The idempotency key of event `id` (of CloudEvents `source`, when it is one): what
/// `POST /usage/events` stores it under and `GET /usage/events/{id}?source=` reads.
pub fn event_key(source: Option<&str>, id: &str) -> String {
    match source {
        None => id.to_string(),
        Some(source) => cloudevents_event_key(source, id),
    }
}

/// The usage fields of the native shape, besides `id` (all of them may sit in a
/// CloudEvent's `data`, apart from `timestamp`, which is the CloudEvent's `time`).
const USAGE_FIELDS: &[&str] = &[
    "licenseArn",
    "customerAWSAccountId",
    "dimension",
    "quantity",
    "tags",
    "usageAllocations",
];

/// The CloudEvents 1.0 context attributes a batch element may carry besides `data`.
const CLOUDEVENT_ATTRIBUTES: &[&str] = &[
    "specversion",
    "id",
    "source",
    "type",
    "time",
    "subject",
    "datacontenttype",
    "dataschema",
];

/// Reads a whole body of `media` type: every event, parsed as far as it goes, or why
/// the envelope itself is refused.
pub fn parse_batch(media: MediaType, body: &[u8]) -> Result<Vec<PostedEvent>, EnvelopeError> {
    if body.len() > MAX_BODY_BYTES {
        return Err(EnvelopeError::TooLarge(body.len()));
    }
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| EnvelopeError::Malformed(format!("the body is not JSON: {e}")))?;
    let list = match (media, value) {
        (MediaType::Json, Value::Object(mut envelope)) => {
            let events = envelope.remove("events");
            if let Some(other) = envelope.keys().next() {
                return Err(EnvelopeError::Malformed(format!(
                    "unknown field {other:?}: the body is {{\"events\": [...]}}"
                )));
            }
            match events {
                Some(Value::Array(list)) => list,
                _ => {
                    return Err(EnvelopeError::Malformed(
                        "the body is {\"events\": [...]}: an object whose events field is an array of events".into(),
                    ));
                }
            }
        }
        (MediaType::Json, _) => {
            return Err(EnvelopeError::Malformed(
                "the body is {\"events\": [...]}: an object whose events field is an array of events (a bare array is the CloudEvents batch, sent as application/cloudevents-batch+json)".into(),
            ));
        }
        (MediaType::CloudEventsBatch, Value::Array(list)) => list,
        (MediaType::CloudEventsBatch, _) => {
            return Err(EnvelopeError::Malformed(
                "a CloudEvents batch is a JSON array of CloudEvents".into(),
            ));
        }
    };
    if list.is_empty() {
        return Err(EnvelopeError::Malformed(
            "the batch holds no event: send 1 to 100".into(),
        ));
    }
    if list.len() > MAX_EVENTS {
        return Err(EnvelopeError::TooManyEvents(list.len()));
    }
    Ok(list
        .into_iter()
        .map(|event| match media {
            MediaType::Json => native_event(event),
            MediaType::CloudEventsBatch => cloud_event(event),
        })
        .collect())
}

fn id_of(value: Option<&Value>) -> Option<String> {
    match value {
        Some(Value::String(id)) if !id.trim().is_empty() => Some(id.clone()),
        _ => None,
    }
}

fn native_event(event: Value) -> PostedEvent {
    let Value::Object(fields) = event else {
        return PostedEvent {
            id: None,
            source: None,
            usage: Err(EventRefusal::malformed(
                "an event is a JSON object of id, licenseArn, customerAWSAccountId, dimension, quantity and optional timestamp, tags or usageAllocations",
            )),
        };
    };
    let id = id_of(fields.get("id"));
    let usage = match &id {
        None => Err(EventRefusal::missing_id()),
        // A `#` is the CloudEvents keys' mark: no native id may hold one.
        Some(id) => check_caller_event_id(id)
            .map_err(|e| EventRefusal::unwritable(e.to_string()))
            .and_then(|()| known_fields(&fields, &["id", "timestamp"], "an event"))
            .and_then(|()| timestamp_of(fields.get("timestamp"), "timestamp"))
            .and_then(|timestamp| usage_of(&fields, timestamp)),
    };
    PostedEvent {
        id,
        source: None,
        usage,
    }
}

fn cloud_event(event: Value) -> PostedEvent {
    let Value::Object(attributes) = event else {
        return PostedEvent {
            id: None,
            source: None,
            usage: Err(EventRefusal::malformed(
                "a CloudEvents batch holds CloudEvent objects",
            )),
        };
    };
    let id = id_of(attributes.get("id"));
    let source = id_of(attributes.get("source"));
    let usage = match &id {
        None => Err(EventRefusal::missing_id()),
        Some(_) => cloud_usage(&attributes).and_then(|usage| match &source {
            Some(_) => Ok(usage),
            None => Err(EventRefusal {
                reason: "MissingSource".into(),
                message: "every CloudEvent needs its source (a non-empty URI-reference naming the producer, such as /billing/api): source and id together are the event's idempotency key, the same on every retry".into(),
                code: None,
            }),
        }),
    };
    PostedEvent { id, source, usage }
}

fn cloud_usage(attributes: &Map<String, Value>) -> Result<PostedUsage, EventRefusal> {
    if attributes.get("specversion") != Some(&Value::String("1.0".into())) {
        return Err(EventRefusal::malformed(
            "a CloudEvent here has specversion \"1.0\"",
        ));
    }
    for (name, value) in attributes {
        let known = CLOUDEVENT_ATTRIBUTES.contains(&name.as_str()) || name == "data";
        // Extension attributes (lower-case alphanumeric names) are allowed by the spec.
        let extension = name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
        if !known && !extension {
            return Err(EventRefusal::malformed(format!(
                "{name:?} is no CloudEvents attribute: put the usage fields in data"
            )));
        }
        if name == "datacontenttype"
            && !matches!(value, Value::String(t) if t.split(';').next().unwrap_or("").trim().eq_ignore_ascii_case(JSON))
        {
            return Err(EventRefusal::malformed(
                "datacontenttype, when given, is application/json",
            ));
        }
    }
    let timestamp = timestamp_of(attributes.get("time"), "time")?;
    let Some(Value::Object(data)) = attributes.get("data") else {
        return Err(EventRefusal::malformed(
            "a usage CloudEvent carries its usage as a JSON object in data: licenseArn, customerAWSAccountId, dimension, quantity and optional tags or usageAllocations",
        ));
    };
    known_fields(data, &[], "data")?;
    usage_of(data, timestamp)
}

fn known_fields(
    fields: &Map<String, Value>,
    extra: &[&str],
    what: &str,
) -> Result<(), EventRefusal> {
    for name in fields.keys() {
        if name == "expiresAt" {
            return Err(EventRefusal::rejected(ReasonCode::ReservedAttribute));
        }
        if !USAGE_FIELDS.contains(&name.as_str()) && !extra.contains(&name.as_str()) {
            let mut allowed: Vec<&str> = extra.to_vec();
            allowed.extend_from_slice(USAGE_FIELDS);
            return Err(EventRefusal::malformed(format!(
                "{what} has no field {name:?}; its fields are {}",
                allowed.join(", ")
            )));
        }
    }
    Ok(())
}

/// An event's instant: RFC 3339 in any offset (converted to UTC, fractions dropped), or
/// the usage table's own `YYYY-MM-DDTHH:MM:SS[Z]`; absent: `None` (when received).
fn timestamp_of(value: Option<&Value>, name: &str) -> Result<Option<Instant>, EventRefusal> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => parse_usage_timestamp(text)
            .ok()
            .or_else(|| {
                DateTime::parse_from_rfc3339(text)
                    .ok()
                    .map(|at| at.with_timezone(&Utc).trunc_subsecs(0))
            })
            .map(Some)
            .ok_or_else(|| EventRefusal::rejected(ReasonCode::MalformedTimestamp)),
        Some(_) => Err(EventRefusal {
            message: format!(
                "{name} is a string: RFC 3339 UTC such as 2026-12-03T10:15:42Z; {}",
                crate::remedy::for_reason(ReasonCode::MalformedTimestamp)
            ),
            ..EventRefusal::rejected(ReasonCode::MalformedTimestamp)
        }),
    }
}

fn text_field(fields: &Map<String, Value>, name: &str) -> Result<String, EventRefusal> {
    match fields.get(name) {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(text)) => Ok(text.clone()),
        Some(_) => Err(EventRefusal::malformed(format!("{name} is a string"))),
    }
}

fn usage_of(
    fields: &Map<String, Value>,
    timestamp: Option<Instant>,
) -> Result<PostedUsage, EventRefusal> {
    let quantity = fields
        .get("quantity")
        .map_or(Err(ReasonCode::NonNumericQuantity), quantity_of_json)
        .map_err(EventRefusal::rejected)?;
    let allocations = match (fields.get("tags"), fields.get("usageAllocations")) {
        (Some(_), Some(_)) => {
            return Err(EventRefusal::malformed(
                "give either tags (the whole quantity to one tag set) or usageAllocations (the quantity split across tag sets), not both",
            ));
        }
        (Some(tags), None) => Some(vec![Allocation {
            quantity,
            tags: tag_map(tags)?,
        }]),
        (None, Some(list)) => Some(allocation_list(list)?),
        (None, None) => None,
    };
    Ok(PostedUsage {
        license_arn: text_field(fields, "licenseArn")?,
        account: text_field(fields, "customerAWSAccountId")?,
        dimension: text_field(fields, "dimension")?,
        quantity,
        timestamp,
        allocations,
    })
}

/// `tags`: an object of string values, one tag set, in key order (so the same tags
/// always make the same event, however a client orders its object).
fn tag_map(value: &Value) -> Result<Vec<Tag>, EventRefusal> {
    let Value::Object(map) = value else {
        return Err(EventRefusal::malformed(
            "tags is an object of string values, such as {\"team\": \"search\"}",
        ));
    };
    let mut tags = map
        .iter()
        .map(|(key, value)| match value {
            Value::String(value) => Ok(Tag {
                key: key.clone(),
                value: value.clone(),
            }),
            _ => Err(EventRefusal::rejected(ReasonCode::MissingTagKeyOrValue)),
        })
        .collect::<Result<Vec<_>, _>>()?;
    tags.sort();
    Ok(tags)
}

/// `usageAllocations`: `[{"allocatedUsageQuantity": N, "tags": [{"key", "value"}]}]`,
/// the table's own shape, tags in the order given.
fn allocation_list(value: &Value) -> Result<Vec<Allocation>, EventRefusal> {
    let shape = || {
        EventRefusal::malformed(
            "usageAllocations is a list of {\"allocatedUsageQuantity\": N, \"tags\": [{\"key\": K, \"value\": V}]}",
        )
    };
    let Value::Array(list) = value else {
        return Err(shape());
    };
    list.iter()
        .map(|allocation| {
            let Value::Object(fields) = allocation else {
                return Err(shape());
            };
            if fields
                .keys()
                .any(|k| k != "allocatedUsageQuantity" && k != "tags")
            {
                return Err(shape());
            }
            let quantity = fields
                .get("allocatedUsageQuantity")
                .ok_or_else(shape)
                .and_then(|q| {
                    quantity_of_json(q).map_err(|_| {
                        EventRefusal::rejected(ReasonCode::NegativeOrNonIntegerAllocation)
                    })
                })?;
            let tags = match fields.get("tags") {
                None => Vec::new(),
                Some(Value::Array(tags)) => tags
                    .iter()
                    .map(|tag| {
                        serde_json::from_value::<Tag>(tag.clone())
                            .map_err(|_| EventRefusal::rejected(ReasonCode::MissingTagKeyOrValue))
                    })
                    .collect::<Result<_, _>>()?,
                Some(_) => return Err(shape()),
            };
            Ok(Allocation { quantity, tags })
        })
        .collect()
}

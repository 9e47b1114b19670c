//! What CloudTrail recorded of one `BatchMeterUsage` call: the `CloudTrailEvent` JSON
//! string of a `LookupEvents` event, read into the records we submitted and what
//! Marketplace answered for each. CloudTrail logs both, with camelCase keys:
//! `requestParameters.usageRecords[]` and `responseElements.results[]` (each with
//! `usageRecord`, `meteringRecordId`, `status`) and `responseElements.unprocessedRecords[]`.
//! Record timestamps are not ISO but `"Apr 19, 2018 4:32:50 PM"` (UTC).
//!
//! Unconfirmed by AWS (seller-records-facts §2): the CloudTrail names of
//! `CustomerAWSAccountId`, `LicenseArn` and `QuantityAsDecimal`. We read the camelCase
//! forms `customerAWSAccountId` / `licenseArn` / `quantityAsDecimal`, and also
//! `customerAwsAccountId`, so a renamed field is not silently read as "no account".
//! A record we cannot read is listed as a problem with its JSON path; it never stops
//! the rest of the event, and nothing here panics on any input.

use chrono::{NaiveDateTime, TimeZone, Utc};
use serde::Serialize;
use serde_json::{Map, Value};

use awsmp_core::model::GroupKey;
use awsmp_core::time::{HourBucket, Instant};

use super::quantity::Quantity;

/// The `eventSource` the seller guide documents for Marketplace Metering calls.
pub const EVENT_SOURCE: &str = "metering-marketplace.amazonaws.com";
/// The `cloudTrailEventSource` the Smithy model declares instead (the two disagree).
pub const MODEL_EVENT_SOURCE: &str = "marketplacemetering.amazonaws.com";
/// The `eventName` of a metering call.
pub const EVENT_NAME: &str = "BatchMeterUsage";

/// Whether `source` is one of the two spellings of the Marketplace Metering source.
pub fn is_metering_source(source: &str) -> bool {
    source == EVENT_SOURCE || source == MODEL_EVENT_SOURCE
}

/// One `BatchMeterUsage` call as CloudTrail recorded it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct TrailEvent {
    /// `eventID`.
    pub event_id: String,
    /// `eventTime`: when the call was made.
    pub event_time: Instant,
    /// `eventSource`.
    pub event_source: String,
    /// `awsRegion`: the metering Region the call went to.
    pub region: Option<String>,
    /// `requestID`.
    pub request_id: Option<String>,
    /// `requestParameters.productCode`, when the call sent one (legacy integrations;
    /// with LicenseArn records it would double-bill).
    pub product_code: Option<String>,
    /// `errorCode` / `errorMessage`: the call failed as a whole (nothing billed).
    pub error: Option<CallError>,
    /// Every record of the call with what was answered for it.
    pub records: Vec<TrailRecord>,
    /// Records or fields that could not be read, each with its JSON path and why.
    pub problems: Vec<String>,
}

/// A request-level failure CloudTrail recorded (`errorCode`, `errorMessage`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct CallError {
    /// The exception name, e.g. `InvalidUsageDimensionException`.
    pub code: String,
    /// The service message, if recorded.
    pub message: Option<String>,
}

/// One usage record of a call and its outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct TrailRecord {
    /// The record as submitted (for a result: as Marketplace echoed it).
    pub submitted: SubmittedRecord,
    /// What Marketplace did with it.
    pub outcome: TrailOutcome,
}

/// A usage record as it appears in CloudTrail.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct SubmittedRecord {
    /// `customerAWSAccountId` (Concurrent Agreements integrations).
    pub customer_aws_account_id: Option<String>,
    /// `licenseArn` (Concurrent Agreements integrations).
    pub license_arn: Option<String>,
    /// `customerIdentifier` (legacy integrations; an empty one counts as absent).
    pub customer_identifier: Option<String>,
    /// `dimension`.
    pub dimension: String,
    /// `timestamp`.
    pub timestamp: Instant,
    /// `quantity`, or `quantityAsDecimal`; absent means 0, as on the API.
    pub quantity: Quantity,
}

impl SubmittedRecord {
    /// The group this record meters, when it names a license and an account (a
    /// legacy `customerIdentifier` record has none of ours).
    pub fn group_key(&self) -> Option<GroupKey> {
        Some(GroupKey {
            license_arn: self.license_arn.clone()?,
            customer_aws_account_id: self.customer_aws_account_id.clone()?,
            dimension: self.dimension.clone(),
            hour: HourBucket::containing(self.timestamp),
        })
    }
}

/// What Marketplace answered for one record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(tag = "outcome", rename_all = "camelCase")]
pub enum TrailOutcome {
    /// In `results[]`.
    Result {
        /// `status`.
        status: TrailStatus,
        /// `meteringRecordId` (for a duplicate: the original's).
        metering_record_id: Option<String>,
    },
    /// In `unprocessedRecords[]`: not billed, the caller should retry.
    Unprocessed,
    /// The whole call failed (`errorCode`): not billed.
    CallFailed {
        /// The exception name.
        code: String,
    },
    /// The request was recorded without a response (no `responseElements` and no
    /// `errorCode`): CloudTrail does not say whether it was billed.
    NoResponseRecorded,
}

impl TrailOutcome {
    /// Whether this outcome billed the record (first write: `Success`).
    pub fn billed(&self) -> bool {
        matches!(
            self,
            TrailOutcome::Result {
                status: TrailStatus::Success,
                ..
            }
        )
    }

    /// A short label: the status, `Unprocessed`, the exception name, or `NoResponse`.
    pub fn label(&self) -> String {
        match self {
            TrailOutcome::Result { status, .. } => status.as_str().to_string(),
            TrailOutcome::Unprocessed => "Unprocessed".into(),
            TrailOutcome::CallFailed { code } => code.clone(),
            TrailOutcome::NoResponseRecorded => "NoResponse".into(),
        }
    }
}

/// `results[].status`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, schemars::JsonSchema)]
pub enum TrailStatus {
    /// Accepted and billed.
    Success,
    /// Not entitled: not billed.
    CustomerNotSubscribed,
    /// Already metered for this customer, dimension and hour: nothing new billed.
    DuplicateRecord,
    /// A status this version does not know (kept, never billed).
    Other(String),
}

impl TrailStatus {
    fn parse(text: &str) -> Self {
        match text {
            "Success" => TrailStatus::Success,
            "CustomerNotSubscribed" => TrailStatus::CustomerNotSubscribed,
            "DuplicateRecord" => TrailStatus::DuplicateRecord,
            other => TrailStatus::Other(other.to_string()),
        }
    }

    /// The status as recorded.
    pub fn as_str(&self) -> &str {
        match self {
            TrailStatus::Success => "Success",
            TrailStatus::CustomerNotSubscribed => "CustomerNotSubscribed",
            TrailStatus::DuplicateRecord => "DuplicateRecord",
            TrailStatus::Other(s) => s,
        }
    }
}

/// An event that is not a readable `BatchMeterUsage` call at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TrailParseError {
    /// Another API call of the same source (e.g. `ResolveCustomer`): not a problem,
    /// just not metering.
    #[error("event {event_id} is {event_name}, not BatchMeterUsage")]
    NotBatchMeterUsage {
        /// `eventID`.
        event_id: String,
        /// `eventName`.
        event_name: String,
    },
    /// The event cannot be read (not JSON, no `eventID` or `eventTime`, ...).
    #[error("unreadable CloudTrail event{}: {problem}", event_id.as_ref().map(|id| format!(" {id}")).unwrap_or_default())]
    Unreadable {
        /// `eventID`, when it could be read.
        event_id: Option<String>,
        /// What is wrong.
        problem: String,
    },
}

/// Parses a CloudTrail record timestamp: `"Apr 19, 2018 4:32:50 PM"` (UTC, as
/// CloudTrail writes them; a narrow or plain no-break space before AM/PM, as newer
/// Java formatters write, is accepted), or ISO 8601 / epoch seconds should a
/// future event carry those.
pub fn parse_record_timestamp(value: &Value) -> Option<Instant> {
    match value {
        Value::Number(n) => n
            .as_i64()
            .and_then(|s| chrono::DateTime::from_timestamp(s, 0))
            .or_else(|| {
                let f = n.as_f64()?;
                if !f.is_finite() {
                    return None;
                }
                chrono::DateTime::from_timestamp(f.floor() as i64, 0)
            }),
        Value::String(s) => {
            let normal: String = s
                .trim()
                .chars()
                .map(|c| {
                    if c == '\u{202f}' || c == '\u{a0}' {
                        ' '
                    } else {
                        c
                    }
                })
                .collect();
            NaiveDateTime::parse_from_str(&normal, "%b %d, %Y %I:%M:%S %p")
                .map(|n| Utc.from_utc_datetime(&n))
                .ok()
                .or_else(|| {
                    chrono::DateTime::parse_from_rfc3339(&normal)
                        .ok()
                        .map(|t| t.with_timezone(&Utc))
                })
        }
        _ => None,
    }
}

fn string_at(object: &Map<String, Value>, key: &str) -> Option<String> {
    object.get(key).and_then(Value::as_str).map(str::to_string)
}

/// Reads one usage record object; `path` names it in problems.
fn read_record(value: &Value, path: &str) -> Result<SubmittedRecord, String> {
    let object = value
        .as_object()
        .ok_or_else(|| format!("{path}: not a JSON object"))?;
    let dimension = match object.get("dimension") {
        Some(Value::String(d)) if !d.is_empty() => d.clone(),
        Some(other) => return Err(format!("{path}.dimension: {other} is not a dimension name")),
        None => return Err(format!("{path}.dimension: missing")),
    };
    let timestamp = match object.get("timestamp") {
        Some(raw) => parse_record_timestamp(raw).ok_or_else(|| {
            format!("{path}.timestamp: {raw} is not a time like \"Apr 19, 2018 4:32:50 PM\"")
        })?,
        None => return Err(format!("{path}.timestamp: missing")),
    };
    let quantity = match (object.get("quantity"), object.get("quantityAsDecimal")) {
        (Some(_), Some(_)) => {
            return Err(format!(
                "{path}: both quantity and quantityAsDecimal (the API refuses that)"
            ));
        }
        (Some(Value::Number(n)), None) => match n.as_i64() {
            Some(units) if units >= 0 => Quantity::units(units),
            _ => return Err(format!("{path}.quantity: {n} is not a whole number >= 0")),
        },
        (Some(other), None) => return Err(format!("{path}.quantity: {other} is not a number")),
        (None, Some(Value::String(text))) => {
            Quantity::parse(text).map_err(|e| format!("{path}.quantityAsDecimal: {e}"))?
        }
        (None, Some(other)) => {
            return Err(format!(
                "{path}.quantityAsDecimal: {other} is not decimal text"
            ));
        }
        (None, None) => Quantity::ZERO,
    };
    let account = string_at(object, "customerAWSAccountId")
        .or_else(|| string_at(object, "customerAwsAccountId"));
    Ok(SubmittedRecord {
        customer_aws_account_id: account.filter(|a| !a.is_empty()),
        license_arn: string_at(object, "licenseArn").filter(|l| !l.is_empty()),
        customer_identifier: string_at(object, "customerIdentifier").filter(|c| !c.is_empty()),
        dimension,
        timestamp,
        quantity,
    })
}

fn array_at<'a>(
    object: &'a Map<String, Value>,
    key: &str,
    path: &str,
    problems: &mut Vec<String>,
) -> &'a [Value] {
    match object.get(key) {
        Some(Value::Array(items)) => items,
        None | Some(Value::Null) => &[],
        Some(other) => {
            problems.push(format!("{path}.{key}: {other} is not a list"));
            &[]
        }
    }
}

/// Parses the `CloudTrailEvent` JSON of one `LookupEvents` event.
///
/// Fails only when the event as a whole is unreadable or is not `BatchMeterUsage`;
/// a bad record inside it is in [`TrailEvent::problems`] and the others are kept.
pub fn parse_cloudtrail_event(json: &str) -> Result<TrailEvent, TrailParseError> {
    let value: Value = serde_json::from_str(json).map_err(|e| TrailParseError::Unreadable {
        event_id: None,
        problem: format!("not JSON: {e}"),
    })?;
    let top = value
        .as_object()
        .ok_or_else(|| TrailParseError::Unreadable {
            event_id: None,
            problem: "not a JSON object".into(),
        })?;
    let event_id = string_at(top, "eventID").ok_or_else(|| TrailParseError::Unreadable {
        event_id: None,
        problem: "no eventID".into(),
    })?;
    let unreadable = |problem: String| TrailParseError::Unreadable {
        event_id: Some(event_id.clone()),
        problem,
    };
    let event_name =
        string_at(top, "eventName").ok_or_else(|| unreadable("no eventName".into()))?;
    if event_name != EVENT_NAME {
        return Err(TrailParseError::NotBatchMeterUsage {
            event_id,
            event_name,
        });
    }
    let event_time = string_at(top, "eventTime")
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(&t).ok())
        .map(|t| t.with_timezone(&Utc))
        .ok_or_else(|| unreadable("eventTime missing or not ISO 8601".into()))?;
    let event_source = string_at(top, "eventSource").unwrap_or_default();
    let error = string_at(top, "errorCode").map(|code| CallError {
        code,
        message: string_at(top, "errorMessage"),
    });

    let mut problems = Vec::new();
    let empty = Map::new();
    let request = match top.get("requestParameters") {
        Some(Value::Object(o)) => o,
        None | Some(Value::Null) => {
            problems.push("requestParameters: not recorded".into());
            &empty
        }
        Some(other) => {
            problems.push(format!("requestParameters: {other} is not an object"));
            &empty
        }
    };
    let product_code = string_at(request, "productCode").filter(|p| !p.is_empty());
    let requested = array_at(request, "usageRecords", "requestParameters", &mut problems);

    let mut records = Vec::new();
    let response = match top.get("responseElements") {
        Some(Value::Object(o)) => Some(o),
        None | Some(Value::Null) => None,
        Some(other) => {
            problems.push(format!("responseElements: {other} is not an object"));
            None
        }
    };
    match (response, &error) {
        (Some(response), _) => {
            let results = array_at(response, "results", "responseElements", &mut problems);
            for (i, result) in results.iter().enumerate() {
                let path = format!("responseElements.results[{i}]");
                let Some(object) = result.as_object() else {
                    problems.push(format!("{path}: not a JSON object"));
                    continue;
                };
                let status = match object.get("status").and_then(Value::as_str) {
                    Some(s) => TrailStatus::parse(s),
                    None => {
                        problems.push(format!("{path}.status: missing"));
                        continue;
                    }
                };
                let Some(echo) = object.get("usageRecord") else {
                    problems.push(format!("{path}.usageRecord: missing"));
                    continue;
                };
                match read_record(echo, &format!("{path}.usageRecord")) {
                    Ok(submitted) => records.push(TrailRecord {
                        submitted,
                        outcome: TrailOutcome::Result {
                            status,
                            metering_record_id: string_at(object, "meteringRecordId"),
                        },
                    }),
                    Err(problem) => problems.push(problem),
                }
            }
            let unprocessed = array_at(
                response,
                "unprocessedRecords",
                "responseElements",
                &mut problems,
            );
            for (i, record) in unprocessed.iter().enumerate() {
                match read_record(record, &format!("responseElements.unprocessedRecords[{i}]")) {
                    Ok(submitted) => records.push(TrailRecord {
                        submitted,
                        outcome: TrailOutcome::Unprocessed,
                    }),
                    Err(problem) => problems.push(problem),
                }
            }
            let answered = results.len() + unprocessed.len();
            if answered != requested.len() {
                problems.push(format!(
                    "requestParameters.usageRecords has {} records but the response answers {answered}",
                    requested.len()
                ));
            }
        }
        (None, error) => {
            let outcome = match error {
                Some(e) => TrailOutcome::CallFailed {
                    code: e.code.clone(),
                },
                None => TrailOutcome::NoResponseRecorded,
            };
            for (i, record) in requested.iter().enumerate() {
                match read_record(record, &format!("requestParameters.usageRecords[{i}]")) {
                    Ok(submitted) => records.push(TrailRecord {
                        submitted,
                        outcome: outcome.clone(),
                    }),
                    Err(problem) => problems.push(problem),
                }
            }
        }
    }
    Ok(TrailEvent {
        event_id,
        event_time,
        event_source,
        region: string_at(top, "awsRegion"),
        request_id: string_at(top, "requestID"),
        product_code,
        error,
        records,
        problems,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::reconcile::at;

    /// The seller guide's example event, verbatim (legacy CustomerIdentifier call).
    const GUIDE_EXAMPLE: &str = include_str!("../../tests/fixtures/cloudtrail/guide_example.json");
    /// A Concurrent Agreements call: one Success, one DuplicateRecord, one
    /// CustomerNotSubscribed, one unprocessed record.
    const LICENSE_CALL: &str = include_str!("../../tests/fixtures/cloudtrail/license_call.json");
    /// A call refused as a whole (errorCode, no responseElements).
    const FAILED_CALL: &str = include_str!("../../tests/fixtures/cloudtrail/failed_call.json");
    /// A call with one good record and bad ones (bad timestamp, no dimension, both
    /// quantity fields, a negative quantity).
    const DAMAGED_CALL: &str = include_str!("../../tests/fixtures/cloudtrail/damaged_call.json");

    #[test]
    fn reads_the_seller_guide_example() {
        let event = parse_cloudtrail_event(GUIDE_EXAMPLE).unwrap();
        assert_eq!(event.event_id, "cEXAMPLE-e6c2-465d-b47f-150EXAMPLE97");
        assert_eq!(event.event_time, at("2018-04-19T16:32:51Z"));
        assert_eq!(event.event_source, EVENT_SOURCE);
        assert_eq!(event.region.as_deref(), Some("us-east-1"));
        assert_eq!(event.product_code.as_deref(), Some("EXAMPLE_proCode"));
        assert!(event.problems.is_empty(), "{:?}", event.problems);
        assert_eq!(event.records.len(), 1);
        let record = &event.records[0];
        assert_eq!(
            record.submitted.customer_identifier.as_deref(),
            Some("customer1")
        );
        assert_eq!(record.submitted.timestamp, at("2018-04-19T16:32:50Z"));
        assert_eq!(record.submitted.quantity, Quantity::units(1));
        assert_eq!(
            record.submitted.group_key(),
            None,
            "legacy: no license, no account"
        );
        assert_eq!(
            record.outcome,
            TrailOutcome::Result {
                status: TrailStatus::Success,
                metering_record_id: Some("bEXAMPLE-98f0-4e90-8bd2-bf0EXAMPLE1e".into())
            }
        );
        assert!(record.outcome.billed());
    }

    #[test]
    fn reads_every_outcome_of_a_license_call() {
        let event = parse_cloudtrail_event(LICENSE_CALL).unwrap();
        assert!(event.problems.is_empty(), "{:?}", event.problems);
        assert_eq!(event.product_code, None);
        let labels: Vec<String> = event.records.iter().map(|r| r.outcome.label()).collect();
        assert_eq!(
            labels,
            [
                "Success",
                "DuplicateRecord",
                "CustomerNotSubscribed",
                "Unprocessed"
            ]
        );
        let first = &event.records[0].submitted;
        assert_eq!(
            first.customer_aws_account_id.as_deref(),
            Some("111122223333")
        );
        assert_eq!(
            first.group_key().unwrap().to_string(),
            "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef|111122223333|requests|2026-03-15T11"
        );
        assert_eq!(first.quantity, Quantity::units(42));
        // quantityAsDecimal is read exactly.
        assert_eq!(
            event.records[1].submitted.quantity,
            Quantity::parse("2.5").unwrap()
        );
        assert_eq!(
            event.records.iter().filter(|r| r.outcome.billed()).count(),
            1,
            "only the Success billed"
        );
    }

    #[test]
    fn a_refused_call_keeps_its_records_as_not_billed() {
        let event = parse_cloudtrail_event(FAILED_CALL).unwrap();
        assert_eq!(
            event.error,
            Some(CallError {
                code: "InvalidUsageDimensionException".into(),
                message: Some(
                    "The usageDimension does not match one of the UsageDimensions associated with products.".into()
                )
            })
        );
        assert_eq!(event.records.len(), 2);
        assert!(
            event
                .records
                .iter()
                .all(|r| !r.outcome.billed()
                    && r.outcome.label() == "InvalidUsageDimensionException")
        );
    }

    #[test]
    fn a_damaged_record_is_reported_by_path_and_the_rest_is_kept() {
        let event = parse_cloudtrail_event(DAMAGED_CALL).unwrap();
        assert_eq!(event.records.len(), 1, "the one good record");
        let expected = [
            "responseElements.results[1].usageRecord.timestamp",
            "responseElements.results[2].usageRecord.dimension: missing",
            "responseElements.results[3].usageRecord: both quantity and quantityAsDecimal",
            "responseElements.results[4].usageRecord.quantity: -3",
            "responseElements.results[5].status: missing",
        ];
        assert_eq!(
            event.problems.len(),
            expected.len(),
            "{:#?}",
            event.problems
        );
        for (problem, start) in event.problems.iter().zip(expected) {
            assert!(
                problem.starts_with(start),
                "{problem:?} should start with {start:?}"
            );
        }
    }

    #[test]
    fn unreadable_events_say_what_is_wrong() {
        let cases: &[(&str, &str)] = &[
            ("not json", "not JSON"),
            ("[1,2]", "not a JSON object"),
            (r#"{"eventName":"BatchMeterUsage"}"#, "no eventID"),
            (
                r#"{"eventID":"e1","eventName":"BatchMeterUsage"}"#,
                "eventTime",
            ),
            (
                r#"{"eventID":"e1","eventName":"BatchMeterUsage","eventTime":"yesterday"}"#,
                "eventTime",
            ),
        ];
        for (json, needle) in cases {
            let err = parse_cloudtrail_event(json).unwrap_err();
            assert!(err.to_string().contains(needle), "{json}: {err}");
        }
        let other = parse_cloudtrail_event(
            r#"{"eventID":"e2","eventName":"ResolveCustomer","eventTime":"2026-03-15T12:00:00Z"}"#,
        )
        .unwrap_err();
        assert!(matches!(other, TrailParseError::NotBatchMeterUsage { .. }));
    }

    #[test]
    fn record_timestamps_in_every_form_cloudtrail_may_write() {
        let cases: &[(Value, Option<&str>)] = &[
            (
                Value::from("Apr 19, 2018 4:32:50 PM"),
                Some("2018-04-19T16:32:50Z"),
            ),
            (
                Value::from("Apr 9, 2018 12:00:00 AM"),
                Some("2018-04-09T00:00:00Z"),
            ),
            (
                Value::from("Dec 31, 2026 12:59:59 PM"),
                Some("2026-12-31T12:59:59Z"),
            ),
            (
                Value::from("Apr 19, 2018 4:32:50\u{202f}PM"),
                Some("2018-04-19T16:32:50Z"),
            ),
            (
                Value::from("2026-03-15T11:00:00Z"),
                Some("2026-03-15T11:00:00Z"),
            ),
            (Value::from(1_773_572_400_i64), Some("2026-03-15T11:00:00Z")),
            (Value::from("Apr 19, 2018 16:32:50 PM"), None),
            (Value::from("19/04/2018"), None),
            (Value::Null, None),
        ];
        for (value, expected) in cases {
            assert_eq!(parse_record_timestamp(value), expected.map(at), "{value}");
        }
    }

    proptest::proptest! {
        #[test]
        fn no_input_makes_the_parser_panic(json in ".{0,300}") {
            let _ = parse_cloudtrail_event(&json);
        }

        #[test]
        fn records_with_arbitrary_field_values_never_panic(
            dimension in proptest::option::of(".{0,8}"),
            quantity in proptest::option::of(proptest::num::i64::ANY),
            decimal in proptest::option::of("[0-9.\\-]{0,8}"),
            timestamp in ".{0,30}",
        ) {
            let mut record = serde_json::json!({"timestamp": timestamp});
            if let Some(d) = dimension { record["dimension"] = Value::from(d); }
            if let Some(q) = quantity { record["quantity"] = Value::from(q); }
            if let Some(d) = decimal { record["quantityAsDecimal"] = Value::from(d); }
            let event = serde_json::json!({
                "eventID": "e", "eventName": "BatchMeterUsage", "eventTime": "2026-03-15T12:00:00Z",
                "requestParameters": {"usageRecords": [record.clone()]},
                "responseElements": {"results": [{"usageRecord": record, "status": "Success"}], "unprocessedRecords": []}
            });
            let parsed = parse_cloudtrail_event(&event.to_string()).unwrap();
            proptest::prop_assert_eq!(parsed.records.len() + parsed.problems.len(), 1);
        }
    }
}

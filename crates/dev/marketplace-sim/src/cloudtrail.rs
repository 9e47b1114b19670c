//! CloudTrail Event History for the calls the simulator received: every
//! `BatchMeterUsage` call (refused ones too) becomes a management event in the shape
//! CloudTrail records it (seller-records-facts §2): `eventSource`
//! `metering-marketplace.amazonaws.com`, `requestParameters.usageRecords[]` and
//! `responseElements.results[]` / `unprocessedRecords[]` with camelCase keys, record
//! timestamps written `"Apr 19, 2018 4:32:50 PM"`, `errorCode` / `errorMessage` for a
//! refused call. `LookupEvents` (AWS JSON 1.1, target
//! `CloudTrail_20131101.LookupEvents`, as the SDK sends it, or with botocore's
//! `com.amazonaws.cloudtrail.v20131101.` prefix) serves them newest first, with one
//! lookup attribute, the time filters, `MaxResults` 1..50 and position-stable
//! `NextToken`s bound to the parameters they came with. Events are regional (the
//! Region of the caller's SigV4 credential scope), kept 90 days of sim time, and
//! visible only after a configurable lag (real Event History: about 15 minutes;
//! here 0 unless set).

use chrono::{DateTime, TimeDelta, Utc};
use serde::Deserialize;
use serde_json::{Map, Number, Value, json};

use crate::error::{ApiError, ApiErrorKind};
use crate::validate::epoch_seconds_to_datetime;

/// The `X-Amz-Target` the Rust SDK sends for `LookupEvents`.
pub const LOOKUP_EVENTS_TARGET: &str = "CloudTrail_20131101.LookupEvents";
/// The prefix botocore and the AWS CLI put before it.
pub const BOTOCORE_TARGET_PREFIX: &str = "com.amazonaws.cloudtrail.v20131101.";
/// The event source of Marketplace Metering calls, as the seller guide documents it.
pub const EVENT_SOURCE: &str = "metering-marketplace.amazonaws.com";
/// The account the simulated seller calls from (`recipientAccountId`).
pub const SELLER_ACCOUNT_ID: &str = "123456789012";
/// Event History keeps this long (sim clock).
pub const RETENTION: TimeDelta = TimeDelta::days(90);
/// At most this many events are kept (oldest dropped first), so a long load test
/// does not grow without bound.
pub const MAX_EVENTS: usize = 200_000;
/// `MaxResults` default and maximum.
pub const MAX_RESULTS: i64 = 50;
/// The Region of a call that carries no SigV4 credential scope.
pub const DEFAULT_REGION: &str = "us-east-1";
/// Lookup attribute keys the API accepts.
pub const ATTRIBUTE_KEYS: [&str; 8] = [
    "EventId",
    "EventName",
    "ReadOnly",
    "Username",
    "ResourceType",
    "ResourceName",
    "EventSource",
    "AccessKeyId",
];

/// Whether `target` names `LookupEvents` (either spelling).
pub fn is_lookup_events(target: Option<&str>) -> bool {
    target.is_some_and(|t| {
        t == LOOKUP_EVENTS_TARGET
            || t.strip_prefix(BOTOCORE_TARGET_PREFIX) == Some(LOOKUP_EVENTS_TARGET)
    })
}

/// Who made a call, from its SigV4 `Authorization` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The Region of the credential scope.
    pub region: String,
    /// The access key id of the credential.
    pub access_key_id: String,
}

impl Default for Caller {
    fn default() -> Self {
        Caller {
            region: DEFAULT_REGION.to_owned(),
            access_key_id: "AKIDSIMULATOR".to_owned(),
        }
    }
}

impl Caller {
    /// Reads `Credential=AKID/20260315/us-east-1/aws-marketplace/aws4_request` out of
    /// an `Authorization` header; the defaults where it is absent or unreadable.
    pub fn from_authorization(header: Option<&str>) -> Self {
        let scope = header
            .and_then(|h| h.split("Credential=").nth(1))
            .and_then(|c| c.split([',', ' ']).next())
            .map(|c| c.split('/').collect::<Vec<_>>());
        match scope.as_deref() {
            Some([key, _date, region, ..]) if !key.is_empty() && !region.is_empty() => Caller {
                region: (*region).to_owned(),
                access_key_id: (*key).to_owned(),
            },
            _ => Caller::default(),
        }
    }
}

/// One recorded event.
#[derive(Debug, Clone)]
struct Recorded {
    seq: u64,
    event_time: DateTime<Utc>,
    event_id: String,
    region: String,
    access_key_id: String,
    /// The full CloudTrail record, as `CloudTrailEvent` carries it.
    json: String,
}

/// The simulated Event History.
#[derive(Debug, Clone, Default)]
pub struct EventHistory {
    events: Vec<Recorded>,
    next_seq: u64,
    lag: TimeDelta,
}

/// Turns the wire's PascalCase keys into CloudTrail's camelCase ones (recursively)
/// and each record `Timestamp` (epoch seconds) into CloudTrail's text form.
fn to_cloudtrail_case(value: &Value) -> Value {
    match value {
        Value::Object(object) => {
            let mut out = Map::new();
            for (key, v) in object {
                let mut chars = key.chars();
                let camel = match chars.next() {
                    Some(first) => first.to_lowercase().chain(chars).collect(),
                    None => String::new(),
                };
                let converted = match (camel.as_str(), v) {
                    ("timestamp", Value::Number(n)) => record_time(n),
                    _ => to_cloudtrail_case(v),
                };
                out.insert(camel, converted);
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(to_cloudtrail_case).collect()),
        other => other.clone(),
    }
}

/// `"Mar 15, 2026 11:00:00 AM"` (UTC), as CloudTrail writes record timestamps.
pub fn format_record_time(at: DateTime<Utc>) -> String {
    at.format("%b %-d, %Y %-I:%M:%S %p").to_string()
}

fn record_time(seconds: &Number) -> Value {
    match epoch_seconds_to_datetime(seconds) {
        Some(at) => Value::String(format_record_time(at)),
        None => Value::Number(seconds.clone()),
    }
}

/// The body of a `LookupEvents` request.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct LookupEventsRequest {
    #[serde(default)]
    lookup_attributes: Option<Vec<LookupAttribute>>,
    #[serde(default)]
    start_time: Option<Number>,
    #[serde(default)]
    end_time: Option<Number>,
    #[serde(default)]
    event_category: Option<String>,
    #[serde(default)]
    max_results: Option<Number>,
    #[serde(default)]
    next_token: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct LookupAttribute {
    #[serde(default)]
    attribute_key: Option<String>,
    #[serde(default)]
    attribute_value: Option<String>,
}

fn invalid(kind: ApiErrorKind, message: impl Into<String>) -> ApiError {
    ApiError::new(kind, message)
}

impl EventHistory {
    /// Sets how long after a call its event becomes visible (sim time).
    pub fn set_lag(&mut self, lag: TimeDelta) {
        self.lag = lag;
    }

    /// The lag in force.
    pub fn lag(&self) -> TimeDelta {
        self.lag
    }

    /// Events recorded (visible or not).
    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// Whether no event was recorded.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// Records one `BatchMeterUsage` call: `request` as received (if it was JSON),
    /// and what the service did (the answer, or the exception), before any injected
    /// loss of the answer (CloudTrail records what the service did).
    pub fn record_batch_meter_usage(
        &mut self,
        now: DateTime<Utc>,
        caller: &Caller,
        event_id: String,
        request_id: String,
        request: Option<&Value>,
        result: &Result<Value, ApiError>,
    ) {
        let mut event = json!({
            "eventVersion": "1.08",
            "userIdentity": {
                "type": "IAMUser",
                "principalId": "AIDASIMULATOR",
                "arn": format!("arn:aws:iam::{SELLER_ACCOUNT_ID}:user/awsmp-sim"),
                "accountId": SELLER_ACCOUNT_ID,
                "accessKeyId": caller.access_key_id,
                "userName": "awsmp-sim",
            },
            "eventTime": now.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
            "eventSource": EVENT_SOURCE,
            "eventName": "BatchMeterUsage",
            "awsRegion": caller.region,
            "sourceIPAddress": "127.0.0.1",
            "userAgent": "awsmp-marketplace-sim",
            "requestParameters": request.map_or(Value::Null, to_cloudtrail_case),
            "responseElements": Value::Null,
            "requestID": request_id,
            "eventID": event_id,
            "readOnly": false,
            "eventType": "AwsApiCall",
            "managementEvent": true,
            "recipientAccountId": SELLER_ACCOUNT_ID,
            "eventCategory": "Management",
        });
        match result {
            Ok(answer) => event["responseElements"] = to_cloudtrail_case(answer),
            Err(err) => {
                event["errorCode"] = Value::from(err.kind.wire_name());
                event["errorMessage"] = Value::from(err.message.clone());
            }
        }
        self.next_seq += 1;
        self.events.push(Recorded {
            seq: self.next_seq,
            event_time: now,
            event_id,
            region: caller.region.clone(),
            access_key_id: caller.access_key_id.clone(),
            json: event.to_string(),
        });
        if self.events.len() > MAX_EVENTS {
            let excess = self.events.len() - MAX_EVENTS;
            self.events.drain(..excess);
        }
    }

    /// Serves one `LookupEvents` call made by `caller` at sim time `now`.
    pub fn lookup_events(
        &self,
        body: &[u8],
        caller: &Caller,
        now: DateTime<Utc>,
    ) -> Result<Value, ApiError> {
        let request: LookupEventsRequest = serde_json::from_slice(body).map_err(|e| {
            invalid(
                ApiErrorKind::Serialization,
                format!("request body is not a valid LookupEvents request: {e}"),
            )
        })?;
        let max_results = match &request.max_results {
            None => MAX_RESULTS,
            Some(n) => match n.as_i64() {
                Some(m) if (1..=MAX_RESULTS).contains(&m) => m,
                _ => {
                    return Err(invalid(
                        ApiErrorKind::InvalidMaxResults,
                        format!("MaxResults {n} is not between 1 and 50"),
                    ));
                }
            },
        };
        let attributes = request.lookup_attributes.clone().unwrap_or_default();
        if attributes.len() > 1 {
            return Err(invalid(
                ApiErrorKind::InvalidLookupAttributes,
                "LookupAttributes can contain only one item",
            ));
        }
        let filter = match attributes.first() {
            None => None,
            Some(a) => {
                let key = a.attribute_key.clone().unwrap_or_default();
                if !ATTRIBUTE_KEYS.contains(&key.as_str()) {
                    return Err(invalid(
                        ApiErrorKind::InvalidLookupAttributes,
                        format!(
                            "AttributeKey {key:?} is not one of {}",
                            ATTRIBUTE_KEYS.join(", ")
                        ),
                    ));
                }
                let value = a.attribute_value.clone().unwrap_or_default();
                if value.is_empty() {
                    return Err(invalid(
                        ApiErrorKind::InvalidLookupAttributes,
                        "AttributeValue must not be empty",
                    ));
                }
                Some((key, value))
            }
        };
        let time = |n: &Option<Number>, name: &str| -> Result<Option<DateTime<Utc>>, ApiError> {
            match n {
                None => Ok(None),
                Some(n) => epoch_seconds_to_datetime(n).map(Some).ok_or_else(|| {
                    invalid(
                        ApiErrorKind::InvalidTimeRange,
                        format!("{name} {n} is not a valid time"),
                    )
                }),
            }
        };
        let start = time(&request.start_time, "StartTime")?;
        let end = time(&request.end_time, "EndTime")?;
        if let (Some(s), Some(e)) = (start, end)
            && s > e
        {
            return Err(invalid(
                ApiErrorKind::InvalidTimeRange,
                "StartTime is after EndTime",
            ));
        }
        let insights = match request.event_category.as_deref() {
            None => false,
            Some("insight") => true,
            Some(other) => {
                return Err(invalid(
                    ApiErrorKind::InvalidEventCategory,
                    format!("EventCategory {other:?} is not valid (the only value is insight)"),
                ));
            }
        };
        // A token is only good with the parameters it came with.
        let params = format!(
            "{:?}|{:?}|{:?}|{}|{}",
            request.start_time.as_ref().map(Number::to_string),
            request.end_time.as_ref().map(Number::to_string),
            filter,
            insights,
            caller.region
        );
        let fingerprint = fnv(&params);
        let after: Option<(i64, u64)> = match &request.next_token {
            None => None,
            Some(token) => Some(parse_token(token, fingerprint).ok_or_else(|| {
                invalid(
                    ApiErrorKind::InvalidNextToken,
                    "NextToken is invalid or was not issued for these parameters",
                )
            })?),
        };
        let oldest = now - RETENTION;
        let mut matching: Vec<&Recorded> = if insights {
            Vec::new()
        } else {
            self.events
                .iter()
                .filter(|e| e.region == caller.region)
                .filter(|e| e.event_time >= oldest && e.event_time + self.lag <= now)
                .filter(|e| start.is_none_or(|s| e.event_time >= s))
                .filter(|e| end.is_none_or(|t| e.event_time <= t))
                .filter(|e| match &filter {
                    None => true,
                    Some((key, value)) => match key.as_str() {
                        "EventName" => value == "BatchMeterUsage",
                        "EventSource" => value == EVENT_SOURCE,
                        "EventId" => *value == e.event_id,
                        "ReadOnly" => value == "false",
                        "Username" => value == "awsmp-sim",
                        "AccessKeyId" => *value == e.access_key_id,
                        _ => false, // ResourceType / ResourceName: the events name none
                    },
                })
                .collect()
        };
        // Newest first; ties in order of arrival, newest first.
        matching.sort_by_key(|e| std::cmp::Reverse((e.event_time, e.seq)));
        let position = |e: &Recorded| (e.event_time.timestamp_millis(), e.seq);
        let remaining: Vec<&Recorded> = matching
            .into_iter()
            .filter(|e| after.is_none_or(|p| position(e) < p))
            .collect();
        let limit = usize::try_from(max_results).unwrap_or(50);
        let page: Vec<&Recorded> = remaining.iter().take(limit).copied().collect();
        let mut answer = json!({
            "Events": page
                .iter()
                .map(|e| json!({
                    "EventId": e.event_id,
                    "EventName": "BatchMeterUsage",
                    "ReadOnly": "false",
                    "AccessKeyId": e.access_key_id,
                    "EventTime": e.event_time.timestamp(),
                    "EventSource": EVENT_SOURCE,
                    "Username": "awsmp-sim",
                    "Resources": [],
                    "CloudTrailEvent": e.json,
                }))
                .collect::<Vec<_>>(),
        });
        if remaining.len() > page.len()
            && let Some(last) = page.last()
        {
            let (millis, seq) = position(last);
            answer["NextToken"] = Value::from(format!("{fingerprint:016x}.{millis}.{seq}"));
        }
        Ok(answer)
    }
}

fn fnv(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn parse_token(token: &str, fingerprint: u64) -> Option<(i64, u64)> {
    let mut parts = token.split('.');
    let print = u64::from_str_radix(parts.next()?, 16).ok()?;
    let millis = parts.next()?.parse().ok()?;
    let seq = parts.next()?.parse().ok()?;
    (print == fingerprint && parts.next().is_none()).then_some((millis, seq))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_caller_from_the_sigv4_scope() {
        let header = "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261130/eu-west-1/cloudtrail/aws4_request, SignedHeaders=host, Signature=abc";
        assert_eq!(
            Caller::from_authorization(Some(header)),
            Caller {
                region: "eu-west-1".into(),
                access_key_id: "AKIDEXAMPLE".into()
            }
        );
        assert_eq!(Caller::from_authorization(None), Caller::default());
        assert_eq!(
            Caller::from_authorization(Some("Bearer x")),
            Caller::default()
        );
    }

    #[test]
    fn wire_records_become_cloudtrail_records() {
        let wire = json!({"UsageRecords": [{"Timestamp": 1_773_572_400, "CustomerIdentifier": "", "Dimension": "requests",
            "Quantity": 5, "CustomerAWSAccountId": "111122223333", "LicenseArn": "arn:x",
            "UsageAllocations": [{"AllocatedUsageQuantity": 5, "Tags": [{"Key": "k", "Value": "v"}]}]}]});
        let converted = to_cloudtrail_case(&wire);
        assert_eq!(
            converted,
            json!({"usageRecords": [{"timestamp": "Mar 15, 2026 11:00:00 AM", "customerIdentifier": "", "dimension": "requests",
                "quantity": 5, "customerAWSAccountId": "111122223333", "licenseArn": "arn:x",
                "usageAllocations": [{"allocatedUsageQuantity": 5, "tags": [{"key": "k", "value": "v"}]}]}]})
        );
        assert_eq!(
            format_record_time("2018-04-19T16:32:50Z".parse().unwrap()),
            "Apr 19, 2018 4:32:50 PM"
        );
    }

    #[test]
    fn is_lookup_events_accepts_both_target_spellings() {
        assert!(is_lookup_events(Some("CloudTrail_20131101.LookupEvents")));
        assert!(is_lookup_events(Some(
            "com.amazonaws.cloudtrail.v20131101.CloudTrail_20131101.LookupEvents"
        )));
        assert!(!is_lookup_events(Some("CloudTrail_20131101.LookupEventz")));
        assert!(!is_lookup_events(Some(
            "AWSMPMeteringService.BatchMeterUsage"
        )));
        assert!(!is_lookup_events(None));
    }
}

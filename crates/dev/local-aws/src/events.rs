//! The events the local AWS hands to functions as AWS would, built from the documented
//! JSON shapes (what the runtime really deserializes): EventBridge's `Scheduled Event`
//! for a `rate(...)` rule firing at an instant, and the SQS event a Lambda event-source
//! mapping delivers. The local stack, the e2e harness and the simulation build them
//! here, once.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

/// The `Scheduled Event` EventBridge sends when `rule` fires at `time`, in `account`
/// and `region` (whole-second `time`, as EventBridge writes it).
pub fn scheduled_event(
    account: &str,
    region: &str,
    rule: &str,
    time: DateTime<Utc>,
) -> serde_json::Value {
    serde_json::json!({
        "version": "0",
        "id": format!("{rule}-{}", time.timestamp()),
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": account,
        "time": time.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
        "region": region,
        "resources": [format!("arn:aws:events:{region}:{account}:rule/{rule}")],
        "detail": {}
    })
}

/// One received message, as an event-source mapping hands it to the function.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SqsRecord {
    /// `messageId`.
    pub message_id: String,
    /// `receiptHandle`.
    pub receipt_handle: String,
    /// The body.
    pub body: String,
    /// `md5OfBody`, as SQS computed it (empty where nobody did).
    pub md5_of_body: String,
    /// The message's system attributes (`ApproximateReceiveCount`, `SentTimestamp`,
    /// ...), as `ReceiveMessage` returned them.
    pub attributes: BTreeMap<String, String>,
}

/// The SQS event a Lambda event-source mapping delivers for `records` received from
/// the queue `queue_arn` (`arn:aws:sqs:REGION:ACCOUNT:NAME`: each record's
/// `eventSourceARN`, and its Region each record's `awsRegion`).
pub fn sqs_event(queue_arn: &str, records: &[SqsRecord]) -> serde_json::Value {
    let region = queue_arn.split(':').nth(3).unwrap_or_default();
    let records: Vec<serde_json::Value> = records
        .iter()
        .map(|r| {
            serde_json::json!({
                "messageId": r.message_id,
                "receiptHandle": r.receipt_handle,
                "body": r.body,
                "attributes": r.attributes,
                "messageAttributes": {},
                "md5OfBody": r.md5_of_body,
                "eventSource": "aws:sqs",
                "eventSourceARN": queue_arn,
                "awsRegion": region
            })
        })
        .collect();
    serde_json::json!({ "Records": records })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_the_sqs_event_a_mapping_delivers() {
        let record = SqsRecord {
            message_id: "m-1".into(),
            receipt_handle: "r-1".into(),
            body: "{}".into(),
            md5_of_body: String::new(),
            attributes: BTreeMap::from([("ApproximateReceiveCount".into(), "2".into())]),
        };
        let event = sqs_event("arn:aws:sqs:eu-west-1:123456789012:work", &[record]);
        let first = &event["Records"][0];
        assert_eq!(first["messageId"], "m-1");
        assert_eq!(first["eventSource"], "aws:sqs");
        assert_eq!(
            first["eventSourceARN"],
            "arn:aws:sqs:eu-west-1:123456789012:work"
        );
        assert_eq!(first["awsRegion"], "eu-west-1");
        assert_eq!(first["attributes"]["ApproximateReceiveCount"], "2");
    }

    #[test]
    fn is_the_scheduled_event_eventbridge_sends() {
        let at = DateTime::parse_from_rfc3339("2026-11-30T10:05:00.500Z")
            .map(|t| t.with_timezone(&Utc))
            .unwrap_or_default();
        let event = scheduled_event("123456789012", "us-east-1", "awsmp-submitter", at);
        assert_eq!(event["detail-type"], "Scheduled Event");
        assert_eq!(event["source"], "aws.events");
        assert_eq!(event["time"], "2026-11-30T10:05:00Z");
        assert_eq!(
            event["resources"][0],
            "arn:aws:events:us-east-1:123456789012:rule/awsmp-submitter"
        );
        assert_eq!(event["id"], format!("awsmp-submitter-{}", at.timestamp()));
    }
}

//! The events the local AWS hands to functions as AWS would: EventBridge's
//! `Scheduled Event` for a `rate(...)` rule firing at an instant (the local stack's
//! schedules and the e2e harness build it here, once).

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

#[cfg(test)]
mod tests {
    use super::*;

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

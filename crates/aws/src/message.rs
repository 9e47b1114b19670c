//! Reading the work messages the discoverer and the aggregator enqueue
//! ([`crate::SqsWorkQueue`] writes them).

use awsmp_core::ports::WorkMessage;

/// An SQS body that is not a [`WorkMessage`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("message body is not a work message ({reason}); body starts with {excerpt:?}")]
pub struct WorkMessageError {
    /// What serde found wrong.
    pub reason: String,
    /// The first characters of the body.
    pub excerpt: String,
}

/// Reads an SQS body written by [`crate::SqsWorkQueue`].
pub fn parse_work_message(body: &str) -> Result<WorkMessage, WorkMessageError> {
    serde_json::from_str(body).map_err(|e| WorkMessageError {
        reason: e.to_string(),
        excerpt: body.chars().take(120).collect(),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use awsmp_core::model::{GroupKey, ReasonCode};

    #[test]
    fn work_messages_round_trip_and_garbage_is_explained() {
        let group = GroupKey {
            license_arn: "arn:aws:license-manager::1:license:l-1".into(),
            customer_aws_account_id: "111122223333".into(),
            dimension: "requests".into(),
            hour: "2026-11-30T10".parse().unwrap(),
        };
        let messages = [
            WorkMessage::Aggregate {
                group: group.clone(),
                flush: true,
                price: None,
            },
            WorkMessage::Cleanup {
                group,
                aggregated: vec!["a".into()],
                rejected: vec![("b".into(), ReasonCode::MalformedTimestamp)],
            },
        ];
        for message in messages {
            let body = serde_json::to_string(&message).unwrap();
            assert_eq!(parse_work_message(&body).unwrap(), message);
        }
        let err = parse_work_message(r#"{"kind":"explode"}"#).unwrap_err();
        assert!(err.to_string().contains("explode"), "{err}");
        assert!(parse_work_message("").is_err());
    }
}

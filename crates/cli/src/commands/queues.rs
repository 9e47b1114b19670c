//! Queue depths for `awsmp status`: each queue's messages and its dead-letter queue's,
//! found through the queue's own redrive policy.

use std::collections::BTreeMap;

use aws_sdk_sqs::types::QueueAttributeName;
use awsmp_operate::status::QueueDepth;

use crate::error::CommandError;

/// An SQS call's failure, with the SDK's whole error context.
pub(crate) fn aws_error(what: &str, e: impl std::error::Error) -> CommandError {
    CommandError::Aws(format!(
        "{what}: {}",
        aws_sdk_sqs::error::DisplayErrorContext(&e)
    ))
}

/// Messages visible plus in flight in `url`, and the URL of its dead-letter queue.
pub async fn depth(
    sqs: &aws_sdk_sqs::Client,
    url: &str,
) -> Result<(u64, Option<String>), CommandError> {
    let out = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
        .attribute_names(QueueAttributeName::RedrivePolicy)
        .send()
        .await
        .map_err(|e| aws_error(&format!("GetQueueAttributes {url}"), e))?;
    let attrs = out.attributes();
    let count = |name: QueueAttributeName| {
        attrs
            .and_then(|a| a.get(&name))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let depth = count(QueueAttributeName::ApproximateNumberOfMessages)
        + count(QueueAttributeName::ApproximateNumberOfMessagesNotVisible);
    let dlq_name = attrs
        .and_then(|a| a.get(&QueueAttributeName::RedrivePolicy))
        .and_then(|p| serde_json::from_str::<serde_json::Value>(p).ok())
        .and_then(|p| p.get("deadLetterTargetArn")?.as_str().map(str::to_string))
        .and_then(|arn| arn.rsplit(':').next().map(str::to_string));
    let dlq_url = match dlq_name {
        Some(name) => Some(
            sqs.get_queue_url()
                .queue_name(&name)
                .send()
                .await
                .map_err(|e| aws_error(&format!("GetQueueUrl {name}"), e))?
                .queue_url()
                .unwrap_or_default()
                .to_string(),
        ),
        None => None,
    };
    Ok((depth, dlq_url))
}

/// Every named queue's depth and its DLQ's.
pub async fn depths(
    sqs: &aws_sdk_sqs::Client,
    queues: &BTreeMap<String, String>,
) -> Result<Vec<QueueDepth>, CommandError> {
    let mut out = Vec::new();
    for (name, url) in queues {
        let (depth, dlq) = depth(sqs, url).await?;
        let dead_letters = match dlq {
            Some(dlq) => Some(self::depth(sqs, &dlq).await?.0),
            None => None,
        };
        out.push(QueueDepth {
            name: name.clone(),
            depth,
            dead_letters,
        });
    }
    Ok(out)
}

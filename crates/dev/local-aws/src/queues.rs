//! SQS queues for tests: plain, or with a dead-letter queue and a redrive policy, as
//! the templates define them.

use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::QueueAttributeName;

use crate::error::LocalAwsError;

/// How to create a queue.
#[derive(Debug, Clone, Default)]
pub struct QueueOptions {
    /// With a DLQ named `<name>-dlq`, receiving messages after this many receives.
    pub dlq_max_receive_count: Option<u32>,
    /// Visibility timeout in seconds (SQS default 30 when unset).
    pub visibility_timeout_secs: Option<u32>,
}

/// A created queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatedQueue {
    /// Queue URL.
    pub url: String,
    /// Its DLQ's URL, when one was asked for.
    pub dlq_url: Option<String>,
}

/// Creates a plain queue; returns its URL.
pub async fn create_queue(client: &Client, name: &str) -> Result<String, LocalAwsError> {
    Ok(create_queue_with(client, name, &QueueOptions::default())
        .await?
        .url)
}

/// Creates a queue with a DLQ receiving after `max_receive_count` receives.
pub async fn create_queue_with_dlq(
    client: &Client,
    name: &str,
    max_receive_count: u32,
) -> Result<CreatedQueue, LocalAwsError> {
    let options = QueueOptions {
        dlq_max_receive_count: Some(max_receive_count),
        ..QueueOptions::default()
    };
    create_queue_with(client, name, &options).await
}

/// Creates a queue as `options` say.
pub async fn create_queue_with(
    client: &Client,
    name: &str,
    options: &QueueOptions,
) -> Result<CreatedQueue, LocalAwsError> {
    let mut dlq_url = None;
    let mut request = client.create_queue().queue_name(name);
    if let Some(max_receive_count) = options.dlq_max_receive_count {
        let dlq_name = format!("{name}-dlq");
        let url = queue_url_of(
            client.create_queue().queue_name(&dlq_name).send().await,
            &dlq_name,
        )?;
        let attrs = client
            .get_queue_attributes()
            .queue_url(&url)
            .attribute_names(QueueAttributeName::QueueArn)
            .send()
            .await
            .map_err(|e| LocalAwsError::aws(format!("GetQueueAttributes {dlq_name}"), &e))?;
        let arn = attrs
            .attributes()
            .and_then(|a| a.get(&QueueAttributeName::QueueArn))
            .cloned()
            .ok_or_else(|| LocalAwsError::Aws {
                operation: format!("GetQueueAttributes {dlq_name}"),
                message: "no QueueArn returned".into(),
            })?;
        request = request.attributes(
            QueueAttributeName::RedrivePolicy,
            format!(r#"{{"deadLetterTargetArn":"{arn}","maxReceiveCount":"{max_receive_count}"}}"#),
        );
        dlq_url = Some(url);
    }
    if let Some(timeout) = options.visibility_timeout_secs {
        request = request.attributes(QueueAttributeName::VisibilityTimeout, timeout.to_string());
    }
    let url = queue_url_of(request.send().await, name)?;
    Ok(CreatedQueue { url, dlq_url })
}

fn queue_url_of<E, R>(
    result: Result<
        aws_sdk_sqs::operation::create_queue::CreateQueueOutput,
        aws_sdk_sqs::error::SdkError<E, R>,
    >,
    name: &str,
) -> Result<String, LocalAwsError>
where
    E: std::error::Error + 'static,
    R: std::fmt::Debug + 'static,
{
    let out = result.map_err(|e| LocalAwsError::aws(format!("CreateQueue {name}"), &e))?;
    out.queue_url.ok_or_else(|| LocalAwsError::Aws {
        operation: format!("CreateQueue {name}"),
        message: "no QueueUrl returned".into(),
    })
}

//! [`WorkQueue`] on SQS: `SendMessageBatch` in tens and within the batch payload
//! limit, JSON bodies, every refused message reported by its index.

use async_trait::async_trait;
use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::SendMessageBatchRequestEntry;
use awsmp_core::ports::{PortError, SendReport, WorkMessage, WorkQueue};
use tracing::instrument;

use crate::error::port_error;

/// Most entries one `SendMessageBatch` takes.
pub const SQS_BATCH_SIZE: usize = 10;
/// Largest message body SQS takes (256 KiB); bigger messages are reported, not sent.
pub const SQS_MAX_BODY_BYTES: usize = 256 * 1024;
/// Largest total payload of one `SendMessageBatch` (the sum of its message bodies):
/// 256 KiB, the classic SQS limit (newer queues take up to 1 MiB, but a queue keeps
/// the limit it was configured with, so the conservative one is used everywhere).
pub const SQS_MAX_BATCH_BYTES: usize = 256 * 1024;

pub use awsmp_core::pipeline::batch_ranges;

/// A work queue by URL. Bodies are the serde JSON of [`WorkMessage`]; read them back
/// with [`crate::parse_work_message`].
#[derive(Debug, Clone)]
pub struct SqsWorkQueue {
    client: Client,
    queue_url: String,
}

impl SqsWorkQueue {
    /// A queue at `queue_url`.
    pub fn new(client: Client, queue_url: impl Into<String>) -> Self {
        SqsWorkQueue {
            client,
            queue_url: queue_url.into(),
        }
    }

    /// The queue URL.
    pub fn queue_url(&self) -> &str {
        &self.queue_url
    }
}

#[async_trait]
impl WorkQueue for SqsWorkQueue {
    /// Sends in batches of at most ten messages and [`SQS_MAX_BATCH_BYTES`] of bodies. A
    /// message SQS refuses, one larger than [`SQS_MAX_BODY_BYTES`] (never sent), or one
    /// in a batch whose whole request failed is listed in [`SendReport::failed`]; the
    /// call fails as a whole only when no batch got through at all.
    #[instrument(skip(self, messages), fields(queue = %self.queue_url, messages = messages.len()))]
    async fn send(&self, messages: &[WorkMessage]) -> Result<SendReport, PortError> {
        let mut report = SendReport::default();
        let mut last_error = None;
        let mut any_sent = false;
        let mut entries: Vec<(usize, String)> = Vec::with_capacity(messages.len());
        for (index, message) in messages.iter().enumerate() {
            match serde_json::to_string(message) {
                Ok(body) if body.len() <= SQS_MAX_BODY_BYTES => entries.push((index, body)),
                Ok(body) => {
                    tracing::warn!(index, bytes = body.len(), "work message too large for SQS");
                    report.failed.push(index);
                }
                Err(e) => {
                    tracing::warn!(index, error = %e, "work message does not serialize");
                    report.failed.push(index);
                }
            }
        }
        let sizes: Vec<usize> = entries.iter().map(|(_, body)| body.len()).collect();
        for range in batch_ranges(&sizes, SQS_BATCH_SIZE, SQS_MAX_BATCH_BYTES) {
            let chunk = &entries[range];
            let mut request = self.client.send_message_batch().queue_url(&self.queue_url);
            for (index, body) in chunk {
                let entry = SendMessageBatchRequestEntry::builder()
                    .id(index.to_string())
                    .message_body(body)
                    .build()
                    .map_err(|e| PortError::Failed {
                        operation: "SendMessageBatch",
                        message: format!("cannot build entry {index}: {e}"),
                    })?;
                request = request.entries(entry);
            }
            match request.send().await {
                Ok(out) => {
                    any_sent = true;
                    let ok: std::collections::BTreeSet<&str> =
                        out.successful().iter().map(|e| e.id()).collect();
                    for failure in out.failed() {
                        tracing::warn!(
                            id = failure.id(),
                            code = failure.code(),
                            message = failure.message(),
                            "SQS refused a work message"
                        );
                    }
                    // Anything not reported successful counts as failed, so nothing is
                    // ever dropped without the caller knowing.
                    for (index, _) in chunk {
                        if !ok.contains(index.to_string().as_str()) {
                            report.failed.push(*index);
                        }
                    }
                }
                Err(e) => {
                    let error = port_error("SendMessageBatch", e);
                    tracing::warn!(error = %error, "a SendMessageBatch request failed");
                    report.failed.extend(chunk.iter().map(|(i, _)| *i));
                    last_error = Some(error);
                }
            }
        }
        match last_error {
            Some(error) if !any_sent => Err(error),
            _ => {
                report.failed.sort_unstable();
                Ok(report)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_hold_at_most_ten_entries_and_the_byte_limit() {
        // Ten small bodies per batch.
        assert_eq!(batch_ranges(&[1; 25], 10, 100), vec![0..10, 10..20, 20..25]);
        // Bytes close a batch before ten entries: 40 + 40 fits 100, a third does not.
        assert_eq!(batch_ranges(&[40; 5], 10, 100), vec![0..2, 2..4, 4..5]);
        // Exactly at the limit still fits.
        assert_eq!(batch_ranges(&[50, 50, 1], 10, 100), vec![0..2, 2..3]);
        // A body at the limit travels alone; the order is kept.
        assert_eq!(batch_ranges(&[1, 100, 1], 10, 100), vec![0..1, 1..2, 2..3]);
        assert!(batch_ranges(&[], 10, 100).is_empty());
        // With the SQS limits: 200 KiB bodies go one per request.
        let big = [200 * 1024; 3];
        assert_eq!(
            batch_ranges(&big, SQS_BATCH_SIZE, SQS_MAX_BATCH_BYTES),
            vec![0..1, 1..2, 2..3]
        );
        for range in batch_ranges(&[100_000, 100_000, 60_000, 3_000, 1], 10, 262_144) {
            let total: usize = [100_000, 100_000, 60_000, 3_000, 1][range].iter().sum();
            assert!(total <= 262_144);
        }
    }
}

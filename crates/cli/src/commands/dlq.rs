//! `awsmp dlq redrive QUEUE`: moves messages from a queue's dead-letter queue back to
//! it, each sent before it is deleted (a crash in between delivers it twice, which
//! every handler tolerates; it never loses one). `--dry-run` counts and shows.

use aws_sdk_sqs::types::{DeleteMessageBatchRequestEntry, SendMessageBatchRequestEntry};

use super::{Ctx, stores};
use crate::commands::queues::{aws_error, depth};
use crate::error::CommandError;
use crate::output::Outcome;

/// A refused send back to the queue: the queues' policies let only the functions that
/// feed them, and the stack's admin role, send there.
fn send_refused(e: impl std::error::Error) -> CommandError {
    match aws_error("SendMessageBatch", e) {
        CommandError::Aws(text) if text.contains("AccessDenied") => CommandError::Aws(format!(
            "{text}\n  The queue's policy refuses SendMessage to all but the functions that feed it and the admin \
             role the stack names: run `dlq redrive` as the role in the main stack's WorkQueueAdminRoleArn \
             (work, deprovision-work, cleanup queues) or the events stack's EventsQueueAdminRoleArn \
             (subscription queue), deploying with that parameter set if it is empty."
        )),
        other => other,
    }
}

/// What a redrive did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct Redrive {
    /// Messages in the DLQ before.
    pub found: u64,
    /// Messages moved.
    pub moved: u64,
    /// Bodies seen (dry run: up to the first 10).
    pub samples: Vec<String>,
}

/// Moves up to `count` messages from `queue_url`'s DLQ back to it.
pub async fn redrive(
    sqs: &aws_sdk_sqs::Client,
    queue_url: &str,
    count: u64,
    dry_run: bool,
) -> Result<Redrive, CommandError> {
    let (_, dlq) = depth(sqs, queue_url).await?;
    let dlq = dlq.ok_or_else(|| {
        CommandError::NotFound(format!(
            "{queue_url} has no dead-letter queue (no RedrivePolicy)"
        ))
    })?;
    let mut report = Redrive {
        found: depth(sqs, &dlq).await?.0,
        ..Redrive::default()
    };
    if dry_run {
        let out = sqs
            .receive_message()
            .queue_url(&dlq)
            .max_number_of_messages(10)
            .visibility_timeout(0)
            .send()
            .await
            .map_err(|e| aws_error("ReceiveMessage", e))?;
        report.samples = out
            .messages()
            .iter()
            .filter_map(|m| m.body().map(str::to_string))
            .collect();
        return Ok(report);
    }
    while report.moved < count {
        let want = i32::try_from((count - report.moved).min(10)).unwrap_or(10);
        let out = sqs
            .receive_message()
            .queue_url(&dlq)
            .max_number_of_messages(want)
            .visibility_timeout(60)
            .send()
            .await
            .map_err(|e| aws_error("ReceiveMessage", e))?;
        let messages = out.messages();
        if messages.is_empty() {
            break;
        }
        let mut sends = Vec::new();
        for (i, m) in messages.iter().enumerate() {
            sends.push(
                SendMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .message_body(m.body().unwrap_or_default())
                    .build()
                    .map_err(|e| CommandError::Aws(format!("SendMessageBatch entry: {e}")))?,
            );
        }
        let sent = sqs
            .send_message_batch()
            .queue_url(queue_url)
            .set_entries(Some(sends))
            .send()
            .await
            .map_err(send_refused)?;
        // Only what was sent is deleted; a failed send stays in the DLQ.
        let mut deletes = Vec::new();
        for ok in sent.successful() {
            let Some(m) = ok.id().parse::<usize>().ok().and_then(|i| messages.get(i)) else {
                continue;
            };
            deletes.push(
                DeleteMessageBatchRequestEntry::builder()
                    .id(ok.id())
                    .receipt_handle(m.receipt_handle().unwrap_or_default())
                    .build()
                    .map_err(|e| CommandError::Aws(format!("DeleteMessageBatch entry: {e}")))?,
            );
        }
        let moved = deletes.len() as u64;
        if !deletes.is_empty() {
            sqs.delete_message_batch()
                .queue_url(&dlq)
                .set_entries(Some(deletes))
                .send()
                .await
                .map_err(|e| aws_error("DeleteMessageBatch", e))?;
        }
        report.moved += moved;
        if let Some(failed) = sent.failed().first() {
            return Err(CommandError::Aws(format!(
                "moved {} message(s), then SendMessageBatch refused one: {} (the rest stay in the DLQ)",
                report.moved,
                failed.message().unwrap_or(failed.code())
            )));
        }
    }
    Ok(report)
}

/// Renders a redrive.
pub fn render(
    report: &Redrive,
    queue: &str,
    dry_run: bool,
    format: crate::output::Format,
) -> crate::output::Outcome {
    let text = match format {
        crate::output::Format::Json => crate::output::json(report),
        crate::output::Format::Human if dry_run => {
            let mut out = format!(
                "{} message(s) in the {queue} queue's DLQ (dry run: nothing moved)\n",
                report.found
            );
            for body in &report.samples {
                out.push_str(&format!("  {body}\n"));
            }
            out
        }
        crate::output::Format::Human => format!(
            "moved {} of {} message(s) from the {queue} queue's DLQ back to it\n",
            report.moved, report.found
        ),
    };
    crate::output::Outcome::ok(text)
}

/// Dead-letter queues.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Move messages from a queue's DLQ back to it (sent, then deleted: none lost).
    ///
    /// Example: awsmp dlq redrive work --count 10 --dry-run
    Redrive {
        /// The queue: work, cleanup, deprovision (from the stack outputs), or a queue URL.
        queue: String,
        /// At most this many messages.
        #[arg(long, default_value_t = 1000)]
        count: u64,
        /// Count and show up to 10 messages; move nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

impl Command {
    /// Redrives the queue of each deployment named.
    pub async fn run(self, ctx: &Ctx<'_>) -> Result<Vec<Outcome>, CommandError> {
        let Command::Redrive {
            queue,
            count,
            dry_run,
        } = self;
        let mut out = Vec::new();
        for s in stores(ctx.deployment).await? {
            let url =
                if queue.starts_with("http") {
                    queue.clone()
                } else {
                    // A name the stack does not output is a bad argument, not a missing
                    // deployment: the deployment was found.
                    s.deployment.queues.get(&queue).cloned().ok_or_else(|| {
                    CommandError::Usage(format!(
                        "no queue {queue:?} in the stack outputs (known: {}); pass its URL instead",
                        s.deployment.queues.keys().cloned().collect::<Vec<_>>().join(", ")
                    ))
                })?
                };
            let report = redrive(&s.sqs, &url, count, dry_run).await?;
            out.push(render(&report, &queue, dry_run, ctx.format));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_send_the_queue_policy_refuses_names_the_admin_role_to_run_as() {
        let denied = std::io::Error::other(
            "AccessDenied: User: arn:aws:sts::1:assumed-role/dev/s is not authorized to perform: sqs:sendmessage",
        );
        let CommandError::Aws(text) = send_refused(denied) else {
            panic!("an AWS error");
        };
        assert!(text.starts_with("SendMessageBatch: "), "{text}");
        assert!(text.contains("WorkQueueAdminRoleArn"), "{text}");
        assert!(text.contains("EventsQueueAdminRoleArn"), "{text}");

        let other = std::io::Error::other("ServiceUnavailable");
        let CommandError::Aws(text) = send_refused(other) else {
            panic!("an AWS error");
        };
        assert!(!text.contains("WorkQueueAdminRoleArn"), "{text}");
    }
}

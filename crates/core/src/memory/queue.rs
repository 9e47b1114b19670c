//! [`WorkQueue`] in memory: messages go through their JSON body, as over SQS.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use crate::ports::{PortError, SendReport, WorkMessage, WorkQueue};
use crate::sync::lock;

/// Largest SQS message body [`MemoryWorkQueue`] accepts by default (the classic SQS
/// limit of 256 KiB; conservative, so an oversized message shows up in tests).
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 256 * 1024;

/// Decides whether a message send fails.
type FailPredicate = Box<dyn Fn(&WorkMessage) -> bool + Send + Sync>;

struct QueueState {
    messages: VecDeque<WorkMessage>,
    fail_where: Option<FailPredicate>,
    next_errors: VecDeque<PortError>,
    send_calls: usize,
    max_message_bytes: usize,
}

/// [`WorkQueue`] in memory. Each accepted message goes through its JSON body (as over
/// SQS), so a message that does not round-trip fails the send. Messages are refused
/// (reported in [`SendReport::failed`], never stored) when they match the predicate
/// set with [`MemoryWorkQueue::fail_where`] or exceed the body size limit; a whole send
/// fails with the errors queued by [`MemoryWorkQueue::fail_next_send`].
#[derive(Clone)]
pub struct MemoryWorkQueue {
    state: Arc<Mutex<QueueState>>,
}

impl Default for MemoryWorkQueue {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for MemoryWorkQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = lock(&self.state);
        f.debug_struct("MemoryWorkQueue")
            .field("messages", &state.messages.len())
            .field("send_calls", &state.send_calls)
            .finish()
    }
}

impl MemoryWorkQueue {
    /// An empty queue with the default body limit.
    pub fn new() -> Self {
        MemoryWorkQueue {
            state: Arc::new(Mutex::new(QueueState {
                messages: VecDeque::new(),
                fail_where: None,
                next_errors: VecDeque::new(),
                send_calls: 0,
                max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            })),
        }
    }

    /// Sets the largest accepted message body in bytes.
    pub fn with_max_message_bytes(self, bytes: usize) -> Self {
        lock(&self.state).max_message_bytes = bytes;
        self
    }

    /// From now on, refuses every message for which `predicate` is true.
    pub fn fail_where(&self, predicate: impl Fn(&WorkMessage) -> bool + Send + Sync + 'static) {
        lock(&self.state).fail_where = Some(Box::new(predicate));
    }

    /// Stops refusing messages set up with [`MemoryWorkQueue::fail_where`].
    pub fn clear_failures(&self) {
        lock(&self.state).fail_where = None;
    }

    /// Makes the next send fail as a whole with `error` (queued, one-shot).
    pub fn fail_next_send(&self, error: PortError) {
        lock(&self.state).next_errors.push_back(error);
    }

    /// The accepted messages, oldest first, without removing them.
    pub fn messages(&self) -> Vec<WorkMessage> {
        lock(&self.state).messages.iter().cloned().collect()
    }

    /// Removes and returns every accepted message, oldest first.
    pub fn drain(&self) -> Vec<WorkMessage> {
        lock(&self.state).messages.drain(..).collect()
    }

    /// Number of accepted messages waiting.
    pub fn len(&self) -> usize {
        lock(&self.state).messages.len()
    }

    /// Whether no message is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of `send` calls so far (including failed ones).
    pub fn send_calls(&self) -> usize {
        lock(&self.state).send_calls
    }
}

#[async_trait]
impl WorkQueue for MemoryWorkQueue {
    async fn send(&self, messages: &[WorkMessage]) -> Result<SendReport, PortError> {
        let mut state = lock(&self.state);
        state.send_calls += 1;
        if let Some(error) = state.next_errors.pop_front() {
            return Err(error);
        }
        let mut report = SendReport::default();
        for (index, message) in messages.iter().enumerate() {
            let body = serde_json::to_string(message).map_err(|e| PortError::Failed {
                operation: "send",
                message: format!("work message does not serialize: {e}"),
            })?;
            let refused = body.len() > state.max_message_bytes
                || state.fail_where.as_ref().is_some_and(|fail| fail(message));
            if refused {
                report.failed.push(index);
                continue;
            }
            let received: WorkMessage =
                serde_json::from_str(&body).map_err(|e| PortError::Failed {
                    operation: "send",
                    message: format!("work message does not round-trip through JSON: {e}"),
                })?;
            state.messages.push_back(received);
        }
        Ok(report)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::memory::fixtures::*;
    #[tokio::test]
    async fn work_queue_records_refuses_chosen_messages_and_drains() {
        let queue = MemoryWorkQueue::new();
        let keep = WorkMessage::Aggregate {
            group: group("a", "2026-11-30T10"),
            flush: false,
            price: None,
        };
        let refuse = WorkMessage::Aggregate {
            group: group("b", "2026-11-30T10"),
            flush: true,
            price: None,
        };
        queue.fail_where(
            |m| matches!(m, WorkMessage::Aggregate { group, .. } if group.dimension == "b"),
        );
        let report = queue
            .send(&[keep.clone(), refuse.clone(), keep.clone()])
            .await
            .unwrap();
        assert_eq!(report.failed, vec![1]);
        assert_eq!(queue.len(), 2);
        queue.clear_failures();
        queue.fail_next_send(PortError::Transient {
            operation: "send",
            message: "down".into(),
        });
        assert!(queue.send(std::slice::from_ref(&refuse)).await.is_err());
        assert_eq!(
            queue.send(std::slice::from_ref(&refuse)).await.unwrap(),
            SendReport::default()
        );
        assert_eq!(queue.send_calls(), 3);
        assert_eq!(queue.drain(), vec![keep.clone(), keep, refuse]);
        assert!(queue.is_empty());

        let small = MemoryWorkQueue::new().with_max_message_bytes(64);
        let big = WorkMessage::Cleanup {
            group: group("a", "2026-11-30T10"),
            aggregated: vec!["x".repeat(100)],
            rejected: vec![],
        };
        assert_eq!(small.send(&[big]).await.unwrap().failed, vec![0]);
    }
}

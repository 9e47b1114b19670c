//! [`EventBus`] on EventBridge: one `PutEvents` call per batch (the caller keeps to ten
//! entries and 256 KB), each entry's answer kept in order.

use async_trait::async_trait;
use aws_sdk_eventbridge::Client;
use aws_sdk_eventbridge::types::PutEventsRequestEntry;
use awsmp_core::ports::{BusEvent, EventBus, PortError};

use crate::error::{failed, port_error};

/// A bus by name (`default`: the account's default event bus in the client's Region).
#[derive(Debug, Clone)]
pub struct EventBridgeBus {
    client: Client,
    bus_name: String,
}

impl EventBridgeBus {
    /// The bus `bus_name`.
    pub fn new(client: Client, bus_name: impl Into<String>) -> Self {
        EventBridgeBus {
            client,
            bus_name: bus_name.into(),
        }
    }
}

#[async_trait]
impl EventBus for EventBridgeBus {
    async fn put(&self, events: &[BusEvent]) -> Result<Vec<Option<String>>, PortError> {
        let entries: Vec<PutEventsRequestEntry> = events
            .iter()
            .map(|e| {
                PutEventsRequestEntry::builder()
                    .event_bus_name(&self.bus_name)
                    .source(e.source)
                    .detail_type(e.detail_type)
                    .detail(&e.detail)
                    .set_resources(Some(e.resources.clone()))
                    .build()
            })
            .collect();
        let output = self
            .client
            .put_events()
            .set_entries(Some(entries))
            .send()
            .await
            .map_err(|e| port_error("PutEvents", e))?;
        let answers = output.entries();
        if answers.len() != events.len() {
            return Err(failed(
                "PutEvents",
                format!("{} answers for {} entries", answers.len(), events.len()),
            ));
        }
        Ok(answers
            .iter()
            .map(|a| {
                a.error_code().map(|code| match a.error_message() {
                    Some(message) => format!("{code}: {message}"),
                    None => code.to_string(),
                })
            })
            .collect())
    }
}

//! [`EventBus`] on EventBridge: one `PutEvents` call per batch (the caller keeps to ten
//! entries and 256 KB), each entry's answer kept in order.

use std::sync::Arc;

use async_trait::async_trait;
use aws_config::SdkConfig;
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

    /// The account's default bus in `sdk`'s Region, its client built once on `sdk`:
    /// where every stream function (outcome events, buyer events) puts its events.
    pub fn default_bus(sdk: &SdkConfig) -> Self {
        EventBridgeBus::new(Client::new(sdk), "default")
    }
}

/// The handler state of a function that puts events on the account's default bus (the
/// stream functions: outcome events, buyer events): its settings and the bus. Each such
/// crate's `State` is this, on its own `Config`.
#[derive(Clone)]
pub struct BusState<C> {
    /// Settings.
    pub config: Arc<C>,
    /// The default event bus.
    pub bus: Arc<dyn EventBus>,
}

impl<C: Clone> BusState<C> {
    /// Builds the EventBridge client once, on `sdk`, for `config`.
    pub fn connect(sdk: &SdkConfig, config: &C) -> Self {
        BusState {
            config: Arc::new(config.clone()),
            bus: Arc::new(EventBridgeBus::default_bus(sdk)),
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

//! The HTTP usage API's use cases, for sellers who record usage from any language or
//! cloud: `POST /usage/events` ([`envelope`] reads the batch, [`record`] writes each
//! event through the one checked, idempotent write every writer shares) and
//! `GET /usage/events/{id}` ([`fate`]: how far the event has gone), and
//! `GET /subscriptions/{licenseArn}` ([`entitlement`]: is the buyer entitled, and is
//! usage written now billed). The Lambda
//! (`awsmp-usage-api`) turns HTTP into these calls and their answers back into HTTP.
//!
//! Event ids are idempotency keys per license, as for every writer of the usage table
//! (a CloudEvent's `source` and `id` together, [`envelope::event_key`]): a retried key
//! with the same usage writes nothing and answers `duplicate`, with the same key and
//! other usage it answers `conflict`, also when the event would be refused by now.

pub mod entitlement;
pub mod envelope;
pub mod fate;
pub mod record;

pub use entitlement::{Entitlement, EntitlementError, UsageBilling, entitlement};
pub use envelope::{EnvelopeError, EventRefusal, MediaType, PostedEvent, event_key, parse_batch};
pub use fate::{EventFate, Fate, event_fate};
pub use record::{BatchError, Target, Verdict, record_batch};

/// The most events one `POST /usage/events` carries.
pub const MAX_EVENTS: usize = 100;

/// The largest body one `POST /usage/events` carries (1 MB).
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

#[cfg(test)]
mod tests;

//! Subscriber lifecycle: parses the Marketplace EventBridge events (source
//! `aws.agreement-marketplace`) and applies them to a [`Subscriber`](crate::model::Subscriber) row as pure,
//! order-safe transitions; also the deprovisioning expiry used by deprovision-cleanup.
//!
//! | event | effect on the row |
//! |---|---|
//! | `License Updated - *` | upsert: `productCode`, `agreementId`, `agreementStatus=active`, `subscriptionStatus=active` |
//! | `License Deprovisioned - *` | `subscriptionStatus=deprovisioning`, `deprovisioningExpiry = time + 1 h` |
//! | `Purchase Agreement Ended - *` | `agreementStatus=inactive` only |
//! | `Purchase Agreement Amended - *` | `agreementStatus=active` only if it had none; otherwise nothing |
//! | `Purchase Agreement Created - *`, anything else | ignored |
//! | [`expire_deprovisioning`] | `deprovisioning` past its expiry -> `inactive` |
//!
//! The event JSON becomes a [`MarketplaceEvent`] in `event`'s parser; what an event
//! does to a row, and in which order events may apply, is `transition`'s status
//! machine.

pub mod buyer_events;
pub mod deprovision;
mod event;
#[cfg(test)]
mod fixtures;
pub mod reconcile;
pub mod subscribers;
pub mod subscription;
mod transition;

pub use event::{
    CONSUMED_DETAIL_TYPES, EVENT_SOURCE, EventParseError, EventTarget, MarketplaceEvent,
    normalize_license_arn,
};
pub use transition::{DEPROVISIONING_WINDOW, Transition, apply, expire_deprovisioning};

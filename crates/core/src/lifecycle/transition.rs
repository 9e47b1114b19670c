//! The subscriber row's status machine: what each [`MarketplaceEvent`] does to a
//! [`Subscriber`] row, as pure, order-safe transitions, and the deprovisioning expiry
//! used by deprovision-cleanup.
//!
//! Ordering rules (events arrive out of order and more than once):
//! - `agreementStatus` and `subscriptionStatus` each have their own guard instant
//!   (`agreementEventAt`, `subscriptionEventAt`, whole seconds). An event before the
//!   guard of the status it would change is stale and changes nothing.
//! - An event in the SAME second as the guard is ordered by the lifecycle, because
//!   within one second the guard cannot tell which came first: License Updated is
//!   before License Deprovisioned (active -> deprovisioning), and License Updated or
//!   Amended is before Purchase Agreement Ended (active -> inactive). So a same-second
//!   event applies when it is the later kind than the one the row's status shows
//!   (a Deprovisioned in the second of the Updated that activated the row opens the
//!   window; an Ended in the second of that Updated ends the agreement), and changes
//!   nothing when it is the same kind (a true duplicate, e.g. a redelivery or the
//!   Manufacturer and Proposer copies) or the earlier kind (an Updated delivered after
//!   the same-second Deprovisioned). Both delivery orders end in the same row. One
//!   exception: a License Updated naming another agreement than the row's (a
//!   replacement) applies in the same second as the old agreement's last event.
//! - Only License Updated touches both statuses, and each half of it is applied under its
//!   own guard.
//! - `deprovisioning` and `inactive` subscriptions are never reactivated, and an ended
//!   agreement is never reactivated, not even by a newer event: that comes back as
//!   [`Transition::ReactivationRefused`] so the caller logs it.

use chrono::Duration;

use super::event::MarketplaceEvent;
use crate::model::{AgreementStatus, Subscriber, SubscriptionStatus};
use crate::time::Instant;

/// Length of the final-usage window opened by License Deprovisioned.
pub const DEPROVISIONING_WINDOW: Duration = Duration::hours(1);

/// What [`apply`] decided for one row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transition {
    /// Nothing to write (duplicate, stale, ignored, or no change).
    Unchanged {
        /// Why, for logs.
        reason: &'static str,
    },
    /// Write this row (with [`crate::ports::SubscriberStore::put_lifecycle`]; its
    /// `version` is still the version read, as the store expects).
    Write {
        /// The row as it must be stored.
        row: Subscriber,
        /// What changed, for logs.
        reason: &'static str,
    },
    /// The event would reactivate a deprovisioning/inactive subscription or an ended
    /// agreement; nothing is written. Log it as a warning: Marketplace is not expected
    /// to send this.
    ReactivationRefused {
        /// Why, for logs.
        reason: &'static str,
    },
    /// The event does not apply to the given row (no row yet for an agreement event,
    /// or the row belongs to another license, account or agreement). For an agreement
    /// event with no row at all, the caller may retry later: the License Updated that
    /// creates the row may still be on its way.
    NoMatchingRow {
        /// Why, for logs.
        reason: &'static str,
    },
}

impl Transition {
    /// The reason, for logs.
    pub fn reason(&self) -> &'static str {
        match self {
            Transition::Unchanged { reason }
            | Transition::Write { reason, .. }
            | Transition::ReactivationRefused { reason }
            | Transition::NoMatchingRow { reason } => reason,
        }
    }

    /// The row to write, if any.
    pub fn row(&self) -> Option<&Subscriber> {
        match self {
            Transition::Write { row, .. } => Some(row),
            _ => None,
        }
    }
}

/// How an event's time compares with a status's guard. `SameSecond` is decided by
/// the lifecycle order of the event and the row's status (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Order {
    Newer,
    SameSecond,
    Stale,
}

fn order(guard: Option<Instant>, time: Instant) -> Order {
    match guard {
        None => Order::Newer,
        Some(g) if time > g => Order::Newer,
        Some(g) if time == g => Order::SameSecond,
        Some(_) => Order::Stale,
    }
}

/// Applies one event to the current row (`None` if the row does not exist). Pure.
///
/// License events create the row when it is missing. Agreement events never create a
/// row (they carry no license ARN): the caller loads the agreement's rows and applies
/// the event to each; with no row at all the result is [`Transition::NoMatchingRow`].
///
/// Decisions beyond the status table:
/// - License Updated: the subscription half applies only if newer than
///   `subscriptionEventAt`; if it is older or in the same second (Updated is the first
///   subscription event of a second), the whole event changes nothing. The agreement
///   half applies only if newer than `agreementEventAt`, and never turns an ended
///   agreement (same agreement id) back to active; a License Updated naming a different
///   agreement (a replacement or renewal) moves the row to that agreement, also in the
///   same second as the old agreement's last event.
/// - License Deprovisioned: applies if newer than `subscriptionEventAt` or in the same
///   second (it follows that second's License Updated). A row already deprovisioning
///   keeps its first window (a newer duplicate never extends it); an inactive row stays
///   inactive. A missing `productCode` or `agreementId` is filled in from the event;
///   existing ones are kept.
/// - Purchase Agreement Ended: applies if newer than `agreementEventAt`, or in the same
///   second unless the agreement is already ended (then it is a duplicate).
/// - Purchase Agreement Amended: carries no state, so it only sets `agreementStatus=active`
///   on a row that has no agreement status yet (an amendment proves the agreement is
///   live). On an active row it writes nothing and does not move the guard, so a
///   genuinely earlier Ended delivered late still ends the agreement. On an ended
///   agreement it is stale, or refused if newer.
pub fn apply(current: Option<&Subscriber>, event: &MarketplaceEvent) -> Transition {
    match event {
        MarketplaceEvent::LicenseUpdated {
            license_arn,
            account,
            product_code,
            agreement_id,
            time,
        } => license_updated(
            current,
            license_arn,
            account,
            product_code.as_deref(),
            agreement_id,
            *time,
        ),
        MarketplaceEvent::LicenseDeprovisioned {
            license_arn,
            account,
            product_code,
            agreement_id,
            time,
        } => license_deprovisioned(
            current,
            license_arn,
            account,
            product_code.as_deref(),
            agreement_id,
            *time,
        ),
        MarketplaceEvent::AgreementEnded {
            agreement_id,
            account,
            time,
        } => agreement_ended(current, agreement_id, account, *time),
        MarketplaceEvent::AgreementAmended {
            agreement_id,
            account,
            time,
        } => agreement_amended(current, agreement_id, account, *time),
        MarketplaceEvent::Ignored { .. } => Transition::Unchanged {
            reason: "event type not used by the subscriber lifecycle",
        },
    }
}

/// The row a license event starts from, or why the given row is not it.
fn license_row(
    current: Option<&Subscriber>,
    license_arn: &str,
    account: &str,
) -> Result<Subscriber, &'static str> {
    match current {
        None => Ok(Subscriber::new(license_arn, account)),
        Some(row) if row.license_arn == license_arn && row.customer_aws_account_id == account => {
            Ok(row.clone())
        }
        Some(_) => Err("row belongs to another license or account than the event"),
    }
}

fn license_updated(
    current: Option<&Subscriber>,
    license_arn: &str,
    account: &str,
    product_code: Option<&str>,
    agreement_id: &str,
    time: Instant,
) -> Transition {
    let row = match license_row(current, license_arn, account) {
        Ok(row) => row,
        Err(reason) => return Transition::NoMatchingRow { reason },
    };
    match order(row.subscription_event_at, time) {
        // License Updated is the first subscription event of a second: the status it
        // finds was set by this same event (a duplicate) or by a same-second
        // Deprovisioned, which comes after it.
        Order::SameSecond if row.subscription_status == Some(SubscriptionStatus::Active) => {
            return Transition::Unchanged {
                reason: "duplicate License Updated (same time already applied)",
            };
        }
        // Delivered after the same-second Deprovisioned it precedes: its subscription
        // half is already superseded, its agreement half still applies under its own
        // guard, so both delivery orders end in the same row.
        Order::SameSecond => {
            let mut next = row.clone();
            return match agreement_half(&row, &mut next, agreement_id, time) {
                AgreementHalf::Applied(_) => Transition::Write {
                    row: next,
                    reason: "License Updated ordered before the same-second subscription event \
                             already applied: agreement active, subscription untouched",
                },
                AgreementHalf::Kept(_) => Transition::Unchanged {
                    reason: "License Updated in the same second as the subscription event \
                             already applied is ordered before it: nothing to change",
                },
            };
        }
        Order::Stale => {
            return Transition::Unchanged {
                reason: "stale License Updated: a newer subscription event was already applied",
            };
        }
        Order::Newer => {}
    }
    if matches!(
        row.subscription_status,
        Some(SubscriptionStatus::Deprovisioning | SubscriptionStatus::Inactive)
    ) {
        return Transition::ReactivationRefused {
            reason: "License Updated after License Deprovisioned: a deprovisioned license is never reactivated",
        };
    }

    let mut next = row.clone();
    next.subscription_status = Some(SubscriptionStatus::Active);
    next.subscription_event_at = Some(time);
    if let Some(code) = product_code {
        next.product_code = Some(code.to_string());
    }

    let (AgreementHalf::Applied(reason) | AgreementHalf::Kept(reason)) =
        agreement_half(&row, &mut next, agreement_id, time);
    Transition::Write { row: next, reason }
}

/// What the agreement half of a License Updated did.
enum AgreementHalf {
    /// `next` now has the event's agreement, active.
    Applied(&'static str),
    /// The agreement of `next` is left as it was.
    Kept(&'static str),
}

/// The agreement half of a License Updated at `time` naming `agreement_id`, applied
/// to `next` under `row`'s agreement guard.
fn agreement_half(
    row: &Subscriber,
    next: &mut Subscriber,
    agreement_id: &str,
    time: Instant,
) -> AgreementHalf {
    let agreement_ended_here = row.agreement_status == Some(AgreementStatus::Inactive)
        && row.agreement_id.as_deref() == Some(agreement_id);
    let replacement = row
        .agreement_id
        .as_deref()
        .is_some_and(|current| current != agreement_id);
    let mut activate = |reason| {
        next.agreement_id = Some(agreement_id.to_string());
        next.agreement_status = Some(AgreementStatus::Active);
        next.agreement_event_at = Some(time);
        AgreementHalf::Applied(reason)
    };
    match order(row.agreement_event_at, time) {
        Order::Newer if agreement_ended_here => AgreementHalf::Kept(
            "subscription active; the agreement stays ended (never reactivated)",
        ),
        Order::Newer => activate("License Updated: agreement and subscription active"),
        // A replacement agreement starts in the second its predecessor's last event
        // happened, never before it.
        Order::SameSecond if replacement => activate(
            "License Updated for a replacement agreement: agreement and subscription active",
        ),
        Order::SameSecond if agreement_ended_here => AgreementHalf::Kept(
            "subscription active; the agreement ended in the same second stays ended",
        ),
        Order::SameSecond | Order::Stale => AgreementHalf::Kept(
            "subscription active; a newer agreement event already set the agreement",
        ),
    }
}

fn license_deprovisioned(
    current: Option<&Subscriber>,
    license_arn: &str,
    account: &str,
    product_code: Option<&str>,
    agreement_id: &str,
    time: Instant,
) -> Transition {
    let row = match license_row(current, license_arn, account) {
        Ok(row) => row,
        Err(reason) => return Transition::NoMatchingRow { reason },
    };
    let same_second = match order(row.subscription_event_at, time) {
        Order::Stale => {
            return Transition::Unchanged {
                reason: "stale License Deprovisioned: a newer subscription event was already applied",
            };
        }
        // In the second of the License Updated that activated the row, Deprovisioned
        // comes after it and applies; on a row it already moved on, it is a duplicate.
        Order::SameSecond => true,
        Order::Newer => false,
    };
    match row.subscription_status {
        Some(SubscriptionStatus::Deprovisioning) if same_second => Transition::Unchanged {
            reason: "duplicate License Deprovisioned (same time already applied)",
        },
        Some(SubscriptionStatus::Deprovisioning) => Transition::Unchanged {
            reason: "already deprovisioning: the first final-usage window stands",
        },
        Some(SubscriptionStatus::Inactive) => Transition::Unchanged {
            reason: "already inactive: the final-usage window has closed",
        },
        Some(SubscriptionStatus::Active) | None => {
            let mut next = row;
            next.subscription_status = Some(SubscriptionStatus::Deprovisioning);
            next.deprovisioning_expiry = Some(time + DEPROVISIONING_WINDOW);
            next.subscription_event_at = Some(time);
            if next.product_code.is_none() {
                next.product_code = product_code.map(str::to_string);
            }
            if next.agreement_id.is_none() {
                next.agreement_id = Some(agreement_id.to_string());
            }
            Transition::Write {
                row: next,
                reason: "License Deprovisioned: final-usage window open for 1 hour",
            }
        }
    }
}

/// The row an agreement event applies to, or why there is none.
fn agreement_row<'a>(
    current: Option<&'a Subscriber>,
    agreement_id: &str,
    account: &str,
) -> Result<&'a Subscriber, &'static str> {
    let Some(row) = current else {
        return Err("no subscriber row for this agreement yet");
    };
    if row.agreement_id.as_deref() != Some(agreement_id) {
        return Err("row belongs to another agreement than the event");
    }
    if row.customer_aws_account_id != account {
        return Err("row belongs to another buyer account than the event");
    }
    Ok(row)
}

fn agreement_ended(
    current: Option<&Subscriber>,
    agreement_id: &str,
    account: &str,
    time: Instant,
) -> Transition {
    let row = match agreement_row(current, agreement_id, account) {
        Ok(row) => row,
        Err(reason) => return Transition::NoMatchingRow { reason },
    };
    match order(row.agreement_event_at, time) {
        Order::SameSecond if row.agreement_status == Some(AgreementStatus::Inactive) => {
            Transition::Unchanged {
                reason: "duplicate Purchase Agreement Ended (same time already applied)",
            }
        }
        Order::Stale => Transition::Unchanged {
            reason: "stale Purchase Agreement Ended: a newer agreement event was already applied",
        },
        // Ended is the last agreement event of a second: after a same-second License
        // Updated or Amended it applies.
        Order::Newer | Order::SameSecond => {
            let mut next = row.clone();
            next.agreement_status = Some(AgreementStatus::Inactive);
            next.agreement_event_at = Some(time);
            Transition::Write {
                row: next,
                reason: "Purchase Agreement Ended: agreement inactive (subscription untouched)",
            }
        }
    }
}

fn agreement_amended(
    current: Option<&Subscriber>,
    agreement_id: &str,
    account: &str,
    time: Instant,
) -> Transition {
    let row = match agreement_row(current, agreement_id, account) {
        Ok(row) => row,
        Err(reason) => return Transition::NoMatchingRow { reason },
    };
    let order = order(row.agreement_event_at, time);
    match (row.agreement_status, order) {
        // Amended never moves the guard, so a same-second guard was set by License
        // Updated (then the agreement is active: nothing to add) or by Ended (which
        // comes after it).
        (_, Order::SameSecond) => Transition::Unchanged {
            reason: "Purchase Agreement Amended in the same second as the agreement event \
                     already applied: nothing to change",
        },
        (_, Order::Stale) => Transition::Unchanged {
            reason: "stale Purchase Agreement Amended: a newer agreement event was already applied",
        },
        (Some(AgreementStatus::Inactive), Order::Newer) => Transition::ReactivationRefused {
            reason: "Purchase Agreement Amended after Ended: an ended agreement is never reactivated",
        },
        (Some(AgreementStatus::Active), Order::Newer) => Transition::Unchanged {
            reason: "agreement already active; an amendment changes nothing stored",
        },
        (None, Order::Newer) => {
            let mut next = row.clone();
            next.agreement_status = Some(AgreementStatus::Active);
            next.agreement_event_at = Some(time);
            Transition::Write {
                row: next,
                reason: "Purchase Agreement Amended: agreement active",
            }
        }
    }
}

/// Closes a deprovisioning row whose final-usage window has passed
/// (`deprovisioningExpiry <= now`): `subscriptionStatus=inactive`, nothing else changes
/// (the expiry stays as the record of when the window closed). A deprovisioning row
/// with no expiry has no window to wait for and is closed too. `None` for every other row.
pub fn expire_deprovisioning(row: &Subscriber, now: Instant) -> Option<Subscriber> {
    if row.subscription_status != Some(SubscriptionStatus::Deprovisioning) {
        return None;
    }
    if row.deprovisioning_expiry.is_some_and(|expiry| expiry > now) {
        return None;
    }
    let mut next = row.clone();
    next.subscription_status = Some(SubscriptionStatus::Inactive);
    Some(next)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;

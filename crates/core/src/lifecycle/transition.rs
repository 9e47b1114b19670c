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
mod tests {
    use super::*;
    use crate::lifecycle::fixtures::*;

    /// The hours of 2026-11-30 the cases happen at.
    const H09: &str = "2026-11-30T09:00:00Z";
    const H10: &str = "2026-11-30T10:00:00Z";
    const H11: &str = "2026-11-30T11:00:00Z";
    const H12: &str = "2026-11-30T12:00:00Z";
    const H13: &str = "2026-11-30T13:00:00Z";

    /// License Updated for a replacement agreement of the same license and account.
    fn renewed(time: &str) -> MarketplaceEvent {
        MarketplaceEvent::LicenseUpdated {
            license_arn: LICENSE.into(),
            account: ACCOUNT.into(),
            product_code: Some(PRODUCT.into()),
            agreement_id: "agmt-renewed".into(),
            time: t(time),
        }
    }

    /// The row `event` writes over `row` (it must write one).
    fn written(row: Option<&Subscriber>, event: &MarketplaceEvent) -> Subscriber {
        apply(row, event).row().cloned().unwrap()
    }

    /// Applies events in order the way the subscription handler does (write what
    /// `apply` says, bump the version like the store), returning the row and the kinds.
    fn run(events: &[MarketplaceEvent]) -> (Option<Subscriber>, Vec<&'static str>) {
        let mut row: Option<Subscriber> = None;
        let mut kinds = Vec::new();
        for event in events {
            let transition = apply(row.as_ref(), event);
            kinds.push(match &transition {
                Transition::Unchanged { .. } => "unchanged",
                Transition::Write { .. } => "write",
                Transition::ReactivationRefused { .. } => "refused",
                Transition::NoMatchingRow { .. } => "no-row",
            });
            if let Transition::Write { row: mut next, .. } = transition {
                next.version += 1;
                row = Some(next);
            }
        }
        (row, kinds)
    }

    #[test]
    fn license_updated_creates_an_active_row() {
        let transition = apply(None, &updated(H10));
        let row = transition.row().unwrap();
        assert_eq!(row.license_arn, LICENSE);
        assert_eq!(row.customer_aws_account_id, ACCOUNT);
        assert_eq!(row.product_code.as_deref(), Some(PRODUCT));
        assert_eq!(row.agreement_id.as_deref(), Some(AGREEMENT));
        assert_eq!(row.agreement_status, Some(AgreementStatus::Active));
        assert_eq!(row.subscription_status, Some(SubscriptionStatus::Active));
        assert_eq!(row.agreement_event_at, Some(t(H10)));
        assert_eq!(row.subscription_event_at, Some(t(H10)));
        assert_eq!(
            row.version, 0,
            "the version read is kept for the conditional write"
        );
    }

    #[test]
    fn license_updated_keeps_registration_fields() {
        // GIVEN a row the register Lambda created (regions, no statuses, stored version 0)
        let mut registered = Subscriber::new(LICENSE, ACCOUNT);
        registered.registered_regions = vec!["eu-west-1".into()];
        registered.product_code = Some(PRODUCT.into());
        // WHEN License Updated arrives THEN only lifecycle fields change
        let row = written(Some(&registered), &updated(H10));
        assert_eq!(row.registered_regions, vec!["eu-west-1".to_string()]);
        assert_eq!(row.subscription_status, Some(SubscriptionStatus::Active));
    }

    #[test]
    fn deprovisioned_opens_a_one_hour_window_and_keeps_the_agreement() {
        let (row, kinds) = run(&[updated(H10), deprovisioned("2026-11-30T12:15:30Z")]);
        let row = row.unwrap();
        assert_eq!(kinds, ["write", "write"]);
        assert_eq!(
            row.subscription_status,
            Some(SubscriptionStatus::Deprovisioning)
        );
        assert_eq!(row.deprovisioning_expiry, Some(t("2026-11-30T13:15:30Z")));
        assert_eq!(row.subscription_event_at, Some(t("2026-11-30T12:15:30Z")));
        // The agreement and the subscription never move together.
        assert_eq!(row.agreement_status, Some(AgreementStatus::Active));
        assert_eq!(row.agreement_event_at, Some(t(H10)));
    }

    #[test]
    fn ended_sets_only_the_agreement_inactive() {
        let (row, kinds) = run(&[updated(H10), ended(H11)]);
        let row = row.unwrap();
        assert_eq!(kinds, ["write", "write"]);
        assert_eq!(row.agreement_status, Some(AgreementStatus::Inactive));
        assert_eq!(row.subscription_status, Some(SubscriptionStatus::Active));
        assert_eq!(row.subscription_event_at, Some(t(H10)));
        assert_eq!(row.deprovisioning_expiry, None);
    }

    /// Every ordering case: the sequence of events, the kind of each transition, and the
    /// final (agreementStatus, subscriptionStatus).
    #[test]
    fn ordering_table() {
        use AgreementStatus as A;
        use SubscriptionStatus as S;
        type Case = (
            &'static str,
            Vec<MarketplaceEvent>,
            Vec<&'static str>,
            (Option<A>, Option<S>),
        );
        let cases: Vec<Case> = vec![
            (
                "duplicate License Updated is a no-op",
                vec![updated(H10), updated(H10)],
                vec!["write", "unchanged"],
                (Some(A::Active), Some(S::Active)),
            ),
            (
                "newer License Updated refreshes an active row",
                vec![updated(H10), updated(H11)],
                vec!["write", "write"],
                (Some(A::Active), Some(S::Active)),
            ),
            (
                "stale License Updated after a newer one is a no-op",
                vec![updated(H11), updated(H10)],
                vec!["write", "unchanged"],
                (Some(A::Active), Some(S::Active)),
            ),
            (
                "stale License Updated after Deprovisioned never reactivates",
                vec![updated(H10), deprovisioned(H12), updated(H11)],
                vec!["write", "write", "unchanged"],
                (Some(A::Active), Some(S::Deprovisioning)),
            ),
            (
                "newer License Updated after Deprovisioned is refused",
                vec![updated(H10), deprovisioned(H12), updated(H13)],
                vec!["write", "write", "refused"],
                (Some(A::Active), Some(S::Deprovisioning)),
            ),
            (
                "Deprovisioned before any License Updated creates a deprovisioning row; the late Updated is stale",
                vec![deprovisioned(H12), updated(H10)],
                vec!["write", "unchanged"],
                (None, Some(S::Deprovisioning)),
            ),
            (
                "duplicate Deprovisioned keeps the first window",
                vec![deprovisioned(H12), deprovisioned(H12)],
                vec!["write", "unchanged"],
                (None, Some(S::Deprovisioning)),
            ),
            (
                "a newer Deprovisioned never extends the window",
                vec![deprovisioned(H12), deprovisioned("2026-11-30T12:30:00Z")],
                vec!["write", "unchanged"],
                (None, Some(S::Deprovisioning)),
            ),
            (
                "stale Deprovisioned after a newer License Updated is a no-op",
                vec![updated(H12), deprovisioned(H11)],
                vec!["write", "unchanged"],
                (Some(A::Active), Some(S::Active)),
            ),
            (
                "Ended before any row exists has no row to apply to",
                vec![ended(H09)],
                vec!["no-row"],
                (None, None),
            ),
            (
                "Ended before Updated (delivered after): the stale half leaves the agreement ended",
                vec![updated(H10), ended(H12), updated(H11)],
                vec!["write", "write", "write"],
                (Some(A::Inactive), Some(S::Active)),
            ),
            (
                "a newer License Updated never reactivates the same ended agreement",
                vec![updated(H10), ended(H12), updated(H13)],
                vec!["write", "write", "write"],
                (Some(A::Inactive), Some(S::Active)),
            ),
            (
                "duplicate Ended (Manufacturer and Proposer copies) is a no-op",
                vec![updated(H10), ended(H12), ended(H12)],
                vec!["write", "write", "unchanged"],
                (Some(A::Inactive), Some(S::Active)),
            ),
            (
                "stale Ended before the License Updated that activated the agreement is a no-op",
                vec![updated(H10), ended(H09)],
                vec!["write", "unchanged"],
                (Some(A::Active), Some(S::Active)),
            ),
            (
                "Amended on an active agreement writes nothing",
                vec![updated(H10), amended(H11)],
                vec!["write", "unchanged"],
                (Some(A::Active), Some(S::Active)),
            ),
            (
                "Amended does not move the guard: an earlier Ended delivered late still ends it",
                vec![updated(H10), amended(H12), ended(H11)],
                vec!["write", "unchanged", "write"],
                (Some(A::Inactive), Some(S::Active)),
            ),
            (
                "older Amended after Ended never reactivates",
                vec![updated(H10), ended(H12), amended(H11)],
                vec!["write", "write", "unchanged"],
                (Some(A::Inactive), Some(S::Active)),
            ),
            (
                "newer Amended after Ended is refused",
                vec![updated(H10), ended(H12), amended(H13)],
                vec!["write", "write", "refused"],
                (Some(A::Inactive), Some(S::Active)),
            ),
            (
                "Amended on a deprovisioning-created row (agreement unknown) activates the agreement only",
                vec![deprovisioned(H12), amended("2026-11-30T12:30:00Z")],
                vec!["write", "write"],
                (Some(A::Active), Some(S::Deprovisioning)),
            ),
            (
                "Ended during deprovisioning leaves the subscription deprovisioning",
                vec![
                    updated(H10),
                    deprovisioned(H12),
                    ended("2026-11-30T12:00:05Z"),
                ],
                vec!["write", "write", "write"],
                (Some(A::Inactive), Some(S::Deprovisioning)),
            ),
            (
                "Created and other types are ignored",
                vec![MarketplaceEvent::Ignored {
                    detail_type: "Purchase Agreement Created - Manufacturer".into(),
                }],
                vec!["unchanged"],
                (None, None),
            ),
        ];
        for (name, events, kinds, (agreement, subscription)) in cases {
            let (row, got_kinds) = run(&events);
            assert_eq!(got_kinds, kinds, "{name}");
            assert_eq!(
                row.as_ref().and_then(|r| r.agreement_status),
                agreement,
                "{name}"
            );
            assert_eq!(
                row.as_ref().and_then(|r| r.subscription_status),
                subscription,
                "{name}"
            );
        }
    }

    /// Events of different types in the same second (the guards have whole seconds)
    /// apply in lifecycle order whatever order they are delivered in: a true
    /// duplicate of the same type is the only same-second event that is dropped.
    #[test]
    fn same_second_events_of_different_types_apply_in_lifecycle_order() {
        use AgreementStatus as A;
        use SubscriptionStatus as S;
        const T: &str = H12;
        type Case = (&'static str, Vec<MarketplaceEvent>, (Option<A>, Option<S>));
        let cases: Vec<Case> = vec![
            (
                "Updated and Deprovisioned in one second: deprovisioning",
                vec![updated(T), deprovisioned(T)],
                (Some(A::Active), Some(S::Deprovisioning)),
            ),
            (
                "Updated, Ended in one second: the agreement ends",
                vec![updated(T), ended(T)],
                (Some(A::Inactive), Some(S::Active)),
            ),
            (
                "Updated, Ended and Deprovisioned in one second",
                vec![updated(T), ended(T), deprovisioned(T)],
                (Some(A::Inactive), Some(S::Deprovisioning)),
            ),
            (
                "Updated, Amended in one second: active",
                vec![updated(T), amended(T)],
                (Some(A::Active), Some(S::Active)),
            ),
            (
                "Amended, Ended in one second: ended",
                vec![deprovisioned(H11), amended(T), ended(T)],
                (Some(A::Inactive), Some(S::Deprovisioning)),
            ),
        ];
        for (name, events, (agreement, subscription)) in cases {
            // Every delivery order of the same-second events converges.
            let mut orders = vec![events.clone()];
            let mut reversed = events.clone();
            reversed.reverse();
            orders.push(reversed);
            if events.len() == 3 {
                orders.push(vec![
                    events[1].clone(),
                    events[0].clone(),
                    events[2].clone(),
                ]);
                orders.push(vec![
                    events[2].clone(),
                    events[0].clone(),
                    events[1].clone(),
                ]);
            }
            for order in orders {
                // The deprovisioned row of the Amended case must come first.
                if events[0] == deprovisioned(H11) && order[0] != events[0] {
                    continue;
                }
                // An agreement event that finds no row yet is redelivered (as the
                // subscription handler's queue does) after the others.
                let (row, kinds) = run(&order);
                let redelivered: Vec<MarketplaceEvent> = order
                    .iter()
                    .zip(&kinds)
                    .filter(|(_, kind)| **kind == "no-row")
                    .map(|(event, _)| event.clone())
                    .collect();
                let mut row = row.unwrap();
                for event in &redelivered {
                    if let Transition::Write { row: next, .. } = apply(Some(&row), event) {
                        row = next;
                    }
                }
                let names: Vec<&str> = order.iter().map(MarketplaceEvent::name).collect();
                assert_eq!(
                    row.agreement_status, agreement,
                    "{name}: {names:?} {kinds:?}"
                );
                assert_eq!(
                    row.subscription_status, subscription,
                    "{name}: {names:?} {kinds:?}"
                );
                if subscription == Some(S::Deprovisioning) {
                    assert!(row.deprovisioning_expiry.is_some(), "{name}: {names:?}");
                }
                // Applying every event once more changes nothing: they are duplicates now.
                for event in &order {
                    assert!(
                        matches!(apply(Some(&row), event), Transition::Unchanged { .. }),
                        "{name}: {names:?}: {} again must be a duplicate, got {:?}",
                        event.name(),
                        apply(Some(&row), event)
                    );
                }
            }
        }

        // Deprovisioned after Updated in the same second opens the window from that second.
        let (row, kinds) = run(&[updated(T), deprovisioned(T)]);
        assert_eq!(kinds, ["write", "write"]);
        assert_eq!(row.unwrap().deprovisioning_expiry, Some(t(H13)));
        // Delivered the other way round, the same-second Updated is the earlier one: it
        // is never "refused" (not a reactivation) and only its agreement half applies.
        let (row, kinds) = run(&[deprovisioned(T), updated(T)]);
        assert_eq!(kinds, ["write", "write"]);
        let row = row.unwrap();
        assert_eq!(
            row.subscription_status,
            Some(SubscriptionStatus::Deprovisioning)
        );
        assert_eq!(row.deprovisioning_expiry, Some(t(H13)));
        assert_eq!(row.subscription_event_at, Some(t(T)));
        assert_eq!(row.agreement_status, Some(AgreementStatus::Active));
        // A replacement agreement's License Updated in the second its predecessor ended
        // moves the row to the new agreement.
        let (row, kinds) = run(&[updated(H10), ended(T), renewed(T)]);
        let row = row.unwrap();
        assert_eq!(kinds, ["write", "write", "write"]);
        assert_eq!(row.agreement_id.as_deref(), Some("agmt-renewed"));
        assert_eq!(row.agreement_status, Some(AgreementStatus::Active));
        // ... but the ended agreement's own same-second License Updated never reopens it.
        let (row, _) = run(&[updated(H10), ended(T), updated(T)]);
        assert_eq!(
            row.unwrap().agreement_status,
            Some(AgreementStatus::Inactive)
        );
    }

    #[test]
    fn license_updated_for_a_replacement_agreement_moves_the_row() {
        let (row, kinds) = run(&[
            updated(H10),
            ended("2026-11-30T23:00:00Z"),
            renewed("2026-12-01T00:00:00Z"),
        ]);
        let row = row.unwrap();
        assert_eq!(kinds, ["write", "write", "write"]);
        assert_eq!(row.agreement_id.as_deref(), Some("agmt-renewed"));
        assert_eq!(row.agreement_status, Some(AgreementStatus::Active));
        // The old agreement's late events no longer match the row.
        assert_eq!(
            apply(Some(&row), &ended("2026-11-30T23:30:00Z")),
            Transition::NoMatchingRow {
                reason: "row belongs to another agreement than the event"
            }
        );
    }

    #[test]
    fn events_for_other_rows_do_not_apply() {
        let row = written(None, &updated(H10));
        let other_account = MarketplaceEvent::AgreementEnded {
            agreement_id: AGREEMENT.into(),
            account: "111122223333".into(),
            time: t(H11),
        };
        assert!(matches!(
            apply(Some(&row), &other_account),
            Transition::NoMatchingRow { .. }
        ));
        let other_license = MarketplaceEvent::LicenseDeprovisioned {
            license_arn: "arn:aws:license-manager::123456789012:license:l-other".into(),
            account: ACCOUNT.into(),
            product_code: None,
            agreement_id: AGREEMENT.into(),
            time: t(H11),
        };
        assert!(matches!(
            apply(Some(&row), &other_license),
            Transition::NoMatchingRow { .. }
        ));
    }

    #[test]
    fn deprovisioned_fills_missing_identity_but_keeps_existing() {
        let mut registered = Subscriber::new(LICENSE, ACCOUNT);
        registered.product_code = Some("registered-code".into());
        let row = written(Some(&registered), &deprovisioned(H12));
        assert_eq!(row.product_code.as_deref(), Some("registered-code"));
        assert_eq!(row.agreement_id.as_deref(), Some(AGREEMENT));
        assert_eq!(row.agreement_status, None);
    }

    #[test]
    fn expiry_closes_only_deprovisioning_rows_past_their_window() {
        let (row, _) = run(&[updated(H10), deprovisioned(H12)]);
        let row = row.unwrap();
        assert_eq!(expire_deprovisioning(&row, t("2026-11-30T12:59:59Z")), None);
        let closed = expire_deprovisioning(&row, t(H13)).unwrap();
        assert_eq!(
            closed.subscription_status,
            Some(SubscriptionStatus::Inactive)
        );
        assert_eq!(closed.deprovisioning_expiry, row.deprovisioning_expiry);
        assert_eq!(closed.agreement_status, row.agreement_status);
        assert_eq!(closed.version, row.version);
        // Closed rows, active rows and rows without a subscription are left alone.
        assert_eq!(
            expire_deprovisioning(&closed, t("2026-12-01T00:00:00Z")),
            None
        );
        let active = written(None, &updated(H10));
        assert_eq!(
            expire_deprovisioning(&active, t("2026-12-01T00:00:00Z")),
            None
        );
        // A deprovisioning row with no expiry has no window to wait for.
        let mut no_expiry = row.clone();
        no_expiry.deprovisioning_expiry = None;
        assert!(expire_deprovisioning(&no_expiry, t("2026-11-30T12:00:01Z")).is_some());
        // After closing, neither a newer Updated nor a newer Deprovisioned reopens it.
        assert!(matches!(
            apply(Some(&closed), &updated("2026-11-30T14:00:00Z")),
            Transition::ReactivationRefused { .. }
        ));
        assert!(matches!(
            apply(Some(&closed), &deprovisioned("2026-11-30T14:00:00Z")),
            Transition::Unchanged { .. }
        ));
    }
}

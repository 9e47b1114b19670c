//! Subscriber lifecycle: parses the Marketplace EventBridge events (source
//! `aws.agreement-marketplace`) and applies them to a [`Subscriber`] row as pure,
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

use chrono::{DateTime, Duration, Timelike, Utc};
use serde_json::Value;

use crate::model::{AgreementStatus, Subscriber, SubscriptionStatus};
use crate::time::Instant;

/// The only event source the lifecycle accepts.
pub const EVENT_SOURCE: &str = "aws.agreement-marketplace";

/// Length of the final-usage window opened by License Deprovisioned.
pub const DEPROVISIONING_WINDOW: Duration = Duration::hours(1);

/// A Marketplace event, reduced to what the lifecycle needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MarketplaceEvent {
    /// `License Updated - Manufacturer`: the license was provisioned or updated.
    LicenseUpdated {
        /// `detail.license.arn`, normalised by [`normalize_license_arn`].
        license_arn: String,
        /// `detail.acceptor.accountId`: the buyer.
        account: String,
        /// `detail.product.code`, when present.
        product_code: Option<String>,
        /// `detail.agreement.id`.
        agreement_id: String,
        /// The event's `time`.
        time: Instant,
    },
    /// `License Deprovisioned - Manufacturer`: the license is being revoked; the
    /// final-usage window opens.
    LicenseDeprovisioned {
        /// `detail.license.arn`, normalised by [`normalize_license_arn`].
        license_arn: String,
        /// `detail.acceptor.accountId`: the buyer.
        account: String,
        /// `detail.product.code`, when present.
        product_code: Option<String>,
        /// `detail.agreement.id`.
        agreement_id: String,
        /// The event's `time`.
        time: Instant,
    },
    /// `Purchase Agreement Ended - Manufacturer|Proposer`.
    AgreementEnded {
        /// `detail.agreement.id`.
        agreement_id: String,
        /// `detail.acceptor.accountId`: the buyer.
        account: String,
        /// The event's `time`.
        time: Instant,
    },
    /// `Purchase Agreement Amended - Manufacturer|Proposer`.
    AgreementAmended {
        /// `detail.agreement.id`.
        agreement_id: String,
        /// `detail.acceptor.accountId`: the buyer.
        account: String,
        /// The event's `time`.
        time: Instant,
    },
    /// A well-sourced event the lifecycle does not use (`Purchase Agreement Created - *`,
    /// a `License * - Proposer` event AWS does not document, or a detail-type AWS adds
    /// later): every detail-type not in [`CONSUMED_DETAIL_TYPES`].
    Ignored {
        /// The event's `detail-type`.
        detail_type: String,
    },
}

/// Which subscriber rows an event applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventTarget<'a> {
    /// Exactly one row, by its keys (license events; the row may not exist yet).
    Row {
        /// Partition key.
        license_arn: &'a str,
        /// Sort key.
        account: &'a str,
    },
    /// Every row of an agreement (agreement events carry no license ARN: look them up
    /// through the agreement index and apply the event to each).
    Agreement {
        /// The agreement id.
        agreement_id: &'a str,
    },
    /// No row (ignored events).
    Nothing,
}

impl MarketplaceEvent {
    /// Parses an EventBridge event given as JSON text.
    pub fn from_json_str(text: &str) -> Result<Self, EventParseError> {
        let value: Value =
            serde_json::from_str(text).map_err(|e| EventParseError::NotJson(e.to_string()))?;
        Self::from_json(&value)
    }

    /// Parses an EventBridge event. Unknown fields are ignored; a field of the wrong JSON
    /// type counts as missing. Events of a detail-type the lifecycle does not use are
    /// [`MarketplaceEvent::Ignored`] without further checks.
    pub fn from_json(event: &Value) -> Result<Self, EventParseError> {
        if !event.is_object() {
            return Err(EventParseError::NotAnObject);
        }
        let source = text_at(event, "/source");
        if source != Some(EVENT_SOURCE) {
            return Err(EventParseError::WrongSource {
                found: source.map(str::to_string),
            });
        }
        let detail_type = text_at(event, "/detail-type")
            .ok_or(EventParseError::MissingDetailType)?
            .to_string();
        let Some(kind) = EventKind::of(&detail_type) else {
            return Ok(MarketplaceEvent::Ignored { detail_type });
        };

        let account = match text_at(event, "/detail/acceptor/accountId") {
            None => return Err(EventParseError::MissingAcceptorAccount { detail_type }),
            Some(a) if !is_account_id(a) => {
                return Err(EventParseError::InvalidAcceptorAccount {
                    value: a.to_string(),
                    detail_type,
                });
            }
            Some(a) => a.to_string(),
        };
        let Some(agreement_id) = text_at(event, "/detail/agreement/id").map(str::to_string) else {
            return Err(EventParseError::MissingAgreementId { detail_type });
        };
        let time = match text_at(event, "/time") {
            None => return Err(EventParseError::MissingTime { detail_type }),
            Some(t) => parse_event_time(t).ok_or_else(|| EventParseError::BadTime {
                value: t.to_string(),
                detail_type: detail_type.clone(),
            })?,
        };

        match kind {
            EventKind::LicenseUpdated | EventKind::LicenseDeprovisioned => {
                let Some(arn) = text_at(event, "/detail/license/arn") else {
                    return Err(EventParseError::MissingLicenseArn { detail_type });
                };
                let license_arn = normalize_license_arn(arn);
                let product_code = text_at(event, "/detail/product/code").map(str::to_string);
                Ok(if kind == EventKind::LicenseUpdated {
                    MarketplaceEvent::LicenseUpdated {
                        license_arn,
                        account,
                        product_code,
                        agreement_id,
                        time,
                    }
                } else {
                    MarketplaceEvent::LicenseDeprovisioned {
                        license_arn,
                        account,
                        product_code,
                        agreement_id,
                        time,
                    }
                })
            }
            EventKind::AgreementEnded => Ok(MarketplaceEvent::AgreementEnded {
                agreement_id,
                account,
                time,
            }),
            EventKind::AgreementAmended => Ok(MarketplaceEvent::AgreementAmended {
                agreement_id,
                account,
                time,
            }),
        }
    }

    /// A short name for logs (`"License Updated"`, ..., or the raw detail-type when ignored).
    pub fn name(&self) -> &str {
        match self {
            MarketplaceEvent::LicenseUpdated { .. } => "License Updated",
            MarketplaceEvent::LicenseDeprovisioned { .. } => "License Deprovisioned",
            MarketplaceEvent::AgreementEnded { .. } => "Purchase Agreement Ended",
            MarketplaceEvent::AgreementAmended { .. } => "Purchase Agreement Amended",
            MarketplaceEvent::Ignored { detail_type } => detail_type,
        }
    }

    /// The rows this event applies to.
    pub fn target(&self) -> EventTarget<'_> {
        match self {
            MarketplaceEvent::LicenseUpdated {
                license_arn,
                account,
                ..
            }
            | MarketplaceEvent::LicenseDeprovisioned {
                license_arn,
                account,
                ..
            } => EventTarget::Row {
                license_arn,
                account,
            },
            MarketplaceEvent::AgreementEnded { agreement_id, .. }
            | MarketplaceEvent::AgreementAmended { agreement_id, .. } => {
                EventTarget::Agreement { agreement_id }
            }
            MarketplaceEvent::Ignored { .. } => EventTarget::Nothing,
        }
    }

    /// The event's time (`None` for ignored events, whose time is not read).
    pub fn time(&self) -> Option<Instant> {
        match self {
            MarketplaceEvent::LicenseUpdated { time, .. }
            | MarketplaceEvent::LicenseDeprovisioned { time, .. }
            | MarketplaceEvent::AgreementEnded { time, .. }
            | MarketplaceEvent::AgreementAmended { time, .. } => Some(*time),
            MarketplaceEvent::Ignored { .. } => None,
        }
    }
}

/// Every detail-type the lifecycle consumes; any other event of [`EVENT_SOURCE`] is
/// [`MarketplaceEvent::Ignored`]. The events stack's EventBridge rule matches exactly
/// these (a test reads the rule from `template-events.yaml`).
///
/// The license events are the Manufacturer's only: AWS documents `License Updated` and
/// `License Deprovisioned` for the Manufacturer alone, and the seller running this
/// pipeline is the product's manufacturer (it meters it). A `- Proposer` license event
/// is not documented; if AWS ever sent one, it would go to whoever extended the offer
/// (for a channel partner offer, another account than the manufacturer's), and the
/// manufacturer's own copy carries the same change. The agreement events are sent to
/// both roles (a seller extending its own offer is both), so both suffixes are
/// consumed; copies of one event are duplicates and apply once.
pub const CONSUMED_DETAIL_TYPES: [&str; 6] = [
    "License Updated - Manufacturer",
    "License Deprovisioned - Manufacturer",
    "Purchase Agreement Ended - Manufacturer",
    "Purchase Agreement Ended - Proposer",
    "Purchase Agreement Amended - Manufacturer",
    "Purchase Agreement Amended - Proposer",
];

/// The lifecycle-relevant detail-types ([`CONSUMED_DETAIL_TYPES`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EventKind {
    LicenseUpdated,
    LicenseDeprovisioned,
    AgreementEnded,
    AgreementAmended,
}

impl EventKind {
    fn of(detail_type: &str) -> Option<Self> {
        match detail_type {
            "License Updated - Manufacturer" => Some(EventKind::LicenseUpdated),
            "License Deprovisioned - Manufacturer" => Some(EventKind::LicenseDeprovisioned),
            "Purchase Agreement Ended - Manufacturer" | "Purchase Agreement Ended - Proposer" => {
                Some(EventKind::AgreementEnded)
            }
            "Purchase Agreement Amended - Manufacturer"
            | "Purchase Agreement Amended - Proposer" => Some(EventKind::AgreementAmended),
            _ => None,
        }
    }
}

/// Why an EventBridge event could not be read. Every variant names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EventParseError {
    /// The text is not JSON.
    #[error("event is not valid JSON: {0}")]
    NotJson(String),
    /// The JSON is not an object.
    #[error("event is not a JSON object")]
    NotAnObject,
    /// `source` is absent or not `aws.agreement-marketplace`.
    #[error("event source is {found:?}, expected \"aws.agreement-marketplace\"")]
    WrongSource {
        /// What `source` held, if it was a string.
        found: Option<String>,
    },
    /// `detail-type` is absent, empty or not a string.
    #[error("event has no detail-type")]
    MissingDetailType,
    /// A license event without `detail.license.arn`.
    #[error("{detail_type} event has no detail.license.arn")]
    MissingLicenseArn {
        /// The event's detail-type.
        detail_type: String,
    },
    /// No `detail.acceptor.accountId`.
    #[error("{detail_type} event has no detail.acceptor.accountId")]
    MissingAcceptorAccount {
        /// The event's detail-type.
        detail_type: String,
    },
    /// `detail.acceptor.accountId` is not a 12-digit AWS account id.
    #[error(
        "{detail_type} event has detail.acceptor.accountId {value:?}, not a 12-digit AWS account id"
    )]
    InvalidAcceptorAccount {
        /// The event's detail-type.
        detail_type: String,
        /// The value found.
        value: String,
    },
    /// No `detail.agreement.id`.
    #[error("{detail_type} event has no detail.agreement.id")]
    MissingAgreementId {
        /// The event's detail-type.
        detail_type: String,
    },
    /// No `time`.
    #[error("{detail_type} event has no time")]
    MissingTime {
        /// The event's detail-type.
        detail_type: String,
    },
    /// `time` is not an RFC 3339 instant.
    #[error(
        "{detail_type} event has time {value:?}, not an RFC 3339 instant such as 2024-08-30T21:36:03Z"
    )]
    BadTime {
        /// The event's detail-type.
        detail_type: String,
        /// The value found.
        value: String,
    },
}

/// A non-empty (after trimming) string at a JSON pointer.
fn text_at<'a>(value: &'a Value, pointer: &str) -> Option<&'a str> {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

fn is_account_id(s: &str) -> bool {
    s.len() == 12 && s.bytes().all(|b| b.is_ascii_digit())
}

/// Parses the envelope `time`. EventBridge writes whole-second `...Z`; any RFC 3339
/// instant is accepted and truncated to whole seconds, because the guards are stored
/// with whole seconds and a redelivered event must compare equal to its stored guard.
fn parse_event_time(text: &str) -> Option<Instant> {
    let parsed = DateTime::parse_from_rfc3339(text).ok()?.with_timezone(&Utc);
    parsed.with_nanosecond(0)
}

/// Normalises a license ARN from an event. AWS's own License Updated example carries
/// `aws:license-manager:us-east-1:123456789012:l-...`, without the `arn:` prefix, which
/// would fail the `LicenseArn` pattern of `BatchMeterUsage` and never join the usage
/// rows; such values get `arn:` prepended. Anything else is kept as given (trimmed).
pub fn normalize_license_arn(arn: &str) -> String {
    let arn = arn.trim();
    if arn.starts_with("aws:") || arn.starts_with("aws-") {
        format!("arn:{arn}")
    } else {
        arn.to_string()
    }
}

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
    use crate::time::parse_usage_timestamp;
    use serde_json::json;

    const LICENSE: &str =
        "arn:aws:license-manager::123456789012:license:l-e52ca6f38bf84d0fafb8802ca15ac11x";
    const ACCOUNT: &str = "845735284135";
    const AGREEMENT: &str = "agmt-4mwg1nevbokzw95eca5797ixs";
    const PRODUCT: &str = "aw4fgf5tyo5w2ap6fEXAMPLE";

    fn t(s: &str) -> Instant {
        parse_usage_timestamp(s).unwrap()
    }

    /// An EventBridge event shaped exactly like AWS's examples.
    fn envelope(detail_type: &str, time: &str, detail: Value) -> Value {
        json!({
            "version": "0",
            "id": "12345678-1234-1234-1234-123456789012",
            "detail-type": detail_type,
            "source": "aws.agreement-marketplace",
            "account": "123456789012",
            "time": time,
            "region": "us-east-1",
            "resources": ["arn:aws:aws-marketplace::aws:agreement:agmt-4mwg1nevbokzw95eca5797ixs"],
            "detail": detail,
        })
    }

    fn license_detail(arn: &str) -> Value {
        json!({
            "requestId": "3d4c9f9b-b809-4f5e-9fac-a9ae98b05cbb",
            "catalog": "AWSMarketplace",
            "agreement": {"id": AGREEMENT},
            "product": {"code": PRODUCT, "id": "prod-qtwveEXAMPLE"},
            "license": {"arn": arn},
            "acceptor": {"accountId": ACCOUNT},
            "proposer": {"accountId": "123456512334"},
            "offer": {"id": "8kkr91jo647j3qxlcjhlqce7y"}
        })
    }

    fn ended_detail() -> Value {
        json!({
            "requestId": "3d4c9f9b-b809-4f5e-9fac-a9ae98b05cbb",
            "catalog": "AWSMarketplace",
            "agreement": {"id": AGREEMENT, "status": "CANCELLED"},
            "resaleAuthorization": {"id": "resaleauthz-yaxjqxiskysxa"},
            "acceptor": {"accountId": ACCOUNT},
            "proposer": {"accountId": "123456512334"},
            "offer": {"id": "offer-1234567890123"}
        })
    }

    fn updated(time: &str) -> MarketplaceEvent {
        MarketplaceEvent::LicenseUpdated {
            license_arn: LICENSE.into(),
            account: ACCOUNT.into(),
            product_code: Some(PRODUCT.into()),
            agreement_id: AGREEMENT.into(),
            time: t(time),
        }
    }

    fn deprovisioned(time: &str) -> MarketplaceEvent {
        MarketplaceEvent::LicenseDeprovisioned {
            license_arn: LICENSE.into(),
            account: ACCOUNT.into(),
            product_code: Some(PRODUCT.into()),
            agreement_id: AGREEMENT.into(),
            time: t(time),
        }
    }

    fn ended(time: &str) -> MarketplaceEvent {
        MarketplaceEvent::AgreementEnded {
            agreement_id: AGREEMENT.into(),
            account: ACCOUNT.into(),
            time: t(time),
        }
    }

    fn amended(time: &str) -> MarketplaceEvent {
        MarketplaceEvent::AgreementAmended {
            agreement_id: AGREEMENT.into(),
            account: ACCOUNT.into(),
            time: t(time),
        }
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
    fn parses_every_aws_example_shape() {
        let aws_arn =
            "aws:license-manager:us-east-1:123456789012:l-e52ca6f38bf84d0fafb8802ca15ac11x";
        let normalised = format!("arn:{aws_arn}");
        let cases: Vec<(Value, MarketplaceEvent)> = vec![
            (
                envelope(
                    "License Updated - Manufacturer",
                    "2024-08-30T21:36:03Z",
                    license_detail(aws_arn),
                ),
                MarketplaceEvent::LicenseUpdated {
                    license_arn: normalised.clone(),
                    account: ACCOUNT.into(),
                    product_code: Some(PRODUCT.into()),
                    agreement_id: AGREEMENT.into(),
                    time: t("2024-08-30T21:36:03Z"),
                },
            ),
            (
                envelope(
                    "License Deprovisioned - Manufacturer",
                    "2024-08-30T21:36:03Z",
                    license_detail(LICENSE),
                ),
                MarketplaceEvent::LicenseDeprovisioned {
                    license_arn: LICENSE.into(),
                    account: ACCOUNT.into(),
                    product_code: Some(PRODUCT.into()),
                    agreement_id: AGREEMENT.into(),
                    time: t("2024-08-30T21:36:03Z"),
                },
            ),
            (
                // Not documented by AWS and not matched by the events rule: ignored.
                envelope(
                    "License Updated - Proposer",
                    "2024-08-30T21:36:03Z",
                    license_detail(LICENSE),
                ),
                MarketplaceEvent::Ignored {
                    detail_type: "License Updated - Proposer".into(),
                },
            ),
            (
                envelope(
                    "License Deprovisioned - Proposer",
                    "2024-08-30T21:36:03Z",
                    license_detail(LICENSE),
                ),
                MarketplaceEvent::Ignored {
                    detail_type: "License Deprovisioned - Proposer".into(),
                },
            ),
            (
                envelope(
                    "Purchase Agreement Ended - Manufacturer",
                    "2024-08-30T21:36:03Z",
                    ended_detail(),
                ),
                ended("2024-08-30T21:36:03Z"),
            ),
            (
                envelope(
                    "Purchase Agreement Ended - Proposer",
                    "2024-08-30T21:36:03Z",
                    ended_detail(),
                ),
                ended("2024-08-30T21:36:03Z"),
            ),
            (
                envelope(
                    "Purchase Agreement Amended - Manufacturer",
                    "2024-08-30T21:36:03Z",
                    ended_detail(),
                ),
                amended("2024-08-30T21:36:03Z"),
            ),
            (
                envelope(
                    "Purchase Agreement Amended - Proposer",
                    "2024-08-30T21:36:03Z",
                    ended_detail(),
                ),
                amended("2024-08-30T21:36:03Z"),
            ),
            (
                envelope(
                    "Purchase Agreement Created - Proposer",
                    "2024-08-30T21:36:03Z",
                    ended_detail(),
                ),
                MarketplaceEvent::Ignored {
                    detail_type: "Purchase Agreement Created - Proposer".into(),
                },
            ),
            (
                // Ignored events are not validated further: no detail at all is fine.
                json!({"source": "aws.agreement-marketplace", "detail-type": "Purchase Agreement Created - Manufacturer"}),
                MarketplaceEvent::Ignored {
                    detail_type: "Purchase Agreement Created - Manufacturer".into(),
                },
            ),
            (
                json!({"source": "aws.agreement-marketplace", "detail-type": "Something New - Manufacturer"}),
                MarketplaceEvent::Ignored {
                    detail_type: "Something New - Manufacturer".into(),
                },
            ),
        ];
        for (json, expected) in cases {
            assert_eq!(
                MarketplaceEvent::from_json(&json).unwrap(),
                expected,
                "{json}"
            );
        }
    }

    #[test]
    fn exactly_the_consumed_detail_types_are_not_ignored() {
        let candidates = [
            "License Updated - Manufacturer",
            "License Updated - Proposer",
            "License Deprovisioned - Manufacturer",
            "License Deprovisioned - Proposer",
            "Purchase Agreement Created - Manufacturer",
            "Purchase Agreement Created - Proposer",
            "Purchase Agreement Amended - Manufacturer",
            "Purchase Agreement Amended - Proposer",
            "Purchase Agreement Ended - Manufacturer",
            "Purchase Agreement Ended - Proposer",
        ];
        let mut detail = license_detail(LICENSE);
        detail["agreement"]["status"] = json!("CANCELLED");
        let consumed: Vec<&str> = candidates
            .into_iter()
            .filter(|detail_type| {
                let event = envelope(detail_type, "2024-08-30T21:36:03Z", detail.clone());
                !matches!(
                    MarketplaceEvent::from_json(&event).unwrap(),
                    MarketplaceEvent::Ignored { .. }
                )
            })
            .collect();
        assert_eq!(consumed, sorted_like(&CONSUMED_DETAIL_TYPES, &candidates));
    }

    /// `set` in the order of `order`.
    fn sorted_like<'a>(set: &[&'a str], order: &[&str]) -> Vec<&'a str> {
        let mut out: Vec<&str> = set.to_vec();
        out.sort_by_key(|d| order.iter().position(|o| o == d));
        out
    }

    #[test]
    fn parses_from_text_and_truncates_fractional_time() {
        let mut event = envelope(
            "License Updated - Manufacturer",
            "2024-08-30T21:36:03.789Z",
            license_detail(LICENSE),
        );
        let parsed = MarketplaceEvent::from_json_str(&event.to_string()).unwrap();
        assert_eq!(parsed, updated("2024-08-30T21:36:03Z"));
        event["time"] = json!("2024-08-30T23:36:03+02:00");
        assert_eq!(
            MarketplaceEvent::from_json(&event).unwrap(),
            updated("2024-08-30T21:36:03Z")
        );
        // A license event without a product code still parses.
        event["detail"]["product"] = Value::Null;
        let MarketplaceEvent::LicenseUpdated { product_code, .. } =
            MarketplaceEvent::from_json(&event).unwrap()
        else {
            panic!("not License Updated");
        };
        assert_eq!(product_code, None);
    }

    #[test]
    fn rejects_bad_events_with_specific_errors() {
        let good = envelope(
            "License Updated - Manufacturer",
            "2024-08-30T21:36:03Z",
            license_detail(LICENSE),
        );
        let with = |pointer: &str, value: Value| {
            let mut event = good.clone();
            *event.pointer_mut(pointer).unwrap() = value;
            event
        };
        let ended_event = envelope(
            "Purchase Agreement Ended - Proposer",
            "2024-08-30T21:36:03Z",
            ended_detail(),
        );
        let lu = "License Updated - Manufacturer".to_string();
        let cases: Vec<(Value, EventParseError)> = vec![
            (json!([1, 2]), EventParseError::NotAnObject),
            (
                with("/source", json!("aws.marketplace")),
                EventParseError::WrongSource {
                    found: Some("aws.marketplace".into()),
                },
            ),
            (
                with("/source", Value::Null),
                EventParseError::WrongSource { found: None },
            ),
            (
                with("/detail-type", json!("")),
                EventParseError::MissingDetailType,
            ),
            (
                with("/detail-type", json!(7)),
                EventParseError::MissingDetailType,
            ),
            (
                with("/detail/license", json!({})),
                EventParseError::MissingLicenseArn {
                    detail_type: lu.clone(),
                },
            ),
            (
                with("/detail/license/arn", json!("  ")),
                EventParseError::MissingLicenseArn {
                    detail_type: lu.clone(),
                },
            ),
            (
                with("/detail/acceptor", Value::Null),
                EventParseError::MissingAcceptorAccount {
                    detail_type: lu.clone(),
                },
            ),
            (
                with("/detail/acceptor/accountId", json!("84573528413")),
                EventParseError::InvalidAcceptorAccount {
                    detail_type: lu.clone(),
                    value: "84573528413".into(),
                },
            ),
            (
                with("/detail/agreement", json!({})),
                EventParseError::MissingAgreementId {
                    detail_type: lu.clone(),
                },
            ),
            (
                with("/time", Value::Null),
                EventParseError::MissingTime {
                    detail_type: lu.clone(),
                },
            ),
            (
                with("/time", json!("2024-08-30 21:36:03")),
                EventParseError::BadTime {
                    detail_type: lu.clone(),
                    value: "2024-08-30 21:36:03".into(),
                },
            ),
            (
                {
                    let mut e = ended_event.clone();
                    e["detail"]["agreement"] = json!({"status": "CANCELLED"});
                    e
                },
                EventParseError::MissingAgreementId {
                    detail_type: "Purchase Agreement Ended - Proposer".into(),
                },
            ),
        ];
        for (json, expected) in cases {
            assert_eq!(
                MarketplaceEvent::from_json(&json).unwrap_err(),
                expected,
                "{json}"
            );
        }
        assert!(matches!(
            MarketplaceEvent::from_json_str("{"),
            Err(EventParseError::NotJson(_))
        ));
        let message = EventParseError::MissingLicenseArn { detail_type: lu }.to_string();
        assert_eq!(
            message,
            "License Updated - Manufacturer event has no detail.license.arn"
        );
    }

    #[test]
    fn license_arns_without_the_arn_prefix_are_normalised() {
        let cases = [
            (
                "aws:license-manager:us-east-1:123456789012:l-abc",
                "arn:aws:license-manager:us-east-1:123456789012:l-abc",
            ),
            (
                "arn:aws:license-manager::123456789012:license:l-abc",
                "arn:aws:license-manager::123456789012:license:l-abc",
            ),
            (
                "aws-us-gov:license-manager::123456789012:license:l-abc",
                "arn:aws-us-gov:license-manager::123456789012:license:l-abc",
            ),
            (" arn:aws:x ", "arn:aws:x"),
        ];
        for (input, expected) in cases {
            assert_eq!(normalize_license_arn(input), expected);
        }
    }

    #[test]
    fn targets_name_the_rows_to_load() {
        assert_eq!(
            updated("2026-11-30T10:00:00Z").target(),
            EventTarget::Row {
                license_arn: LICENSE,
                account: ACCOUNT
            }
        );
        assert_eq!(
            ended("2026-11-30T10:00:00Z").target(),
            EventTarget::Agreement {
                agreement_id: AGREEMENT
            }
        );
        assert_eq!(
            MarketplaceEvent::Ignored {
                detail_type: "x".into()
            }
            .target(),
            EventTarget::Nothing
        );
        assert_eq!(
            deprovisioned("2026-11-30T10:00:00Z").name(),
            "License Deprovisioned"
        );
    }

    #[test]
    fn license_updated_creates_an_active_row() {
        let transition = apply(None, &updated("2026-11-30T10:00:00Z"));
        let row = transition.row().unwrap();
        assert_eq!(row.license_arn, LICENSE);
        assert_eq!(row.customer_aws_account_id, ACCOUNT);
        assert_eq!(row.product_code.as_deref(), Some(PRODUCT));
        assert_eq!(row.agreement_id.as_deref(), Some(AGREEMENT));
        assert_eq!(row.agreement_status, Some(AgreementStatus::Active));
        assert_eq!(row.subscription_status, Some(SubscriptionStatus::Active));
        assert_eq!(row.agreement_event_at, Some(t("2026-11-30T10:00:00Z")));
        assert_eq!(row.subscription_event_at, Some(t("2026-11-30T10:00:00Z")));
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
        let row = apply(Some(&registered), &updated("2026-11-30T10:00:00Z"))
            .row()
            .cloned()
            .unwrap();
        assert_eq!(row.registered_regions, vec!["eu-west-1".to_string()]);
        assert_eq!(row.subscription_status, Some(SubscriptionStatus::Active));
    }

    #[test]
    fn deprovisioned_opens_a_one_hour_window_and_keeps_the_agreement() {
        let (row, kinds) = run(&[
            updated("2026-11-30T10:00:00Z"),
            deprovisioned("2026-11-30T12:15:30Z"),
        ]);
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
        assert_eq!(row.agreement_event_at, Some(t("2026-11-30T10:00:00Z")));
    }

    #[test]
    fn ended_sets_only_the_agreement_inactive() {
        let (row, kinds) = run(&[
            updated("2026-11-30T10:00:00Z"),
            ended("2026-11-30T11:00:00Z"),
        ]);
        let row = row.unwrap();
        assert_eq!(kinds, ["write", "write"]);
        assert_eq!(row.agreement_status, Some(AgreementStatus::Inactive));
        assert_eq!(row.subscription_status, Some(SubscriptionStatus::Active));
        assert_eq!(row.subscription_event_at, Some(t("2026-11-30T10:00:00Z")));
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
            Option<A>,
            Option<S>,
        );
        let cases: Vec<Case> = vec![
            (
                "duplicate License Updated is a no-op",
                vec![
                    updated("2026-11-30T10:00:00Z"),
                    updated("2026-11-30T10:00:00Z"),
                ],
                vec!["write", "unchanged"],
                Some(A::Active),
                Some(S::Active),
            ),
            (
                "newer License Updated refreshes an active row",
                vec![
                    updated("2026-11-30T10:00:00Z"),
                    updated("2026-11-30T11:00:00Z"),
                ],
                vec!["write", "write"],
                Some(A::Active),
                Some(S::Active),
            ),
            (
                "stale License Updated after a newer one is a no-op",
                vec![
                    updated("2026-11-30T11:00:00Z"),
                    updated("2026-11-30T10:00:00Z"),
                ],
                vec!["write", "unchanged"],
                Some(A::Active),
                Some(S::Active),
            ),
            (
                "stale License Updated after Deprovisioned never reactivates",
                vec![
                    updated("2026-11-30T10:00:00Z"),
                    deprovisioned("2026-11-30T12:00:00Z"),
                    updated("2026-11-30T11:00:00Z"),
                ],
                vec!["write", "write", "unchanged"],
                Some(A::Active),
                Some(S::Deprovisioning),
            ),
            (
                "newer License Updated after Deprovisioned is refused",
                vec![
                    updated("2026-11-30T10:00:00Z"),
                    deprovisioned("2026-11-30T12:00:00Z"),
                    updated("2026-11-30T13:00:00Z"),
                ],
                vec!["write", "write", "refused"],
                Some(A::Active),
                Some(S::Deprovisioning),
            ),
            (
                "Deprovisioned before any License Updated creates a deprovisioning row; the late Updated is stale",
                vec![
                    deprovisioned("2026-11-30T12:00:00Z"),
                    updated("2026-11-30T10:00:00Z"),
                ],
                vec!["write", "unchanged"],
                None,
                Some(S::Deprovisioning),
            ),
            (
                "duplicate Deprovisioned keeps the first window",
                vec![
                    deprovisioned("2026-11-30T12:00:00Z"),
                    deprovisioned("2026-11-30T12:00:00Z"),
                ],
                vec!["write", "unchanged"],
                None,
                Some(S::Deprovisioning),
            ),
            (
                "a newer Deprovisioned never extends the window",
                vec![
                    deprovisioned("2026-11-30T12:00:00Z"),
                    deprovisioned("2026-11-30T12:30:00Z"),
                ],
                vec!["write", "unchanged"],
                None,
                Some(S::Deprovisioning),
            ),
            (
                "stale Deprovisioned after a newer License Updated is a no-op",
                vec![
                    updated("2026-11-30T12:00:00Z"),
                    deprovisioned("2026-11-30T11:00:00Z"),
                ],
                vec!["write", "unchanged"],
                Some(A::Active),
                Some(S::Active),
            ),
            (
                "Ended before any row exists has no row to apply to",
                vec![ended("2026-11-30T09:00:00Z")],
                vec!["no-row"],
                None,
                None,
            ),
            (
                "Ended before Updated (delivered after): the stale half leaves the agreement ended",
                vec![
                    updated("2026-11-30T10:00:00Z"),
                    ended("2026-11-30T12:00:00Z"),
                    updated("2026-11-30T11:00:00Z"),
                ],
                vec!["write", "write", "write"],
                Some(A::Inactive),
                Some(S::Active),
            ),
            (
                "a newer License Updated never reactivates the same ended agreement",
                vec![
                    updated("2026-11-30T10:00:00Z"),
                    ended("2026-11-30T12:00:00Z"),
                    updated("2026-11-30T13:00:00Z"),
                ],
                vec!["write", "write", "write"],
                Some(A::Inactive),
                Some(S::Active),
            ),
            (
                "duplicate Ended (Manufacturer and Proposer copies) is a no-op",
                vec![
                    updated("2026-11-30T10:00:00Z"),
                    ended("2026-11-30T12:00:00Z"),
                    ended("2026-11-30T12:00:00Z"),
                ],
                vec!["write", "write", "unchanged"],
                Some(A::Inactive),
                Some(S::Active),
            ),
            (
                "stale Ended before the License Updated that activated the agreement is a no-op",
                vec![
                    updated("2026-11-30T10:00:00Z"),
                    ended("2026-11-30T09:00:00Z"),
                ],
                vec!["write", "unchanged"],
                Some(A::Active),
                Some(S::Active),
            ),
            (
                "Amended on an active agreement writes nothing",
                vec![
                    updated("2026-11-30T10:00:00Z"),
                    amended("2026-11-30T11:00:00Z"),
                ],
                vec!["write", "unchanged"],
                Some(A::Active),
                Some(S::Active),
            ),
            (
                "Amended does not move the guard: an earlier Ended delivered late still ends it",
                vec![
                    updated("2026-11-30T10:00:00Z"),
                    amended("2026-11-30T12:00:00Z"),
                    ended("2026-11-30T11:00:00Z"),
                ],
                vec!["write", "unchanged", "write"],
                Some(A::Inactive),
                Some(S::Active),
            ),
            (
                "older Amended after Ended never reactivates",
                vec![
                    updated("2026-11-30T10:00:00Z"),
                    ended("2026-11-30T12:00:00Z"),
                    amended("2026-11-30T11:00:00Z"),
                ],
                vec!["write", "write", "unchanged"],
                Some(A::Inactive),
                Some(S::Active),
            ),
            (
                "newer Amended after Ended is refused",
                vec![
                    updated("2026-11-30T10:00:00Z"),
                    ended("2026-11-30T12:00:00Z"),
                    amended("2026-11-30T13:00:00Z"),
                ],
                vec!["write", "write", "refused"],
                Some(A::Inactive),
                Some(S::Active),
            ),
            (
                "Amended on a deprovisioning-created row (agreement unknown) activates the agreement only",
                vec![
                    deprovisioned("2026-11-30T12:00:00Z"),
                    amended("2026-11-30T12:30:00Z"),
                ],
                vec!["write", "write"],
                Some(A::Active),
                Some(S::Deprovisioning),
            ),
            (
                "Ended during deprovisioning leaves the subscription deprovisioning",
                vec![
                    updated("2026-11-30T10:00:00Z"),
                    deprovisioned("2026-11-30T12:00:00Z"),
                    ended("2026-11-30T12:00:05Z"),
                ],
                vec!["write", "write", "write"],
                Some(A::Inactive),
                Some(S::Deprovisioning),
            ),
            (
                "Created and other types are ignored",
                vec![MarketplaceEvent::Ignored {
                    detail_type: "Purchase Agreement Created - Manufacturer".into(),
                }],
                vec!["unchanged"],
                None,
                None,
            ),
        ];
        for (name, events, kinds, agreement, subscription) in cases {
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
        const T: &str = "2026-11-30T12:00:00Z";
        let renewed = |time: &str| MarketplaceEvent::LicenseUpdated {
            license_arn: LICENSE.into(),
            account: ACCOUNT.into(),
            product_code: Some(PRODUCT.into()),
            agreement_id: "agmt-renewed".into(),
            time: t(time),
        };
        type Case = (&'static str, Vec<MarketplaceEvent>, Option<A>, Option<S>);
        let cases: Vec<Case> = vec![
            (
                "Updated and Deprovisioned in one second: deprovisioning",
                vec![updated(T), deprovisioned(T)],
                Some(A::Active),
                Some(S::Deprovisioning),
            ),
            (
                "Updated, Ended in one second: the agreement ends",
                vec![updated(T), ended(T)],
                Some(A::Inactive),
                Some(S::Active),
            ),
            (
                "Updated, Ended and Deprovisioned in one second",
                vec![updated(T), ended(T), deprovisioned(T)],
                Some(A::Inactive),
                Some(S::Deprovisioning),
            ),
            (
                "Updated, Amended in one second: active",
                vec![updated(T), amended(T)],
                Some(A::Active),
                Some(S::Active),
            ),
            (
                "Amended, Ended in one second: ended",
                vec![deprovisioned("2026-11-30T11:00:00Z"), amended(T), ended(T)],
                Some(A::Inactive),
                Some(S::Deprovisioning),
            ),
        ];
        for (name, events, agreement, subscription) in cases {
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
                if events[0] == deprovisioned("2026-11-30T11:00:00Z") && order[0] != events[0] {
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
        assert_eq!(
            row.unwrap().deprovisioning_expiry,
            Some(t("2026-11-30T13:00:00Z"))
        );
        // Delivered the other way round, the same-second Updated is the earlier one: it
        // is never "refused" (not a reactivation) and only its agreement half applies.
        let (row, kinds) = run(&[deprovisioned(T), updated(T)]);
        assert_eq!(kinds, ["write", "write"]);
        let row = row.unwrap();
        assert_eq!(
            row.subscription_status,
            Some(SubscriptionStatus::Deprovisioning)
        );
        assert_eq!(row.deprovisioning_expiry, Some(t("2026-11-30T13:00:00Z")));
        assert_eq!(row.subscription_event_at, Some(t(T)));
        assert_eq!(row.agreement_status, Some(AgreementStatus::Active));
        // A replacement agreement's License Updated in the second its predecessor ended
        // moves the row to the new agreement.
        let (row, kinds) = run(&[updated("2026-11-30T10:00:00Z"), ended(T), renewed(T)]);
        let row = row.unwrap();
        assert_eq!(kinds, ["write", "write", "write"]);
        assert_eq!(row.agreement_id.as_deref(), Some("agmt-renewed"));
        assert_eq!(row.agreement_status, Some(AgreementStatus::Active));
        // ... but the ended agreement's own same-second License Updated never reopens it.
        let (row, _) = run(&[updated("2026-11-30T10:00:00Z"), ended(T), updated(T)]);
        assert_eq!(
            row.unwrap().agreement_status,
            Some(AgreementStatus::Inactive)
        );
    }

    #[test]
    fn license_updated_for_a_replacement_agreement_moves_the_row() {
        let renewed = MarketplaceEvent::LicenseUpdated {
            license_arn: LICENSE.into(),
            account: ACCOUNT.into(),
            product_code: Some(PRODUCT.into()),
            agreement_id: "agmt-renewed".into(),
            time: t("2026-12-01T00:00:00Z"),
        };
        let (row, kinds) = run(&[
            updated("2026-11-30T10:00:00Z"),
            ended("2026-11-30T23:00:00Z"),
            renewed,
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
        let row = apply(None, &updated("2026-11-30T10:00:00Z"))
            .row()
            .cloned()
            .unwrap();
        let other_account = MarketplaceEvent::AgreementEnded {
            agreement_id: AGREEMENT.into(),
            account: "111122223333".into(),
            time: t("2026-11-30T11:00:00Z"),
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
            time: t("2026-11-30T11:00:00Z"),
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
        let row = apply(Some(&registered), &deprovisioned("2026-11-30T12:00:00Z"))
            .row()
            .cloned()
            .unwrap();
        assert_eq!(row.product_code.as_deref(), Some("registered-code"));
        assert_eq!(row.agreement_id.as_deref(), Some(AGREEMENT));
        assert_eq!(row.agreement_status, None);
    }

    #[test]
    fn expiry_closes_only_deprovisioning_rows_past_their_window() {
        let (row, _) = run(&[
            updated("2026-11-30T10:00:00Z"),
            deprovisioned("2026-11-30T12:00:00Z"),
        ]);
        let row = row.unwrap();
        assert_eq!(expire_deprovisioning(&row, t("2026-11-30T12:59:59Z")), None);
        let closed = expire_deprovisioning(&row, t("2026-11-30T13:00:00Z")).unwrap();
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
        let active = apply(None, &updated("2026-11-30T10:00:00Z"))
            .row()
            .cloned()
            .unwrap();
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

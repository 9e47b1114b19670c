//! The Marketplace EventBridge events (source `aws.agreement-marketplace`) read into a
//! [`MarketplaceEvent`]: exactly the detail-types the lifecycle consumes, every field it
//! needs checked, anything else [`MarketplaceEvent::Ignored`].

use chrono::{DateTime, Timelike, Utc};
use serde_json::Value;

use crate::time::Instant;

/// The only event source the lifecycle accepts.
pub const EVENT_SOURCE: &str = "aws.agreement-marketplace";

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

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;

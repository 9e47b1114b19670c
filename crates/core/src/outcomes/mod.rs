//! Outcome events: an aggregated record reaching its terminal status, and a raw row
//! that will not be billed (rejected client-side or aged out), told to the seller's
//! systems as EventBridge events. They are read from the tables' streams (new and old
//! images), so nothing is added to the submitter's or the aggregator's path: [`outcome`]
//! turns one stream change into at most one event; [`publish`] puts a batch of them
//! on the bus and says which changes to retry.
//!
//! An event is sent for a change whose new image has a terminal status and whose old
//! image had another (or none): a record replayed and sent again gives a second
//! event, for its second outcome. Its `outcomeId` is the stream record's id, so a
//! retried delivery of the same change carries the same id (consumers dedupe on it).
//! No buyer PII is in an event: the usage tables hold none.

mod publish;
#[cfg(test)]
mod tests;

pub use publish::{PublishReport, publish};

use std::collections::BTreeMap;

use serde::Serialize;

use crate::items::ingestion_marker_event_id;
use crate::model::{AggregatedStatus, Attr, RawStatus, attr};
use crate::ports::BusEvent;
use crate::remedy::{FailureStatus, for_status};

/// `source` of every outcome event.
pub const SOURCE: &str = "awsmp.metering";
/// `detail-type` of an aggregated record's terminal outcome.
pub const RECORD_OUTCOME: &str = "Usage Record Outcome";
/// `detail-type` of a raw usage row that will not be billed.
pub const ROW_NOT_BILLED: &str = "Usage Row Not Billed";
/// The version of the detail's shape (`detailVersion`), raised on a breaking change.
pub const DETAIL_VERSION: u32 = 1;

/// Which table a change comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Table {
    /// The raw usage table.
    Usage,
    /// The aggregated-usage table.
    Aggregated,
}

impl Table {
    /// The `meteringStatus` values that end an item of this table and are told: on the
    /// usage table the two that mean "not billed" (`Aggregated` is told by its record's
    /// outcome), on the aggregated table every status but `Pending`. The event-source
    /// mapping's filter in template-main.yaml names exactly these.
    pub fn told_statuses(self) -> Vec<&'static str> {
        match self {
            Table::Usage => vec![
                RawStatus::RejectedClientSide.as_str(),
                RawStatus::AggregationExpired.as_str(),
            ],
            Table::Aggregated => AggregatedStatus::ALL
                .iter()
                .filter(|s| s.is_terminal())
                .map(AggregatedStatus::as_str)
                .collect(),
        }
    }
}

/// One change of an item, as the table's stream (`NEW_AND_OLD_IMAGES`) tells it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Change {
    /// The stream record's `eventID`: the same on every delivery of this change.
    pub change_id: String,
    /// Its `SequenceNumber`: what a failed batch names to be delivered again.
    pub position: String,
    /// The item before the change (absent for an insert).
    pub old: Option<BTreeMap<String, Attr>>,
    /// The item after it (absent for a removal).
    pub new: Option<BTreeMap<String, Attr>>,
}

/// An aggregated record's terminal outcome (`detail` of [`RECORD_OUTCOME`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordOutcome {
    /// [`DETAIL_VERSION`].
    pub detail_version: u32,
    /// The change's id: a repeated delivery carries the same one.
    pub outcome_id: String,
    /// License.
    pub license_arn: String,
    /// Buyer account.
    #[serde(rename = "customerAWSAccountId")]
    pub customer_aws_account_id: String,
    /// Dimension.
    pub dimension: String,
    /// The usage hour (`YYYY-MM-DDTHH`, UTC).
    pub hour: String,
    /// The record's quantity.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quantity: Option<i64>,
    /// Product code, when the record names one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub product_code: Option<String>,
    /// The terminal status (`Success`, `DuplicateRecord`, `CustomerNotSubscribed`,
    /// `Error`, `SubmissionExpired`, `DryRunSubmitted`).
    pub status: String,
    /// `meteringStatusReason` (the exception's name for `Error`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Marketplace's id for a billed record.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metering_record_id: Option<String>,
    /// Sends it took.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempts: Option<u32>,
    /// Whether the usage was billed: `Success` only.
    pub billed: bool,
    /// What to do, for anything but `Success`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remedy: Option<String>,
}

/// A raw usage row that will not be billed (`detail` of [`ROW_NOT_BILLED`]). A
/// rejected row may be malformed, so everything but its keys is as stored, if at all.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RowNotBilled {
    /// [`DETAIL_VERSION`].
    pub detail_version: u32,
    /// The change's id: a repeated delivery carries the same one.
    pub outcome_id: String,
    /// License (the row's partition key).
    pub license_arn: String,
    /// The row's sort key.
    pub usage_row_key: String,
    /// The event id the row was written with (the usage API's `id`), when its key
    /// carries one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_id: Option<String>,
    /// Buyer account, as stored.
    #[serde(
        rename = "customerAWSAccountId",
        skip_serializing_if = "Option::is_none"
    )]
    pub customer_aws_account_id: Option<String>,
    /// Dimension, as stored.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dimension: Option<String>,
    /// Usage timestamp, as stored.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<String>,
    /// Quantity, when it is an integer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quantity: Option<i64>,
    /// `RejectedClientSide` or `AggregationExpired`.
    pub status: String,
    /// The reason code of a rejection.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason_code: Option<String>,
    /// What to do.
    pub remedy: String,
}

/// The event one change gives, if any: `None` unless the change moves an item into a
/// told status ([`Table::told_statuses`]). Ingestion markers and removals give none.
pub fn outcome(table: Table, change: &Change) -> Option<BusEvent> {
    let new = change.new.as_ref()?;
    let status = text(new, attr::METERING_STATUS)?;
    if change
        .old
        .as_ref()
        .and_then(|old| text(old, attr::METERING_STATUS))
        == Some(status)
    {
        return None;
    }
    let license_arn = text(new, attr::LICENSE_ARN)?.to_string();
    let reason = text(new, attr::METERING_STATUS_REASON).map(str::to_string);
    let (detail_type, detail) = match table {
        Table::Aggregated => {
            let status: AggregatedStatus =
                status.parse().ok().filter(AggregatedStatus::is_terminal)?;
            let billed = status == AggregatedStatus::Success;
            let detail = RecordOutcome {
                detail_version: DETAIL_VERSION,
                outcome_id: change.change_id.clone(),
                license_arn: license_arn.clone(),
                customer_aws_account_id: text(new, attr::CUSTOMER_ACCOUNT)?.to_string(),
                dimension: text(new, attr::DIMENSION)?.to_string(),
                hour: text(new, attr::HOUR_BUCKET)?.to_string(),
                quantity: number(new, attr::QUANTITY),
                product_code: text(new, attr::PRODUCT_CODE).map(str::to_string),
                status: status.as_str().to_string(),
                metering_record_id: text(new, attr::METERING_RECORD_ID).map(str::to_string),
                attempts: number(new, attr::ATTEMPT_COUNT).and_then(|n| u32::try_from(n).ok()),
                billed,
                remedy: (!billed)
                    .then(|| for_status(FailureStatus::Record(status), reason.as_deref())),
                reason,
            };
            (RECORD_OUTCOME, serde_json::to_string(&detail).ok()?)
        }
        Table::Usage => {
            let status: RawStatus = status.parse().ok()?;
            if status == RawStatus::Aggregated {
                return None;
            }
            let row_key = text(new, attr::USAGE_SORT_KEY)?.to_string();
            if ingestion_marker_event_id(&row_key).is_some() {
                return None;
            }
            let account = text(new, attr::CUSTOMER_ACCOUNT).map(str::to_string);
            let dimension = text(new, attr::DIMENSION).map(str::to_string);
            let timestamp = text(new, attr::TIMESTAMP).map(str::to_string);
            let event_id = match (&account, &dimension, &timestamp) {
                (Some(a), Some(d), Some(t)) => row_key
                    .strip_prefix(&format!("{a}#{d}#{t}#"))
                    .filter(|id| !id.is_empty())
                    .map(str::to_string),
                _ => None,
            };
            let detail = RowNotBilled {
                detail_version: DETAIL_VERSION,
                outcome_id: change.change_id.clone(),
                license_arn: license_arn.clone(),
                usage_row_key: row_key,
                event_id,
                customer_aws_account_id: account,
                dimension,
                timestamp,
                quantity: number(new, attr::QUANTITY),
                status: status.as_str().to_string(),
                remedy: for_status(FailureStatus::Raw(status), reason.as_deref()),
                reason_code: reason,
            };
            (ROW_NOT_BILLED, serde_json::to_string(&detail).ok()?)
        }
    };
    Some(BusEvent {
        source: SOURCE,
        detail_type,
        detail,
        resources: vec![license_arn],
    })
}

/// A string attribute's text.
fn text<'a>(item: &'a BTreeMap<String, Attr>, name: &str) -> Option<&'a str> {
    item.get(name).and_then(Attr::as_s)
}

/// An integer attribute, stored as a number or as its text.
fn number(item: &BTreeMap<String, Attr>, name: &str) -> Option<i64> {
    match item.get(name)? {
        Attr::N(n) | Attr::S(n) => n.parse().ok(),
        _ => None,
    }
}

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
//!
//! A record's event says what its quantity is worth (`estimatedCharge`), at the unit
//! price the record keeps from the buyer's agreement terms: an estimate.

mod publish;
#[cfg(test)]
mod tests;

pub use publish::{PublishReport, publish, put_all};

use std::collections::BTreeMap;

use serde::Serialize;

use crate::charges::{Estimate, UNIT_PRICE_ATTR, UnitPrice, Worth};
use crate::items::ingestion_marker_event_id;
use crate::model::{AggregatedStatus, Attr, RawStatus, attr};
use crate::ports::{BusEvent, PUT_EVENTS_MAX_BYTES};
use crate::remedy::{FailureStatus, for_status};
use crate::submit::REASON_INTERRUPTED_SUBMISSION;
use crate::submit::outcome::REASON_BILLED_BY_EARLIER_ATTEMPT;

/// `source` of every outcome event.
pub const SOURCE: &str = "awsmp.metering";
/// `detail-type` of an aggregated record's terminal outcome.
pub const RECORD_OUTCOME: &str = "Usage Record Outcome";
/// `detail-type` of a raw usage row that will not be billed.
pub const ROW_NOT_BILLED: &str = "Usage Row Not Billed";
/// The version of the detail's shape (`detailVersion`), raised on a breaking change.
/// 2: `billed` is true for a `DuplicateRecord` an earlier send of ours billed (1 said
/// `false`), `quantity` is the quantity sent (1 gave the stored one), `possiblyBilled`
/// is new, and `customerAWSAccountId`, `dimension`, `hour` (records) and `remedy`
/// (rows) may be absent (an unreadable item, or a `truncated` event).
pub const DETAIL_VERSION: u32 = 2;

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

/// An aggregated record's terminal outcome (`detail` of [`RECORD_OUTCOME`]). It tells
/// what the record's item says about billing: `billed` when Marketplace billed this
/// record, `possiblyBilled` when a send of ours may have billed it though its status
/// says otherwise, and `quantity`, the quantity sent. A record the pipeline could not
/// read (a seller's malformed direct-submit item, closed `Error`) is told with what is
/// readable.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordOutcome {
    /// [`DETAIL_VERSION`].
    pub detail_version: u32,
    /// The change's id: a repeated delivery carries the same one.
    pub outcome_id: String,
    /// License (the item's partition key).
    pub license_arn: String,
    /// The item's sort key (`account#dimension#hour`), as stored.
    pub record_key: String,
    /// Buyer account, when readable.
    #[serde(
        rename = "customerAWSAccountId",
        skip_serializing_if = "Option::is_none"
    )]
    pub customer_aws_account_id: Option<String>,
    /// Dimension, when readable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dimension: Option<String>,
    /// The usage hour (`YYYY-MM-DDTHH`, UTC), when readable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hour: Option<String>,
    /// The quantity this outcome is about: the one sent to Marketplace
    /// (`sentQuantity`) when the record was sent, else its stored `quantity`. When
    /// `billed`, the quantity Marketplace billed; when `possiblyBilled`, the quantity
    /// it may have billed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quantity: Option<i64>,
    /// The record's stored `quantity`, only when it differs from `quantity` (a
    /// direct-submit seller changed it after the send): the difference was never sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub record_quantity: Option<i64>,
    /// Product code, when the record names one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub product_code: Option<String>,
    /// The terminal status (`Success`, `DuplicateRecord`, `CustomerNotSubscribed`,
    /// `Error`, `SubmissionExpired`, `DryRunSubmitted`).
    pub status: String,
    /// `meteringStatusReason` (the exception's name for `Error`; for
    /// `DuplicateRecord`, `BilledByEarlierAttempt` or `UnexpectedDuplicate`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Marketplace's id for a billed record.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metering_record_id: Option<String>,
    /// Sends it took.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempts: Option<u32>,
    /// Whether Marketplace billed this record: `Success`, or `DuplicateRecord` with
    /// reason `BilledByEarlierAttempt` (an earlier send of ours billed it; its answer
    /// was lost). Nothing else is billed by this record.
    pub billed: bool,
    /// Not billed as far as the status says, but a send of ours may have billed it
    /// (its answer never came): an `Error`, `CustomerNotSubscribed` or
    /// `SubmissionExpired` record with `possiblyBilled` stored (read from
    /// `sentQuantity` on an item written before that attribute existed). Check the
    /// buyer's bill before invoicing it elsewhere.
    pub possibly_billed: bool,
    /// What to do, unless `billed`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remedy: Option<String>,
    /// What `quantity` is worth at the unit price the record was priced at when it was
    /// sent to aggregation (`unitPrice`, from the buyer's agreement terms): an
    /// estimate, before tax and credits. Basis `no rate card` when it carries none.
    /// Absent when the quantity is unreadable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub estimated_charge: Option<Worth>,
    /// Some optional fields were left out to keep the event within what `PutEvents`
    /// takes (a seller wrote a huge attribute): read the item for them.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
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
    /// What to do (left out only when `truncated`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remedy: Option<String>,
    /// Some optional fields were left out to keep the event within what `PutEvents`
    /// takes (a seller wrote a huge attribute): read the row for them.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
}

/// The longest optional text an event keeps when it would not fit otherwise: DynamoDB's
/// sort-key limit, so the keys an event always carries are no longer than this.
pub const FIELD_LIMIT: usize = 1024;

/// A detail that [`fit`] can shrink.
trait Shrinkable: Serialize {
    /// Marks it `truncated`.
    fn truncate(&mut self);
    /// Calls `f` on every optional text field.
    fn each_optional(&mut self, f: &mut dyn FnMut(&mut Option<String>));
}

impl Shrinkable for RecordOutcome {
    fn truncate(&mut self) {
        self.truncated = true;
    }
    fn each_optional(&mut self, f: &mut dyn FnMut(&mut Option<String>)) {
        [
            &mut self.customer_aws_account_id,
            &mut self.dimension,
            &mut self.hour,
            &mut self.product_code,
            &mut self.reason,
            &mut self.metering_record_id,
            &mut self.remedy,
        ]
        .into_iter()
        .for_each(f);
    }
}

impl Shrinkable for RowNotBilled {
    fn truncate(&mut self) {
        self.truncated = true;
    }
    fn each_optional(&mut self, f: &mut dyn FnMut(&mut Option<String>)) {
        [
            &mut self.event_id,
            &mut self.customer_aws_account_id,
            &mut self.dimension,
            &mut self.timestamp,
            &mut self.reason_code,
            &mut self.remedy,
        ]
        .into_iter()
        .for_each(f);
    }
}

/// The event for `detail`, never larger than one `PutEvents` entry may be
/// ([`PUT_EVENTS_MAX_BYTES`]): an event that would be is sent `truncated`, without its
/// optional texts over [`FIELD_LIMIT`], then, if that is not enough, without any
/// optional text (what is left is bounded by the item's key sizes). An event the bus
/// can never take would hold its stream shard, and every outcome behind it, until the
/// change left the stream.
fn fit<D: Shrinkable>(
    detail_type: &'static str,
    mut detail: D,
    license_arn: String,
) -> Option<BusEvent> {
    let event = |detail: &D| -> Option<BusEvent> {
        Some(BusEvent {
            source: SOURCE,
            detail_type,
            detail: serde_json::to_string(detail).ok()?,
            resources: vec![license_arn.clone()],
        })
    };
    let whole = event(&detail)?;
    if whole.size() <= PUT_EVENTS_MAX_BYTES {
        return Some(whole);
    }
    detail.truncate();
    detail.each_optional(&mut |field| {
        if field.as_ref().is_some_and(|text| text.len() > FIELD_LIMIT) {
            *field = None;
        }
    });
    let shrunk = event(&detail)?;
    if shrunk.size() <= PUT_EVENTS_MAX_BYTES {
        return Some(shrunk);
    }
    detail.each_optional(&mut |field| *field = None);
    event(&detail).filter(|bare| bare.size() <= PUT_EVENTS_MAX_BYTES)
}

/// Whether a record in `status` with `reason` was billed by Marketplace: `Success`, or
/// a `DuplicateRecord` that answered a re-send of ours after an earlier send billed it.
pub fn billed(status: AggregatedStatus, reason: Option<&str>) -> bool {
    match status {
        AggregatedStatus::Success => true,
        AggregatedStatus::DuplicateRecord => reason == Some(REASON_BILLED_BY_EARLIER_ATTEMPT),
        _ => false,
    }
}

/// Whether a record that ended in `status` unbilled may have been billed by a send of
/// ours: `possiblyBilled` as stored on `item`, or where absent (an item written before
/// it existed) whether it carries `sentQuantity`; only for the statuses that say
/// "not billed" of a record that may have been sent. An age-out that found a claim
/// unreleased (`InterruptedSubmission`: its holder may have sent it, and the holder's
/// answer never came back to say) says so in its reason, not in `possiblyBilled`.
fn possibly_billed(status: AggregatedStatus, item: &BTreeMap<String, Attr>) -> bool {
    let unbilled_after_send = matches!(
        status,
        AggregatedStatus::Error
            | AggregatedStatus::CustomerNotSubscribed
            | AggregatedStatus::SubmissionExpired
    );
    let interrupted = status == AggregatedStatus::SubmissionExpired
        && text(item, attr::METERING_STATUS_REASON) == Some(REASON_INTERRUPTED_SUBMISSION);
    unbilled_after_send
        && (interrupted
            || match item.get(attr::POSSIBLY_BILLED) {
                Some(Attr::Bool(flag)) => *flag,
                _ => item.contains_key(attr::SENT_QUANTITY),
            })
}

/// The event one change gives, if any: `None` unless the change moves an item into a
/// told status ([`Table::told_statuses`]). Ingestion markers and removals give none.
/// Every event fits one `PutEvents` entry ([`fit`]).
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
    let owned = |name: &str| text(new, name).map(str::to_string);
    match table {
        Table::Aggregated => {
            let status: AggregatedStatus =
                status.parse().ok().filter(AggregatedStatus::is_terminal)?;
            let billed = billed(status, reason.as_deref());
            let stored = number(new, attr::QUANTITY);
            let quantity = number(new, attr::SENT_QUANTITY).or(stored);
            let detail = RecordOutcome {
                detail_version: DETAIL_VERSION,
                outcome_id: change.change_id.clone(),
                license_arn: license_arn.clone(),
                record_key: owned(attr::AGGREGATED_SORT_KEY)?,
                customer_aws_account_id: owned(attr::CUSTOMER_ACCOUNT),
                dimension: owned(attr::DIMENSION),
                hour: owned(attr::HOUR_BUCKET),
                quantity,
                record_quantity: stored.filter(|q| Some(*q) != quantity),
                product_code: owned(attr::PRODUCT_CODE),
                status: status.as_str().to_string(),
                metering_record_id: owned(attr::METERING_RECORD_ID),
                attempts: number(new, attr::ATTEMPT_COUNT).and_then(|n| u32::try_from(n).ok()),
                billed,
                possibly_billed: !billed && possibly_billed(status, new),
                remedy: (!billed)
                    .then(|| for_status(FailureStatus::Record(status), reason.as_deref())),
                reason,
                estimated_charge: quantity.map(|q| estimated_charge(new, q)),
                truncated: false,
            };
            fit(RECORD_OUTCOME, detail, license_arn)
        }
        Table::Usage => {
            let status: RawStatus = status.parse().ok()?;
            if status == RawStatus::Aggregated {
                return None;
            }
            let row_key = owned(attr::USAGE_SORT_KEY)?;
            if ingestion_marker_event_id(&row_key).is_some() {
                return None;
            }
            let account = owned(attr::CUSTOMER_ACCOUNT);
            let dimension = owned(attr::DIMENSION);
            let timestamp = owned(attr::TIMESTAMP);
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
                remedy: Some(for_status(FailureStatus::Raw(status), reason.as_deref())),
                reason_code: reason,
                truncated: false,
            };
            fit(ROW_NOT_BILLED, detail, license_arn)
        }
    }
}

/// What `quantity` of a record is worth at the unit price kept on its item; `no rate
/// card` when it keeps none (or one that cannot be read: a seller's direct-submit item).
fn estimated_charge(item: &BTreeMap<String, Attr>, quantity: i64) -> Worth {
    let estimate = item
        .get(UNIT_PRICE_ATTR)
        .and_then(|price| UnitPrice::from_attr(price).ok())
        .map_or(Estimate::NoRateCard, |price| price.estimate(quantity));
    Worth::of(estimate)
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

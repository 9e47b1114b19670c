//! `GET /usage/events/{id}`: an event's fate as far as it has gone, read from what the
//! pipeline wrote: the event's marker (which row its id wrote), that row (pending,
//! counted, rejected with its reason, expired) and, once counted, its hour's record
//! (`Pending` awaiting submission, `Success` with its `meteringRecordId`, `Error` with
//! its reason, ...) with what it is worth under the buyer's agreement (an estimate,
//! from the rate card kept on their subscribers row). Four reads at most, never a
//! query or a scan.

use serde::Serialize;

use crate::charges::{Worth, estimate};
use crate::items::state::{RowState, row_state};
use crate::items::{INGESTION_MARKER_ROW, ingestion_marker_sort_key};
use crate::model::{AggregatedStatus, Allocation, Attr, GroupKey};
use crate::ports::{AggregatedStore, EventContent, PortError, SubscriberStore, UsageStore};
use crate::remedy;
use crate::time::{HourBucket, Instant};

/// An event's usage as the API shows it (the request's own field names).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageView {
    /// The license.
    pub license_arn: String,
    /// The buyer account.
    #[serde(rename = "customerAWSAccountId")]
    pub customer_aws_account_id: String,
    /// The dimension.
    pub dimension: String,
    /// The quantity.
    pub quantity: i64,
    /// The usage instant.
    pub timestamp: Instant,
    /// The allocations, when tagged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage_allocations: Option<Vec<AllocationView>>,
}

/// One allocation as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AllocationView {
    /// Quantity allocated to the tags.
    pub allocated_usage_quantity: i64,
    /// The tags.
    pub tags: Vec<crate::model::Tag>,
}

impl UsageView {
    /// `content` of an event under `license_arn`.
    pub fn of(license_arn: &str, content: &EventContent) -> Self {
        UsageView {
            license_arn: license_arn.to_string(),
            customer_aws_account_id: content.account.clone(),
            dimension: content.dimension.clone(),
            quantity: content.quantity,
            timestamp: content.timestamp,
            usage_allocations: content.allocations.as_ref().map(|list| {
                list.iter()
                    .map(|a: &Allocation| AllocationView {
                        allocated_usage_quantity: a.quantity,
                        tags: a.tags.clone(),
                    })
                    .collect()
            }),
        }
    }
}

/// Where an event stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "camelCase")]
pub enum Fate {
    /// Written; awaiting aggregation.
    Pending,
    /// Counted into its hour's record.
    Counted {
        /// The record, as it stands.
        record: RecordView,
    },
    /// Rejected by the aggregator: never billed.
    Rejected {
        /// The reason code.
        reason: Option<String>,
        /// What to do.
        message: String,
    },
    /// Aged out unaggregated (past the 24 h window): never billed.
    Expired,
    /// Its row was deleted by the table's retention after it became final.
    Deleted,
}

/// The hour's record an event was counted into.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordView {
    /// The hour.
    pub hour_bucket: HourBucket,
    /// The record's total quantity (every event of the hour for the license, account
    /// and dimension).
    pub quantity: i64,
    /// `Pending` (awaiting submission) or its terminal status.
    pub metering_status: AggregatedStatus,
    /// Why it ended as it did, for a status other than `Success`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metering_status_reason: Option<String>,
    /// Marketplace's record id, once billed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metering_record_id: Option<String>,
    /// What the record's quantity is worth under the buyer's agreement, an estimate
    /// ([`crate::charges::ESTIMATE_LABEL`]) from the rate card kept on their
    /// subscribers row; absent when the row could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub estimated_charge: Option<Worth>,
}

/// An event and its fate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EventFate {
    /// The event's id.
    pub id: String,
    /// What its write recorded; `None` once its row was deleted by retention.
    pub usage: Option<UsageView>,
    /// Where it stands.
    pub fate: Fate,
}

/// What the write of event `id` under `license_arn` recorded, read through its marker;
/// `Ok(None)` when the id was never written or its row is gone.
pub async fn recorded_content(
    store: &dyn UsageStore,
    license_arn: &str,
    id: &str,
) -> Result<Option<EventContent>, PortError> {
    Ok(written_row(store, license_arn, id)
        .await?
        .flatten()
        .as_ref()
        .and_then(EventContent::of_stored))
}

/// The row event `id` wrote: `None` when the id was never written (no marker),
/// `Some(None)` when its row was deleted.
async fn written_row(
    store: &dyn UsageStore,
    license_arn: &str,
    id: &str,
) -> Result<Option<Option<crate::model::RawUsageRow>>, PortError> {
    let Some(marker) = store
        .get_row(license_arn, &ingestion_marker_sort_key(id))
        .await?
    else {
        return Ok(None);
    };
    let Some(row_key) = marker.attrs.get(INGESTION_MARKER_ROW).and_then(Attr::as_s) else {
        return Ok(Some(None));
    };
    Ok(Some(store.get_row(license_arn, row_key).await?))
}

/// The fate of event `id` under `license_arn`; `Ok(None)` when the id was never written
/// for that license. A counted event's record says what it is worth, priced with the
/// rate card kept on the buyer's row in `subscribers` (one read; a failed read leaves
/// the estimate out rather than the answer).
pub async fn event_fate(
    usage: &dyn UsageStore,
    aggregated: &dyn AggregatedStore,
    subscribers: &dyn SubscriberStore,
    license_arn: &str,
    id: &str,
) -> Result<Option<EventFate>, PortError> {
    let Some(row) = written_row(usage, license_arn, id).await? else {
        return Ok(None);
    };
    let Some(row) = row else {
        return Ok(Some(EventFate {
            id: id.to_string(),
            usage: None,
            fate: Fate::Deleted,
        }));
    };
    let content = EventContent::of_stored(&row);
    let fate = match row_state(&row) {
        None | Some(RowState::Pending) => Fate::Pending,
        Some(RowState::Expired) => Fate::Expired,
        Some(RowState::Rejected(reason)) => Fate::Rejected {
            message: reason
                .as_deref()
                .and_then(|r| r.parse().ok())
                .map(remedy::for_reason)
                .unwrap_or("the aggregator rejected the event: see awsmp failures")
                .to_string(),
            reason,
        },
        Some(RowState::Counted) => match &content {
            None => Fate::Pending,
            Some(content) => {
                let key = GroupKey {
                    license_arn: license_arn.to_string(),
                    customer_aws_account_id: content.account.clone(),
                    dimension: content.dimension.clone(),
                    hour: HourBucket::containing(content.timestamp),
                };
                match aggregated.get(&key).await? {
                    // Counted, but the record is gone (retention): still counted.
                    None => Fate::Deleted,
                    Some(record) => {
                        // At the unit price the record keeps (no read); a record
                        // aggregated while no card was kept is priced with the row's.
                        let estimated_charge = match record.kept_estimate().map(Worth::of) {
                            Some(worth) => Some(worth),
                            None => match subscribers
                                .get(license_arn, &key.customer_aws_account_id)
                                .await
                            {
                                Ok(row) => Some(Worth::of(estimate(
                                    record.quantity_to_send(),
                                    &key.dimension,
                                    key.hour.start(),
                                    row.as_ref().and_then(|r| r.current_rate_card()),
                                ))),
                                Err(e) => {
                                    tracing::warn!(error = %e, "the buyer's rate card unread; the read-back says no estimate");
                                    None
                                }
                            },
                        };
                        Fate::Counted {
                            record: RecordView {
                                hour_bucket: key.hour,
                                quantity: record.quantity,
                                metering_status: record.status,
                                metering_status_reason: record.status_reason,
                                metering_record_id: record.metering_record_id,
                                estimated_charge,
                            },
                        }
                    }
                }
            }
        },
    };
    Ok(Some(EventFate {
        id: id.to_string(),
        usage: content.as_ref().map(|c| UsageView::of(license_arn, c)),
        fate,
    }))
}

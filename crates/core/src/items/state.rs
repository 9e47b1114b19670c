//! Where a stored raw row stands, read from the attributes the pipeline wrote: pending,
//! counted into its group's record (`aggregatedInto`), rejected with its reason code,
//! or expired. The operator's views and the usage API's read-back share it.

use crate::items::ingestion_marker_event_id;
use crate::model::{Attr, RawStatus, RawUsageRow, attr};

/// A raw row's state, as the pipeline's writes left it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RowState {
    /// Still awaiting aggregation (`meteringPending` present, not counted).
    Pending,
    /// Counted into its group's aggregated record.
    Counted,
    /// Rejected client-side; the stored reason code.
    Rejected(Option<String>),
    /// Aged out before it was aggregated.
    Expired,
}

/// A row attribute's text, whether stored as a string or a number.
pub fn attr_text<'a>(row: &'a RawUsageRow, name: &str) -> Option<&'a str> {
    match row.attrs.get(name) {
        Some(Attr::S(s)) | Some(Attr::N(s)) => Some(s.as_str()),
        _ => None,
    }
}

/// The row's state, or `None` for an ingestion marker (`event#<id>`: not usage).
pub fn row_state(row: &RawUsageRow) -> Option<RowState> {
    if ingestion_marker_event_id(&row.sort_key).is_some() {
        return None;
    }
    let status = attr_text(row, attr::METERING_STATUS).and_then(|s| s.parse::<RawStatus>().ok());
    Some(match status {
        Some(RawStatus::Aggregated) => RowState::Counted,
        Some(RawStatus::RejectedClientSide) => {
            RowState::Rejected(attr_text(row, attr::METERING_STATUS_REASON).map(str::to_string))
        }
        Some(RawStatus::AggregationExpired) => RowState::Expired,
        // Counted by an earlier version's commit that left the row pending.
        None if row.attrs.contains_key(attr::AGGREGATED_INTO) => RowState::Counted,
        None => RowState::Pending,
    })
}

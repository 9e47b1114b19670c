//! Where a stored raw row stands, read from its attributes the way the pipeline wrote
//! them: pending, counted, rejected (with its reason) or expired, and its hour.

use awsmp_core::items::state::attr_text as text;
pub use awsmp_core::items::state::{RowState, row_state};
use awsmp_core::model::{RawUsageRow, attr};
use awsmp_core::time::{HourBucket, parse_usage_timestamp};

/// The row's hour: its `meteringPending` bucket while pending, else its timestamp's
/// hour; `None` when neither can be read (a malformed row).
pub fn row_hour(row: &RawUsageRow) -> Option<HourBucket> {
    text(row, attr::METERING_PENDING)
        .and_then(|p| p.parse::<HourBucket>().ok())
        .or_else(|| {
            text(row, attr::TIMESTAMP)
                .and_then(|t| parse_usage_timestamp(t).ok())
                .map(HourBucket::containing)
        })
}

/// The row's quantity when it is a whole number.
pub fn row_quantity(row: &RawUsageRow) -> Option<i64> {
    text(row, attr::QUANTITY).and_then(|q| q.parse().ok())
}

/// The row's `customerAWSAccountId` and `dimension` attributes, as stored.
pub fn row_account_dimension(row: &RawUsageRow) -> (Option<&str>, Option<&str>) {
    (
        text(row, attr::CUSTOMER_ACCOUNT),
        text(row, attr::DIMENSION),
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use awsmp_core::memory::reference_row;
    use awsmp_core::model::Attr;

    fn with(mut row: RawUsageRow, name: &str, value: &str) -> RawUsageRow {
        row.attrs.insert(name.into(), Attr::S(value.into()));
        row
    }

    #[test]
    fn reads_each_state_and_hour_as_the_pipeline_writes_them() {
        let lic = "arn:aws:license-manager::123456789012:license:l-1";
        let pending = reference_row(lic, "111122223333", "api", "2026-11-30T10:15:00Z", 3);
        assert_eq!(row_state(&pending), Some(RowState::Pending));
        assert_eq!(row_hour(&pending), Some("2026-11-30T10".parse().unwrap()));
        assert_eq!(row_quantity(&pending), Some(3));

        let mut done = with(pending.clone(), attr::METERING_STATUS, "Aggregated");
        done.attrs.remove(attr::METERING_PENDING);
        assert_eq!(row_state(&done), Some(RowState::Counted));
        assert_eq!(row_hour(&done), Some("2026-11-30T10".parse().unwrap()));

        let rejected = with(
            with(pending.clone(), attr::METERING_STATUS, "RejectedClientSide"),
            attr::METERING_STATUS_REASON,
            "TooManyTags",
        );
        assert_eq!(
            row_state(&rejected),
            Some(RowState::Rejected(Some("TooManyTags".into())))
        );
        let legacy = with(pending.clone(), attr::AGGREGATED_INTO, "x");
        assert_eq!(row_state(&legacy), Some(RowState::Counted));

        let bad = reference_row(lic, "111122223333", "api", "yesterday", 1);
        assert_eq!(row_hour(&bad), None);
        let mut marker = pending;
        marker.sort_key = "event#e-1".into();
        assert_eq!(row_state(&marker), None);
    }
}

//! What a repeated event id means, decided here for every ingestion path (both usage
//! stores' `put_row`, so `awsmp usage put`/`import`, `awsmp_usage::Meter` and whatever
//! writes through the port next): the same usage again is a retry, a no-op
//! ([`IngestOutcome::Duplicate`]); other usage under the same id is a conflict
//! ([`IngestOutcome::Conflict`]), reported with what the first write stored and what
//! this call carries, and never written.
//!
//! "The same usage" is the same license, account, dimension, quantity and allocations
//! (the marker's [`content_digest`]), and the same instant unless this call left the
//! instant to default to "now" ([`NewUsageRow::timestamp_defaulted`]: a retry's "now"
//! is later than the first attempt's).

use crate::guardrails::{allocations_from_attr, quantity_from_text};
use crate::items::{INGESTION_MARKER_DIGEST, INGESTION_MARKER_ROW, content_digest};
use crate::model::{Attr, RawUsageRow, attr};
use crate::ports::{EventConflict, EventContent, IngestOutcome, NewUsageRow};
use crate::time::{Instant, format_instant, parse_usage_timestamp};

impl EventContent {
    /// What `row` carries.
    pub fn of_new(row: &NewUsageRow) -> Self {
        EventContent {
            account: row.customer_aws_account_id.clone(),
            dimension: row.dimension.clone(),
            quantity: row.quantity,
            allocations: row.allocations.clone(),
            timestamp: row.timestamp,
        }
    }

    /// What a stored usage row holds, if it reads as an ingested row does.
    pub fn of_stored(row: &RawUsageRow) -> Option<Self> {
        let text = |name: &str| row.attrs.get(name).and_then(Attr::as_s);
        let quantity = match row.attrs.get(attr::QUANTITY) {
            Some(Attr::N(n)) => quantity_from_text(n).ok()?,
            _ => return None,
        };
        let allocations = match row.attrs.get(attr::USAGE_ALLOCATIONS) {
            None | Some(Attr::Null) => None,
            Some(value) => Some(allocations_from_attr(value, quantity).ok()?),
        };
        Some(EventContent {
            account: text(attr::CUSTOMER_ACCOUNT)?.to_string(),
            dimension: text(attr::DIMENSION)?.to_string(),
            quantity,
            allocations,
            timestamp: parse_usage_timestamp(text(attr::TIMESTAMP)?).ok()?,
        })
    }

    fn digest(&self, license_arn: &str) -> String {
        content_digest(
            license_arn,
            &self.account,
            &self.dimension,
            self.quantity,
            self.allocations.as_deref(),
        )
    }
}

impl std::fmt::Display for EventContent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "account {} dimension {} quantity {} at {}",
            self.account,
            self.dimension,
            self.quantity,
            format_instant(self.timestamp)
        )?;
        for allocation in self.allocations.iter().flatten() {
            let tags: Vec<String> = allocation
                .tags
                .iter()
                .map(|t| format!("{}={}", t.key, t.value))
                .collect();
            write!(f, " [{} to {}]", allocation.quantity, tags.join(","))?;
        }
        Ok(())
    }
}

impl std::fmt::Display for EventConflict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "event id {} of license {} was already written with other usage: ",
            self.event_id, self.license_arn
        )?;
        match &self.recorded {
            Some(recorded) => write!(f, "recorded {recorded}")?,
            None => write!(
                f,
                "recorded usage no longer readable (its row was deleted by the table's retention)"
            )?,
        }
        write!(
            f,
            "; this call {}. Nothing was written: a retry must carry exactly the first attempt's usage, and new usage needs a new event id",
            self.this
        )
    }
}

impl std::error::Error for EventConflict {}

/// The usage instant of an ingested row's sort key
/// (`<account>#<dimension>#<timestamp>#<eventId>`).
fn instant_of_sort_key(sort_key: &str) -> Option<Instant> {
    parse_usage_timestamp(sort_key.split('#').nth(2)?).ok()
}

/// The verdict on `row`, whose event id (or row key) was written before: `marker` is
/// the event's marker item (absent for a row an older version wrote without one),
/// `first` the row the first write stored (the marker's `ingestedRow`, else the item at
/// this row's own key), when it can still be read. A marker written before markers kept
/// a digest is compared through its row; with neither a digest nor a readable row there
/// is nothing to compare, and the repeat counts as the retry it most likely is.
pub fn judge_repeat(
    row: &NewUsageRow,
    marker: Option<&RawUsageRow>,
    first: Option<&RawUsageRow>,
) -> IngestOutcome {
    let this = EventContent::of_new(row);
    let recorded = first.and_then(EventContent::of_stored);
    let recorded_digest = marker
        .and_then(|m| m.attrs.get(INGESTION_MARKER_DIGEST))
        .and_then(Attr::as_s)
        .map(str::to_string)
        .or_else(|| recorded.as_ref().map(|r| r.digest(&row.license_arn)));
    let Some(recorded_digest) = recorded_digest else {
        return IngestOutcome::Duplicate;
    };
    let recorded_at = recorded.as_ref().map(|r| r.timestamp).or_else(|| {
        marker
            .and_then(|m| m.attrs.get(INGESTION_MARKER_ROW))
            .and_then(Attr::as_s)
            .and_then(instant_of_sort_key)
    });
    let same_instant = row.timestamp_defaulted || recorded_at.is_none_or(|at| at == row.timestamp);
    if recorded_digest == this.digest(&row.license_arn) && same_instant {
        return IngestOutcome::Duplicate;
    }
    IngestOutcome::Conflict(Box::new(EventConflict {
        license_arn: row.license_arn.clone(),
        event_id: row.event_id.clone(),
        recorded,
        this,
    }))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::items::{IngestionWrite, ingestion_item};
    use crate::model::{Allocation, Tag};

    fn t(s: &str) -> Instant {
        parse_usage_timestamp(s).unwrap()
    }

    fn row(quantity: i64, ts: &str) -> NewUsageRow {
        NewUsageRow {
            license_arn: "arn:aws:license-manager::123456789012:license:l-1".into(),
            customer_aws_account_id: "111122223333".into(),
            dimension: "api".into(),
            timestamp: t(ts),
            quantity,
            allocations: Some(vec![Allocation {
                quantity,
                tags: vec![Tag {
                    key: "team".into(),
                    value: "a".into(),
                }],
            }]),
            product_code: None,
            event_id: "e-1".into(),
            timestamp_defaulted: false,
        }
    }

    fn first_write(row: &NewUsageRow) -> IngestionWrite {
        IngestionWrite::new(row, t("2026-11-30T10:20:00Z")).unwrap()
    }

    fn is_duplicate(outcome: &IngestOutcome) -> bool {
        matches!(outcome, IngestOutcome::Duplicate)
    }

    #[test]
    fn the_same_usage_is_a_duplicate_and_other_usage_a_conflict_with_both() {
        let first = row(3, "2026-11-30T10:15:00Z");
        let write = first_write(&first);
        let judge =
            |again: &NewUsageRow| judge_repeat(again, Some(&write.marker), Some(&write.row));
        assert!(is_duplicate(&judge(&first)));

        let mut more = first.clone();
        more.quantity = 4;
        more.allocations.as_mut().unwrap()[0].quantity = 4;
        let IngestOutcome::Conflict(conflict) = judge(&more) else {
            panic!("another quantity is a conflict")
        };
        assert_eq!(conflict.recorded.as_ref().unwrap().quantity, 3);
        assert_eq!(conflict.this.quantity, 4);
        let text = conflict.to_string();
        assert!(
            text.contains("quantity 3") && text.contains("quantity 4") && text.contains("e-1"),
            "{text}"
        );

        let mut tagged = first.clone();
        tagged.allocations.as_mut().unwrap()[0].tags[0].value = "b".into();
        assert!(!is_duplicate(&judge(&tagged)), "other tags");
        let mut dimension = first.clone();
        dimension.dimension = "other".into();
        assert!(!is_duplicate(&judge(&dimension)), "another dimension");
    }

    #[test]
    fn the_instant_counts_only_when_the_caller_gave_it() {
        let first = row(3, "2026-11-30T10:15:00Z");
        let write = first_write(&first);
        let mut later = row(3, "2026-11-30T10:16:00Z");
        assert!(
            !is_duplicate(&judge_repeat(&later, Some(&write.marker), Some(&write.row))),
            "a given instant that differs is other usage"
        );
        later.timestamp_defaulted = true;
        assert!(is_duplicate(&judge_repeat(
            &later,
            Some(&write.marker),
            Some(&write.row)
        )));
        // The marker alone (the row deleted by retention) still decides.
        assert!(is_duplicate(&judge_repeat(
            &later,
            Some(&write.marker),
            None
        )));
        later.quantity = 5;
        let IngestOutcome::Conflict(conflict) = judge_repeat(&later, Some(&write.marker), None)
        else {
            panic!("the digest differs")
        };
        assert!(conflict.recorded.is_none());
        assert!(conflict.to_string().contains("no longer readable"));
    }

    #[test]
    fn a_marker_without_a_digest_is_compared_through_its_row() {
        let first = row(3, "2026-11-30T10:15:00Z");
        let mut write = first_write(&first);
        write.marker.attrs.remove(INGESTION_MARKER_DIGEST);
        assert!(is_duplicate(&judge_repeat(
            &first,
            Some(&write.marker),
            Some(&write.row)
        )));
        let mut other = first.clone();
        other.allocations = None;
        assert!(!is_duplicate(&judge_repeat(
            &other,
            Some(&write.marker),
            Some(&write.row)
        )));
        // A row written before markers existed (no marker): its own content decides.
        let old = ingestion_item(&first, t("2026-11-30T10:20:00Z"));
        assert!(is_duplicate(&judge_repeat(&first, None, Some(&old))));
        assert!(!is_duplicate(&judge_repeat(&other, None, Some(&old))));
        // Nothing left to compare: the retry it most likely is.
        assert!(is_duplicate(&judge_repeat(
            &other,
            Some(&write.marker),
            None
        )));
    }
}

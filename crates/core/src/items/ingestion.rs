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
//!
//! An event id is the caller's own (native JSON, `awsmp_usage::Meter`, the CLI), except
//! a CloudEvent's: CloudEvents makes `source` + `id` unique, so two producers may both
//! number their events 1, 2, ...; its idempotency key is [`cloudevents_event_key`], a
//! digest of both, in a form (`ce#` and 64 hex digits) that only a CloudEvent's key
//! takes: every writer that takes a caller's id refuses a `#` in it
//! ([`crate::guardrails::write::check_caller_event_id`]). Caller-chosen ids keep their
//! keys as written.

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

/// The prefix of a CloudEvent's idempotency key ([`cloudevents_event_key`]).
pub const CLOUDEVENTS_KEY_PREFIX: &str = "ce#";

/// The idempotency key (the stored event id) of the CloudEvent `id` from `source`:
/// `ce#` and the hex SHA-256 of both, length-prefixed, so no two (source, id) pairs
/// share a key and the key's length is fixed (67 bytes) however long either is.
pub fn cloudevents_event_key(source: &str, id: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    for part in [source, id] {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part.as_bytes());
    }
    let hex: String = hash.finalize().iter().map(|b| format!("{b:02x}")).collect();
    format!("{CLOUDEVENTS_KEY_PREFIX}{hex}")
}

/// Whether `event_id` is a key [`cloudevents_event_key`] makes.
pub fn is_cloudevents_event_key(event_id: &str) -> bool {
    event_id
        .strip_prefix(CLOUDEVENTS_KEY_PREFIX)
        .is_some_and(|hex| {
            hex.len() == 64
                && hex
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        })
}

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
    use crate::items::{IngestionWrite, ItemError, ingestion_item};
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
    fn every_key_part_is_held_to_dynamodbs_limits_before_any_write() {
        let now = t("2026-11-30T10:20:00Z");
        let fits = |row: &NewUsageRow| IngestionWrite::new(row, now);
        let mut long_id = row(3, "2026-11-30T10:15:00Z");
        // The marker's key (`event#` + id) fits at 1018 bytes; the row's key, with the
        // account, dimension and timestamp in front of the id, does not.
        long_id.event_id = "i".repeat(1018);
        assert!(matches!(
            fits(&long_id),
            Err(ItemError::KeyTooLong { limit: 1024, what, .. }) if what.starts_with("usage row")
        ));
        long_id.event_id = "i".repeat(1019);
        assert!(matches!(fits(&long_id), Err(ItemError::KeyTooLong { .. })));
        // 12 + 1 + 3 + 1 + 20 + 1 = 38 bytes before the id.
        long_id.event_id = "i".repeat(1024 - 38);
        assert!(fits(&long_id).is_ok(), "exactly 1024 bytes fits");
        let mut long_license = row(3, "2026-11-30T10:15:00Z");
        long_license.license_arn = format!("{}{}", long_license.license_arn, "l".repeat(2048));
        assert!(matches!(
            fits(&long_license),
            Err(ItemError::KeyTooLong { limit: 2048, .. })
        ));
        // Bytes, not characters.
        let mut wide = row(3, "2026-11-30T10:15:00Z");
        wide.dimension = "é".repeat(500);
        assert!(matches!(fits(&wide), Err(ItemError::KeyTooLong { bytes, .. }) if bytes > 1024));
    }

    #[test]
    fn a_cloudevents_key_is_fixed_length_unambiguous_and_the_only_id_with_a_hash() {
        let key = cloudevents_event_key("/billing/a", "1");
        assert!(is_cloudevents_event_key(&key));
        assert_eq!(key.len(), 67);
        assert_ne!(key, cloudevents_event_key("/billing/b", "1"));
        // The parts are length-prefixed: moving a character across the boundary is
        // another key.
        assert_ne!(
            cloudevents_event_key("/a", "b1"),
            cloudevents_event_key("/ab", "1")
        );
        assert_eq!(
            cloudevents_event_key(&"s".repeat(5000), "1").len(),
            67,
            "however long the source"
        );
        let mut keyed = row(3, "2026-11-30T10:15:00Z");
        keyed.event_id = key;
        assert!(IngestionWrite::new(&keyed, t("2026-11-30T10:20:00Z")).is_ok());
        keyed.event_id = "ce#not-a-digest".into();
        assert!(matches!(
            IngestionWrite::new(&keyed, t("2026-11-30T10:20:00Z")),
            Err(ItemError::Separator { .. })
        ));
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

//! The shared audit stamp: `createdAt` is written once, `updatedAt` on every write.
//! Audit only: no metering decision ever reads either.

use crate::model::{Attr, attr};
use crate::time::{Instant, format_instant};
use std::collections::BTreeMap;

/// The audit attributes of one write at `now`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditStamp {
    /// Value for `createdAt`, applied only if the item has none (`if_not_exists`).
    pub created_at: String,
    /// Value for `updatedAt`, applied on every write.
    pub updated_at: String,
}

impl AuditStamp {
    /// The stamp for a write at `now` (ISO-8601 whole-second UTC).
    pub fn at(now: Instant) -> Self {
        let text = format_instant(now);
        AuditStamp {
            created_at: text.clone(),
            updated_at: text,
        }
    }

    /// Applies the stamp to an in-memory item: keeps an existing `createdAt`.
    pub fn apply(&self, item: &mut BTreeMap<String, Attr>) {
        item.entry(attr::CREATED_AT.to_string())
            .or_insert_with(|| Attr::S(self.created_at.clone()));
        item.insert(
            attr::UPDATED_AT.to_string(),
            Attr::S(self.updated_at.clone()),
        );
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::time::parse_usage_timestamp;

    #[test]
    fn created_at_is_write_once_and_updated_at_moves() {
        let first = parse_usage_timestamp("2026-11-30T10:00:00Z").unwrap();
        let second = parse_usage_timestamp("2026-11-30T11:00:05Z").unwrap();
        let mut item = BTreeMap::new();
        AuditStamp::at(first).apply(&mut item);
        AuditStamp::at(second).apply(&mut item);
        assert_eq!(item["createdAt"], Attr::S("2026-11-30T10:00:00Z".into()));
        assert_eq!(item["updatedAt"], Attr::S("2026-11-30T11:00:05Z".into()));
    }
}

//! Rows, contexts and attribute values the guardrail tests (and other modules' tests)
//! build their cases from: one valid row at a fixed instant, and the pieces to vary it.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use super::GuardrailContext;
use crate::model::{Attr, RawUsageRow, attr};
use crate::time::{Instant, parse_usage_timestamp};

pub(crate) const LICENSE: &str = "arn:aws:license-manager::123456789012:license:l-0123456789abcdef";
pub(crate) const ACCOUNT: &str = "111122223333";
pub(crate) const PRODUCT: &str = "prod-abc123";
pub(crate) const NOW: &str = "2026-11-30T10:30:00Z";
pub(crate) const TS: &str = "2026-11-30T09:15:42Z";

pub(crate) fn instant(s: &str) -> Instant {
    parse_usage_timestamp(s).unwrap()
}

pub(crate) fn ctx() -> GuardrailContext {
    GuardrailContext::new(instant(NOW), PRODUCT)
}

pub(crate) fn n(text: &str) -> Attr {
    Attr::N(text.to_string())
}

pub(crate) fn s(text: &str) -> Attr {
    Attr::S(text.to_string())
}

/// A valid row for `dimension` at `timestamp` with `quantity`.
pub(crate) fn row_at(dimension: &str, timestamp: &str, quantity: &str) -> RawUsageRow {
    let mut attrs = BTreeMap::new();
    attrs.insert(attr::CUSTOMER_ACCOUNT.to_string(), s(ACCOUNT));
    attrs.insert(attr::DIMENSION.to_string(), s(dimension));
    attrs.insert(attr::TIMESTAMP.to_string(), s(timestamp));
    attrs.insert(attr::QUANTITY.to_string(), n(quantity));
    RawUsageRow {
        license_arn: LICENSE.to_string(),
        sort_key: format!("{ACCOUNT}#{dimension}#{timestamp}"),
        attrs,
    }
}

//! Target `usage_row`: raw usage rows as a seller could write them, built from the
//! input, through the guardrails: [`validate_row`] on each, [`validate_rows`] over all,
//! and [`screen_group`] for the group of the first row that passes.
//!
//! Each attribute is drawn from a few shapes (the valid value, arbitrary text in the
//! right type, absent, any attribute value at all), so the input reaches every check of
//! the guardrail table, not only the first one. The all-zero input is a valid row.
//!
//! Properties: nothing panics; each row ends in a typed row or a reason code; a typed
//! row's quantity is in range and its allocations sum to it; every row lands in
//! exactly one list of [`validate_rows`], and of [`screen_group`] (or in its
//! `other_group`).

use std::collections::BTreeMap;

use awsmp_core::guardrails::{
    GuardrailContext, MAX_QUANTITY, screen_group, validate_row, validate_rows,
};
use awsmp_core::model::{Attr, GroupKey, RawUsageRow, attr};
use awsmp_core::time::{HourBucket, format_instant};

use super::input::Reader;
use super::{ACCOUNT, LICENSE, PRODUCT};

/// Most rows one input builds.
pub const MAX_ROWS: u8 = 4;

/// Checks the rows one input describes.
pub fn check(data: &[u8]) {
    let mut reader = Reader::new(data);
    let ctx = GuardrailContext::new(super::now(), PRODUCT);
    let count = 1 + reader.choose(MAX_ROWS);
    let rows: Vec<RawUsageRow> = (0..count).map(|_| row(&mut reader, &ctx)).collect();

    let mut key = None;
    for row in &rows {
        match validate_row(row, &ctx) {
            Ok(valid) => {
                assert!((0..=MAX_QUANTITY).contains(&valid.quantity), "{valid:?}");
                if let Some(allocations) = &valid.allocations {
                    let sum: i64 = allocations.iter().map(|a| a.quantity).sum();
                    assert_eq!(sum, valid.quantity, "{valid:?}");
                }
                key.get_or_insert_with(|| GroupKey {
                    license_arn: valid.license_arn.clone(),
                    customer_aws_account_id: valid.customer_aws_account_id.clone(),
                    dimension: valid.dimension.clone(),
                    hour: HourBucket::containing(valid.timestamp),
                });
            }
            Err(reason) => drop(reason.to_string()),
        }
    }
    let outcome = validate_rows(&rows, &ctx);
    assert_eq!(outcome.accepted.len() + outcome.rejected.len(), rows.len());

    let key = key.unwrap_or_else(|| GroupKey {
        license_arn: LICENSE.to_string(),
        customer_aws_account_id: ACCOUNT.to_string(),
        dimension: "requests".to_string(),
        hour: HourBucket::containing(ctx.now),
    });
    let screened = screen_group(&key, &rows, None, &ctx);
    assert_eq!(
        screened.outcome.accepted.len()
            + screened.outcome.rejected.len()
            + screened.other_group.len(),
        rows.len(),
        "{screened:?}"
    );
}

/// One raw row drawn from the input.
fn row(reader: &mut Reader<'_>, ctx: &GuardrailContext) -> RawUsageRow {
    let license_arn = match reader.choose(3) {
        0 => LICENSE.to_string(),
        1 => reader.text(),
        _ => format!("{LICENSE}{}", reader.text()),
    };
    let account = match reader.choose(4) {
        0 => Some(Attr::S(ACCOUNT.to_string())),
        1 => Some(Attr::S(reader.text())),
        2 => None,
        _ => Some(any_attr(reader, 2)),
    };
    let dimension = match reader.choose(4) {
        0 => Some(Attr::S("requests".to_string())),
        1 => Some(Attr::S(reader.text())),
        2 => None,
        _ => Some(any_attr(reader, 2)),
    };
    let timestamp = match reader.choose(5) {
        0 | 4 => {
            // Up to 255 * 7 minutes back: most inside the 24 h window, some outside.
            let minutes = i64::from(reader.byte()) * 7;
            let t = ctx.now - chrono::Duration::minutes(minutes);
            let text = format_instant(t);
            Some(Attr::S(if reader.byte() & 1 == 0 {
                text
            } else {
                text.trim_end_matches('Z').to_string()
            }))
        }
        1 => Some(Attr::S(reader.text())),
        2 => None,
        _ => Some(any_attr(reader, 2)),
    };
    let quantity_text = match reader.choose(4) {
        0 => Some(reader.byte().to_string()),
        1 => Some(reader.text()),
        _ => None,
    };
    let quantity = match (&quantity_text, reader.choose(3)) {
        (Some(text), 0 | 1) => Some(Attr::N(text.clone())),
        (Some(text), _) => Some(Attr::S(text.clone())),
        (None, 0) => None,
        (None, _) => Some(any_attr(reader, 2)),
    };
    let product_code = match reader.choose(5) {
        0 => None,
        1 => Some(Attr::S(PRODUCT.to_string())),
        2 => Some(Attr::S(reader.text())),
        3 => Some(Attr::Null),
        _ => Some(any_attr(reader, 2)),
    };
    let total: i64 = quantity_text
        .as_deref()
        .and_then(|t| t.parse().ok())
        .unwrap_or(0);
    let allocations = match reader.choose(4) {
        0 => None,
        1 => Some(Attr::Null),
        2 => Some(allocations(reader, total)),
        _ => Some(any_attr(reader, 3)),
    };

    let mut attrs = BTreeMap::new();
    for (name, value) in [
        (attr::CUSTOMER_ACCOUNT, account),
        (attr::DIMENSION, dimension),
        (attr::TIMESTAMP, timestamp),
        (attr::QUANTITY, quantity),
        (attr::PRODUCT_CODE, product_code),
        (attr::USAGE_ALLOCATIONS, allocations),
    ] {
        if let Some(value) = value {
            attrs.insert(name.to_string(), value);
        }
    }
    for _ in 0..reader.choose(3) {
        let name = reader.text();
        attrs.insert(name, any_attr(reader, 2));
    }

    let text_of = |name: &str| {
        attrs
            .get(name)
            .and_then(Attr::as_s)
            .unwrap_or("")
            .to_string()
    };
    let own_key = format!(
        "{}#{}#{}",
        text_of(attr::CUSTOMER_ACCOUNT),
        text_of(attr::DIMENSION),
        text_of(attr::TIMESTAMP)
    );
    let sort_key = match reader.choose(4) {
        0 => own_key,
        1 => format!("{own_key}#{}", reader.text()),
        2 => reader.text(),
        _ => match own_key.strip_suffix('Z') {
            Some(without) => without.to_string(),
            None => format!("{own_key}Z"),
        },
    };
    RawUsageRow {
        license_arn,
        sort_key,
        attrs,
    }
}

/// A `usageAllocations` list: mostly the right shape, quantities mostly summing to
/// `total` (the last one takes the rest), tags mostly valid.
fn allocations(reader: &mut Reader<'_>, total: i64) -> Attr {
    let count = 1 + usize::from(reader.choose(4));
    let mut left = total;
    let mut items = Vec::with_capacity(count);
    for i in 0..count {
        let quantity = match reader.choose(3) {
            0 if i + 1 == count => Attr::N(left.to_string()),
            0 => {
                let q = i64::from(reader.byte()).min(left.max(0));
                left -= q;
                Attr::N(q.to_string())
            }
            1 => Attr::N(reader.text()),
            _ => any_attr(reader, 1),
        };
        let mut fields = BTreeMap::from([(attr::ALLOCATED_USAGE_QUANTITY.to_string(), quantity)]);
        match reader.choose(4) {
            0 => {
                let tags = (0..reader.choose(7)).map(|_| tag(reader)).collect();
                fields.insert(attr::TAGS.to_string(), Attr::L(tags));
            }
            1 => {}
            2 => {
                fields.insert(attr::TAGS.to_string(), Attr::Null);
            }
            _ => {
                let name = if reader.byte() & 1 == 0 {
                    attr::TAGS.to_string()
                } else {
                    reader.text()
                };
                fields.insert(name, any_attr(reader, 2));
            }
        }
        items.push(Attr::M(fields));
    }
    Attr::L(items)
}

/// One tag map: mostly `{key: S, value: S}`.
fn tag(reader: &mut Reader<'_>) -> Attr {
    let part = |reader: &mut Reader<'_>, fixed: &str| match reader.choose(5) {
        0 => Some(Attr::S(fixed.to_string())),
        1 | 2 => Some(Attr::S(reader.text())),
        3 => None,
        _ => Some(any_attr(reader, 1)),
    };
    let mut fields = BTreeMap::new();
    if let Some(key) = part(reader, "team") {
        fields.insert(attr::TAG_KEY.to_string(), key);
    }
    if let Some(value) = part(reader, "blue") {
        fields.insert(attr::TAG_VALUE.to_string(), value);
    }
    if reader.choose(8) == 7 {
        let name = reader.text();
        fields.insert(name, any_attr(reader, 1));
    }
    Attr::M(fields)
}

/// Any attribute value, nested at most `depth` deep.
fn any_attr(reader: &mut Reader<'_>, depth: u8) -> Attr {
    let kinds = if depth == 0 { 5 } else { 8 };
    match reader.choose(kinds) {
        0 => Attr::S(reader.text()),
        1 => Attr::N(reader.text()),
        2 => Attr::Bool(reader.byte() & 1 == 1),
        3 => Attr::Null,
        4 => Attr::Other(reader.text()),
        5 => Attr::L(
            (0..reader.choose(4))
                .map(|_| any_attr(reader, depth - 1))
                .collect(),
        ),
        6 => Attr::M(
            (0..reader.choose(4))
                .map(|_| (reader.text(), any_attr(reader, depth - 1)))
                .collect(),
        ),
        _ => Attr::Ss((0..reader.choose(4)).map(|_| reader.text()).collect()),
    }
}

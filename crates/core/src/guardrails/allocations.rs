//! The `usageAllocations` attribute (checks 14..19): its shape, its quantities, its tags
//! against the API's pattern and limits, and their sum against the row's quantity.

use std::collections::BTreeMap;

use super::quantity::{QuantityProblem, quantity_value};
use super::{MAX_TAG_KEY_LEN, MAX_TAG_VALUE_LEN, MAX_TAGS_PER_ALLOCATION};
use crate::model::{Allocation, Attr, ReasonCode, Tag, attr};

/// One allocation after the shape check (checks 14..19 run in passes over these, so
/// the first failing check across all allocations wins, not the first allocation).
struct RawAllocation<'a> {
    quantity_text: &'a str,
    tags: Vec<(Option<&'a str>, Option<&'a str>)>,
}

pub(crate) fn allocations_from_attr(
    value: &Attr,
    quantity: i64,
) -> Result<Vec<Allocation>, ReasonCode> {
    let shaped = allocation_shapes(value).ok_or(ReasonCode::MalformedAllocations)?;

    let quantities = shaped
        .iter()
        .map(|a| match quantity_value(a.quantity_text) {
            Ok(q) => Ok(q),
            Err(QuantityProblem::NotANumber) => Err(ReasonCode::MalformedAllocations),
            Err(_) => Err(ReasonCode::NegativeOrNonIntegerAllocation),
        })
        .collect::<Result<Vec<i64>, ReasonCode>>()?;

    let present = |part: Option<&str>| part.is_some_and(|s| !s.is_empty());
    if shaped
        .iter()
        .flat_map(|a| &a.tags)
        .any(|(key, value)| !present(*key) || !present(*value))
    {
        return Err(ReasonCode::MissingTagKeyOrValue);
    }

    let mut allocations = Vec::with_capacity(shaped.len());
    for (shape, quantity) in shaped.iter().zip(quantities) {
        let tags: Vec<Tag> = shape
            .tags
            .iter()
            .map(|(key, value)| Tag {
                key: key.unwrap_or_default().to_string(),
                value: value.unwrap_or_default().to_string(),
            })
            .collect();
        allocations.push(Allocation { quantity, tags });
    }
    if allocations.iter().any(|a| !tags_valid(&a.tags)) {
        return Err(ReasonCode::InvalidTag);
    }
    if allocations
        .iter()
        .any(|a| a.tags.len() > MAX_TAGS_PER_ALLOCATION)
    {
        return Err(ReasonCode::TooManyTags);
    }
    if allocations.iter().map(|a| a.quantity).sum::<i64>() != quantity {
        return Err(ReasonCode::AllocationSumMismatch);
    }
    Ok(allocations)
}

/// The structural check (14): `None` when the value is not a non-empty list of
/// `{allocatedUsageQuantity: N, tags?: [{key: S, value: S}]}` maps.
fn allocation_shapes(value: &Attr) -> Option<Vec<RawAllocation<'_>>> {
    let Attr::L(items) = value else {
        return None;
    };
    if items.is_empty() {
        return None;
    }
    items
        .iter()
        .map(|item| {
            let Attr::M(fields) = item else {
                return None;
            };
            if !only_fields(fields, &[attr::ALLOCATED_USAGE_QUANTITY, attr::TAGS]) {
                return None;
            }
            let Some(Attr::N(quantity_text)) = fields.get(attr::ALLOCATED_USAGE_QUANTITY) else {
                return None;
            };
            let tags = match fields.get(attr::TAGS) {
                None | Some(Attr::Null) => Vec::new(),
                Some(Attr::L(tags)) => tags.iter().map(tag_shape).collect::<Option<Vec<_>>>()?,
                Some(_) => return None,
            };
            Some(RawAllocation {
                quantity_text,
                tags,
            })
        })
        .collect()
}

/// A tag map's key and value: `Some(None)` inside for a missing or `NULL` part (check
/// 16 reports it), `None` when the tag is not a map of strings.
fn tag_shape(tag: &Attr) -> Option<(Option<&str>, Option<&str>)> {
    let Attr::M(fields) = tag else {
        return None;
    };
    if !only_fields(fields, &[attr::TAG_KEY, attr::TAG_VALUE]) {
        return None;
    }
    let part = |name: &str| match fields.get(name) {
        None | Some(Attr::Null) => Some(None),
        Some(Attr::S(s)) => Some(Some(s.as_str())),
        Some(_) => None,
    };
    Some((part(attr::TAG_KEY)?, part(attr::TAG_VALUE)?))
}

fn only_fields(fields: &BTreeMap<String, Attr>, allowed: &[&str]) -> bool {
    fields.keys().all(|k| allowed.contains(&k.as_str()))
}

/// Check 17 on one allocation's (present, non-empty) tags.
fn tags_valid(tags: &[Tag]) -> bool {
    let each_valid = tags.iter().all(|t| {
        tag_text_valid(&t.key, MAX_TAG_KEY_LEN) && tag_text_valid(&t.value, MAX_TAG_VALUE_LEN)
    });
    let unique_keys = tags
        .iter()
        .enumerate()
        .all(|(i, t)| tags[..i].iter().all(|earlier| earlier.key != t.key));
    each_valid && unique_keys
}

/// The API's `^[a-zA-Z0-9+ -=._:\/@]+$` plus a length limit. Every allowed character is
/// ASCII, so once the characters pass, bytes and characters count the same.
fn tag_text_valid(text: &str, max_len: usize) -> bool {
    !text.is_empty() && text.bytes().all(tag_byte_allowed) && text.len() <= max_len
}

/// One byte of the tag pattern's class `[a-zA-Z0-9+ -=._:\/@]`. Its `+`, `.`, `:` and
/// `/` all fall inside the range space..=`=` (0x20..=0x3D), so the class reduces to
/// letters, digits, that range, `_` and `@`.
fn tag_byte_allowed(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b' '..=b'=' | b'_' | b'@')
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use regex::Regex;

    #[test]
    fn tag_bytes_match_the_api_pattern() {
        let pattern = Regex::new(r"^[a-zA-Z0-9+ -=._:\/@]+$").unwrap();
        for b in 0u8..=127 {
            let text = (b as char).to_string();
            assert_eq!(tag_byte_allowed(b), pattern.is_match(&text), "byte {b:#x}");
        }
        for b in 128u8..=255 {
            assert!(!tag_byte_allowed(b));
        }
    }
}

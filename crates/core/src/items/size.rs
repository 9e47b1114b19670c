//! DynamoDB's item-size arithmetic and its limits (400 KB items, 100-item and 4 MB
//! transactions), so in-memory stores refuse what DynamoDB refuses (`items::check_item`,
//! `items::check_transaction`) and a guardrail can tell ahead of time whether a row
//! will fit.
//!
//! Sizes follow the DynamoDB developer guide ("Item sizes and formats"): an item is
//! the sum over its attributes of the UTF-8 length of the name plus the size of the
//! value. The guide gives numbers only approximately; this is the usual reading of it.

use crate::model::{Attr, RawUsageRow, attr};

/// Largest item DynamoDB stores: 400 KB (names and values, keys included).
pub const MAX_ITEM_BYTES: usize = 400 * 1024;

/// Most actions one `TransactWriteItems` holds.
pub const MAX_TRANSACTION_ITEMS: usize = 100;

/// Largest aggregate size of the items of one transaction: 4 MB.
pub const MAX_TRANSACTION_BYTES: usize = 4 * 1024 * 1024;

/// The size DynamoDB counts for one value:
/// - `S`: its UTF-8 length; `SS`: the sum of its strings' lengths;
/// - `N`: 1 byte per two significant digits (leading and trailing zeros trimmed,
///   rounded up) plus 1, and 1 more when negative;
/// - `BOOL`, `NULL`: 1;
/// - `L`: 3 bytes of overhead plus, per element, 1 byte and the element's size;
///   `M`: the same, each entry also counting the UTF-8 length of its name;
/// - [`Attr::Other`] (binary or number sets, which the domain only names): 0, as
///   their contents are not known.
pub fn value_size(value: &Attr) -> usize {
    match value {
        Attr::S(s) => s.len(),
        Attr::N(n) => number_size(n),
        Attr::Bool(_) | Attr::Null => 1,
        Attr::L(items) => 3 + items.iter().map(|v| 1 + value_size(v)).sum::<usize>(),
        Attr::M(map) => {
            3 + map
                .iter()
                .map(|(k, v)| 1 + k.len() + value_size(v))
                .sum::<usize>()
        }
        Attr::Ss(values) => values.iter().map(String::len).sum(),
        Attr::Other(_) => 0,
    }
}

/// The size of a number given as its decimal text (see [`value_size`]).
fn number_size(text: &str) -> usize {
    let negative = text.starts_with('-');
    // Significant digits of the mantissa: drop the sign, any exponent, the point and
    // leading/trailing zeros.
    let mantissa = text
        .trim_start_matches(['-', '+'])
        .split(['e', 'E'])
        .next()
        .unwrap_or_default();
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let significant = digits.trim_start_matches('0').trim_end_matches('0').len();
    significant.max(1).div_ceil(2) + 1 + usize::from(negative)
}

/// The size of an item given as its attributes (keys included).
pub fn item_size<'a>(attrs: impl IntoIterator<Item = (&'a String, &'a Attr)>) -> usize {
    attrs
        .into_iter()
        .map(|(name, value)| name.len() + value_size(value))
        .sum()
}

/// The size of a usage-table item: its two keys plus its attributes.
pub fn raw_row_size(row: &RawUsageRow) -> usize {
    attr::LICENSE_ARN.len()
        + row.license_arn.len()
        + attr::USAGE_SORT_KEY.len()
        + row.sort_key.len()
        + item_size(&row.attrs)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn values_are_sized_as_dynamodb_documents() {
        assert_eq!(value_size(&Attr::S("héllo".into())), 6);
        assert_eq!(value_size(&Attr::N("0".into())), 2);
        assert_eq!(value_size(&Attr::N("42".into())), 2);
        assert_eq!(value_size(&Attr::N("123".into())), 3);
        assert_eq!(value_size(&Attr::N("1000".into())), 2);
        assert_eq!(value_size(&Attr::N("-12.50".into())), 4);
        assert_eq!(value_size(&Attr::Bool(true)), 1);
        assert_eq!(value_size(&Attr::Null), 1);
        assert_eq!(value_size(&Attr::L(vec![])), 3);
        assert_eq!(
            value_size(&Attr::L(vec![Attr::S("ab".into()), Attr::Null])),
            3 + (1 + 2) + (1 + 1)
        );
        assert_eq!(
            value_size(&Attr::M(BTreeMap::from([(
                "key".to_string(),
                Attr::S("v".into())
            )]))),
            3 + 1 + 3 + 1
        );
        assert_eq!(value_size(&Attr::Ss(vec!["a".into(), "bc".into()])), 3);
    }

    #[test]
    fn a_row_counts_its_keys_names_and_values() {
        let row = RawUsageRow {
            license_arn: "L".into(),
            sort_key: "sk".into(),
            attrs: BTreeMap::from([("quantity".to_string(), Attr::N("7".into()))]),
        };
        assert_eq!(
            raw_row_size(&row),
            attr::LICENSE_ARN.len() + 1 + attr::USAGE_SORT_KEY.len() + 2 + 8 + 2
        );
    }
}

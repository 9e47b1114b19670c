//! Exact decimal quantities for comparing our integer totals with what AWS recorded:
//! CloudTrail's `quantity` / `quantityAsDecimal` (up to 6 decimals) and the SDDS
//! `usage_quantity` (up to 2 decimals). Fixed point in millionths, never a float.

use std::fmt;
use std::ops::{Add, Sub};

use serde::{Serialize, Serializer};

/// Millionths per unit: `QuantityAsDecimal` allows 6 decimal places.
const SCALE: i64 = 1_000_000;

/// A quantity in millionths of a unit (exact up to 6 decimal places). Serialized as
/// its exact decimal text (`"12.5"`), never as a float.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Quantity(i64);

/// Text that is not a decimal quantity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0:?} is not a decimal quantity (digits, an optional '-', at most 6 decimal places, e.g. 12 or 12.25)"
)]
pub struct MalformedQuantity(pub String);

impl Quantity {
    /// Zero.
    pub const ZERO: Quantity = Quantity(0);

    /// A whole number of units (our records' quantities). Saturates far beyond any
    /// quantity Marketplace accepts (2,147,483,647).
    pub fn units(units: i64) -> Self {
        Quantity(units.saturating_mul(SCALE))
    }

    /// The quantity in millionths.
    pub fn micros(self) -> i64 {
        self.0
    }

    /// A quantity from millionths.
    pub const fn from_micros(micros: i64) -> Self {
        Quantity(micros)
    }

    /// The absolute value.
    pub fn abs(self) -> Self {
        Quantity(self.0.saturating_abs())
    }

    /// Parses decimal text: `12`, `12.5`, `-0.25`, `007` (at most 6 decimals, at most
    /// 12 integer digits). Exponents, `+`, spaces inside and empty text are refused.
    pub fn parse(text: &str) -> Result<Self, MalformedQuantity> {
        let bad = || MalformedQuantity(text.to_string());
        let trimmed = text.trim();
        let (negative, body) = match trimmed.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, trimmed),
        };
        let (whole, fraction) = match body.split_once('.') {
            Some((w, f)) => (w, f),
            None => (body, ""),
        };
        let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if whole.is_empty()
            || whole.len() > 12
            || fraction.len() > 6
            || !digits(whole)
            || !digits(fraction)
            || (body.contains('.') && fraction.is_empty())
        {
            return Err(bad());
        }
        let whole: i64 = whole.parse().map_err(|_| bad())?;
        let mut micros_text = fraction.to_string();
        while micros_text.len() < 6 {
            micros_text.push('0');
        }
        let fraction: i64 = micros_text.parse().map_err(|_| bad())?;
        let value = whole
            .checked_mul(SCALE)
            .and_then(|w| w.checked_add(fraction))
            .ok_or_else(bad)?;
        Ok(Quantity(if negative { -value } else { value }))
    }
}

impl Serialize for Quantity {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.to_string())
    }
}

impl schemars::JsonSchema for Quantity {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Quantity".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "pattern": "^-?\\d+(\\.\\d+)?$",
            "description": "A decimal quantity, as text (exact)."
        })
    }
}

impl Add for Quantity {
    type Output = Quantity;
    fn add(self, rhs: Quantity) -> Quantity {
        Quantity(self.0.saturating_add(rhs.0))
    }
}

impl Sub for Quantity {
    type Output = Quantity;
    fn sub(self, rhs: Quantity) -> Quantity {
        Quantity(self.0.saturating_sub(rhs.0))
    }
}

impl std::iter::Sum for Quantity {
    fn sum<I: Iterator<Item = Quantity>>(iter: I) -> Quantity {
        iter.fold(Quantity::ZERO, |a, b| a + b)
    }
}

impl fmt::Display for Quantity {
    /// Shortest exact decimal: `12`, `12.5`, `-0.000001`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.0 < 0 { "-" } else { "" };
        let abs = self.0.unsigned_abs();
        let scale = SCALE.unsigned_abs();
        let whole = abs / scale;
        let fraction = abs % scale;
        if fraction == 0 {
            return write!(f, "{sign}{whole}");
        }
        let text = format!("{fraction:06}");
        write!(f, "{sign}{whole}.{}", text.trim_end_matches('0'))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_the_forms_aws_writes_and_refuses_the_rest() {
        let cases: &[(&str, Option<i64>)] = &[
            ("12", Some(12_000_000)),
            ("12.5", Some(12_500_000)),
            ("12.25", Some(12_250_000)),
            ("0.000001", Some(1)),
            ("-3.5", Some(-3_500_000)),
            ("007", Some(7_000_000)),
            (" 4 ", Some(4_000_000)),
            ("", None),
            ("-", None),
            ("1.", None),
            (".5", None),
            ("1e3", None),
            ("+1", None),
            ("1.0000001", None),
            ("1,5", None),
            ("NaN", None),
            ("1 000", None),
            ("9999999999999", None),
        ];
        for (text, expected) in cases {
            assert_eq!(
                Quantity::parse(text).ok().map(Quantity::micros),
                *expected,
                "{text:?}"
            );
        }
    }

    #[test]
    fn prints_the_shortest_exact_decimal() {
        assert_eq!(Quantity::units(42).to_string(), "42");
        assert_eq!(Quantity::parse("12.50").unwrap().to_string(), "12.5");
        assert_eq!(Quantity::from_micros(-1).to_string(), "-0.000001");
        assert_eq!(Quantity::ZERO.to_string(), "0");
    }

    proptest! {
        #[test]
        fn display_parses_back_to_the_same_quantity(micros in -999_999_999_999_999i64..999_999_999_999_999i64) {
            let q = Quantity::from_micros(micros);
            prop_assert_eq!(Quantity::parse(&q.to_string()), Ok(q));
        }
    }
}

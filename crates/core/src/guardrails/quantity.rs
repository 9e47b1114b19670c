//! The decimal reader behind every quantity check (7..10, 15): DynamoDB number text read
//! exactly, never through floating point.

use super::MAX_QUANTITY;
use crate::model::ReasonCode;

/// A decimal number's value as far as the guardrails care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decimal {
    /// An integer: its sign and magnitude (saturated at `u64::MAX`).
    Integer { negative: bool, magnitude: u64 },
    /// A number with a non-zero fractional part.
    Fraction,
}

/// Parses DynamoDB number text (`[+-]digits[.digits][e[+-]digits]`) exactly, without
/// going through floating point (which would round `2147483647.5` to an integer).
fn parse_decimal(text: &str) -> Option<Decimal> {
    let (negative, body) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let (mantissa, exponent) = match body.find(['e', 'E']) {
        Some(at) => (&body[..at], parse_exponent(&body[at + 1..])?),
        None => (body, 0),
    };
    let (int_digits, frac_digits) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if (int_digits.is_empty() && frac_digits.is_empty())
        || !all_digits(int_digits)
        || !all_digits(frac_digits)
    {
        return None;
    }
    let digits: Vec<u8> = int_digits
        .bytes()
        .chain(frac_digits.bytes())
        .map(|b| b - b'0')
        .collect();
    if digits.iter().all(|d| *d == 0) {
        return Some(Decimal::Integer {
            negative,
            magnitude: 0,
        });
    }
    // `point` = how many of `digits` (padded with zeros on the right) precede the
    // decimal point once the exponent is applied; may be negative or past the end.
    let point = int_digits.len() as i64 + exponent;
    let fraction_start = usize::try_from(point.max(0)).unwrap_or(usize::MAX);
    if digits.iter().skip(fraction_start).any(|d| *d != 0) {
        return Some(Decimal::Fraction);
    }
    let mut magnitude: u64 = 0;
    for position in 0..fraction_start {
        let digit = digits.get(position).copied().unwrap_or(0);
        magnitude = magnitude
            .saturating_mul(10)
            .saturating_add(u64::from(digit));
        // A non-zero digit has been seen (all-zero was handled above) once the value
        // saturates, so stopping here keeps `1e999999999` cheap.
        if magnitude == u64::MAX {
            break;
        }
    }
    Some(Decimal::Integer {
        negative,
        magnitude,
    })
}

/// Exponent digits, clamped far beyond anything that matters (keeps arithmetic safe).
fn parse_exponent(text: &str) -> Option<i64> {
    const LIMIT: i64 = 1_000_000_000;
    let (negative, digits) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let value = digits.bytes().fold(0i64, |acc, b| {
        acc.saturating_mul(10)
            .saturating_add(i64::from(b - b'0'))
            .min(LIMIT)
    });
    Some(if negative { -value } else { value })
}

/// Why a number is not a usable quantity (0..=2147483647).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum QuantityProblem {
    NotANumber,
    Fractional,
    Negative,
    TooLarge,
}

pub(super) fn quantity_value(text: &str) -> Result<i64, QuantityProblem> {
    match parse_decimal(text) {
        None => Err(QuantityProblem::NotANumber),
        Some(Decimal::Fraction) => Err(QuantityProblem::Fractional),
        Some(Decimal::Integer {
            negative: true,
            magnitude,
        }) if magnitude > 0 => Err(QuantityProblem::Negative),
        Some(Decimal::Integer { magnitude, .. }) => i64::try_from(magnitude)
            .ok()
            .filter(|q| *q <= MAX_QUANTITY)
            .ok_or(QuantityProblem::TooLarge),
    }
}

/// Reads DynamoDB number text as a usage quantity (checks 7..10): the integer in
/// `0..=2147483647`, or the reason code of the first check it fails. Exact decimal
/// arithmetic, never floating point; `2.0` and `2e3` are integers.
pub fn quantity_from_text(text: &str) -> Result<i64, ReasonCode> {
    quantity_value(text).map_err(|problem| match problem {
        QuantityProblem::NotANumber => ReasonCode::NonNumericQuantity,
        QuantityProblem::Fractional => ReasonCode::NonIntegerQuantity,
        QuantityProblem::Negative => ReasonCode::NegativeQuantity,
        QuantityProblem::TooLarge => ReasonCode::QuantityTooLarge,
    })
}

/// A usage quantity given as a JSON number (or a string holding one): the integer in
/// `0..=2147483647`, or the reason code the aggregator gives a stored quantity that is
/// not one.
pub fn quantity_of_json(value: &serde_json::Value) -> Result<i64, ReasonCode> {
    match value {
        serde_json::Value::Number(n) => quantity_from_text(&n.to_string()),
        serde_json::Value::String(s) => quantity_from_text(s.trim()),
        _ => Err(ReasonCode::NonNumericQuantity),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn decimal_parser_reads_exactly() {
        let int = |negative, magnitude| {
            Some(Decimal::Integer {
                negative,
                magnitude,
            })
        };
        let cases = [
            ("0", int(false, 0)),
            ("007", int(false, 7)),
            ("+5", int(false, 5)),
            ("1E3", int(false, 1000)),
            ("1.25e2", int(false, 125)),
            ("1.255e2", Some(Decimal::Fraction)),
            ("0.0001e4", int(false, 1)),
            ("5.", int(false, 5)),
            (".5", Some(Decimal::Fraction)),
            ("0e999999999999", int(false, 0)),
            ("1e-999999999999", Some(Decimal::Fraction)),
            ("-", None),
            ("1.2.3", None),
            ("1e+", None),
            ("0x10", None),
            ("Infinity", None),
        ];
        for (text, want) in cases {
            assert_eq!(parse_decimal(text), want, "{text}");
        }
    }
}

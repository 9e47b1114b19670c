//! Target `quantity`: the input is the text of a DynamoDB number attribute, read by
//! the guardrails' exact decimal quantity parser
//! ([`awsmp_core::guardrails::quantity_from_text`]).
//!
//! Properties: nothing panics; every text ends in a quantity in `0..=2147483647` or a
//! reason code; and wherever the simple model below applies (exponents within ±400),
//! the parser agrees with it. The model shifts the decimal point in the digit string
//! instead of accumulating a value, so the two are written independently.

use awsmp_core::guardrails::{MAX_QUANTITY, quantity_from_text};
use awsmp_core::model::ReasonCode;

/// Checks one number text.
pub fn check(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let parsed = quantity_from_text(text);
    if let Ok(quantity) = parsed {
        assert!(
            (0..=MAX_QUANTITY).contains(&quantity),
            "{text:?} -> {quantity}"
        );
    }
    if let Some(expected) = model(text) {
        assert_eq!(
            parsed, expected,
            "quantity parser disagrees with the model on {text:?}"
        );
    }
}

/// What `text` must read as, or `None` where the model does not go (huge exponents).
fn model(text: &str) -> Option<Result<i64, ReasonCode>> {
    const NOT_A_NUMBER: Option<Result<i64, ReasonCode>> = Some(Err(ReasonCode::NonNumericQuantity));
    let digits_only = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    let (negative, body) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let (mantissa, exponent) = match body.find(['e', 'E']) {
        None => (body, 0),
        Some(at) => {
            let exponent_text = &body[at + 1..];
            let unsigned = exponent_text
                .strip_prefix(['+', '-'])
                .unwrap_or(exponent_text);
            if unsigned.is_empty() || !digits_only(unsigned) {
                return NOT_A_NUMBER;
            }
            let exponent: i64 = exponent_text.parse().ok()?;
            if exponent.abs() > 400 {
                return None;
            }
            (&body[..at], exponent)
        }
    };
    let (int_part, frac_part) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if (int_part.is_empty() && frac_part.is_empty())
        || !digits_only(int_part)
        || !digits_only(frac_part)
    {
        return NOT_A_NUMBER;
    }
    let digits = format!("{int_part}{frac_part}");
    if digits.bytes().all(|b| b == b'0') {
        return Some(Ok(0));
    }
    // Where the decimal point lands in `digits` once the exponent is applied.
    let point = int_part.len() as i64 + exponent;
    let (whole, fraction) = if point <= 0 {
        (String::new(), digits.clone())
    } else {
        let point = usize::try_from(point).ok()?;
        if point >= digits.len() {
            (format!("{digits:0<point$}"), String::new())
        } else {
            (digits[..point].to_string(), digits[point..].to_string())
        }
    };
    if fraction.bytes().any(|b| b != b'0') {
        return Some(Err(ReasonCode::NonIntegerQuantity));
    }
    if negative {
        return Some(Err(ReasonCode::NegativeQuantity));
    }
    let significant = whole.trim_start_matches('0');
    match significant.parse::<i64>() {
        Ok(value) if significant.len() <= 10 && value <= MAX_QUANTITY => Some(Ok(value)),
        _ => Some(Err(ReasonCode::QuantityTooLarge)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_reads_the_documented_examples() {
        assert_eq!(model("2.0"), Some(Ok(2)));
        assert_eq!(model("2e3"), Some(Ok(2000)));
        assert_eq!(model("1.5"), Some(Err(ReasonCode::NonIntegerQuantity)));
        assert_eq!(model("-1"), Some(Err(ReasonCode::NegativeQuantity)));
        assert_eq!(model("-0"), Some(Ok(0)));
        assert_eq!(model("2147483648"), Some(Err(ReasonCode::QuantityTooLarge)));
        assert_eq!(
            model("2147483647.5"),
            Some(Err(ReasonCode::NonIntegerQuantity))
        );
        assert_eq!(model("12e-1"), Some(Err(ReasonCode::NonIntegerQuantity)));
        assert_eq!(model("120e-1"), Some(Ok(12)));
        assert_eq!(model("1e"), Some(Err(ReasonCode::NonNumericQuantity)));
        assert_eq!(model("."), Some(Err(ReasonCode::NonNumericQuantity)));
        assert_eq!(model("1e999999"), None);
    }
}

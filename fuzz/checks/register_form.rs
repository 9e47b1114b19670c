//! Target `register_form`: the register Lambda's form reader
//! ([`awsmp_register::form::parse_form`]) on a fuzzed body, content type and base64
//! flag, with the allowlist the handler tests use.
//!
//! Input layout: one flag byte (bit 0: `isBase64Encoded`; bit 7: no body; bits 1..=3
//! pick the `Content-Type`, one choice taking it from the first input line), then the
//! body.
//!
//! Properties: nothing panics; an error is a [`FormError`] that the handler answers
//! with a 4xx; a form that reads keeps only allowlisted fields, each trimmed,
//! non-empty, at most [`MAX_VALUE_CHARS`] characters and free of control characters
//! other than tab and line breaks, and a token of at most [`MAX_TOKEN_BYTES`] bytes.

use awsmp_register::RegisterError;
use awsmp_register::form::{
    FormError, MAX_TOKEN_BYTES, MAX_VALUE_CHARS, RegistrationForm, parse_form,
};

use super::input::Reader;

/// The allowlist (`ALLOWED_REGISTRATION_FIELDS`) of the checks.
pub const ALLOWED: [&str; 3] = ["companyName", "contactName", "contactEmail"];

/// The boundary of the fixed multipart content type.
pub const BOUNDARY: &str = "XyZ";

/// Reads the flag byte's content-type choice (bits 1..=3) from `reader`.
pub fn content_type(flags: u8, reader: &mut Reader<'_>) -> Option<String> {
    let fixed = |s: &str| Some(s.to_string());
    match (flags >> 1) & 0b111 {
        0 => fixed("application/x-www-form-urlencoded"),
        1 => Some(format!("multipart/form-data; boundary={BOUNDARY}")),
        2 => None,
        3 => Some(reader.line()),
        4 => fixed("application/x-www-form-urlencoded; charset=UTF-8"),
        5 => fixed("Multipart/Form-Data; boundary=\"a b\""),
        6 => fixed("text/plain"),
        _ => fixed("multipart/form-data"),
    }
}

/// Checks one form post.
pub fn check(data: &[u8]) {
    let mut reader = Reader::new(data);
    let flags = reader.byte();
    let is_base64 = flags & 1 != 0;
    let content_type = content_type(flags, &mut reader);
    let body_bytes = reader.rest();
    // API Gateway hands the Lambda the body as a JSON string: always text.
    let body = (flags & 0x80 == 0).then(|| String::from_utf8_lossy(body_bytes).into_owned());
    let allowed: Vec<String> = ALLOWED.iter().map(|s| s.to_string()).collect();
    let result = super::block_on(parse_form(
        content_type.as_deref(),
        body.as_deref(),
        is_base64,
        &allowed,
    ));
    match result {
        Ok(form) => check_form(&form),
        Err(e) => check_error(e),
    }
}

/// The invariants of a form that reads.
pub fn check_form(form: &RegistrationForm) {
    if let Some(token) = &form.token {
        let token = token.expose();
        assert!(!token.is_empty() && token.len() <= MAX_TOKEN_BYTES);
        assert_eq!(token, token.trim());
    }
    for (name, value) in &form.fields {
        assert!(ALLOWED.contains(&name.as_str()), "kept {name:?}");
        assert!(
            !value.is_empty() && value.trim() == value,
            "{name}: {value:?}"
        );
        assert!(value.chars().count() <= MAX_VALUE_CHARS);
        assert!(
            !value
                .chars()
                .any(|c| c.is_control() && !matches!(c, '\t' | '\n' | '\r')),
            "{name} keeps a control character"
        );
    }
}

/// A form error is answered with a 4xx and a code.
pub fn check_error(e: FormError) {
    let _ = e.to_string();
    let e = RegisterError::from(e);
    assert!((400..500).contains(&e.status()), "{e:?} -> {}", e.status());
    assert!(!e.code().is_empty());
    let _ = e.buyer_message();
}

//! Reading the buyer's form post: `application/x-www-form-urlencoded` or
//! `multipart/form-data`, plain or base64 (API Gateway's binary media types), with the
//! Marketplace token and the seller's allowlisted fields. Unknown fields are dropped;
//! the number of fields, each value's length and the body size are capped, and every
//! violation is a specific [`FormError`]. Values are never logged.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::fmt;

use awsmp_lambda::http::{BodyError, decode_body, decode_form_component};
use futures_util::stream;
use multer::bytes::Bytes;

/// The form field Marketplace puts the registration token in.
pub const TOKEN_FIELD: &str = "x-amzn-marketplace-token";
/// Most fields a post may carry, known or not (beyond this it is not a registration form).
pub const MAX_FIELDS: usize = 50;
/// Most entries in `ALLOWED_REGISTRATION_FIELDS`.
pub const MAX_ALLOWED_FIELDS: usize = 25;
/// Longest allowlisted field name, in characters.
pub const MAX_FIELD_NAME_CHARS: usize = 64;
/// Longest allowlisted field value, in characters.
pub const MAX_VALUE_CHARS: usize = 1000;
/// Longest registration token, in bytes (real tokens are a few hundred).
pub const MAX_TOKEN_BYTES: usize = 4096;
/// Largest decoded body, in bytes: 8 KB, the size above which AWS WAF's common rule
/// set (`SizeRestrictions_BODY`, in the stack's WebACL) blocks a request before it
/// reaches the function. The function refuses the same bodies itself (HTTP 413), so
/// the limit is one with or without that WebACL (the local stack, a seller's own ACL).
/// A registration is far smaller: a token of a few hundred bytes and a few fields.
pub const MAX_BODY_BYTES: usize = 8 * 1024;

/// A Marketplace registration token. Deliberately neither `Display` nor a revealing
/// `Debug`, so it cannot end up in a log line by accident.
#[derive(Clone, PartialEq, Eq)]
pub struct RegistrationToken(String);

impl RegistrationToken {
    /// The token text, to hand to `ResolveCustomer` (or to put in the page's URL fragment).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for RegistrationToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RegistrationToken(<redacted>)")
    }
}

/// A form post, reduced to what registration keeps.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RegistrationForm {
    /// The token, if the post carried a non-empty one.
    pub token: Option<RegistrationToken>,
    /// Allowlisted fields with a non-blank value (trimmed). Blank fields are left out.
    pub fields: BTreeMap<String, String>,
    /// How many fields were dropped because they are not allowlisted (or were files).
    pub dropped: usize,
}

/// Why a post cannot be read. Messages name the field, never its value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormError {
    /// Neither urlencoded nor multipart.
    #[error(
        "unsupported Content-Type {0:?}: post the form as application/x-www-form-urlencoded or multipart/form-data"
    )]
    UnsupportedContentType(String),
    /// `isBase64Encoded` was set but the body is not base64.
    #[error("the body is flagged base64 but does not decode")]
    BadBase64,
    /// The decoded body is larger than [`MAX_BODY_BYTES`].
    #[error("the form is larger than {MAX_BODY_BYTES} bytes")]
    BodyTooLarge,
    /// More than [`MAX_FIELDS`] fields.
    #[error("the form has more than {MAX_FIELDS} fields")]
    TooManyFields,
    /// An allowlisted field longer than [`MAX_VALUE_CHARS`], or a dropped field longer
    /// than the whole-body cap allows (`None`: its name is not echoed).
    #[error("the field {} is longer than {MAX_VALUE_CHARS} characters", .0.as_deref().unwrap_or("(not allowlisted)"))]
    FieldTooLong(Option<String>),
    /// The token is longer than [`MAX_TOKEN_BYTES`].
    #[error("the registration token is longer than {MAX_TOKEN_BYTES} bytes")]
    TokenTooLong,
    /// The same allowlisted field (or the token) appears twice.
    #[error("the field {0} appears more than once")]
    DuplicateField(String),
    /// An allowlisted field holds control characters or is not UTF-8.
    #[error("the field {0} holds characters that are not allowed")]
    InvalidValue(String),
    /// The body does not follow its content type's syntax.
    #[error("the form body is malformed: {0}")]
    Malformed(String),
}

/// Decodes the proxy event's body (`is_base64` as API Gateway flagged it) and parses it
/// according to `content_type`, keeping the token and the `allowed` fields.
pub async fn parse_form(
    content_type: Option<&str>,
    body: Option<&str>,
    is_base64: bool,
    allowed: &[String],
) -> Result<RegistrationForm, FormError> {
    let raw = decode_body(body, is_base64, Some(MAX_BODY_BYTES)).map_err(|e| match e {
        BodyError::TooLarge { .. } => FormError::BodyTooLarge,
        BodyError::NotBase64(_) => FormError::BadBase64,
    })?;
    let content_type = content_type.unwrap_or("").trim();
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let mut collector = Collector::new(allowed);
    match essence.as_str() {
        "application/x-www-form-urlencoded" => {
            for (name, value) in urlencoded_pairs(&raw) {
                // A field name that is not UTF-8 is no allowlisted name: it is dropped.
                let name = String::from_utf8_lossy(&name);
                collector.add(&name, Some(&value), false)?;
            }
        }
        // An empty body with no content type: a post without any field at all.
        "" if raw.is_empty() => {}
        "multipart/form-data" => parse_multipart(content_type, raw, &mut collector).await?,
        _ => return Err(FormError::UnsupportedContentType(content_type.to_string())),
    }
    Ok(collector.finish())
}

/// Splits an urlencoded body into decoded (name, value) byte pairs
/// ([`decode_form_component`]). Unlike `form_urlencoded::parse` it keeps the bytes as
/// sent, so a value that is not UTF-8 is refused instead of silently turned into U+FFFD.
/// A `%` not followed by two hex digits stays literal, as browsers and
/// `form_urlencoded` treat it.
fn urlencoded_pairs(raw: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    raw.split(|b| *b == b'&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (name, value) = match pair.iter().position(|b| *b == b'=') {
                Some(i) => (&pair[..i], &pair[i + 1..]),
                None => (pair, &[][..]),
            };
            (decode_form_component(name), decode_form_component(value))
        })
        .collect()
}

async fn parse_multipart(
    content_type: &str,
    raw: Vec<u8>,
    collector: &mut Collector<'_>,
) -> Result<(), FormError> {
    let boundary = multer::parse_boundary(content_type)
        .map_err(|e| FormError::Malformed(format!("multipart Content-Type: {e}")))?;
    let body = stream::once(async move { Ok::<Bytes, Infallible>(Bytes::from(raw)) });
    let mut multipart = multer::Multipart::new(body, boundary);
    loop {
        let field = match multipart.next_field().await {
            Ok(Some(field)) => field,
            Ok(None) => break,
            Err(e) => return Err(FormError::Malformed(multipart_problem(&e))),
        };
        let name = field.name().unwrap_or("").to_string();
        let is_file = field.file_name().is_some();
        let bytes = field
            .bytes()
            .await
            .map_err(|e| FormError::Malformed(multipart_problem(&e)))?;
        collector.add(&name, Some(&bytes), is_file)?;
    }
    Ok(())
}

/// multer's messages can quote header bytes from the client; keep only the kind.
fn multipart_problem(e: &multer::Error) -> String {
    match e {
        multer::Error::IncompleteFieldData { .. } => "a part ends before its boundary".into(),
        multer::Error::IncompleteHeaders | multer::Error::ReadHeaderFailed(_) => {
            "a part's headers are incomplete".into()
        }
        multer::Error::DecodeHeaderName { .. } | multer::Error::DecodeHeaderValue { .. } => {
            "a part has an invalid header".into()
        }
        multer::Error::IncompleteStream => "the body ends before the closing boundary".into(),
        multer::Error::NoBoundary => "the Content-Type has no boundary".into(),
        _ => "the multipart body cannot be read".into(),
    }
}

/// Applies the allowlist and the caps field by field.
struct Collector<'a> {
    allowed: &'a [String],
    form: RegistrationForm,
    seen: usize,
}

impl<'a> Collector<'a> {
    fn new(allowed: &'a [String]) -> Self {
        Collector {
            allowed,
            form: RegistrationForm::default(),
            seen: 0,
        }
    }

    fn add(&mut self, name: &str, value: Option<&[u8]>, is_file: bool) -> Result<(), FormError> {
        self.seen += 1;
        if self.seen > MAX_FIELDS {
            return Err(FormError::TooManyFields);
        }
        let value = value.unwrap_or_default();
        if name == TOKEN_FIELD && !is_file {
            if self.form.token.is_some() {
                return Err(FormError::DuplicateField(TOKEN_FIELD.to_string()));
            }
            if value.len() > MAX_TOKEN_BYTES {
                return Err(FormError::TokenTooLong);
            }
            let text = std::str::from_utf8(value)
                .map_err(|_| FormError::InvalidValue(TOKEN_FIELD.to_string()))?
                .trim();
            if !text.is_empty() {
                self.form.token = Some(RegistrationToken(text.to_string()));
            }
            return Ok(());
        }
        let Some(allowed) = self.allowed.iter().find(|a| a.as_str() == name) else {
            self.form.dropped += 1;
            return Ok(());
        };
        if is_file {
            // A file upload is never a registration detail; keep the form and drop it.
            self.form.dropped += 1;
            return Ok(());
        }
        if self.form.fields.contains_key(allowed) {
            return Err(FormError::DuplicateField(allowed.clone()));
        }
        let text = std::str::from_utf8(value)
            .map_err(|_| FormError::InvalidValue(allowed.clone()))?
            .trim();
        if text.chars().count() > MAX_VALUE_CHARS {
            return Err(FormError::FieldTooLong(Some(allowed.clone())));
        }
        // Tabs and line breaks are fine (textareas); other control characters are not text.
        if text
            .chars()
            .any(|c| c.is_control() && !matches!(c, '\t' | '\n' | '\r'))
        {
            return Err(FormError::InvalidValue(allowed.clone()));
        }
        if !text.is_empty() {
            self.form.fields.insert(allowed.clone(), text.to_string());
        }
        Ok(())
    }

    fn finish(self) -> RegistrationForm {
        self.form
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD as BASE64;

    use super::*;

    const URLENCODED: &str = "application/x-www-form-urlencoded";

    fn allowed() -> Vec<String> {
        vec!["companyName".to_string(), "contactEmail".to_string()]
    }

    async fn urlencoded(body: &str) -> Result<RegistrationForm, FormError> {
        parse_form(Some(URLENCODED), Some(body), false, &allowed()).await
    }

    fn multipart_body(boundary: &str, parts: &[(&str, Option<&str>, &str)]) -> String {
        let mut body = String::new();
        for (name, file, value) in parts {
            body.push_str(&format!("--{boundary}\r\n"));
            match file {
                Some(file) => body.push_str(&format!(
                    "Content-Disposition: form-data; name=\"{name}\"; filename=\"{file}\"\r\nContent-Type: text/plain\r\n\r\n"
                )),
                None => body.push_str(&format!(
                    "Content-Disposition: form-data; name=\"{name}\"\r\n\r\n"
                )),
            }
            body.push_str(value);
            body.push_str("\r\n");
        }
        body.push_str(&format!("--{boundary}--\r\n"));
        body
    }

    #[tokio::test]
    async fn urlencoded_keeps_token_and_allowlisted_fields_and_drops_the_rest() {
        let form = urlencoded(
            "x-amzn-marketplace-token=abc%2B%2F%3D&companyName=Example+Corp&contactEmail=%20a%40b.example%20&favouriteColour=blue&x-amzn-marketplace-offer-type=free-trial",
        )
        .await
        .unwrap();
        assert_eq!(form.token.unwrap().expose(), "abc+/=");
        assert_eq!(form.fields["companyName"], "Example Corp");
        assert_eq!(form.fields["contactEmail"], "a@b.example");
        assert_eq!(form.fields.len(), 2);
        assert_eq!(form.dropped, 2);
    }

    #[tokio::test]
    async fn base64_multipart_is_read_like_urlencoded() {
        let body = multipart_body(
            "XyZ",
            &[
                (TOKEN_FIELD, None, "tok-123"),
                ("companyName", None, "Example Corp"),
                ("contactEmail", None, ""),
                ("upload", Some("a.txt"), "file content"),
                ("companyName.evil", None, "x"),
            ],
        );
        let encoded = BASE64.encode(&body);
        let form = parse_form(
            Some("multipart/form-data; boundary=XyZ"),
            Some(&encoded),
            true,
            &allowed(),
        )
        .await
        .unwrap();
        assert_eq!(form.token.unwrap().expose(), "tok-123");
        assert_eq!(form.fields.len(), 1);
        assert_eq!(form.fields["companyName"], "Example Corp");
        assert_eq!(form.dropped, 2);
    }

    #[tokio::test]
    async fn an_allowlisted_file_part_is_dropped_not_stored() {
        let body = multipart_body("b", &[("companyName", Some("c.txt"), "x")]);
        let form = parse_form(
            Some("multipart/form-data; boundary=b"),
            Some(&body),
            false,
            &allowed(),
        )
        .await
        .unwrap();
        assert!(form.fields.is_empty());
        assert_eq!(form.dropped, 1);
    }

    #[tokio::test]
    async fn missing_or_blank_token_is_none() {
        assert_eq!(urlencoded("companyName=x").await.unwrap().token, None);
        assert_eq!(
            urlencoded("x-amzn-marketplace-token=%20%20")
                .await
                .unwrap()
                .token,
            None
        );
        let empty = parse_form(None, None, false, &allowed()).await.unwrap();
        assert_eq!(empty, RegistrationForm::default());
    }

    #[tokio::test]
    async fn caps_and_bad_input_are_specific_errors() {
        let many: Vec<String> = (0..=MAX_FIELDS).map(|i| format!("f{i}=1")).collect();
        assert_eq!(
            urlencoded(&many.join("&")).await,
            Err(FormError::TooManyFields)
        );

        let long = "a".repeat(MAX_VALUE_CHARS + 1);
        assert_eq!(
            urlencoded(&format!("companyName={long}")).await,
            Err(FormError::FieldTooLong(Some("companyName".into())))
        );
        // Length is counted in characters, not bytes.
        let accents = "é".repeat(MAX_VALUE_CHARS);
        assert!(urlencoded(&format!("companyName={accents}")).await.is_ok());

        let token = "t".repeat(MAX_TOKEN_BYTES + 1);
        assert_eq!(
            urlencoded(&format!("{TOKEN_FIELD}={token}")).await,
            Err(FormError::TokenTooLong)
        );
        assert_eq!(
            urlencoded("companyName=a&companyName=b").await,
            Err(FormError::DuplicateField("companyName".into()))
        );
        assert_eq!(
            urlencoded(&format!("{TOKEN_FIELD}=a&{TOKEN_FIELD}=b")).await,
            Err(FormError::DuplicateField(TOKEN_FIELD.into()))
        );
        assert_eq!(
            urlencoded("companyName=a%00b").await,
            Err(FormError::InvalidValue("companyName".into()))
        );
        assert!(urlencoded("companyName=line1%0D%0Aline2").await.is_ok());
        assert_eq!(
            urlencoded("companyName=%FF").await,
            Err(FormError::InvalidValue("companyName".into()))
        );
        let huge = "x".repeat(MAX_BODY_BYTES + 1);
        assert_eq!(urlencoded(&huge).await, Err(FormError::BodyTooLarge));
        assert_eq!(
            parse_form(
                Some(URLENCODED),
                Some(&BASE64.encode(&huge)),
                true,
                &allowed()
            )
            .await,
            Err(FormError::BodyTooLarge)
        );
        assert_eq!(
            parse_form(Some(URLENCODED), Some("!!!"), true, &allowed()).await,
            Err(FormError::BadBase64)
        );
        assert!(matches!(
            parse_form(Some("application/json"), Some("{}"), false, &allowed()).await,
            Err(FormError::UnsupportedContentType(_))
        ));
        assert!(matches!(
            parse_form(Some("multipart/form-data"), Some("x"), false, &allowed()).await,
            Err(FormError::Malformed(_))
        ));
        assert!(matches!(
            parse_form(
                Some("multipart/form-data; boundary=b"),
                Some("--b\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nno end"),
                false,
                &allowed()
            )
            .await,
            Err(FormError::Malformed(_))
        ));
    }

    #[test]
    fn urlencoded_decoding_matches_browsers() {
        assert_eq!(
            urlencoded_pairs(b"a=1+2%2B3&&b&c=%zz%4&d=%C3%A9"),
            vec![
                (b"a".to_vec(), b"1 2+3".to_vec()),
                (b"b".to_vec(), Vec::new()),
                (b"c".to_vec(), b"%zz%4".to_vec()),
                (b"d".to_vec(), "é".as_bytes().to_vec()),
            ]
        );
    }

    #[test]
    fn token_debug_is_redacted() {
        let token = RegistrationToken("secret-token".into());
        assert_eq!(format!("{token:?}"), "RegistrationToken(<redacted>)");
        let form = RegistrationForm {
            token: Some(token),
            ..Default::default()
        };
        assert!(!format!("{form:?}").contains("secret-token"));
    }
}

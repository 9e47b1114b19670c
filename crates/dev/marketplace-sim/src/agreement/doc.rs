//! The Agreement API's documents in one form for both protocols: a CBOR value
//! ([`ciborium::Value`]) whose timestamps are tag 1 + epoch seconds. RPC v2 CBOR
//! sends it as is; awsJson 1.0 turns tags into epoch-second numbers. Also the
//! request readers (typed members, exceptions naming the member) and pagination.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::str::FromStr;

use chrono::{DateTime, TimeZone, Utc};
pub use ciborium::Value;
use rust_decimal::Decimal;

use super::error::AgreementError;

/// CBOR tag of an epoch-based date/time (RFC 8949 §3.4.2).
pub const EPOCH_TAG: u64 = 1;
/// `maxResults` upper bound on every paginated operation.
pub const MAX_RESULTS: i64 = 50;

/// Reads a CBOR request body (empty: an empty map).
pub fn decode_cbor(bytes: &[u8]) -> Result<Value, AgreementError> {
    if bytes.is_empty() {
        return Ok(Value::Map(Vec::new()));
    }
    ciborium::de::from_reader(bytes)
        .map_err(|e| AgreementError::serialization(format!("request body is not CBOR: {e}")))
}

/// Writes a CBOR response body.
pub fn encode_cbor(value: &Value) -> Result<Vec<u8>, AgreementError> {
    let mut out = Vec::new();
    ciborium::ser::into_writer(value, &mut out)
        .map_err(|e| AgreementError::internal(format!("response could not be encoded: {e}")))?;
    Ok(out)
}

/// Reads a JSON request body (empty: an empty map).
pub fn decode_json(bytes: &[u8]) -> Result<Value, AgreementError> {
    if bytes.is_empty() {
        return Ok(Value::Map(Vec::new()));
    }
    let json: serde_json::Value = serde_json::from_slice(bytes)
        .map_err(|e| AgreementError::serialization(format!("request body is not JSON: {e}")))?;
    Ok(from_json(json))
}

/// A JSON value as a document (numbers stay integers when they are).
pub fn from_json(json: serde_json::Value) -> Value {
    match json {
        serde_json::Value::Null => Value::Null,
        serde_json::Value::Bool(b) => Value::Bool(b),
        serde_json::Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Value::Integer(i.into()),
            (None, Some(u)) => Value::Integer(u.into()),
            _ => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        serde_json::Value::String(s) => Value::Text(s),
        serde_json::Value::Array(items) => Value::Array(items.into_iter().map(from_json).collect()),
        serde_json::Value::Object(map) => Value::Map(
            map.into_iter()
                .map(|(k, v)| (Value::Text(k), from_json(v)))
                .collect(),
        ),
    }
}

/// A document as awsJson 1.0 JSON: timestamps become epoch-second numbers.
pub fn to_json(value: &Value) -> serde_json::Value {
    match value {
        Value::Integer(i) => {
            let i = i128::from(*i);
            i64::try_from(i)
                .map(serde_json::Value::from)
                .or_else(|_| u64::try_from(i).map(serde_json::Value::from))
                .unwrap_or(serde_json::Value::Null)
        }
        Value::Float(f) => serde_json::Number::from_f64(*f)
            .map(serde_json::Value::Number)
            .unwrap_or(serde_json::Value::Null),
        Value::Text(s) => serde_json::Value::String(s.clone()),
        Value::Bool(b) => serde_json::Value::Bool(*b),
        Value::Tag(_, inner) => to_json(inner),
        Value::Array(items) => serde_json::Value::Array(items.iter().map(to_json).collect()),
        Value::Map(entries) => serde_json::Value::Object(
            entries
                .iter()
                .filter_map(|(k, v)| k.as_text().map(|k| (k.to_owned(), to_json(v))))
                .collect(),
        ),
        _ => serde_json::Value::Null,
    }
}

/// A timestamp member: tag 1 + integer epoch seconds (what the SDK accepts).
pub fn time(at: DateTime<Utc>) -> Value {
    Value::Tag(EPOCH_TAG, Box::new(Value::Integer(at.timestamp().into())))
}

/// A string member.
pub fn text(s: impl Into<String>) -> Value {
    Value::Text(s.into())
}

/// A money member: a decimal string with at least two decimals ("1080.00").
pub fn money(amount: Decimal) -> Value {
    Value::Text(money_string(amount))
}

/// `amount` written with at least two decimals, never in exponent form.
pub fn money_string(amount: Decimal) -> String {
    let mut amount = amount.normalize();
    if amount.scale() < 2 {
        amount.rescale(2);
    }
    amount.to_string()
}

/// Builds a structure member by member, leaving absent optional members out.
#[derive(Debug, Default)]
pub struct Obj(Vec<(Value, Value)>);

impl Obj {
    /// An empty structure.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `key`.
    pub fn v(mut self, key: &str, value: Value) -> Self {
        self.0.push((Value::Text(key.to_owned()), value));
        self
    }

    /// Adds a string `key`.
    pub fn s(self, key: &str, value: impl Into<String>) -> Self {
        self.v(key, Value::Text(value.into()))
    }

    /// Adds `key` when `value` is present.
    pub fn opt(self, key: &str, value: Option<Value>) -> Self {
        match value {
            Some(value) => self.v(key, value),
            None => self,
        }
    }

    /// The structure.
    pub fn done(self) -> Value {
        Value::Map(self.0)
    }
}

/// A request structure, read member by member; `null` counts as absent.
#[derive(Debug, Clone, Copy)]
pub struct Input<'a> {
    map: &'a [(Value, Value)],
    path: &'a str,
}

fn wrong_type(path: &str, key: &str, expected: &str) -> AgreementError {
    let at = if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    };
    AgreementError::serialization(format!("member {at} must be {expected}"))
}

impl<'a> Input<'a> {
    /// The request body's top-level structure.
    pub fn root(value: &'a Value) -> Result<Self, AgreementError> {
        Self::at(value, "")
    }

    fn at(value: &'a Value, path: &'a str) -> Result<Self, AgreementError> {
        match value {
            Value::Map(map) => Ok(Self { map, path }),
            _ => Err(AgreementError::serialization(format!(
                "{} must be a structure",
                if path.is_empty() { "the body" } else { path }
            ))),
        }
    }

    fn get(&self, key: &str) -> Option<&'a Value> {
        self.map
            .iter()
            .find(|(k, _)| k.as_text() == Some(key))
            .map(|(_, v)| v)
            .filter(|v| !v.is_null())
    }

    /// A string member.
    pub fn string(&self, key: &str) -> Result<Option<String>, AgreementError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Text(s)) => Ok(Some(s.clone())),
            Some(_) => Err(wrong_type(self.path, key, "a string")),
        }
    }

    /// An integer member.
    pub fn int(&self, key: &str) -> Result<Option<i64>, AgreementError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Integer(i)) => i64::try_from(*i)
                .map(Some)
                .map_err(|_| wrong_type(self.path, key, "a 64-bit integer")),
            Some(_) => Err(wrong_type(self.path, key, "an integer")),
        }
    }

    /// A timestamp member: tag 1 + epoch seconds (CBOR), or epoch seconds (JSON).
    pub fn time(&self, key: &str) -> Result<Option<DateTime<Utc>>, AgreementError> {
        let value = match self.get(key) {
            None => return Ok(None),
            Some(Value::Tag(EPOCH_TAG, inner)) => inner.as_ref(),
            Some(other) => other,
        };
        let at = match value {
            Value::Integer(i) => i64::try_from(*i)
                .ok()
                .and_then(|s| Utc.timestamp_opt(s, 0).single()),
            Value::Float(f) if f.is_finite() => {
                let millis = (f * 1000.0).round();
                // A finite epoch in milliseconds fits i64 for every date chrono holds.
                #[allow(clippy::cast_possible_truncation)]
                Utc.timestamp_millis_opt(millis as i64).single()
            }
            _ => None,
        };
        at.map(Some)
            .ok_or_else(|| wrong_type(self.path, key, "an epoch-seconds timestamp"))
    }

    /// A list member.
    pub fn list(&self, key: &str) -> Result<Option<&'a [Value]>, AgreementError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Array(items)) => Ok(Some(items)),
            Some(_) => Err(wrong_type(self.path, key, "a list")),
        }
    }

    /// A structure member.
    pub fn object(&self, key: &str) -> Result<Option<Input<'a>>, AgreementError> {
        match self.get(key) {
            None => Ok(None),
            Some(value) => Self::at(value, self.path)
                .map(Some)
                .map_err(|_| wrong_type(self.path, key, "a structure")),
        }
    }

    /// A list item as a structure.
    pub fn item(value: &'a Value, path: &'a str) -> Result<Input<'a>, AgreementError> {
        Self::at(value, path)
    }

    /// `agreementId`: required, 1..64 of `[A-Za-z0-9_/-]`.
    pub fn agreement_id(&self) -> Result<String, AgreementError> {
        let id = self.string("agreementId")?.ok_or_else(|| {
            AgreementError::validation(
                "MISSING_AGREEMENT_ID",
                "agreementId",
                "agreementId is required",
            )
        })?;
        if !valid_agreement_id(&id) {
            return Err(AgreementError::validation(
                "INVALID_AGREEMENT_ID",
                "agreementId",
                format!("agreementId {id:?} must be 1 to 64 characters of [A-Za-z0-9_/-]"),
            ));
        }
        Ok(id)
    }
}

/// Whether `id` is a well-formed agreement id (1..64 of `[A-Za-z0-9_/-]`).
pub fn valid_agreement_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'/' | b'-'))
}

/// A decimal amount of the wire pattern `[0-9]*(\.[0-9]{0,8})?` (no sign, no
/// exponent), exactly.
pub fn parse_amount(s: &str) -> Option<Decimal> {
    let (whole, fraction) = s.split_once('.').unwrap_or((s, ""));
    let digits = |p: &str| p.bytes().all(|b| b.is_ascii_digit());
    if s.is_empty() || !digits(whole) || !digits(fraction) || fraction.len() > 8 {
        return None;
    }
    if whole.is_empty() && fraction.is_empty() {
        return None;
    }
    let normalised = format!(
        "{}.{}",
        if whole.is_empty() { "0" } else { whole },
        if fraction.is_empty() { "0" } else { fraction }
    );
    Decimal::from_str(&normalised).ok()
}

/// Where a paginated call starts and how many items it answers.
#[derive(Debug, Clone, Copy)]
pub struct Page {
    start: usize,
    size: usize,
    fingerprint: u64,
}

/// Reads `maxResults` (1..50, default 50) and `nextToken` (issued by an earlier page
/// of the same request; another request's token is refused).
pub fn page(input: &Input<'_>, request: &Value) -> Result<Page, AgreementError> {
    let size = match input.int("maxResults")? {
        None => MAX_RESULTS,
        Some(n) if (1..=MAX_RESULTS).contains(&n) => n,
        Some(n) => {
            return Err(AgreementError::validation(
                "INVALID_MAX_RESULTS",
                "maxResults",
                format!("maxResults {n} must be between 1 and {MAX_RESULTS}"),
            ));
        }
    };
    let fingerprint = fingerprint(request);
    let start = match input.string("nextToken")? {
        None => 0,
        Some(token) => token
            .split_once('.')
            .filter(|(_, fp)| *fp == format!("{fingerprint:016x}"))
            .and_then(|(offset, _)| offset.parse::<usize>().ok())
            .ok_or_else(|| {
                AgreementError::validation(
                    "INVALID_NEXT_TOKEN",
                    "nextToken",
                    "nextToken was not issued for this request",
                )
            })?,
    };
    Ok(Page {
        start,
        size: usize::try_from(size).unwrap_or(50),
        fingerprint,
    })
}

impl Page {
    /// This page's items and the token of the next page (none on the last).
    pub fn cut<T>(&self, items: Vec<T>) -> (Vec<T>, Option<String>) {
        let total = items.len();
        let end = self.start.saturating_add(self.size).min(total);
        let next = (end < total).then(|| format!("{end}.{:016x}", self.fingerprint));
        let page = items
            .into_iter()
            .skip(self.start)
            .take(end.saturating_sub(self.start))
            .collect();
        (page, next)
    }
}

/// A hash of the request's members other than `maxResults` and `nextToken`.
fn fingerprint(request: &Value) -> u64 {
    let mut json = to_json(request);
    if let Some(map) = json.as_object_mut() {
        map.remove("maxResults");
        map.remove("nextToken");
    }
    let mut hasher = DefaultHasher::new();
    json.to_string().hash(&mut hasher);
    hasher.finish()
}

/// A stable short hash of `parts` (ids derived from other ids).
pub fn short_hash(parts: &[&str]) -> u64 {
    let mut hasher = DefaultHasher::new();
    parts.hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn amounts_follow_the_wire_pattern_exactly() {
        assert_eq!(parse_amount("100"), Some(Decimal::new(100, 0)));
        assert_eq!(
            parse_amount("0.12345678"),
            Some(Decimal::new(12_345_678, 8))
        );
        assert_eq!(parse_amount(".5"), Some(Decimal::new(5, 1)));
        for bad in ["", ".", "-1", "1e3", "1.123456789", "1,0", " 1"] {
            assert_eq!(parse_amount(bad), None, "{bad:?}");
        }
        assert_eq!(money_string(Decimal::new(1080, 0)), "1080.00");
        assert_eq!(money_string(Decimal::new(123_456, 5)), "1.23456");
    }

    #[test]
    fn timestamps_are_tagged_in_cbor_and_numbers_in_json() {
        let at: DateTime<Utc> = "2026-03-15T12:30:00Z".parse().unwrap();
        let doc = Obj::new().v("t", time(at)).done();
        let bytes = encode_cbor(&doc).unwrap();
        assert_eq!(decode_cbor(&bytes).unwrap(), doc);
        assert_eq!(to_json(&doc), serde_json::json!({"t": at.timestamp()}));
        let root = Input::root(&doc).unwrap();
        assert_eq!(root.time("t").unwrap(), Some(at));
        let float = Obj::new()
            .v("t", Value::Tag(1, Box::new(Value::Float(1.5))))
            .done();
        let read = Input::root(&float).unwrap().time("t").unwrap().unwrap();
        assert_eq!(read.timestamp_millis(), 1500);
    }
}

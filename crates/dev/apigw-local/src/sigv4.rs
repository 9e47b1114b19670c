//! SigV4 verification in front of a router, as API Gateway checks a route with IAM
//! authorization (`AuthorizationType: AWS_IAM`): a request must carry an
//! `Authorization: AWS4-HMAC-SHA256 Credential=…, SignedHeaders=…, Signature=…` header
//! whose signature, recomputed here from the request as received, matches. Anything
//! else is refused with `403 {"message": "…"}` and API Gateway's `x-amzn-ErrorType`.
//! There is no unauthenticated mode: [`require_sigv4`] is how a local stack serves an
//! IAM-authorized API.
//!
//! What is recomputed (SigV4 for a service other than S3, as the AWS SDKs, botocore's
//! `SigV4Auth` and `curl --aws-sigv4` sign):
//! - canonical URI: the path as received (still percent-encoded), dot segments and empty
//!   segments removed, then every byte other than `A-Za-z0-9-._~` and `/` percent-encoded
//!   once more (`/a%20b` → `/a%2520b`, `%2F` stays inside its segment);
//! - canonical query: `&`-separated pairs split at the first `=`, percent-decoded and
//!   re-encoded (RFC 3986 unreserved characters kept, `%XX` upper-case), sorted by name
//!   then value. A `+` is tried both as a literal `+` and as a space (form encoding), the
//!   two readings clients differ on;
//! - the signed headers (which must include `host`): values trimmed, runs of spaces
//!   collapsed, repeated headers joined with `,`;
//! - the payload hash: hex SHA-256 of the body. An `x-amz-content-sha256` header must
//!   equal it (`UNSIGNED-PAYLOAD` is refused).
//!
//! The `x-amz-date` header is required and must be within [`MAX_SIGV4_CLOCK_SKEW`] of
//! now; presigned URLs (the signature in the query string) are not supported.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
use axum::http::{HeaderMap, Method, Response, StatusCode, Uri};
use axum::middleware::Next;
use chrono::{DateTime, NaiveDateTime, Utc};
use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};

use crate::{MAX_PAYLOAD_BYTES, json_error};

/// The service name API Gateway's SigV4 scope carries (`…/REGION/execute-api/aws4_request`).
pub const DEFAULT_SIGV4_SERVICE: &str = "execute-api";

/// How far `x-amz-date` may be from now, either way, as in AWS.
pub const MAX_SIGV4_CLOCK_SKEW: Duration = Duration::from_secs(15 * 60);

/// The account of the local caller's identity (`requestContext.identity.accountId`).
pub const LOCAL_ACCOUNT_ID: &str = "000000000000";

/// The local caller's ARN (`requestContext.identity.userArn`).
pub const LOCAL_USER_ARN: &str = "arn:aws:iam::000000000000:user/local";

const ALGORITHM: &str = "AWS4-HMAC-SHA256";
const SCOPE_TERMINATOR: &str = "aws4_request";
const X_AMZ_DATE: &str = "x-amz-date";
const X_AMZ_CONTENT_SHA256: &str = "x-amz-content-sha256";
const AMZ_DATE_FORMAT: &str = "%Y%m%dT%H%M%SZ";

/// The one credential an IAM-authorized local API accepts, and the scope requests must
/// be signed for.
#[derive(Clone)]
pub struct Sigv4Verifier {
    /// The access key id in the signature's `Credential=` scope.
    pub access_key_id: String,
    /// The secret the signature is recomputed with.
    pub secret_access_key: String,
    /// The region in the scope (e.g. `us-east-1`).
    pub region: String,
    /// The service in the scope: [`DEFAULT_SIGV4_SERVICE`] unless set otherwise.
    pub service: String,
}

impl fmt::Debug for Sigv4Verifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sigv4Verifier")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"** redacted **")
            .field("region", &self.region)
            .field("service", &self.service)
            .finish()
    }
}

/// Who signed a verified request. [`require_sigv4`] puts it in the request's extensions,
/// and [`crate::to_proxy_request`] copies it into `requestContext.identity`
/// (`accessKey`, `accountId`, `userArn`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sigv4Identity {
    /// The access key id that signed.
    pub access_key_id: String,
    /// The caller's account ([`LOCAL_ACCOUNT_ID`]).
    pub account_id: String,
    /// The caller's ARN ([`LOCAL_USER_ARN`]).
    pub user_arn: String,
}

/// Why a request was refused; every case is a 403 with API Gateway's error type
/// ([`Sigv4Error::error_type`]) and this text as the JSON `message`.
#[derive(Debug, thiserror::Error)]
pub enum Sigv4Error {
    /// No `Authorization` header.
    #[error(
        "Missing Authentication Token: missing SigV4 Authorization header: sign the request with SigV4, service {service}"
    )]
    MissingAuthorization {
        /// The service the request should be signed for.
        service: String,
    },
    /// The `Authorization` header, the `x-amz-date` header or a signed header is
    /// missing or malformed.
    #[error("{0}")]
    Incomplete(String),
    /// The scope's access key id is not the configured one.
    #[error(
        "The security token included in the request is invalid: access key id '{0}' is not the one this local API accepts."
    )]
    UnknownAccessKey(String),
    /// The scope names another region.
    #[error(
        "Credential should be scoped to a valid region, not '{got}' (this API is in '{expected}')."
    )]
    WrongRegion {
        /// The region in the scope.
        got: String,
        /// The configured region.
        expected: String,
    },
    /// The scope names another service.
    #[error("Credential should be scoped to correct service: '{expected}' (not '{got}').")]
    WrongService {
        /// The service in the scope.
        got: String,
        /// The configured service.
        expected: String,
    },
    /// The scope's date is not the day of `x-amz-date`.
    #[error(
        "Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date from HTTP: '{scope}' != '{amz_date}'"
    )]
    ScopeDate {
        /// The date in the scope.
        scope: String,
        /// The `x-amz-date` value.
        amz_date: String,
    },
    /// `x-amz-date` is more than [`MAX_SIGV4_CLOCK_SKEW`] away from now.
    #[error("Signature expired: {amz_date} is not within 15 minutes of {now}")]
    Expired {
        /// The `x-amz-date` value.
        amz_date: String,
        /// Now, in the same format.
        now: String,
    },
    /// `x-amz-content-sha256` is not the SHA-256 of the body.
    #[error(
        "The provided 'x-amz-content-sha256' header does not match what was computed: sent '{sent}', body hash '{computed}'"
    )]
    PayloadHash {
        /// The header's value.
        sent: String,
        /// The hex SHA-256 of the body received.
        computed: String,
    },
    /// The recomputed signature differs from the one sent.
    #[error(
        "The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method. Consult the service documentation for details.\n\nThe Canonical String for this request should have been\n'{canonical_request}'\n\nThe String-to-Sign should have been\n'{string_to_sign}'\n"
    )]
    SignatureMismatch {
        /// The canonical request recomputed from the request received.
        canonical_request: String,
        /// The string to sign recomputed from it.
        string_to_sign: String,
    },
}

impl Sigv4Error {
    /// API Gateway's `x-amzn-ErrorType` for this refusal.
    pub fn error_type(&self) -> &'static str {
        match self {
            Self::MissingAuthorization { .. } => "MissingAuthenticationTokenException",
            Self::Incomplete(_) => "IncompleteSignatureException",
            Self::UnknownAccessKey(_) => "UnrecognizedClientException",
            Self::WrongRegion { .. }
            | Self::WrongService { .. }
            | Self::ScopeDate { .. }
            | Self::Expired { .. }
            | Self::PayloadHash { .. }
            | Self::SignatureMismatch { .. } => "InvalidSignatureException",
        }
    }

    /// The 403 response API Gateway sends for this refusal.
    pub fn to_response(&self) -> Response<Body> {
        json_error(StatusCode::FORBIDDEN, self.error_type(), &self.to_string())
    }
}

/// The parts of an `Authorization: AWS4-HMAC-SHA256 …` header.
struct AuthorizationHeader<'a> {
    access_key_id: &'a str,
    date: &'a str,
    region: &'a str,
    service: &'a str,
    signed_headers: Vec<&'a str>,
    signature: &'a str,
}

impl Sigv4Verifier {
    /// A verifier for `access_key_id`/`secret_access_key` in `region`, for the service
    /// [`DEFAULT_SIGV4_SERVICE`].
    pub fn new(
        access_key_id: impl Into<String>,
        secret_access_key: impl Into<String>,
        region: impl Into<String>,
    ) -> Self {
        Self {
            access_key_id: access_key_id.into(),
            secret_access_key: secret_access_key.into(),
            region: region.into(),
            service: DEFAULT_SIGV4_SERVICE.to_string(),
        }
    }

    /// The same verifier for another service name in the scope.
    pub fn with_service(mut self, service: impl Into<String>) -> Self {
        self.service = service.into();
        self
    }

    /// Checks the SigV4 signature of a request received as `method`, `uri` (the
    /// request target as received: path and query still percent-encoded), `headers` and
    /// `body`, at time `now`. Returns who signed it.
    pub fn verify(
        &self,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        body: &[u8],
        now: SystemTime,
    ) -> Result<Sigv4Identity, Sigv4Error> {
        let mut values = headers.get_all(AUTHORIZATION).iter();
        let Some(authorization) = values.next() else {
            return Err(Sigv4Error::MissingAuthorization {
                service: self.service.clone(),
            });
        };
        if values.next().is_some() {
            return Err(incomplete("more than one Authorization header"));
        }
        let authorization = authorization
            .to_str()
            .map_err(|_| incomplete("the Authorization header is not ASCII"))?
            .trim();
        let auth = parse_authorization(authorization)?;

        if auth.access_key_id != self.access_key_id {
            return Err(Sigv4Error::UnknownAccessKey(auth.access_key_id.to_string()));
        }
        let amz_date = single_header(headers, X_AMZ_DATE)?.ok_or_else(|| {
            incomplete("Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header (only 'X-Amz-Date' is supported here)")
        })?;
        let signed_at = NaiveDateTime::parse_from_str(amz_date, AMZ_DATE_FORMAT)
            .map_err(|_| {
                incomplete(format!(
                    "x-amz-date '{amz_date}' is not ISO 8601 basic format (YYYYMMDD'T'HHMMSS'Z')"
                ))
            })?
            .and_utc();
        if !amz_date.starts_with(auth.date) || auth.date.len() != 8 {
            return Err(Sigv4Error::ScopeDate {
                scope: auth.date.to_string(),
                amz_date: amz_date.to_string(),
            });
        }
        if auth.region != self.region {
            return Err(Sigv4Error::WrongRegion {
                got: auth.region.to_string(),
                expected: self.region.clone(),
            });
        }
        if auth.service != self.service {
            return Err(Sigv4Error::WrongService {
                got: auth.service.to_string(),
                expected: self.service.clone(),
            });
        }
        let now = DateTime::<Utc>::from(now);
        let skew = (now - signed_at).abs().to_std().unwrap_or(Duration::MAX);
        if skew > MAX_SIGV4_CLOCK_SKEW {
            return Err(Sigv4Error::Expired {
                amz_date: amz_date.to_string(),
                now: now.format(AMZ_DATE_FORMAT).to_string(),
            });
        }
        if !auth.signed_headers.contains(&"host") {
            return Err(incomplete(
                "'Host' or ':authority' must be a 'SignedHeader' in the AWS Authorization.",
            ));
        }

        let payload_hash = hex(&Sha256::digest(body));
        if let Some(sent) = single_header(headers, X_AMZ_CONTENT_SHA256)?
            && sent != payload_hash
        {
            return Err(Sigv4Error::PayloadHash {
                sent: sent.to_string(),
                computed: payload_hash,
            });
        }

        let canonical_headers = canonical_headers(uri, headers, &auth.signed_headers)?;
        let path = canonical_uri(uri.path());
        let query = uri.query().unwrap_or("");
        let readings: &[bool] = if query.contains('+') {
            &[false, true]
        } else {
            &[false]
        };
        let scope = format!(
            "{}/{}/{}/{SCOPE_TERMINATOR}",
            auth.date, auth.region, auth.service
        );
        let signing_key = signing_key(&self.secret_access_key, &auth);
        let provided = decode_hex(auth.signature);
        let mut first = None;
        for &plus_as_space in readings {
            let canonical_request = format!(
                "{method}\n{path}\n{}\n{canonical_headers}\n{}\n{payload_hash}",
                canonical_query(query, plus_as_space),
                auth.signed_headers.join(";"),
            );
            let string_to_sign = format!(
                "{ALGORITHM}\n{amz_date}\n{scope}\n{}",
                hex(&Sha256::digest(canonical_request.as_bytes()))
            );
            let matches = provided.as_ref().is_some_and(|provided| {
                hmac(&signing_key, string_to_sign.as_bytes())
                    .verify_slice(provided)
                    .is_ok()
            });
            if matches {
                return Ok(Sigv4Identity {
                    access_key_id: self.access_key_id.clone(),
                    account_id: LOCAL_ACCOUNT_ID.to_string(),
                    user_arn: LOCAL_USER_ARN.to_string(),
                });
            }
            first.get_or_insert((canonical_request, string_to_sign));
        }
        let (canonical_request, string_to_sign) = first.unwrap_or_default();
        Err(Sigv4Error::SignatureMismatch {
            canonical_request,
            string_to_sign,
        })
    }
}

/// `router` behind a SigV4 check by `verifier`: requests that fail it get API Gateway's
/// 403 and never reach `router`; the others reach it with their body unchanged and a
/// [`Sigv4Identity`] in their extensions. Bodies over [`MAX_PAYLOAD_BYTES`] get 413.
///
/// ```no_run
/// # async fn demo(api: axum::Router) -> std::io::Result<()> {
/// use awsmp_apigw_local::{LOOPBACK_ANY_PORT, Sigv4Verifier, require_sigv4, serve};
/// let verifier = Sigv4Verifier::new("AKIDLOCAL", "local-secret", "us-east-1");
/// let server = serve(require_sigv4(api, verifier), LOOPBACK_ANY_PORT).await?;
/// # Ok(()) }
/// ```
pub fn require_sigv4(router: Router, verifier: Sigv4Verifier) -> Router {
    router.layer(axum::middleware::from_fn_with_state(
        Arc::new(verifier),
        check_sigv4,
    ))
}

async fn check_sigv4(
    State(verifier): State<Arc<Sigv4Verifier>>,
    request: Request,
    next: Next,
) -> Response<Body> {
    let (mut parts, body) = request.into_parts();
    let bytes = match axum::body::to_bytes(body, MAX_PAYLOAD_BYTES).await {
        Ok(bytes) => bytes,
        Err(e) => {
            tracing::warn!(error = %e, "request refused before the SigV4 check");
            return json_error(
                StatusCode::PAYLOAD_TOO_LARGE,
                "RequestTooLongException",
                "Request Too Long",
            );
        }
    };
    match verifier.verify(
        &parts.method,
        &parts.uri,
        &parts.headers,
        &bytes,
        SystemTime::now(),
    ) {
        Ok(identity) => {
            parts.extensions.insert(identity);
            next.run(Request::from_parts(parts, Body::from(bytes)))
                .await
        }
        Err(e) => {
            tracing::warn!(
                method = %parts.method,
                uri = %parts.uri,
                error_type = e.error_type(),
                error = %e,
                "SigV4 check refused the request"
            );
            e.to_response()
        }
    }
}

fn incomplete(message: impl Into<String>) -> Sigv4Error {
    Sigv4Error::Incomplete(message.into())
}

fn parse_authorization(value: &str) -> Result<AuthorizationHeader<'_>, Sigv4Error> {
    let params = value
        .strip_prefix(ALGORITHM)
        .filter(|rest| rest.starts_with(' '))
        .ok_or_else(|| {
            incomplete(format!(
                "Authorization header requires the {ALGORITHM} algorithm (SigV4, service execute-api)"
            ))
        })?;
    let (mut credential, mut signed_headers, mut signature) = (None, None, None);
    for param in params.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match param.split_once('=') {
            Some(("Credential", v)) => credential = Some(v),
            Some(("SignedHeaders", v)) => signed_headers = Some(v),
            Some(("Signature", v)) => signature = Some(v),
            _ => {
                return Err(incomplete(format!(
                    "Authorization header has an unknown element '{param}'"
                )));
            }
        }
    }
    let missing = |name: &str| {
        incomplete(format!(
            "Authorization header requires '{name}' parameter. Authorization={value}"
        ))
    };
    let credential = credential.ok_or_else(|| missing("Credential"))?;
    let signed_headers = signed_headers.ok_or_else(|| missing("SignedHeaders"))?;
    let signature = signature.ok_or_else(|| missing("Signature"))?;
    let scope: Vec<&str> = credential.split('/').collect();
    let [access_key_id, date, region, service, terminator] = scope[..] else {
        return Err(incomplete(format!(
            "Credential '{credential}' is not ACCESS_KEY_ID/YYYYMMDD/REGION/SERVICE/{SCOPE_TERMINATOR}"
        )));
    };
    if terminator != SCOPE_TERMINATOR {
        return Err(incomplete(format!(
            "Credential should be scoped with a valid terminator: '{SCOPE_TERMINATOR}', not '{terminator}'."
        )));
    }
    let signed_headers: Vec<&str> = signed_headers.split(';').collect();
    if signed_headers
        .iter()
        .any(|h| h.is_empty() || h.bytes().any(|b| b.is_ascii_uppercase()))
    {
        return Err(incomplete(
            "SignedHeaders must be lower-case header names separated by ';'",
        ));
    }
    Ok(AuthorizationHeader {
        access_key_id,
        date,
        region,
        service,
        signed_headers,
        signature,
    })
}

/// The value of a header that may appear at most once.
fn single_header<'a>(headers: &'a HeaderMap, name: &str) -> Result<Option<&'a str>, Sigv4Error> {
    let mut values = headers.get_all(name).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(incomplete(format!("more than one {name} header")));
    }
    value
        .to_str()
        .map(|v| Some(v.trim()))
        .map_err(|_| incomplete(format!("the {name} header is not ASCII")))
}

/// `name:value\n` for each signed header, in the order of `SignedHeaders`.
fn canonical_headers(
    uri: &Uri,
    headers: &HeaderMap,
    signed_headers: &[&str],
) -> Result<String, Sigv4Error> {
    let mut canonical = String::new();
    for &name in signed_headers {
        let mut values = Vec::new();
        for value in headers.get_all(name) {
            let value = value
                .to_str()
                .map_err(|_| incomplete(format!("signed header '{name}' is not ASCII")))?;
            values.push(trim_all(value));
        }
        if values.is_empty() && name == "host" {
            // HTTP/2 carries the host as `:authority`, which ends up in the URI.
            values.extend(uri.authority().map(|a| a.as_str().to_string()));
        }
        if values.is_empty() {
            return Err(incomplete(format!(
                "signed header '{name}' is not in the request"
            )));
        }
        canonical.push_str(name);
        canonical.push(':');
        canonical.push_str(&values.join(","));
        canonical.push('\n');
    }
    Ok(canonical)
}

/// Trims spaces and collapses runs of spaces into one, as SigV4 canonicalizes values.
fn trim_all(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for word in value.split(' ').filter(|w| !w.is_empty()) {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    out
}

/// The received path with dot and empty segments removed, encoded once more.
fn canonical_uri(path: &str) -> String {
    let mut segments: Vec<&str> = Vec::new();
    for segment in path.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                segments.pop();
            }
            other => segments.push(other),
        }
    }
    let mut normalized = format!("/{}", segments.join("/"));
    let trailing_slash = ["/", "/.", "/.."].iter().any(|end| path.ends_with(end));
    if trailing_slash && !normalized.ends_with('/') {
        normalized.push('/');
    }
    uri_encode(normalized.as_bytes(), false)
}

/// The received query with each name and value decoded and re-encoded, sorted.
fn canonical_query(query: &str, plus_as_space: bool) -> String {
    let mut pairs: Vec<(String, String)> = query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            (
                uri_encode(&percent_decode(name, plus_as_space), true),
                uri_encode(&percent_decode(value, plus_as_space), true),
            )
        })
        .collect();
    pairs.sort();
    pairs
        .iter()
        .map(|(name, value)| format!("{name}={value}"))
        .collect::<Vec<_>>()
        .join("&")
}

fn percent_decode(text: &str, plus_as_space: bool) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let byte = bytes[i];
        let escaped = (byte == b'%')
            .then(|| {
                Some((
                    hex_digit(*bytes.get(i + 1)?)?,
                    hex_digit(*bytes.get(i + 2)?)?,
                ))
            })
            .flatten();
        match (byte, escaped) {
            (_, Some((high, low))) => {
                out.push(high << 4 | low);
                i += 3;
            }
            (b'+', None) if plus_as_space => {
                out.push(b' ');
                i += 1;
            }
            _ => {
                out.push(byte);
                i += 1;
            }
        }
    }
    out
}

/// SigV4's URI encoding: `A-Za-z0-9-._~` as they are, `/` too unless `encode_slash`,
/// every other byte `%XX` (upper-case hex).
fn uri_encode(bytes: &[u8], encode_slash: bool) -> String {
    let mut out = String::with_capacity(bytes.len() * 3);
    for &byte in bytes {
        if byte.is_ascii_alphanumeric()
            || matches!(byte, b'-' | b'.' | b'_' | b'~')
            || (byte == b'/' && !encode_slash)
        {
            out.push(char::from(byte));
        } else {
            out.push('%');
            out.push(char::from(HEX_UPPER[usize::from(byte >> 4)]));
            out.push(char::from(HEX_UPPER[usize::from(byte & 0xf)]));
        }
    }
    out
}

const HEX_UPPER: &[u8; 16] = b"0123456789ABCDEF";
const HEX_LOWER: &[u8; 16] = b"0123456789abcdef";

fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for &byte in bytes {
        out.push(char::from(HEX_LOWER[usize::from(byte >> 4)]));
        out.push(char::from(HEX_LOWER[usize::from(byte & 0xf)]));
    }
    out
}

fn hex_digit(byte: u8) -> Option<u8> {
    match byte {
        b'0'..=b'9' => Some(byte - b'0'),
        b'a'..=b'f' => Some(byte - b'a' + 10),
        b'A'..=b'F' => Some(byte - b'A' + 10),
        _ => None,
    }
}

/// The bytes of a hex signature, `None` when it is not hex.
fn decode_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    text.as_bytes()
        .chunks(2)
        .map(|pair| Some(hex_digit(pair[0])? << 4 | hex_digit(pair[1])?))
        .collect()
}

/// HMAC-SHA256 keyed with `key`, fed `data`. The key is brought to the block size as
/// HMAC itself does (hashed when longer, zero-padded), so keying cannot fail.
fn hmac(key: &[u8], data: &[u8]) -> Hmac<Sha256> {
    let mut block = hmac::digest::Key::<Hmac<Sha256>>::default();
    if key.len() > block.len() {
        let digest = Sha256::digest(key);
        block[..digest.len()].copy_from_slice(&digest);
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let mut mac = <Hmac<Sha256> as KeyInit>::new(&block);
    mac.update(data);
    mac
}

/// `kSigning`: the secret chained through the scope's date, region and service.
fn signing_key(secret: &str, auth: &AuthorizationHeader<'_>) -> Vec<u8> {
    let mut key = format!("AWS4{secret}").into_bytes();
    for part in [auth.date, auth.region, auth.service, SCOPE_TERMINATOR] {
        key = hmac(&key, part.as_bytes()).finalize().into_bytes().to_vec();
    }
    key
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    //! Vectors from the AWS SigV4 test suite (as shipped with `aws-sigv4`), the
    //! canonical forms, and each refusal.

    use super::*;
    use axum::http::{HeaderName, HeaderValue};

    const SUITE_KEY: &str = "AKIDEXAMPLE";
    const SUITE_SECRET: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
    const SUITE_DATE: &str = "20150830T123600Z";

    fn suite_verifier() -> Sigv4Verifier {
        Sigv4Verifier::new(SUITE_KEY, SUITE_SECRET, "us-east-1").with_service("service")
    }

    fn at(amz_date: &str) -> SystemTime {
        NaiveDateTime::parse_from_str(amz_date, AMZ_DATE_FORMAT)
            .unwrap()
            .and_utc()
            .into()
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        map
    }

    /// Verifies `request_line` (`METHOD TARGET`) as a request of the suite
    /// (`SignedHeaders` and `Signature` as given),
    /// signed at [`SUITE_DATE`], checked at `now`.
    fn check(
        verifier: &Sigv4Verifier,
        request_line: &str,
        extra_headers: &[(&str, &str)],
        signed_headers: &str,
        signature: &str,
        body: &[u8],
        now: SystemTime,
    ) -> Result<Sigv4Identity, Sigv4Error> {
        let authorization = format!(
            "AWS4-HMAC-SHA256 Credential={SUITE_KEY}/20150830/us-east-1/service/aws4_request, SignedHeaders={signed_headers}, Signature={signature}"
        );
        let mut pairs = vec![
            ("host", "example.amazonaws.com"),
            ("x-amz-date", SUITE_DATE),
            ("authorization", authorization.as_str()),
        ];
        pairs.extend_from_slice(extra_headers);
        let (method, target) = request_line.split_once(' ').unwrap();
        verifier.verify(
            &Method::from_bytes(method.as_bytes()).unwrap(),
            &target.parse().unwrap(),
            &headers(&pairs),
            body,
            now,
        )
    }

    const VANILLA_SIGNATURE: &str =
        "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31";

    fn vanilla(verifier: &Sigv4Verifier, now: SystemTime) -> Result<Sigv4Identity, Sigv4Error> {
        check(
            verifier,
            "GET /",
            &[],
            "host;x-amz-date",
            VANILLA_SIGNATURE,
            b"",
            now,
        )
    }

    #[test]
    fn suite_vectors_verify() {
        let v = suite_verifier();
        let now = at(SUITE_DATE);
        let identity = vanilla(&v, now).unwrap();
        assert_eq!(identity.access_key_id, SUITE_KEY);
        assert_eq!(identity.user_arn, LOCAL_USER_ARN);
        // get-vanilla-query-order-encoded: sorted by encoded name, UTF-8 re-encoded.
        check(
            &v,
            "GET /?Param-3=Value3&Param=Value2&%E1%88%B4=Value1",
            &[],
            "host;x-amz-date",
            "371d3713e185cc334048618a97f809c9ffe339c62934c032af5a0e595648fcac",
            b"",
            now,
        )
        .unwrap();
        // get-header-key-duplicate: repeated values joined with ',' in order.
        check(
            &v,
            "GET /",
            &[
                ("my-header1", "value2"),
                ("my-header1", "value2"),
                ("my-header1", "value1"),
            ],
            "host;my-header1;x-amz-date",
            "c9d5ea9f3f72853aea855b47ea873832890dbdd183b4468f858259531a5138ea",
            b"",
            now,
        )
        .unwrap();
        // get-header-value-trim: values trimmed, inner runs of spaces collapsed.
        check(
            &v,
            "GET /",
            &[("my-header1", " value1"), ("my-header2", "\"a   b   c\"")],
            "host;my-header1;my-header2;x-amz-date",
            "acc3ed3afb60bb290fc8d2dd0098b9911fcaa05412b367055dee359757a9c736",
            b"",
            now,
        )
        .unwrap();
        // get-slashes-normalized: empty segments dropped.
        check(
            &v,
            "GET //example//",
            &[],
            "host;x-amz-date",
            "9a624bd73a37c9a373b5312afbebe7a714a789de108f0bdfe846570885f57e84",
            b"",
            now,
        )
        .unwrap();
        // post-x-www-form-urlencoded: a signed x-amz-content-sha256 of the body.
        check(
            &v,
            "POST /",
            &[
                ("content-type", "application/x-www-form-urlencoded"),
                ("content-length", "13"),
                (
                    "x-amz-content-sha256",
                    "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e",
                ),
            ],
            "content-length;content-type;host;x-amz-content-sha256;x-amz-date",
            "d3875051da38690788ef43de4db0d8f280229d82040bfac253562e56c3f20e0b",
            b"Param1=value1",
            now,
        )
        .unwrap();
    }

    #[test]
    fn execute_api_paths_are_encoded_once_more() {
        // The suite's double-encode-path: an API Gateway WebSocket connection id.
        let v = Sigv4Verifier::new("ANOTREAL", "notrealrnrELgWzOk3IfjzDKtFBhDby", "us-east-1")
            .with_service("service");
        let authorization = "AWS4-HMAC-SHA256 Credential=ANOTREAL/20150830/us-east-1/service/aws4_request, SignedHeaders=host;x-amz-date, Signature=57d157672191bac40bae387e48bbe14b15303c001fdbb01f4abf295dccb09705";
        let map = headers(&[
            ("host", "tj9n5r0m12.execute-api.us-east-1.amazonaws.com"),
            ("x-amz-date", SUITE_DATE),
            ("authorization", authorization),
        ]);
        let uri = "/test/@connections/JBDvjfGEIAMCERw%3D".parse().unwrap();
        v.verify(&Method::POST, &uri, &map, b"", at(SUITE_DATE))
            .unwrap();

        assert_eq!(canonical_uri("/a%20b/c%2Fd"), "/a%2520b/c%252Fd");
        assert_eq!(canonical_uri(""), "/");
        assert_eq!(canonical_uri("/a/./b/../c/"), "/a/c/");
    }

    #[test]
    fn queries_are_decoded_reencoded_and_sorted() {
        assert_eq!(
            canonical_query("b=2&a=x%20y&a=1&flag&&c=%7e%2a", false),
            "a=1&a=x%20y&b=2&c=~%2A&flag="
        );
        assert_eq!(canonical_query("q=a+b", false), "q=a%2Bb");
        assert_eq!(canonical_query("q=a+b", true), "q=a%20b");
        assert_eq!(canonical_query("bad=%zz", false), "bad=%25zz");
        assert_eq!(canonical_query("", false), "");
    }

    #[test]
    fn each_refusal_has_api_gateways_error_type() {
        let v = suite_verifier();
        let now = at(SUITE_DATE);

        let missing = v
            .verify(
                &Method::GET,
                &"/".parse().unwrap(),
                &HeaderMap::new(),
                b"",
                now,
            )
            .unwrap_err();
        assert!(matches!(missing, Sigv4Error::MissingAuthorization { .. }));
        assert_eq!(missing.error_type(), "MissingAuthenticationTokenException");
        assert!(
            missing
                .to_string()
                .starts_with("Missing Authentication Token")
        );

        let other_key =
            Sigv4Verifier::new("AKIDOTHER", SUITE_SECRET, "us-east-1").with_service("service");
        let e = vanilla(&other_key, now).unwrap_err();
        assert_eq!(e.error_type(), "UnrecognizedClientException");

        let other_secret =
            Sigv4Verifier::new(SUITE_KEY, "not-the-secret", "us-east-1").with_service("service");
        let e = vanilla(&other_secret, now).unwrap_err();
        assert!(matches!(e, Sigv4Error::SignatureMismatch { .. }), "{e}");
        assert_eq!(e.error_type(), "InvalidSignatureException");
        assert!(e.to_string().contains("host:example.amazonaws.com\n"));

        let other_region =
            Sigv4Verifier::new(SUITE_KEY, SUITE_SECRET, "eu-west-1").with_service("service");
        assert!(matches!(
            vanilla(&other_region, now),
            Err(Sigv4Error::WrongRegion { .. })
        ));
        let execute_api = Sigv4Verifier::new(SUITE_KEY, SUITE_SECRET, "us-east-1");
        assert!(matches!(
            vanilla(&execute_api, now),
            Err(Sigv4Error::WrongService { .. })
        ));

        let late = now + MAX_SIGV4_CLOCK_SKEW + Duration::from_secs(1);
        assert!(matches!(vanilla(&v, late), Err(Sigv4Error::Expired { .. })));
        let early = now - MAX_SIGV4_CLOCK_SKEW - Duration::from_secs(1);
        assert!(matches!(
            vanilla(&v, early),
            Err(Sigv4Error::Expired { .. })
        ));
        vanilla(&v, now + MAX_SIGV4_CLOCK_SKEW).unwrap();

        let tampered = check(
            &v,
            "GET /",
            &[],
            "host;x-amz-date",
            &VANILLA_SIGNATURE.replace('5', "6"),
            b"",
            now,
        );
        assert!(matches!(
            tampered,
            Err(Sigv4Error::SignatureMismatch { .. })
        ));
        let not_hex = check(&v, "GET /", &[], "host;x-amz-date", "zz", b"", now);
        assert!(matches!(not_hex, Err(Sigv4Error::SignatureMismatch { .. })));

        let unsigned_host = check(&v, "GET /", &[], "x-amz-date", VANILLA_SIGNATURE, b"", now);
        assert!(matches!(unsigned_host, Err(Sigv4Error::Incomplete(_))));
        let absent = check(
            &v,
            "GET /",
            &[],
            "host;my-header;x-amz-date",
            VANILLA_SIGNATURE,
            b"",
            now,
        );
        assert!(matches!(absent, Err(Sigv4Error::Incomplete(_))));

        let wrong_hash = check(
            &v,
            "GET /",
            &[("x-amz-content-sha256", "UNSIGNED-PAYLOAD")],
            "host;x-amz-date",
            VANILLA_SIGNATURE,
            b"",
            now,
        );
        assert!(matches!(wrong_hash, Err(Sigv4Error::PayloadHash { .. })));

        for bad in [
            "Bearer abc",
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request",
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service, SignedHeaders=host, Signature=00",
        ] {
            let map = headers(&[
                ("host", "example.amazonaws.com"),
                ("x-amz-date", SUITE_DATE),
                ("authorization", bad),
            ]);
            let e = v
                .verify(&Method::GET, &"/".parse().unwrap(), &map, b"", now)
                .unwrap_err();
            assert_eq!(e.error_type(), "IncompleteSignatureException", "{bad}: {e}");
        }
    }

    #[test]
    fn the_secret_stays_out_of_debug_output() {
        let debug = format!("{:?}", suite_verifier());
        assert!(!debug.contains(SUITE_SECRET));
        assert!(debug.contains(SUITE_KEY));
    }
}

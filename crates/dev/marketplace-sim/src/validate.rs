//! Request-level validation of BatchMeterUsage: every rule that fails the WHOLE
//! batch. Checks run in a fixed order (structure, product code, timestamp window,
//! license, dimension, tags, allocations); the first failing check across all
//! records decides the exception, and its message names the record and field.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Datelike, TimeDelta, TimeZone, Utc};
use regex::Regex;
use serde_json::Number;

use crate::error::{ApiError, ApiErrorKind};
use crate::model::{Allocation, AllocationTag};
use crate::wire::{BatchMeterUsageRequest, WireUsageRecord};

/// Most records in one request (model `UsageRecordList` max length).
pub const MAX_RECORDS: usize = 25;
/// Most allocations on one record (model `UsageAllocations` max length).
pub const MAX_ALLOCATIONS: usize = 2500;
/// Most tags on one allocation.
pub const MAX_TAGS: usize = 5;
/// Largest quantity (model `UsageQuantity` / `AllocatedUsageQuantity`).
pub const MAX_QUANTITY: i64 = 2_147_483_647;
/// A record is refused once it is this old (sim clock).
pub const MAX_RECORD_AGE: TimeDelta = TimeDelta::hours(24);
/// Usage of the previous month is accepted until this long after the month starts.
pub const MONTH_END_GRACE: TimeDelta = TimeDelta::hours(6);

/// The model's patterns, compiled once at start.
#[derive(Debug, Clone)]
pub struct Patterns {
    license_arn: Regex,
    tag: Regex,
    account: Regex,
    product_code: Regex,
}

impl Patterns {
    /// Compiles the patterns of the Marketplace Metering model.
    pub fn compile() -> Result<Self, regex::Error> {
        Ok(Self {
            license_arn: Regex::new(
                r"^arn:aws[a-zA-Z-]*:[A-Za-z0-9][A-Za-z0-9_/.-]{0,62}:[A-Za-z0-9_/.-]{0,63}:[A-Za-z0-9_/.-]{0,63}:[A-Za-z0-9][A-Za-z0-9:_/+=,@.-]{0,1023}$",
            )?,
            // The model writes `+ -=` inside the class: a RANGE from space to '=',
            // kept literally (see marketplace-api-facts §2.4).
            tag: Regex::new(r"^[a-zA-Z0-9+ -=._:\/@]+$")?,
            account: Regex::new(r"^[0-9]+$")?,
            product_code: Regex::new(r"^[-a-zA-Z0-9/=:_.@]*$")?,
        })
    }

    /// Whether `arn` matches the model's `LicenseArn` pattern.
    pub fn is_license_arn(&self, arn: &str) -> bool {
        self.license_arn.is_match(arn)
    }
}

/// What the validator needs to know about the simulator's seeded state.
#[derive(Debug, Clone, Copy)]
pub struct Catalog<'a> {
    /// Known licenses and their products. Empty: the simulator knows no licenses
    /// and accepts any well-formed LicenseArn.
    pub license_products: &'a BTreeMap<String, String>,
    /// Products with seeded dimensions. A product without an entry accepts any
    /// dimension.
    pub product_dimensions: &'a BTreeMap<String, BTreeSet<String>>,
}

impl Catalog<'_> {
    fn knows_product(&self, product_code: &str) -> bool {
        self.product_dimensions.contains_key(product_code)
            || self.license_products.values().any(|p| p == product_code)
    }

    fn knows_any_product(&self) -> bool {
        !self.product_dimensions.is_empty() || !self.license_products.is_empty()
    }
}

/// A record that passed validation, with its fields in domain types.
#[derive(Debug, Clone, PartialEq)]
pub struct MeteredRecord {
    /// The record exactly as sent (echoed in the response).
    pub echo: WireUsageRecord,
    /// The record's timestamp.
    pub timestamp: DateTime<Utc>,
    /// The UTC hour of `timestamp`.
    pub hour: DateTime<Utc>,
    /// The buyer's account.
    pub customer_aws_account_id: String,
    /// The buyer's license.
    pub license_arn: String,
    /// The dimension.
    pub dimension: String,
    /// The quantity (0 when absent).
    pub quantity: u32,
    /// The allocations, normalized (tags sorted) for comparison.
    pub allocations: Vec<Allocation>,
}

fn invalid(kind: ApiErrorKind, index: usize, detail: impl std::fmt::Display) -> ApiError {
    ApiError::new(kind, format!("UsageRecords[{index}]: {detail}"))
}

/// Converts an epoch-seconds number (integer or fractional) to a UTC instant.
pub fn epoch_seconds_to_datetime(seconds: &Number) -> Option<DateTime<Utc>> {
    if let Some(whole) = seconds.as_i64() {
        return DateTime::from_timestamp(whole, 0);
    }
    let value = seconds.as_f64()?;
    let whole = value.floor();
    // Float-to-int casts saturate; the range check below rejects the saturated ends.
    let secs = whole as i64;
    let nanos = ((value - whole) * 1e9).round().min(999_999_999.0) as u32;
    if (whole - secs as f64).abs() > 1.0 {
        return None;
    }
    DateTime::from_timestamp(secs, nanos)
}

/// The start of the UTC hour `at` falls in.
pub fn hour_of(at: DateTime<Utc>) -> DateTime<Utc> {
    let secs = at.timestamp().div_euclid(3600) * 3600;
    DateTime::from_timestamp(secs, 0).unwrap_or(at)
}

/// Why a timestamp is outside the accepted window at sim time `now`, if it is:
/// in the future, 24 h old or more, or in the previous billing month once 06:00
/// UTC on the 1st has passed.
pub fn timestamp_window_violation(ts: DateTime<Utc>, now: DateTime<Utc>) -> Option<String> {
    if ts > now {
        return Some(format!(
            "Timestamp {ts} is in the future (service time {now})"
        ));
    }
    if now - ts >= MAX_RECORD_AGE {
        return Some(format!(
            "Timestamp {ts} is 24 hours or more before the service time {now}"
        ));
    }
    // The first of a month at midnight always exists in UTC.
    let month_start = Utc
        .with_ymd_and_hms(now.year(), now.month(), 1, 0, 0, 0)
        .single()
        .unwrap_or(now);
    if ts < month_start && now >= month_start + MONTH_END_GRACE {
        return Some(format!(
            "Timestamp {ts} belongs to the previous billing month, closed at {} (service time {now})",
            month_start + MONTH_END_GRACE
        ));
    }
    None
}

/// Reads a quantity field as 0..=2147483647.
fn quantity_in_range(value: &Number) -> Result<u32, String> {
    match value.as_i64() {
        Some(q) if (0..=MAX_QUANTITY).contains(&q) => {
            u32::try_from(q).map_err(|_| format!("{value} is outside 0..={MAX_QUANTITY}"))
        }
        Some(_) => Err(format!("{value} is outside 0..={MAX_QUANTITY}")),
        None if value.is_u64() => Err(format!("{value} is outside 0..={MAX_QUANTITY}")),
        None => Err(format!("{value} is not an integer")),
    }
}

/// Structure of one record: required fields present and in range. Returns the
/// parsed parts that later checks need.
struct RecordParts {
    timestamp: DateTime<Utc>,
    account: String,
    license: String,
    dimension: String,
    quantity: u32,
    allocation_quantities: Option<Vec<u32>>,
}

fn check_structure(
    index: usize,
    record: &WireUsageRecord,
    patterns: &Patterns,
) -> Result<RecordParts, ApiError> {
    use ApiErrorKind::{TimestampOutOfBounds, Validation};
    let timestamp_number = record
        .timestamp
        .as_ref()
        .ok_or_else(|| invalid(Validation, index, "Timestamp is required"))?;
    let timestamp = epoch_seconds_to_datetime(timestamp_number).ok_or_else(|| {
        invalid(
            TimestampOutOfBounds,
            index,
            format!("Timestamp {timestamp_number} is not a representable instant"),
        )
    })?;
    let dimension = match record.dimension.as_deref() {
        None | Some("") => return Err(invalid(Validation, index, "Dimension is required")),
        Some(d) if d.chars().count() > 255 => {
            return Err(invalid(
                Validation,
                index,
                "Dimension is longer than 255 characters",
            ));
        }
        Some(d) => d.to_owned(),
    };
    let quantity = match &record.quantity {
        None => 0,
        Some(q) => quantity_in_range(q)
            .map_err(|why| invalid(Validation, index, format!("Quantity {why}")))?,
    };
    let customer_identifier = record.customer_identifier.as_deref().unwrap_or("");
    let account = match record.customer_aws_account_id.as_deref() {
        None | Some("") if !customer_identifier.is_empty() => {
            return Err(invalid(
                Validation,
                index,
                "CustomerAWSAccountId is required: the simulator implements the LicenseArn \
                 integration only, not legacy CustomerIdentifier records",
            ));
        }
        None | Some("") => {
            return Err(invalid(
                Validation,
                index,
                "CustomerAWSAccountId is required",
            ));
        }
        Some(a) => a,
    };
    if !customer_identifier.is_empty() {
        return Err(invalid(
            Validation,
            index,
            "CustomerIdentifier and CustomerAWSAccountId are mutually exclusive",
        ));
    }
    if account.len() > 255 || !patterns.account.is_match(account) {
        return Err(invalid(
            Validation,
            index,
            format!("CustomerAWSAccountId {account:?} must be 1..255 digits"),
        ));
    }
    let license = match record.license_arn.as_deref() {
        None | Some("") => return Err(invalid(Validation, index, "LicenseArn is required")),
        Some(l) => l.to_owned(),
    };
    let allocation_quantities = match &record.usage_allocations {
        None => None,
        Some(allocations) => Some(
            allocations
                .iter()
                .enumerate()
                .map(|(a, allocation)| {
                    let q = allocation
                        .allocated_usage_quantity
                        .as_ref()
                        .ok_or_else(|| {
                            invalid(
                                Validation,
                                index,
                                format!("UsageAllocations[{a}].AllocatedUsageQuantity is required"),
                            )
                        })?;
                    quantity_in_range(q).map_err(|why| {
                        invalid(
                            Validation,
                            index,
                            format!("UsageAllocations[{a}].AllocatedUsageQuantity {why}"),
                        )
                    })
                })
                .collect::<Result<Vec<u32>, ApiError>>()?,
        ),
    };
    Ok(RecordParts {
        timestamp,
        account: account.to_owned(),
        license,
        dimension,
        quantity,
        allocation_quantities,
    })
}

/// Checks the request-level `ProductCode` (already known non-empty) against the
/// products of the records' licenses. A matching or unjudgeable code is still a
/// double-billing hazard, so it fails with `ValidationException`.
fn check_product_code(
    product_code: &str,
    parts: &[RecordParts],
    patterns: &Patterns,
    catalog: Catalog<'_>,
) -> ApiError {
    if product_code.len() > 255 || !patterns.product_code.is_match(product_code) {
        return ApiError::new(
            ApiErrorKind::InvalidProductCode,
            format!("ProductCode {product_code:?} does not match the model pattern"),
        );
    }
    let mismatch = parts.iter().find_map(|p| {
        catalog
            .license_products
            .get(&p.license)
            .filter(|product| product.as_str() != product_code)
            .map(|product| (p.license.clone(), product.clone()))
    });
    if let Some((license, product)) = mismatch {
        return ApiError::new(
            ApiErrorKind::InvalidProductCode,
            format!(
                "ProductCode {product_code:?} does not match product {product:?} of LicenseArn {license}"
            ),
        );
    }
    if catalog.knows_any_product() && !catalog.knows_product(product_code) {
        return ApiError::new(
            ApiErrorKind::InvalidProductCode,
            format!("ProductCode {product_code:?} is not a product known to the simulator"),
        );
    }
    ApiError::new(
        ApiErrorKind::Validation,
        "ProductCode must not be sent with LicenseArn records: AWS bills metering sent with both \
         ProductCode and LicenseArn for the same customer and hour twice (double billing). \
         Omit ProductCode.",
    )
}

fn check_tags(index: usize, record: &WireUsageRecord, patterns: &Patterns) -> Result<(), ApiError> {
    let Some(allocations) = &record.usage_allocations else {
        return Ok(());
    };
    for (a, allocation) in allocations.iter().enumerate() {
        let Some(tags) = &allocation.tags else {
            continue;
        };
        let at = |detail: String| {
            invalid(
                ApiErrorKind::InvalidTag,
                index,
                format!("UsageAllocations[{a}].{detail}"),
            )
        };
        if tags.is_empty() || tags.len() > MAX_TAGS {
            return Err(at(format!(
                "Tags holds {} tags; 1..={MAX_TAGS} are allowed",
                tags.len()
            )));
        }
        for (t, tag) in tags.iter().enumerate() {
            let key = tag.key.as_deref().unwrap_or("");
            let value = tag.value.as_deref().unwrap_or("");
            let key_len = key.chars().count();
            if !(1..=100).contains(&key_len) || !patterns.tag.is_match(key) {
                return Err(at(format!(
                    "Tags[{t}].Key {key:?} must be 1..100 characters of [a-zA-Z0-9+ -=._:/@]"
                )));
            }
            let value_len = value.chars().count();
            if !(1..=256).contains(&value_len) || !patterns.tag.is_match(value) {
                return Err(at(format!(
                    "Tags[{t}].Value {value:?} must be 1..256 characters of [a-zA-Z0-9+ -=._:/@]"
                )));
            }
        }
    }
    Ok(())
}

fn check_allocations(index: usize, parts: &RecordParts) -> Result<(), ApiError> {
    let Some(quantities) = &parts.allocation_quantities else {
        return Ok(());
    };
    let kind = ApiErrorKind::InvalidUsageAllocations;
    if quantities.is_empty() || quantities.len() > MAX_ALLOCATIONS {
        return Err(invalid(
            kind,
            index,
            format!(
                "UsageAllocations holds {} allocations; 1..={MAX_ALLOCATIONS} are allowed",
                quantities.len()
            ),
        ));
    }
    let sum: u64 = quantities.iter().map(|&q| u64::from(q)).sum();
    if sum != u64::from(parts.quantity) {
        return Err(invalid(
            kind,
            index,
            format!(
                "allocated quantities sum to {sum}, not the record Quantity {}",
                parts.quantity
            ),
        ));
    }
    Ok(())
}

fn normalized_allocations(record: &WireUsageRecord, quantities: &[u32]) -> Vec<Allocation> {
    let Some(allocations) = &record.usage_allocations else {
        return Vec::new();
    };
    let mut normalized: Vec<Allocation> = allocations
        .iter()
        .zip(quantities)
        .map(|(allocation, &quantity)| {
            let mut tags: Vec<AllocationTag> = allocation
                .tags
                .iter()
                .flatten()
                .map(|t| AllocationTag {
                    key: t.key.clone().unwrap_or_default(),
                    value: t.value.clone().unwrap_or_default(),
                })
                .collect();
            tags.sort();
            Allocation {
                allocated_usage_quantity: quantity,
                tags,
            }
        })
        .collect();
    normalized.sort();
    normalized
}

/// Validates a whole BatchMeterUsage request at sim time `now`. Any failure
/// rejects the whole batch.
pub fn validate_batch(
    request: &BatchMeterUsageRequest,
    now: DateTime<Utc>,
    patterns: &Patterns,
    catalog: Catalog<'_>,
) -> Result<Vec<MeteredRecord>, ApiError> {
    let records = request
        .usage_records
        .as_ref()
        .ok_or_else(|| ApiError::new(ApiErrorKind::Validation, "UsageRecords is required"))?;
    if records.len() > MAX_RECORDS {
        return Err(ApiError::new(
            ApiErrorKind::Validation,
            format!(
                "UsageRecords holds {} records; at most {MAX_RECORDS} are allowed",
                records.len()
            ),
        ));
    }
    let parts = records
        .iter()
        .enumerate()
        .map(|(i, r)| check_structure(i, r, patterns))
        .collect::<Result<Vec<_>, _>>()?;

    if let Some(product_code) = request.product_code.as_deref().filter(|p| !p.is_empty()) {
        return Err(check_product_code(product_code, &parts, patterns, catalog));
    }

    for (i, p) in parts.iter().enumerate() {
        if let Some(why) = timestamp_window_violation(p.timestamp, now) {
            return Err(invalid(ApiErrorKind::TimestampOutOfBounds, i, why));
        }
    }
    for (i, p) in parts.iter().enumerate() {
        if !patterns.is_license_arn(&p.license) {
            return Err(invalid(
                ApiErrorKind::InvalidLicense,
                i,
                format!(
                    "LicenseArn {:?} does not match the LicenseArn pattern",
                    p.license
                ),
            ));
        }
        if !catalog.license_products.is_empty()
            && !catalog.license_products.contains_key(&p.license)
        {
            return Err(invalid(
                ApiErrorKind::InvalidLicense,
                i,
                format!(
                    "LicenseArn {} is not a license known to the simulator",
                    p.license
                ),
            ));
        }
    }
    for (i, p) in parts.iter().enumerate() {
        let Some(product) = catalog.license_products.get(&p.license) else {
            continue;
        };
        let Some(dimensions) = catalog.product_dimensions.get(product) else {
            continue;
        };
        if !dimensions.contains(&p.dimension) {
            let known: Vec<&str> = dimensions.iter().map(String::as_str).collect();
            return Err(invalid(
                ApiErrorKind::InvalidUsageDimension,
                i,
                format!(
                    "Dimension {:?} is not a dimension of product {product:?} (dimensions: {})",
                    p.dimension,
                    known.join(", ")
                ),
            ));
        }
    }
    for (i, r) in records.iter().enumerate() {
        check_tags(i, r, patterns)?;
    }
    for (i, p) in parts.iter().enumerate() {
        check_allocations(i, p)?;
    }

    Ok(records
        .iter()
        .zip(parts)
        .map(|(record, p)| MeteredRecord {
            allocations: normalized_allocations(
                record,
                p.allocation_quantities.as_deref().unwrap_or(&[]),
            ),
            echo: record.clone(),
            hour: hour_of(p.timestamp),
            timestamp: p.timestamp,
            customer_aws_account_id: p.account,
            license_arn: p.license,
            dimension: p.dimension,
            quantity: p.quantity,
        })
        .collect())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::test_support::at;

    #[test]
    fn window_accepts_the_last_24_hours_and_refuses_the_edges() {
        let now = at("2026-03-15T12:00:00Z");
        assert_eq!(timestamp_window_violation(now, now), None);
        assert_eq!(
            timestamp_window_violation(at("2026-03-14T12:00:01Z"), now),
            None
        );
        assert!(timestamp_window_violation(at("2026-03-14T12:00:00Z"), now).is_some());
        assert!(timestamp_window_violation(at("2026-03-15T12:00:01Z"), now).is_some());
    }

    #[test]
    fn previous_month_closes_at_six_on_the_first() {
        let march_31_late = at("2026-03-31T22:00:00Z");
        assert_eq!(
            timestamp_window_violation(march_31_late, at("2026-04-01T05:59:59Z")),
            None
        );
        let refused = timestamp_window_violation(march_31_late, at("2026-04-01T06:00:00Z"))
            .expect("closed month refused");
        assert!(refused.contains("previous billing month"), "{refused}");
        // April usage is unaffected by the grace rule.
        assert_eq!(
            timestamp_window_violation(at("2026-04-01T05:00:00Z"), at("2026-04-01T07:00:00Z")),
            None
        );
    }

    #[test]
    fn fractional_epoch_seconds_convert_and_bucket_by_hour() {
        let n: Number = serde_json::from_str("1767225599.75").expect("number");
        let ts = epoch_seconds_to_datetime(&n).expect("representable");
        assert_eq!(ts.timestamp(), 1_767_225_599);
        assert_eq!(ts.timestamp_subsec_millis(), 750);
        assert_eq!(hour_of(ts), at("2025-12-31T23:00:00Z"));
        let huge: Number = serde_json::from_str("1e300").expect("number");
        assert_eq!(epoch_seconds_to_datetime(&huge), None);
    }

    #[test]
    fn quantities_must_be_integers_in_range() {
        let parse = |s: &str| quantity_in_range(&serde_json::from_str(s).expect("number"));
        assert_eq!(parse("0"), Ok(0));
        assert_eq!(parse("2147483647"), Ok(2_147_483_647));
        assert!(parse("2147483648").is_err());
        assert!(parse("-1").is_err());
        assert!(parse("18446744073709551615").is_err());
        assert!(
            parse("1.5")
                .expect_err("fraction")
                .contains("not an integer")
        );
    }

    #[test]
    fn patterns_follow_the_model() {
        let p = Patterns::compile().expect("compiles");
        assert!(
            p.is_license_arn("arn:aws:license-manager::123456789012:license:l-0123456789abcdef")
        );
        // The EventBridge doc example lacks the `arn:` prefix.
        assert!(!p.is_license_arn(
            "aws:license-manager:us-east-1:123456789012:l-e52ca6f38bf84d0fafb8802ca15ac11x"
        ));
        assert!(p.tag.is_match("team a/b@c:d=e"));
        // ` -=` is a range, so '<' and '#' are accepted literally; '>' and '~' are not.
        assert!(p.tag.is_match("a<#b"));
        assert!(!p.tag.is_match("a>b"));
        assert!(!p.tag.is_match("a~b"));
        assert!(!p.product_code.is_match("bad code"));
    }
}

//! Client-side guardrails: every raw usage row is checked before it can be counted, so
//! a seller's bad write becomes a `RejectedClientSide` row with a reason code instead
//! of a `BatchMeterUsage` exception that fails a whole batch.
//!
//! The first failing check wins, in this order. Keys come first (they name the row and
//! its group), then the attributes the sort key is compared against, then the quantity,
//! the time window (which needs a valid timestamp), the product, and last the VMT
//! allocations (whose sum needs a valid quantity). Dimensions are never validated
//! beyond "present and non-empty": only Marketplace knows the catalog's dimensions.
//!
//! | # | code | check (a row fails when ...) | server-side equivalent |
//! |---|---|---|---|
//! | 1 | `InvalidLicenseArn` | partition key `licenseArn` does not match `^arn:aws[a-zA-Z-]*:license-manager:[^:]*:[0-9]{12}:license:.+$` | `InvalidLicenseException` |
//! | 2 | `MalformedSortKey` | sort key is not `<account>#<dimension>#<timestamp>` or `...#<suffix>` with every part non-empty (account and timestamp contain no `#`; dimension and suffix may) | none: our table key, never sent |
//! | 3 | `MissingCustomerAWSAccountId` | `customerAWSAccountId` missing, not a string, or not exactly 12 ASCII digits | `InvalidCustomerIdentifierException` / `ValidationException` |
//! | 4 | `MissingDimension` | `dimension` missing, not a string, or empty | `ValidationException` (Dimension is required, 1..255) |
//! | 5 | `MalformedTimestamp` | `timestamp` missing, not a string, or not whole-second UTC `YYYY-MM-DDTHH:MM:SS[Z]` | `TimestampOutOfBoundsException` |
//! | 6 | `SortKeyMismatch` | sort key is not `<customerAWSAccountId>#<dimension>#<timestamp>[#<suffix>]` for the row's own attributes (the key's timestamp may differ from the attribute only by the trailing `Z`) | none: a group would count the row under the wrong key |
//! | 7 | `NonNumericQuantity` | `quantity` missing, not a number (`N`), or number text that is not a decimal | `ValidationException` |
//! | 8 | `NonIntegerQuantity` | `quantity` has a non-zero fractional part (`1.5`; `2.0` and `2e3` are integers) | `ValidationException` |
//! | 9 | `NegativeQuantity` | `quantity` < 0 | `ValidationException` (Quantity 0..2147483647) |
//! | 10 | `QuantityTooLarge` | `quantity` > 2147483647 | `ValidationException` (Quantity 0..2147483647) |
//! | 11 | `TimestampInFuture` | timestamp later than now | `TimestampOutOfBoundsException` |
//! | 12 | `TimestampOutOfWindow` | `time::accepted_by_api` is false for the past timestamp: 24 h or older, or previous month after 06:00 UTC on the 1st | `TimestampOutOfBoundsException` |
//! | 13 | `ProductCodeMismatch` | `productCode` present (not `NULL`) and not the string equal to the stack's product code | `InvalidProductCodeException` |
//! | 14 | `MalformedAllocations` | `usageAllocations` present (not `NULL`) and not a non-empty list of maps `{allocatedUsageQuantity: N, tags?: [{key: S, value: S}]}` with no other fields (a misspelt `tag` would otherwise silently make the allocation untagged); `tags` may be absent, `NULL` or `[]` (the untagged bucket) | `InvalidUsageAllocationsException` |
//! | 15 | `NegativeOrNonIntegerAllocation` | an `allocatedUsageQuantity` is fractional, negative or > 2147483647 | `InvalidUsageAllocationsException` |
//! | 16 | `MissingTagKeyOrValue` | a tag's `key` or `value` is missing, `NULL` or empty | `InvalidTagException` |
//! | 17 | `InvalidTag` | a key longer than 100 or a value longer than 256 characters, a character outside the API pattern `^[a-zA-Z0-9+ -=._:\/@]+$` (` -=` is the range space..`=`), or the same key twice in one allocation | `InvalidTagException` |
//! | 18 | `TooManyTags` | an allocation has more than 5 tags | `InvalidTagException` |
//! | 19 | `AllocationSumMismatch` | the row's allocation quantities do not sum to its quantity | `InvalidUsageAllocationsException` |
//! | 20 | `ReservedAttribute` | the row carries `expiresAt` (any type), the tables' TTL attribute, which only the pipeline writes on final items ([`crate::retention`]): DynamoDB could delete the row before it is counted | none: our table's TTL |
//!
//! Group-level checks ([`validate_group`]) run on a group's per-row-valid rows plus the
//! group's existing aggregated record, if any (late rows fold into it). Rows are taken
//! in `(timestamp, sort key)` order, so the verdict never depends on read order:
//!
//! | # | code | which rows get it | server-side equivalent |
//! |---|---|---|---|
//! | G1 | `HourAlreadySubmitted` | every row, when the existing record already left `Pending` (not a guardrail of the row itself: the hour was billed, first write wins) | `DuplicateRecord` verdict |
//! | G2 | `MixedAllocatedAndUnallocated` | zero-quantity rows are ignored (they carry no billable quantity and never contribute allocations). If the existing record has a non-zero quantity its mode (tagged or untagged) is fixed and every non-zero row of the other mode gets it. Otherwise, when the non-zero rows mix both modes, every non-zero row gets it: there is no basis for billing one half | `InvalidUsageAllocationsException` |
//! | G3 | `TooManyAllocations` | the merged tag sets of the record (the existing record's included) may not exceed 2,500: a tagged row whose new tag sets would push the count over gets it; rows that only reuse counted tag sets are still counted | `InvalidUsageAllocationsException` |
//! | G4 | `RecordTooLarge` | the merged allocations of the record may not exceed 300 KB as DynamoDB sizes items ([`allocation_item_bytes`]), so the record always fits one 400 KB item: a tagged row whose new tag sets would push the size over gets it | none: our item limit (the request's 1 MB limit is the batcher's `RequestTooLarge`) |
//!
//! The aggregation step adds one more: a row that would take the record's total over
//! 2147483647 gets `QuantityTooLarge` (see [`crate::aggregate::split_within_cap`]).

mod allocations;
#[cfg(test)]
pub(crate) mod fixtures;
mod group;
mod quantity;
pub mod write;

use std::sync::LazyLock;

use regex::Regex;

use crate::model::{Attr, RawUsageRow, ReasonCode, ValidUsageRow, attr};
use crate::time::{Instant, accepted_by_api, parse_usage_timestamp};

pub use group::{
    AllocationMode, MAX_ALLOCATION_BYTES_PER_RECORD, ScreenedGroup, allocation_item_bytes,
    row_in_group, screen_group, validate_group,
};
pub use quantity::quantity_from_text;

pub(crate) use allocations::allocations_from_attr;

/// Largest quantity Marketplace accepts for a record or an allocation (`i32::MAX`).
pub const MAX_QUANTITY: i64 = 2_147_483_647;
/// Most tags on one allocation.
pub const MAX_TAGS_PER_ALLOCATION: usize = 5;
/// Most distinct (merged) tag sets on one aggregated record.
pub const MAX_ALLOCATIONS_PER_RECORD: usize = 2_500;
/// Longest tag key, in characters.
pub const MAX_TAG_KEY_LEN: usize = 100;
/// Longest tag value, in characters.
pub const MAX_TAG_VALUE_LEN: usize = 256;
/// Digits in an AWS account id.
pub const ACCOUNT_ID_DIGITS: usize = 12;

/// The License Manager license ARN pattern a `licenseArn` must match.
pub const LICENSE_ARN_PATTERN: &str =
    r"^arn:aws[a-zA-Z-]*:license-manager:[^:]*:[0-9]{12}:license:.+$";

/// The compiled [`LICENSE_ARN_PATTERN`], built once per process.
static LICENSE_ARN: LazyLock<Regex> = LazyLock::new(|| {
    // The pattern is a constant; `license_arn_pattern_compiles` proves it compiles, so
    // this can only fail if someone edits the constant without running the tests.
    #[allow(clippy::expect_used)]
    Regex::new(LICENSE_ARN_PATTERN).expect("LICENSE_ARN_PATTERN is a valid regex")
});

/// What the per-row checks need besides the row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuardrailContext {
    /// The evaluation instant (the run's "now", taken from the triggering event).
    pub now: Instant,
    /// The stack's product code (`PRODUCT_CODE`).
    pub product_code: String,
}

impl GuardrailContext {
    /// A context for checks at `now` for the stack's `product_code`.
    pub fn new(now: Instant, product_code: impl Into<String>) -> Self {
        GuardrailContext {
            now,
            product_code: product_code.into(),
        }
    }
}

/// A row that may not be counted, and why.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RejectedRow {
    /// The row's sort key (its partition key is the group's license).
    pub sort_key: String,
    /// The first check it failed.
    pub reason: ReasonCode,
}

impl From<RejectedRow> for (String, ReasonCode) {
    fn from(row: RejectedRow) -> Self {
        (row.sort_key, row.reason)
    }
}

/// Rows partitioned into those that may be counted and those rejected client-side.
/// Every input row lands in exactly one of the lists.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GuardrailOutcome {
    /// Rows that passed (typed).
    pub accepted: Vec<ValidUsageRow>,
    /// Rows that failed, with their reason code.
    pub rejected: Vec<RejectedRow>,
}

/// Checks one raw row against every per-row guardrail (the table in the module doc),
/// returning the typed row or the first failing check's reason code.
pub fn validate_row(
    row: &RawUsageRow,
    ctx: &GuardrailContext,
) -> Result<ValidUsageRow, ReasonCode> {
    if !LICENSE_ARN.is_match(&row.license_arn) {
        return Err(ReasonCode::InvalidLicenseArn);
    }
    if !sort_key_well_formed(&row.sort_key) {
        return Err(ReasonCode::MalformedSortKey);
    }
    let account = string_attr(row, attr::CUSTOMER_ACCOUNT)
        .filter(|a| a.len() == ACCOUNT_ID_DIGITS && a.bytes().all(|b| b.is_ascii_digit()))
        .ok_or(ReasonCode::MissingCustomerAWSAccountId)?;
    let dimension = string_attr(row, attr::DIMENSION)
        .filter(|d| !d.is_empty())
        .ok_or(ReasonCode::MissingDimension)?;
    let timestamp_text = string_attr(row, attr::TIMESTAMP).ok_or(ReasonCode::MalformedTimestamp)?;
    let timestamp =
        parse_usage_timestamp(timestamp_text).map_err(|_| ReasonCode::MalformedTimestamp)?;
    if !sort_key_matches(&row.sort_key, account, dimension, timestamp_text, timestamp) {
        return Err(ReasonCode::SortKeyMismatch);
    }
    let quantity = match row.attrs.get(attr::QUANTITY) {
        Some(Attr::N(text)) => quantity_from_text(text)?,
        _ => return Err(ReasonCode::NonNumericQuantity),
    };
    if timestamp > ctx.now {
        return Err(ReasonCode::TimestampInFuture);
    }
    if !accepted_by_api(timestamp, ctx.now) {
        return Err(ReasonCode::TimestampOutOfWindow);
    }
    let product_code = match row.attrs.get(attr::PRODUCT_CODE) {
        None | Some(Attr::Null) => None,
        Some(Attr::S(code)) if *code == ctx.product_code => Some(code.clone()),
        Some(_) => return Err(ReasonCode::ProductCodeMismatch),
    };
    let allocations = match row.attrs.get(attr::USAGE_ALLOCATIONS) {
        None | Some(Attr::Null) => None,
        Some(value) => Some(allocations_from_attr(value, quantity)?),
    };
    if row.attrs.contains_key(attr::EXPIRES_AT) {
        return Err(ReasonCode::ReservedAttribute);
    }
    Ok(ValidUsageRow {
        license_arn: row.license_arn.clone(),
        sort_key: row.sort_key.clone(),
        customer_aws_account_id: account.to_string(),
        dimension: dimension.to_string(),
        timestamp,
        quantity,
        allocations,
        product_code,
    })
}

/// Runs [`validate_row`] over rows, keeping their order in each list.
pub fn validate_rows<'a, I>(rows: I, ctx: &GuardrailContext) -> GuardrailOutcome
where
    I: IntoIterator<Item = &'a RawUsageRow>,
{
    let mut outcome = GuardrailOutcome::default();
    for row in rows {
        match validate_row(row, ctx) {
            Ok(valid) => outcome.accepted.push(valid),
            Err(reason) => outcome.rejected.push(RejectedRow {
                sort_key: row.sort_key.clone(),
                reason,
            }),
        }
    }
    outcome
}

fn string_attr<'a>(row: &'a RawUsageRow, name: &str) -> Option<&'a str> {
    row.attrs.get(name).and_then(Attr::as_s)
}

/// Shape of `<account>#<dimension>#<timestamp>[#<suffix>]` without the attributes:
/// a non-empty account before the first `#`, then some later `#`-separated part
/// (the timestamp) that is non-empty, with a non-empty dimension before it and either
/// nothing or a non-empty suffix after it.
fn sort_key_well_formed(sort_key: &str) -> bool {
    let Some((account, rest)) = sort_key.split_once('#') else {
        return false;
    };
    if account.is_empty() {
        return false;
    }
    // Try every `#` in `rest` as the dimension/timestamp boundary.
    rest.match_indices('#').any(|(at, _)| {
        let dimension = &rest[..at];
        let after = &rest[at + 1..];
        let (timestamp, suffix) = match after.split_once('#') {
            Some((timestamp, suffix)) => (timestamp, Some(suffix)),
            None => (after, None),
        };
        !dimension.is_empty() && !timestamp.is_empty() && suffix.is_none_or(|s| !s.is_empty())
    })
}

/// Whether the sort key is `<account>#<dimension>#<timestamp>[#<suffix>]` for these
/// attribute values. Splitting on `#` would misread a dimension that contains `#`, so
/// the key is matched against the attributes instead. The key's timestamp may be
/// written with or without the trailing `Z` independently of the attribute.
fn sort_key_matches(
    sort_key: &str,
    account: &str,
    dimension: &str,
    timestamp_text: &str,
    timestamp: Instant,
) -> bool {
    let Some(rest) = sort_key
        .strip_prefix(account)
        .and_then(|r| r.strip_prefix('#'))
        .and_then(|r| r.strip_prefix(dimension))
        .and_then(|r| r.strip_prefix('#'))
    else {
        return false;
    };
    let (key_timestamp, suffix) = match rest.split_once('#') {
        Some((t, suffix)) => (t, Some(suffix)),
        None => (rest, None),
    };
    if suffix.is_some_and(str::is_empty) {
        return false;
    }
    key_timestamp == timestamp_text
        || parse_usage_timestamp(key_timestamp).is_ok_and(|t| t == timestamp)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::fixtures::*;
    use super::*;

    fn map(fields: &[(&str, Attr)]) -> Attr {
        Attr::M(
            fields
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
        )
    }

    fn tag_attr(key: &str, value: &str) -> Attr {
        map(&[("key", s(key)), ("value", s(value))])
    }

    fn alloc_attr(quantity: &str, tags: Vec<Attr>) -> Attr {
        map(&[
            ("allocatedUsageQuantity", n(quantity)),
            ("tags", Attr::L(tags)),
        ])
    }

    fn good() -> RawUsageRow {
        row_at("requests", TS, "10")
    }

    fn with(mut row: RawUsageRow, name: &str, value: Option<Attr>) -> RawUsageRow {
        match value {
            Some(v) => row.attrs.insert(name.to_string(), v),
            None => row.attrs.remove(name),
        };
        row
    }

    fn with_allocs(row: RawUsageRow, allocations: Vec<Attr>) -> RawUsageRow {
        with(row, attr::USAGE_ALLOCATIONS, Some(Attr::L(allocations)))
    }

    fn with_key(mut row: RawUsageRow, sort_key: &str) -> RawUsageRow {
        row.sort_key = sort_key.to_string();
        row
    }

    fn with_license(mut row: RawUsageRow, license: &str) -> RawUsageRow {
        row.license_arn = license.to_string();
        row
    }

    /// Six tags `k0..k5`.
    fn six_tags() -> Vec<Attr> {
        (0..6).map(|i| tag_attr(&format!("k{i}"), "v")).collect()
    }

    #[test]
    fn license_arn_pattern_compiles() {
        assert!(Regex::new(LICENSE_ARN_PATTERN).is_ok());
        assert!(LICENSE_ARN.is_match(LICENSE));
    }

    #[test]
    fn good_row_is_typed_exactly() {
        let row = with_allocs(
            good(),
            vec![
                alloc_attr("7", vec![tag_attr("team", "a"), tag_attr("env", "prod")]),
                alloc_attr("3", vec![]),
            ],
        );
        let row = with(row, attr::PRODUCT_CODE, Some(s(PRODUCT)));
        let valid = validate_row(&row, &ctx()).unwrap();
        assert_eq!(valid.license_arn, LICENSE);
        assert_eq!(valid.sort_key, format!("{ACCOUNT}#requests#{TS}"));
        assert_eq!(valid.customer_aws_account_id, ACCOUNT);
        assert_eq!(valid.dimension, "requests");
        assert_eq!(valid.timestamp, instant(TS));
        assert_eq!(valid.quantity, 10);
        assert_eq!(valid.product_code.as_deref(), Some(PRODUCT));
        let allocations = valid.allocations.unwrap();
        assert_eq!(allocations[0].quantity, 7);
        assert_eq!(
            allocations[0].tags[0].key, "team",
            "tags keep the seller's order"
        );
        assert_eq!(allocations[1].tags, vec![]);
    }

    /// Every reason code: at least one failing input, and a passing neighbour that
    /// differs only in the checked field. Each check's cases vary one input of
    /// [`good`], so they are listed as that input and built by one function.
    #[test]
    fn every_reason_code_passes_and_fails() {
        use ReasonCode as R;
        type Want = Result<(), ReasonCode>;
        let too_long_key = "k".repeat(MAX_TAG_KEY_LEN + 1);
        let too_long_value = "v".repeat(MAX_TAG_VALUE_LEN + 1);
        let longest_key = "k".repeat(MAX_TAG_KEY_LEN);
        let longest_value = "v".repeat(MAX_TAG_VALUE_LEN);
        let mut cases: Vec<(&str, RawUsageRow, Want)> = Vec::new();
        fn vary<'a>(
            cases: &mut Vec<(&'a str, RawUsageRow, Want)>,
            built: impl Fn(&str) -> RawUsageRow,
            varied: &[(&'a str, &str, Want)],
        ) {
            for (name, input, want) in varied {
                cases.push((name, built(input), *want));
            }
        }
        // 1 InvalidLicenseArn
        vary(
            &mut cases,
            |arn| with_license(good(), arn),
            &[
                ("license arn ok", LICENSE, Ok(())),
                (
                    "license arn in another partition",
                    "arn:aws-us-gov:license-manager:us-gov-west-1:123456789012:license:l-1",
                    Ok(()),
                ),
                (
                    "license arn not license manager",
                    "arn:aws:s3:::123456789012:license:l-1",
                    Err(R::InvalidLicenseArn),
                ),
                (
                    "license arn without arn: prefix",
                    "aws:license-manager:us-east-1:123456789012:l-e52c",
                    Err(R::InvalidLicenseArn),
                ),
                (
                    "license arn short account",
                    "arn:aws:license-manager::12345678901:license:l-1",
                    Err(R::InvalidLicenseArn),
                ),
                (
                    "license arn empty id",
                    "arn:aws:license-manager::123456789012:license:",
                    Err(R::InvalidLicenseArn),
                ),
                ("license arn empty", "", Err(R::InvalidLicenseArn)),
            ],
        );
        // 2 MalformedSortKey; 6 SortKeyMismatch
        let key_with_suffix = format!("{ACCOUNT}#requests#{TS}#evt-1");
        let two_parts = format!("{ACCOUNT}#{TS}");
        let empty_account = format!("#requests#{TS}");
        let empty_suffix = format!("{ACCOUNT}#requests#{TS}#");
        let other_account = format!("999988887777#requests#{TS}");
        let other_dimension = format!("{ACCOUNT}#storage#{TS}");
        let other_second = format!("{ACCOUNT}#requests#2026-11-30T09:15:43Z");
        let garbage_timestamp = format!("{ACCOUNT}#requests#later");
        vary(
            &mut cases,
            |key| with_key(good(), key),
            &[
                ("sort key with event id suffix", &key_with_suffix, Ok(())),
                (
                    "sort key no separators",
                    "111122223333",
                    Err(R::MalformedSortKey),
                ),
                ("sort key two parts", &two_parts, Err(R::MalformedSortKey)),
                (
                    "sort key empty account",
                    &empty_account,
                    Err(R::MalformedSortKey),
                ),
                (
                    "sort key empty suffix",
                    &empty_suffix,
                    Err(R::MalformedSortKey),
                ),
                ("sort key empty", "", Err(R::MalformedSortKey)),
                (
                    "key of another account",
                    &other_account,
                    Err(R::SortKeyMismatch),
                ),
                (
                    "key of another dimension",
                    &other_dimension,
                    Err(R::SortKeyMismatch),
                ),
                (
                    "key of another second",
                    &other_second,
                    Err(R::SortKeyMismatch),
                ),
                (
                    "key with garbage timestamp",
                    &garbage_timestamp,
                    Err(R::SortKeyMismatch),
                ),
            ],
        );
        // 3 MissingCustomerAWSAccountId: an account the key agrees with
        vary(
            &mut cases,
            |account| {
                with_key(
                    with(good(), attr::CUSTOMER_ACCOUNT, Some(s(account))),
                    &format!("{account}#requests#{TS}"),
                )
            },
            &[
                (
                    "account 11 digits",
                    "11112222333",
                    Err(R::MissingCustomerAWSAccountId),
                ),
                (
                    "account with letters",
                    "11112222333a",
                    Err(R::MissingCustomerAWSAccountId),
                ),
            ],
        );
        // 4 MissingDimension, 5 MalformedTimestamp, 6 SortKeyMismatch: a row's own
        // dimension and timestamp
        vary(
            &mut cases,
            |dimension| row_at(dimension, TS, "1"),
            &[("dimension containing #", "tier#gold", Ok(()))],
        );
        vary(
            &mut cases,
            |timestamp| row_at("requests", timestamp, "1"),
            &[
                ("timestamp without Z", "2026-11-30T09:15:42", Ok(())),
                (
                    "timestamp with fraction",
                    "2026-11-30T09:15:42.5Z",
                    Err(R::MalformedTimestamp),
                ),
                (
                    "timestamp with offset",
                    "2026-11-30T09:15:42+00:00",
                    Err(R::MalformedTimestamp),
                ),
                (
                    "timestamp not a date",
                    "2026-02-30T09:15:42Z",
                    Err(R::MalformedTimestamp),
                ),
                // 11 TimestampInFuture
                ("timestamp exactly now", NOW, Ok(())),
                (
                    "timestamp a second ahead",
                    "2026-11-30T10:30:01Z",
                    Err(R::TimestampInFuture),
                ),
                // 12 TimestampOutOfWindow
                ("timestamp 24h minus 1s ago", "2026-11-29T10:30:01Z", Ok(())),
                (
                    "timestamp exactly 24h ago",
                    "2026-11-29T10:30:00Z",
                    Err(R::TimestampOutOfWindow),
                ),
                (
                    "timestamp 30h ago",
                    "2026-11-29T04:30:00Z",
                    Err(R::TimestampOutOfWindow),
                ),
            ],
        );
        // 7 NonNumericQuantity .. 10 QuantityTooLarge: the quantity's number text
        vary(
            &mut cases,
            |quantity| row_at("requests", TS, quantity),
            &[
                ("quantity zero", "0", Ok(())),
                (
                    "quantity text not a number",
                    "ten",
                    Err(R::NonNumericQuantity),
                ),
                ("quantity with spaces", " 10", Err(R::NonNumericQuantity)),
                ("quantity NaN", "NaN", Err(R::NonNumericQuantity)),
                ("quantity lone dot", ".", Err(R::NonNumericQuantity)),
                ("quantity bad exponent", "1e", Err(R::NonNumericQuantity)),
                // 8 NonIntegerQuantity
                ("quantity 2.0 is an integer", "2.0", Ok(())),
                ("quantity 1.5e1 is an integer", "1.5e1", Ok(())),
                ("quantity 1.5", "1.5", Err(R::NonIntegerQuantity)),
                (
                    "quantity 2147483647.5 (float would round)",
                    "2147483647.5",
                    Err(R::NonIntegerQuantity),
                ),
                ("quantity 15e-1", "15e-1", Err(R::NonIntegerQuantity)),
                (
                    "quantity -0.5 (fraction checked first)",
                    "-0.5",
                    Err(R::NonIntegerQuantity),
                ),
                // 9 NegativeQuantity
                ("quantity -0", "-0", Ok(())),
                ("quantity -1", "-1", Err(R::NegativeQuantity)),
                ("quantity -1e20", "-1e20", Err(R::NegativeQuantity)),
                // 10 QuantityTooLarge
                ("quantity at the cap", "2147483647", Ok(())),
                (
                    "quantity over the cap",
                    "2147483648",
                    Err(R::QuantityTooLarge),
                ),
                (
                    "quantity huge exponent",
                    "1e999999999999",
                    Err(R::QuantityTooLarge),
                ),
                (
                    "quantity 38 digits",
                    "12345678901234567890123456789012345678",
                    Err(R::QuantityTooLarge),
                ),
            ],
        );
        // Attributes of other types than the check reads, or none at all
        let attribute_cases: Vec<(&str, &str, Option<Attr>, Want)> = vec![
            // 3 MissingCustomerAWSAccountId
            (
                "account missing",
                attr::CUSTOMER_ACCOUNT,
                None,
                Err(R::MissingCustomerAWSAccountId),
            ),
            (
                "account as number",
                attr::CUSTOMER_ACCOUNT,
                Some(n(ACCOUNT)),
                Err(R::MissingCustomerAWSAccountId),
            ),
            // 4 MissingDimension
            (
                "dimension missing",
                attr::DIMENSION,
                None,
                Err(R::MissingDimension),
            ),
            (
                "dimension empty",
                attr::DIMENSION,
                Some(s("")),
                Err(R::MissingDimension),
            ),
            (
                "dimension as list",
                attr::DIMENSION,
                Some(Attr::L(vec![])),
                Err(R::MissingDimension),
            ),
            // 5 MalformedTimestamp
            (
                "timestamp missing",
                attr::TIMESTAMP,
                None,
                Err(R::MalformedTimestamp),
            ),
            (
                "timestamp as epoch number",
                attr::TIMESTAMP,
                Some(n("1764494142")),
                Err(R::MalformedTimestamp),
            ),
            // 7 NonNumericQuantity
            (
                "quantity missing",
                attr::QUANTITY,
                None,
                Err(R::NonNumericQuantity),
            ),
            (
                "quantity as string",
                attr::QUANTITY,
                Some(s("10")),
                Err(R::NonNumericQuantity),
            ),
            // 13 ProductCodeMismatch
            (
                "product code NULL",
                attr::PRODUCT_CODE,
                Some(Attr::Null),
                Ok(()),
            ),
            (
                "product code of another product",
                attr::PRODUCT_CODE,
                Some(s("prod-other")),
                Err(R::ProductCodeMismatch),
            ),
            (
                "product code empty",
                attr::PRODUCT_CODE,
                Some(s("")),
                Err(R::ProductCodeMismatch),
            ),
            (
                "product code as number",
                attr::PRODUCT_CODE,
                Some(n("1")),
                Err(R::ProductCodeMismatch),
            ),
            // 14 MalformedAllocations
            (
                "allocations NULL",
                attr::USAGE_ALLOCATIONS,
                Some(Attr::Null),
                Ok(()),
            ),
            (
                "allocations a map",
                attr::USAGE_ALLOCATIONS,
                Some(map(&[])),
                Err(R::MalformedAllocations),
            ),
            // 20 ReservedAttribute: whatever its type, the seller's TTL could delete it
            (
                "expiresAt set by the writer",
                attr::EXPIRES_AT,
                Some(Attr::N("1893456000".into())),
                Err(R::ReservedAttribute),
            ),
            (
                "expiresAt of another type",
                attr::EXPIRES_AT,
                Some(Attr::S("soon".into())),
                Err(R::ReservedAttribute),
            ),
        ];
        for (name, field, value, want) in attribute_cases {
            cases.push((name, with(good(), field, value), want));
        }
        // 6 SortKeyMismatch between a key and attributes that are each well formed
        cases.push((
            "key Z differs from attribute",
            with_key(
                row_at("requests", "2026-11-30T09:15:42", "1"),
                &format!("{ACCOUNT}#requests#{TS}"),
            ),
            Ok(()),
        ));
        cases.push((
            "dimension attribute a prefix of the key's",
            with(
                row_at("tier#gold", TS, "1"),
                attr::DIMENSION,
                Some(s("tier")),
            ),
            Err(R::SortKeyMismatch),
        ));
        // 14..19: the row's `usageAllocations` list
        let quantity = |q: &str| map(&[("allocatedUsageQuantity", n(q))]);
        let tags_field = |tags: Attr| map(&[("allocatedUsageQuantity", n("10")), ("tags", tags)]);
        let team = |value: &str| tag_attr("team", value);
        let allocation_cases: Vec<(&str, Vec<Attr>, Want)> = vec![
            // 14 MalformedAllocations
            (
                "allocation without tags field",
                vec![quantity("10")],
                Ok(()),
            ),
            (
                "allocations empty list",
                vec![],
                Err(R::MalformedAllocations),
            ),
            (
                "allocation not a map",
                vec![n("10")],
                Err(R::MalformedAllocations),
            ),
            (
                "allocation quantity missing",
                vec![map(&[("tags", Attr::L(vec![]))])],
                Err(R::MalformedAllocations),
            ),
            (
                "allocation quantity a string",
                vec![map(&[("allocatedUsageQuantity", s("10"))])],
                Err(R::MalformedAllocations),
            ),
            (
                "allocation quantity not numeric",
                vec![alloc_attr("x", vec![])],
                Err(R::MalformedAllocations),
            ),
            (
                "allocation with misspelt tags field",
                vec![map(&[
                    ("allocatedUsageQuantity", n("10")),
                    ("tag", Attr::L(vec![team("a")])),
                ])],
                Err(R::MalformedAllocations),
            ),
            (
                "tags a map",
                vec![tags_field(team("a"))],
                Err(R::MalformedAllocations),
            ),
            (
                "tag not a map",
                vec![alloc_attr("10", vec![s("team=a")])],
                Err(R::MalformedAllocations),
            ),
            (
                "tag value a number",
                vec![alloc_attr(
                    "10",
                    vec![map(&[("key", s("team")), ("value", n("1"))])],
                )],
                Err(R::MalformedAllocations),
            ),
            (
                "tag with extra field",
                vec![alloc_attr(
                    "10",
                    vec![map(&[
                        ("key", s("team")),
                        ("value", s("a")),
                        ("note", s("x")),
                    ])],
                )],
                Err(R::MalformedAllocations),
            ),
            // 15 NegativeOrNonIntegerAllocation
            (
                "allocation zero",
                vec![
                    alloc_attr("0", vec![tag_attr("t", "a")]),
                    alloc_attr("10", vec![]),
                ],
                Ok(()),
            ),
            (
                "allocation negative",
                vec![
                    alloc_attr("-1", vec![]),
                    alloc_attr("11", vec![tag_attr("t", "a")]),
                ],
                Err(R::NegativeOrNonIntegerAllocation),
            ),
            (
                "allocation fractional",
                vec![
                    alloc_attr("9.5", vec![]),
                    alloc_attr("0.5", vec![tag_attr("t", "a")]),
                ],
                Err(R::NegativeOrNonIntegerAllocation),
            ),
            (
                "allocation over the cap",
                vec![alloc_attr("2147483648", vec![])],
                Err(R::NegativeOrNonIntegerAllocation),
            ),
            // 16 MissingTagKeyOrValue
            ("tags empty list", vec![alloc_attr("10", vec![])], Ok(())),
            (
                "tag key missing",
                vec![alloc_attr("10", vec![map(&[("value", s("a"))])])],
                Err(R::MissingTagKeyOrValue),
            ),
            (
                "tag value NULL",
                vec![alloc_attr(
                    "10",
                    vec![map(&[("key", s("team")), ("value", Attr::Null)])],
                )],
                Err(R::MissingTagKeyOrValue),
            ),
            (
                "tag key empty",
                vec![alloc_attr("10", vec![tag_attr("", "a")])],
                Err(R::MissingTagKeyOrValue),
            ),
            (
                "tag value empty",
                vec![alloc_attr("10", vec![team("")])],
                Err(R::MissingTagKeyOrValue),
            ),
            // 17 InvalidTag
            (
                "tag of the widest allowed characters",
                vec![alloc_attr(
                    "10",
                    vec![tag_attr("a-Z 0+._:/@", "!\"#$%&'()*,;<=")],
                )],
                Ok(()),
            ),
            (
                "tag key of the longest length",
                vec![alloc_attr(
                    "10",
                    vec![tag_attr(&longest_key, &longest_value)],
                )],
                Ok(()),
            ),
            (
                "tag key too long",
                vec![alloc_attr("10", vec![tag_attr(&too_long_key, "a")])],
                Err(R::InvalidTag),
            ),
            (
                "tag value too long",
                vec![alloc_attr("10", vec![team(&too_long_value)])],
                Err(R::InvalidTag),
            ),
            (
                "tag key with >",
                vec![alloc_attr("10", vec![tag_attr("a>b", "a")])],
                Err(R::InvalidTag),
            ),
            (
                "tag value with non-ascii",
                vec![alloc_attr("10", vec![team("é")])],
                Err(R::InvalidTag),
            ),
            (
                "tag value with newline",
                vec![alloc_attr("10", vec![team("a\nb")])],
                Err(R::InvalidTag),
            ),
            (
                "tag key twice",
                vec![alloc_attr("10", vec![team("a"), team("b")])],
                Err(R::InvalidTag),
            ),
            // 18 TooManyTags
            (
                "five tags",
                vec![alloc_attr("10", six_tags()[..5].to_vec())],
                Ok(()),
            ),
            (
                "six tags",
                vec![alloc_attr("10", six_tags())],
                Err(R::TooManyTags),
            ),
            // 19 AllocationSumMismatch
            (
                "allocations sum to quantity",
                vec![
                    alloc_attr("4", vec![tag_attr("t", "a")]),
                    alloc_attr("6", vec![tag_attr("t", "b")]),
                ],
                Ok(()),
            ),
            (
                "allocations short",
                vec![alloc_attr("4", vec![tag_attr("t", "a")])],
                Err(R::AllocationSumMismatch),
            ),
            (
                "allocations over",
                vec![alloc_attr("4", vec![]), alloc_attr("7", vec![])],
                Err(R::AllocationSumMismatch),
            ),
        ];
        for (name, allocations, want) in allocation_cases {
            cases.push((name, with_allocs(good(), allocations), want));
        }
        let zero_row = |allocations| with_allocs(row_at("requests", TS, "0"), allocations);
        cases.push((
            "zero row with zero allocations",
            zero_row(vec![alloc_attr("0", vec![tag_attr("t", "a")])]),
            Ok(()),
        ));
        cases.push((
            "zero row with non-zero allocations",
            zero_row(vec![alloc_attr("1", vec![])]),
            Err(R::AllocationSumMismatch),
        ));
        let mut failing_codes = std::collections::BTreeSet::new();
        for (name, row, want) in cases {
            let got = validate_row(&row, &ctx()).map(|_| ());
            assert_eq!(got, want, "{name}");
            if let Err(code) = want {
                failing_codes.insert(code);
            }
        }
        // Every per-row code has a failing case above (the group codes and
        // HourAlreadySubmitted are tested with validate_group).
        let group_level = [
            ReasonCode::TooManyAllocations,
            ReasonCode::MixedAllocatedAndUnallocated,
            ReasonCode::HourAlreadySubmitted,
            ReasonCode::RecordTooLarge,
            // The discoverer's verdict on an index marker, not a row check.
            ReasonCode::MalformedMeteringPending,
        ];
        for code in ReasonCode::ALL.iter().filter(|c| !group_level.contains(c)) {
            assert!(failing_codes.contains(code), "no failing case for {code}");
        }
    }

    #[test]
    fn timestamp_out_of_window_at_the_month_boundary() {
        let last_hour = "2026-11-30T23:10:00Z";
        let in_grace = GuardrailContext::new(instant("2026-12-01T05:59:59Z"), PRODUCT);
        let after_grace = GuardrailContext::new(instant("2026-12-01T06:00:00Z"), PRODUCT);
        let row = row_at("requests", last_hour, "1");
        assert!(validate_row(&row, &in_grace).is_ok());
        assert_eq!(
            validate_row(&row, &after_grace),
            Err(ReasonCode::TimestampOutOfWindow)
        );
        // The new month's first hour still follows the 24 h rule at 06:00.
        let new_month = row_at("requests", "2026-12-01T00:10:00Z", "1");
        assert!(validate_row(&new_month, &after_grace).is_ok());
    }

    /// Rows that fail several checks report the first in table order.
    #[test]
    fn first_failing_check_wins() {
        let bad_arn = "arn:aws:s3:::bucket";
        let cases: Vec<(&str, RawUsageRow, ReasonCode)> = vec![
            (
                "license before sort key",
                with_key(with_license(good(), bad_arn), "nohash"),
                ReasonCode::InvalidLicenseArn,
            ),
            (
                "sort key before account",
                with_key(with(good(), attr::CUSTOMER_ACCOUNT, None), "nohash"),
                ReasonCode::MalformedSortKey,
            ),
            (
                "account before dimension",
                with(
                    with(good(), attr::CUSTOMER_ACCOUNT, None),
                    attr::DIMENSION,
                    None,
                ),
                ReasonCode::MissingCustomerAWSAccountId,
            ),
            (
                "dimension before timestamp",
                with(with(good(), attr::DIMENSION, None), attr::TIMESTAMP, None),
                ReasonCode::MissingDimension,
            ),
            (
                "timestamp before mismatch",
                with_key(
                    with(good(), attr::TIMESTAMP, Some(s("yesterday"))),
                    &format!("{ACCOUNT}#requests#{TS}"),
                ),
                ReasonCode::MalformedTimestamp,
            ),
            (
                "mismatch before quantity",
                with_key(
                    with(good(), attr::QUANTITY, None),
                    &format!("{ACCOUNT}#other#{TS}"),
                ),
                ReasonCode::SortKeyMismatch,
            ),
            (
                "non-numeric before window",
                with(
                    row_at("requests", "2026-11-28T00:00:00Z", "1"),
                    attr::QUANTITY,
                    Some(s("1")),
                ),
                ReasonCode::NonNumericQuantity,
            ),
            (
                "non-integer before negative",
                row_at("requests", TS, "-1.5"),
                ReasonCode::NonIntegerQuantity,
            ),
            (
                "negative before too large",
                row_at("requests", TS, "-99999999999"),
                ReasonCode::NegativeQuantity,
            ),
            (
                "too large before future",
                row_at("requests", "2026-12-25T00:00:00Z", "9999999999"),
                ReasonCode::QuantityTooLarge,
            ),
            (
                "future before product",
                with(
                    row_at("requests", "2026-12-25T00:00:00Z", "1"),
                    attr::PRODUCT_CODE,
                    Some(s("x")),
                ),
                ReasonCode::TimestampInFuture,
            ),
            (
                "window before product",
                with(
                    row_at("requests", "2026-11-28T00:00:00Z", "1"),
                    attr::PRODUCT_CODE,
                    Some(s("x")),
                ),
                ReasonCode::TimestampOutOfWindow,
            ),
            (
                "product before allocations",
                with(
                    with_allocs(good(), vec![]),
                    attr::PRODUCT_CODE,
                    Some(s("x")),
                ),
                ReasonCode::ProductCodeMismatch,
            ),
            // Across allocations: the earliest check in the table wins, even when a later
            // allocation fails it and an earlier one fails a later check.
            (
                "malformed anywhere before a negative quantity",
                with_allocs(good(), vec![alloc_attr("-1", vec![]), n("3")]),
                ReasonCode::MalformedAllocations,
            ),
            (
                "negative before missing tag",
                with_allocs(
                    good(),
                    vec![
                        alloc_attr("5", vec![tag_attr("", "a")]),
                        alloc_attr("-5", vec![]),
                    ],
                ),
                ReasonCode::NegativeOrNonIntegerAllocation,
            ),
            (
                "missing tag before invalid tag",
                with_allocs(
                    good(),
                    vec![
                        alloc_attr("5", vec![tag_attr("a>", "a")]),
                        alloc_attr("5", vec![tag_attr("b", "")]),
                    ],
                ),
                ReasonCode::MissingTagKeyOrValue,
            ),
            (
                "invalid tag before too many tags",
                with_allocs(
                    good(),
                    vec![
                        alloc_attr("5", six_tags()),
                        alloc_attr("5", vec![tag_attr("a>", "a")]),
                    ],
                ),
                ReasonCode::InvalidTag,
            ),
            (
                "too many tags before sum",
                with_allocs(good(), vec![alloc_attr("1", six_tags())]),
                ReasonCode::TooManyTags,
            ),
        ];
        for (name, row, want) in cases {
            assert_eq!(validate_row(&row, &ctx()), Err(want), "{name}");
        }
    }

    #[test]
    fn sort_key_shape_allows_hash_in_dimension_and_suffix() {
        for key in ["a#d#t", "a#d#t#s", "a#d#e#t", "a#d##t", "a#d#t#s#more"] {
            assert!(sort_key_well_formed(key), "{key}");
        }
        for key in ["", "a", "a#", "a#d", "#d#t", "a#d#t#", "a##", "a#d#"] {
            assert!(!sort_key_well_formed(key), "{key}");
        }
    }
}

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
//! Writers check one more thing at write time, which the aggregator cannot: that the
//! row's hour's record can still be sent before Marketplace's window for it closes
//! ([`sendable`]; check 12 judges the row's own instant, the record is sent stamped at
//! its hour's start).
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
pub mod sendable;
pub mod write;

use std::sync::LazyLock;

use regex::Regex;

use crate::model::{Attr, RawUsageRow, ReasonCode, ValidUsageRow, attr};
use crate::time::{Instant, accepted_by_api, parse_usage_timestamp};

pub use group::{
    AllocationMode, MAX_ALLOCATION_BYTES_PER_RECORD, ScreenedGroup, allocation_item_bytes,
    row_in_group, screen_group, validate_group,
};
pub use quantity::{quantity_from_text, quantity_of_json};

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

/// Whether `text` is a License Manager license ARN ([`LICENSE_ARN_PATTERN`]).
pub fn is_license_arn(text: &str) -> bool {
    LICENSE_ARN.is_match(text)
}

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
mod tests;

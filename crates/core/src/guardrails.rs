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

use std::collections::BTreeMap;
use std::sync::LazyLock;

use regex::Regex;

use crate::model::{
    AggregatedRecord, Allocation, Attr, GroupKey, RawUsageRow, ReasonCode, Tag, ValidUsageRow, attr,
};
use crate::time::{HourBucket, Instant, accepted_by_api, parse_usage_timestamp};
use crate::vmt::{AllocationMerge, TagSet};

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

/// Whether a row or record carries VMT allocations: the two modes a group may not mix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AllocationMode {
    /// The usage carries `usageAllocations`.
    Tagged,
    /// The usage carries none.
    Untagged,
}

impl AllocationMode {
    /// The mode of a row, or `None` for a zero-quantity row (which is ignored by the
    /// mixing rule and never contributes allocations).
    pub fn of_row(row: &ValidUsageRow) -> Option<AllocationMode> {
        Self::of(row.quantity, row.allocations.is_some())
    }

    /// The mode an existing record fixes for late rows, or `None` when its quantity is
    /// zero (a record of zero rows fixes nothing, just as zero rows do not).
    pub fn of_record(record: &AggregatedRecord) -> Option<AllocationMode> {
        Self::of(record.quantity, record.allocations.is_some())
    }

    fn of(quantity: i64, tagged: bool) -> Option<AllocationMode> {
        match (quantity, tagged) {
            (0, _) => None,
            (_, true) => Some(AllocationMode::Tagged),
            (_, false) => Some(AllocationMode::Untagged),
        }
    }
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

/// Group-level checks (G1..G3 in the module doc) over one group's per-row-valid rows
/// and its existing aggregated record, if any.
///
/// Accepted rows come back in `(timestamp, sort key)` order; rejected rows in the
/// order they were judged. The rows are assumed to belong to one group (see
/// [`screen_group`], which also sorts out rows of other groups).
pub fn validate_group(
    mut rows: Vec<ValidUsageRow>,
    existing: Option<&AggregatedRecord>,
) -> GuardrailOutcome {
    rows.sort_by(|a, b| (a.timestamp, &a.sort_key).cmp(&(b.timestamp, &b.sort_key)));
    let mut outcome = GuardrailOutcome::default();
    if let Some(record) = existing.filter(|r| !r.accepts_folds()) {
        tracing::debug!(group = %record.key, status = %record.status, rows = rows.len(),
            "late rows for an hour already submitted");
        outcome.rejected = rows
            .into_iter()
            .map(|row| RejectedRow {
                sort_key: row.sort_key,
                reason: ReasonCode::HourAlreadySubmitted,
            })
            .collect();
        return outcome;
    }

    let fixed_mode = existing.and_then(AllocationMode::of_record);
    let row_modes = |mode| rows.iter().any(|r| AllocationMode::of_row(r) == Some(mode));
    let mixed_without_record = fixed_mode.is_none()
        && row_modes(AllocationMode::Tagged)
        && row_modes(AllocationMode::Untagged);

    let mut merge = existing
        .and_then(|r| r.allocations.as_deref())
        .map_or_else(AllocationMerge::new, AllocationMerge::from_allocations);
    let mut bytes: usize =
        existing
            .and_then(|r| r.allocations.as_deref())
            .map_or(0, |allocations| {
                allocations
                    .iter()
                    .map(|a| allocation_item_bytes(&a.tags))
                    .sum()
            });
    for row in rows {
        let reason = match (AllocationMode::of_row(&row), fixed_mode) {
            (Some(_), None) if mixed_without_record => {
                Some(ReasonCode::MixedAllocatedAndUnallocated)
            }
            (Some(mode), Some(fixed)) if mode != fixed => {
                Some(ReasonCode::MixedAllocatedAndUnallocated)
            }
            (Some(AllocationMode::Tagged), _) => admit_tag_sets(
                &mut merge,
                &mut bytes,
                row.allocations.as_deref().unwrap_or_default(),
            ),
            _ => None,
        };
        match reason {
            Some(reason) => outcome.rejected.push(RejectedRow {
                sort_key: row.sort_key,
                reason,
            }),
            None => outcome.accepted.push(row),
        }
    }
    outcome
}

/// Adds a tagged row's allocations to the merge unless its new tag sets would take the
/// record past [`MAX_ALLOCATIONS_PER_RECORD`] (then the row is `TooManyAllocations`) or
/// its allocations past [`MAX_ALLOCATION_BYTES_PER_RECORD`] (then `RecordTooLarge`);
/// `bytes` is the running size of the merged allocations.
fn admit_tag_sets(
    merge: &mut AllocationMerge,
    bytes: &mut usize,
    allocations: &[Allocation],
) -> Option<ReasonCode> {
    // Each allocation's identity is computed once, for the count and for the merge.
    let sets: Vec<(TagSet, i64, usize)> = allocations
        .iter()
        .map(|a| {
            (
                TagSet::of(&a.tags),
                a.quantity,
                allocation_item_bytes(&a.tags),
            )
        })
        .collect();
    let mut new_sets: Vec<(&TagSet, usize)> = sets
        .iter()
        .map(|(set, _, size)| (set, *size))
        .filter(|(set, _)| !merge.contains(set))
        .collect();
    new_sets.sort_unstable();
    new_sets.dedup();
    if merge.tag_set_count() + new_sets.len() > MAX_ALLOCATIONS_PER_RECORD {
        return Some(ReasonCode::TooManyAllocations);
    }
    let added: usize = new_sets.iter().map(|(_, size)| size).sum();
    if *bytes + added > MAX_ALLOCATION_BYTES_PER_RECORD {
        return Some(ReasonCode::RecordTooLarge);
    }
    *bytes += added;
    for (set, quantity, _) in sets {
        merge.add_to(set, quantity);
    }
    None
}

/// Most bytes the merged `usageAllocations` of one aggregated record may take: a
/// DynamoDB item holds 400 KB (names and values, UTF-8), and the record's other
/// attributes and the index copy need well under the 100 KB left.
pub const MAX_ALLOCATION_BYTES_PER_RECORD: usize = 300 * 1024;

/// The bytes one allocation with `tags` takes in the stored record, as DynamoDB counts
/// item size (attribute name and value lengths, plus per-element overhead; numbers at
/// their 21-byte maximum), rounded up.
pub fn allocation_item_bytes(tags: &[crate::model::Tag]) -> usize {
    const ELEMENT_OVERHEAD: usize = 3;
    const NUMBER_MAX: usize = 21;
    let tag_bytes: usize = tags
        .iter()
        .map(|t| {
            crate::model::attr::TAG_KEY.len()
                + t.key.len()
                + crate::model::attr::TAG_VALUE.len()
                + t.value.len()
                + 3 * ELEMENT_OVERHEAD
        })
        .sum();
    crate::model::attr::ALLOCATED_USAGE_QUANTITY.len()
        + NUMBER_MAX
        + crate::model::attr::TAGS.len()
        + tag_bytes
        + 3 * ELEMENT_OVERHEAD
}

/// Every guardrail for one group: per-row checks, then group checks.
///
/// Rows that pass the per-row checks but belong to another group (a different license,
/// account, dimension or hour than `key`: possible when a dimension contains `#` and
/// a sort-key prefix query matches a neighbour's rows) are neither counted nor rejected
/// here; their sort keys are returned in `other_group` for that group to handle.
/// Rejected rows are sorted by sort key.
pub fn screen_group(
    key: &GroupKey,
    rows: &[RawUsageRow],
    existing: Option<&AggregatedRecord>,
    ctx: &GuardrailContext,
) -> ScreenedGroup {
    let per_row = validate_rows(rows, ctx);
    let (mine, theirs): (Vec<_>, Vec<_>) = per_row
        .accepted
        .into_iter()
        .partition(|row| row_in_group(row, key));
    let mut outcome = validate_group(mine, existing);
    outcome.rejected.extend(per_row.rejected);
    outcome.rejected.sort_by(|a, b| a.sort_key.cmp(&b.sort_key));
    ScreenedGroup {
        outcome,
        other_group: theirs.into_iter().map(|row| row.sort_key).collect(),
    }
}

/// The result of [`screen_group`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ScreenedGroup {
    /// Rows of this group: accepted (in `(timestamp, sort key)` order) or rejected.
    pub outcome: GuardrailOutcome,
    /// Sort keys of valid rows that belong to another group; leave them pending.
    pub other_group: Vec<String>,
}

/// Whether a valid row belongs to `key`'s group.
pub fn row_in_group(row: &ValidUsageRow, key: &GroupKey) -> bool {
    row.license_arn == key.license_arn
        && row.customer_aws_account_id == key.customer_aws_account_id
        && row.dimension == key.dimension
        && HourBucket::containing(row.timestamp) == key.hour
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
enum QuantityProblem {
    NotANumber,
    Fractional,
    Negative,
    TooLarge,
}

fn quantity_value(text: &str) -> Result<i64, QuantityProblem> {
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

/// One allocation after the shape check (checks 14..19 run in passes over these, so
/// the first failing check across all allocations wins, not the first allocation).
struct RawAllocation<'a> {
    quantity_text: &'a str,
    tags: Vec<(Option<&'a str>, Option<&'a str>)>,
}

fn allocations_from_attr(value: &Attr, quantity: i64) -> Result<Vec<Allocation>, ReasonCode> {
    let shaped = allocation_shapes(value).ok_or(ReasonCode::MalformedAllocations)?;

    let quantities = shaped
        .iter()
        .map(|a| match quantity_value(a.quantity_text) {
            Ok(q) => Ok(q),
            Err(QuantityProblem::NotANumber) => Err(ReasonCode::MalformedAllocations),
            Err(_) => Err(ReasonCode::NegativeOrNonIntegerAllocation),
        })
        .collect::<Result<Vec<i64>, ReasonCode>>()?;

    let present = |part: Option<&str>| part.is_some_and(|s| !s.is_empty());
    if shaped
        .iter()
        .flat_map(|a| &a.tags)
        .any(|(key, value)| !present(*key) || !present(*value))
    {
        return Err(ReasonCode::MissingTagKeyOrValue);
    }

    let mut allocations = Vec::with_capacity(shaped.len());
    for (shape, quantity) in shaped.iter().zip(quantities) {
        let tags: Vec<Tag> = shape
            .tags
            .iter()
            .map(|(key, value)| Tag {
                key: key.unwrap_or_default().to_string(),
                value: value.unwrap_or_default().to_string(),
            })
            .collect();
        allocations.push(Allocation { quantity, tags });
    }
    if allocations.iter().any(|a| !tags_valid(&a.tags)) {
        return Err(ReasonCode::InvalidTag);
    }
    if allocations
        .iter()
        .any(|a| a.tags.len() > MAX_TAGS_PER_ALLOCATION)
    {
        return Err(ReasonCode::TooManyTags);
    }
    if allocations.iter().map(|a| a.quantity).sum::<i64>() != quantity {
        return Err(ReasonCode::AllocationSumMismatch);
    }
    Ok(allocations)
}

/// The structural check (14): `None` when the value is not a non-empty list of
/// `{allocatedUsageQuantity: N, tags?: [{key: S, value: S}]}` maps.
fn allocation_shapes(value: &Attr) -> Option<Vec<RawAllocation<'_>>> {
    let Attr::L(items) = value else {
        return None;
    };
    if items.is_empty() {
        return None;
    }
    items
        .iter()
        .map(|item| {
            let Attr::M(fields) = item else {
                return None;
            };
            if !only_fields(fields, &[attr::ALLOCATED_USAGE_QUANTITY, attr::TAGS]) {
                return None;
            }
            let Some(Attr::N(quantity_text)) = fields.get(attr::ALLOCATED_USAGE_QUANTITY) else {
                return None;
            };
            let tags = match fields.get(attr::TAGS) {
                None | Some(Attr::Null) => Vec::new(),
                Some(Attr::L(tags)) => tags.iter().map(tag_shape).collect::<Option<Vec<_>>>()?,
                Some(_) => return None,
            };
            Some(RawAllocation {
                quantity_text,
                tags,
            })
        })
        .collect()
}

/// A tag map's key and value: `Some(None)` inside for a missing or `NULL` part (check
/// 16 reports it), `None` when the tag is not a map of strings.
fn tag_shape(tag: &Attr) -> Option<(Option<&str>, Option<&str>)> {
    let Attr::M(fields) = tag else {
        return None;
    };
    if !only_fields(fields, &[attr::TAG_KEY, attr::TAG_VALUE]) {
        return None;
    }
    let part = |name: &str| match fields.get(name) {
        None | Some(Attr::Null) => Some(None),
        Some(Attr::S(s)) => Some(Some(s.as_str())),
        Some(_) => None,
    };
    Some((part(attr::TAG_KEY)?, part(attr::TAG_VALUE)?))
}

fn only_fields(fields: &BTreeMap<String, Attr>, allowed: &[&str]) -> bool {
    fields.keys().all(|k| allowed.contains(&k.as_str()))
}

/// Check 17 on one allocation's (present, non-empty) tags.
fn tags_valid(tags: &[Tag]) -> bool {
    let each_valid = tags.iter().all(|t| {
        tag_text_valid(&t.key, MAX_TAG_KEY_LEN) && tag_text_valid(&t.value, MAX_TAG_VALUE_LEN)
    });
    let unique_keys = tags
        .iter()
        .enumerate()
        .all(|(i, t)| tags[..i].iter().all(|earlier| earlier.key != t.key));
    each_valid && unique_keys
}

/// The API's `^[a-zA-Z0-9+ -=._:\/@]+$` plus a length limit. Every allowed character is
/// ASCII, so once the characters pass, bytes and characters count the same.
fn tag_text_valid(text: &str, max_len: usize) -> bool {
    !text.is_empty() && text.bytes().all(tag_byte_allowed) && text.len() <= max_len
}

/// One byte of the tag pattern's class `[a-zA-Z0-9+ -=._:\/@]`. Its `+`, `.`, `:` and
/// `/` all fall inside the range space..=`=` (0x20..=0x3D), so the class reduces to
/// letters, digits, that range, `_` and `@`.
fn tag_byte_allowed(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b' '..=b'=' | b'_' | b'@')
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::model::AggregatedStatus;
    use crate::time::HourBucket;
    use proptest::prelude::*;

    const LICENSE: &str = "arn:aws:license-manager::123456789012:license:l-0123456789abcdef";
    const ACCOUNT: &str = "111122223333";
    const PRODUCT: &str = "prod-abc123";
    const NOW: &str = "2026-11-30T10:30:00Z";
    const TS: &str = "2026-11-30T09:15:42Z";

    fn instant(s: &str) -> Instant {
        parse_usage_timestamp(s).unwrap()
    }

    fn ctx() -> GuardrailContext {
        GuardrailContext::new(instant(NOW), PRODUCT)
    }

    fn n(text: &str) -> Attr {
        Attr::N(text.to_string())
    }

    fn s(text: &str) -> Attr {
        Attr::S(text.to_string())
    }

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

    /// A valid row for `dimension` at `timestamp` with `quantity`.
    fn row_at(dimension: &str, timestamp: &str, quantity: &str) -> RawUsageRow {
        let mut attrs = BTreeMap::new();
        attrs.insert(attr::CUSTOMER_ACCOUNT.to_string(), s(ACCOUNT));
        attrs.insert(attr::DIMENSION.to_string(), s(dimension));
        attrs.insert(attr::TIMESTAMP.to_string(), s(timestamp));
        attrs.insert(attr::QUANTITY.to_string(), n(quantity));
        RawUsageRow {
            license_arn: LICENSE.to_string(),
            sort_key: format!("{ACCOUNT}#{dimension}#{timestamp}"),
            attrs,
        }
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
    /// differs only in the checked field.
    #[test]
    fn every_reason_code_passes_and_fails() {
        let too_long_key = "k".repeat(MAX_TAG_KEY_LEN + 1);
        let too_long_value = "v".repeat(MAX_TAG_VALUE_LEN + 1);
        let longest_key = "k".repeat(MAX_TAG_KEY_LEN);
        let longest_value = "v".repeat(MAX_TAG_VALUE_LEN);
        let cases: Vec<(&str, RawUsageRow, Result<(), ReasonCode>)> = vec![
            // 1 InvalidLicenseArn
            ("license arn ok", good(), Ok(())),
            (
                "license arn in another partition",
                with_license(
                    good(),
                    "arn:aws-us-gov:license-manager:us-gov-west-1:123456789012:license:l-1",
                ),
                Ok(()),
            ),
            (
                "license arn not license manager",
                with_license(good(), "arn:aws:s3:::123456789012:license:l-1"),
                Err(ReasonCode::InvalidLicenseArn),
            ),
            (
                "license arn without arn: prefix",
                with_license(good(), "aws:license-manager:us-east-1:123456789012:l-e52c"),
                Err(ReasonCode::InvalidLicenseArn),
            ),
            (
                "license arn short account",
                with_license(good(), "arn:aws:license-manager::12345678901:license:l-1"),
                Err(ReasonCode::InvalidLicenseArn),
            ),
            (
                "license arn empty id",
                with_license(good(), "arn:aws:license-manager::123456789012:license:"),
                Err(ReasonCode::InvalidLicenseArn),
            ),
            (
                "license arn empty",
                with_license(good(), ""),
                Err(ReasonCode::InvalidLicenseArn),
            ),
            // 2 MalformedSortKey
            (
                "sort key with event id suffix",
                with_key(good(), &format!("{ACCOUNT}#requests#{TS}#evt-1")),
                Ok(()),
            ),
            (
                "sort key no separators",
                with_key(good(), "111122223333"),
                Err(ReasonCode::MalformedSortKey),
            ),
            (
                "sort key two parts",
                with_key(good(), &format!("{ACCOUNT}#{TS}")),
                Err(ReasonCode::MalformedSortKey),
            ),
            (
                "sort key empty account",
                with_key(good(), &format!("#requests#{TS}")),
                Err(ReasonCode::MalformedSortKey),
            ),
            (
                "sort key empty suffix",
                with_key(good(), &format!("{ACCOUNT}#requests#{TS}#")),
                Err(ReasonCode::MalformedSortKey),
            ),
            (
                "sort key empty",
                with_key(good(), ""),
                Err(ReasonCode::MalformedSortKey),
            ),
            // 3 MissingCustomerAWSAccountId
            (
                "account missing",
                with(good(), attr::CUSTOMER_ACCOUNT, None),
                Err(ReasonCode::MissingCustomerAWSAccountId),
            ),
            (
                "account as number",
                with(good(), attr::CUSTOMER_ACCOUNT, Some(n(ACCOUNT))),
                Err(ReasonCode::MissingCustomerAWSAccountId),
            ),
            (
                "account 11 digits",
                with_key(
                    with(good(), attr::CUSTOMER_ACCOUNT, Some(s("11112222333"))),
                    &format!("11112222333#requests#{TS}"),
                ),
                Err(ReasonCode::MissingCustomerAWSAccountId),
            ),
            (
                "account with letters",
                with_key(
                    with(good(), attr::CUSTOMER_ACCOUNT, Some(s("11112222333a"))),
                    &format!("11112222333a#requests#{TS}"),
                ),
                Err(ReasonCode::MissingCustomerAWSAccountId),
            ),
            // 4 MissingDimension
            (
                "dimension containing #",
                row_at("tier#gold", TS, "1"),
                Ok(()),
            ),
            (
                "dimension missing",
                with(good(), attr::DIMENSION, None),
                Err(ReasonCode::MissingDimension),
            ),
            (
                "dimension empty",
                with(good(), attr::DIMENSION, Some(s(""))),
                Err(ReasonCode::MissingDimension),
            ),
            (
                "dimension as list",
                with(good(), attr::DIMENSION, Some(Attr::L(vec![]))),
                Err(ReasonCode::MissingDimension),
            ),
            // 5 MalformedTimestamp
            (
                "timestamp without Z",
                row_at("requests", "2026-11-30T09:15:42", "1"),
                Ok(()),
            ),
            (
                "timestamp missing",
                with(good(), attr::TIMESTAMP, None),
                Err(ReasonCode::MalformedTimestamp),
            ),
            (
                "timestamp as epoch number",
                with(good(), attr::TIMESTAMP, Some(n("1764494142"))),
                Err(ReasonCode::MalformedTimestamp),
            ),
            (
                "timestamp with fraction",
                row_at("requests", "2026-11-30T09:15:42.5Z", "1"),
                Err(ReasonCode::MalformedTimestamp),
            ),
            (
                "timestamp with offset",
                row_at("requests", "2026-11-30T09:15:42+00:00", "1"),
                Err(ReasonCode::MalformedTimestamp),
            ),
            (
                "timestamp not a date",
                row_at("requests", "2026-02-30T09:15:42Z", "1"),
                Err(ReasonCode::MalformedTimestamp),
            ),
            // 6 SortKeyMismatch
            (
                "key Z differs from attribute",
                with_key(
                    row_at("requests", "2026-11-30T09:15:42", "1"),
                    &format!("{ACCOUNT}#requests#{TS}"),
                ),
                Ok(()),
            ),
            (
                "key of another account",
                with_key(good(), &format!("999988887777#requests#{TS}")),
                Err(ReasonCode::SortKeyMismatch),
            ),
            (
                "key of another dimension",
                with_key(good(), &format!("{ACCOUNT}#storage#{TS}")),
                Err(ReasonCode::SortKeyMismatch),
            ),
            (
                "key of another second",
                with_key(good(), &format!("{ACCOUNT}#requests#2026-11-30T09:15:43Z")),
                Err(ReasonCode::SortKeyMismatch),
            ),
            (
                "key with garbage timestamp",
                with_key(good(), &format!("{ACCOUNT}#requests#later")),
                Err(ReasonCode::SortKeyMismatch),
            ),
            (
                "dimension attribute a prefix of the key's",
                with(
                    row_at("tier#gold", TS, "1"),
                    attr::DIMENSION,
                    Some(s("tier")),
                ),
                Err(ReasonCode::SortKeyMismatch),
            ),
            // 7 NonNumericQuantity
            ("quantity zero", row_at("requests", TS, "0"), Ok(())),
            (
                "quantity missing",
                with(good(), attr::QUANTITY, None),
                Err(ReasonCode::NonNumericQuantity),
            ),
            (
                "quantity as string",
                with(good(), attr::QUANTITY, Some(s("10"))),
                Err(ReasonCode::NonNumericQuantity),
            ),
            (
                "quantity text not a number",
                row_at("requests", TS, "ten"),
                Err(ReasonCode::NonNumericQuantity),
            ),
            (
                "quantity with spaces",
                row_at("requests", TS, " 10"),
                Err(ReasonCode::NonNumericQuantity),
            ),
            (
                "quantity NaN",
                row_at("requests", TS, "NaN"),
                Err(ReasonCode::NonNumericQuantity),
            ),
            (
                "quantity lone dot",
                row_at("requests", TS, "."),
                Err(ReasonCode::NonNumericQuantity),
            ),
            (
                "quantity bad exponent",
                row_at("requests", TS, "1e"),
                Err(ReasonCode::NonNumericQuantity),
            ),
            // 8 NonIntegerQuantity
            (
                "quantity 2.0 is an integer",
                row_at("requests", TS, "2.0"),
                Ok(()),
            ),
            (
                "quantity 1.5e1 is an integer",
                row_at("requests", TS, "1.5e1"),
                Ok(()),
            ),
            (
                "quantity 1.5",
                row_at("requests", TS, "1.5"),
                Err(ReasonCode::NonIntegerQuantity),
            ),
            (
                "quantity 2147483647.5 (float would round)",
                row_at("requests", TS, "2147483647.5"),
                Err(ReasonCode::NonIntegerQuantity),
            ),
            (
                "quantity 15e-1",
                row_at("requests", TS, "15e-1"),
                Err(ReasonCode::NonIntegerQuantity),
            ),
            (
                "quantity -0.5 (fraction checked first)",
                row_at("requests", TS, "-0.5"),
                Err(ReasonCode::NonIntegerQuantity),
            ),
            // 9 NegativeQuantity
            ("quantity -0", row_at("requests", TS, "-0"), Ok(())),
            (
                "quantity -1",
                row_at("requests", TS, "-1"),
                Err(ReasonCode::NegativeQuantity),
            ),
            (
                "quantity -1e20",
                row_at("requests", TS, "-1e20"),
                Err(ReasonCode::NegativeQuantity),
            ),
            // 10 QuantityTooLarge
            (
                "quantity at the cap",
                row_at("requests", TS, "2147483647"),
                Ok(()),
            ),
            (
                "quantity over the cap",
                row_at("requests", TS, "2147483648"),
                Err(ReasonCode::QuantityTooLarge),
            ),
            (
                "quantity huge exponent",
                row_at("requests", TS, "1e999999999999"),
                Err(ReasonCode::QuantityTooLarge),
            ),
            (
                "quantity 38 digits",
                row_at("requests", TS, "12345678901234567890123456789012345678"),
                Err(ReasonCode::QuantityTooLarge),
            ),
            // 11 TimestampInFuture
            (
                "timestamp exactly now",
                row_at("requests", NOW, "1"),
                Ok(()),
            ),
            (
                "timestamp a second ahead",
                row_at("requests", "2026-11-30T10:30:01Z", "1"),
                Err(ReasonCode::TimestampInFuture),
            ),
            // 12 TimestampOutOfWindow
            (
                "timestamp 24h minus 1s ago",
                row_at("requests", "2026-11-29T10:30:01Z", "1"),
                Ok(()),
            ),
            (
                "timestamp exactly 24h ago",
                row_at("requests", "2026-11-29T10:30:00Z", "1"),
                Err(ReasonCode::TimestampOutOfWindow),
            ),
            (
                "timestamp 30h ago",
                row_at("requests", "2026-11-29T04:30:00Z", "1"),
                Err(ReasonCode::TimestampOutOfWindow),
            ),
            // 13 ProductCodeMismatch
            (
                "product code NULL",
                with(good(), attr::PRODUCT_CODE, Some(Attr::Null)),
                Ok(()),
            ),
            (
                "product code of another product",
                with(good(), attr::PRODUCT_CODE, Some(s("prod-other"))),
                Err(ReasonCode::ProductCodeMismatch),
            ),
            (
                "product code empty",
                with(good(), attr::PRODUCT_CODE, Some(s(""))),
                Err(ReasonCode::ProductCodeMismatch),
            ),
            (
                "product code as number",
                with(good(), attr::PRODUCT_CODE, Some(n("1"))),
                Err(ReasonCode::ProductCodeMismatch),
            ),
            // 14 MalformedAllocations
            (
                "allocations NULL",
                with(good(), attr::USAGE_ALLOCATIONS, Some(Attr::Null)),
                Ok(()),
            ),
            (
                "allocation without tags field",
                with_allocs(good(), vec![map(&[("allocatedUsageQuantity", n("10"))])]),
                Ok(()),
            ),
            (
                "allocations a map",
                with(good(), attr::USAGE_ALLOCATIONS, Some(map(&[]))),
                Err(ReasonCode::MalformedAllocations),
            ),
            (
                "allocations empty list",
                with_allocs(good(), vec![]),
                Err(ReasonCode::MalformedAllocations),
            ),
            (
                "allocation not a map",
                with_allocs(good(), vec![n("10")]),
                Err(ReasonCode::MalformedAllocations),
            ),
            (
                "allocation quantity missing",
                with_allocs(good(), vec![map(&[("tags", Attr::L(vec![]))])]),
                Err(ReasonCode::MalformedAllocations),
            ),
            (
                "allocation quantity a string",
                with_allocs(good(), vec![map(&[("allocatedUsageQuantity", s("10"))])]),
                Err(ReasonCode::MalformedAllocations),
            ),
            (
                "allocation quantity not numeric",
                with_allocs(good(), vec![alloc_attr("x", vec![])]),
                Err(ReasonCode::MalformedAllocations),
            ),
            (
                "allocation with misspelt tags field",
                with_allocs(
                    good(),
                    vec![map(&[
                        ("allocatedUsageQuantity", n("10")),
                        ("tag", Attr::L(vec![tag_attr("team", "a")])),
                    ])],
                ),
                Err(ReasonCode::MalformedAllocations),
            ),
            (
                "tags a map",
                with_allocs(
                    good(),
                    vec![map(&[
                        ("allocatedUsageQuantity", n("10")),
                        ("tags", tag_attr("team", "a")),
                    ])],
                ),
                Err(ReasonCode::MalformedAllocations),
            ),
            (
                "tag not a map",
                with_allocs(good(), vec![alloc_attr("10", vec![s("team=a")])]),
                Err(ReasonCode::MalformedAllocations),
            ),
            (
                "tag value a number",
                with_allocs(
                    good(),
                    vec![alloc_attr(
                        "10",
                        vec![map(&[("key", s("team")), ("value", n("1"))])],
                    )],
                ),
                Err(ReasonCode::MalformedAllocations),
            ),
            (
                "tag with extra field",
                with_allocs(
                    good(),
                    vec![alloc_attr(
                        "10",
                        vec![map(&[
                            ("key", s("team")),
                            ("value", s("a")),
                            ("note", s("x")),
                        ])],
                    )],
                ),
                Err(ReasonCode::MalformedAllocations),
            ),
            // 15 NegativeOrNonIntegerAllocation
            (
                "allocation zero",
                with_allocs(
                    good(),
                    vec![
                        alloc_attr("0", vec![tag_attr("t", "a")]),
                        alloc_attr("10", vec![]),
                    ],
                ),
                Ok(()),
            ),
            (
                "allocation negative",
                with_allocs(
                    good(),
                    vec![
                        alloc_attr("-1", vec![]),
                        alloc_attr("11", vec![tag_attr("t", "a")]),
                    ],
                ),
                Err(ReasonCode::NegativeOrNonIntegerAllocation),
            ),
            (
                "allocation fractional",
                with_allocs(
                    good(),
                    vec![
                        alloc_attr("9.5", vec![]),
                        alloc_attr("0.5", vec![tag_attr("t", "a")]),
                    ],
                ),
                Err(ReasonCode::NegativeOrNonIntegerAllocation),
            ),
            (
                "allocation over the cap",
                with_allocs(good(), vec![alloc_attr("2147483648", vec![])]),
                Err(ReasonCode::NegativeOrNonIntegerAllocation),
            ),
            // 16 MissingTagKeyOrValue
            (
                "tags empty list",
                with_allocs(good(), vec![alloc_attr("10", vec![])]),
                Ok(()),
            ),
            (
                "tag key missing",
                with_allocs(
                    good(),
                    vec![alloc_attr("10", vec![map(&[("value", s("a"))])])],
                ),
                Err(ReasonCode::MissingTagKeyOrValue),
            ),
            (
                "tag value NULL",
                with_allocs(
                    good(),
                    vec![alloc_attr(
                        "10",
                        vec![map(&[("key", s("team")), ("value", Attr::Null)])],
                    )],
                ),
                Err(ReasonCode::MissingTagKeyOrValue),
            ),
            (
                "tag key empty",
                with_allocs(good(), vec![alloc_attr("10", vec![tag_attr("", "a")])]),
                Err(ReasonCode::MissingTagKeyOrValue),
            ),
            (
                "tag value empty",
                with_allocs(good(), vec![alloc_attr("10", vec![tag_attr("team", "")])]),
                Err(ReasonCode::MissingTagKeyOrValue),
            ),
            // 17 InvalidTag
            (
                "tag of the widest allowed characters",
                with_allocs(
                    good(),
                    vec![alloc_attr(
                        "10",
                        vec![tag_attr("a-Z 0+._:/@", "!\"#$%&'()*,;<=")],
                    )],
                ),
                Ok(()),
            ),
            (
                "tag key of the longest length",
                with_allocs(
                    good(),
                    vec![alloc_attr(
                        "10",
                        vec![tag_attr(&longest_key, &longest_value)],
                    )],
                ),
                Ok(()),
            ),
            (
                "tag key too long",
                with_allocs(
                    good(),
                    vec![alloc_attr("10", vec![tag_attr(&too_long_key, "a")])],
                ),
                Err(ReasonCode::InvalidTag),
            ),
            (
                "tag value too long",
                with_allocs(
                    good(),
                    vec![alloc_attr("10", vec![tag_attr("team", &too_long_value)])],
                ),
                Err(ReasonCode::InvalidTag),
            ),
            (
                "tag key with >",
                with_allocs(good(), vec![alloc_attr("10", vec![tag_attr("a>b", "a")])]),
                Err(ReasonCode::InvalidTag),
            ),
            (
                "tag value with non-ascii",
                with_allocs(good(), vec![alloc_attr("10", vec![tag_attr("team", "é")])]),
                Err(ReasonCode::InvalidTag),
            ),
            (
                "tag value with newline",
                with_allocs(
                    good(),
                    vec![alloc_attr("10", vec![tag_attr("team", "a\nb")])],
                ),
                Err(ReasonCode::InvalidTag),
            ),
            (
                "tag key twice",
                with_allocs(
                    good(),
                    vec![alloc_attr(
                        "10",
                        vec![tag_attr("team", "a"), tag_attr("team", "b")],
                    )],
                ),
                Err(ReasonCode::InvalidTag),
            ),
            // 18 TooManyTags
            (
                "five tags",
                with_allocs(good(), vec![alloc_attr("10", six_tags()[..5].to_vec())]),
                Ok(()),
            ),
            (
                "six tags",
                with_allocs(good(), vec![alloc_attr("10", six_tags())]),
                Err(ReasonCode::TooManyTags),
            ),
            // 19 AllocationSumMismatch
            (
                "allocations sum to quantity",
                with_allocs(
                    good(),
                    vec![
                        alloc_attr("4", vec![tag_attr("t", "a")]),
                        alloc_attr("6", vec![tag_attr("t", "b")]),
                    ],
                ),
                Ok(()),
            ),
            (
                "allocations short",
                with_allocs(good(), vec![alloc_attr("4", vec![tag_attr("t", "a")])]),
                Err(ReasonCode::AllocationSumMismatch),
            ),
            (
                "allocations over",
                with_allocs(
                    good(),
                    vec![alloc_attr("4", vec![]), alloc_attr("7", vec![])],
                ),
                Err(ReasonCode::AllocationSumMismatch),
            ),
            (
                "zero row with zero allocations",
                with_allocs(
                    row_at("requests", TS, "0"),
                    vec![alloc_attr("0", vec![tag_attr("t", "a")])],
                ),
                Ok(()),
            ),
            (
                "zero row with non-zero allocations",
                with_allocs(row_at("requests", TS, "0"), vec![alloc_attr("1", vec![])]),
                Err(ReasonCode::AllocationSumMismatch),
            ),
            // 20 ReservedAttribute: whatever its type, the seller's TTL could delete it
            (
                "expiresAt set by the writer",
                with(good(), attr::EXPIRES_AT, Some(Attr::N("1893456000".into()))),
                Err(ReasonCode::ReservedAttribute),
            ),
            (
                "expiresAt of another type",
                with(good(), attr::EXPIRES_AT, Some(Attr::S("soon".into()))),
                Err(ReasonCode::ReservedAttribute),
            ),
        ];
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

    #[test]
    fn tag_bytes_match_the_api_pattern() {
        let pattern = Regex::new(r"^[a-zA-Z0-9+ -=._:\/@]+$").unwrap();
        for b in 0u8..=127 {
            let text = (b as char).to_string();
            assert_eq!(tag_byte_allowed(b), pattern.is_match(&text), "byte {b:#x}");
        }
        for b in 128u8..=255 {
            assert!(!tag_byte_allowed(b));
        }
    }

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

    fn valid(
        dimension: &str,
        timestamp: &str,
        quantity: i64,
        allocations: Option<Vec<Allocation>>,
    ) -> ValidUsageRow {
        ValidUsageRow {
            license_arn: LICENSE.to_string(),
            sort_key: format!("{ACCOUNT}#{dimension}#{timestamp}"),
            customer_aws_account_id: ACCOUNT.to_string(),
            dimension: dimension.to_string(),
            timestamp: instant(timestamp),
            quantity,
            allocations,
            product_code: None,
        }
    }

    fn tagged(q: i64, team: &str) -> Option<Vec<Allocation>> {
        Some(vec![Allocation {
            quantity: q,
            tags: vec![Tag {
                key: "team".to_string(),
                value: team.to_string(),
            }],
        }])
    }

    fn group_key() -> GroupKey {
        GroupKey {
            license_arn: LICENSE.to_string(),
            customer_aws_account_id: ACCOUNT.to_string(),
            dimension: "requests".to_string(),
            hour: "2026-11-30T09".parse().unwrap(),
        }
    }

    fn record(
        quantity: i64,
        allocations: Option<Vec<Allocation>>,
        status: AggregatedStatus,
    ) -> AggregatedRecord {
        AggregatedRecord {
            allocations,
            status,
            ..crate::memory::fixtures::pending_record(group_key(), PRODUCT, quantity, 1)
        }
    }

    fn verdicts(outcome: &GuardrailOutcome) -> Vec<(String, Option<ReasonCode>)> {
        let mut all: Vec<(String, Option<ReasonCode>)> = outcome
            .accepted
            .iter()
            .map(|r| (r.sort_key.clone(), None))
            .chain(
                outcome
                    .rejected
                    .iter()
                    .map(|r| (r.sort_key.clone(), Some(r.reason))),
            )
            .collect();
        all.sort();
        all
    }

    fn key_at(second: u32) -> String {
        format!("{ACCOUNT}#requests#2026-11-30T09:00:{second:02}Z")
    }

    fn ts(second: u32) -> String {
        format!("2026-11-30T09:00:{second:02}Z")
    }

    #[test]
    fn group_mixing_rule() {
        use ReasonCode::MixedAllocatedAndUnallocated as Mixed;
        struct Case {
            name: &'static str,
            rows: Vec<ValidUsageRow>,
            existing: Option<AggregatedRecord>,
            rejected: Vec<u32>,
        }
        let cases = [
            Case {
                name: "all tagged",
                rows: vec![
                    valid("requests", &ts(1), 3, tagged(3, "a")),
                    valid("requests", &ts(2), 4, tagged(4, "b")),
                ],
                existing: None,
                rejected: vec![],
            },
            Case {
                name: "all untagged",
                rows: vec![
                    valid("requests", &ts(1), 3, None),
                    valid("requests", &ts(2), 4, None),
                ],
                existing: None,
                rejected: vec![],
            },
            Case {
                name: "zero rows are ignored either way",
                rows: vec![
                    valid("requests", &ts(1), 3, tagged(3, "a")),
                    valid("requests", &ts(2), 0, None),
                    valid("requests", &ts(3), 0, tagged(0, "z")),
                ],
                existing: None,
                rejected: vec![],
            },
            Case {
                name: "mixed without a record: every non-zero row, zero rows counted",
                rows: vec![
                    valid("requests", &ts(1), 3, tagged(3, "a")),
                    valid("requests", &ts(2), 4, None),
                    valid("requests", &ts(3), 0, None),
                ],
                existing: None,
                rejected: vec![1, 2],
            },
            Case {
                name: "tagged record: late untagged non-zero rows rejected",
                rows: vec![
                    valid("requests", &ts(1), 3, tagged(3, "a")),
                    valid("requests", &ts(2), 4, None),
                ],
                existing: Some(record(5, tagged(5, "a"), AggregatedStatus::Pending)),
                rejected: vec![2],
            },
            Case {
                name: "untagged record: late tagged non-zero rows rejected",
                rows: vec![
                    valid("requests", &ts(1), 3, tagged(3, "a")),
                    valid("requests", &ts(2), 4, None),
                ],
                existing: Some(record(5, None, AggregatedStatus::Pending)),
                rejected: vec![1],
            },
            Case {
                name: "zero record fixes no mode",
                rows: vec![valid("requests", &ts(1), 3, tagged(3, "a"))],
                existing: Some(record(0, None, AggregatedStatus::Pending)),
                rejected: vec![],
            },
            Case {
                name: "zero record, late rows mixing: all non-zero rejected",
                rows: vec![
                    valid("requests", &ts(1), 3, tagged(3, "a")),
                    valid("requests", &ts(2), 4, None),
                ],
                existing: Some(record(0, None, AggregatedStatus::Pending)),
                rejected: vec![1, 2],
            },
        ];
        for case in cases {
            let outcome = validate_group(case.rows.clone(), case.existing.as_ref());
            let want: Vec<(String, Option<ReasonCode>)> = {
                let mut all: Vec<_> = case
                    .rows
                    .iter()
                    .map(|r| {
                        let second = r.timestamp.format("%S").to_string().parse::<u32>().unwrap();
                        let reason = case.rejected.contains(&second).then_some(Mixed);
                        (r.sort_key.clone(), reason)
                    })
                    .collect();
                all.sort();
                all
            };
            assert_eq!(verdicts(&outcome), want, "{}", case.name);
        }
    }

    #[test]
    fn late_rows_for_a_submitted_hour_are_rejected() {
        let rows = vec![
            valid("requests", &ts(1), 3, None),
            valid("requests", &ts(2), 0, None),
        ];
        for status in AggregatedStatus::ALL.iter().filter(|s| s.is_terminal()) {
            let outcome = validate_group(rows.clone(), Some(&record(5, None, *status)));
            assert!(outcome.accepted.is_empty(), "{status}");
            assert!(
                outcome
                    .rejected
                    .iter()
                    .all(|r| r.reason == ReasonCode::HourAlreadySubmitted)
            );
            assert_eq!(outcome.rejected.len(), 2);
        }
        let pending = validate_group(rows, Some(&record(5, None, AggregatedStatus::Pending)));
        assert_eq!(pending.accepted.len(), 2);
    }

    /// Allocations over `teams` (one tag set each), `each` units apiece.
    fn many(teams: std::ops::Range<usize>, each: i64) -> Vec<Allocation> {
        teams
            .map(|i| Allocation {
                quantity: each,
                tags: vec![Tag {
                    key: "team".to_string(),
                    value: format!("t{i}"),
                }],
            })
            .collect()
    }

    /// `n` allocations of one unit, each with five maximal tags (key 100, value 256).
    fn heavy(range: std::ops::Range<usize>) -> Vec<Allocation> {
        range
            .map(|i| Allocation {
                quantity: 1,
                tags: (0..5)
                    .map(|k| Tag {
                        key: format!("{k}{}", "k".repeat(99)),
                        value: format!("{i:08}{}", "v".repeat(248)),
                    })
                    .collect(),
            })
            .collect()
    }

    #[test]
    fn a_record_never_outgrows_one_dynamodb_item() {
        // GIVEN tag sets of ~1.9 KB each: 2,500 of them would make a 4.7 MB item
        let per_set = allocation_item_bytes(&heavy(0..1)[0].tags);
        assert!(per_set > 1_800, "{per_set}");
        let fit = MAX_ALLOCATION_BYTES_PER_RECORD / per_set;
        // WHEN rows bring first what fits, then one more set, then known sets only
        let rows = vec![
            valid("requests", &ts(1), fit as i64, Some(heavy(0..fit))),
            valid("requests", &ts(2), 1, Some(heavy(fit..fit + 1))),
            valid("requests", &ts(3), 3, Some(heavy(0..3))),
        ];
        let outcome = validate_group(rows, None);
        // THEN only the row that would overflow the item is rejected, with its own code
        assert_eq!(
            verdicts(&outcome),
            vec![
                (key_at(1), None),
                (key_at(2), Some(ReasonCode::RecordTooLarge)),
                (key_at(3), None),
            ]
        );
        // AND the same holds for an existing record that is already near the limit
        let existing = record(fit as i64, Some(heavy(0..fit)), AggregatedStatus::Pending);
        let late = validate_group(
            vec![valid("requests", &ts(4), 1, Some(heavy(fit..fit + 1)))],
            Some(&existing),
        );
        assert_eq!(
            verdicts(&late),
            vec![(key_at(4), Some(ReasonCode::RecordTooLarge))]
        );
    }

    #[test]
    fn too_many_allocations_rejects_only_rows_that_do_not_fit() {
        // GIVEN an existing record with 2,000 tag sets
        let existing = record(2_000, Some(many(0..2_000, 1)), AggregatedStatus::Pending);
        // WHEN late rows bring 400 new sets, then 200 more (2,600 > 2,500), then
        // a row reusing known sets, then one whose 100 sets exactly reach the limit
        let rows = vec![
            valid("requests", &ts(1), 400, Some(many(2_000..2_400, 1))),
            valid("requests", &ts(2), 200, Some(many(2_400..2_600, 1))),
            valid("requests", &ts(3), 10, Some(many(0..10, 1))),
            valid("requests", &ts(4), 100, Some(many(2_400..2_500, 1))),
        ];
        let outcome = validate_group(rows, Some(&existing));
        // THEN only the row that would overflow the count is rejected
        assert_eq!(
            verdicts(&outcome),
            vec![
                (key_at(1), None),
                (key_at(2), Some(ReasonCode::TooManyAllocations)),
                (key_at(3), None),
                (key_at(4), None),
            ]
        );
        // AND without the existing record every row fits
        let fresh = validate_group(
            vec![valid("requests", &ts(1), 2_500, Some(many(0..2_500, 1)))],
            None,
        );
        assert!(fresh.rejected.is_empty());
        let over = validate_group(
            vec![valid("requests", &ts(1), 2_501, Some(many(0..2_501, 1)))],
            None,
        );
        assert_eq!(over.rejected[0].reason, ReasonCode::TooManyAllocations);
    }

    #[test]
    fn a_row_repeating_a_tag_set_counts_it_once() {
        let mut allocations = many(0..2_500, 1);
        allocations.push(Allocation {
            quantity: 1,
            tags: vec![Tag {
                key: "team".to_string(),
                value: "t0".to_string(),
            }],
        });
        let outcome = validate_group(
            vec![valid("requests", &ts(1), 2_501, Some(allocations))],
            None,
        );
        assert!(outcome.rejected.is_empty());
    }

    #[test]
    fn screen_group_partitions_every_row() {
        let mut foreign = row_at("requests", "2026-11-30T09:59:59Z", "1");
        foreign.attrs.insert(
            attr::DIMENSION.to_string(),
            s("requests#2026-11-30T09:00:00Z#x"),
        );
        foreign
            .attrs
            .insert(attr::TIMESTAMP.to_string(), s("2026-11-30T10:00:00Z"));
        foreign.sort_key =
            format!("{ACCOUNT}#requests#2026-11-30T09:00:00Z#x#2026-11-30T10:00:00Z");
        let rows = vec![
            row_at("requests", &ts(5), "3"),
            row_at("requests", &ts(1), "-1"),
            row_at("requests", &ts(2), "4"),
            foreign.clone(),
        ];
        let screened = screen_group(&group_key(), &rows, None, &ctx());
        let accepted: Vec<&str> = screened
            .outcome
            .accepted
            .iter()
            .map(|r| r.sort_key.as_str())
            .collect();
        assert_eq!(accepted, vec![key_at(2).as_str(), key_at(5).as_str()]);
        assert_eq!(
            screened.outcome.rejected,
            vec![RejectedRow {
                sort_key: key_at(1),
                reason: ReasonCode::NegativeQuantity
            }]
        );
        assert_eq!(screened.other_group, vec![foreign.sort_key]);
        let pair: (String, ReasonCode) = screened.outcome.rejected[0].clone().into();
        assert_eq!(pair.1, ReasonCode::NegativeQuantity);
        assert!(row_in_group(&screened.outcome.accepted[0], &group_key()));
        assert_eq!(HourBucket::containing(instant(&ts(2))), group_key().hour);
    }

    fn arb_group_row() -> impl Strategy<Value = ValidUsageRow> {
        (0u32..60, 0i64..4, prop::option::of(0usize..3)).prop_map(|(second, quantity, team)| {
            let mut row = valid("requests", &ts(second), quantity, None);
            row.allocations = team.map(|t| many(t..t + 1, quantity));
            row
        })
    }

    proptest! {
        /// Every row gets exactly one verdict, whatever the order it was read in.
        #[test]
        fn group_verdict_is_a_partition_and_order_independent(
            mut rows in proptest::collection::vec(arb_group_row(), 0..20),
            record_mode in prop::option::of(prop::bool::ANY),
        ) {
            for (i, row) in rows.iter_mut().enumerate() {
                row.sort_key = format!("{}#{i}", row.sort_key);
            }
            let existing = record_mode.map(|tagged_record| {
                if tagged_record { record(5, tagged(5, "t0"), AggregatedStatus::Pending) }
                else { record(5, None, AggregatedStatus::Pending) }
            });
            let outcome = validate_group(rows.clone(), existing.as_ref());
            prop_assert_eq!(outcome.accepted.len() + outcome.rejected.len(), rows.len());
            let mut reversed = rows.clone();
            reversed.reverse();
            let again = validate_group(reversed, existing.as_ref());
            prop_assert_eq!(verdicts(&again), verdicts(&outcome));
            // What is accepted never mixes non-zero modes (the record's included).
            let modes: std::collections::HashSet<AllocationMode> = outcome.accepted.iter()
                .filter_map(AllocationMode::of_row)
                .chain(existing.iter().filter_map(AllocationMode::of_record))
                .collect();
            prop_assert!(modes.len() <= 1);
        }
    }
}

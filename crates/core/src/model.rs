//! The metering domain model: usage rows, group keys, aggregated records, statuses,
//! reason codes and subscriber records. Plain data; no I/O and no SDK types.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::time::{HourBucket, Instant, parse_instant};

/// A loosely typed attribute value as stored (the shape of a DynamoDB attribute,
/// without the SDK). Guardrails validate these into typed rows, so a seller's bad
/// write becomes a reason code instead of a crash.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum Attr {
    /// A string (`S`).
    S(String),
    /// A number, kept as its decimal text (`N`).
    N(String),
    /// A boolean (`BOOL`).
    Bool(bool),
    /// An explicit null (`NULL`).
    Null,
    /// A list (`L`).
    L(Vec<Attr>),
    /// A map (`M`).
    M(BTreeMap<String, Attr>),
    /// A string set (`SS`).
    Ss(Vec<String>),
    /// Any other type (binary, number set, ...); its type name, for error messages.
    Other(String),
}

impl Attr {
    /// The string inside an `S`, if this is one.
    pub fn as_s(&self) -> Option<&str> {
        match self {
            Attr::S(s) => Some(s),
            _ => None,
        }
    }
}

/// The fields of a stored map attribute (a correction, a rate card), read with errors
/// that name the attribute and the field.
#[derive(Debug, Clone, Copy)]
pub struct AttrMap<'a> {
    name: &'a str,
    map: &'a BTreeMap<String, Attr>,
}

impl<'a> AttrMap<'a> {
    /// `value` as the map attribute `name`.
    pub fn of(name: &'a str, value: &'a Attr) -> Result<Self, String> {
        match value {
            Attr::M(map) => Ok(AttrMap { name, map }),
            _ => Err(format!("{name} is not a map")),
        }
    }

    /// Its field names, in order.
    pub fn keys(&self) -> impl Iterator<Item = &'a str> {
        self.map.keys().map(String::as_str)
    }

    /// A field, whatever its type.
    pub fn get(&self, field: &str) -> Option<&'a Attr> {
        self.map.get(field)
    }

    /// A string field that must be there.
    pub fn text(&self, field: &str) -> Result<String, String> {
        self.optional(field)
            .ok_or_else(|| format!("{}.{field} is missing or not a string", self.name))
    }

    /// A string field that may be absent.
    pub fn optional(&self, field: &str) -> Option<String> {
        self.map.get(field).and_then(Attr::as_s).map(str::to_string)
    }

    /// A number field that must be there.
    pub fn number<T>(&self, field: &str) -> Result<T, String>
    where
        T: FromStr,
        T::Err: fmt::Display,
    {
        match self.map.get(field) {
            Some(Attr::N(v)) => v.parse().map_err(|e| format!("{}.{field}: {e}", self.name)),
            _ => Err(format!("{}.{field} is missing or not a number", self.name)),
        }
    }

    /// A string field holding a value of `T` (a decimal, a status).
    pub fn parsed<T>(&self, field: &str) -> Result<T, String>
    where
        T: FromStr,
        T::Err: fmt::Display,
    {
        let text = self.text(field)?;
        text.parse()
            .map_err(|e| format!("{}.{field} {text:?}: {e}", self.name))
    }

    /// An RFC 3339 instant (`...Z`) that must be there.
    pub fn instant(&self, field: &str) -> Result<Instant, String> {
        let text = self.text(field)?;
        parse_instant(&text)
            .ok_or_else(|| format!("{}.{field} {text:?} is not an instant", self.name))
    }

    /// An instant that may be absent (present but malformed is an error).
    pub fn optional_instant(&self, field: &str) -> Result<Option<Instant>, String> {
        match self.map.get(field) {
            None => Ok(None),
            Some(_) => self.instant(field).map(Some),
        }
    }
}

/// A raw usage row exactly as read from the usage table: its keys plus every
/// attribute, unvalidated. The seller writes these; the pipeline never trusts them.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RawUsageRow {
    /// Partition key `licenseArn`.
    pub license_arn: String,
    /// Sort key `customerAWSAccountId_dimension_timestamp`.
    pub sort_key: String,
    /// Every other attribute by name.
    pub attrs: BTreeMap<String, Attr>,
}

impl RawUsageRow {
    /// Whether the row still awaits the pipeline: it carries `meteringPending` (every
    /// final write removes it).
    pub fn is_pending(&self) -> bool {
        self.attrs.contains_key(attr::METERING_PENDING)
    }
}

/// Attribute names shared by the tables (the reference implementation's names).
pub mod attr {
    /// Partition key of usage, aggregated-usage, subscribers and customer-profile tables.
    pub const LICENSE_ARN: &str = "licenseArn";
    /// Sort key of the usage table.
    pub const USAGE_SORT_KEY: &str = "customerAWSAccountId_dimension_timestamp";
    /// Sort key of the aggregated-usage table.
    pub const AGGREGATED_SORT_KEY: &str = "account_dimension_hour";
    /// Buyer AWS account id.
    pub const CUSTOMER_ACCOUNT: &str = "customerAWSAccountId";
    /// Usage dimension.
    pub const DIMENSION: &str = "dimension";
    /// Usage timestamp (`YYYY-MM-DDTHH:MM:SS[Z]`).
    pub const TIMESTAMP: &str = "timestamp";
    /// Usage quantity.
    pub const QUANTITY: &str = "quantity";
    /// VMT allocations.
    pub const USAGE_ALLOCATIONS: &str = "usageAllocations";
    /// Allocation quantity inside an allocation map.
    pub const ALLOCATED_USAGE_QUANTITY: &str = "allocatedUsageQuantity";
    /// Allocation tags inside an allocation map.
    pub const TAGS: &str = "tags";
    /// Tag key inside a tag map.
    pub const TAG_KEY: &str = "key";
    /// Tag value inside a tag map.
    pub const TAG_VALUE: &str = "value";
    /// Product code (optional on usage rows).
    pub const PRODUCT_CODE: &str = "productCode";
    /// Sparse GSI hash key: the hour bucket while pending.
    pub const METERING_PENDING: &str = "meteringPending";
    /// Pipeline status.
    pub const METERING_STATUS: &str = "meteringStatus";
    /// Reason for the status.
    pub const METERING_STATUS_REASON: &str = "meteringStatusReason";
    /// Marketplace record id of a billed aggregated row.
    pub const METERING_RECORD_ID: &str = "meteringRecordId";
    /// Hour bucket of an aggregated row.
    pub const HOUR_BUCKET: &str = "hourBucket";
    /// Number of submission attempts of an aggregated row.
    pub const ATTEMPT_COUNT: &str = "attemptCount";
    /// Optimistic-concurrency version of an aggregated row.
    pub const VERSION: &str = "version";
    /// On a raw row: the aggregated row that counted it (set atomically with the count).
    pub const AGGREGATED_INTO: &str = "aggregatedInto";
    /// On an aggregated row: a submitter holds it in flight until this instant.
    pub const IN_FLIGHT_UNTIL: &str = "inFlightUntil";
    /// Aggregated: the id of the submitter claim that holds the record (outcomes are
    /// written only under it).
    pub const CLAIM_ID: &str = "claimId";
    /// Aggregated: the quantity a `BatchMeterUsage` call may already have billed (set
    /// by the claim, kept after an ambiguous outcome). While present the record takes
    /// no more folds and is only ever re-sent with exactly this quantity.
    pub const SENT_QUANTITY: &str = "sentQuantity";
    /// Aggregated (BOOL): whether a `BatchMeterUsage` call of ours may have billed the
    /// record (a send without a definite answer), written by every outcome under a claim
    /// and never cleared. Apart from `sentQuantity`, which also pins a quantity nothing
    /// billed (a replayed `Error`, a `CustomerNotSubscribed` kept pending). Absent on
    /// items written before it existed: there `sentQuantity` is read as it.
    pub const POSSIBLY_BILLED: &str = "possiblyBilled";
    /// Aggregated: present while a fold spanning several transactions is incomplete;
    /// the submitter never claims such a record.
    pub const AGGREGATION_IN_PROGRESS: &str = "aggregationInProgress";
    /// On an aggregated row: number of raw rows counted into it.
    pub const RAW_ROW_COUNT: &str = "rawRowCount";
    /// TTL attribute of the usage and aggregated-usage tables (epoch seconds, N): when
    /// DynamoDB may delete the item. Reserved to the pipeline: written only by the write
    /// that makes an item final (`DataRetentionDays` after it), removed by every write
    /// that leaves or puts an item pending, refused on a seller's row
    /// ([`ReasonCode::ReservedAttribute`](super::ReasonCode::ReservedAttribute)); see
    /// [`crate::retention`].
    pub const EXPIRES_AT: &str = "expiresAt";
    /// On a final raw row, and on a record the age-out finalized: the id of the write
    /// that made it final ([`FinalWriteId`](crate::ports::FinalWriteId)), so a retry of
    /// that write whose answer was lost knows the transition was its own (and counts
    /// its metric), and a racing writer knows it was not.
    pub const FINAL_WRITE_ID: &str = "finalWriteId";
    /// Audit: write-once creation instant.
    pub const CREATED_AT: &str = "createdAt";
    /// Audit: last write instant.
    pub const UPDATED_AT: &str = "updatedAt";
    /// Index name of the sparse pending GSI on the usage and aggregated tables.
    pub const METERING_PENDING_INDEX: &str = "metering_pending";
}

/// Subscribers-table attribute names beyond the shared ones in [`attr`].
pub mod subscriber_attr {
    /// Agreement id (HASH of the `agreement` index).
    pub const AGREEMENT_ID: &str = "agreementId";
    /// `active` | `inactive`.
    pub const AGREEMENT_STATUS: &str = "agreementStatus";
    /// `active` | `deprovisioning` | `inactive`.
    pub const SUBSCRIPTION_STATUS: &str = "subscriptionStatus";
    /// End of the final-usage window (RANGE of the `deprovisioning` index).
    pub const DEPROVISIONING_EXPIRY: &str = "deprovisioningExpiry";
    /// String Set of Regions the buyer registered in.
    pub const REGISTERED_REGIONS: &str = "registeredRegions";
    /// Successful registrations, every Region, repeats included (N).
    pub const REGISTRATION_COUNT: &str = "registrationCount";
    /// The Region of the latest registration.
    pub const LAST_REGISTERED_REGION: &str = "lastRegisteredRegion";
    /// String Set of the names (never the values) of the form fields registrations carried.
    pub const REGISTERED_FIELDS: &str = "registeredFields";
    /// Ordering guard of `agreementStatus`.
    pub const AGREEMENT_EVENT_AT: &str = "agreementEventAt";
    /// Ordering guard of `subscriptionStatus`.
    pub const SUBSCRIPTION_EVENT_AT: &str = "subscriptionEventAt";
    /// The license's rate card (a map: prices, currency, free trial; PII-free).
    pub const RATE_CARD: &str = crate::charges::RATE_CARD_ATTR;
    /// Sparse-index marker: `"deprovisioning"` only while deprovisioning.
    pub const DEPROVISIONING_INDEX: &str = "deprovisioningIndex";
    /// The marker's one value.
    pub const DEPROVISIONING_MARKER: &str = "deprovisioning";
    /// Index by agreement (KEYS_ONLY).
    pub const AGREEMENT_INDEX_NAME: &str = "agreement";
    /// Sparse index of rows in their final-usage window (ALL).
    pub const DEPROVISIONING_INDEX_NAME: &str = "deprovisioning";
}

/// The unit of metering: one `BatchMeterUsage` record per group.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct GroupKey {
    /// License the usage is attributed to.
    pub license_arn: String,
    /// Buyer AWS account.
    pub customer_aws_account_id: String,
    /// Pricing dimension (never validated client-side).
    pub dimension: String,
    /// UTC hour of the usage.
    pub hour: HourBucket,
}

impl GroupKey {
    /// The aggregated table's sort key `<account>#<dimension>#<hour>`.
    pub fn aggregated_sort_key(&self) -> String {
        format!(
            "{}#{}#{}",
            self.customer_aws_account_id, self.dimension, self.hour
        )
    }

    /// The usage-table sort-key prefix selecting exactly this group's rows.
    pub fn usage_sort_key_prefix(&self) -> String {
        format!(
            "{}#{}#{}",
            self.customer_aws_account_id,
            self.dimension,
            self.hour.key_prefix()
        )
    }
}

impl fmt::Display for GroupKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}|{}|{}|{}",
            self.license_arn, self.customer_aws_account_id, self.dimension, self.hour
        )
    }
}

/// A group written as [`GroupKey`]'s `Display` does (`license|account|dimension|hour`)
/// that cannot be read back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("group {text:?}: {problem} (write it as license|account|dimension|YYYY-MM-DDTHH)")]
pub struct MalformedGroupKey {
    /// The text given.
    pub text: String,
    /// What is wrong.
    pub problem: String,
}

impl FromStr for GroupKey {
    type Err = MalformedGroupKey;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = |problem: String| MalformedGroupKey {
            text: text.to_string(),
            problem,
        };
        let parts: Vec<&str> = text.split('|').collect();
        let [license, account, dimension, hour] = parts.as_slice() else {
            return Err(bad(format!("{} parts, expected 4", parts.len())));
        };
        Ok(GroupKey {
            license_arn: license.to_string(),
            customer_aws_account_id: account.to_string(),
            dimension: dimension.to_string(),
            hour: hour.parse().map_err(|e| bad(format!("{e}")))?,
        })
    }
}

/// One VMT tag.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Tag {
    /// Tag key.
    pub key: String,
    /// Tag value.
    pub value: String,
}

/// One VMT allocation: a quantity attributed to a tag set (possibly empty).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Allocation {
    /// Allocated quantity (0..=2147483647).
    pub quantity: i64,
    /// Tags, in the order given.
    pub tags: Vec<Tag>,
}

/// A raw row that passed every per-row guardrail.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ValidUsageRow {
    /// Partition key.
    pub license_arn: String,
    /// Sort key as stored.
    pub sort_key: String,
    /// Buyer account.
    pub customer_aws_account_id: String,
    /// Dimension.
    pub dimension: String,
    /// Usage instant.
    pub timestamp: Instant,
    /// Quantity (0..=2147483647).
    pub quantity: i64,
    /// VMT allocations, when the row carries them.
    pub allocations: Option<Vec<Allocation>>,
    /// Product code on the row, if any (else the stack's).
    pub product_code: Option<String>,
}

/// Defines a stored-string enum: the enum itself, `as_str` (the variant's name, as
/// stored and logged), `ALL` (declaration order), `Display` and `FromStr`, from one
/// list of variants.
macro_rules! string_enum {
    ($(#[$meta:meta])* pub enum $ty:ident { $($(#[$vmeta:meta])* $variant:ident),+ $(,)? }) => {
        $(#[$meta])*
        pub enum $ty { $($(#[$vmeta])* $variant),+ }
        impl $ty {
            /// The exact name stored in tables and printed in logs.
            pub fn as_str(&self) -> &'static str {
                match self { $(Self::$variant => stringify!($variant)),+ }
            }
            /// Every value, in declaration order.
            pub const ALL: &'static [$ty] = &[$(Self::$variant),+];
        }
        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result { f.write_str(self.as_str()) }
        }
        impl FromStr for $ty {
            type Err = UnknownValue;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $(stringify!($variant) => Ok(Self::$variant),)+
                    other => Err(UnknownValue { kind: stringify!($ty), value: other.to_string() }),
                }
            }
        }
    };
}

string_enum! {
    /// Status of a raw usage row.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
    #[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
    pub enum RawStatus {
        /// Counted into its group's aggregated record.
        Aggregated,
        /// Failed a client-side guardrail (see [`ReasonCode`]).
        RejectedClientSide,
        /// Never aggregated before its hour left the 24 h window.
        AggregationExpired,
    }
}

string_enum! {
    /// Status of an aggregated record.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
    #[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
    pub enum AggregatedStatus {
        /// Awaiting submission (not terminal; `meteringPending` present).
        Pending,
        /// Billed.
        Success,
        /// Marketplace already had a record for this group and hour (first write wins).
        DuplicateRecord,
        /// The license cannot be metered (final, see ARCHITECTURE.md: status transitions).
        CustomerNotSubscribed,
        /// A request-level exception isolated to this record; reason holds its name.
        Error,
        /// Never submitted before its hour left the 24 h window.
        SubmissionExpired,
        /// Dry-run mode: would have been submitted; never sent.
        DryRunSubmitted,
    }
}

/// A stored string that names no known value of an enum.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} value {value:?}")]
pub struct UnknownValue {
    /// The enum's name.
    pub kind: &'static str,
    /// The text found.
    pub value: String,
}

impl AggregatedStatus {
    /// Whether the status ends the record's life (removes `meteringPending`).
    pub fn is_terminal(&self) -> bool {
        !matches!(self, AggregatedStatus::Pending)
    }
}

string_enum! {
    /// Client-side rejection reason codes. The table of checks and their order is in
    /// [`crate::guardrails`].
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
    #[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
    pub enum ReasonCode {
        /// Sort key is not `<account>#<dimension>#<timestamp>[#<suffix>]`.
        MalformedSortKey,
        /// Sort key disagrees with the row's attributes.
        SortKeyMismatch,
        /// Timestamp is not whole-second UTC `YYYY-MM-DDTHH:MM:SS[Z]`.
        MalformedTimestamp,
        /// Quantity is missing or not a number.
        NonNumericQuantity,
        /// Quantity has a fractional part.
        NonIntegerQuantity,
        /// Quantity is below zero.
        NegativeQuantity,
        /// Quantity is above 2147483647.
        QuantityTooLarge,
        /// Dimension attribute missing or empty.
        MissingDimension,
        /// Timestamp is after "now".
        TimestampInFuture,
        /// Timestamp is outside the metering window (older than 24 h, or last month after the grace).
        TimestampOutOfWindow,
        /// License ARN does not match the License Manager ARN shape.
        InvalidLicenseArn,
        /// Buyer account id missing or not 12 digits.
        MissingCustomerAWSAccountId,
        /// `usageAllocations` is not a list of `{allocatedUsageQuantity, tags}` maps.
        MalformedAllocations,
        /// An allocation quantity is negative, fractional or out of range.
        NegativeOrNonIntegerAllocation,
        /// A tag has an empty or missing key or value.
        MissingTagKeyOrValue,
        /// A tag key or value violates the API pattern or length.
        InvalidTag,
        /// More than 5 tags on one allocation.
        TooManyTags,
        /// More than 2,500 merged tag sets in the group.
        TooManyAllocations,
        /// A row's allocations do not sum to its quantity.
        AllocationSumMismatch,
        /// A group mixes allocated and unallocated non-zero rows.
        MixedAllocatedAndUnallocated,
        /// The row's product code differs from the stack's and the stack meters one product.
        ProductCodeMismatch,
        /// The row arrived after its group's hour was already submitted to Marketplace
        /// (or sent with an outcome not yet known: that quantity is final).
        HourAlreadySubmitted,
        /// Counting the row would grow its aggregated record past what one DynamoDB item
        /// holds (400 KB; the record keeps headroom below it), through new VMT tag sets.
        RecordTooLarge,
        /// `meteringPending` is not an hour bucket (e.g. `"true"`, as other samples write)
        /// and the row's timestamp cannot place it in a live hour.
        MalformedMeteringPending,
        /// The row carries `expiresAt`, the tables' TTL attribute, which only the pipeline
        /// writes (on final items): DynamoDB could delete the row before it is counted.
        ReservedAttribute,
    }
}

/// The one aggregated record per group: what the submitter sends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct AggregatedRecord {
    /// The group.
    pub key: GroupKey,
    /// Product the license belongs to (batches never mix products).
    pub product_code: String,
    /// Total quantity (sum of the counted rows).
    pub quantity: i64,
    /// Merged VMT allocations (sum to `quantity`), when the group is tagged.
    pub allocations: Option<Vec<Allocation>>,
    /// Current status.
    pub status: AggregatedStatus,
    /// Reason for a non-success terminal status (exception name, etc.).
    pub status_reason: Option<String>,
    /// Marketplace's record id once billed.
    pub metering_record_id: Option<String>,
    /// Number of times it was sent.
    pub attempt_count: u32,
    /// Optimistic-concurrency version; bumped on every fold.
    pub version: u64,
    /// While a submitter holds it in flight: until when.
    pub in_flight_until: Option<Instant>,
    /// The id of the claim holding it (with `in_flight_until`).
    #[serde(default)]
    pub claim_id: Option<String>,
    /// The quantity a send may already have billed; once set, no more folds and every
    /// re-send carries exactly this quantity (docs/design.md: aggregation commit).
    #[serde(default)]
    pub sent_quantity: Option<i64>,
    /// `possiblyBilled` as stored: whether a call of ours may have billed the record
    /// (`None`: an item written before the attribute; see
    /// [`AggregatedRecord::may_have_been_billed`]).
    #[serde(default)]
    pub possibly_billed: Option<bool>,
    /// A fold of more than one transaction is under way (`aggregationInProgress`): the
    /// record is not submittable until the fold's last commit clears it.
    #[serde(default)]
    pub folding: bool,
    /// The unit price its usage was priced at when the discoverer sent the group
    /// (`unitPrice`; `None`: no rate card was kept for the buyer then).
    #[serde(default)]
    pub unit_price: Option<crate::charges::UnitPrice>,
}

impl AggregatedRecord {
    /// A new group's record: `Pending`, version 1, never claimed or sent, no
    /// allocations.
    pub fn pending(key: GroupKey, product_code: impl Into<String>, quantity: i64) -> Self {
        AggregatedRecord {
            key,
            product_code: product_code.into(),
            quantity,
            allocations: None,
            status: AggregatedStatus::Pending,
            status_reason: None,
            metering_record_id: None,
            attempt_count: 0,
            version: 1,
            in_flight_until: None,
            claim_id: None,
            sent_quantity: None,
            possibly_billed: None,
            folding: false,
            unit_price: None,
        }
    }

    /// Whether the record is still `Pending` (not yet final).
    pub fn is_pending(&self) -> bool {
        self.status == AggregatedStatus::Pending
    }

    /// Whether late rows may still be folded in: pending, never (possibly) sent, and not
    /// held or once held by a submitter claim.
    pub fn accepts_folds(&self) -> bool {
        self.is_pending() && self.sent_quantity.is_none() && self.in_flight_until.is_none()
    }

    /// What the quantity to send is worth at the unit price the record keeps (`None`:
    /// it keeps none; price it with the buyer's rate card instead).
    pub fn kept_estimate(&self) -> Option<crate::charges::Estimate> {
        self.unit_price
            .as_ref()
            .map(|price| price.estimate(self.quantity_to_send()))
    }

    /// The quantity to put on the wire: the one already (possibly) billed, if any.
    pub fn quantity_to_send(&self) -> i64 {
        self.sent_quantity.unwrap_or(self.quantity)
    }

    /// Whether an earlier call of ours may have billed the record, as read: a claim
    /// that was never released (`inFlightUntil`: its call may have gone out), or
    /// `possiblyBilled`; an item written before that attribute existed is read as
    /// before it, from `sentQuantity`. A `DuplicateRecord` for a record none of ours may
    /// have billed means something else billed the hour.
    pub fn may_have_been_billed(&self) -> bool {
        self.in_flight_until.is_some()
            || self.possibly_billed.unwrap_or(self.sent_quantity.is_some())
    }
}

/// Agreement lifecycle (`agreementStatus`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum AgreementStatus {
    /// License Updated seen.
    Active,
    /// Purchase Agreement Ended seen.
    Inactive,
}

/// Subscription lifecycle (`subscriptionStatus`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum SubscriptionStatus {
    /// License Updated seen.
    Active,
    /// License Deprovisioned seen; final-usage flush window open until the expiry.
    Deprovisioning,
    /// Flush window closed (deprovision-cleanup).
    Inactive,
}

impl AgreementStatus {
    /// Stored lowercase text.
    pub fn as_str(&self) -> &'static str {
        match self {
            AgreementStatus::Active => "active",
            AgreementStatus::Inactive => "inactive",
        }
    }
}

impl FromStr for AgreementStatus {
    type Err = UnknownValue;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "active" => Ok(Self::Active),
            "inactive" => Ok(Self::Inactive),
            other => Err(UnknownValue {
                kind: "AgreementStatus",
                value: other.to_string(),
            }),
        }
    }
}

impl SubscriptionStatus {
    /// Stored lowercase text.
    pub fn as_str(&self) -> &'static str {
        match self {
            SubscriptionStatus::Active => "active",
            SubscriptionStatus::Deprovisioning => "deprovisioning",
            SubscriptionStatus::Inactive => "inactive",
        }
    }
}

impl FromStr for SubscriptionStatus {
    type Err = UnknownValue;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "active" => Ok(Self::Active),
            "deprovisioning" => Ok(Self::Deprovisioning),
            "inactive" => Ok(Self::Inactive),
            other => Err(UnknownValue {
                kind: "SubscriptionStatus",
                value: other.to_string(),
            }),
        }
    }
}

/// One row of the PII-free subscribers table. Nothing else is ever stored there
/// (plus the audit stamps and the index markers the adapter derives from these fields).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Subscriber {
    /// Partition key.
    pub license_arn: String,
    /// Sort key.
    pub customer_aws_account_id: String,
    /// Product code (from License Updated or registration).
    pub product_code: Option<String>,
    /// Agreement id (from agreement and license events).
    pub agreement_id: Option<String>,
    /// Agreement lifecycle; absent until an agreement/license event sets it.
    pub agreement_status: Option<AgreementStatus>,
    /// Subscription lifecycle; absent until License Updated.
    pub subscription_status: Option<SubscriptionStatus>,
    /// End of the final-usage window while deprovisioning.
    pub deprovisioning_expiry: Option<Instant>,
    /// Regions the buyer registered in (String Set, reference only).
    pub registered_regions: Vec<String>,
    /// Time of the newest event applied to `agreement_status` (ordering guard).
    pub agreement_event_at: Option<Instant>,
    /// Time of the newest event applied to `subscription_status` (ordering guard).
    pub subscription_event_at: Option<Instant>,
    /// Optimistic-concurrency version; 0 for a row not yet stored.
    pub version: u64,
    /// The rate card last read for the row's agreement (`rateCard`), written apart
    /// from the lifecycle (never versioned); it may be of an earlier agreement: use
    /// [`Subscriber::current_rate_card`].
    #[serde(skip)]
    #[cfg_attr(feature = "schema", schemars(skip))]
    pub rate_card: Option<Box<crate::charges::StoredRateCard>>,
    /// What the registrations told the row (absent: none yet, or only a writer that
    /// predates them).
    #[serde(default, skip_serializing_if = "RegistrationFacts::is_none_told")]
    pub registrations: Box<RegistrationFacts>,
}

/// What the registrations told a subscribers row, PII-free: how many, the latest's
/// Region, and the names (never the values) of the form fields they carried.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RegistrationFacts {
    /// Successful registrations, every Region, repeats included (`registrationCount`).
    pub count: u64,
    /// The Region of the latest (`lastRegisteredRegion`).
    pub last_region: Option<String>,
    /// The form fields any registration carried, by name, sorted (`registeredFields`).
    pub fields: Vec<String>,
}

impl RegistrationFacts {
    /// Nothing told yet.
    pub fn is_empty(&self) -> bool {
        *self == RegistrationFacts::default()
    }

    /// [`RegistrationFacts::is_empty`] of a row's boxed facts (serde's test).
    #[allow(clippy::borrowed_box)]
    fn is_none_told(facts: &Box<RegistrationFacts>) -> bool {
        facts.is_empty()
    }
}

impl Subscriber {
    /// The stored rate card, if it is the row's current agreement's.
    pub fn current_rate_card(&self) -> Option<&crate::charges::RateCard> {
        self.rate_card
            .as_ref()
            .filter(|stored| {
                self.agreement_id.as_deref() == Some(stored.card.agreement_id.as_str())
            })
            .map(|stored| &stored.card)
    }

    /// An empty row for a license/account pair (not yet stored).
    pub fn new(license_arn: impl Into<String>, account: impl Into<String>) -> Self {
        Subscriber {
            license_arn: license_arn.into(),
            customer_aws_account_id: account.into(),
            product_code: None,
            agreement_id: None,
            agreement_status: None,
            subscription_status: None,
            deprovisioning_expiry: None,
            registered_regions: Vec::new(),
            agreement_event_at: None,
            subscription_event_at: None,
            version: 0,
            rate_card: None,
            registrations: Box::default(),
        }
    }
}

/// The attributes of a customer-profile row that are not the registration form's
/// fields: its keys, stamps and TTL. A form field can never take one of these names.
pub const PROFILE_FIXED_ATTRS: &[&str] = &[
    attr::LICENSE_ARN,
    attr::CUSTOMER_ACCOUNT,
    attr::PRODUCT_CODE,
    attr::CREATED_AT,
    attr::UPDATED_AT,
    attr::EXPIRES_AT,
];

/// The allowlisted registration fields of one buyer, stored in-Region only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CustomerProfile {
    /// Partition key.
    pub license_arn: String,
    /// Sort key.
    pub customer_aws_account_id: String,
    /// Product code from ResolveCustomer.
    pub product_code: String,
    /// Allowlisted form fields (possibly none).
    pub fields: BTreeMap<String, String>,
}

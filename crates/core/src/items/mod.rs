//! The stored shapes both usage/aggregated stores write (the DynamoDB adapters and the
//! in-memory fakes build their items here, so there is one definition), and the
//! invariants a write must keep, checked where the write is built.

pub mod ingestion;
pub mod size;
pub mod state;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Display;

use thiserror::Error;

use crate::charges::{UNIT_PRICE_ATTR, UnitPrice};
use crate::items::size::{MAX_ITEM_BYTES, MAX_TRANSACTION_BYTES, MAX_TRANSACTION_ITEMS};
use crate::model::{AggregatedRecord, Allocation, Attr, RawStatus, RawUsageRow, attr};
use crate::ports::{AggregationCommit, MAX_ROWS_PER_COMMIT, NewUsageRow, PortError};
use crate::stamp::AuditStamp;
use crate::time::{HourBucket, Instant, format_instant};

/// Why a write is refused before it reaches a table: it would break the key scheme,
/// or DynamoDB would refuse it (its item and transaction limits).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ItemError {
    /// An ingestion row without an event id (the id is what makes a retry a no-op).
    #[error("event id is empty")]
    EmptyEventId,
    /// A part of a sort key contains the separator, so the key would be ambiguous.
    #[error("{what} {value:?} contains '#', the sort-key separator")]
    Separator {
        /// Which part.
        what: &'static str,
        /// Its value.
        value: String,
    },
    /// A commit claiming more rows than one transaction holds.
    #[error("a commit claims at most {MAX_ROWS_PER_COMMIT} raw rows, got {0}")]
    TooManyRows(usize),
    /// A commit naming one raw row twice (DynamoDB refuses two actions on one item).
    #[error("a commit names the same raw row twice")]
    RepeatedRow,
    /// An item larger than DynamoDB's 400 KB item limit.
    #[error(
        "item {key} would be {bytes} bytes; DynamoDB items hold at most {MAX_ITEM_BYTES} bytes (400 KB)"
    )]
    ItemTooLarge {
        /// `<partition key>/<sort key>` of the item.
        key: String,
        /// Its size as DynamoDB counts it ([`crate::items::size`]).
        bytes: usize,
    },
    /// A transaction of more items than DynamoDB's 100.
    #[error(
        "a transaction of {0} items; DynamoDB transactions hold at most {MAX_TRANSACTION_ITEMS}"
    )]
    TooManyTransactionItems(usize),
    /// A transaction whose items add up to more than DynamoDB's 4 MB.
    #[error(
        "a transaction of {0} bytes; DynamoDB transactions hold at most {MAX_TRANSACTION_BYTES} bytes (4 MB)"
    )]
    TransactionTooLarge(usize),
    /// A key attribute longer than DynamoDB takes: it would refuse the whole request
    /// (a `ValidationException`), on every retry.
    #[error(
        "the {what} would be {bytes} bytes (UTF-8); DynamoDB takes at most {limit} bytes in it: {hint}"
    )]
    KeyTooLong {
        /// Which key, of which item.
        what: &'static str,
        /// Its length in UTF-8 bytes.
        bytes: usize,
        /// DynamoDB's limit for it ([`MAX_PARTITION_KEY_BYTES`] or [`MAX_SORT_KEY_BYTES`]).
        limit: usize,
        /// What makes it shorter.
        hint: &'static str,
    },
}

/// DynamoDB's limit on a partition key value, in UTF-8 bytes.
pub const MAX_PARTITION_KEY_BYTES: usize = 2048;
/// DynamoDB's limit on a sort key value, in UTF-8 bytes.
pub const MAX_SORT_KEY_BYTES: usize = 1024;

/// Refuses a key value DynamoDB would refuse: `bytes` of `value` over `limit`.
fn check_key(
    what: &'static str,
    value: &str,
    limit: usize,
    hint: &'static str,
) -> Result<(), ItemError> {
    if value.len() > limit {
        return Err(ItemError::KeyTooLong {
            what,
            bytes: value.len(),
            limit,
            hint,
        });
    }
    Ok(())
}

impl ItemError {
    /// The refusal as the port reports it: [`PortError::Failed`] (retrying cannot help).
    pub fn port_error(self, operation: &'static str) -> PortError {
        PortError::Failed {
            operation,
            message: self.to_string(),
        }
    }
}

/// Refuses an item of `bytes` over [`MAX_ITEM_BYTES`], naming it by `key`.
pub fn check_item(key: impl Display, bytes: usize) -> Result<(), ItemError> {
    if bytes > MAX_ITEM_BYTES {
        return Err(ItemError::ItemTooLarge {
            key: key.to_string(),
            bytes,
        });
    }
    Ok(())
}

/// Refuses a transaction whose items (their sizes as written) are more than
/// [`MAX_TRANSACTION_ITEMS`] or add up to more than [`MAX_TRANSACTION_BYTES`].
pub fn check_transaction(sizes: &[usize]) -> Result<(), ItemError> {
    if sizes.len() > MAX_TRANSACTION_ITEMS {
        return Err(ItemError::TooManyTransactionItems(sizes.len()));
    }
    let total: usize = sizes.iter().sum();
    if total > MAX_TRANSACTION_BYTES {
        return Err(ItemError::TransactionTooLarge(total));
    }
    Ok(())
}

/// Sort-key prefix of the ingestion markers in the usage table. It starts with a
/// letter, so it never matches a group's prefix `<12-digit account>#<dimension>#<hour>`.
pub const INGESTION_MARKER_PREFIX: &str = "event#";

/// Attribute of an ingestion marker naming the sort key of the row its event wrote.
pub const INGESTION_MARKER_ROW: &str = "ingestedRow";

/// Attribute of an ingestion marker holding its event's [`content_digest`], so a
/// repeated event id is compared with what the first write carried. Markers written
/// before it existed have none (their row is read instead).
pub const INGESTION_MARKER_DIGEST: &str = "contentDigest";

/// The digest of one event's usage as a retry must repeat it: license, account,
/// dimension, quantity and allocations (in order), never the instant. Hex SHA-256 of
/// the length-prefixed fields, so no two contents share an encoding.
pub fn content_digest(
    license_arn: &str,
    account: &str,
    dimension: &str,
    quantity: i64,
    allocations: Option<&[Allocation]>,
) -> String {
    use sha2::{Digest, Sha256};
    fn field(hash: &mut Sha256, bytes: &[u8]) {
        hash.update((bytes.len() as u64).to_be_bytes());
        hash.update(bytes);
    }
    let mut hash = Sha256::new();
    for text in [
        "awsmp-usage-v1",
        license_arn,
        account,
        dimension,
        &quantity.to_string(),
    ] {
        field(&mut hash, text.as_bytes());
    }
    match allocations {
        None => field(&mut hash, b"no allocations"),
        Some(list) => {
            field(&mut hash, list.len().to_string().as_bytes());
            for allocation in list {
                field(&mut hash, allocation.quantity.to_string().as_bytes());
                field(&mut hash, allocation.tags.len().to_string().as_bytes());
                for tag in &allocation.tags {
                    field(&mut hash, tag.key.as_bytes());
                    field(&mut hash, tag.value.as_bytes());
                }
            }
        }
    }
    hash.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// [`content_digest`] of a new row.
pub fn row_digest(row: &NewUsageRow) -> String {
    content_digest(
        &row.license_arn,
        &row.customer_aws_account_id,
        &row.dimension,
        row.quantity,
        row.allocations.as_deref(),
    )
}

/// The usage-table sort key of the ingestion marker of `event_id` (partition key: the
/// row's license): `event#<eventId>`. [`crate::ports::UsageStore::put_row`] writes the
/// marker with the row, both or neither, so the event id alone (per license) makes a
/// retry a no-op whatever timestamp it carries.
pub fn ingestion_marker_sort_key(event_id: &str) -> String {
    format!("{INGESTION_MARKER_PREFIX}{event_id}")
}

/// The event id of an ingestion marker's sort key; `None` for any other sort key (a
/// usage row). Readers that scan the usage table skip what this recognizes.
pub fn ingestion_marker_event_id(sort_key: &str) -> Option<&str> {
    sort_key.strip_prefix(INGESTION_MARKER_PREFIX)
}

/// The ingestion marker item for `row`: keys (license, [`ingestion_marker_sort_key`]),
/// [`INGESTION_MARKER_ROW`], [`INGESTION_MARKER_DIGEST`] and the audit stamps. Never
/// `meteringPending`, `customerAWSAccountId` or `dimension`: it is not usage and never
/// enters the sparse index.
pub fn ingestion_marker_item(row: &NewUsageRow, now: Instant) -> RawUsageRow {
    let mut attrs = BTreeMap::from([
        (
            INGESTION_MARKER_ROW.to_string(),
            Attr::S(ingestion_sort_key(row)),
        ),
        (
            INGESTION_MARKER_DIGEST.to_string(),
            Attr::S(row_digest(row)),
        ),
    ]);
    AuditStamp::at(now).apply(&mut attrs);
    RawUsageRow {
        license_arn: row.license_arn.clone(),
        sort_key: ingestion_marker_sort_key(&row.event_id),
        attrs,
    }
}

/// The usage-table sort key of an ingested row:
/// `<account>#<dimension>#<YYYY-MM-DDTHH:MM:SSZ>#<eventId>`.
pub fn ingestion_sort_key(row: &NewUsageRow) -> String {
    format!(
        "{}#{}#{}#{}",
        row.customer_aws_account_id,
        row.dimension,
        format_instant(row.timestamp),
        row.event_id
    )
}

/// The allocations as DynamoDB holds them: a list of
/// `{allocatedUsageQuantity: N, tags: [{key: S, value: S}]}` maps.
pub fn allocations_attr(allocations: &[Allocation]) -> Attr {
    Attr::L(
        allocations
            .iter()
            .map(|allocation| {
                let tags = allocation
                    .tags
                    .iter()
                    .map(|tag| {
                        Attr::M(BTreeMap::from([
                            (attr::TAG_KEY.to_string(), Attr::S(tag.key.clone())),
                            (attr::TAG_VALUE.to_string(), Attr::S(tag.value.clone())),
                        ]))
                    })
                    .collect();
                Attr::M(BTreeMap::from([
                    (
                        attr::ALLOCATED_USAGE_QUANTITY.to_string(),
                        Attr::N(allocation.quantity.to_string()),
                    ),
                    (attr::TAGS.to_string(), Attr::L(tags)),
                ]))
            })
            .collect(),
    )
}

/// The item an ingestion write stores: keys, `customerAWSAccountId`, `dimension`,
/// `timestamp` (`YYYY-MM-DDTHH:MM:SSZ`), `quantity` (N), optional `usageAllocations`
/// and `productCode`, `meteringPending` (the hour bucket, S) and the audit stamps.
/// Unchecked (tests seed rows with it); [`IngestionWrite::new`] is the checked write.
pub fn ingestion_item(row: &NewUsageRow, now: Instant) -> RawUsageRow {
    let mut attrs = BTreeMap::from([
        (
            attr::CUSTOMER_ACCOUNT.to_string(),
            Attr::S(row.customer_aws_account_id.clone()),
        ),
        (attr::DIMENSION.to_string(), Attr::S(row.dimension.clone())),
        (
            attr::TIMESTAMP.to_string(),
            Attr::S(format_instant(row.timestamp)),
        ),
        (
            attr::QUANTITY.to_string(),
            Attr::N(row.quantity.to_string()),
        ),
        (
            attr::METERING_PENDING.to_string(),
            Attr::S(HourBucket::containing(row.timestamp).to_string()),
        ),
    ]);
    if let Some(allocations) = &row.allocations {
        attrs.insert(
            attr::USAGE_ALLOCATIONS.to_string(),
            allocations_attr(allocations),
        );
    }
    if let Some(code) = &row.product_code {
        attrs.insert(attr::PRODUCT_CODE.to_string(), Attr::S(code.clone()));
    }
    AuditStamp::at(now).apply(&mut attrs);
    RawUsageRow {
        license_arn: row.license_arn.clone(),
        sort_key: ingestion_sort_key(row),
        attrs,
    }
}

/// One ingestion write, both items of it: the row and its event's marker, each written
/// only if its key is new (one transaction in DynamoDB).
#[derive(Debug, Clone, PartialEq)]
pub struct IngestionWrite {
    /// The usage row ([`ingestion_item`]).
    pub row: RawUsageRow,
    /// The event's idempotency marker ([`ingestion_marker_item`]).
    pub marker: RawUsageRow,
}

impl IngestionWrite {
    /// The write for `row` at `now`, refused when the event id is empty, a part of the
    /// sort key contains `#` (the key would be ambiguous), or an item would exceed
    /// DynamoDB's 400 KB item limit.
    pub fn new(row: &NewUsageRow, now: Instant) -> Result<Self, ItemError> {
        if row.event_id.is_empty() {
            return Err(ItemError::EmptyEventId);
        }
        // A CloudEvent's key (`ce#<digest>`, [`ingestion::cloudevents_event_key`]) is the
        // one event id that holds a `#`: no caller-chosen id can take its form.
        let event_id = if ingestion::is_cloudevents_event_key(&row.event_id) {
            ""
        } else {
            row.event_id.as_str()
        };
        let parts = [
            ("customer account", row.customer_aws_account_id.as_str()),
            ("dimension", row.dimension.as_str()),
            ("event id", event_id),
        ];
        if let Some((what, value)) = parts.into_iter().find(|(_, v)| v.contains('#')) {
            return Err(ItemError::Separator {
                what,
                value: value.to_string(),
            });
        }
        let write = IngestionWrite {
            row: ingestion_item(row, now),
            marker: ingestion_marker_item(row, now),
        };
        // DynamoDB refuses a request naming an over-long key (the whole batch, on every
        // retry): refuse this event alone, here, before any call.
        check_key(
            "licenseArn (the partition key)",
            &write.row.license_arn,
            MAX_PARTITION_KEY_BYTES,
            "a License Manager license ARN is far shorter; send the licenseArn the buyer registered with",
        )?;
        check_key(
            "usage row's sort key (<account>#<dimension>#<timestamp>#<event id>)",
            &write.row.sort_key,
            MAX_SORT_KEY_BYTES,
            "shorten the event id or the dimension",
        )?;
        check_key(
            "event marker's sort key (event#<event id>)",
            &write.marker.sort_key,
            MAX_SORT_KEY_BYTES,
            "shorten the event id",
        )?;
        // A row over DynamoDB's item limit would fail its transaction with a
        // ValidationError: refuse it here, with its size, before any call.
        for item in [&write.row, &write.marker] {
            check_item(
                format_args!("{}/{}", item.license_arn, item.sort_key),
                size::raw_row_size(item),
            )?;
        }
        Ok(write)
    }
}

/// The TTL attribute's value for an item DynamoDB may delete from `at` on: epoch
/// seconds, a number (what DynamoDB's TTL reads; any other type is never deleted).
pub fn expiry_attr(at: Instant) -> Attr {
    Attr::N(at.timestamp().to_string())
}

/// The instant an [`attr::EXPIRES_AT`] value stands for, if it is one [`expiry_attr`]
/// writes.
pub fn expiry_of(value: &Attr) -> Option<Instant> {
    match value {
        Attr::N(text) => text
            .parse::<i64>()
            .ok()
            .and_then(|secs| chrono::DateTime::from_timestamp(secs, 0)),
        _ => None,
    }
}

/// Sets (or, with `None`, removes) a final item's [`attr::EXPIRES_AT`] in its attributes.
pub fn set_expiry(attrs: &mut BTreeMap<String, Attr>, expires_at: Option<Instant>) {
    match expires_at {
        Some(at) => attrs.insert(attr::EXPIRES_AT.to_string(), expiry_attr(at)),
        None => attrs.remove(attr::EXPIRES_AT),
    };
}

/// The attributes of an aggregated record that may be absent (an update removes each
/// one [`aggregated_item`] leaves out). [`attr::EXPIRES_AT`] is one: [`aggregated_item`]
/// is the pending shape (a create or a fold), which never carries it.
pub const OPTIONAL_RECORD_ATTRS: &[&str] = &[
    attr::EXPIRES_AT,
    attr::USAGE_ALLOCATIONS,
    attr::PRODUCT_CODE,
    attr::METERING_STATUS_REASON,
    attr::METERING_RECORD_ID,
    attr::IN_FLIGHT_UNTIL,
    attr::CLAIM_ID,
    attr::SENT_QUANTITY,
    attr::POSSIBLY_BILLED,
    attr::AGGREGATION_IN_PROGRESS,
    attr::METERING_PENDING,
    UNIT_PRICE_ATTR,
];

/// Every attribute of an aggregated record as stored, keys included (audit stamps and
/// `rawRowCount` aside): `licenseArn`, `account_dimension_hour`,
/// `customerAWSAccountId`, `dimension`, `hourBucket`, `quantity` (N), `meteringStatus`,
/// `attemptCount` (N), `version` (N), and when set `usageAllocations`, `productCode`
/// (absent when empty), `meteringStatusReason`, `meteringRecordId`, `inFlightUntil`,
/// `claimId`, `sentQuantity` (N), `possiblyBilled` (BOOL, either value),
/// `aggregationInProgress` (BOOL true), `unitPrice` (a map: [`UnitPrice::to_attr`]) and
/// `meteringPending` (the hour, only while not terminal).
pub fn aggregated_item(record: &AggregatedRecord) -> BTreeMap<String, Attr> {
    let key = &record.key;
    let s = |v: &str| Attr::S(v.to_string());
    let mut item = BTreeMap::from([
        (attr::LICENSE_ARN.to_string(), s(&key.license_arn)),
        (
            attr::AGGREGATED_SORT_KEY.to_string(),
            Attr::S(key.aggregated_sort_key()),
        ),
        (
            attr::CUSTOMER_ACCOUNT.to_string(),
            s(&key.customer_aws_account_id),
        ),
        (attr::DIMENSION.to_string(), s(&key.dimension)),
        (attr::HOUR_BUCKET.to_string(), Attr::S(key.hour.to_string())),
        (
            attr::QUANTITY.to_string(),
            Attr::N(record.quantity.to_string()),
        ),
        (attr::METERING_STATUS.to_string(), s(record.status.as_str())),
        (
            attr::ATTEMPT_COUNT.to_string(),
            Attr::N(record.attempt_count.to_string()),
        ),
        (
            attr::VERSION.to_string(),
            Attr::N(record.version.to_string()),
        ),
    ]);
    let optional = [
        (
            attr::USAGE_ALLOCATIONS,
            record.allocations.as_deref().map(allocations_attr),
        ),
        (
            attr::PRODUCT_CODE,
            (!record.product_code.is_empty()).then(|| s(&record.product_code)),
        ),
        (
            attr::METERING_STATUS_REASON,
            record.status_reason.as_deref().map(s),
        ),
        (
            attr::METERING_RECORD_ID,
            record.metering_record_id.as_deref().map(s),
        ),
        (
            attr::IN_FLIGHT_UNTIL,
            record.in_flight_until.map(|t| Attr::S(format_instant(t))),
        ),
        (attr::CLAIM_ID, record.claim_id.as_deref().map(s)),
        (
            attr::SENT_QUANTITY,
            record.sent_quantity.map(|q| Attr::N(q.to_string())),
        ),
        (
            attr::POSSIBLY_BILLED,
            record.possibly_billed.map(Attr::Bool),
        ),
        (
            attr::AGGREGATION_IN_PROGRESS,
            record.folding.then_some(Attr::Bool(true)),
        ),
        (
            attr::METERING_PENDING,
            (!record.status.is_terminal()).then(|| Attr::S(key.hour.to_string())),
        ),
        (
            UNIT_PRICE_ATTR,
            record.unit_price.as_ref().map(UnitPrice::to_attr),
        ),
    ];
    for (name, value) in optional {
        if let Some(value) = value {
            item.insert(name.to_string(), value);
        }
    }
    item
}

/// Refuses a commit no DynamoDB transaction could carry: more than
/// [`MAX_ROWS_PER_COMMIT`] claimed rows (with the record, more than
/// [`MAX_TRANSACTION_ITEMS`] items) or one row named twice.
pub fn check_commit(commit: &AggregationCommit) -> Result<(), ItemError> {
    if commit.claimed_rows.len() > MAX_ROWS_PER_COMMIT {
        return Err(ItemError::TooManyRows(commit.claimed_rows.len()));
    }
    let distinct: BTreeSet<&(String, String)> = commit.claimed_rows.iter().collect();
    if distinct.len() != commit.claimed_rows.len() {
        return Err(ItemError::RepeatedRow);
    }
    Ok(())
}

/// One aggregation commit's writes, shaped and checked once for both stores: the
/// record's item and the change every claimed row gets (counted and final at once).
#[derive(Debug, Clone, PartialEq)]
pub struct CommitWrite {
    /// The record as the commit leaves it, keys included ([`aggregated_item`]; the
    /// store adds `rawRowCount` and the audit stamps).
    pub record: BTreeMap<String, Attr>,
    /// What each claimed row's update sets (`Some`) or removes (`None`), audit stamps
    /// aside: `aggregatedInto` = the record's sort key, `meteringStatus` =
    /// `Aggregated`, no `meteringStatusReason`, `expiresAt` as the commit says, no
    /// `meteringPending` (it leaves the pending index).
    pub row_changes: Vec<(&'static str, Option<Attr>)>,
}

impl CommitWrite {
    /// The writes of `commit`, refused as [`check_commit`] refuses (more rows than one
    /// transaction holds, or one row named twice).
    pub fn new(commit: &AggregationCommit) -> Result<Self, ItemError> {
        check_commit(commit)?;
        let row_changes = vec![
            (
                attr::AGGREGATED_INTO,
                Some(Attr::S(commit.record.key.aggregated_sort_key())),
            ),
            (
                attr::METERING_STATUS,
                Some(Attr::S(RawStatus::Aggregated.as_str().to_string())),
            ),
            (attr::METERING_STATUS_REASON, None),
            (attr::EXPIRES_AT, commit.rows_expire_at.map(expiry_attr)),
            (attr::METERING_PENDING, None),
        ];
        Ok(CommitWrite {
            record: aggregated_item(&commit.record),
            row_changes,
        })
    }

    /// Applies [`CommitWrite::row_changes`] to a row's attributes (the in-memory store).
    pub fn count_row(&self, attrs: &mut BTreeMap<String, Attr>) {
        for (name, value) in &self.row_changes {
            match value {
                Some(value) => attrs.insert((*name).to_string(), value.clone()),
                None => attrs.remove(*name),
            };
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::time::parse_usage_timestamp;

    #[test]
    fn limits_refuse_what_dynamodb_refuses() {
        assert!(check_item("k", MAX_ITEM_BYTES).is_ok());
        let err = check_item("L/sk", MAX_ITEM_BYTES + 1).unwrap_err();
        assert!(err.to_string().contains("400 KB"), "{err}");
        assert!(check_transaction(&[1; MAX_TRANSACTION_ITEMS]).is_ok());
        assert_eq!(
            check_transaction(&[1; MAX_TRANSACTION_ITEMS + 1]),
            Err(ItemError::TooManyTransactionItems(101))
        );
        let err = check_transaction(&[MAX_ITEM_BYTES; 11]).unwrap_err();
        assert!(err.to_string().contains("4 MB"), "{err}");
    }

    fn row(account: &str, dimension: &str, event_id: &str) -> NewUsageRow {
        NewUsageRow {
            license_arn: "arn:l".into(),
            customer_aws_account_id: account.into(),
            dimension: dimension.into(),
            timestamp: parse_usage_timestamp("2026-11-30T10:15:42Z").unwrap(),
            quantity: 3,
            allocations: None,
            product_code: None,
            event_id: event_id.into(),
            timestamp_defaulted: false,
        }
    }

    #[test]
    fn an_ingestion_write_refuses_ambiguous_sort_keys() {
        let now = parse_usage_timestamp("2026-11-30T10:20:00Z").unwrap();
        let write = IngestionWrite::new(&row("111122223333", "requests", "e-1"), now).unwrap();
        assert_eq!(
            write.row.sort_key,
            "111122223333#requests#2026-11-30T10:15:42Z#e-1"
        );
        assert_eq!(write.marker.sort_key, "event#e-1");
        assert_eq!(
            ingestion_marker_event_id(&write.marker.sort_key),
            Some("e-1")
        );
        assert_eq!(ingestion_marker_event_id(&write.row.sort_key), None);
        for bad in [
            row("1111#2222", "requests", "e-1"),
            row("111122223333", "re#quests", "e-1"),
            row("111122223333", "requests", "e#1"),
        ] {
            let err = IngestionWrite::new(&bad, now).unwrap_err();
            assert!(matches!(err, ItemError::Separator { .. }), "{err}");
        }
        assert_eq!(
            IngestionWrite::new(&row("111122223333", "requests", ""), now).unwrap_err(),
            ItemError::EmptyEventId
        );
    }
}

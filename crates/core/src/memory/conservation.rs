//! The conservation invariant (ARCHITECTURE.md: status transitions), one checker for
//! every test that holds it: the simulation over the in-memory tables
//! (`crates/dev/dst`) and the e2e suite over the tables on moto (`tests/`). Each reads
//! its tables into [`Books`] and asks [`Conservation::check`]: every raw row ends in
//! exactly one terminal status, consistent with its counting claim; every aggregated
//! record holds the sum of the rows counted into it; what Marketplace billed for a
//! group is what its record holds (what it says was sent, for a seller's direct-submit
//! record), billed once, for a record whose status says so; no group was sent with two
//! quantities. Statuses are read with [`RawStatus`] and [`AggregatedStatus`], so a
//! status this code does not know is reported, never matched by a string of its own.

use std::collections::{BTreeMap, BTreeSet};
use std::str::FromStr;

use crate::items::ingestion_marker_event_id;
use crate::model::{
    AggregatedRecord, AggregatedStatus, Attr, GroupKey, RawStatus, RawUsageRow, attr,
};

/// One raw usage row as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowView {
    /// `licenseArn`.
    pub license_arn: String,
    /// Its sort key.
    pub sort_key: String,
    /// `quantity`, when it is an integer number.
    pub quantity: Option<i64>,
    /// `meteringStatus`.
    pub status: Option<String>,
    /// `meteringStatusReason`.
    pub reason: Option<String>,
    /// It still carries `meteringPending`.
    pub pending: bool,
    /// `aggregatedInto`: the record it was counted into.
    pub aggregated_into: Option<String>,
}

impl RowView {
    /// A row read from its stored attributes.
    pub fn of(row: &RawUsageRow) -> Self {
        let text = |name: &str| row.attrs.get(name).and_then(Attr::as_s).map(str::to_string);
        RowView {
            license_arn: row.license_arn.clone(),
            sort_key: row.sort_key.clone(),
            quantity: match row.attrs.get(attr::QUANTITY) {
                Some(Attr::N(n)) => n.parse().ok(),
                _ => None,
            },
            status: text(attr::METERING_STATUS),
            reason: text(attr::METERING_STATUS_REASON),
            pending: row.attrs.contains_key(attr::METERING_PENDING),
            aggregated_into: text(attr::AGGREGATED_INTO),
        }
    }
}

/// One aggregated record as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordView {
    /// `licenseArn`.
    pub license_arn: String,
    /// Its sort key `<account>#<dimension>#<hour>`.
    pub sort_key: String,
    /// `quantity`.
    pub quantity: i64,
    /// `meteringStatus` (`Pending` while pending).
    pub status: String,
    /// It still carries `meteringPending`.
    pub pending: bool,
    /// `sentQuantity`: what a send may already have billed.
    pub sent_quantity: Option<i64>,
    /// `meteringRecordId`.
    pub metering_record_id: Option<String>,
}

impl RecordView {
    /// A record as the store reads it (pending exactly while its status is `Pending`).
    pub fn of(record: &AggregatedRecord) -> Self {
        RecordView {
            license_arn: record.key.license_arn.clone(),
            sort_key: record.key.aggregated_sort_key(),
            quantity: record.quantity,
            status: record.status.as_str().to_string(),
            pending: !record.status.is_terminal(),
            sent_quantity: record.sent_quantity,
            metering_record_id: record.metering_record_id.clone(),
        }
    }

    fn id(&self) -> String {
        format!("aggregated {} {}", self.license_arn, self.sort_key)
    }
}

/// One record Marketplace billed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Billed {
    /// Its group.
    pub key: GroupKey,
    /// The billed quantity.
    pub quantity: i64,
    /// The record id Marketplace answered.
    pub metering_record_id: String,
}

/// What the check reads: the two tables and what Marketplace did.
#[derive(Debug, Clone, Default)]
pub struct Books {
    /// The usage table (ingestion markers are skipped: they are not usage).
    pub rows: Vec<RowView>,
    /// The aggregated table.
    pub records: Vec<RecordView>,
    /// Marketplace's ledger, in billing order.
    pub billed: Vec<Billed>,
    /// Every quantity each group was sent with that Marketplace processed (billed, or
    /// refused as a conflicting duplicate).
    pub sent: BTreeMap<GroupKey, BTreeSet<i64>>,
}

impl Books {
    /// The rows and records of `rows` and `records`, with nothing billed or sent yet.
    pub fn of_tables(rows: &[RawUsageRow], records: &[AggregatedRecord]) -> Self {
        Books {
            rows: rows.iter().map(RowView::of).collect(),
            records: records.iter().map(RecordView::of).collect(),
            ..Books::default()
        }
    }
}

/// How the books are read.
#[derive(Debug, Clone, Default)]
pub struct Conservation {
    /// Every row and record must have reached a terminal status.
    pub settled: bool,
    /// A direct-submit deployment: the seller writes the records (no rows to count), and
    /// may change a record's quantity until it is claimed, so what Marketplace billed
    /// must be what the record says was sent.
    pub direct: bool,
    /// Groups another writer (another stack, a seller's script) billed first: the bill
    /// is not ours, so it is not held to our record (the caller judges how our record
    /// ended).
    pub billed_by_another: BTreeSet<GroupKey>,
    /// Groups billed by a call of ours whose answer never came, then refused
    /// `CustomerNotSubscribed` once the buyer's entitlement was revoked: their record
    /// may rightly end `CustomerNotSubscribed` (saying it may have been billed).
    pub refused_after_billing: BTreeSet<GroupKey>,
}

/// The statuses a billed group's record may end in.
const BILLED_ENDINGS: [AggregatedStatus; 4] = [
    AggregatedStatus::Pending,
    AggregatedStatus::Success,
    AggregatedStatus::DuplicateRecord,
    AggregatedStatus::SubmissionExpired,
];

type TableKey = (String, String);

fn table_key(key: &GroupKey) -> TableKey {
    (key.license_arn.clone(), key.aggregated_sort_key())
}

impl Conservation {
    /// Every violation in `books` (empty when the invariant holds).
    pub fn check(&self, books: &Books) -> Vec<String> {
        let (mut violations, counted) = self.rows(&books.rows);
        violations.extend(self.records(books, &counted));
        violations.extend(self.ledger(books));
        for (key, quantities) in &books.sent {
            if quantities.len() > 1 {
                violations.push(format!("group {key}: sent with quantities {quantities:?}"));
            }
        }
        violations
    }

    /// The rows' violations, and the quantity counted into each record.
    fn rows(&self, rows: &[RowView]) -> (Vec<String>, BTreeMap<TableKey, i64>) {
        let mut violations = Vec::new();
        let mut counted: BTreeMap<TableKey, i64> = BTreeMap::new();
        for row in rows {
            if ingestion_marker_event_id(&row.sort_key).is_some() {
                continue;
            }
            let id = format!("raw {} {}", row.license_arn, row.sort_key);
            let into = row.aggregated_into.as_deref();
            match row.status.as_deref().map(|s| (s, RawStatus::from_str(s))) {
                None if self.settled => {
                    violations.push(format!("{id}: never reached a terminal status"))
                }
                None if !row.pending => {
                    violations.push(format!("{id}: no status and no meteringPending"))
                }
                None => {}
                Some((s, Err(_))) => violations.push(format!("{id}: unknown status {s}")),
                Some(_) if row.pending => {
                    violations.push(format!("{id}: terminal but still pending"))
                }
                Some((_, Ok(RawStatus::RejectedClientSide))) if row.reason.is_none() => {
                    violations.push(format!("{id}: rejected without a reason"))
                }
                Some((_, Ok(RawStatus::Aggregated)))
                    if into.is_none() && row.quantity != Some(0) =>
                {
                    violations.push(format!(
                        "{id}: Aggregated with quantity {:?} but never counted",
                        row.quantity
                    ))
                }
                Some((s, Ok(RawStatus::RejectedClientSide | RawStatus::AggregationExpired)))
                    if into.is_some() =>
                {
                    violations.push(format!("{id}: counted into a record but ended {s}"))
                }
                Some(_) => {}
            }
            if let Some(into) = into {
                *counted
                    .entry((row.license_arn.clone(), into.to_string()))
                    .or_insert(0) += row.quantity.unwrap_or(0);
            }
        }
        (violations, counted)
    }

    /// The records' violations: a known status, consistent with the pending marker, and
    /// the sum of the rows counted into it.
    fn records(&self, books: &Books, counted: &BTreeMap<TableKey, i64>) -> Vec<String> {
        let mut violations = Vec::new();
        let ours_billed: BTreeSet<TableKey> = books
            .billed
            .iter()
            .filter(|b| !self.billed_by_another.contains(&b.key))
            .map(|b| table_key(&b.key))
            .collect();
        let another: BTreeSet<TableKey> = self.billed_by_another.iter().map(table_key).collect();
        for record in &books.records {
            let id = record.id();
            let key = (record.license_arn.clone(), record.sort_key.clone());
            let status = match AggregatedStatus::from_str(&record.status) {
                Ok(status) => status,
                Err(_) if RawStatus::from_str(&record.status).is_ok() => {
                    violations.push(format!(
                        "{id}: a raw row's status {} on the aggregated table",
                        record.status
                    ));
                    continue;
                }
                Err(_) => {
                    violations.push(format!("{id}: unknown status {}", record.status));
                    continue;
                }
            };
            if status.is_terminal() == record.pending {
                violations.push(format!(
                    "{id}: status {status} but pending={}",
                    record.pending
                ));
            }
            if self.settled && !status.is_terminal() {
                violations.push(format!("{id}: still pending after settling"));
            }
            if !self.direct {
                let sum = counted.get(&key).copied().unwrap_or(0);
                if sum != record.quantity {
                    violations.push(format!(
                        "{id}: holds {} but the rows counted into it sum to {sum}",
                        record.quantity
                    ));
                }
            }
            if status == AggregatedStatus::Success
                && !ours_billed.contains(&key)
                && !another.contains(&key)
            {
                violations.push(format!("{id}: Success but Marketplace billed nothing"));
            }
        }
        violations
    }

    /// The ledger's violations: each group billed once, for a record of ours that holds
    /// (or says it sent) the billed quantity and whose status says it may be billed.
    fn ledger(&self, books: &Books) -> Vec<String> {
        let mut violations = Vec::new();
        let records: BTreeMap<TableKey, &RecordView> = books
            .records
            .iter()
            .map(|r| ((r.license_arn.clone(), r.sort_key.clone()), r))
            .collect();
        let mut seen = BTreeSet::new();
        for billed in &books.billed {
            let key = &billed.key;
            let id = format!("billed {key}");
            if !seen.insert(key.clone()) {
                violations.push(format!("{id}: billed twice"));
            }
            if self.billed_by_another.contains(key) {
                continue;
            }
            let Some(record) = records.get(&table_key(key)) else {
                violations.push(format!("{id}: no aggregated record"));
                continue;
            };
            let status = AggregatedStatus::from_str(&record.status).ok();
            if self.direct {
                match record.sent_quantity {
                    None => violations.push(format!("{id}: no sent quantity is recorded")),
                    Some(sent) if sent != billed.quantity => violations.push(format!(
                        "{id}: billed {} but the record says {sent} was sent (status {})",
                        billed.quantity, record.status
                    )),
                    Some(_) => {}
                }
            } else if billed.quantity != record.quantity {
                violations.push(format!(
                    "{id}: billed {} but the record holds {} (status {})",
                    billed.quantity, record.quantity, record.status
                ));
            }
            let explained = status.is_some_and(|s| BILLED_ENDINGS.contains(&s))
                || (status == Some(AggregatedStatus::CustomerNotSubscribed)
                    && self.refused_after_billing.contains(key));
            if !explained {
                violations.push(format!(
                    "{id}: billed but the record says {}",
                    record.status
                ));
            }
            if status == Some(AggregatedStatus::Success)
                && record.metering_record_id.as_deref() != Some(billed.metering_record_id.as_str())
            {
                violations.push(format!(
                    "{id}: the record's id {:?} is not the ledger's {}",
                    record.metering_record_id, billed.metering_record_id
                ));
            }
        }
        violations
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::time::{HourBucket, parse_usage_timestamp};

    const LICENSE: &str = "arn:aws:license-manager::123456789012:license:l-1";

    fn key() -> GroupKey {
        GroupKey {
            license_arn: LICENSE.into(),
            customer_aws_account_id: "111122223333".into(),
            dimension: "requests".into(),
            hour: HourBucket::containing(parse_usage_timestamp("2026-11-30T10:00:00Z").unwrap()),
        }
    }

    fn row(n: u32, quantity: i64) -> RowView {
        RowView {
            license_arn: LICENSE.into(),
            sort_key: format!("111122223333#requests#2026-11-30T10:00:0{n}"),
            quantity: Some(quantity),
            status: Some("Aggregated".into()),
            reason: None,
            pending: false,
            aggregated_into: Some(key().aggregated_sort_key()),
        }
    }

    /// Two rows counted into a record billed for their sum.
    fn books() -> Books {
        Books {
            rows: vec![row(1, 2), row(2, 3)],
            records: vec![RecordView {
                license_arn: LICENSE.into(),
                sort_key: key().aggregated_sort_key(),
                quantity: 5,
                status: "Success".into(),
                pending: false,
                sent_quantity: Some(5),
                metering_record_id: Some("mr-1".into()),
            }],
            billed: vec![Billed {
                key: key(),
                quantity: 5,
                metering_record_id: "mr-1".into(),
            }],
            sent: BTreeMap::from([(key(), BTreeSet::from([5]))]),
        }
    }

    fn settled() -> Conservation {
        Conservation {
            settled: true,
            ..Conservation::default()
        }
    }

    fn found(books: &Books, what: &str) -> bool {
        settled().check(books).iter().any(|v| v.contains(what))
    }

    #[test]
    fn books_that_balance_hold() {
        assert_eq!(settled().check(&books()), Vec::<String>::new());
    }

    #[test]
    fn a_row_left_pending_holds_only_until_settled() {
        let mut books = books();
        books.rows.push(RowView {
            status: None,
            pending: true,
            aggregated_into: None,
            ..row(3, 1)
        });
        assert!(Conservation::default().check(&books).is_empty());
        assert!(found(&books, "never reached a terminal status"));
    }

    #[test]
    fn each_row_rule_is_read_from_the_status_enum() {
        let mut books = books();
        books.rows[0].status = Some("Billed".into());
        books.rows[1].pending = true;
        assert!(found(&books, "unknown status Billed"));
        assert!(found(&books, "terminal but still pending"));
        let mut books = self::books();
        books.rows[0].status = Some("RejectedClientSide".into());
        assert!(found(&books, "rejected without a reason"));
        books.rows[0].reason = Some("HourAlreadySubmitted".into());
        assert!(found(
            &books,
            "counted into a record but ended RejectedClientSide"
        ));
        let mut books = self::books();
        books.rows[0].aggregated_into = None;
        assert!(found(&books, "never counted"));
        assert!(found(
            &books,
            "holds 5 but the rows counted into it sum to 3"
        ));
    }

    #[test]
    fn an_ingestion_marker_is_not_usage() {
        let mut books = books();
        books.rows.push(RowView {
            sort_key: crate::items::ingestion_marker_sort_key("evt-1"),
            status: None,
            pending: false,
            aggregated_into: None,
            ..row(3, 1)
        });
        assert!(settled().check(&books).is_empty());
    }

    #[test]
    fn the_ledger_is_held_to_the_records() {
        let mut books = books();
        books.billed[0].quantity = 4;
        assert!(found(&books, "billed 4 but the record holds 5"));
        let mut books = self::books();
        books.billed.push(books.billed[0].clone());
        assert!(found(&books, "billed twice"));
        let mut books = self::books();
        books.billed.clear();
        assert!(found(&books, "Success but Marketplace billed nothing"));
        let mut books = self::books();
        books.records[0].status = "Error".into();
        assert!(found(&books, "billed but the record says Error"));
        let mut books = self::books();
        books.records[0].metering_record_id = Some("mr-2".into());
        assert!(found(&books, "is not the ledger's mr-1"));
        let mut books = self::books();
        books.records.clear();
        assert!(found(&books, "no aggregated record"));
        let mut books = self::books();
        books.sent.insert(key(), BTreeSet::from([5, 6]));
        assert!(found(&books, "sent with quantities {5, 6}"));
    }

    #[test]
    fn a_record_status_must_agree_with_its_pending_marker() {
        let mut books = books();
        books.records[0].pending = true;
        assert!(found(&books, "status Success but pending=true"));
        books.records[0].status = "AggregationExpired".into();
        assert!(found(&books, "a raw row's status AggregationExpired"));
    }

    #[test]
    fn a_direct_submit_record_is_held_to_what_it_says_was_sent() {
        let mut books = books();
        books.rows.clear();
        books.records[0].quantity = 7;
        let direct = Conservation {
            direct: true,
            ..settled()
        };
        assert!(direct.check(&books).is_empty());
        books.records[0].sent_quantity = Some(6);
        assert!(
            direct
                .check(&books)
                .iter()
                .any(|v| v.contains("billed 5 but the record says 6 was sent"))
        );
    }

    #[test]
    fn another_writers_bill_and_a_bill_refused_after_revocation_are_excused() {
        let mut books = books();
        books.records[0].status = "CustomerNotSubscribed".into();
        assert!(found(
            &books,
            "billed but the record says CustomerNotSubscribed"
        ));
        let revoked = Conservation {
            refused_after_billing: BTreeSet::from([key()]),
            ..settled()
        };
        assert!(revoked.check(&books).is_empty());
        books.records[0].status = "DuplicateRecord".into();
        books.billed[0].quantity = 999;
        let rival = Conservation {
            billed_by_another: BTreeSet::from([key()]),
            ..settled()
        };
        assert!(rival.check(&books).is_empty());
    }
}

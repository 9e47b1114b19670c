//! Which changes tell what, and how a batch is put on the bus.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use super::*;
use crate::memory::MemoryBus;
use crate::model::Attr;
use crate::ports::PortError;

const LICENSE: &str = "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0";

fn item(pairs: &[(&str, &str)]) -> BTreeMap<String, Attr> {
    pairs
        .iter()
        .map(|(k, v)| {
            let value = if matches!(*k, "quantity" | "attemptCount" | "sentQuantity") {
                Attr::N((*v).to_string())
            } else if *k == "possiblyBilled" {
                Attr::Bool(*v == "true")
            } else {
                Attr::S((*v).to_string())
            };
            ((*k).to_string(), value)
        })
        .collect()
}

fn record(status: &str, extra: &[(&str, &str)]) -> BTreeMap<String, Attr> {
    let mut pairs = vec![
        ("licenseArn", LICENSE),
        (
            "account_dimension_hour",
            "111122223333#requests#2026-12-03T10",
        ),
        ("customerAWSAccountId", "111122223333"),
        ("dimension", "requests"),
        ("hourBucket", "2026-12-03T10"),
        ("quantity", "42"),
        ("meteringStatus", status),
    ];
    pairs.extend_from_slice(extra);
    item(&pairs)
}

fn row(status: &str, extra: &[(&str, &str)]) -> BTreeMap<String, Attr> {
    let mut pairs = vec![
        ("licenseArn", LICENSE),
        (
            "customerAWSAccountId_dimension_timestamp",
            "111122223333#requests#2026-12-03T10:15:00Z#evt-7",
        ),
        ("customerAWSAccountId", "111122223333"),
        ("dimension", "requests"),
        ("timestamp", "2026-12-03T10:15:00Z"),
        ("quantity", "5"),
        ("meteringStatus", status),
    ];
    pairs.extend_from_slice(extra);
    item(&pairs)
}

fn change(
    id: &str,
    old: Option<BTreeMap<String, Attr>>,
    new: Option<BTreeMap<String, Attr>>,
) -> Change {
    Change {
        change_id: id.to_string(),
        position: format!("seq-{id}"),
        old,
        new,
    }
}

fn detail(event: &crate::ports::BusEvent) -> serde_json::Value {
    serde_json::from_str(&event.detail).unwrap()
}

#[test]
fn a_record_billed_tells_its_outcome_once() {
    let pending = record("Pending", &[("meteringPending", "2026-12-03T10")]);
    let billed = record(
        "Success",
        &[("meteringRecordId", "mr-1"), ("attemptCount", "1")],
    );
    let event = outcome(
        Table::Aggregated,
        &change("c1", Some(pending), Some(billed.clone())),
    )
    .unwrap();
    assert_eq!(event.source, "awsmp.metering");
    assert_eq!(event.detail_type, "Usage Record Outcome");
    assert_eq!(event.resources, vec![LICENSE.to_string()]);
    assert_eq!(
        detail(&event),
        serde_json::json!({
            "detailVersion": 2,
            "outcomeId": "c1",
            "licenseArn": LICENSE,
            "recordKey": "111122223333#requests#2026-12-03T10",
            "customerAWSAccountId": "111122223333",
            "dimension": "requests",
            "hour": "2026-12-03T10",
            "quantity": 42,
            "status": "Success",
            "meteringRecordId": "mr-1",
            "attempts": 1,
            "billed": true,
            "possiblyBilled": false,
            "estimatedCharge": { "amount": null, "currency": null, "basis": "no rate card" },
        })
    );
    // A later write that leaves the status as it was (retention, a re-stamp) tells nothing.
    assert_eq!(
        outcome(
            Table::Aggregated,
            &change("c2", Some(billed.clone()), Some(billed.clone()))
        ),
        None
    );
    // Nor does its removal, or a record still pending.
    assert_eq!(
        outcome(Table::Aggregated, &change("c3", Some(billed), None)),
        None
    );
    let pending = record("Pending", &[]);
    assert_eq!(
        outcome(Table::Aggregated, &change("c4", None, Some(pending))),
        None
    );
}

#[test]
fn a_failed_record_carries_its_reason_and_remedy() {
    let failed = record(
        "Error",
        &[("meteringStatusReason", "InvalidUsageDimensionException")],
    );
    let event = outcome(
        Table::Aggregated,
        &change("c1", Some(record("Pending", &[])), Some(failed)),
    )
    .unwrap();
    let d = detail(&event);
    assert_eq!(d["status"], "Error");
    assert_eq!(d["reason"], "InvalidUsageDimensionException");
    assert_eq!(d["billed"], false);
    assert!(d["remedy"].as_str().unwrap().len() > 10, "{d}");
    // A record written terminal at once (an insert) tells too.
    let expired = record("SubmissionExpired", &[]);
    assert!(outcome(Table::Aggregated, &change("c2", None, Some(expired))).is_some());
}

#[test]
fn a_duplicate_an_earlier_send_of_ours_billed_is_told_billed() {
    // The send billed, its write-back was lost, the re-send was answered DuplicateRecord.
    let duplicate = record(
        "DuplicateRecord",
        &[
            ("meteringStatusReason", "BilledByEarlierAttempt"),
            ("sentQuantity", "42"),
            ("possiblyBilled", "true"),
        ],
    );
    let d = detail(&outcome(Table::Aggregated, &change("c1", None, Some(duplicate))).unwrap());
    assert_eq!(d["billed"], true, "{d}");
    assert_eq!(d["possiblyBilled"], false, "{d}");
    assert_eq!(d["quantity"], 42);
    assert!(d.get("remedy").is_none(), "{d}");
    // Something else billed the hour: not billed by this record.
    let rival = record(
        "DuplicateRecord",
        &[
            ("meteringStatusReason", "UnexpectedDuplicate"),
            ("sentQuantity", "42"),
            ("possiblyBilled", "false"),
        ],
    );
    let d = detail(&outcome(Table::Aggregated, &change("c2", None, Some(rival))).unwrap());
    assert_eq!(d["billed"], false, "{d}");
    assert!(d["remedy"].is_string(), "{d}");
}

#[test]
fn an_unbilled_record_a_send_may_have_billed_says_possibly_billed() {
    for status in ["Error", "CustomerNotSubscribed", "SubmissionExpired"] {
        let flagged = record(
            status,
            &[("sentQuantity", "42"), ("possiblyBilled", "true")],
        );
        let d = detail(&outcome(Table::Aggregated, &change("c1", None, Some(flagged))).unwrap());
        assert_eq!(d["possiblyBilled"], true, "{d}");
        assert_eq!(d["billed"], false, "{d}");
        // Written before the attribute existed: sentQuantity is read as it.
        let legacy = record(status, &[("sentQuantity", "42")]);
        let d = detail(&outcome(Table::Aggregated, &change("c2", None, Some(legacy))).unwrap());
        assert_eq!(d["possiblyBilled"], true, "{d}");
        // A pinned quantity nothing billed (a replayed Error sent again, refused).
        let cleared = record(
            status,
            &[("sentQuantity", "42"), ("possiblyBilled", "false")],
        );
        let d = detail(&outcome(Table::Aggregated, &change("c3", None, Some(cleared))).unwrap());
        assert_eq!(d["possiblyBilled"], false, "{d}");
        let never_sent = record(status, &[]);
        let d = detail(&outcome(Table::Aggregated, &change("c4", None, Some(never_sent))).unwrap());
        assert_eq!(d["possiblyBilled"], false, "{d}");
    }
    let dry = record("DryRunSubmitted", &[("sentQuantity", "42")]);
    let d = detail(&outcome(Table::Aggregated, &change("c5", None, Some(dry))).unwrap());
    assert_eq!(d["possiblyBilled"], false, "{d}");
}

#[test]
fn an_age_out_over_an_unreleased_claim_says_possibly_billed() {
    // The age-out found a claim its holder never released: the holder's send may have
    // billed. It says so in the reason; `possiblyBilled` stored is still the last
    // outcome's (false), and the record's claim is gone with the final write.
    let interrupted = record(
        "SubmissionExpired",
        &[
            ("meteringStatusReason", "InterruptedSubmission"),
            ("possiblyBilled", "false"),
        ],
    );
    let d = detail(&outcome(Table::Aggregated, &change("c1", None, Some(interrupted))).unwrap());
    assert_eq!(d["possiblyBilled"], true, "{d}");
    assert_eq!(d["billed"], false, "{d}");
    // Aged out for another reason, nothing sent: not possibly billed.
    let disabled = record(
        "SubmissionExpired",
        &[
            ("meteringStatusReason", "DisabledApiException"),
            ("possiblyBilled", "false"),
        ],
    );
    let d = detail(&outcome(Table::Aggregated, &change("c2", None, Some(disabled))).unwrap());
    assert_eq!(d["possiblyBilled"], false, "{d}");
}

#[test]
fn the_quantity_told_is_the_one_sent() {
    // Direct-submit: the seller raised `quantity` after the send that billed 42.
    let billed = record(
        "Success",
        &[("sentQuantity", "40"), ("meteringRecordId", "mr-1")],
    );
    let d = detail(&outcome(Table::Aggregated, &change("c1", None, Some(billed))).unwrap());
    assert_eq!(d["quantity"], 40, "{d}");
    assert_eq!(d["recordQuantity"], 42, "{d}");
    // Sent as stored: one quantity.
    let same = record("Success", &[("sentQuantity", "42")]);
    let d = detail(&outcome(Table::Aggregated, &change("c2", None, Some(same))).unwrap());
    assert_eq!(d["quantity"], 42, "{d}");
    assert!(d.get("recordQuantity").is_none(), "{d}");
}

#[test]
fn the_estimated_charge_is_the_quantity_sent_at_the_records_unit_price() {
    use crate::charges::{PriceBasis, UNIT_PRICE_ATTR, UnitPrice};
    let priced = |basis: PriceBasis| {
        let mut item = record(
            "Success",
            &[("sentQuantity", "40"), ("meteringRecordId", "mr-1")],
        );
        let price = UnitPrice {
            agreement_id: "agmt-1".into(),
            basis,
        };
        item.insert(UNIT_PRICE_ATTR.to_string(), price.to_attr());
        item
    };
    let told = |item| detail(&outcome(Table::Aggregated, &change("c1", None, Some(item))).unwrap());
    // 40 sent (not the 42 stored) x 0.0125, exact.
    let d = told(priced(PriceBasis::Priced {
        price: "0.0125".parse().unwrap(),
        currency: "USD".into(),
    }));
    assert_eq!(
        d["estimatedCharge"],
        serde_json::json!({ "amount": "0.5", "currency": "USD", "basis": "priced" }),
        "{d}"
    );
    let d = told(priced(PriceBasis::FreeTrial));
    assert_eq!(d["estimatedCharge"]["basis"], "free trial", "{d}");
    assert!(d["estimatedCharge"]["amount"].is_null(), "{d}");
    let d = told(priced(PriceBasis::Unpriced));
    assert_eq!(d["estimatedCharge"]["basis"], "unpriced", "{d}");
    // A seller's item whose unitPrice is not ours to read: no rate card, still told.
    let mut odd = record("Success", &[("meteringRecordId", "mr-1")]);
    odd.insert(UNIT_PRICE_ATTR.to_string(), Attr::S("a dollar".into()));
    let d = told(odd);
    assert_eq!(d["estimatedCharge"]["basis"], "no rate card", "{d}");
    assert_eq!(d["billed"], true, "{d}");
}

#[test]
fn a_malformed_record_closed_error_is_told_with_what_is_readable() {
    // A seller's direct-submit item the submitter could not read: keys, and the
    // status it was closed with.
    let pending = item(&[
        ("licenseArn", LICENSE),
        ("account_dimension_hour", "111122223333#requests"),
        ("meteringPending", "2026-12-03T10"),
    ]);
    let closed = item(&[
        ("licenseArn", LICENSE),
        ("account_dimension_hour", "111122223333#requests"),
        ("meteringStatus", "Error"),
        ("meteringStatusReason", "MalformedItem"),
    ]);
    let event = outcome(
        Table::Aggregated,
        &change("c1", Some(pending), Some(closed)),
    )
    .expect("a malformed record's Error is told");
    let d = detail(&event);
    assert_eq!(d["recordKey"], "111122223333#requests");
    assert_eq!(d["status"], "Error");
    assert_eq!(d["reason"], "MalformedItem");
    assert_eq!(d["billed"], false);
    assert_eq!(d["possiblyBilled"], false);
    assert!(d.get("dimension").is_none(), "{d}");
    assert!(d["remedy"].is_string(), "{d}");
}

#[tokio::test]
async fn an_outcome_over_the_bus_limit_is_shrunk_to_fit_and_taken() {
    let huge = "p".repeat(300 * 1024);
    let failed = record(
        "Error",
        &[
            ("productCode", huge.as_str()),
            ("meteringStatusReason", "InvalidProductCodeException"),
        ],
    );
    let event = outcome(Table::Aggregated, &change("c1", None, Some(failed))).unwrap();
    assert!(
        event.size() <= crate::ports::PUT_EVENTS_MAX_BYTES,
        "{}",
        event.size()
    );
    let d = detail(&event);
    assert_eq!(d["truncated"], true, "{d}");
    assert!(d.get("productCode").is_none());
    // What fits stays.
    assert_eq!(d["reason"], "InvalidProductCodeException");
    assert_eq!(d["dimension"], "requests");

    // A rejected raw row a seller wrote with a huge dimension.
    let rejected = row(
        "RejectedClientSide",
        &[
            ("dimension", huge.as_str()),
            ("meteringStatusReason", "InvalidDimension"),
        ],
    );
    let row_event = outcome(Table::Usage, &change("r1", None, Some(rejected))).unwrap();
    assert!(row_event.size() <= crate::ports::PUT_EVENTS_MAX_BYTES);
    let d = detail(&row_event);
    assert_eq!(d["truncated"], true, "{d}");
    assert!(d.get("dimension").is_none());
    assert_eq!(d["reasonCode"], "InvalidDimension");

    // Published: the shrunk event is taken and holds back nothing behind it.
    let bus = MemoryBus::new();
    let changes = vec![
        change(
            "c1",
            None,
            Some(record("Error", &[("productCode", huge.as_str())])),
        ),
        change("c2", None, Some(record("Success", &[]))),
    ];
    let report = publish(Table::Aggregated, &changes, &bus).await;
    assert!(report.failed.is_empty(), "{report:?}");
    assert_eq!(bus.taken().len(), 2);
    // An outcome that fits is never marked.
    assert!(detail(&bus.taken()[1]).get("truncated").is_none());
}

#[test]
fn a_replayed_record_tells_its_second_outcome() {
    let error = record("Error", &[("meteringStatusReason", "ThrottlingException")]);
    let pending = record("Pending", &[]);
    let billed = record("Success", &[("meteringRecordId", "mr-2")]);
    assert!(
        outcome(
            Table::Aggregated,
            &change("c1", Some(pending.clone()), Some(error.clone()))
        )
        .is_some()
    );
    assert_eq!(
        outcome(
            Table::Aggregated,
            &change("c2", Some(error), Some(pending.clone()))
        ),
        None
    );
    let second = outcome(
        Table::Aggregated,
        &change("c3", Some(pending), Some(billed)),
    )
    .unwrap();
    assert_eq!(detail(&second)["outcomeId"], "c3");
}

#[test]
fn a_rejected_row_tells_its_reason_and_event_id() {
    let rejected = row(
        "RejectedClientSide",
        &[("meteringStatusReason", "InvalidDimension")],
    );
    let event = outcome(
        Table::Usage,
        &change("r1", Some(row("", &[])), Some(rejected)),
    )
    .unwrap();
    assert_eq!(event.detail_type, "Usage Row Not Billed");
    let d = detail(&event);
    assert_eq!(d["status"], "RejectedClientSide");
    assert_eq!(d["reasonCode"], "InvalidDimension");
    assert_eq!(d["eventId"], "evt-7");
    assert_eq!(
        d["usageRowKey"],
        "111122223333#requests#2026-12-03T10:15:00Z#evt-7"
    );
    assert_eq!(d["quantity"], 5);
    assert!(!d["remedy"].as_str().unwrap().is_empty());

    let expired = row("AggregationExpired", &[]);
    let d = detail(&outcome(Table::Usage, &change("r2", None, Some(expired))).unwrap());
    assert_eq!(d["status"], "AggregationExpired");
    assert!(d.get("reasonCode").is_none());
}

#[test]
fn a_counted_row_and_a_marker_tell_nothing() {
    let counted = row("Aggregated", &[]);
    assert_eq!(
        outcome(Table::Usage, &change("r1", None, Some(counted))),
        None
    );
    let marker = item(&[
        ("licenseArn", LICENSE),
        ("customerAWSAccountId_dimension_timestamp", "event#evt-7"),
        ("meteringStatus", "RejectedClientSide"),
    ]);
    assert_eq!(
        outcome(Table::Usage, &change("r2", None, Some(marker))),
        None
    );
    // A malformed row is still told, with what it holds.
    let malformed = item(&[
        ("licenseArn", LICENSE),
        ("customerAWSAccountId_dimension_timestamp", "garbage"),
        ("quantity", "-3"),
        ("meteringStatus", "RejectedClientSide"),
        ("meteringStatusReason", "MalformedSortKey"),
    ]);
    let d = detail(&outcome(Table::Usage, &change("r3", None, Some(malformed))).unwrap());
    assert_eq!(d["usageRowKey"], "garbage");
    assert!(d.get("eventId").is_none());
}

#[test]
fn the_told_statuses_are_every_terminal_one() {
    assert_eq!(
        Table::Usage.told_statuses(),
        vec!["RejectedClientSide", "AggregationExpired"]
    );
    assert_eq!(
        Table::Aggregated.told_statuses(),
        vec![
            "Success",
            "DuplicateRecord",
            "CustomerNotSubscribed",
            "Error",
            "SubmissionExpired",
            "DryRunSubmitted"
        ]
    );
}

fn billed_changes(n: usize) -> Vec<Change> {
    (0..n)
        .map(|i| {
            change(
                &format!("c{i}"),
                Some(record("Pending", &[])),
                Some(record("Success", &[])),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_batch_goes_out_ten_at_a_time_and_silent_changes_are_counted() {
    let bus = MemoryBus::new();
    let mut changes = billed_changes(25);
    changes.push(change("quiet", None, Some(record("Pending", &[]))));
    let report = publish(Table::Aggregated, &changes, &bus).await;
    assert_eq!(report.published, 25);
    assert_eq!(report.silent, 1);
    assert!(report.failed.is_empty());
    assert_eq!(bus.calls(), 3);
    assert_eq!(bus.taken().len(), 25);
}

#[tokio::test]
async fn refused_entries_and_failed_calls_name_their_changes_for_redelivery() {
    let bus = MemoryBus::new();
    bus.refuse_next(&[3], "ThrottlingException");
    bus.fail_next_put(PortError::Transient {
        operation: "PutEvents",
        message: "503".into(),
    });
    // The failure is queued before the refusal is used: call 1 fails whole, call 2
    // refuses its fourth entry.
    let report = publish(Table::Aggregated, &billed_changes(20), &bus).await;
    let expected: Vec<String> = (0..10)
        .map(|i| format!("seq-c{i}"))
        .chain(std::iter::once("seq-c13".to_string()))
        .collect();
    assert_eq!(report.failed, expected);
    assert_eq!(report.published, 9);
    assert_eq!(bus.taken().len(), 9);
}

#[tokio::test]
async fn large_details_are_split_by_bytes() {
    let bus = MemoryBus::new();
    let long_reason = "x".repeat(60 * 1024);
    let changes: Vec<Change> = (0..8)
        .map(|i| {
            change(
                &format!("c{i}"),
                None,
                Some(record(
                    "Error",
                    &[("meteringStatusReason", long_reason.as_str())],
                )),
            )
        })
        .collect();
    let report = publish(Table::Aggregated, &changes, &bus).await;
    assert_eq!(report.published, 8);
    assert!(report.failed.is_empty());
    // Four details of ~60 KB fill 256 KB: at least two calls.
    assert!(bus.calls() >= 2, "{} calls", bus.calls());
}

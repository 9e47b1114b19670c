//! Comparing our records with CloudTrail's calls and the Seller Delivery Data Feeds.

use super::*;
use crate::reconcile::at;
use crate::reconcile::trail::parse_cloudtrail_event;

const LICENSE: &str =
    "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef";
const LICENSE_2: &str =
    "arn:aws:license-manager::123456789012:license:l-fedcba9876543210fedcba9876543210";
const ACCOUNT: &str = "111122223333";
const ACCOUNT_2: &str = "444455556666";
const PRODUCT: &str = "prodsim1234567890abcdef";

fn hour(s: &str) -> HourBucket {
    s.parse().unwrap()
}

fn key(license: &str, account: &str, dimension: &str, h: &str) -> GroupKey {
    GroupKey {
        license_arn: license.into(),
        customer_aws_account_id: account.into(),
        dimension: dimension.into(),
        hour: hour(h),
    }
}

fn ours(k: GroupKey, quantity: i64, status: AggregatedStatus, id: &str) -> OurRecord {
    OurRecord {
        record: AggregatedRecord {
            key: k,
            product_code: PRODUCT.into(),
            quantity,
            allocations: None,
            status,
            status_reason: None,
            metering_record_id: (!id.is_empty()).then(|| id.to_string()),
            attempt_count: 1,
            version: 1,
            in_flight_until: None,
            claim_id: None,
            sent_quantity: None,
            possibly_billed: None,
            folding: false,
            unit_price: None,
        },
        recorded_at: Some(at("2026-03-15T13:05:00Z")),
    }
}

/// A CloudTrail call at `time` answering each (key, quantity, status, id).
fn call(id: &str, time: &str, answers: &[(&GroupKey, i64, &str, &str)]) -> TrailEvent {
    let record = |k: &GroupKey, q: i64| {
        serde_json::json!({
            "timestamp": k.hour.start().format("%b %-d, %Y %-I:%M:%S %p").to_string(),
            "customerIdentifier": "",
            "dimension": k.dimension, "quantity": q,
            "customerAWSAccountId": k.customer_aws_account_id, "licenseArn": k.license_arn,
        })
    };
    let results: Vec<serde_json::Value> = answers
        .iter()
        .map(|(k, q, status, rid)| {
            let mut r = serde_json::json!({"usageRecord": record(k, *q), "status": status});
            if !rid.is_empty() {
                r["meteringRecordId"] = serde_json::Value::from(*rid);
            }
            r
        })
        .collect();
    let requested: Vec<serde_json::Value> =
        answers.iter().map(|(k, q, _, _)| record(k, *q)).collect();
    let json = serde_json::json!({
        "eventID": id, "eventTime": time, "eventName": "BatchMeterUsage",
        "eventSource": "metering-marketplace.amazonaws.com", "awsRegion": "us-east-1",
        "requestParameters": {"usageRecords": requested},
        "responseElements": {"results": results, "unprocessedRecords": []},
    });
    let event = parse_cloudtrail_event(&json.to_string()).unwrap();
    assert!(event.problems.is_empty(), "{:?}", event.problems);
    event
}

fn window() -> TrailWindow {
    TrailWindow {
        from: hour("2026-03-15T00"),
        to: hour("2026-03-16T00"),
        visible_until: at("2026-03-15T13:45:00Z"),
    }
}

/// Each discrepancy as (kind, `account|dimension|period`, ours, AWS's).
fn listed(r: &Reconciliation) -> Vec<(DiscrepancyKind, String, Option<String>, Option<String>)> {
    r.discrepancies
        .iter()
        .map(|d| {
            (
                d.kind,
                format!("{}|{}|{}", d.key.account, d.key.dimension, d.key.period),
                d.ours.map(|q| q.to_string()),
                d.aws.map(|q| q.to_string()),
            )
        })
        .collect()
}

fn s(v: &str) -> Option<String> {
    Some(v.to_string())
}

/// Our one Success record of 5 (`id-1`) against two CloudTrail calls that billed
/// the same key 5 each, the second answered with `second_id`.
fn billed_twice(second_id: &str) -> Reconciliation {
    let k = key(LICENSE, ACCOUNT, "requests", "2026-03-15T10");
    let trail = vec![
        call("e1", "2026-03-15T11:05:00Z", &[(&k, 5, "Success", "id-1")]),
        call(
            "e2",
            "2026-03-15T11:06:00Z",
            &[(&k, 5, "Success", second_id)],
        ),
    ];
    reconcile_with_trail(
        &[ours(k, 5, AggregatedStatus::Success, "id-1")],
        &trail,
        &window(),
    )
}

#[test]
fn every_kind_of_disagreement_with_cloudtrail_is_listed_with_totals() {
    let agreed = key(LICENSE, ACCOUNT, "requests", "2026-03-15T10");
    let dup_agreed = key(LICENSE, ACCOUNT, "storage_gb", "2026-03-15T10");
    let missing = key(LICENSE, ACCOUNT, "requests", "2026-03-15T11");
    let extra_unknown = key(LICENSE_2, ACCOUNT_2, "requests", "2026-03-15T11");
    let extra_error = key(LICENSE, ACCOUNT, "storage_gb", "2026-03-15T11");
    let differs = key(LICENSE, ACCOUNT, "requests", "2026-03-15T12");
    let not_billed = key(LICENSE_2, ACCOUNT_2, "storage_gb", "2026-03-15T12");
    let outside = key(LICENSE, ACCOUNT, "requests", "2026-03-14T23");
    let recent = key(LICENSE, ACCOUNT, "storage_gb", "2026-03-15T12");
    let mut recent_record = ours(recent.clone(), 4, AggregatedStatus::Success, "id-recent");
    recent_record.recorded_at = Some(at("2026-03-15T13:50:00Z"));
    let our_records = vec![
        ours(agreed.clone(), 42, AggregatedStatus::Success, "id-agreed"),
        ours(
            dup_agreed.clone(),
            5,
            AggregatedStatus::DuplicateRecord,
            "id-dup",
        ),
        ours(missing.clone(), 7, AggregatedStatus::Success, "id-missing"),
        ours(extra_error.clone(), 3, AggregatedStatus::Error, ""),
        ours(differs.clone(), 10, AggregatedStatus::Success, "id-differs"),
        ours(
            not_billed.clone(),
            2,
            AggregatedStatus::CustomerNotSubscribed,
            "",
        ),
        ours(outside.clone(), 99, AggregatedStatus::Success, "id-outside"),
        recent_record,
    ];
    let trail = vec![
        call(
            "e1",
            "2026-03-15T11:05:00Z",
            &[
                (&agreed, 42, "Success", "id-agreed"),
                (&dup_agreed, 5, "Success", "id-dup"),
            ],
        ),
        // A lost answer re-sent: DuplicateRecord with the original id.
        call(
            "e2",
            "2026-03-15T11:20:00Z",
            &[(&dup_agreed, 5, "DuplicateRecord", "id-dup")],
        ),
        call(
            "e3",
            "2026-03-15T12:05:00Z",
            &[
                (&extra_unknown, 6, "Success", "id-x"),
                (&extra_error, 3, "Success", "id-e"),
                (&not_billed, 2, "CustomerNotSubscribed", ""),
            ],
        ),
        call(
            "e4",
            "2026-03-15T13:05:00Z",
            &[(&differs, 12, "Success", "id-differs")],
        ),
        call(
            "e5",
            "2026-03-15T00:10:00Z",
            &[(&outside, 99, "Success", "id-outside")],
        ),
    ];

    let r = reconcile_with_trail(&our_records, &trail, &window());

    let got = listed(&r);
    let expected = vec![
        (
            DiscrepancyKind::MissingOnAws,
            "111122223333|requests|2026-03-15T11".into(),
            s("7"),
            None,
        ),
        (
            DiscrepancyKind::QuantityDiffers,
            "111122223333|requests|2026-03-15T12".into(),
            s("10"),
            s("12"),
        ),
        (
            DiscrepancyKind::ExtraOnAws,
            "111122223333|storage_gb|2026-03-15T11".into(),
            None,
            s("3"),
        ),
        (
            DiscrepancyKind::ExtraOnAws,
            "444455556666|requests|2026-03-15T11".into(),
            None,
            s("6"),
        ),
    ];
    assert_eq!(got, expected);
    assert_eq!(
        r.agreed, 2,
        "the Success and the lost-answer DuplicateRecord"
    );
    assert_eq!(r.compared, 7, "not-yet-visible keys are compared too");
    assert_eq!(r.not_yet_visible.len(), 1);
    assert_eq!(r.not_yet_visible[0].key.dimension, "storage_gb");
    let total = |k| r.totals[&k];
    assert_eq!(total(DiscrepancyKind::MissingOnAws).count, 1);
    assert_eq!(total(DiscrepancyKind::ExtraOnAws).count, 2);
    assert_eq!(total(DiscrepancyKind::ExtraOnAws).aws, Quantity::units(9));
    assert_eq!(
        total(DiscrepancyKind::QuantityDiffers).ours,
        Quantity::units(10)
    );
    let error_note = r.discrepancies[2].note.as_deref().unwrap();
    assert!(error_note.contains("our table says Error"), "{error_note}");
    assert!(!r.is_clean());
}

#[test]
fn the_same_hour_billed_twice_is_a_quantity_discrepancy() {
    let r = billed_twice("id-2");
    assert_eq!(r.discrepancies.len(), 1);
    let d = &r.discrepancies[0];
    assert_eq!(d.kind, DiscrepancyKind::QuantityDiffers);
    assert_eq!(d.aws, Some(Quantity::units(10)));
    assert!(d.note.as_deref().unwrap().contains("2 times"));
}

#[test]
fn an_identical_retry_answered_success_is_one_billing() {
    let r = billed_twice("id-1");
    assert!(r.is_clean(), "{:#?}", r.discrepancies);
    assert_eq!(r.agreed, 1);
}

fn daily(account: &str, dimension: &str, day: &str, quantity: &str, id: &str) -> AwsDailyUsage {
    AwsDailyUsage {
        aws_account_id: account.into(),
        product_code: PRODUCT.into(),
        dimension: dimension.into(),
        usage_date: NaiveDate::parse_from_str(day, "%Y-%m-%d").unwrap(),
        quantity: Quantity::parse(quantity).unwrap(),
        agreement_id: None,
        usage_feed_id: id.into(),
        line: 2,
    }
}

#[test]
fn sdds_days_are_compared_per_account_product_dimension_and_day() {
    let our_records = vec![
        // Day 15, requests: 10 + 32 over two hours and two licenses = 42.
        ours(
            key(LICENSE, ACCOUNT, "requests", "2026-03-15T10"),
            10,
            AggregatedStatus::Success,
            "a",
        ),
        ours(
            key(LICENSE_2, ACCOUNT, "requests", "2026-03-15T23"),
            32,
            AggregatedStatus::DuplicateRecord,
            "b",
        ),
        // Not billed: not counted.
        ours(
            key(LICENSE, ACCOUNT, "requests", "2026-03-15T11"),
            1000,
            AggregatedStatus::Error,
            "",
        ),
        // Day 15, storage: 7 vs the feed's 7.004 (rounding): agreed.
        ours(
            key(LICENSE, ACCOUNT, "storage_gb", "2026-03-15T01"),
            7,
            AggregatedStatus::Success,
            "c",
        ),
        // Day 16, requests: missing from the feed.
        ours(
            key(LICENSE, ACCOUNT, "requests", "2026-03-16T00"),
            3,
            AggregatedStatus::Success,
            "d",
        ),
        // Day 15, other account: 5 vs 6.
        ours(
            key(LICENSE_2, ACCOUNT_2, "requests", "2026-03-15T05"),
            5,
            AggregatedStatus::Success,
            "e",
        ),
        // Outside the window.
        ours(
            key(LICENSE, ACCOUNT, "requests", "2026-03-17T00"),
            8,
            AggregatedStatus::Success,
            "f",
        ),
    ];
    let feed = vec![
        daily(ACCOUNT, "requests", "2026-03-15", "40", "uf-1"),
        daily(ACCOUNT, "requests", "2026-03-15", "2", "uf-2"),
        daily(ACCOUNT, "storage_gb", "2026-03-15", "7.004", "uf-3"),
        daily(ACCOUNT_2, "requests", "2026-03-15", "6", "uf-4"),
        daily(ACCOUNT_2, "storage_gb", "2026-03-16", "1.5", "uf-5"),
        daily(ACCOUNT, "requests", "2026-03-17", "8", "uf-6"),
    ];
    let window = DayWindow {
        from: NaiveDate::from_ymd_opt(2026, 3, 15).unwrap(),
        to: NaiveDate::from_ymd_opt(2026, 3, 17).unwrap(),
    };
    let r = reconcile_with_sdds(&our_records, &feed, &window);
    let got = listed(&r);
    assert_eq!(
        got,
        vec![
            (
                DiscrepancyKind::MissingOnAws,
                "111122223333|requests|2026-03-16".into(),
                s("3"),
                None
            ),
            (
                DiscrepancyKind::QuantityDiffers,
                "444455556666|requests|2026-03-15".into(),
                s("5"),
                s("6")
            ),
            (
                DiscrepancyKind::ExtraOnAws,
                "444455556666|storage_gb|2026-03-16".into(),
                None,
                s("1.5")
            ),
        ]
    );
    assert_eq!(r.agreed, 2);
    assert_eq!(r.ours_total, Quantity::units(10 + 32 + 7 + 3 + 5));
    let first_day = r
        .discrepancies
        .iter()
        .find(|d| d.kind == DiscrepancyKind::QuantityDiffers)
        .unwrap();
    assert_eq!(first_day.key.license.as_deref(), Some(LICENSE_2));
    assert_eq!(first_day.aws_ids, ["uf-4"]);
}

#[test]
fn trail_rows_join_each_answer_to_our_record() {
    let billed = key(LICENSE, ACCOUNT, "requests", "2026-03-15T10");
    let changed = key(LICENSE, ACCOUNT, "requests", "2026-03-15T11");
    let unknown = key(LICENSE_2, ACCOUNT_2, "requests", "2026-03-15T11");
    let mut table = BTreeMap::new();
    table.insert(
        billed.clone(),
        ours(billed.clone(), 4, AggregatedStatus::Success, "id-1").record,
    );
    table.insert(
        changed.clone(),
        ours(changed.clone(), 9, AggregatedStatus::Success, "id-2").record,
    );
    let trail = vec![
        call(
            "e1",
            "2026-03-15T11:05:00Z",
            &[(&billed, 4, "Success", "id-1")],
        ),
        call(
            "e2",
            "2026-03-15T12:05:00Z",
            &[
                (&changed, 8, "Success", "id-2"),
                (&unknown, 1, "Success", "id-3"),
            ],
        ),
    ];
    let rows = join_trail(&trail, &table);
    let got: Vec<(&str, bool, &str)> = rows
        .iter()
        .map(|r| (r.event_id.as_str(), r.consistent, r.note.as_str()))
        .collect();
    assert_eq!(
        got,
        vec![
            ("e2", false, "AWS billed 8; our table says 9"),
            ("e2", false, "no record in our table for this group"),
            ("e1", true, "billed"),
        ]
    );
}

proptest::proptest! {
    /// Whatever we and AWS billed, every key lands in exactly one bucket (agreed,
    /// a discrepancy, or not yet visible), and the totals add up.
    #[test]
    fn every_key_is_accounted_for_once(
        cells in proptest::collection::vec((0u8..6, proptest::option::of(0i64..4), proptest::option::of(0i64..4)), 0..30),
    ) {
        let mut our_records = Vec::new();
        let mut answers = Vec::new();
        let mut keys = BTreeSet::new();
        for (i, (slot, mine, theirs)) in cells.iter().enumerate() {
            let k = key(LICENSE, ACCOUNT, &format!("d{slot}"), &format!("2026-03-15T{:02}", i % 24));
            if !keys.insert(k.clone()) { continue; }
            if let Some(q) = mine {
                our_records.push(ours(k.clone(), *q, AggregatedStatus::Success, "x"));
            }
            if let Some(q) = theirs {
                answers.push((k.clone(), *q));
            }
        }
        let trail: Vec<TrailEvent> = answers
            .iter()
            .enumerate()
            .map(|(i, (k, q))| call(&format!("e{i}"), "2026-03-15T12:00:00Z", &[(k, *q, "Success", &format!("id{i}"))]))
            .collect();
        let r = reconcile_with_trail(&our_records, &trail, &window());
        let either = keys.iter().filter(|k| {
            our_records.iter().any(|o| &o.record.key == *k) || answers.iter().any(|(a, _)| a == *k)
        }).count();
        proptest::prop_assert_eq!(r.compared, either);
        proptest::prop_assert_eq!(r.agreed + r.discrepancies.len() + r.not_yet_visible.len(), either);
        let counted: usize = r.totals.values().map(|t| t.count).sum();
        proptest::prop_assert_eq!(counted, r.discrepancies.len());
        let ours_sum: i64 = our_records.iter().map(|o| o.record.quantity).sum();
        proptest::prop_assert_eq!(r.ours_total, Quantity::units(ours_sum));
    }
}

//! The fold rules: quantities, versions, the quantity cap, allocations and when a record is due.

use super::*;
use crate::memory::fixtures::pending_record;
use crate::model::{Allocation, Attr, Tag, attr};
use crate::time::{HourBucket, parse_usage_timestamp};
use proptest::prelude::*;
use std::collections::BTreeMap;

const LICENSE: &str = "arn:aws:license-manager::123456789012:license:l-0123456789abcdef";
const ACCOUNT: &str = "111122223333";
const PRODUCT: &str = "prod-abc123";

fn instant(s: &str) -> Instant {
    parse_usage_timestamp(s).unwrap()
}

fn key() -> GroupKey {
    GroupKey {
        license_arn: LICENSE.to_string(),
        customer_aws_account_id: ACCOUNT.to_string(),
        dimension: "requests".to_string(),
        hour: "2026-11-30T09".parse().unwrap(),
    }
}

fn alloc(quantity: i64, team: &str) -> Allocation {
    Allocation {
        quantity,
        tags: if team.is_empty() {
            vec![]
        } else {
            vec![Tag {
                key: "team".to_string(),
                value: team.to_string(),
            }]
        },
    }
}

fn row(second: u32, quantity: i64, allocations: Option<Vec<Allocation>>) -> ValidUsageRow {
    let timestamp = format!("2026-11-30T09:{:02}:{:02}Z", second / 60, second % 60);
    ValidUsageRow {
        license_arn: LICENSE.to_string(),
        sort_key: format!("{ACCOUNT}#requests#{timestamp}"),
        customer_aws_account_id: ACCOUNT.to_string(),
        dimension: "requests".to_string(),
        timestamp: instant(&timestamp),
        quantity,
        allocations,
        product_code: None,
    }
}

fn pending(quantity: i64, allocations: Option<Vec<Allocation>>, version: u64) -> AggregatedRecord {
    AggregatedRecord {
        allocations,
        attempt_count: 2,
        ..pending_record(key(), PRODUCT, quantity, version)
    }
}

#[test]
fn fold_cases() {
    struct Case {
        name: &'static str,
        existing: Option<AggregatedRecord>,
        rows: Vec<ValidUsageRow>,
        quantity: i64,
        allocations: Option<Vec<Allocation>>,
        version: u64,
    }
    let cases = [
        Case {
            name: "new untagged record",
            existing: None,
            rows: vec![row(1, 3, None), row(2, 4, None)],
            quantity: 7,
            allocations: None,
            version: 1,
        },
        Case {
            name: "new tagged record merges tag sets",
            existing: None,
            rows: vec![
                row(1, 3, Some(vec![alloc(3, "a")])),
                row(2, 5, Some(vec![alloc(1, "a"), alloc(4, "b")])),
            ],
            quantity: 8,
            allocations: Some(vec![alloc(4, "a"), alloc(4, "b")]),
            version: 1,
        },
        Case {
            name: "zero rows add nothing and contribute no allocations",
            existing: None,
            rows: vec![
                row(1, 3, Some(vec![alloc(3, "a")])),
                row(2, 0, Some(vec![alloc(0, "z")])),
                row(3, 0, None),
            ],
            quantity: 3,
            allocations: Some(vec![alloc(3, "a")]),
            version: 1,
        },
        Case {
            name: "all-zero group is an untagged zero record",
            existing: None,
            rows: vec![row(1, 0, Some(vec![alloc(0, "z")])), row(2, 0, None)],
            quantity: 0,
            allocations: None,
            version: 1,
        },
        Case {
            name: "late rows fold into a tagged record",
            existing: Some(pending(10, Some(vec![alloc(6, "a"), alloc(4, "b")]), 3)),
            rows: vec![row(1, 5, Some(vec![alloc(2, "b"), alloc(3, "c")]))],
            quantity: 15,
            allocations: Some(vec![alloc(6, "a"), alloc(6, "b"), alloc(3, "c")]),
            version: 4,
        },
        Case {
            name: "late rows fold into an untagged record",
            existing: Some(pending(10, None, 1)),
            rows: vec![row(1, 5, None), row(2, 0, None)],
            quantity: 15,
            allocations: None,
            version: 2,
        },
        Case {
            name: "tagged late rows into a zero record",
            existing: Some(pending(0, None, 1)),
            rows: vec![row(1, 5, Some(vec![alloc(5, "a")]))],
            quantity: 5,
            allocations: Some(vec![alloc(5, "a")]),
            version: 2,
        },
        Case {
            name: "untagged late rows drop a zero record's zero allocations",
            existing: Some(pending(0, Some(vec![alloc(0, "a")]), 1)),
            rows: vec![row(1, 5, None)],
            quantity: 5,
            allocations: None,
            version: 2,
        },
        Case {
            name: "zero late rows keep a zero record as it was",
            existing: Some(pending(0, Some(vec![alloc(0, "a")]), 1)),
            rows: vec![row(1, 0, None)],
            quantity: 0,
            allocations: Some(vec![alloc(0, "a")]),
            version: 2,
        },
        Case {
            name: "exactly the cap",
            existing: Some(pending(MAX_QUANTITY - 1, None, 1)),
            rows: vec![row(1, 1, None)],
            quantity: MAX_QUANTITY,
            allocations: None,
            version: 2,
        },
    ];
    for case in cases {
        let got = fold(&key(), PRODUCT, case.existing.as_ref(), &case.rows).unwrap();
        assert_eq!(got.quantity, case.quantity, "{}", case.name);
        assert_eq!(got.allocations, case.allocations, "{}", case.name);
        assert_eq!(got.version, case.version, "{}", case.name);
        assert_eq!(got.key, key(), "{}", case.name);
        assert_eq!(got.status, AggregatedStatus::Pending, "{}", case.name);
        let attempts = case.existing.as_ref().map_or(0, |r| r.attempt_count);
        assert_eq!(
            got.attempt_count, attempts,
            "{}: a fold keeps the attempt count",
            case.name
        );
        assert_eq!(got.product_code, PRODUCT);
    }
}

#[test]
fn fold_refuses_what_it_cannot_count() {
    let submitted = AggregatedRecord {
        status: AggregatedStatus::Success,
        ..pending(5, None, 2)
    };
    assert!(matches!(
        fold(&key(), PRODUCT, Some(&submitted), &[row(1, 1, None)]),
        Err(FoldError::NotPending {
            status: AggregatedStatus::Success,
            ..
        })
    ));
    let mut other = pending(5, None, 1);
    other.key.dimension = "storage".to_string();
    assert!(matches!(
        fold(&key(), PRODUCT, Some(&other), &[]),
        Err(FoldError::KeyMismatch { .. })
    ));
    let mut foreign = row(1, 1, None);
    foreign.timestamp = instant("2026-11-30T10:00:00Z");
    assert!(matches!(
        fold(&key(), PRODUCT, None, &[foreign]),
        Err(FoldError::ForeignRow { .. })
    ));
    let err = fold(
        &key(),
        PRODUCT,
        Some(&pending(MAX_QUANTITY, None, 1)),
        &[row(1, 1, None)],
    )
    .unwrap_err();
    assert_eq!(
        err,
        FoldError::QuantityOverflow {
            key: key(),
            total: i128::from(MAX_QUANTITY) + 1
        }
    );
    assert!(err.to_string().contains("2147483648"));
    let mixed = [row(1, 3, Some(vec![alloc(3, "a")])), row(2, 4, None)];
    assert_eq!(
        fold(&key(), PRODUCT, None, &mixed),
        Err(FoldError::AllocationsDoNotSum {
            key: key(),
            allocated: 3,
            quantity: 7
        })
    );
}

#[test]
fn cap_split_rejects_only_rows_that_do_not_fit() {
    // GIVEN a record 10 below the cap
    let rows = vec![
        row(1, 4, None),
        row(2, 7, None),
        row(3, 6, None),
        row(4, 1, None),
    ];
    // WHEN rows of 4, 7, 6, 1 arrive
    let split = split_within_cap(MAX_QUANTITY - 10, rows);
    // THEN 4 and 6 fit (reaching the cap exactly), 7 does not, and 1 no longer fits
    let accepted: Vec<i64> = split.accepted.iter().map(|r| r.quantity).collect();
    assert_eq!(accepted, vec![4, 6]);
    let rejected: Vec<(String, ReasonCode)> = split.rejected.into_iter().map(Into::into).collect();
    assert_eq!(
        rejected,
        vec![
            (row(2, 0, None).sort_key, ReasonCode::QuantityTooLarge),
            (row(4, 0, None).sort_key, ReasonCode::QuantityTooLarge),
        ]
    );
    // Zero rows always fit, even at the cap.
    let at_cap = split_within_cap(MAX_QUANTITY, vec![row(1, 0, None)]);
    assert_eq!(at_cap.accepted.len(), 1);
}

#[test]
fn commits_chain_versions_and_hold_at_most_99_rows() {
    let now = instant("2026-11-30T10:30:00Z");
    let rows: Vec<ValidUsageRow> = (0..250).map(|i| row(i, 2, None)).collect();
    let commits = plan_commits(&key(), PRODUCT, None, &rows, now).unwrap();
    assert_eq!(
        commits
            .iter()
            .map(|c| c.claimed_rows.len())
            .collect::<Vec<_>>(),
        vec![99, 99, 52]
    );
    assert_eq!(
        commits
            .iter()
            .map(|c| c.expected_version)
            .collect::<Vec<_>>(),
        vec![None, Some(1), Some(2)]
    );
    assert_eq!(
        commits.iter().map(|c| c.record.version).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    assert_eq!(
        commits
            .iter()
            .map(|c| c.record.quantity)
            .collect::<Vec<_>>(),
        vec![198, 396, 500]
    );
    assert!(commits.iter().all(|c| c.now == now));
    assert_eq!(
        commits[0].claimed_rows[0],
        (LICENSE.to_string(), rows[0].sort_key.clone())
    );

    let existing = pending(10, None, 7);
    let late = plan_commits(&key(), PRODUCT, Some(&existing), &rows[..1], now).unwrap();
    assert_eq!(late.len(), 1);
    assert_eq!(late[0].expected_version, Some(7));
    assert_eq!(late[0].record.version, 8);
    assert_eq!(late[0].record.quantity, 12);

    assert!(
        plan_commits(&key(), PRODUCT, Some(&existing), &[], now)
            .unwrap()
            .is_empty()
    );
    assert_eq!(commit_chunks(&rows).count(), 3);
}

#[test]
fn no_fold_into_a_record_in_flight() {
    let now = instant("2026-11-30T10:30:00Z");
    let held = AggregatedRecord {
        in_flight_until: Some(now + Duration::minutes(1)),
        ..pending(5, None, 3)
    };
    assert!(matches!(
        plan_commits(&key(), PRODUCT, Some(&held), &[row(1, 1, None)], now),
        Err(FoldError::InFlight { .. })
    ));
    let expired_claim = AggregatedRecord {
        in_flight_until: Some(now),
        ..held
    };
    assert!(
        plan_commits(
            &key(),
            PRODUCT,
            Some(&expired_claim),
            &[row(1, 1, None)],
            now
        )
        .is_ok()
    );
}

fn raw(second: u32, quantity: &str, team: Option<&str>) -> RawUsageRow {
    let timestamp = format!("2026-11-30T09:{:02}:{:02}Z", second / 60, second % 60);
    let mut attrs = BTreeMap::new();
    attrs.insert(
        attr::CUSTOMER_ACCOUNT.to_string(),
        Attr::S(ACCOUNT.to_string()),
    );
    attrs.insert(attr::DIMENSION.to_string(), Attr::S("requests".to_string()));
    attrs.insert(attr::TIMESTAMP.to_string(), Attr::S(timestamp.clone()));
    attrs.insert(attr::QUANTITY.to_string(), Attr::N(quantity.to_string()));
    if let Some(team) = team {
        let tag = Attr::M(BTreeMap::from([
            ("key".to_string(), Attr::S("team".to_string())),
            ("value".to_string(), Attr::S(team.to_string())),
        ]));
        let allocation = Attr::M(BTreeMap::from([
            (
                "allocatedUsageQuantity".to_string(),
                Attr::N(quantity.to_string()),
            ),
            ("tags".to_string(), Attr::L(vec![tag])),
        ]));
        attrs.insert(
            attr::USAGE_ALLOCATIONS.to_string(),
            Attr::L(vec![allocation]),
        );
    }
    RawUsageRow {
        license_arn: LICENSE.to_string(),
        sort_key: format!("{ACCOUNT}#requests#{timestamp}"),
        attrs,
    }
}

#[test]
fn plan_aggregation_accounts_for_every_row() {
    let ctx = GuardrailContext::new(instant("2026-11-30T10:30:00Z"), PRODUCT);
    // GIVEN an existing tagged record 5 below the cap, and late rows: two that fit,
    // one untagged (mixing), one malformed, one over the cap
    let existing = pending(
        MAX_QUANTITY - 5,
        Some(vec![alloc(MAX_QUANTITY - 5, "a")]),
        4,
    );
    let rows = vec![
        raw(1, "2", Some("a")),
        raw(2, "3", Some("b")),
        raw(3, "1", None),
        raw(4, "1.5", Some("a")),
        raw(5, "1", Some("c")),
    ];
    let plan = plan_aggregation(&key(), &rows, Some(&existing), &ctx).unwrap();
    let claimed: Vec<&str> = plan
        .commits
        .iter()
        .flat_map(|c| &c.claimed_rows)
        .map(|(_, k)| k.as_str())
        .collect();
    assert_eq!(
        claimed,
        vec![rows[0].sort_key.as_str(), rows[1].sort_key.as_str()]
    );
    let rejected: Vec<(String, ReasonCode)> =
        plan.rejected.iter().cloned().map(Into::into).collect();
    assert_eq!(
        rejected,
        vec![
            (
                rows[2].sort_key.clone(),
                ReasonCode::MixedAllocatedAndUnallocated
            ),
            (rows[3].sort_key.clone(), ReasonCode::NonIntegerQuantity),
            (rows[4].sort_key.clone(), ReasonCode::QuantityTooLarge),
        ]
    );
    let record = plan.final_record().unwrap();
    assert_eq!(record.quantity, MAX_QUANTITY);
    assert_eq!(
        record.allocations,
        Some(vec![alloc(MAX_QUANTITY - 3, "a"), alloc(3, "b")])
    );
    assert_eq!(plan.commits[0].expected_version, Some(4));

    // A submitted hour: every row is rejected, nothing is committed.
    let billed = AggregatedRecord {
        status: AggregatedStatus::Success,
        ..existing.clone()
    };
    let late = plan_aggregation(&key(), &rows[..2], Some(&billed), &ctx).unwrap();
    assert!(late.commits.is_empty());
    assert!(
        late.rejected
            .iter()
            .all(|r| r.reason == ReasonCode::HourAlreadySubmitted)
    );
    // A record in flight: retry later, nothing decided.
    let held = AggregatedRecord {
        in_flight_until: Some(ctx.now + Duration::minutes(5)),
        ..existing
    };
    assert!(matches!(
        plan_aggregation(&key(), &rows, Some(&held), &ctx),
        Err(FoldError::InFlight { .. })
    ));
}

#[test]
fn zero_quantity_policy_parses_strictly() {
    assert_eq!(ZeroQuantityPolicy::default(), ZeroQuantityPolicy::Defer);
    for policy in [
        ZeroQuantityPolicy::Defer,
        ZeroQuantityPolicy::Submit,
        ZeroQuantityPolicy::Skip,
    ] {
        assert_eq!(policy.to_string().parse::<ZeroQuantityPolicy>(), Ok(policy));
    }
    assert_eq!(
        " skip\n".parse::<ZeroQuantityPolicy>(),
        Ok(ZeroQuantityPolicy::Skip)
    );
    for bad in ["", "Defer", "never", "submit-all"] {
        let err = bad.parse::<ZeroQuantityPolicy>().unwrap_err();
        assert_eq!(err, InvalidZeroQuantityPolicy(bad.to_string()));
        assert!(
            err.to_string()
                .contains("\"defer\", \"submit\" or \"skip\""),
            "{err}"
        );
    }
}

fn record_at(hour: &str, quantity: i64) -> AggregatedRecord {
    AggregatedRecord {
        key: GroupKey {
            hour: hour.parse::<HourBucket>().unwrap(),
            ..key()
        },
        ..pending(quantity, None, 1)
    }
}

#[test]
fn submission_due_cases() {
    use ZeroQuantityPolicy::{Defer, Skip, Submit};
    let now = "2026-11-30T10:30:00Z";
    let cases = [
        // (name, hour, quantity, now, policy, due)
        ("non-zero at once", "2026-11-30T09", 5, now, Defer, true),
        (
            "non-zero at once under skip",
            "2026-11-30T09",
            5,
            now,
            Skip,
            true,
        ),
        (
            "zero under submit at once",
            "2026-11-30T09",
            0,
            now,
            Submit,
            true,
        ),
        (
            "zero under skip never",
            "2026-11-29T11",
            0,
            now,
            Skip,
            false,
        ),
        (
            "zero deferred mid-window",
            "2026-11-30T09",
            0,
            now,
            Defer,
            false,
        ),
        (
            "zero deferred at the oldest edge",
            "2026-11-29T11",
            0,
            now,
            Defer,
            true,
        ),
        (
            "zero one hour before the edge",
            "2026-11-29T12",
            0,
            now,
            Defer,
            false,
        ),
        (
            "expired non-zero never",
            "2026-11-29T10",
            5,
            now,
            Submit,
            false,
        ),
        (
            "last month zero before 03:00 on the 1st",
            "2026-11-30T23",
            0,
            "2026-12-01T02:59:59Z",
            Defer,
            false,
        ),
        (
            "last month zero from 03:00 on the 1st",
            "2026-11-30T23",
            0,
            "2026-12-01T03:00:00Z",
            Defer,
            true,
        ),
        (
            "last month zero after the grace",
            "2026-11-30T23",
            0,
            "2026-12-01T06:00:00Z",
            Defer,
            false,
        ),
        (
            "this month zero at 03:00 on the 1st",
            "2026-12-01T01",
            0,
            "2026-12-01T03:00:00Z",
            Defer,
            false,
        ),
    ];
    for (name, hour, quantity, now, policy, due) in cases {
        assert_eq!(
            submission_due(&record_at(hour, quantity), instant(now), policy),
            due,
            "{name}"
        );
    }
    let billed = AggregatedRecord {
        status: AggregatedStatus::Success,
        ..record_at("2026-11-30T09", 5)
    };
    assert!(!submission_due(&billed, instant(now), Submit));
    assert!(is_skipped_zero(&record_at("2026-11-30T09", 0), Skip));
    assert!(!is_skipped_zero(&record_at("2026-11-30T09", 1), Skip));
    assert!(!is_skipped_zero(&record_at("2026-11-30T09", 0), Defer));
}

/// A group row: quantity mostly small, sometimes huge (to hit the cap), tagged or
/// not per `tagged`, over a few teams.
fn arb_rows(tagged: bool) -> impl Strategy<Value = Vec<ValidUsageRow>> {
    let quantity = prop_oneof![8 => 0i64..50, 1 => 0i64..=MAX_QUANTITY];
    proptest::collection::vec((quantity, 0usize..4, 0usize..4), 0..40).prop_map(move |specs| {
        specs
            .into_iter()
            .enumerate()
            .map(|(i, (q, team_a, team_b))| {
                let allocations = tagged.then(|| {
                    let a = q / 3;
                    vec![
                        alloc(a, &format!("t{team_a}")),
                        alloc(q - a, &format!("t{team_b}")),
                    ]
                });
                let mut r = row(i as u32 % 3600, q, allocations);
                r.sort_key = format!("{}#{i}", r.sort_key);
                r
            })
            .collect()
    })
}

fn arb_existing(tagged: bool) -> impl Strategy<Value = Option<AggregatedRecord>> {
    prop::option::of((0i64..=MAX_QUANTITY, 1u64..100)).prop_map(move |spec| {
        spec.map(|(q, version)| {
            let allocations = tagged.then(|| vec![alloc(q, "t0")]);
            pending(q, allocations, version)
        })
    })
}

fn arb_case() -> impl Strategy<Value = (Option<AggregatedRecord>, Vec<ValidUsageRow>)> {
    prop::bool::ANY.prop_flat_map(|tagged| (arb_existing(tagged), arb_rows(tagged)))
}

/// Group checks, cap split and fold, as the aggregator chains them.
fn run(
    existing: Option<&AggregatedRecord>,
    rows: Vec<ValidUsageRow>,
) -> (GuardrailOutcome, AggregatedRecord) {
    let group = guardrails::validate_group(rows, existing);
    let capped = split_within_cap(existing.map_or(0, |r| r.quantity), group.accepted);
    let record = fold(&key(), PRODUCT, existing, &capped.accepted).unwrap();
    let mut rejected = group.rejected;
    rejected.extend(capped.rejected);
    (
        GuardrailOutcome {
            accepted: capped.accepted,
            rejected,
        },
        record,
    )
}

proptest! {
    #[test]
    fn fold_equals_the_sum_of_accepted_quantities((existing, rows) in arb_case()) {
        let (outcome, record) = run(existing.as_ref(), rows.clone());
        let base = existing.as_ref().map_or(0, |r| r.quantity);
        prop_assert_eq!(record.quantity, base + outcome.accepted.iter().map(|r| r.quantity).sum::<i64>());
        prop_assert!(record.quantity <= MAX_QUANTITY);
        prop_assert_eq!(outcome.accepted.len() + outcome.rejected.len(), rows.len());
        prop_assert!(outcome.rejected.iter().all(|r| r.reason == ReasonCode::QuantityTooLarge));
    }

    #[test]
    fn merged_allocations_sum_to_the_quantity((existing, rows) in arb_case()) {
        let (_, record) = run(existing.as_ref(), rows);
        if let Some(allocations) = &record.allocations {
            prop_assert_eq!(allocations.iter().map(|a| a.quantity).sum::<i64>(), record.quantity);
        }
    }

    #[test]
    fn fold_is_order_independent((existing, rows) in arb_case(), rotate in any::<usize>()) {
        let (_, record) = run(existing.as_ref(), rows.clone());
        let mut shuffled = rows;
        shuffled.reverse();
        if !shuffled.is_empty() {
            let len = shuffled.len();
            shuffled.rotate_left(rotate % len);
        }
        let (_, again) = run(existing.as_ref(), shuffled);
        prop_assert_eq!(again, record);
    }

    #[test]
    fn chunked_commits_end_where_one_fold_ends((existing, rows) in arb_case()) {
        let (outcome, record) = run(existing.as_ref(), rows);
        let now = instant("2026-11-30T10:30:00Z");
        let commits = plan_commits(&key(), PRODUCT, existing.as_ref(), &outcome.accepted, now).unwrap();
        prop_assert!(commits.iter().all(|c| c.claimed_rows.len() <= MAX_ROWS_PER_COMMIT));
        prop_assert_eq!(commits.iter().map(|c| c.claimed_rows.len()).sum::<usize>(), outcome.accepted.len());
        if let Some(last) = commits.last() {
            prop_assert_eq!(last.record.quantity, record.quantity);
            prop_assert_eq!(&last.record.allocations, &record.allocations);
            let first_version = existing.as_ref().map_or(0, |r| r.version);
            prop_assert_eq!(last.record.version, first_version + commits.len() as u64);
        }
    }
}

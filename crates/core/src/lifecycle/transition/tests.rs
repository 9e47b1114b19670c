//! The subscriber's status machine: every event on every row state, in any order.

use super::*;
use crate::lifecycle::fixtures::*;

/// The hours of 2026-11-30 the cases happen at.
const H09: &str = "2026-11-30T09:00:00Z";
const H10: &str = "2026-11-30T10:00:00Z";
const H11: &str = "2026-11-30T11:00:00Z";
const H12: &str = "2026-11-30T12:00:00Z";
const H13: &str = "2026-11-30T13:00:00Z";

/// License Updated for a replacement agreement of the same license and account.
fn renewed(time: &str) -> MarketplaceEvent {
    MarketplaceEvent::LicenseUpdated {
        license_arn: LICENSE.into(),
        account: ACCOUNT.into(),
        product_code: Some(PRODUCT.into()),
        agreement_id: "agmt-renewed".into(),
        time: t(time),
    }
}

/// The row `event` writes over `row` (it must write one).
fn written(row: Option<&Subscriber>, event: &MarketplaceEvent) -> Subscriber {
    apply(row, event).row().cloned().unwrap()
}

/// Applies events in order the way the subscription handler does (write what
/// `apply` says, bump the version like the store), returning the row and the kinds.
fn run(events: &[MarketplaceEvent]) -> (Option<Subscriber>, Vec<&'static str>) {
    let mut row: Option<Subscriber> = None;
    let mut kinds = Vec::new();
    for event in events {
        let transition = apply(row.as_ref(), event);
        kinds.push(match &transition {
            Transition::Unchanged { .. } => "unchanged",
            Transition::Write { .. } => "write",
            Transition::ReactivationRefused { .. } => "refused",
            Transition::NoMatchingRow { .. } => "no-row",
        });
        if let Transition::Write { row: mut next, .. } = transition {
            next.version += 1;
            row = Some(next);
        }
    }
    (row, kinds)
}

#[test]
fn license_updated_creates_an_active_row() {
    let transition = apply(None, &updated(H10));
    let row = transition.row().unwrap();
    assert_eq!(row.license_arn, LICENSE);
    assert_eq!(row.customer_aws_account_id, ACCOUNT);
    assert_eq!(row.product_code.as_deref(), Some(PRODUCT));
    assert_eq!(row.agreement_id.as_deref(), Some(AGREEMENT));
    assert_eq!(row.agreement_status, Some(AgreementStatus::Active));
    assert_eq!(row.subscription_status, Some(SubscriptionStatus::Active));
    assert_eq!(row.agreement_event_at, Some(t(H10)));
    assert_eq!(row.subscription_event_at, Some(t(H10)));
    assert_eq!(
        row.version, 0,
        "the version read is kept for the conditional write"
    );
}

#[test]
fn license_updated_keeps_registration_fields() {
    // GIVEN a row the register Lambda created (regions, no statuses, stored version 0)
    let mut registered = Subscriber::new(LICENSE, ACCOUNT);
    registered.registered_regions = vec!["eu-west-1".into()];
    registered.product_code = Some(PRODUCT.into());
    // WHEN License Updated arrives THEN only lifecycle fields change
    let row = written(Some(&registered), &updated(H10));
    assert_eq!(row.registered_regions, vec!["eu-west-1".to_string()]);
    assert_eq!(row.subscription_status, Some(SubscriptionStatus::Active));
}

#[test]
fn deprovisioned_opens_a_one_hour_window_and_keeps_the_agreement() {
    let (row, kinds) = run(&[updated(H10), deprovisioned("2026-11-30T12:15:30Z")]);
    let row = row.unwrap();
    assert_eq!(kinds, ["write", "write"]);
    assert_eq!(
        row.subscription_status,
        Some(SubscriptionStatus::Deprovisioning)
    );
    assert_eq!(row.deprovisioning_expiry, Some(t("2026-11-30T13:15:30Z")));
    assert_eq!(row.subscription_event_at, Some(t("2026-11-30T12:15:30Z")));
    // The agreement and the subscription never move together.
    assert_eq!(row.agreement_status, Some(AgreementStatus::Active));
    assert_eq!(row.agreement_event_at, Some(t(H10)));
}

#[test]
fn ended_sets_only_the_agreement_inactive() {
    let (row, kinds) = run(&[updated(H10), ended(H11)]);
    let row = row.unwrap();
    assert_eq!(kinds, ["write", "write"]);
    assert_eq!(row.agreement_status, Some(AgreementStatus::Inactive));
    assert_eq!(row.subscription_status, Some(SubscriptionStatus::Active));
    assert_eq!(row.subscription_event_at, Some(t(H10)));
    assert_eq!(row.deprovisioning_expiry, None);
}

/// Every ordering case: the sequence of events, the kind of each transition, and the
/// final (agreementStatus, subscriptionStatus).
#[test]
fn ordering_table() {
    use AgreementStatus as A;
    use SubscriptionStatus as S;
    type Case = (
        &'static str,
        Vec<MarketplaceEvent>,
        Vec<&'static str>,
        (Option<A>, Option<S>),
    );
    let cases: Vec<Case> = vec![
        (
            "duplicate License Updated is a no-op",
            vec![updated(H10), updated(H10)],
            vec!["write", "unchanged"],
            (Some(A::Active), Some(S::Active)),
        ),
        (
            "newer License Updated refreshes an active row",
            vec![updated(H10), updated(H11)],
            vec!["write", "write"],
            (Some(A::Active), Some(S::Active)),
        ),
        (
            "stale License Updated after a newer one is a no-op",
            vec![updated(H11), updated(H10)],
            vec!["write", "unchanged"],
            (Some(A::Active), Some(S::Active)),
        ),
        (
            "stale License Updated after Deprovisioned never reactivates",
            vec![updated(H10), deprovisioned(H12), updated(H11)],
            vec!["write", "write", "unchanged"],
            (Some(A::Active), Some(S::Deprovisioning)),
        ),
        (
            "newer License Updated after Deprovisioned is refused",
            vec![updated(H10), deprovisioned(H12), updated(H13)],
            vec!["write", "write", "refused"],
            (Some(A::Active), Some(S::Deprovisioning)),
        ),
        (
            "Deprovisioned before any License Updated creates a deprovisioning row; the late Updated is stale",
            vec![deprovisioned(H12), updated(H10)],
            vec!["write", "unchanged"],
            (None, Some(S::Deprovisioning)),
        ),
        (
            "duplicate Deprovisioned keeps the first window",
            vec![deprovisioned(H12), deprovisioned(H12)],
            vec!["write", "unchanged"],
            (None, Some(S::Deprovisioning)),
        ),
        (
            "a newer Deprovisioned never extends the window",
            vec![deprovisioned(H12), deprovisioned("2026-11-30T12:30:00Z")],
            vec!["write", "unchanged"],
            (None, Some(S::Deprovisioning)),
        ),
        (
            "stale Deprovisioned after a newer License Updated is a no-op",
            vec![updated(H12), deprovisioned(H11)],
            vec!["write", "unchanged"],
            (Some(A::Active), Some(S::Active)),
        ),
        (
            "Ended before any row exists has no row to apply to",
            vec![ended(H09)],
            vec!["no-row"],
            (None, None),
        ),
        (
            "Ended before Updated (delivered after): the stale half leaves the agreement ended",
            vec![updated(H10), ended(H12), updated(H11)],
            vec!["write", "write", "write"],
            (Some(A::Inactive), Some(S::Active)),
        ),
        (
            "a newer License Updated never reactivates the same ended agreement",
            vec![updated(H10), ended(H12), updated(H13)],
            vec!["write", "write", "write"],
            (Some(A::Inactive), Some(S::Active)),
        ),
        (
            "duplicate Ended (Manufacturer and Proposer copies) is a no-op",
            vec![updated(H10), ended(H12), ended(H12)],
            vec!["write", "write", "unchanged"],
            (Some(A::Inactive), Some(S::Active)),
        ),
        (
            "stale Ended before the License Updated that activated the agreement is a no-op",
            vec![updated(H10), ended(H09)],
            vec!["write", "unchanged"],
            (Some(A::Active), Some(S::Active)),
        ),
        (
            "Amended on an active agreement writes nothing",
            vec![updated(H10), amended(H11)],
            vec!["write", "unchanged"],
            (Some(A::Active), Some(S::Active)),
        ),
        (
            "Amended does not move the guard: an earlier Ended delivered late still ends it",
            vec![updated(H10), amended(H12), ended(H11)],
            vec!["write", "unchanged", "write"],
            (Some(A::Inactive), Some(S::Active)),
        ),
        (
            "older Amended after Ended never reactivates",
            vec![updated(H10), ended(H12), amended(H11)],
            vec!["write", "write", "unchanged"],
            (Some(A::Inactive), Some(S::Active)),
        ),
        (
            "newer Amended after Ended is refused",
            vec![updated(H10), ended(H12), amended(H13)],
            vec!["write", "write", "refused"],
            (Some(A::Inactive), Some(S::Active)),
        ),
        (
            "Amended on a deprovisioning-created row (agreement unknown) activates the agreement only",
            vec![deprovisioned(H12), amended("2026-11-30T12:30:00Z")],
            vec!["write", "write"],
            (Some(A::Active), Some(S::Deprovisioning)),
        ),
        (
            "Ended during deprovisioning leaves the subscription deprovisioning",
            vec![
                updated(H10),
                deprovisioned(H12),
                ended("2026-11-30T12:00:05Z"),
            ],
            vec!["write", "write", "write"],
            (Some(A::Inactive), Some(S::Deprovisioning)),
        ),
        (
            "Created and other types are ignored",
            vec![MarketplaceEvent::Ignored {
                detail_type: "Purchase Agreement Created - Manufacturer".into(),
            }],
            vec!["unchanged"],
            (None, None),
        ),
    ];
    for (name, events, kinds, (agreement, subscription)) in cases {
        let (row, got_kinds) = run(&events);
        assert_eq!(got_kinds, kinds, "{name}");
        assert_eq!(
            row.as_ref().and_then(|r| r.agreement_status),
            agreement,
            "{name}"
        );
        assert_eq!(
            row.as_ref().and_then(|r| r.subscription_status),
            subscription,
            "{name}"
        );
    }
}

/// Events of different types in the same second (the guards have whole seconds)
/// apply in lifecycle order whatever order they are delivered in: a true
/// duplicate of the same type is the only same-second event that is dropped.
#[test]
fn same_second_events_of_different_types_apply_in_lifecycle_order() {
    use AgreementStatus as A;
    use SubscriptionStatus as S;
    const T: &str = H12;
    type Case = (&'static str, Vec<MarketplaceEvent>, (Option<A>, Option<S>));
    let cases: Vec<Case> = vec![
        (
            "Updated and Deprovisioned in one second: deprovisioning",
            vec![updated(T), deprovisioned(T)],
            (Some(A::Active), Some(S::Deprovisioning)),
        ),
        (
            "Updated, Ended in one second: the agreement ends",
            vec![updated(T), ended(T)],
            (Some(A::Inactive), Some(S::Active)),
        ),
        (
            "Updated, Ended and Deprovisioned in one second",
            vec![updated(T), ended(T), deprovisioned(T)],
            (Some(A::Inactive), Some(S::Deprovisioning)),
        ),
        (
            "Updated, Amended in one second: active",
            vec![updated(T), amended(T)],
            (Some(A::Active), Some(S::Active)),
        ),
        (
            "Amended, Ended in one second: ended",
            vec![deprovisioned(H11), amended(T), ended(T)],
            (Some(A::Inactive), Some(S::Deprovisioning)),
        ),
    ];
    for (name, events, (agreement, subscription)) in cases {
        // Every delivery order of the same-second events converges.
        let mut orders = vec![events.clone()];
        let mut reversed = events.clone();
        reversed.reverse();
        orders.push(reversed);
        if events.len() == 3 {
            orders.push(vec![
                events[1].clone(),
                events[0].clone(),
                events[2].clone(),
            ]);
            orders.push(vec![
                events[2].clone(),
                events[0].clone(),
                events[1].clone(),
            ]);
        }
        for order in orders {
            // The deprovisioned row of the Amended case must come first.
            if events[0] == deprovisioned(H11) && order[0] != events[0] {
                continue;
            }
            // An agreement event that finds no row yet is redelivered (as the
            // subscription handler's queue does) after the others.
            let (row, kinds) = run(&order);
            let redelivered: Vec<MarketplaceEvent> = order
                .iter()
                .zip(&kinds)
                .filter(|(_, kind)| **kind == "no-row")
                .map(|(event, _)| event.clone())
                .collect();
            let mut row = row.unwrap();
            for event in &redelivered {
                if let Transition::Write { row: next, .. } = apply(Some(&row), event) {
                    row = next;
                }
            }
            let names: Vec<&str> = order.iter().map(MarketplaceEvent::name).collect();
            assert_eq!(
                row.agreement_status, agreement,
                "{name}: {names:?} {kinds:?}"
            );
            assert_eq!(
                row.subscription_status, subscription,
                "{name}: {names:?} {kinds:?}"
            );
            if subscription == Some(S::Deprovisioning) {
                assert!(row.deprovisioning_expiry.is_some(), "{name}: {names:?}");
            }
            // Applying every event once more changes nothing: they are duplicates now.
            for event in &order {
                assert!(
                    matches!(apply(Some(&row), event), Transition::Unchanged { .. }),
                    "{name}: {names:?}: {} again must be a duplicate, got {:?}",
                    event.name(),
                    apply(Some(&row), event)
                );
            }
        }
    }

    // Deprovisioned after Updated in the same second opens the window from that second.
    let (row, kinds) = run(&[updated(T), deprovisioned(T)]);
    assert_eq!(kinds, ["write", "write"]);
    assert_eq!(row.unwrap().deprovisioning_expiry, Some(t(H13)));
    // Delivered the other way round, the same-second Updated is the earlier one: it
    // is never "refused" (not a reactivation) and only its agreement half applies.
    let (row, kinds) = run(&[deprovisioned(T), updated(T)]);
    assert_eq!(kinds, ["write", "write"]);
    let row = row.unwrap();
    assert_eq!(
        row.subscription_status,
        Some(SubscriptionStatus::Deprovisioning)
    );
    assert_eq!(row.deprovisioning_expiry, Some(t(H13)));
    assert_eq!(row.subscription_event_at, Some(t(T)));
    assert_eq!(row.agreement_status, Some(AgreementStatus::Active));
    // A replacement agreement's License Updated in the second its predecessor ended
    // moves the row to the new agreement.
    let (row, kinds) = run(&[updated(H10), ended(T), renewed(T)]);
    let row = row.unwrap();
    assert_eq!(kinds, ["write", "write", "write"]);
    assert_eq!(row.agreement_id.as_deref(), Some("agmt-renewed"));
    assert_eq!(row.agreement_status, Some(AgreementStatus::Active));
    // ... but the ended agreement's own same-second License Updated never reopens it.
    let (row, _) = run(&[updated(H10), ended(T), updated(T)]);
    assert_eq!(
        row.unwrap().agreement_status,
        Some(AgreementStatus::Inactive)
    );
}

#[test]
fn license_updated_for_a_replacement_agreement_moves_the_row() {
    let (row, kinds) = run(&[
        updated(H10),
        ended("2026-11-30T23:00:00Z"),
        renewed("2026-12-01T00:00:00Z"),
    ]);
    let row = row.unwrap();
    assert_eq!(kinds, ["write", "write", "write"]);
    assert_eq!(row.agreement_id.as_deref(), Some("agmt-renewed"));
    assert_eq!(row.agreement_status, Some(AgreementStatus::Active));
    // The old agreement's late events no longer match the row.
    assert_eq!(
        apply(Some(&row), &ended("2026-11-30T23:30:00Z")),
        Transition::NoMatchingRow {
            reason: "row belongs to another agreement than the event"
        }
    );
}

#[test]
fn events_for_other_rows_do_not_apply() {
    let row = written(None, &updated(H10));
    let other_account = MarketplaceEvent::AgreementEnded {
        agreement_id: AGREEMENT.into(),
        account: "111122223333".into(),
        time: t(H11),
    };
    assert!(matches!(
        apply(Some(&row), &other_account),
        Transition::NoMatchingRow { .. }
    ));
    let other_license = MarketplaceEvent::LicenseDeprovisioned {
        license_arn: "arn:aws:license-manager::123456789012:license:l-other".into(),
        account: ACCOUNT.into(),
        product_code: None,
        agreement_id: AGREEMENT.into(),
        time: t(H11),
    };
    assert!(matches!(
        apply(Some(&row), &other_license),
        Transition::NoMatchingRow { .. }
    ));
}

#[test]
fn deprovisioned_fills_missing_identity_but_keeps_existing() {
    let mut registered = Subscriber::new(LICENSE, ACCOUNT);
    registered.product_code = Some("registered-code".into());
    let row = written(Some(&registered), &deprovisioned(H12));
    assert_eq!(row.product_code.as_deref(), Some("registered-code"));
    assert_eq!(row.agreement_id.as_deref(), Some(AGREEMENT));
    assert_eq!(row.agreement_status, None);
}

#[test]
fn expiry_closes_only_deprovisioning_rows_past_their_window() {
    let (row, _) = run(&[updated(H10), deprovisioned(H12)]);
    let row = row.unwrap();
    assert_eq!(expire_deprovisioning(&row, t("2026-11-30T12:59:59Z")), None);
    let closed = expire_deprovisioning(&row, t(H13)).unwrap();
    assert_eq!(
        closed.subscription_status,
        Some(SubscriptionStatus::Inactive)
    );
    assert_eq!(closed.deprovisioning_expiry, row.deprovisioning_expiry);
    assert_eq!(closed.agreement_status, row.agreement_status);
    assert_eq!(closed.version, row.version);
    // Closed rows, active rows and rows without a subscription are left alone.
    assert_eq!(
        expire_deprovisioning(&closed, t("2026-12-01T00:00:00Z")),
        None
    );
    let active = written(None, &updated(H10));
    assert_eq!(
        expire_deprovisioning(&active, t("2026-12-01T00:00:00Z")),
        None
    );
    // A deprovisioning row with no expiry has no window to wait for.
    let mut no_expiry = row.clone();
    no_expiry.deprovisioning_expiry = None;
    assert!(expire_deprovisioning(&no_expiry, t("2026-11-30T12:00:01Z")).is_some());
    // After closing, neither a newer Updated nor a newer Deprovisioned reopens it.
    assert!(matches!(
        apply(Some(&closed), &updated("2026-11-30T14:00:00Z")),
        Transition::ReactivationRefused { .. }
    ));
    assert!(matches!(
        apply(Some(&closed), &deprovisioned("2026-11-30T14:00:00Z")),
        Transition::Unchanged { .. }
    ));
}

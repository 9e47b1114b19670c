//! The reconciliation against the memory Agreement API and subscribers table: each lost
//! event repaired as the event would have done it, never earlier and never past it.

use chrono::TimeDelta;

use super::*;
use crate::clock::ManualClock;
use crate::lifecycle::subscription::apply_event;
use crate::memory::agreement_contract::{BUYER, LICENSE, LICENSE_2, PRODUCT, now, record, seed};
use crate::memory::{AgreementOp, MemoryAgreementApi, MemorySubscriberStore, StoreOp};
use crate::ports::PortError;

const CODE: &str = "code-contract";

struct World {
    api: MemoryAgreementApi,
    store: MemorySubscriberStore,
    clock: ManualClock,
}

impl World {
    fn new() -> Self {
        World {
            api: MemoryAgreementApi::new(),
            store: MemorySubscriberStore::new(),
            clock: ManualClock::new(now()),
        }
    }

    /// Seeds an agreement on `license`, started `days` ago, with `status` changed at
    /// `changed` (its `lastUpdateTime`).
    fn agreement(
        &self,
        id: &str,
        license: &str,
        start: Instant,
        status: AgreementStatus,
        changed: Instant,
    ) {
        let mut s = seed(id);
        s.license_arn = license.to_string();
        s.start = start;
        self.api.seed(record(&s, status, changed));
    }

    async fn run(&self, dry_run: bool) -> ReconcileReport {
        let settings = ReconcileSettings {
            products: vec![Product {
                product_id: PRODUCT.to_string(),
                product_code: CODE.to_string(),
            }],
            dry_run,
        };
        let ports = ReconcilePorts {
            agreements: &self.api,
            subscribers: &self.store,
            clock: &self.clock,
        };
        reconcile(ports, &settings).await.unwrap()
    }

    async fn row(&self, license: &str) -> Option<Subscriber> {
        self.store.get(license, BUYER).await.unwrap()
    }

    /// An active agreement `id` on `license` since `start`, whose License Updated
    /// arrived.
    async fn subscribed(&self, id: &str, license: &str, start: Instant) {
        self.agreement(id, license, start, AgreementStatus::Active, start);
        self.event(license_event(
            "License Updated - Manufacturer",
            license,
            id,
            start,
        ))
        .await;
    }

    /// `agmt-old` on [`LICENSE`] (started at `start`) replaced two days ago by
    /// `agmt-new`, as the API answers it; the instant of the replacement.
    fn replace_two_days_ago(&self, start: Instant) -> Instant {
        let replaced = now() - TimeDelta::days(2);
        self.agreement(
            "agmt-old",
            LICENSE,
            start,
            AgreementStatus::Replaced,
            replaced,
        );
        self.agreement(
            "agmt-new",
            LICENSE,
            replaced,
            AgreementStatus::Active,
            replaced,
        );
        replaced
    }

    /// Applies a real Marketplace event, as the subscription function does.
    async fn event(&self, json: serde_json::Value) {
        apply_event(&self.store, &self.clock, "m-1", Some(&json.to_string()))
            .await
            .unwrap();
    }
}

fn license_event(
    detail_type: &str,
    license: &str,
    agreement: &str,
    time: Instant,
) -> serde_json::Value {
    serde_json::json!({
        "source": "aws.agreement-marketplace",
        "detail-type": detail_type,
        "time": format_instant(time),
        "detail": {
            "license": {"arn": license},
            "acceptor": {"accountId": BUYER},
            "agreement": {"id": agreement},
            "product": {"code": CODE},
        }
    })
}

fn only(report: &ReconcileReport) -> &Drift {
    assert_eq!(report.drifts.len(), 1, "{report:#?}");
    &report.drifts[0]
}

#[tokio::test]
async fn a_lost_license_updated_is_applied_at_the_agreements_start_once() {
    let w = World::new();
    let start = now() - TimeDelta::days(3);
    w.agreement("agmt-1", LICENSE, start, AgreementStatus::Active, start);

    let report = w.run(false).await;
    let drift = only(&report);
    assert_eq!(
        (drift.kind, drift.action),
        (DriftKind::LicenseUpdatedLost, DriftAction::Repaired)
    );
    assert_eq!(
        drift.event_time.as_deref(),
        Some(format_instant(start).as_str())
    );
    let row = w.row(LICENSE).await.unwrap();
    assert_eq!(row.subscription_status, Some(SubscriptionStatus::Active));
    assert_eq!(row.agreement_status, Some(RowAgreement::Active));
    assert_eq!(row.agreement_id.as_deref(), Some("agmt-1"));
    assert_eq!(row.product_code.as_deref(), Some(CODE));
    // Dated at the start, never at the run: a real event of the license after it
    // (a deprovisioning delivered late) still applies on top.
    assert_eq!(row.subscription_event_at, Some(start));

    let again = w.run(false).await;
    assert!(again.drifts.is_empty(), "{again:#?}");
    assert_eq!((again.in_sync, again.licenses, again.agreements), (1, 1, 1));
    assert_eq!(w.row(LICENSE).await.unwrap().version, row.version);
}

#[tokio::test]
async fn a_dry_run_reports_the_repair_and_writes_nothing() {
    let w = World::new();
    let start = now() - TimeDelta::days(3);
    w.agreement("agmt-1", LICENSE, start, AgreementStatus::Active, start);
    let report = w.run(true).await;
    assert!(report.dry_run);
    assert_eq!(only(&report).action, DriftAction::WouldRepair);
    assert_eq!((report.repaired(), report.unresolved()), (1, 0));
    assert!(w.row(LICENSE).await.is_none());
}

#[tokio::test]
async fn a_lost_deprovisioning_reopens_the_window_it_would_have_opened() {
    let w = World::new();
    let start = now() - TimeDelta::days(3);
    w.subscribed("agmt-1", LICENSE, start).await;
    let ended = now() - TimeDelta::minutes(20);
    w.agreement("agmt-1", LICENSE, start, AgreementStatus::Cancelled, ended);

    let report = w.run(false).await;
    let drift = only(&report);
    assert_eq!(
        (drift.kind, drift.action),
        (DriftKind::DeprovisioningLost, DriftAction::Repaired)
    );
    let row = w.row(LICENSE).await.unwrap();
    assert_eq!(
        row.subscription_status,
        Some(SubscriptionStatus::Deprovisioning)
    );
    assert_eq!(
        row.deprovisioning_expiry,
        Some(ended + DEPROVISIONING_WINDOW)
    );
    assert_eq!(
        row.agreement_status,
        Some(RowAgreement::Inactive),
        "its agreement ended too"
    );

    // The real event, delivered late, finds its work done.
    w.event(license_event(
        "License Deprovisioned - Manufacturer",
        LICENSE,
        "agmt-1",
        ended,
    ))
    .await;
    assert_eq!(w.row(LICENSE).await.unwrap(), row);
}

#[tokio::test]
async fn a_deprovisioning_lost_past_its_window_is_closed_not_back_dated_into_a_flush() {
    let w = World::new();
    let start = now() - TimeDelta::days(3);
    w.subscribed("agmt-1", LICENSE, start).await;
    let ended = now() - TimeDelta::hours(3);
    w.agreement("agmt-1", LICENSE, start, AgreementStatus::Expired, ended);

    let drift = only(&w.run(false).await).clone();
    assert_eq!(drift.action, DriftAction::RepairedAndClosed, "{drift:#?}");
    let row = w.row(LICENSE).await.unwrap();
    assert_eq!(row.subscription_status, Some(SubscriptionStatus::Inactive));
    // The record of when the window closed: the event's, never the run's.
    assert_eq!(
        row.deprovisioning_expiry,
        Some(ended + DEPROVISIONING_WINDOW)
    );
    assert!(w.run(false).await.drifts.is_empty());
}

#[tokio::test]
async fn an_agreement_the_api_says_active_never_reactivates_a_deprovisioned_row() {
    let w = World::new();
    let start = now() - TimeDelta::days(3);
    w.subscribed("agmt-1", LICENSE, start).await;
    w.event(license_event(
        "License Deprovisioned - Manufacturer",
        LICENSE,
        "agmt-1",
        now() - TimeDelta::minutes(5),
    ))
    .await;
    let before = w.row(LICENSE).await.unwrap();

    let report = w.run(false).await;
    let drift = only(&report);
    assert_eq!(
        (drift.kind, drift.action),
        (DriftKind::StatusesDisagree, DriftAction::Reported)
    );
    assert!(
        drift.detail.contains("never reactivated"),
        "{}",
        drift.detail
    );
    assert_eq!(report.unresolved(), 1);
    assert_eq!(w.row(LICENSE).await.unwrap(), before);
}

#[tokio::test]
async fn a_lost_replacement_moves_the_row_to_the_new_agreement() {
    let w = World::new();
    let start = now() - TimeDelta::days(30);
    w.subscribed("agmt-old", LICENSE, start).await;
    w.replace_two_days_ago(start);

    let drift = only(&w.run(false).await).clone();
    assert_eq!(
        (drift.kind, drift.action),
        (DriftKind::ReplacementLost, DriftAction::Repaired)
    );
    let row = w.row(LICENSE).await.unwrap();
    assert_eq!(row.agreement_id.as_deref(), Some("agmt-new"));
    assert_eq!(row.subscription_status, Some(SubscriptionStatus::Active));
}

#[tokio::test]
async fn a_scheduled_agreement_waits_and_a_long_ended_one_is_backfilled_closed() {
    let w = World::new();
    let future = now() + TimeDelta::days(2);
    w.agreement(
        "agmt-future",
        LICENSE,
        future,
        AgreementStatus::Active,
        now(),
    );
    let start = now() - TimeDelta::days(90);
    w.agreement(
        "agmt-gone",
        LICENSE_2,
        start,
        AgreementStatus::Cancelled,
        now() - TimeDelta::days(60),
    );

    let report = w.run(false).await;
    assert!(report.drifts.is_empty(), "{report:#?}");
    assert_eq!((report.scheduled, report.backfilled), (1, 1));
    assert!(w.row(LICENSE).await.is_none(), "nothing before its start");
    // The long-ended one is backfilled closed, dated by its own events.
    let gone = w.row(LICENSE_2).await.unwrap();
    assert_eq!(gone.subscription_status, Some(SubscriptionStatus::Inactive));
    assert_eq!(
        gone.subscription_event_at,
        Some(now() - TimeDelta::days(60))
    );
    let again = w.run(false).await;
    assert_eq!((again.backfilled, again.in_sync), (0, 1), "{again:#?}");
}

#[tokio::test]
async fn a_failed_write_is_a_failed_drift_and_the_others_are_still_repaired() {
    let w = World::new();
    let start = now() - TimeDelta::days(3);
    w.agreement("agmt-1", LICENSE, start, AgreementStatus::Active, start);
    w.agreement("agmt-2", LICENSE_2, start, AgreementStatus::Active, start);
    w.store.fail_next(
        StoreOp::SubscriberPutLifecycle,
        PortError::Transient {
            operation: "PutItem",
            message: "throttled".into(),
        },
    );
    let report = w.run(false).await;
    let actions: Vec<_> = report.drifts.iter().map(|d| d.action).collect();
    assert_eq!(
        actions,
        vec![DriftAction::Failed, DriftAction::Repaired],
        "{report:#?}"
    );
    assert!(report.drifts[0].detail.contains("throttled"));
    // The next run repairs what the failed one left.
    assert_eq!(w.run(false).await.repaired(), 1);
    assert!(w.run(false).await.drifts.is_empty());
}

#[tokio::test]
async fn a_search_that_fails_writes_nothing_and_says_which_product() {
    let w = World::new();
    w.agreement(
        "agmt-1",
        LICENSE,
        now() - TimeDelta::days(3),
        AgreementStatus::Active,
        now(),
    );
    w.api.throttle_next(AgreementOp::Search);
    let settings = ReconcileSettings {
        products: vec![Product {
            product_id: PRODUCT.into(),
            product_code: CODE.into(),
        }],
        dry_run: false,
    };
    let ports = ReconcilePorts {
        agreements: &w.api,
        subscribers: &w.store,
        clock: &w.clock,
    };
    let err = reconcile(ports, &settings).await.unwrap_err();
    assert!(err.to_string().contains(PRODUCT), "{err}");
    assert!(w.row(LICENSE).await.is_none());
    let none = ReconcileSettings {
        products: vec![],
        dry_run: false,
    };
    assert_eq!(
        reconcile(ports, &none).await.unwrap_err(),
        ReconcileError::NoProduct
    );
}

#[tokio::test]
async fn an_agreement_whose_both_events_were_lost_ends_as_they_would_have_left_it() {
    let w = World::new();
    let start = now() - TimeDelta::days(3);
    let ended = now() - TimeDelta::minutes(10);
    w.agreement("agmt-1", LICENSE, start, AgreementStatus::Cancelled, ended);
    // The buyer registered: a row with no lifecycle.
    w.store
        .add_registered_region(LICENSE, BUYER, CODE, ("us-east-1", &[]), now())
        .await
        .unwrap();

    let drift = only(&w.run(false).await).clone();
    assert_eq!(
        (drift.kind, drift.action),
        (DriftKind::DeprovisioningLost, DriftAction::Repaired)
    );
    let row = w.row(LICENSE).await.unwrap();
    assert_eq!(
        row.subscription_status,
        Some(SubscriptionStatus::Deprovisioning)
    );
    assert_eq!(row.subscription_event_at, Some(ended));
    assert_eq!(
        row.deprovisioning_expiry,
        Some(ended + DEPROVISIONING_WINDOW)
    );
    assert_eq!(row.registered_regions, vec!["us-east-1".to_string()]);

    // Without a row, only while its window is open.
    w.agreement(
        "agmt-2",
        LICENSE_2,
        start,
        AgreementStatus::Cancelled,
        ended,
    );
    w.run(false).await;
    assert!(w.row(LICENSE_2).await.is_some());
}

fn price(row: &Subscriber, dimension: &str) -> Option<String> {
    row.current_rate_card()
        .and_then(|card| card.terms.rate_card.get(dimension))
        .map(|p| p.normalize().to_string())
}

#[tokio::test]
async fn a_rate_card_is_read_once_per_agreement_and_again_after_an_amendment() {
    let w = World::new();
    w.subscribed("agmt-1", LICENSE, now() - TimeDelta::days(2))
        .await;
    let report = w.run(false).await;
    assert_eq!(
        (report.rate_cards.refreshed, report.rate_cards.current),
        (1, 0)
    );
    let row = w.row(LICENSE).await.unwrap();
    assert_eq!(price(&row, "requests").as_deref(), Some("0.0025"));
    assert_eq!(price(&row, "storage_gb").as_deref(), Some("0.5"));
    let version = row.version;

    let again = w.run(false).await;
    assert_eq!(
        (again.rate_cards.refreshed, again.rate_cards.current),
        (0, 1)
    );
    assert_eq!(
        w.api.calls(AgreementOp::Terms),
        1,
        "a current card is not read"
    );

    // An amendment moves lastUpdateTime: the card is read again.
    w.api.update("agmt-1", |r| {
        r.terms
            .rate_card
            .insert("requests".into(), "0.003".parse().unwrap());
        r.last_update_time = now() - TimeDelta::hours(1);
    });
    let dry = w.run(true).await;
    assert_eq!(dry.rate_cards.refreshed, 1);
    assert_eq!(
        price(&w.row(LICENSE).await.unwrap(), "requests").as_deref(),
        Some("0.0025"),
        "a dry run writes nothing"
    );
    assert_eq!(w.run(false).await.rate_cards.refreshed, 1);
    let row = w.row(LICENSE).await.unwrap();
    assert_eq!(price(&row, "requests").as_deref(), Some("0.003"));
    assert_eq!(
        row.version, version,
        "the lifecycle's version is not the card's"
    );
}

#[tokio::test]
async fn a_throttled_card_read_is_named_the_rest_wait_and_the_lifecycle_does_not() {
    let w = World::new();
    let start = now() - TimeDelta::days(2);
    w.subscribed("agmt-1", LICENSE, start).await;
    w.agreement("agmt-2", LICENSE_2, start, AgreementStatus::Active, start);
    w.api.throttle_next(AgreementOp::Terms);

    let report = w.run(false).await;
    assert_eq!(
        report.repaired(),
        1,
        "the lost License Updated is still repaired"
    );
    let cards = &report.rate_cards;
    assert_eq!(
        (cards.refreshed, cards.deferred, cards.failed.len()),
        (0, 1, 1)
    );
    assert_eq!(cards.failed[0].license_arn, LICENSE);
    assert!(w.row(LICENSE).await.unwrap().rate_card.is_none());

    let next = w.run(false).await;
    assert_eq!(
        (next.rate_cards.refreshed, next.rate_cards.failed.len()),
        (2, 0)
    );
}

#[tokio::test]
async fn a_replacement_gets_its_own_card_and_the_old_one_is_never_current() {
    let w = World::new();
    let start = now() - TimeDelta::days(30);
    w.subscribed("agmt-old", LICENSE, start).await;
    w.run(false).await;
    let old = *w.row(LICENSE).await.unwrap().rate_card.unwrap();

    let replaced = w.replace_two_days_ago(start);
    w.api.update("agmt-new", |r| {
        r.terms
            .rate_card
            .insert("requests".into(), "0.002".parse().unwrap());
    });
    // The replacement's License Updated arrived: the row moved, its card did not.
    w.event(license_event(
        "License Updated - Manufacturer",
        LICENSE,
        "agmt-new",
        replaced,
    ))
    .await;
    let moved = w.row(LICENSE).await.unwrap();
    assert!(moved.rate_card.is_some() && moved.current_rate_card().is_none());
    assert!(
        !w.store
            .put_rate_card(LICENSE, BUYER, &old, now())
            .await
            .unwrap(),
        "a card of the agreement the row left is never stored"
    );

    assert_eq!(w.run(false).await.rate_cards.refreshed, 1);
    let row = w.row(LICENSE).await.unwrap();
    assert_eq!(row.current_rate_card().unwrap().agreement_id, "agmt-new");
    assert_eq!(price(&row, "requests").as_deref(), Some("0.002"));
    // A card read earlier never replaces one read later.
    let mut stale = *row.rate_card.clone().unwrap();
    stale.read_at -= TimeDelta::minutes(1);
    stale.card.terms.rate_card.clear();
    assert!(
        !w.store
            .put_rate_card(LICENSE, BUYER, &stale, now())
            .await
            .unwrap()
    );
}

impl World {
    /// Applies `json` as the subscription function does, then keeps the cards it calls for.
    async fn event_with_cards(&self, json: serde_json::Value) -> rate_cards::KeptAfterEvent {
        self.event(json.clone()).await;
        let event = MarketplaceEvent::from_json_str(&json.to_string()).unwrap();
        let ports = ReconcilePorts {
            agreements: &self.api,
            subscribers: &self.store,
            clock: &self.clock,
        };
        rate_cards::keep_after_event(ports, &event).await
    }
}

#[tokio::test]
async fn license_updated_keeps_the_card_at_activation_and_only_once() {
    let w = World::new();
    let start = now() - TimeDelta::hours(1);
    w.agreement("agmt-1", LICENSE, start, AgreementStatus::Active, start);
    let updated = license_event("License Updated - Manufacturer", LICENSE, "agmt-1", start);
    let kept = w.event_with_cards(updated.clone()).await;
    assert_eq!((kept.kept, kept.current, kept.failed.len()), (1, 0, 0));
    let row = w.row(LICENSE).await.unwrap();
    assert_eq!(price(&row, "requests").as_deref(), Some("0.0025"));
    let card = row.rate_card.clone().unwrap();
    assert_eq!(
        card.card.start, start,
        "the agreement's start, as described"
    );
    assert_eq!(
        card.agreement_updated_at, None,
        "an event does not say when the agreement last changed"
    );

    // The same event again reads nothing.
    let again = w.event_with_cards(updated).await;
    assert_eq!((again.kept, again.current), (0, 1));
    assert_eq!(w.api.calls(AgreementOp::Terms), 1);

    // The reconciliation reads the card once more, to learn lastUpdateTime.
    let report = w.run(false).await;
    assert_eq!(report.rate_cards.refreshed, 1);
    assert_eq!(w.run(false).await.rate_cards.current, 1);
}

#[tokio::test]
async fn an_amendment_rereads_the_card_of_every_row_of_its_agreement() {
    let w = World::new();
    let start = now() - TimeDelta::days(2);
    w.agreement("agmt-1", LICENSE, start, AgreementStatus::Active, start);
    w.event_with_cards(license_event(
        "License Updated - Manufacturer",
        LICENSE,
        "agmt-1",
        start,
    ))
    .await;
    w.api.update("agmt-1", |r| {
        r.terms
            .rate_card
            .insert("requests".into(), "0.003".parse().unwrap());
        r.last_update_time = now() - TimeDelta::hours(1);
    });
    w.clock.advance(std::time::Duration::from_secs(60));
    let amended = serde_json::json!({
        "source": "aws.agreement-marketplace",
        "detail-type": "Purchase Agreement Amended - Manufacturer",
        "time": format_instant(now() - TimeDelta::hours(1)),
        "detail": {"agreement": {"id": "agmt-1"}, "acceptor": {"accountId": BUYER}},
    });
    let kept = w.event_with_cards(amended).await;
    assert_eq!((kept.kept, kept.failed.len()), (1, 0));
    let row = w.row(LICENSE).await.unwrap();
    assert_eq!(price(&row, "requests").as_deref(), Some("0.003"));
}

#[tokio::test]
async fn a_card_that_cannot_be_read_leaves_the_activation_applied_for_the_reconciliation() {
    let w = World::new();
    let start = now() - TimeDelta::hours(1);
    w.agreement("agmt-1", LICENSE, start, AgreementStatus::Active, start);
    w.api.throttle_next(AgreementOp::Terms);
    let kept = w
        .event_with_cards(license_event(
            "License Updated - Manufacturer",
            LICENSE,
            "agmt-1",
            start,
        ))
        .await;
    assert_eq!((kept.kept, kept.failed.len()), (0, 1));
    assert!(
        kept.failed[0].1.to_string().contains("Throttling"),
        "{}",
        kept.failed[0].1
    );
    let row = w.row(LICENSE).await.unwrap();
    assert_eq!(row.subscription_status, Some(SubscriptionStatus::Active));
    assert!(row.rate_card.is_none());
    assert_eq!(w.run(false).await.rate_cards.refreshed, 1);

    // An unknown agreement is named; a deprovisioned row is never read for.
    let unknown = w
        .event_with_cards(license_event(
            "License Updated - Manufacturer",
            LICENSE_2,
            "agmt-unknown",
            start,
        ))
        .await;
    assert_eq!(unknown.failed.len(), 1);
    assert!(unknown.failed[0].1.to_string().contains("agmt-unknown"));
    let reads = w.api.calls(AgreementOp::Terms);
    let gone = w
        .event_with_cards(license_event(
            "License Deprovisioned - Manufacturer",
            LICENSE,
            "agmt-1",
            now(),
        ))
        .await;
    assert_eq!((gone.kept, gone.current, gone.failed.len()), (0, 0, 0));
    assert_eq!(w.api.calls(AgreementOp::Terms), reads);
}

//! The discoverer's use case on the in-memory ports: which groups it enqueues, in which order, and where it stops.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use super::*;
use crate::charges::PriceBasis;
use crate::memory::StoreOp;
use crate::model::Attr;
use crate::pipeline::testkit::*;
use crate::ports::PortError;

const NOW: &str = "2026-11-30T10:30:00Z";

fn aggregate_groups(messages: &[WorkMessage]) -> Vec<(GroupKey, bool)> {
    messages
        .iter()
        .map(|m| match m {
            WorkMessage::Aggregate { group, flush, .. } => (group.clone(), *flush),
            other => panic!("unexpected {other:?}"),
        })
        .collect()
}

#[tokio::test]
async fn completed_hours_are_enqueued_oldest_first_once_per_group() {
    // GIVEN rows in completed hours (several per group), the current hour, and
    // enough groups to span index pages
    let now = t(NOW);
    let world = World::new(now);
    let l1 = license(1);
    let l2 = license(2);
    world.put_each(&[
        (&l1, ACCOUNT_A, "requests", "2026-11-30T09:05:00Z", 3),
        (&l1, ACCOUNT_A, "requests", "2026-11-30T09:10:00Z", 4),
        (&l1, ACCOUNT_A, "requests", "2026-11-30T09:59:59", 1),
        (&l1, ACCOUNT_A, "storage", "2026-11-30T09:00:00Z", 7),
        (&l1, ACCOUNT_A, "requests", "2026-11-30T08:00:00Z", 2),
        (&l2, ACCOUNT_B, "requests", "2026-11-29T11:00:00Z", 2),
        (&l2, ACCOUNT_B, "requests", "2026-11-30T10:05:00Z", 5),
    ]);

    // WHEN the discoverer runs
    let report = world.discover(now).await;

    // THEN each completed group is enqueued once, oldest hour first; the open hour waits
    let groups = aggregate_groups(&world.work.messages());
    assert_eq!(
        groups,
        vec![
            (group(&l2, ACCOUNT_B, "requests", "2026-11-29T11"), false),
            (group(&l1, ACCOUNT_A, "requests", "2026-11-30T08"), false),
            (group(&l1, ACCOUNT_A, "requests", "2026-11-30T09"), false),
            (group(&l1, ACCOUNT_A, "storage", "2026-11-30T09"), false),
        ]
    );
    assert_eq!(report.groups, 4);
    assert!(report.complete());
    assert!(world.deprovision.is_empty());
    // Discovery writes nothing to the rows.
    assert!(world.raw_statuses().iter().all(|(_, s)| s.is_none()));
}

#[tokio::test]
async fn deprovisioning_licenses_flush_first_with_the_lock_bypassed() {
    // GIVEN a 3-hour lock, a license whose final-usage window closes in 5 minutes
    // (inside the 10-minute margin) and one whose window closes in an hour
    let now = t(NOW);
    let mut world = World::new(now);
    world.lock = MeteringLockHours::new(3).unwrap();
    let active = license(1);
    let closing = license(3);
    let later = license(4);
    world.deprovisioning(&closing, ACCOUNT_A, "2026-11-30T10:35:00Z");
    world.deprovisioning(&later, ACCOUNT_B, "2026-11-30T11:30:00Z");
    world.put_each(&[
        (&active, ACCOUNT_A, "requests", "2026-11-30T07:10:00Z", 1),
        (&active, ACCOUNT_A, "requests", "2026-11-30T09:10:00Z", 1),
        (&closing, ACCOUNT_A, "requests", "2026-11-30T06:20:00Z", 1),
        (&closing, ACCOUNT_A, "requests", "2026-11-30T09:20:00Z", 1),
        (&closing, ACCOUNT_A, "requests", "2026-11-30T10:10:00Z", 1),
        (&later, ACCOUNT_B, "requests", "2026-11-30T09:40:00Z", 1),
        (&later, ACCOUNT_B, "requests", "2026-11-30T10:20:00Z", 1),
    ]);

    let report = world.discover(now).await;

    // THEN the deprovisioning licenses' completed hours (locked or not) are flushed,
    // the open hour only for the license whose window is about to close
    let requests = |l: &str, account, h, flush| (group(l, account, "requests", h), flush);
    assert_eq!(
        aggregate_groups(&world.deprovision.messages()),
        vec![
            requests(&closing, ACCOUNT_A, "2026-11-30T06", true),
            requests(&closing, ACCOUNT_A, "2026-11-30T09", true),
            requests(&later, ACCOUNT_B, "2026-11-30T09", true),
            requests(&closing, ACCOUNT_A, "2026-11-30T10", true),
        ]
    );
    // AND normal work honours the lock and never repeats a flushed group
    assert_eq!(
        aggregate_groups(&world.work.messages()),
        vec![requests(&active, ACCOUNT_A, "2026-11-30T07", false)]
    );
    assert_eq!((report.flush_groups, report.groups), (4, 1));
}

#[tokio::test]
async fn unreadable_subscribers_skip_the_flush_but_not_metering() {
    let now = t(NOW);
    let world = World::new(now);
    let l = license(1);
    world.put(&l, ACCOUNT_A, "requests", "2026-11-30T09:10:00Z", 1);
    world.subscribers.fail_next(
        StoreOp::SubscriberDeprovisioning,
        PortError::Failed {
            operation: "query",
            message: "AccessDenied".into(),
        },
    );
    let report = world.discover(now).await;
    assert_eq!(report.groups, 1);
    assert!(
        report
            .flush_error
            .as_deref()
            .unwrap()
            .contains("AccessDenied")
    );
    assert!(!report.complete());
}

#[tokio::test]
async fn expired_rows_age_out_and_counted_ones_are_finalized_aggregated() {
    // GIVEN rows whose hours left the 24 h window, one of them already counted
    let now = t(NOW);
    let world = World::new(now);
    let l = license(1);
    let lost = world.put(&l, ACCOUNT_A, "requests", "2026-11-29T09:30:00Z", 5);
    let edge = world.put(&l, ACCOUNT_A, "requests", "2026-11-29T10:45:00Z", 5);
    let mut counted_row =
        crate::memory::reference_row(&l, ACCOUNT_A, "storage", "2026-11-29T10:15:00Z", 2);
    counted_row.attrs.insert(
        attr::AGGREGATED_INTO.into(),
        Attr::S("111122223333#storage#2026-11-29T10".into()),
    );
    let counted = world.put_row(counted_row);
    let live = world.put(&l, ACCOUNT_A, "requests", "2026-11-29T11:00:00Z", 5);

    let report = world.discover(now).await;

    for aged_out in [&lost, &edge] {
        assert_eq!(
            world.status(&l, aged_out).as_deref(),
            Some("AggregationExpired")
        );
    }
    assert_eq!(world.status(&l, &counted).as_deref(), Some("Aggregated"));
    assert_eq!(world.status(&l, &live), None);
    assert!(
        !world
            .row(&l, &lost)
            .attrs
            .contains_key(attr::METERING_PENDING)
    );
    assert_eq!((report.expired_rows, report.counted_rows_finalized), (2, 1));
    assert_eq!(world.metrics.total(metric::USAGE_AGGREGATION_EXPIRED), 2);
    // Re-running changes nothing and counts nothing twice.
    world.discover(now).await;
    assert_eq!(world.metrics.total(metric::USAGE_AGGREGATION_EXPIRED), 2);
}

#[tokio::test]
async fn expiries_and_rejections_whose_answers_were_lost_are_counted_once() {
    // GIVEN a row of an expired hour and a row the index cannot place, and a usage
    // store whose final writes each take effect and then lose their answer
    let now = t(NOW);
    let world = World::new(now);
    let l = license(1);
    let expired = world.put(&l, ACCOUNT_A, "requests", "2026-11-29T09:30:00Z", 5);
    let mut no_dimension =
        crate::memory::reference_row(&l, ACCOUNT_A, "requests", "2026-11-30T09:01:00Z", 1);
    no_dimension.attrs.remove(attr::DIMENSION);
    let no_dimension = world.put_row(no_dimension);
    let lossy = Arc::new(LostAnswers::new(
        world.usage.clone(),
        StoreOp::UsageFinalizeRow,
        2,
    ));
    let ports = DiscoverPorts {
        usage: lossy.clone(),
        ..world.discover_ports()
    };

    // WHEN the discoverer runs (each write's retry finds it applied)
    let report = discover(now, &world.discover_settings(), &ports, Budget::UNLIMITED)
        .await
        .unwrap();

    // THEN both are final and each metric is counted once
    assert!(lossy.exhausted(), "both writes lost an answer");
    assert_eq!(
        world.status(&l, &expired).as_deref(),
        Some("AggregationExpired")
    );
    assert_eq!(
        world.reason(&l, &no_dimension).as_deref(),
        Some("MissingDimension")
    );
    assert_eq!((report.expired_rows, report.rejected_rows), (1, 1));
    assert_eq!(world.metrics.total(metric::USAGE_AGGREGATION_EXPIRED), 1);
    assert_eq!(
        world.metrics.get(
            metric::USAGE_RECORD_REJECTED,
            &[("Reason", "MissingDimension")]
        ),
        1
    );
    // AND the next run counts nothing more
    world.discover(now).await;
    assert_eq!(world.metrics.total(metric::USAGE_AGGREGATION_EXPIRED), 1);
    assert_eq!(world.metrics.total(metric::USAGE_RECORD_REJECTED), 1);
}

#[tokio::test]
async fn rows_the_index_cannot_place_are_judged_and_rejected_here() {
    let now = t(NOW);
    let world = World::new(now);
    let l = license(1);
    let row = |ts: &str| crate::memory::reference_row(&l, ACCOUNT_A, "requests", ts, 1);
    // Filed under hour 09 whatever its timestamp says.
    let filed_under_09 = |ts: &str| {
        let mut row = row(ts);
        row.attrs.insert(
            attr::METERING_PENDING.into(),
            Attr::S("2026-11-30T09".into()),
        );
        row
    };
    let mut no_dimension = row("2026-11-30T09:01:00Z");
    no_dimension.attrs.remove(attr::DIMENSION);
    let no_dimension = world.put_row(no_dimension);
    let mut bad_key = row("2026-11-30T09:02:00Z");
    bad_key.sort_key = "junk".into();
    let bad_key = world.put_row(bad_key);
    world.put_row(filed_under_09("2026-11-30T08:02:00Z"));
    let future = world.put_row(filed_under_09("2026-11-30T11:00:00Z"));
    let stale = world.put_row(filed_under_09("2026-11-29T09:00:00Z"));

    let report = world.discover(now).await;

    for (sort_key, reason) in [
        (&future, "TimestampInFuture"),
        (&stale, "TimestampOutOfWindow"),
        (&no_dimension, "MissingDimension"),
        (&bad_key, "MalformedSortKey"),
    ] {
        assert_eq!(
            world.reason(&l, sort_key).as_deref(),
            Some(reason),
            "{sort_key}"
        );
    }
    assert_eq!(
        world.status(&l, &bad_key).as_deref(),
        Some("RejectedClientSide")
    );
    assert_eq!(report.rejected_rows, 4);
    assert_eq!(
        world.metrics.get(
            metric::USAGE_RECORD_REJECTED,
            &[("Reason", "MissingDimension")]
        ),
        1
    );
    // The row filed under the wrong hour is routed by its timestamp.
    assert_eq!(
        aggregate_groups(&world.work.messages()),
        vec![(group(&l, ACCOUNT_A, "requests", "2026-11-30T08"), false)]
    );
}

#[tokio::test]
async fn the_deadline_stops_the_walk_and_the_next_run_finishes() {
    // GIVEN pending groups in many hours and an index that takes a second per page
    let now = t(NOW);
    let world = World::new(now);
    for h in 0..10 {
        world.put(
            &license(1),
            ACCOUNT_A,
            "requests",
            &format!("2026-11-30T0{h}:10:00Z"),
            1,
        );
    }
    let pages = Arc::new(AtomicUsize::new(0));
    let slow = SlowUsage {
        inner: world.usage.clone(),
        clock: world.clock.clone(),
        step: std::time::Duration::from_secs(1),
        pages: pages.clone(),
    };
    let mut ports = world.discover_ports();
    ports.usage = Arc::new(slow);
    let budget = Budget::until(world.clock.now() + Duration::seconds(5));

    // WHEN the budget runs out part-way
    let report = discover(now, &world.discover_settings(), &ports, budget)
        .await
        .unwrap();

    // THEN it stopped before the deadline, reporting the hours it left
    assert_eq!(pages.load(std::sync::atomic::Ordering::SeqCst), 5);
    assert!(!report.complete());
    assert_eq!(report.unvisited_buckets.len(), 23 - 5);
    assert_eq!(
        report.unvisited_buckets.first().map(String::as_str),
        Some("2026-11-29T16")
    );
    let first_run = world.work.len();
    // AND the next run covers the rest
    let report = world.discover(now).await;
    assert!(report.complete());
    let all: BTreeMap<_, _> = aggregate_groups(&world.work.messages())
        .into_iter()
        .collect();
    assert_eq!(all.len(), 10);
    assert!(first_run < 10);
}

#[tokio::test]
async fn refused_messages_are_reported_and_found_again() {
    let now = t(NOW);
    let world = World::new(now);
    let l = license(1);
    world.put(&l, ACCOUNT_A, "requests", "2026-11-30T09:10:00Z", 1);
    world.put(&l, ACCOUNT_A, "storage", "2026-11-30T09:10:00Z", 1);
    world.work.fail_where(
        |m| matches!(m, WorkMessage::Aggregate { group, .. } if group.dimension == "storage"),
    );
    let report = world.discover(now).await;
    assert_eq!((report.groups, report.unsent_messages), (1, 1));
    world.work.clear_failures();
    world.work.drain();
    let report = world.discover(now).await;
    assert_eq!(report.groups, 2);
}

#[test]
fn sort_key_hours() {
    assert_eq!(
        hour_in_sort_key(
            "111122223333#a#b#2026-11-30T09:10:00Z#e1",
            "111122223333",
            "a#b"
        ),
        Some(hour("2026-11-30T09"))
    );
    assert_eq!(
        hour_in_sort_key("111122223333#x#2026-11-30T09", "111122223333", "x"),
        Some(hour("2026-11-30T09"))
    );
    assert_eq!(
        hour_in_sort_key("111122223333#x#garbage", "111122223333", "x"),
        None
    );
    assert_eq!(
        hour_in_sort_key("999#x#2026-11-30T09:00:00", "111122223333", "x"),
        None
    );
}

#[tokio::test]
async fn the_open_hour_is_flushed_by_the_last_run_before_the_margin() {
    // GIVEN a window closing at 10:50: the 10-minute margin starts at 10:40, and with
    // runs every 15 minutes the 10:30 run may be the last one before it
    let now = t(NOW);
    let closing = license(5);
    let closing_at = |expiry| {
        let world = World::new(now);
        world.deprovisioning(&closing, ACCOUNT_A, expiry);
        world.put(&closing, ACCOUNT_A, "requests", "2026-11-30T10:20:00Z", 3);
        world
    };
    let world = closing_at("2026-11-30T10:50:00Z");

    // WHEN the discoverer runs at 10:30
    world.discover(now).await;

    // THEN the open hour is flushed now rather than by a run that may never come
    assert_eq!(
        aggregate_groups(&world.deprovision.messages()),
        vec![(
            group(&closing, ACCOUNT_A, "requests", "2026-11-30T10"),
            true
        )]
    );

    // AND a window closing later than the next run's margin still waits
    let later = closing_at("2026-11-30T10:56:00Z");
    later.discover(now).await;
    assert!(aggregate_groups(&later.deprovision.messages()).is_empty());
}

/// A registration of `license` for buyer `ACCOUNT_A` of this product, with no fields.
async fn register(profiles: &crate::memory::MemoryProfileStore, license: &str, now: Instant) {
    profiles
        .upsert(
            &crate::model::CustomerProfile {
                license_arn: license.to_string(),
                customer_aws_account_id: ACCOUNT_A.to_string(),
                product_code: PRODUCT.to_string(),
                fields: BTreeMap::new(),
            },
            now,
        )
        .await
        .unwrap();
}

/// The discoverer's settings with a 30-day profile retention, and its ports on `profiles`.
fn retaining_profiles(
    world: &World,
    profiles: &crate::memory::MemoryProfileStore,
) -> (DiscoverSettings, DiscoverPorts) {
    let mut settings = world.discover_settings();
    settings.profile_retention = Some(Duration::days(30));
    let ports = DiscoverPorts {
        profiles: Some(Arc::new(profiles.clone())),
        ..world.discover_ports()
    };
    (settings, ports)
}

#[tokio::test]
async fn a_deprovisioned_buyers_profile_expires_retention_after_the_window_ends() {
    use crate::memory::MemoryProfileStore;
    // GIVEN two deprovisioning licenses of this product (one registered here), one of
    // another product on the shared subscribers table, and a 30-day profile retention
    let now = t(NOW);
    let world = World::new(now);
    let profiles = MemoryProfileStore::new();
    let (ours, unregistered, theirs) = (license(1), license(2), license(3));
    for l in [&ours, &theirs] {
        register(&profiles, l, now).await;
    }
    world.deprovisioning(&ours, ACCOUNT_A, "2026-11-30T11:00:00Z");
    world.deprovisioning(&unregistered, ACCOUNT_A, "2026-11-30T11:00:00Z");
    let mut other = crate::model::Subscriber::new(&theirs, ACCOUNT_A);
    other.subscription_status = Some(SubscriptionStatus::Deprovisioning);
    other.deprovisioning_expiry = Some(t("2026-11-30T11:00:00Z"));
    other.product_code = Some("anotherproduct".to_string());
    world.subscribers.insert(other, now);
    let (settings, ports) = retaining_profiles(&world, &profiles);

    // WHEN the discoverer runs twice
    let first = discover(now, &settings, &ports, Budget::UNLIMITED)
        .await
        .unwrap();
    let second = discover(now, &settings, &ports, Budget::UNLIMITED)
        .await
        .unwrap();

    // THEN our registered buyer's profile expires 30 days after the window, written
    // once; no row is created, and the other product's buyer is untouched
    assert_eq!(
        profiles.expires_at(&ours, ACCOUNT_A),
        Some(t("2026-12-30T11:00:00Z"))
    );
    assert_eq!((first.profiles_expiring, second.profiles_expiring), (1, 0));
    assert_eq!(profiles.get(&unregistered, ACCOUNT_A), None);
    assert_eq!(profiles.expires_at(&theirs, ACCOUNT_A), None);
    assert!(first.profile_error.is_none());

    // AND without a retention nothing is written
    let keep = MemoryProfileStore::new();
    let ports = DiscoverPorts {
        profiles: Some(Arc::new(keep.clone())),
        ..world.discover_ports()
    };
    discover(now, &world.discover_settings(), &ports, Budget::UNLIMITED)
        .await
        .unwrap();
    assert_eq!(keep.expires_at(&ours, ACCOUNT_A), None);
}

#[tokio::test]
async fn a_profile_expiry_that_cannot_be_written_is_counted_and_retried_next_run() {
    use crate::memory::MemoryProfileStore;
    // GIVEN a registered buyer's license deprovisioning, a 30-day retention, and a
    // profile table that refuses the first expiry write
    let now = t(NOW);
    let world = World::new(now);
    let profiles = MemoryProfileStore::new();
    let ours = license(1);
    register(&profiles, &ours, now).await;
    world.deprovisioning(&ours, ACCOUNT_A, "2026-11-30T11:00:00Z");
    profiles.fail_next_expire(PortError::Failed {
        operation: "UpdateItem",
        message: "AccessDeniedException".into(),
    });
    let (settings, ports) = retaining_profiles(&world, &profiles);

    // WHEN the discoverer runs, then runs again
    let first = discover(now, &settings, &ports, Budget::UNLIMITED)
        .await
        .unwrap();

    // THEN the failure is reported and counted (its alarm), without making the run
    // incomplete (metering is unaffected), and the next run writes the expiry
    assert!(
        first
            .profile_error
            .as_deref()
            .unwrap_or_default()
            .contains("AccessDenied")
    );
    assert!(first.complete(), "{first:?}");
    assert_eq!(world.metrics.total(metric::PROFILE_EXPIRY_FAILED), 1);
    assert_eq!(world.metrics.total(metric::INCOMPLETE_RUN), 0);
    assert_eq!(profiles.expires_at(&ours, ACCOUNT_A), None);
    let second = discover(now, &settings, &ports, Budget::UNLIMITED)
        .await
        .unwrap();
    assert!(second.profile_error.is_none());
    assert_eq!(second.profiles_expiring, 1);
    assert_eq!(
        profiles.expires_at(&ours, ACCOUNT_A),
        Some(t("2026-12-30T11:00:00Z"))
    );
    assert_eq!(world.metrics.total(metric::PROFILE_EXPIRY_FAILED), 1);
}

/// An active row of `license` on `agreement` whose kept rate card prices `priced`.
fn priced_buyer(world: &World, license: &str, account: &str, agreement: &str, priced: &[&str]) {
    let now = world.clock.now();
    let mut row = Subscriber::new(license, account);
    row.agreement_id = Some(agreement.to_string());
    row.subscription_status = Some(SubscriptionStatus::Active);
    row.rate_card = Some(Box::new(crate::charges::StoredRateCard {
        card: crate::charges::RateCard {
            agreement_id: agreement.to_string(),
            start: now,
            terms: crate::ports::AgreementTerms {
                currency: Some("USD".into()),
                rate_card: priced
                    .iter()
                    .map(|d| (d.to_string(), rust_decimal::Decimal::new(25, 4)))
                    .collect(),
                free_trial: None,
                has_upfront: false,
            },
        },
        agreement_updated_at: None,
        read_at: now,
    }));
    world.subscribers.insert(row, now);
}

#[tokio::test]
async fn a_dimension_the_buyers_rate_card_does_not_price_is_reported_before_it_is_billed() {
    // GIVEN two buyers with kept rate cards pricing only `requests`, one buyer without
    // a card, and usage of `requests` and `seats` (two hours of it for the first buyer)
    let now = t(NOW);
    let world = World::new(now);
    let (l1, l2, l3) = (license(1), license(2), license(3));
    priced_buyer(&world, &l1, ACCOUNT_A, "agmt-1", &["requests"]);
    priced_buyer(&world, &l2, ACCOUNT_B, "agmt-2", &["requests", "seats"]);
    let mut moved = Subscriber::new(&l3, ACCOUNT_A);
    moved.agreement_id = Some("agmt-3".into());
    world.subscribers.insert(moved, now);
    world.put_each(&[
        (&l1, ACCOUNT_A, "requests", "2026-11-30T09:05:00Z", 3),
        (&l1, ACCOUNT_A, "seats", "2026-11-30T08:05:00Z", 1),
        (&l1, ACCOUNT_A, "seats", "2026-11-30T09:05:00Z", 1),
        (&l2, ACCOUNT_B, "seats", "2026-11-30T09:05:00Z", 1),
        (&l3, ACCOUNT_A, "seats", "2026-11-30T09:05:00Z", 1),
    ]);

    let report = world.discover(now).await;

    // THEN only the first buyer's `seats` is reported, with its groups and agreement,
    // and counted; every group is still enqueued
    assert_eq!(
        report.unpriced,
        vec![UnpricedDimension {
            license_arn: l1.clone(),
            customer_aws_account_id: ACCOUNT_A.into(),
            agreement_id: "agmt-1".into(),
            dimension: "seats".into(),
            groups: 2,
        }]
    );
    assert_eq!(
        world
            .metrics
            .get(metric::UNPRICED_USAGE, &[("Dimension", "seats")]),
        2
    );
    assert_eq!(
        report.without_rate_card, 1,
        "a row without a card is not judged"
    );
    assert_eq!(report.groups, 5);
    assert!(report.complete());
    // AND each message carries its buyer's unit price: priced, unpriced, or none for
    // the buyer without a card
    let prices: Vec<(String, String, Option<PriceBasis>)> = world
        .work
        .messages()
        .into_iter()
        .filter_map(|m| match m {
            WorkMessage::Aggregate { group, price, .. } => {
                if let Some(p) = &price {
                    assert_eq!(
                        p.agreement_id,
                        format!("agmt-{}", &group.license_arn[group.license_arn.len() - 1..])
                    );
                }
                Some((group.license_arn, group.dimension, price.map(|p| p.basis)))
            }
            _ => None,
        })
        .collect();
    let priced = Some(PriceBasis::Priced {
        price: rust_decimal::Decimal::new(25, 4),
        currency: "USD".into(),
    });
    assert_eq!(
        prices,
        vec![
            (l1.clone(), "seats".into(), Some(PriceBasis::Unpriced)),
            (l1.clone(), "requests".into(), priced.clone()),
            (l1.clone(), "seats".into(), Some(PriceBasis::Unpriced)),
            (l2.clone(), "seats".into(), priced),
            (l3.clone(), "seats".into(), None),
        ]
    );
}

/// A buyer whose kept card prices only `requests`, with an hour of `seats` pending.
fn unpriced_seats() -> (Instant, World) {
    let now = t(NOW);
    let world = World::new(now);
    let l1 = license(1);
    priced_buyer(&world, &l1, ACCOUNT_A, "agmt-1", &["requests"]);
    world.put_each(&[(&l1, ACCOUNT_A, "seats", "2026-11-30T09:05:00Z", 1)]);
    (now, world)
}

#[tokio::test]
async fn an_unreadable_rate_card_is_reported_and_never_holds_metering_back() {
    let (now, world) = unpriced_seats();
    world.subscribers.fail_next(
        StoreOp::SubscriberGetMany,
        PortError::Failed {
            operation: "BatchGetItem subscribers",
            message: "AccessDeniedException".into(),
        },
    );

    let report = world.discover(now).await;
    assert_eq!(report.groups, 1, "the group is enqueued all the same");
    assert!(report.unpriced.is_empty());
    let unread = report.rate_cards_unread.as_deref().unwrap();
    assert!(unread.contains("AccessDenied"), "{unread}");
    assert_eq!(world.metrics.total(metric::UNPRICED_USAGE_UNCHECKED), 1);
    assert!(report.complete(), "the check is not part of the run's work");
}

#[tokio::test]
async fn a_throttled_rate_card_read_is_retried_before_the_page_is_sent() {
    let (now, world) = unpriced_seats();
    world.subscribers.fail_next(
        StoreOp::SubscriberGetMany,
        PortError::Transient {
            operation: "BatchGetItem subscribers",
            message: "throttled".into(),
        },
    );
    let report = world.discover(now).await;
    assert_eq!(report.unpriced.len(), 1, "{report:?}");
    assert!(report.rate_cards_unread.is_none());
    assert_eq!(world.metrics.total(metric::UNPRICED_USAGE_UNCHECKED), 0);
}

//! The invariants checked after every schedule, one checker per file, over what the
//! schedule left ([`World`]) in each metering Region: [`conservation`] (the
//! workspace's one conservation checker, and what the faults explain), [`liveness`],
//! [`metrics`], [`retention`], [`dry_run`], [`regions`] (an import lands only in its
//! Region), [`queues`], [`ingestion`] and [`allocations`] (the seller's events),
//! [`registrations`] and [`profiles`], [`entitlements`] (the agreement reconciliation) and [`entitlement_answers`] (`GET /subscriptions`),
//! [`unpriced`] (dimensions no rate card prices, reported before billing),
//! [`refused_calls`] and [`refusals`] (Marketplace's), [`outcome_events`] and
//! [`estimates`] (what each told record is worth),
//! [`buyer_events`] and [`api_edges`] (the usage API across the edges of time); and,
//! after them all, [`corrections`] (run from `run_schedule`: the corrections move the
//! clock past the month's end).

pub mod allocations;
pub mod api_edges;
pub mod buyer_events;
pub mod conservation;
pub mod corrections;
pub mod dry_run;
pub mod entitlement_answers;
pub mod entitlements;
pub mod estimates;
pub mod ingestion;
pub mod liveness;
pub mod metrics;
pub mod outcome_events;
pub mod profiles;
pub mod queues;
pub mod refusals;
pub mod refused_calls;
pub mod regions;
pub mod registrations;
pub mod retention;
pub mod unpriced;

use std::collections::BTreeMap;

use awsmp_core::model::{Attr, GroupKey, RawUsageRow, attr};

use crate::world::World;

/// Every violation found (empty when every invariant holds), the second Region's
/// prefixed with its product and Region.
pub fn check(world: &World) -> Vec<String> {
    let mut violations = retention::check(world);
    violations.extend(conservation::check(world));
    violations.extend(dry_run::check(world));
    violations.extend(registrations::check(world));
    violations.extend(entitlements::check(world));
    violations.extend(entitlement_answers::check(world));
    violations.extend(unpriced::check(world));
    violations.extend(profiles::check(world));
    violations.extend(ingestion::check(world));
    violations.extend(regions::check(world));
    violations.extend(queues::check(world));
    violations.extend(allocations::check(world));
    violations.extend(liveness::check(world));
    violations.extend(refusals::check(world));
    violations.extend(refused_calls::check(world));
    violations.extend(metrics::check(world));
    violations.extend(outcome_events::check(world));
    violations.extend(estimates::check(world));
    violations.extend(buyer_events::check(world));
    violations.extend(api_edges::check(&world.edges, &world.tables.raw_rows()));
    violations.extend(api_edges::read_backs(&world.edges));
    if let Some(other) = &world.second {
        violations.extend(
            check(other)
                .into_iter()
                .map(|v| format!("{} {}: {v}", other.product, other.region)),
        );
    }
    violations
}

/// A string attribute of a stored item.
fn text<'a>(attrs: &'a BTreeMap<String, Attr>, name: &str) -> Option<&'a str> {
    attrs.get(name).and_then(Attr::as_s)
}

/// A stored item's `quantity` (0 when it has none).
fn quantity(attrs: &BTreeMap<String, Attr>) -> i64 {
    match attrs.get(attr::QUANTITY) {
        Some(Attr::N(n)) => n.parse().unwrap_or(0),
        _ => 0,
    }
}

/// The usage rows (not the event-id markers) of `license` written with `event_id`.
fn rows_of_event<'a>(
    rows: &'a [RawUsageRow],
    license: &'a str,
    event_id: &str,
) -> impl Iterator<Item = &'a RawUsageRow> {
    let suffix = format!("#{event_id}");
    rows.iter().filter(move |r| {
        r.license_arn == license
            && !r.sort_key.starts_with("event#")
            && r.sort_key.ends_with(&suffix)
    })
}

/// Whether Marketplace answered a record of `key` `CustomerNotSubscribed` after its
/// buyer's entitlement was revoked: the only reason a record of an entitled buyer may
/// end `CustomerNotSubscribed`.
fn refused_after_revocation(world: &World, key: &GroupKey) -> bool {
    let revocations = world.metering.inner.revocations();
    world
        .metering
        .inner
        .not_subscribed()
        .iter()
        .any(|answered| {
            answered.key == *key
                && revocations.iter().any(|revoked| {
                    revoked.license_arn == key.license_arn
                        && revoked.customer_aws_account_id == key.customer_aws_account_id
                        && answered.at >= revoked.at
                })
        })
}

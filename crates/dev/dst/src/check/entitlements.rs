//! Entitlements: whatever lifecycle events Marketplace lost, once the agreement
//! reconciliation has run the subscribers rows are what the full event sequence would
//! have made them: the same statuses, the same guard instants (a repair is never dated
//! earlier or later than the event it stands for) and the same final-usage window (a
//! lost deprovisioning is never re-opened past it, never back-dated before it). And
//! the last, fault-free run finds nothing left to repair (liveness).
//!
//! Rate cards: a card kept on a row always holds the prices of the agreement it names
//! (never another buyer's, never another agreement's); a buyer whose License Updated
//! was handled holds its agreement's card from then on, before the pipeline's first run,
//! unless the Agreement API refused that read (then the activation still stands); the
//! amended agreement's new prices are on its row as soon as its amendment is told; and
//! after the last, fault-free run every license still active holds its own agreement's
//! card, with nothing left failed or deferred (liveness).

use awsmp_core::lifecycle::reconcile::DriftAction;
use awsmp_core::lifecycle::{MarketplaceEvent, Transition, apply, expire_deprovisioning};
use awsmp_core::model::{AgreementStatus, Subscriber};
use awsmp_core::ports::Clock;

use crate::actors::reconcile::{agreement_id, amended_when_settled, prices};
use crate::scenario::{ACCOUNT, PRODUCT, REGION, license};
use crate::world::World;

/// Every violation of it in `world` (empty when it holds). The events stack is the main
/// stack's: the second stack's world has nothing of its own to check.
pub fn check(world: &World) -> Vec<String> {
    if (world.region, world.product) != (REGION, PRODUCT) {
        return Vec::new();
    }
    let mut violations = Vec::new();
    let options = &world.options;
    let activated = options.start - chrono::Duration::hours(5);
    let now = world.clock.now();
    let rows = world.subscribers.rows();
    for n in 0..3u32 {
        let license_arn = license(n + 1);
        let agreement = agreement_id(&license_arn);
        let mut events = vec![MarketplaceEvent::LicenseUpdated {
            license_arn: license_arn.clone(),
            account: ACCOUNT.into(),
            product_code: Some(PRODUCT.into()),
            agreement_id: agreement.clone(),
            time: activated,
        }];
        if n == 2 {
            events.push(MarketplaceEvent::LicenseDeprovisioned {
                license_arn: license_arn.clone(),
                account: ACCOUNT.into(),
                product_code: Some(PRODUCT.into()),
                agreement_id: agreement.clone(),
                time: options.deprovisioned_at,
            });
        }
        let mut expected: Option<Subscriber> = None;
        for event in &events {
            if let Transition::Write { row, .. } = apply(expected.as_ref(), event) {
                expected = Some(row);
            }
        }
        let expected = expected.map(|row| expire_deprovisioning(&row, now).unwrap_or(row));
        let id = format!("subscriber {license_arn}");
        let actual = rows
            .iter()
            .find(|r| r.license_arn == license_arn && r.customer_aws_account_id == ACCOUNT);
        let (Some(expected), Some(actual)) = (expected, actual) else {
            violations.push(format!("{id}: no row after settling (entitlements)"));
            continue;
        };
        let seen = |r: &Subscriber| {
            (
                r.subscription_status,
                r.deprovisioning_expiry,
                r.subscription_event_at,
                r.agreement_id.clone(),
            )
        };
        if seen(actual) != seen(&expected) {
            violations.push(format!(
                "{id}: (subscription, window end, its guard, agreement) are {:?}, the events \
                 Marketplace sent would have made them {:?} (entitlements)",
                seen(actual),
                seen(&expected)
            ));
        }
        let priced = |amended: bool| -> std::collections::BTreeMap<String, rust_decimal::Decimal> {
            prices(&license_arn, amended).into_iter().collect()
        };
        let now_priced = priced(amended_when_settled(n as usize));
        if let Some(kept) = &actual.rate_card {
            let card = &kept.card;
            let ever = card.terms.rate_card == priced(false) || card.terms.rate_card == now_priced;
            if card.agreement_id != agreement || !ever {
                violations.push(format!(
                    "{id}: keeps the card of {} pricing {:?}, its agreement {agreement} prices \
                     {now_priced:?} (rate cards)",
                    card.agreement_id, card.terms.rate_card
                ));
            }
        }
        if n < 2 && actual.current_rate_card().map(|c| &c.terms.rate_card) != Some(&now_priced) {
            violations.push(format!(
                "{id}: active on {agreement}, its card after the last run prices {:?}, the \
                 agreement now {now_priced:?} (rate cards)",
                actual.current_rate_card().map(|c| &c.terms.rate_card)
            ));
        }
        // The third buyer's agreement ended (its Ended event is not part of the
        // simulation's sequence, the reconciliation may apply it); the others' did not.
        if n < 2 && actual.agreement_status != Some(AgreementStatus::Active) {
            violations.push(format!(
                "{id}: agreement {:?} while the API says active (entitlements)",
                actual.agreement_status
            ));
        }
    }
    violations.extend(activation_cards(world));
    match world.reconciliations.last() {
        None => violations.push("the agreement reconciliation never ran (entitlements)".into()),
        Some(Err(e)) => violations.push(format!(
            "the last, fault-free reconciliation failed: {e} (entitlements)"
        )),
        Some(Ok(report)) if !report.drifts.is_empty() => violations.push(format!(
            "the last, fault-free reconciliation still finds drift: {:?} (entitlements)",
            report.drifts
        )),
        Some(Ok(report))
            if !report.rate_cards.failed.is_empty() || report.rate_cards.deferred > 0 =>
        {
            violations.push(format!(
                "the last, fault-free reconciliation left rate cards unread: {:?} (rate cards)",
                report.rate_cards
            ));
        }
        Some(Ok(_)) => {}
    }
    // Safety under faults: a run may fail or report, never repair what it must not.
    for report in world.reconciliations.iter().flatten() {
        for drift in &report.drifts {
            if drift.action == DriftAction::WouldRepair {
                violations.push(format!("a live run planned only: {drift:?} (entitlements)"));
            }
        }
    }
    violations
}

/// Each buyer's card right after its License Updated: its own agreement's, as first
/// agreed; none only for a lost License Updated or a throttled read.
fn activation_cards(world: &World) -> Vec<String> {
    let lost = world.options.lost;
    let mut violations = Vec::new();
    for (n, (license_arn, card)) in world.activation_cards.iter().enumerate() {
        let agreement = agreement_id(license_arn);
        let want: std::collections::BTreeMap<_, _> =
            prices(license_arn, false).into_iter().collect();
        match card {
            None if !lost.card_kept_at_activation(n) => {}
            Some(_) if lost.updated == Some(n) => violations.push(format!(
                "{license_arn}: a card kept before any License Updated (rate cards)"
            )),
            Some(card)
                if card.card.agreement_id == agreement && card.card.terms.rate_card == want => {}
            Some(card) => violations.push(format!(
                "{license_arn}: right after License Updated its card is of {} pricing {:?}, \
                 its agreement {agreement} prices {want:?} (rate cards)",
                card.card.agreement_id, card.card.terms.rate_card
            )),
            None => violations.push(format!(
                "{license_arn}: License Updated handled, yet no rate card was kept: its usage \
                 is unpriced until the reconciliation runs (rate cards, liveness)"
            )),
        }
    }
    // The first buyer's amendment: read again when Marketplace told it (a buyer whose
    // License Updated was lost may have no row to amend yet).
    if lost.updated != Some(0) {
        let license_arn = license(1);
        let want: std::collections::BTreeMap<_, _> =
            prices(&license_arn, true).into_iter().collect();
        match &world.amended_card {
            Some(card) if card.card.terms.rate_card == want => {}
            other => violations.push(format!(
                "{license_arn}: right after Purchase Agreement Amended its card prices {:?}, \
                 the amended agreement {want:?} (rate cards)",
                other.as_ref().map(|c| &c.card.terms.rate_card)
            )),
        }
    }
    violations
}

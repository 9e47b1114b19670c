//! The entitlement answer (`GET /subscriptions/{licenseArn}` and the same answer from
//! `awsmp_usage::Entitlements`), held to what the schedule's lifecycle did, whatever the
//! faults:
//!
//! - Safety. `billedUntil` only for the deprovisioned buyer, with the window's end its
//!   License Deprovisioned set (an hour after it) and a `writeBy` the pipeline's room
//!   before it, never already past; `notBilled` only once that room is gone (a buyer
//!   told too early stops writing usage that would still have billed); a license's own
//!   agreement and buyer, never another's; `pendingActivation` or `404` for a buyer
//!   only while its License Updated is lost and not yet repaired; `404` with
//!   `UnknownSubscription` for the license no event named; never a `400`.
//! - Liveness. After each settling step (the reconciliation has run fault-free) every
//!   question is answered, the subscribed buyers `billed` and `active`, the
//!   deprovisioned one never `billed`, and a buyer whose registration succeeded is
//!   registered in the stack's Region.
//!
//! The rules are stated from Marketplace's (an hour's final-usage window after License
//! Deprovisioned) and the pipeline's published room ([`PIPELINE_ROOM`]), not from the
//! handler's code.

use awsmp_core::guardrails::sendable::PIPELINE_ROOM;
use awsmp_core::time::{Instant, format_instant, parse_usage_timestamp};

use crate::actors::gatekeeper::{Asked, unknown_license};
use crate::actors::reconcile::agreement_id;
use crate::scenario::{ACCOUNT, PRODUCT, REGION, license};
use crate::world::World;

/// Marketplace's final-usage window after License Deprovisioned.
const FINAL_USAGE_WINDOW: chrono::Duration = chrono::Duration::hours(1);

/// Every violation of it in `world` (empty when it holds). The events stack is the main
/// stack's: the second stack's world asks nothing of its own.
pub fn check(world: &World) -> Vec<String> {
    if (world.region, world.product) != (REGION, PRODUCT) {
        return Vec::new();
    }
    let mut violations = Vec::new();
    if !world.gates.iter().any(|asked| asked.settled) {
        violations.push("GET /subscriptions was never asked after settling (liveness)".into());
    }
    let options = &world.options;
    let deprovisioned = license(3);
    let window_end = options.deprovisioned_at + FINAL_USAGE_WINDOW;
    let lost_updated = options.lost.updated.map(|n| license(n as u32 + 1));
    let registered = |l: &str| {
        world
            .registrations
            .iter()
            .any(|(r, status)| r == l && *status == 200)
    };
    for asked in &world.gates {
        let mut fail = |what: String| {
            violations.push(format!(
                "{} {} at {}{}: {what}",
                asked.via,
                asked.license,
                format_instant(asked.at),
                if asked.settled { " (settled)" } else { "" }
            ));
        };
        let answer = &asked.answer;
        let known_pending = !asked.settled && lost_updated.as_deref() == Some(&*asked.license);
        match asked.status {
            200 if asked.license == unknown_license() => {
                fail("answered 200 for a license no event named".into())
            }
            200 => {
                fail_mismatches(asked, &mut fail);
                judge_usage(
                    asked,
                    (&deprovisioned, window_end),
                    known_pending,
                    &mut fail,
                );
                if asked.settled
                    && registered(&asked.license)
                    && !answer["registeredRegions"]
                        .as_array()
                        .is_some_and(|r| r.iter().any(|v| v == REGION))
                {
                    fail(format!(
                        "the buyer registered in {REGION}, yet the answer's Regions are {} \
                         (liveness)",
                        answer["registeredRegions"]
                    ));
                }
            }
            404 if asked.license == unknown_license() => {
                if answer["code"] != "UnknownSubscription" {
                    fail(format!(
                        "404 with code {} for an unknown license",
                        answer["code"]
                    ));
                }
            }
            404 if known_pending => {}
            404 => fail("answered 404 for a buyer whose License Updated arrived".into()),
            status if status >= 500 && !asked.settled => {}
            status => fail(format!("answered {status}: {answer}")),
        }
    }
    violations
}

/// The answer names another license, buyer or agreement than the one asked about.
fn fail_mismatches(asked: &Asked, fail: &mut impl FnMut(String)) {
    let answer = &asked.answer;
    if answer["licenseArn"] != *asked.license {
        fail(format!("answered for license {}", answer["licenseArn"]));
    }
    if answer["customerAWSAccountId"] != ACCOUNT {
        fail(format!(
            "answered for account {}",
            answer["customerAWSAccountId"]
        ));
    }
    if let Some(agreement) = answer["agreementId"].as_str()
        && agreement != agreement_id(&asked.license)
    {
        fail(format!("answered agreement {agreement}"));
    }
}

/// `usage` and `writeBy` against the buyer's lifecycle.
fn judge_usage(
    asked: &Asked,
    (deprovisioned, window_end): (&str, Instant),
    known_pending: bool,
    fail: &mut impl FnMut(String),
) {
    let answer = &asked.answer;
    let instant = |field: &str| {
        answer[field]
            .as_str()
            .and_then(|t| parse_usage_timestamp(t).ok())
    };
    let is_deprovisioned = asked.license == deprovisioned;
    // Usage written now still reaches Marketplace inside the window.
    let room_left = asked.at + PIPELINE_ROOM <= window_end;
    match answer["usage"].as_str() {
        Some("billed") if is_deprovisioned && asked.settled => fail(format!(
            "billed, yet License Deprovisioned (window ends {}) has been applied or \
             repaired by now",
            format_instant(window_end)
        )),
        Some("billed") => {
            if asked.settled && answer["subscriptionStatus"] != "active" {
                fail(format!("billed while {}", answer["subscriptionStatus"]));
            }
        }
        Some("billedUntil") => {
            let want = window_end - PIPELINE_ROOM;
            if !is_deprovisioned {
                fail("billedUntil for a buyer never deprovisioned".into());
            } else if !room_left {
                fail(format!(
                    "billedUntil {}, yet usage written now no longer reaches Marketplace \
                     before the window ends at {}",
                    answer["writeBy"],
                    format_instant(window_end)
                ));
            } else if instant("writeBy") != Some(want)
                || instant("deprovisioningEndsAt") != Some(window_end)
            {
                fail(format!(
                    "billedUntil writeBy {} ends {}; want writeBy {} ends {} (usage written \
                     by then reaches Marketplace inside the window)",
                    answer["writeBy"],
                    answer["deprovisioningEndsAt"],
                    format_instant(want),
                    format_instant(window_end)
                ));
            }
        }
        Some("notBilled") if !is_deprovisioned => {
            fail("notBilled for a buyer never deprovisioned".into())
        }
        Some("notBilled") if room_left => fail(format!(
            "notBilled, yet usage written now still reaches Marketplace before the window \
             ends at {}",
            format_instant(window_end)
        )),
        Some("notBilled") => {}
        Some("pendingActivation") if known_pending => {}
        other => fail(format!("usage {other:?}")),
    }
    if asked.settled && !is_deprovisioned && answer["usage"] != "billed" {
        fail(format!("{} after settling (liveness)", answer["usage"]));
    }
}

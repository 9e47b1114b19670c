//! Marketplace as an actor of the schedule: the product it sells, the dimensions in
//! its catalog (the poison one refused until the operator defines it), the buyers it
//! entitles, and the entitlement it revokes while the pipeline runs. Its engine is
//! [`crate::marketplace`].

use awsmp_core::memory::ManualClock;

use crate::executor::Task;
use crate::marketplace::{INVALID_DIMENSION, SimMarketplace};
use crate::options::Deployment;
use crate::scenario::{ACCOUNT, IMPORTED, POISON};
use crate::sim::yield_now;
use crate::stack::Stack;

/// Marketplace: the simulator's engine at the schedule's clock, selling `product` with
/// the dimensions the seller writes except [`POISON`] (refused until the operator
/// defines it), every buyer of `licenses` entitled. A resend of a billed record with
/// the same quantity is answered as `deployment` says (AWS documents both readings; the
/// pipeline must handle either).
pub fn selling(
    deployment: &Deployment,
    clock: &ManualClock,
    product: &str,
    licenses: &[&String],
) -> SimMarketplace {
    // The settings below are valid; a change that breaks them fails every schedule.
    let api = SimMarketplace::new(
        product,
        &[
            "storage",
            "requests",
            "events",
            IMPORTED,
            POISON,
            crate::actors::edge_seller::DIMENSION,
        ],
        clock.clone(),
        deployment.marketplace_seed,
        deployment.identical_retry,
    )
    .unwrap_or_else(|e| panic!("marketplace: {e}"));
    for license in licenses {
        api.entitle(license, ACCOUNT)
            .unwrap_or_else(|e| panic!("entitle {license}: {e}"));
    }
    api.reject_dimension(POISON, INVALID_DIMENSION)
        .unwrap_or_else(|e| panic!("refuse {POISON}: {e}"));
    api
}

/// Marketplace revoking the entitlement of `license` while the pipeline runs (the
/// buyer's agreement ended and no lifecycle event has told the stack): that buyer's
/// records sent from then on are answered `CustomerNotSubscribed`.
pub fn revocation<'a>(stack: &'a Stack, license: &'a str) -> Task<'a> {
    Task::new("revoke-entitlement", async move {
        for _ in 0..stack.sim.below(120) {
            yield_now().await;
        }
        stack
            .metering
            .inner
            .revoke(license, ACCOUNT)
            .unwrap_or_else(|e| panic!("revoke {license}: {e}"));
    })
}

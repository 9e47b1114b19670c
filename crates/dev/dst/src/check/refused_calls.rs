//! Marketplace's refusals of whole calls: every call it refused with an exception was
//! refused for the dimension the schedule leaves out of the catalog, or was handed over
//! inside the window and delayed in flight past it.

use crate::marketplace::INVALID_DIMENSION;
use crate::world::World;

/// Every violation of it in `world` (empty when it holds).
pub fn check(world: &World) -> Vec<String> {
    // A call handed over inside the window and delayed in flight past it: the
    // submitter checked it as it went out (`submit/run/send.rs`); AWS judges arrival.
    let delayed = world.metering.delayed_past_window();
    world
        .metering
        .inner
        .refused_calls()
        .into_iter()
        .filter(|refused| refused.error_type != INVALID_DIMENSION)
        .filter(|refused| !delayed.contains(&refused.at))
        .map(|refused| {
            format!(
                "Marketplace refused a call of {} records at {} with {}: {}",
                refused.record_count, refused.at, refused.error_type, refused.message
            )
        })
        .collect()
}

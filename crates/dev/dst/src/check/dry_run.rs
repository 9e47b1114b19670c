//! A dry run (`METERING_MODE=dry-run`) bills nothing: whatever Marketplace billed in a
//! dry-run schedule was billed by another writer.

use crate::world::World;

/// Every group a dry run billed.
pub fn check(world: &World) -> Vec<String> {
    if world.dry_run().is_none() {
        return Vec::new();
    }
    let rival = world.metering.rival_groups();
    world
        .metering
        .inner
        .ledger()
        .keys()
        .filter(|k| !rival.contains(*k))
        .map(|key| format!("group {key}: billed by a dry run"))
        .collect()
}

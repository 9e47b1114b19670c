//! Regions: the operator's imports land in the one deployment they were imported into.
//! A file imported and reported done has every line stored there once, with its
//! quantity; no line is stored in another Region (Marketplace would bill it once in
//! each); a deployment that refused raw usage (direct-submit) stored nothing.

use crate::check::{quantity, rows_of_event};
use crate::world::World;

/// Every violation of it in `world` (empty when it holds).
pub fn check(world: &World) -> Vec<String> {
    let mut violations = Vec::new();
    let worlds: Vec<&World> = std::iter::once(world)
        .chain(world.second.as_deref())
        .collect();
    for import in &world.imports {
        for w in &worlds {
            let rows = w.tables.raw_rows();
            for (license, event_id, sent) in &import.lines {
                let stored: Vec<i64> = rows_of_event(&rows, license, event_id)
                    .map(|r| quantity(&r.attrs))
                    .collect();
                let id = format!("imported {event_id} into {}", import.region);
                let here =
                    w.region == import.region && w.product == import.product && !import.refused;
                match (here, import.done, stored.as_slice()) {
                    (false, _, []) | (true, false, _) => {}
                    (true, true, [q]) if q == sent => {}
                    (false, _, _) => violations.push(format!(
                        "{id}: stored in {} too (refused: {}): billed once in each Region",
                        w.region, import.refused
                    )),
                    (true, true, _) => violations.push(format!(
                        "{id}: the import reported done, but {} holds {stored:?} for \
                         quantity {sent}",
                        w.region
                    )),
                }
            }
        }
    }
    violations
}

//! Vendor-metered tagging: each billed record of the seller's events carries, per
//! `team` tag, exactly the quantity of the events counted into it with that tag (none
//! when the events were untagged); allocations always sum to the billed quantity.

use std::collections::BTreeMap;

use awsmp_core::model::attr;

use crate::check::{quantity, rows_of_event, text};
use crate::world::{Ingested, World};

/// Every violation of it in `world` (empty when it holds).
pub fn check(world: &World) -> Vec<String> {
    let mut violations = Vec::new();
    let ledger = world.metering.inner.ledger();
    let rows = world.tables.raw_rows();
    for record in world.tables.aggregated_records() {
        let Some(billed) = ledger.get(&record.key) else {
            continue;
        };
        let allocated: i64 = billed.allocations.values().sum();
        if !billed.allocations.is_empty() && allocated != billed.quantity {
            violations.push(format!(
                "aggregated {}: billed {} with allocations summing to {allocated}",
                record.key, billed.quantity
            ));
        }
        if world.direct() || record.key.dimension != "events" {
            continue;
        }
        let into = record.key.aggregated_sort_key();
        // An event answered twice (a retry) was stored once: count it once.
        let mut seen = std::collections::BTreeSet::new();
        let mut once: BTreeMap<Vec<(String, String)>, i64> = BTreeMap::new();
        for event in &world.ingested {
            let Some(team) = event.team else { continue };
            // An unanswered event counts when the row its id wrote holds its usage.
            let answered_written = matches!(event.answer, Ingested::Created | Ingested::Duplicate);
            let unanswered_written = event.answer == Ingested::Unanswered
                && rows_of_event(&rows, &event.license, &event.event_id)
                    .any(|r| quantity(&r.attrs) == event.quantity);
            if !(answered_written || unanswered_written)
                || !seen.insert((event.license.clone(), event.event_id.clone()))
            {
                continue;
            }
            let counted = rows_of_event(&rows, &event.license, &event.event_id)
                .any(|r| text(&r.attrs, attr::AGGREGATED_INTO) == Some(into.as_str()));
            if counted {
                *once
                    .entry(vec![("team".to_string(), team.to_string())])
                    .or_insert(0) += event.quantity;
            }
        }
        if billed.allocations != once {
            violations.push(format!(
                "aggregated {}: billed allocations {:?}, but the events counted into it \
                 carry {once:?}",
                record.key, billed.allocations
            ));
        }
    }
    violations
}

//! Ingestion by event id: an event the seller's service was answered written or
//! duplicate is stored exactly once with that usage; an id reused for other usage is
//! answered conflict and never changes what is stored; a direct-submit stack stores
//! none.

use crate::check::{quantity, rows_of_event};
use crate::world::{Ingested, World};

/// Every violation of it in `world` (empty when it holds).
pub fn check(world: &World) -> Vec<String> {
    let mut violations = Vec::new();
    let rows = world.tables.raw_rows();
    for event in &world.ingested {
        let (license, event_id, sent, answer) = (
            &event.license,
            &event.event_id,
            &event.quantity,
            &event.answer,
        );
        let stored: Vec<i64> = rows_of_event(&rows, license, event_id)
            .map(|r| quantity(&r.attrs))
            .collect();
        let id = format!("event {event_id} of {license}");
        match (answer, stored.as_slice()) {
            (Ingested::Refused, []) => {}
            (Ingested::Refused, _) => violations.push(format!(
                "{id}: refused (a direct-submit stack takes no raw usage), yet stored"
            )),
            // Unanswered: stored or not, but never twice (the arm below).
            (Ingested::Unanswered, [] | [_]) => {}
            (_, []) => violations.push(format!("{id}: answered {answer:?}, never stored")),
            (Ingested::Created | Ingested::Duplicate, [q]) if q == sent => {}
            (Ingested::Conflict, [q]) if q != sent => {}
            (_, [q]) => violations.push(format!(
                "{id}: {sent} answered {answer:?}, but {q} is stored"
            )),
            (_, many) => violations.push(format!("{id}: stored {} times", many.len())),
        }
    }
    violations
}

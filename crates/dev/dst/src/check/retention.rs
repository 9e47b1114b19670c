//! Retention ([`RETENTION`]): no item that is not final carries `expiresAt` (DynamoDB
//! would delete usage before it is billed), and every final item does, from its final
//! write (a raw row exactly the retention after its last write; a record at least that).

use std::collections::BTreeMap;

use awsmp_core::items::expiry_of;
use awsmp_core::model::{Attr, attr};

use crate::check::text;
use crate::scenario::RETENTION;
use crate::world::World;

/// Every violation of it in `world` (empty when it holds).
pub fn check(world: &World) -> Vec<String> {
    let mut violations: Vec<String> = world
        .tables
        .pending_items_with_expiry()
        .into_iter()
        .map(|item| format!("{item}: pending but carries expiresAt"))
        .collect();
    let days = chrono::Duration::days(i64::from(RETENTION.as_days()));
    let stamped = |attrs: &BTreeMap<String, Attr>| {
        text(attrs, attr::UPDATED_AT).and_then(awsmp_core::time::parse_instant)
    };
    for row in world.tables.raw_rows() {
        if row.sort_key.starts_with("event#") || row.attrs.contains_key(attr::METERING_PENDING) {
            continue;
        }
        let id = format!("raw {} {}", row.license_arn, row.sort_key);
        let expiry = row.attrs.get(attr::EXPIRES_AT).and_then(expiry_of);
        match (expiry, stamped(&row.attrs)) {
            (None, _) => violations.push(format!("{id}: final without expiresAt")),
            (Some(at), Some(written)) if at != written + days => violations.push(format!(
                "{id}: expiresAt {at} is not {} days after its final write {written}",
                RETENTION.as_days()
            )),
            _ => {}
        }
    }
    for record in world.tables.aggregated_records() {
        if !record.status.is_terminal() {
            continue;
        }
        let id = format!("aggregated {}", record.key);
        let written = world
            .tables
            .aggregated_audit(&record.key)
            .and_then(|stamp| awsmp_core::time::parse_instant(&stamp.updated_at));
        match (world.tables.aggregated_expiry(&record.key), written) {
            (None, _) => violations.push(format!("{id}: {} without expiresAt", record.status)),
            (Some(at), Some(written)) if at < written + days => violations.push(format!(
                "{id}: expiresAt {at} earlier than {} days after its final write {written}",
                RETENTION.as_days()
            )),
            _ => {}
        }
    }
    violations
}

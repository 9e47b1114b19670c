//! Marketplace's refusals before billing, checked after a settled schedule: a call
//! refused for the caller's credentials, role or signature, or whose connection failed
//! before its request was written, billed nothing, and the pipeline must not read it
//! as a call that may have. A record is `possiblyBilled` only if a call that carried it
//! may have reached Marketplace (a call that failed or was answered without a definite
//! answer), or an earlier claim on it was never released (its holder may have sent it);
//! and a late raw row is `HourAlreadySubmitted` for an hour Marketplace never billed only
//! if a call of ours reached Marketplace with it, or a claim on it lapsed. Liveness once
//! the refusals stop is [`crate::check::liveness`]'s: every refusal ends long before the
//! records' windows close, so their groups are billed.

use std::collections::BTreeSet;

use awsmp_core::model::{GroupKey, ReasonCode, attr};
use awsmp_core::submit::REASON_INTERRUPTED_SUBMISSION;
use awsmp_core::time::{HourBucket, parse_usage_timestamp};

use crate::world::World;

/// Every violation of the refusal rules in `world` (empty when they hold).
pub fn check(world: &World) -> Vec<String> {
    let mut violations = Vec::new();
    let metering = &world.metering;
    let mut may_have_billed: BTreeSet<GroupKey> = metering.ambiguous_groups();
    may_have_billed.extend(metering.lapsed_groups());
    let records = world.tables.aggregated_records();
    for record in &records {
        if record.possibly_billed == Some(true) && !may_have_billed.contains(&record.key) {
            violations.push(format!(
                "aggregated {}: possiblyBilled, yet no call that carried it may have reached \
                 Marketplace and no claim on it lapsed ({} calls were refused before \
                 processing)",
                record.key,
                metering.refusals()
            ));
        }
    }
    if world.dry_run().is_some() {
        // A dry run closes records unsent: their late rows are rightly rejected.
        return violations;
    }
    let ledger = metering.inner.ledger();
    let mut seen = may_have_billed;
    seen.extend(metering.reached_groups());
    let interrupted: BTreeSet<&GroupKey> = records
        .iter()
        .filter(|r| r.status_reason.as_deref() == Some(REASON_INTERRUPTED_SUBMISSION))
        .map(|r| &r.key)
        .collect();
    let late = ReasonCode::HourAlreadySubmitted.to_string();
    for row in world.tables.raw_rows() {
        let text = |name: &str| row.attrs.get(name).and_then(|a| a.as_s());
        if row.sort_key.starts_with("event#")
            || text(attr::METERING_STATUS_REASON) != Some(late.as_str())
        {
            continue;
        }
        let (Some(account), Some(dimension), Some(hour)) = (
            text(attr::CUSTOMER_ACCOUNT),
            text(attr::DIMENSION),
            text(attr::TIMESTAMP).and_then(|t| parse_usage_timestamp(t).ok()),
        ) else {
            continue;
        };
        let key = GroupKey {
            license_arn: row.license_arn.clone(),
            customer_aws_account_id: account.to_string(),
            dimension: dimension.to_string(),
            hour: HourBucket::containing(hour),
        };
        if !ledger.contains_key(&key) && !seen.contains(&key) && !interrupted.contains(&key) {
            violations.push(format!(
                "raw {} {}: late usage ({late}) for an hour Marketplace never billed and no call \
                 of ours reached",
                row.license_arn, row.sort_key
            ));
        }
    }
    violations
}

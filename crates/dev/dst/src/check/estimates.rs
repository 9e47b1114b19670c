//! Estimated charges in the outcome events, on the main stack (whose buyers'
//! agreements the simulation prices): every record's `estimatedCharge` is exactly its
//! `quantity` x a price its buyer's agreement had for the dimension (as first agreed,
//! or as amended), in the agreement's currency, or `unpriced` for a dimension it never
//! priced (safety); and every billed record of a buyer whose rate card was kept at its
//! License Updated carries a priced or unpriced estimate, save as many as the discoverer
//! counted sent unchecked (`UnpricedUsageUnchecked`: the buyers' rows could not be
//! read) (liveness: a price read and dropped on the way to the record shows here). A
//! direct-submit stack's records are the seller's, priced by no discoverer.

use std::collections::BTreeSet;

use awsmp_core::outcomes::RECORD_OUTCOME;
use awsmp_core::ports::metric;
use rust_decimal::Decimal;
use serde_json::Value;

use crate::actors::reconcile::{amended_when_settled, prices};
use crate::scenario::{ACCOUNT, PRODUCT, REGION, license};
use crate::world::World;

/// The prices `license_arn`'s agreement ever had for `dimension`.
fn agreed(license_arn: &str, dimension: &str, n: Option<usize>) -> Vec<Decimal> {
    let amended = n.is_some_and(amended_when_settled);
    [false, amended]
        .into_iter()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .flat_map(|a| prices(license_arn, a))
        .filter(|(d, _)| d == dimension)
        .map(|(_, p)| p)
        .collect()
}

/// Every violation of it in `world` (empty when it holds, or when the world runs no
/// outcome-events function).
pub fn check(world: &World) -> Vec<String> {
    let Some(outcomes) = &world.outcomes else {
        return Vec::new();
    };
    if (world.region, world.product) != (REGION, PRODUCT) {
        return Vec::new();
    }
    let buyer = |license_arn: &str| (0..3usize).find(|n| license(*n as u32 + 1) == license_arn);
    // A direct-submit seller writes the records: no discoverer prices them. A buyer's
    // card is kept from its License Updated on, unless that event was lost or the read
    // after it throttled (then the reconciliation keeps it, maybe after some sends).
    let kept_from_start =
        |n: usize| world.options.lost.card_kept_at_activation(n) && !world.options.settings.direct;
    let rival = world.metering.rival_record_keys();
    let mut violations = Vec::new();
    let mut unestimated = BTreeSet::new();
    for event in outcomes.told() {
        if event.detail_type != RECORD_OUTCOME {
            continue;
        }
        let detail: Value = serde_json::from_str(&event.detail).unwrap_or(Value::Null);
        let (Some(license_arn), Some(key)) =
            (detail["licenseArn"].as_str(), detail["recordKey"].as_str())
        else {
            continue;
        };
        let (Some(dimension), Some(quantity)) =
            (detail["dimension"].as_str(), detail["quantity"].as_i64())
        else {
            continue;
        };
        let n = buyer(license_arn);
        let charge = &detail["estimatedCharge"];
        let agreed = agreed(license_arn, dimension, n);
        let who = format!("estimates: {license_arn}/{key} ({})", detail["outcomeId"]);
        match charge["basis"].as_str() {
            Some("priced") => {
                let amount: Option<Decimal> =
                    charge["amount"].as_str().and_then(|a| a.parse().ok());
                let fits = agreed
                    .iter()
                    .any(|p| amount == Some(*p * Decimal::from(quantity)));
                if n.is_none() || !fits || charge["currency"] != "USD" {
                    violations.push(format!(
                        "{who}: told {charge} for {quantity} {dimension}, but the buyer's \
                         agreement priced it at {agreed:?} USD"
                    ));
                }
            }
            Some("unpriced") if agreed.is_empty() => {}
            Some("no rate card") => {
                let from_start = n.is_some_and(kept_from_start);
                if from_start
                    && detail["billed"] == true
                    && key.starts_with(ACCOUNT)
                    && !rival.contains(&(license_arn.to_string(), key.to_string()))
                {
                    unestimated.insert((license_arn.to_string(), key.to_string()));
                }
            }
            _ => violations.push(format!(
                "{who}: told {charge} for {dimension}, which the buyer's agreement prices at \
                 {agreed:?}"
            )),
        }
    }
    let unchecked = world.metrics.total(metric::UNPRICED_USAGE_UNCHECKED);
    if unestimated.len() as u64 > unchecked {
        violations.push(format!(
            "estimates: {} billed records of buyers with a kept rate card were told with no \
             rate card ({:?}), but only {unchecked} groups were sent unchecked",
            unestimated.len(),
            unestimated.iter().take(3).collect::<Vec<_>>()
        ));
    }
    violations
}

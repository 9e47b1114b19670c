//! Unpriced dimensions: every dimension the discoverer reports unpriced truly is (its
//! buyer's agreement prices neither it nor, for another buyer, anything it is confused
//! with), and every dimension of counted usage that a subscribed buyer's rate card does
//! not price was reported by some discoverer run before it was billed, in its report
//! or (a run that then failed returns none) its `UnpricedUsage` metric, unless a run
//! could not read the rows and said so (`UnpricedUsageUnchecked`) (liveness; a buyer
//! whose card was not kept at its License Updated, lost or its read throttled, gets it
//! only mid-run and is left out).

use std::collections::BTreeSet;

use awsmp_core::model::{Attr, RawStatus, attr};
use awsmp_core::ports::metric;

use crate::actors::reconcile::{agreement_id, prices};
use crate::scenario::{ACCOUNT, PRODUCT, REGION, license};
use crate::world::World;

/// Every violation of it in `world` (empty when it holds): the main stack's only (its
/// buyers' agreements are the ones the simulation prices).
pub fn check(world: &World) -> Vec<String> {
    if (world.region, world.product) != (REGION, PRODUCT) {
        return Vec::new();
    }
    let mut violations = Vec::new();
    let priced = |license: &str| -> BTreeSet<String> {
        prices(license, false).into_iter().map(|(d, _)| d).collect()
    };
    let mut reported = BTreeSet::new();
    for report in &world.discoveries {
        for u in &report.unpriced {
            if priced(&u.license_arn).contains(&u.dimension)
                || u.agreement_id != agreement_id(&u.license_arn)
            {
                violations.push(format!(
                    "{} was reported unpriced on {} of {}, whose agreement {} prices {:?} (unpriced)",
                    u.dimension,
                    u.agreement_id,
                    u.license_arn,
                    agreement_id(&u.license_arn),
                    priced(&u.license_arn)
                ));
            }
            reported.insert((u.license_arn.clone(), u.dimension.clone()));
        }
    }
    // A page sent unchecked (its buyers' rows unreadable) says so in the metric.
    if world.metrics.total(metric::UNPRICED_USAGE_UNCHECKED) > 0 {
        return violations;
    }
    let subscribed: Vec<String> = (0..3usize)
        .filter(|n| world.options.lost.card_kept_at_activation(*n))
        .map(|n| license(n as u32 + 1))
        .collect();
    let counted: BTreeSet<(String, String)> = world
        .tables
        .raw_rows()
        .into_iter()
        .filter(|row| {
            row.attrs.get(attr::METERING_STATUS).and_then(Attr::as_s)
                == Some(RawStatus::Aggregated.as_str())
        })
        .filter(|row| row.sort_key.starts_with(ACCOUNT))
        .filter_map(|row| {
            let dimension = row
                .attrs
                .get(attr::DIMENSION)
                .and_then(Attr::as_s)?
                .to_string();
            Some((row.license_arn, dimension))
        })
        .collect();
    for (license_arn, dimension) in counted {
        if subscribed.contains(&license_arn)
            && !priced(&license_arn).contains(&dimension)
            && !reported.contains(&(license_arn.clone(), dimension.clone()))
            && world
                .metrics
                .get(metric::UNPRICED_USAGE, &[("Dimension", dimension.as_str())])
                == 0
        {
            violations.push(format!(
                "usage of {dimension} for {license_arn} was counted to be billed, its agreement \
                 prices only {:?}, and no discoverer run reported it (unpriced)",
                priced(&license_arn)
            ));
        }
    }
    violations
}

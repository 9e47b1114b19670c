//! Registration: a buyer with a valid token is never refused (only a server error under
//! faults, which the page retries); an answered registration is stored (profile and
//! Region); and registering never changes a lifecycle status the events set.

use awsmp_core::model::SubscriptionStatus;

use crate::scenario::{ACCOUNT, REGION};
use crate::world::World;

/// Every violation of it in `world` (empty when it holds).
pub fn check(world: &World) -> Vec<String> {
    let mut violations = Vec::new();
    for (license, status) in &world.registrations {
        let id = format!("registration {license}");
        let row = world
            .subscribers
            .rows()
            .into_iter()
            .find(|r| r.license_arn == *license && r.customer_aws_account_id == ACCOUNT);
        match status {
            200 => {
                if !row
                    .as_ref()
                    .is_some_and(|r| r.registered_regions.iter().any(|x| x == REGION))
                {
                    violations.push(format!("{id}: answered 200 but {REGION} is not recorded"));
                }
                if world.profiles.get(license, ACCOUNT).is_none() {
                    violations.push(format!("{id}: answered 200 but no profile was stored"));
                }
            }
            500.. => {}
            other => violations.push(format!("{id}: a valid buyer was answered {other}")),
        }
        let expected_active = !world.deprovisioned.contains(license);
        let active =
            row.as_ref().and_then(|r| r.subscription_status) == Some(SubscriptionStatus::Active);
        if active != expected_active {
            violations.push(format!(
                "{id}: subscription status {:?} after its lifecycle events (registration \
                 must not change it)",
                row.and_then(|r| r.subscription_status)
            ));
        }
    }
    violations
}

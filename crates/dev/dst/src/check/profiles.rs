//! Profile retention: a profile is set to expire only for a deprovisioned license of
//! this product, and exactly `PROFILE_RETENTION_DAYS` after its deprovisioning window
//! ends; never a live buyer's, never one another product's stack saw.

use crate::scenario::PROFILE_RETENTION_DAYS;
use crate::world::World;

/// Every violation of it in `world` (empty when it holds).
pub fn check(world: &World) -> Vec<String> {
    let mut violations = Vec::new();
    let rows = world.subscribers.rows();
    for profile in world.profiles.all() {
        let (license, account) = (&profile.license_arn, &profile.customer_aws_account_id);
        let Some(at) = world.profiles.expires_at(license, account) else {
            continue;
        };
        let id = format!("profile {license}");
        if !world.deprovisioned.contains(license) {
            violations.push(format!(
                "{id}: set to expire at {at} but never deprovisioned"
            ));
            continue;
        }
        let expected = rows
            .iter()
            .find(|r| r.license_arn == *license && r.customer_aws_account_id == *account)
            .and_then(|r| r.deprovisioning_expiry)
            .map(|e| e + chrono::Duration::days(PROFILE_RETENTION_DAYS));
        if expected != Some(at) {
            violations.push(format!(
                "{id}: expires at {at}, not {PROFILE_DAYS} days after its deprovisioning window ({expected:?})",
                PROFILE_DAYS = PROFILE_RETENTION_DAYS
            ));
        }
    }
    violations
}

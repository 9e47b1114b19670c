//! The buyer-events invariant, after a settled schedule, over the subscribers table's
//! recorded stream (the rows before and after each committed change, read here without
//! the function's derivation): every status change, agreement change and counted
//! registration (a repeat too) was told exactly once per `eventId` (repeated deliveries
//! of one id must agree and are deduplicated; two ids for one change are a violation);
//! a `Buyer Deprovisioning` says `billedUntil` = the row's `deprovisioningExpiry`; a
//! `Buyer Registered` says `repeat`, `registrationCount` and `formFields` as the row
//! counted them; nothing is told that no committed change made; and no event carries a
//! field outside the documented, PII-free set, or what the buyer typed into the form. The stream is drained fault-free before the check, so a change never told is a
//! liveness failure too.

use std::collections::{BTreeMap, BTreeSet};

use awsmp_core::lifecycle::buyer_events::SOURCE;
use awsmp_core::memory::SubscriberChange;
use awsmp_core::model::{AgreementStatus, Subscriber, SubscriptionStatus};
use awsmp_core::time::format_instant;
use serde_json::Value;

use crate::world::World;

/// Every field a buyer event's detail may carry (docs/buyer-events.md): none is PII.
const FIELDS: &[&str] = &[
    "detailVersion",
    "eventId",
    "licenseArn",
    "customerAWSAccountId",
    "productCode",
    "agreementId",
    "occurredAt",
    "billedUntil",
    "region",
    "firstRegistration",
    "repeat",
    "registrationCount",
    "formFields",
    "previousAgreementId",
];

/// What the simulated buyers type into the form's one field (`companyName`): no event
/// may carry it.
const FORM_VALUE: &str = "Example Corp";

/// What one told event is about: (license, account, detail-type, Region or "").
type About = (String, String, String, String);

/// One copy of a told event: its detail-type, detail and resources.
type Copy = (&'static str, Value, Vec<String>);

/// What `change` should tell, each as what it is about, with what it must carry (a
/// deprovisioning's `billedUntil`; a counted registration's `repeat`,
/// `registrationCount` and `formFields`, as JSON), read from the rows themselves.
fn expected(change: &SubscriberChange) -> Vec<(About, Option<String>)> {
    let new = &change.new;
    let empty = Subscriber::new(new.license_arn.clone(), new.customer_aws_account_id.clone());
    let old = change.old.as_ref().unwrap_or(&empty);
    let about = |kind: &str, region: &str| {
        (
            new.license_arn.clone(),
            new.customer_aws_account_id.clone(),
            kind.to_string(),
            region.to_string(),
        )
    };
    let mut out = Vec::new();
    if new.subscription_status != old.subscription_status {
        match new.subscription_status {
            Some(SubscriptionStatus::Active) => out.push((about("Buyer Subscribed", ""), None)),
            Some(SubscriptionStatus::Deprovisioning) => out.push((
                about("Buyer Deprovisioning", ""),
                new.deprovisioning_expiry.map(format_instant),
            )),
            Some(SubscriptionStatus::Inactive) => out.push((about("Buyer Inactive", ""), None)),
            None => {}
        }
    }
    let (before, after) = (&old.registrations, &new.registrations);
    if after.count > before.count {
        let region = after.last_region.clone().unwrap_or_default();
        let carries = serde_json::json!({
            "repeat": old.registered_regions.contains(&region),
            "registrationCount": after.count,
            "formFields": after.fields,
        });
        out.push((
            about("Buyer Registered", &region),
            Some(carries.to_string()),
        ));
    } else {
        for region in &new.registered_regions {
            if !old.registered_regions.contains(region) {
                out.push((about("Buyer Registered", region), None));
            }
        }
    }
    if new.agreement_status == Some(AgreementStatus::Inactive)
        && old.agreement_status != Some(AgreementStatus::Inactive)
    {
        out.push((about("Buyer Agreement Ended", ""), None));
    }
    if let (Some(before), Some(after)) = (&old.agreement_id, &new.agreement_id)
        && !before.is_empty()
        && !after.is_empty()
        && before != after
    {
        out.push((about("Buyer Agreement Replaced", ""), None));
    }
    out
}

/// Every violation of the buyer-events invariant in `world` (empty when it holds, or
/// when the world runs no buyer-events function).
pub fn check(world: &World) -> Vec<String> {
    let Some(buyers) = &world.buyer_events else {
        return Vec::new();
    };
    let mut violations = Vec::new();
    // What the committed changes should have told, with each change's billedUntil.
    let mut changes: BTreeMap<About, Vec<Option<String>>> = BTreeMap::new();
    for change in buyers.changes() {
        for (about, billed_until) in expected(&change) {
            changes.entry(about).or_default().push(billed_until);
        }
    }
    // Every copy of each event, by eventId.
    let mut told: BTreeMap<String, Vec<Copy>> = BTreeMap::new();
    for event in buyers.told() {
        if event.source != SOURCE {
            violations.push(format!("buyer events: an event of source {}", event.source));
            continue;
        }
        let detail: Value = serde_json::from_str(&event.detail).unwrap_or(Value::Null);
        let id = detail["eventId"].as_str().unwrap_or_default().to_string();
        told.entry(id)
            .or_default()
            .push((event.detail_type, detail, event.resources.clone()));
    }
    let mut ids: BTreeMap<About, BTreeSet<String>> = BTreeMap::new();
    for (id, copies) in &told {
        let (detail_type, detail, resources) = &copies[0];
        if copies
            .iter()
            .any(|(t, d, r)| (t, d, r) != (detail_type, detail, resources))
        {
            violations.push(format!(
                "buyer events: {id} told {} times, not all alike",
                copies.len()
            ));
        }
        let text = |name: &str| detail[name].as_str().unwrap_or_default().to_string();
        if let Some(extra) = detail
            .as_object()
            .and_then(|o| o.keys().find(|k| !FIELDS.contains(&k.as_str())))
        {
            violations.push(format!(
                "buyer events: {id} carries {extra}, outside the documented fields: {detail}"
            ));
        }
        if detail["detailVersion"] != 1 || *resources != vec![text("licenseArn")] {
            violations.push(format!(
                "buyer events: {id} ({detail_type}) has detailVersion {} and resources {resources:?}",
                detail["detailVersion"]
            ));
        }
        let about: About = (
            text("licenseArn"),
            text("customerAWSAccountId"),
            detail_type.to_string(),
            text("region"),
        );
        let Some(made) = changes.get(&about) else {
            violations.push(format!(
                "buyer events: told {detail_type} {detail}, which no committed change made"
            ));
            continue;
        };
        if detail.to_string().contains(FORM_VALUE) {
            violations.push(format!(
                "buyer events: {id} carries what the buyer typed into the form: {detail}"
            ));
        }
        if *detail_type == "Buyer Registered" && made.iter().any(Option::is_some) {
            let carries = serde_json::json!({
                "repeat": detail["repeat"],
                "registrationCount": detail["registrationCount"],
                "formFields": detail["formFields"],
            })
            .to_string();
            if !made.contains(&Some(carries.clone())) {
                violations.push(format!(
                    "buyer events: {id} tells {carries}, but the registrations counted on                      the row made {made:?}: {detail}"
                ));
            }
        }
        if *detail_type == "Buyer Deprovisioning" {
            let billed_until = detail["billedUntil"].as_str().map(str::to_string);
            if !made.contains(&billed_until) {
                violations.push(format!(
                    "buyer events: {id} says billedUntil {billed_until:?}, but the row's \
                     deprovisioningExpiry was {made:?}: {detail}"
                ));
            }
        }
        ids.entry(about).or_default().insert(id.clone());
    }
    for (about, made) in &changes {
        let distinct = ids.get(about).map_or(0, BTreeSet::len);
        if distinct != made.len() {
            let (license, account, kind, region) = about;
            violations.push(format!(
                "buyer events: {license}/{account} {kind}{}: {} change(s) made it, told under \
                 {distinct} eventId(s)",
                if region.is_empty() {
                    String::new()
                } else {
                    format!(" {region}")
                },
                made.len()
            ));
        }
    }
    violations
}

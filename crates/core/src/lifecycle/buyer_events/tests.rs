//! Which change of a subscribers row tells which buyer event, the ids every
//! redelivery repeats, and the bus's refusals named for redelivery.

use std::collections::BTreeSet;

use super::*;
use crate::lifecycle::fixtures::{
    ACCOUNT, AGREEMENT, LICENSE, PRODUCT, deprovisioned, ended, t, updated,
};
use crate::lifecycle::{Transition, apply, expire_deprovisioning};
use crate::memory::MemoryBus;

/// The row `event` makes of `row` (the lifecycle's own transition).
fn after(row: Option<&Subscriber>, event: &crate::lifecycle::MarketplaceEvent) -> Subscriber {
    match apply(row, event) {
        Transition::Write { row, .. } => {
            let mut row = row.clone();
            row.version += 1;
            row
        }
        other => panic!("expected a write, got {other:?}"),
    }
}

fn kinds(events: &[BuyerEvent]) -> Vec<BuyerEventKind> {
    events.iter().map(|e| e.kind).collect()
}

fn change(id: &str, old: Option<&Subscriber>, new: Option<&Subscriber>) -> Change {
    Change {
        change_id: id.to_string(),
        position: id.to_string(),
        old: old.map(|r| subscriber_image(r, None)),
        new: new.map(|r| subscriber_image(r, Some("2026-11-30T10:00:00.000Z"))),
    }
}

#[test]
fn a_license_updated_tells_subscribed_with_its_agreement_and_product() {
    let active = after(None, &updated("2026-11-30T10:00:00Z"));
    let events = derive(None, Some(&active));
    assert_eq!(kinds(&events), vec![BuyerEventKind::Subscribed]);
    let d = &events[0].detail;
    assert_eq!(d.license_arn, LICENSE);
    assert_eq!(d.customer_aws_account_id, ACCOUNT);
    assert_eq!(d.agreement_id.as_deref(), Some(AGREEMENT));
    assert_eq!(d.product_code.as_deref(), Some(PRODUCT));
    assert_eq!(d.occurred_at.as_deref(), Some("2026-11-30T10:00:00Z"));
    let bus = events[0].bus_event().unwrap();
    assert_eq!(bus.source, "awsmp.buyers");
    assert_eq!(bus.detail_type, "Buyer Subscribed");
    assert_eq!(bus.resources, vec![LICENSE.to_string()]);
    let json: serde_json::Value = serde_json::from_str(&bus.detail).unwrap();
    assert_eq!(json["detailVersion"], 1);
    assert_eq!(json["customerAWSAccountId"], ACCOUNT);
    assert!(
        json.get("billedUntil").is_none(),
        "absent fields are left out"
    );
    // The same License Updated again changes nothing and tells nothing.
    assert!(derive(Some(&active), Some(&active)).is_empty());
}

#[test]
fn deprovisioning_tells_billed_until_the_rows_expiry_then_inactive() {
    let active = after(None, &updated("2026-11-30T10:00:00Z"));
    let deprov = after(Some(&active), &deprovisioned("2026-11-30T12:00:00Z"));
    let events = derive(Some(&active), Some(&deprov));
    assert_eq!(kinds(&events), vec![BuyerEventKind::Deprovisioning]);
    let expiry = deprov.deprovisioning_expiry.unwrap();
    assert_eq!(
        events[0].detail.billed_until.as_deref(),
        Some(format_instant(expiry).as_str())
    );
    assert_eq!(
        events[0].detail.occurred_at.as_deref(),
        Some("2026-11-30T12:00:00Z")
    );
    let mut inactive = expire_deprovisioning(&deprov, expiry).unwrap();
    inactive.version += 1;
    let events = derive(Some(&deprov), Some(&inactive));
    assert_eq!(kinds(&events), vec![BuyerEventKind::Inactive]);
    assert_eq!(
        events[0].detail.billed_until.as_deref(),
        Some(format_instant(expiry).as_str())
    );
}

#[test]
fn agreement_ended_and_replaced() {
    let active = after(None, &updated("2026-11-30T10:00:00Z"));
    let ended_row = after(Some(&active), &ended("2026-11-30T11:00:00Z"));
    assert_eq!(
        kinds(&derive(Some(&active), Some(&ended_row))),
        vec![BuyerEventKind::AgreementEnded]
    );
    let mut renewed = active.clone();
    renewed.agreement_id = Some("agmt-renewed".into());
    renewed.agreement_event_at = Some(t("2026-12-01T00:00:00Z"));
    renewed.version += 1;
    let events = derive(Some(&active), Some(&renewed));
    assert_eq!(kinds(&events), vec![BuyerEventKind::AgreementReplaced]);
    assert_eq!(
        events[0].detail.previous_agreement_id.as_deref(),
        Some(AGREEMENT)
    );
    assert_eq!(
        events[0].detail.agreement_id.as_deref(),
        Some("agmt-renewed")
    );
    // An agreement id appearing where there was none is no replacement.
    let mut bare = active.clone();
    bare.agreement_id = None;
    assert!(derive(Some(&bare), Some(&active)).is_empty());
}

#[test]
fn each_new_region_is_one_registration_the_first_says_so() {
    let mut row = Subscriber::new(LICENSE, ACCOUNT);
    row.product_code = Some(PRODUCT.into());
    let mut one = row.clone();
    one.registered_regions = vec!["eu-west-1".into()];
    let events = derive(Some(&row), Some(&one));
    assert_eq!(kinds(&events), vec![BuyerEventKind::Registered]);
    assert_eq!(events[0].detail.region.as_deref(), Some("eu-west-1"));
    assert_eq!(events[0].detail.first_registration, Some(true));
    let mut two = one.clone();
    two.registered_regions = vec!["ap-south-1".into(), "eu-west-1".into(), "us-east-1".into()];
    let events = derive(Some(&one), Some(&two));
    assert_eq!(events.len(), 2);
    assert!(
        events
            .iter()
            .all(|e| e.detail.first_registration == Some(false))
    );
    let regions: Vec<_> = events
        .iter()
        .filter_map(|e| e.detail.region.clone())
        .collect();
    assert_eq!(regions, vec!["ap-south-1", "us-east-1"]);
    // An insert with two Regions at once: both first.
    let events = derive(None, Some(&two));
    assert_eq!(events.len(), 3);
    assert!(
        events
            .iter()
            .all(|e| e.detail.first_registration == Some(true))
    );
}

#[test]
fn each_counted_registration_is_told_once_a_repeat_as_such_with_its_field_names() {
    use crate::model::RegistrationFacts;
    let registered = |before: &Subscriber, region: &str, fields: &[&str]| {
        let mut row = before.clone();
        if !row.registered_regions.iter().any(|r| r == region) {
            row.registered_regions.push(region.into());
            row.registered_regions.sort();
        }
        let told = &mut row.registrations;
        told.count += 1;
        told.last_region = Some(region.into());
        told.fields.extend(fields.iter().map(|f| f.to_string()));
        told.fields.sort();
        told.fields.dedup();
        row
    };
    let row = Subscriber::new(LICENSE, ACCOUNT);
    let first = registered(&row, "eu-west-1", &["email"]);
    let again = registered(&first, "eu-west-1", &["companyName", "email"]);
    let elsewhere = registered(&again, "us-east-1", &[]);
    let told: Vec<BuyerEvent> = [(&row, &first), (&first, &again), (&again, &elsewhere)]
        .into_iter()
        .flat_map(|(old, new)| derive(Some(old), Some(new)))
        .collect();
    assert_eq!(kinds(&told), vec![BuyerEventKind::Registered; 3]);
    let facts: Vec<_> = told
        .iter()
        .map(|e| {
            let d = &e.detail;
            (
                d.region.clone().unwrap(),
                d.first_registration.unwrap(),
                d.repeat.unwrap(),
                d.registration_count.unwrap(),
                d.form_fields.clone().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        facts,
        vec![
            ("eu-west-1".into(), true, false, 1, vec!["email".into()]),
            (
                "eu-west-1".into(),
                false,
                true,
                2,
                vec!["companyName".into(), "email".into()]
            ),
            (
                "us-east-1".into(),
                false,
                false,
                3,
                vec!["companyName".into(), "email".into()]
            ),
        ]
    );
    // Three registrations, three ids; a redelivery of one carries its id again.
    let ids: std::collections::BTreeSet<_> = told.iter().map(|e| &e.detail.event_id).collect();
    assert_eq!(ids.len(), 3);
    assert_eq!(derive(Some(&first), Some(&again)), vec![told[1].clone()]);
    // The image carries the count, Region and names, and reads back.
    assert_eq!(
        subscriber_from_image(&subscriber_image(&elsewhere, None)),
        Some(elsewhere.clone())
    );
    assert_ne!(*elsewhere.registrations, RegistrationFacts::default());
    // No value ever: the event's detail holds names only.
    let detail = serde_json::to_value(&told[1].detail).unwrap();
    assert_eq!(
        detail["formFields"],
        serde_json::json!(["companyName", "email"])
    );
    assert_eq!(detail["repeat"], true);
    assert_eq!(detail["registrationCount"], 2);
}

#[test]
fn a_change_of_nothing_told_tells_nothing_and_a_removal_neither() {
    let active = after(None, &updated("2026-11-30T10:00:00Z"));
    let mut touched = active.clone();
    touched.version += 1;
    assert!(derive(Some(&active), Some(&touched)).is_empty());
    assert!(derive(Some(&active), None).is_empty());
    assert!(derive_change(&Change::default()).is_empty());
}

#[test]
fn ids_are_the_same_on_every_delivery_and_differ_between_changes() {
    let active = after(None, &updated("2026-11-30T10:00:00Z"));
    let deprov = after(Some(&active), &deprovisioned("2026-11-30T12:00:00Z"));
    let first = derive_change(&change("1", None, Some(&active)));
    let again = derive_change(&change("1", None, Some(&active)));
    assert_eq!(first, again);
    // Active again after deprovisioning (the lifecycle refuses that today; the
    // derivation does not rely on it): another Subscribed, another id.
    let mut back = deprov.clone();
    back.subscription_status = Some(SubscriptionStatus::Active);
    back.subscription_event_at = Some(t("2026-11-30T13:00:00Z"));
    back.version += 1;
    let second = derive(Some(&deprov), Some(&back));
    assert_eq!(kinds(&second), vec![BuyerEventKind::Subscribed]);
    assert_ne!(first[0].detail.event_id, second[0].detail.event_id);
    let all: BTreeSet<String> = [first, second, derive(Some(&active), Some(&deprov))]
        .concat()
        .into_iter()
        .map(|e| e.detail.event_id)
        .collect();
    assert_eq!(all.len(), 3);
}

#[test]
fn an_image_round_trips_to_its_row() {
    let active = after(None, &updated("2026-11-30T10:00:00Z"));
    let mut row = after(Some(&active), &deprovisioned("2026-11-30T12:00:00Z"));
    row.registered_regions = vec!["eu-west-1".into(), "us-east-1".into()];
    let at = crate::time::parse_instant("2026-11-30T10:00:00Z").unwrap();
    row.rate_card = Some(Box::new(crate::charges::StoredRateCard {
        card: crate::charges::RateCard {
            agreement_id: "agmt-1".into(),
            start: at,
            terms: crate::ports::AgreementTerms {
                currency: Some("USD".into()),
                rate_card: [("requests".to_string(), "0.0025".parse().unwrap())].into(),
                free_trial: None,
                has_upfront: false,
            },
        },
        agreement_updated_at: None,
        read_at: at,
    }));
    assert_eq!(
        subscriber_from_image(&subscriber_image(&row, None)),
        Some(row)
    );
    assert_eq!(subscriber_from_image(&BTreeMap::new()), None);
}

#[tokio::test]
async fn a_refused_event_names_its_change_once_the_others_are_published() {
    let active = after(None, &updated("2026-11-30T10:00:00Z"));
    let mut registered = active.clone();
    registered.registered_regions = vec!["eu-west-1".into(), "us-east-1".into()];
    let deprov = after(Some(&registered), &deprovisioned("2026-11-30T12:00:00Z"));
    let changes = vec![
        change("1", None, Some(&active)),
        change("2", Some(&active), Some(&registered)),
        change("3", Some(&active), Some(&active)),
        change("4", Some(&registered), Some(&deprov)),
    ];
    let bus = MemoryBus::new();
    // Both Registered events of change 2 refused: the change is named once.
    bus.refuse_next(&[1, 2], "ThrottlingException");
    let report = publish(&changes, &bus).await;
    assert_eq!(report.failed, vec!["2".to_string()]);
    assert_eq!(report.published, 2);
    assert_eq!(report.silent, 1);
    let taken: Vec<&str> = bus.taken().iter().map(|e| e.detail_type).collect();
    assert_eq!(taken, vec!["Buyer Subscribed", "Buyer Deprovisioning"]);
}

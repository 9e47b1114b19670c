//! Buyer lifecycle events: what a change of one subscribers-table row tells a seller
//! (a buyer subscribed, registered in a Region, is deprovisioning until a known
//! instant, went inactive, its agreement ended or was replaced), derived from the
//! table's stream (old and new images) by [`derive`], a pure function, and put on the
//! events stack's default bus (us-east-1) by the `buyer-events` function through
//! [`publish`]. Nothing is added to the lifecycle functions' path: the events are read
//! after the row's write committed.
//!
//! Each event's `eventId` is a digest of the license, the account, the kind and what
//! identifies the change in the row (its `version` and ordering guard, or the Region
//! registered), so every delivery of one change carries the same id: delivery is at
//! least once, consumers deduplicate on `eventId`. The subscribers table holds no
//! buyer contact data, and neither does an event.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::model::{
    AgreementStatus, Attr, Subscriber, SubscriptionStatus, attr, subscriber_attr as sa,
};
use crate::outcomes::{Change, PublishReport, put_all};
use crate::ports::{BusEvent, EventBus};
use crate::time::{format_instant, parse_instant};

/// `source` of every buyer lifecycle event.
pub const SOURCE: &str = "awsmp.buyers";
/// The version of the detail's shape (`detailVersion`), raised on a breaking change.
pub const DETAIL_VERSION: u32 = 1;

/// What a change tells, one `detail-type` each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum BuyerEventKind {
    /// `subscriptionStatus` became `active` (License Updated).
    Subscribed,
    /// A Region was added to `registeredRegions` (one event per Region).
    Registered,
    /// `subscriptionStatus` became `deprovisioning` (License Deprovisioned).
    Deprovisioning,
    /// `subscriptionStatus` became `inactive` (the final-usage window closed).
    Inactive,
    /// `agreementStatus` became `inactive` (Purchase Agreement Ended).
    AgreementEnded,
    /// `agreementId` changed from one id to another (a renewal or replacement).
    AgreementReplaced,
}

impl BuyerEventKind {
    /// Every kind, in the order [`derive`] tells them.
    pub const ALL: [BuyerEventKind; 6] = [
        BuyerEventKind::Subscribed,
        BuyerEventKind::Registered,
        BuyerEventKind::Deprovisioning,
        BuyerEventKind::Inactive,
        BuyerEventKind::AgreementEnded,
        BuyerEventKind::AgreementReplaced,
    ];

    /// The event's `detail-type`.
    pub fn detail_type(self) -> &'static str {
        match self {
            BuyerEventKind::Subscribed => "Buyer Subscribed",
            BuyerEventKind::Registered => "Buyer Registered",
            BuyerEventKind::Deprovisioning => "Buyer Deprovisioning",
            BuyerEventKind::Inactive => "Buyer Inactive",
            BuyerEventKind::AgreementEnded => "Buyer Agreement Ended",
            BuyerEventKind::AgreementReplaced => "Buyer Agreement Replaced",
        }
    }

    /// The kind a `detail-type` names.
    pub fn from_detail_type(detail_type: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|kind| kind.detail_type() == detail_type)
    }
}

/// The `detail` of a buyer lifecycle event. Optional fields are left out when absent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BuyerEventDetail {
    /// [`DETAIL_VERSION`].
    pub detail_version: u32,
    /// The event's identity: every delivery of the same change carries the same one.
    pub event_id: String,
    /// License (the row's partition key).
    pub license_arn: String,
    /// The buyer's account (the row's sort key).
    #[serde(rename = "customerAWSAccountId")]
    pub customer_aws_account_id: String,
    /// The product, when the row has it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub product_code: Option<String>,
    /// The agreement after the change, when the row has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agreement_id: Option<String>,
    /// When the change happened, as the row records it: the Marketplace event's time
    /// (the row's ordering guard) for a status or agreement change, the window's end
    /// for `Buyer Inactive`; absent for `Buyer Registered` (no instant per Region).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub occurred_at: Option<String>,
    /// `Buyer Deprovisioning`, `Buyer Inactive`: `deprovisioningExpiry`, the last moment
    /// whose usage is billed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub billed_until: Option<String>,
    /// `Buyer Registered`: the Region the buyer registered in.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// `Buyer Registered`: `true` when the buyer had registered in no Region before.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_registration: Option<bool>,
    /// `Buyer Registered`: `true` for a registration in a Region the buyer had already
    /// registered in (the page posted again): counted, told, nothing new to provision.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repeat: Option<bool>,
    /// `Buyer Registered`: the buyer's registrations so far, every Region, this one
    /// and repeats included.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub registration_count: Option<u64>,
    /// `Buyer Registered`: the names of the form fields the buyer's registrations
    /// carried, sorted; never their values (read them through the profile role).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub form_fields: Option<Vec<String>>,
    /// `Buyer Agreement Replaced`: the agreement before the change.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub previous_agreement_id: Option<String>,
}

/// One buyer lifecycle event derived from a change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuyerEvent {
    /// Its kind (`detail-type`).
    pub kind: BuyerEventKind,
    /// Its detail.
    pub detail: BuyerEventDetail,
}

impl BuyerEvent {
    /// The `PutEvents` entry: source [`SOURCE`], `resources` the license ARN. `None`
    /// only if the detail cannot be serialized (it always can).
    pub fn bus_event(&self) -> Option<BusEvent> {
        let detail = serde_json::to_string(&self.detail).ok()?;
        Some(BusEvent {
            source: SOURCE,
            detail_type: self.kind.detail_type(),
            detail,
            resources: vec![self.detail.license_arn.clone()],
        })
    }
}

/// A subscribers-table row as its image holds it: `None` unless it has both keys. A
/// lifecycle field that cannot be read is taken as absent (an event for it is then
/// not told rather than told wrong).
pub fn subscriber_from_image(image: &BTreeMap<String, Attr>) -> Option<Subscriber> {
    let text = |name: &str| image.get(name).and_then(Attr::as_s).map(str::to_string);
    let instant = |name: &str| text(name).as_deref().and_then(parse_instant);
    let mut row = Subscriber::new(text(attr::LICENSE_ARN)?, text(attr::CUSTOMER_ACCOUNT)?);
    row.product_code = text(attr::PRODUCT_CODE);
    row.agreement_id = text(sa::AGREEMENT_ID);
    row.agreement_status = text(sa::AGREEMENT_STATUS).and_then(|s| s.parse().ok());
    row.subscription_status = text(sa::SUBSCRIPTION_STATUS).and_then(|s| s.parse().ok());
    row.deprovisioning_expiry = instant(sa::DEPROVISIONING_EXPIRY);
    row.registered_regions = match image.get(sa::REGISTERED_REGIONS) {
        Some(Attr::Ss(regions)) => {
            let mut regions = regions.clone();
            regions.sort();
            regions
        }
        _ => Vec::new(),
    };
    row.registrations = Box::new(crate::model::RegistrationFacts {
        count: match image.get(sa::REGISTRATION_COUNT) {
            Some(Attr::N(n)) => n.parse().unwrap_or(0),
            _ => 0,
        },
        last_region: text(sa::LAST_REGISTERED_REGION),
        fields: match image.get(sa::REGISTERED_FIELDS) {
            Some(Attr::Ss(fields)) => {
                let mut fields = fields.clone();
                fields.sort();
                fields
            }
            _ => Vec::new(),
        },
    });
    row.agreement_event_at = instant(sa::AGREEMENT_EVENT_AT);
    row.subscription_event_at = instant(sa::SUBSCRIPTION_EVENT_AT);
    row.version = match image.get(attr::VERSION) {
        Some(Attr::N(n)) => n.parse().unwrap_or(0),
        _ => 0,
    };
    row.rate_card = image
        .get(sa::RATE_CARD)
        .and_then(|card| crate::charges::StoredRateCard::from_attr(card).ok())
        .map(Box::new);
    Some(row)
}

/// The image DynamoDB stores for `row` (the attributes the subscriber store writes),
/// with `updatedAt` when given: what the table's stream carries.
pub fn subscriber_image(row: &Subscriber, updated_at: Option<&str>) -> BTreeMap<String, Attr> {
    let mut image = BTreeMap::new();
    let mut put = |name: &str, value: Option<Attr>| {
        if let Some(value) = value {
            image.insert(name.to_string(), value);
        }
    };
    put(attr::LICENSE_ARN, Some(Attr::S(row.license_arn.clone())));
    put(
        attr::CUSTOMER_ACCOUNT,
        Some(Attr::S(row.customer_aws_account_id.clone())),
    );
    put(attr::PRODUCT_CODE, row.product_code.clone().map(Attr::S));
    put(sa::AGREEMENT_ID, row.agreement_id.clone().map(Attr::S));
    put(
        sa::AGREEMENT_STATUS,
        row.agreement_status
            .map(|s| Attr::S(s.as_str().to_string())),
    );
    put(
        sa::SUBSCRIPTION_STATUS,
        row.subscription_status
            .map(|s| Attr::S(s.as_str().to_string())),
    );
    let instant = |at: Option<crate::time::Instant>| at.map(|t| Attr::S(format_instant(t)));
    put(
        sa::DEPROVISIONING_EXPIRY,
        instant(row.deprovisioning_expiry),
    );
    put(
        sa::REGISTERED_REGIONS,
        (!row.registered_regions.is_empty()).then(|| Attr::Ss(row.registered_regions.clone())),
    );
    let told = &row.registrations;
    put(
        sa::REGISTRATION_COUNT,
        (told.count > 0).then(|| Attr::N(told.count.to_string())),
    );
    put(
        sa::LAST_REGISTERED_REGION,
        told.last_region.clone().map(Attr::S),
    );
    put(
        sa::REGISTERED_FIELDS,
        (!told.fields.is_empty()).then(|| Attr::Ss(told.fields.clone())),
    );
    put(sa::AGREEMENT_EVENT_AT, instant(row.agreement_event_at));
    put(
        sa::SUBSCRIPTION_EVENT_AT,
        instant(row.subscription_event_at),
    );
    put(
        attr::VERSION,
        (row.version > 0).then(|| Attr::N(row.version.to_string())),
    );
    put(
        sa::RATE_CARD,
        row.rate_card
            .as_deref()
            .map(crate::charges::StoredRateCard::to_attr),
    );
    put(
        attr::UPDATED_AT,
        updated_at.map(|at| Attr::S(at.to_string())),
    );
    image
}

/// The deterministic `eventId` of `kind` for the row `license`/`account`, the change
/// named by `discriminator` (the row's version and guard, or the Region registered).
pub fn event_id(
    license_arn: &str,
    account: &str,
    kind: BuyerEventKind,
    discriminator: &str,
) -> String {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    for field in [
        "awsmp-buyer-event-v1",
        license_arn,
        account,
        kind.detail_type(),
        discriminator,
    ] {
        hash.update((field.len() as u64).to_be_bytes());
        hash.update(field.as_bytes());
    }
    hash.finalize()
        .iter()
        .take(16)
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// The events one change of a subscribers row tells, in [`BuyerEventKind::ALL`]'s
/// order (Regions in name order): none for a removal, a change of neither status,
/// Regions nor agreement, or an image without keys. An insert is a change from an
/// empty row.
pub fn derive(old: Option<&Subscriber>, new: Option<&Subscriber>) -> Vec<BuyerEvent> {
    let Some(new) = new else {
        return Vec::new();
    };
    let empty = Subscriber::new(new.license_arn.clone(), new.customer_aws_account_id.clone());
    let old = old.unwrap_or(&empty);
    let instant = |at: Option<crate::time::Instant>| at.map(format_instant);
    let guard = |at: Option<crate::time::Instant>| {
        format!("v{}@{}", new.version, instant(at).unwrap_or_default())
    };
    let event = |kind: BuyerEventKind, discriminator: &str| BuyerEvent {
        kind,
        detail: BuyerEventDetail {
            detail_version: DETAIL_VERSION,
            event_id: event_id(
                &new.license_arn,
                &new.customer_aws_account_id,
                kind,
                discriminator,
            ),
            license_arn: new.license_arn.clone(),
            customer_aws_account_id: new.customer_aws_account_id.clone(),
            product_code: new.product_code.clone(),
            agreement_id: new.agreement_id.clone(),
            occurred_at: None,
            billed_until: None,
            region: None,
            first_registration: None,
            repeat: None,
            registration_count: None,
            form_fields: None,
            previous_agreement_id: None,
        },
    };
    let became = |status: SubscriptionStatus| {
        new.subscription_status == Some(status) && old.subscription_status != Some(status)
    };
    let mut events = Vec::new();
    if became(SubscriptionStatus::Active) {
        let mut e = event(
            BuyerEventKind::Subscribed,
            &guard(new.subscription_event_at),
        );
        e.detail.occurred_at = instant(new.subscription_event_at);
        events.push(e);
    }
    let first_registration = old.registered_regions.is_empty();
    let told = &new.registrations;
    if told.count > old.registrations.count {
        // A counted registration (first, in a new Region, or a repeat): one event,
        // identified by its count, so a repeat is told and a redelivery is not.
        let region = told.last_region.clone().unwrap_or_default();
        let mut e = event(
            BuyerEventKind::Registered,
            &format!("{region}#{}", told.count),
        );
        e.detail.repeat = Some(old.registered_regions.contains(&region));
        e.detail.region = Some(region);
        e.detail.first_registration = Some(first_registration);
        e.detail.registration_count = Some(told.count);
        e.detail.form_fields = Some(told.fields.clone());
        events.push(e);
    } else {
        // A writer that counts nothing: one event per Region added.
        for region in &new.registered_regions {
            if region.is_empty() || old.registered_regions.contains(region) {
                continue;
            }
            let mut e = event(BuyerEventKind::Registered, region);
            e.detail.region = Some(region.clone());
            e.detail.first_registration = Some(first_registration);
            events.push(e);
        }
    }
    if became(SubscriptionStatus::Deprovisioning) {
        let mut e = event(
            BuyerEventKind::Deprovisioning,
            &guard(new.subscription_event_at),
        );
        e.detail.occurred_at = instant(new.subscription_event_at);
        e.detail.billed_until = instant(new.deprovisioning_expiry);
        events.push(e);
    }
    if became(SubscriptionStatus::Inactive) {
        let mut e = event(BuyerEventKind::Inactive, &guard(new.subscription_event_at));
        e.detail.occurred_at = instant(new.deprovisioning_expiry.or(new.subscription_event_at));
        e.detail.billed_until = instant(new.deprovisioning_expiry);
        events.push(e);
    }
    if new.agreement_status == Some(AgreementStatus::Inactive)
        && old.agreement_status != Some(AgreementStatus::Inactive)
    {
        let mut e = event(
            BuyerEventKind::AgreementEnded,
            &guard(new.agreement_event_at),
        );
        e.detail.occurred_at = instant(new.agreement_event_at);
        events.push(e);
    }
    match (old.agreement_id.as_deref(), new.agreement_id.as_deref()) {
        (Some(before), Some(after))
            if !before.is_empty() && !after.is_empty() && before != after =>
        {
            let mut e = event(
                BuyerEventKind::AgreementReplaced,
                &format!("{}#{before}", guard(new.agreement_event_at)),
            );
            e.detail.occurred_at = instant(new.agreement_event_at);
            e.detail.previous_agreement_id = Some(before.to_string());
            events.push(e);
        }
        _ => {}
    }
    events
}

/// The events one stream change tells ([`derive`] on its images).
pub fn derive_change(change: &Change) -> Vec<BuyerEvent> {
    let old = change.old.as_ref().and_then(subscriber_from_image);
    let new = change.new.as_ref().and_then(subscriber_from_image);
    derive(old.as_ref(), new.as_ref())
}

/// Puts the events of `changes` (the subscribers table's stream, in order) on `bus`
/// through the one `PutEvents` loop outcome events use ([`put_all`]), and names the
/// changes any of whose events the bus did not take: the stream delivers them (and the
/// changes after them) again, with the same `eventId`s.
pub async fn publish(changes: &[Change], bus: &dyn EventBus) -> PublishReport {
    let mut silent = 0;
    let mut events: Vec<(&str, BusEvent)> = Vec::new();
    for change in changes {
        let told: Vec<BusEvent> = derive_change(change)
            .iter()
            .filter_map(BuyerEvent::bus_event)
            .collect();
        if told.is_empty() {
            silent += 1;
        }
        events.extend(told.into_iter().map(|e| (change.position.as_str(), e)));
    }
    let mut report = put_all(&events, bus).await;
    report.silent = silent;
    report
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;

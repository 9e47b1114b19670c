//! Target `lifecycle_event`: the input is an SQS message body, as the subscription
//! Lambda receives it. It goes through the lifecycle parser
//! ([`MarketplaceEvent::from_json_str`]), the pure transition ([`apply`], on no row and
//! on an existing active row, then once more as a redelivery) and the deprovisioning
//! expiry, and then through the subscription Lambda's real handler over the in-memory
//! subscribers table.
//!
//! Properties: nothing panics; a parse failure is an error value; a redelivered event
//! never writes a second time; the handler answers the batch with at most this one
//! message as a batch item failure (SQS redelivers it, then dead-letters it).

use std::sync::Arc;

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use awsmp_core::clock::ManualClock;
use awsmp_core::lifecycle::{
    DEPROVISIONING_WINDOW, EventTarget, MarketplaceEvent, Transition, apply, expire_deprovisioning,
};
use awsmp_core::memory::MemorySubscriberStore;
use awsmp_core::model::{AgreementStatus, Subscriber, SubscriptionStatus};
use awsmp_core::time::{Instant, parse_usage_timestamp};
use awsmp_subscription::{Config, State, handler};
use lambda_runtime::{Context, LambdaEvent};

/// The license of the AWS examples (`arn:` prepended, as the parser normalises it).
pub const EVENT_LICENSE: &str =
    "arn:aws:license-manager:us-east-1:123456789012:l-e52ca6f38bf84d0fafb8802ca15ac11x";
/// The buyer of the AWS examples.
pub const EVENT_ACCOUNT: &str = "845735284135";
/// The agreement of the AWS examples.
pub const EVENT_AGREEMENT: &str = "agmt-4mwg1nevbokzw95eca5797ixs";

/// Checks one message body.
pub fn check(data: &[u8]) {
    // SQS bodies are text: bytes that are not UTF-8 never reach the function.
    let Ok(body) = std::str::from_utf8(data) else {
        return;
    };
    match MarketplaceEvent::from_json_str(body) {
        Err(e) => drop(e.to_string()),
        Ok(event) => check_event(&event),
    }
    check_handler(body);
}

fn check_event(event: &MarketplaceEvent) {
    let _ = event.name();
    match event.target() {
        EventTarget::Row {
            license_arn,
            account,
        } => {
            assert!(!license_arn.is_empty() && !account.is_empty(), "{event:?}");
        }
        EventTarget::Agreement { agreement_id } => assert!(!agreement_id.is_empty()),
        EventTarget::Nothing => return,
    }
    let time = event.time().expect("a consumed event has a time");
    for start in [None, Some(active_row_for(event, time))] {
        let first = apply(start.as_ref(), event);
        let _ = first.reason();
        let Transition::Write { row, .. } = first else {
            continue;
        };
        let mut stored = row;
        stored.version += 1;
        let again = apply(Some(&stored), event);
        assert!(
            again.row().is_none(),
            "a redelivered event wrote again: {event:?} on {stored:?} gave {again:?}"
        );
        for now in [
            time,
            time + DEPROVISIONING_WINDOW,
            Instant::MIN_UTC,
            Instant::MAX_UTC,
        ] {
            let _ = expire_deprovisioning(&stored, now);
        }
    }
}

/// An existing, active row the event applies to, last changed a while before it.
fn active_row_for(event: &MarketplaceEvent, time: Instant) -> Subscriber {
    let (license, account, agreement) = match event {
        MarketplaceEvent::LicenseUpdated {
            license_arn,
            account,
            agreement_id,
            ..
        }
        | MarketplaceEvent::LicenseDeprovisioned {
            license_arn,
            account,
            agreement_id,
            ..
        } => (license_arn.clone(), account.clone(), agreement_id.clone()),
        MarketplaceEvent::AgreementEnded {
            agreement_id,
            account,
            ..
        }
        | MarketplaceEvent::AgreementAmended {
            agreement_id,
            account,
            ..
        } => (
            EVENT_LICENSE.to_string(),
            account.clone(),
            agreement_id.clone(),
        ),
        MarketplaceEvent::Ignored { .. } => Default::default(),
    };
    let earlier = time
        .checked_sub_signed(chrono::Duration::hours(2))
        .unwrap_or(Instant::MIN_UTC);
    let mut row = Subscriber::new(license, account);
    row.agreement_id = Some(agreement);
    row.agreement_status = Some(AgreementStatus::Active);
    row.subscription_status = Some(SubscriptionStatus::Active);
    row.agreement_event_at = Some(earlier);
    row.subscription_event_at = Some(earlier);
    row.version = 3;
    row
}

fn check_handler(body: &str) {
    let now = parse_usage_timestamp("2024-08-30T22:00:00Z").expect("a usage timestamp");
    let store = MemorySubscriberStore::new();
    let mut row = Subscriber::new(EVENT_LICENSE, EVENT_ACCOUNT);
    row.agreement_id = Some(EVENT_AGREEMENT.to_string());
    row.agreement_status = Some(AgreementStatus::Active);
    row.subscription_status = Some(SubscriptionStatus::Active);
    row.agreement_event_at = parse_usage_timestamp("2024-08-30T21:00:00Z").ok();
    row.subscription_event_at = row.agreement_event_at;
    row.version = 1;
    store.insert(row, now);
    let state = State {
        config: Arc::new(Config {
            subscribers_table: "awsmp-subscribers-fuzz".into(),
            rate_cards: false,
        }),
        subscribers: Arc::new(store),
        clock: Arc::new(ManualClock::new(now)),
        agreements: None,
    };
    let mut message = SqsMessage::default();
    message.message_id = Some("m-1".into());
    message.body = Some(body.to_string());
    let mut batch = SqsEvent::default();
    batch.records = vec![message];
    let response = super::block_on(handler(&state, LambdaEvent::new(batch, Context::default())))
        .expect("a batch whose message has an id is answered");
    assert!(
        response
            .batch_item_failures
            .iter()
            .all(|f| f.item_identifier == "m-1"),
        "{response:?}"
    );
}

//! Handler tests over the in-memory subscribers store, fed with AWS's own example
//! events (`tests/fixtures`, copied verbatim from the Seller Guide) wrapped in a real SQS
//! record. The same flows run against moto in `tests/moto.rs`.

use std::sync::Arc;

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use awsmp_core::clock::ManualClock;
use awsmp_core::memory::{MemorySubscriberStore, StoreOp};
use awsmp_core::model::{AgreementStatus, Subscriber, SubscriptionStatus};
use awsmp_core::ports::{PortError, SubscriberStore};
use awsmp_core::time::{Instant, parse_usage_timestamp};
use serde_json::Value;

use super::*;

#[path = "../tests/support/events.rs"]
mod events;
use events::*;

const AGREEMENT: &str = "agmt-4mwg1nevbokzw95eca5797ixs";
const PRODUCT: &str = "aw4fgf5tyo5w2ap6fEXAMPLE";

fn t(s: &str) -> Instant {
    parse_usage_timestamp(s).unwrap()
}

/// A batch of SQS records with the given (message id, body).
fn batch(messages: &[(&str, Option<String>)]) -> LambdaEvent<SqsEvent> {
    let records = messages
        .iter()
        .map(|(id, body)| {
            let mut record: SqsMessage =
                serde_json::from_value(fixture("sqs-record.json")).unwrap();
            record.message_id = Some((*id).to_string());
            record.body = body.clone();
            record
        })
        .collect();
    let mut event = SqsEvent::default();
    event.records = records;
    LambdaEvent::new(event, lambda_runtime::Context::default())
}

fn state_with(store: Arc<dyn SubscriberStore>) -> State {
    State {
        config: Arc::new(Config {
            subscribers_table: "awsmp-subscribers-test".into(),
            rate_cards: false,
        }),
        subscribers: store,
        clock: Arc::new(ManualClock::new(t(H10))),
        agreements: None,
    }
}

fn harness() -> (State, MemorySubscriberStore) {
    let store = MemorySubscriberStore::new();
    (state_with(Arc::new(store.clone())), store)
}

/// Sends each (fixture, time) as its own one-message batch, in order; returns the
/// failed message ids.
async fn deliver(state: &State, events: &[(&str, &str)]) -> Vec<String> {
    let mut failed = Vec::new();
    for (i, (name, time)) in events.iter().enumerate() {
        let id = format!("m{i}");
        let response = handler(state, batch(&[(&id, Some(event_at(name, time)))]))
            .await
            .unwrap();
        failed.extend(failed_ids(&response).into_iter().map(String::from));
    }
    failed
}

fn only_row(store: &MemorySubscriberStore) -> Subscriber {
    let rows = store.rows();
    assert_eq!(rows.len(), 1, "{rows:?}");
    rows.into_iter().next().unwrap()
}

#[tokio::test]
async fn license_updated_upserts_an_active_row_with_the_normalised_arn() {
    let (state, store) = harness();
    assert!(
        deliver(&state, &[(UPDATED, "2024-08-30T21:36:03Z")])
            .await
            .is_empty()
    );
    let row = only_row(&store);
    // AWS's example ARN lacks `arn:`; it is stored normalised so it joins the usage rows.
    assert_eq!(row.license_arn, LICENSE);
    assert_eq!(row.customer_aws_account_id, ACCOUNT);
    assert_eq!(row.product_code.as_deref(), Some(PRODUCT));
    assert_eq!(row.agreement_id.as_deref(), Some(AGREEMENT));
    assert_eq!(row.agreement_status, Some(AgreementStatus::Active));
    assert_eq!(row.subscription_status, Some(SubscriptionStatus::Active));
    assert_eq!(row.deprovisioning_expiry, None);
    assert_eq!(row.version, 1);
}

#[tokio::test]
async fn every_aws_example_event_type() {
    // (event, outcome on a row created by License Updated at 10:00, agreement, subscription)
    use AgreementStatus as A;
    use SubscriptionStatus as S;
    let cases: Vec<(&str, EventOutcome, Option<A>, Option<S>)> = vec![
        (
            UPDATED,
            EventOutcome::Written(1),
            Some(A::Active),
            Some(S::Active),
        ),
        (
            DEPROVISIONED,
            EventOutcome::Written(1),
            Some(A::Active),
            Some(S::Deprovisioning),
        ),
        (
            ENDED_M,
            EventOutcome::Written(1),
            Some(A::Inactive),
            Some(S::Active),
        ),
        (
            ENDED_P,
            EventOutcome::Written(1),
            Some(A::Inactive),
            Some(S::Active),
        ),
        (
            AMENDED_M,
            EventOutcome::Unchanged,
            Some(A::Active),
            Some(S::Active),
        ),
        (
            AMENDED_P,
            EventOutcome::Unchanged,
            Some(A::Active),
            Some(S::Active),
        ),
        (
            CREATED_M,
            EventOutcome::Ignored,
            Some(A::Active),
            Some(S::Active),
        ),
        (
            CREATED_P,
            EventOutcome::Ignored,
            Some(A::Active),
            Some(S::Active),
        ),
    ];
    for (name, outcome, agreement, subscription) in cases {
        let (state, store) = harness();
        deliver(&state, &[(UPDATED, H10)]).await;
        let got = handle_message(&state, "m", Some(&event_at(name, H11)))
            .await
            .unwrap();
        assert_eq!(got, outcome, "{name}");
        let row = only_row(&store);
        assert_eq!(row.agreement_status, agreement, "{name}");
        assert_eq!(row.subscription_status, subscription, "{name}");
    }
}

#[tokio::test]
async fn deprovisioned_opens_a_one_hour_window_from_the_event_time() {
    let (state, store) = harness();
    deliver(
        &state,
        &[(UPDATED, H10), (DEPROVISIONED, "2026-11-30T12:15:30Z")],
    )
    .await;
    let row = only_row(&store);
    assert_eq!(
        row.subscription_status,
        Some(SubscriptionStatus::Deprovisioning)
    );
    assert_eq!(row.deprovisioning_expiry, Some(t("2026-11-30T13:15:30Z")));
    // Visible to the flush and to deprovision-cleanup through the index.
    assert_eq!(store.deprovisioning().await.unwrap().len(), 1);
    // Agreement untouched.
    assert_eq!(row.agreement_status, Some(AgreementStatus::Active));
}

#[tokio::test]
async fn ignored_types_write_nothing_and_are_acknowledged() {
    let (state, store) = harness();
    let mut unknown = fixture(CREATED_M);
    unknown["detail-type"] = Value::String("Offer Released - Manufacturer".into());
    let response = handler(
        &state,
        batch(&[
            ("c1", Some(event_at(CREATED_M, H10))),
            ("c2", Some(event_at(CREATED_P, H10))),
            ("c3", Some(unknown.to_string())),
        ]),
    )
    .await
    .unwrap();
    assert!(response.batch_item_failures.is_empty());
    assert!(store.rows().is_empty());
}

/// Ordering and duplicate cases as SQS delivers them (each its own batch); the moto
/// test runs the same list.
#[tokio::test]
async fn out_of_order_and_duplicate_deliveries() {
    for (name, events, agreement, subscription) in ordering_cases() {
        let (state, store) = harness();
        let failed = deliver(&state, &events).await;
        assert!(failed.is_empty(), "{name}: {failed:?}");
        let row = only_row(&store);
        assert_eq!(row.agreement_status, agreement, "{name}");
        assert_eq!(row.subscription_status, subscription, "{name}");
    }
}

#[tokio::test]
async fn ended_before_any_row_is_retried_until_license_updated_lands() {
    let (state, store) = harness();
    let ended = event_at(ENDED_M, H12);
    // GIVEN the Ended event arrives first: it is handed back to SQS, nothing written.
    let first = handler(&state, batch(&[("ended", Some(ended.clone()))]))
        .await
        .unwrap();
    assert_eq!(first.batch_item_failures.len(), 1);
    assert_eq!(first.batch_item_failures[0].item_identifier, "ended");
    assert!(store.rows().is_empty());
    // WHEN License Updated arrives and SQS redelivers the Ended event
    deliver(&state, &[(UPDATED, H10)]).await;
    let redelivered = handler(&state, batch(&[("ended", Some(ended))]))
        .await
        .unwrap();
    // THEN the agreement ends.
    assert!(redelivered.batch_item_failures.is_empty());
    assert_eq!(
        only_row(&store).agreement_status,
        Some(AgreementStatus::Inactive)
    );
}

#[tokio::test]
async fn amended_without_a_row_is_acknowledged() {
    let (state, store) = harness();
    let outcome = handle_message(&state, "m", Some(&event_at(AMENDED_M, H10)))
        .await
        .unwrap();
    assert_eq!(outcome, EventOutcome::NoMatchingRow);
    assert!(store.rows().is_empty());
}

#[tokio::test]
async fn agreement_events_apply_to_every_row_of_the_agreement_for_that_buyer() {
    let (state, store) = harness();
    let now = t("2026-11-30T09:00:00Z");
    for (license, account) in [
        ("arn:aws:license-manager::1:license:l-a", ACCOUNT),
        ("arn:aws:license-manager::1:license:l-b", ACCOUNT),
        ("arn:aws:license-manager::1:license:l-c", "111122223333"),
    ] {
        let mut row = Subscriber::new(license, account);
        row.agreement_id = Some(AGREEMENT.into());
        row.agreement_status = Some(AgreementStatus::Active);
        row.agreement_event_at = Some(t("2026-11-30T08:00:00Z"));
        row.version = 1;
        store.insert(row, now);
    }
    let outcome = handle_message(&state, "m", Some(&event_at(ENDED_M, H12)))
        .await
        .unwrap();
    assert_eq!(outcome, EventOutcome::Written(2));
    let statuses: Vec<_> = store
        .rows()
        .into_iter()
        .map(|r| (r.customer_aws_account_id, r.agreement_status))
        .collect();
    assert_eq!(
        statuses,
        vec![
            (ACCOUNT.to_string(), Some(AgreementStatus::Inactive)),
            (ACCOUNT.to_string(), Some(AgreementStatus::Inactive)),
            ("111122223333".to_string(), Some(AgreementStatus::Active)),
        ]
    );
}

#[tokio::test]
async fn malformed_messages_fail_alone_and_write_nothing() {
    let (state, store) = harness();
    let mut no_arn = fixture(UPDATED);
    no_arn["detail"].as_object_mut().unwrap().remove("license");
    let mut wrong_source = fixture(UPDATED);
    wrong_source["source"] = Value::String("aws.marketplace-but-not".into());
    let mut bad_account = fixture(DEPROVISIONED);
    bad_account["detail"]["acceptor"]["accountId"] = Value::String("<buyer>".into());
    let mut bad_time = fixture(UPDATED);
    bad_time["time"] = Value::String("yesterday".into());
    let response = handler(
        &state,
        batch(&[
            ("bad-json", Some("{not json".into())),
            ("no-arn", Some(no_arn.to_string())),
            ("wrong-source", Some(wrong_source.to_string())),
            ("no-body", None),
            ("bad-account", Some(bad_account.to_string())),
            ("bad-time", Some(bad_time.to_string())),
            ("good", Some(event_at(UPDATED, H10))),
        ]),
    )
    .await
    .unwrap();
    assert_eq!(
        failed_ids(&response),
        [
            "bad-json",
            "no-arn",
            "wrong-source",
            "no-body",
            "bad-account",
            "bad-time"
        ]
    );
    // Only the good message wrote.
    assert_eq!(only_row(&store).license_arn, LICENSE);
}

#[test]
fn a_malformed_event_gets_one_clear_log_line() {
    let (state, _) = harness();
    let mut no_arn = fixture(UPDATED);
    no_arn["detail"].as_object_mut().unwrap().remove("license");
    let (_, logs) = capture_logs(async {
        handler(&state, batch(&[("msg-42", Some(no_arn.to_string()))]))
            .await
            .unwrap();
    });
    let lines: Vec<&str> = logs.lines().filter(|l| l.contains("msg-42")).collect();
    assert_eq!(lines.len(), 1, "{logs}");
    assert!(lines[0].contains("\"level\":\"ERROR\""), "{logs}");
    assert!(lines[0].contains("License Updated - Manufacturer event has no detail.license.arn"));
    assert!(lines[0].contains("DLQ"));
    assert!(lines[0].contains("MalformedEvent"));
}

#[tokio::test]
async fn store_failures_fail_the_message_and_redelivery_applies_it() {
    let (state, store) = harness();
    store.fail_next(
        StoreOp::SubscriberGet,
        PortError::Transient {
            operation: "GetItem",
            message: "ProvisionedThroughputExceededException".into(),
        },
    );
    let body = event_at(UPDATED, H10);
    let response = handler(&state, batch(&[("m", Some(body.clone()))]))
        .await
        .unwrap();
    assert_eq!(response.batch_item_failures.len(), 1);
    assert!(store.rows().is_empty());
    let response = handler(&state, batch(&[("m", Some(body))])).await.unwrap();
    assert!(response.batch_item_failures.is_empty());
    assert_eq!(
        only_row(&store).subscription_status,
        Some(SubscriptionStatus::Active)
    );
}

#[tokio::test]
async fn a_record_without_message_id_fails_the_batch_before_any_write() {
    let (state, store) = harness();
    let mut event = batch(&[
        ("ok", Some(event_at(UPDATED, H10))),
        ("", Some(event_at(UPDATED, H10))),
    ]);
    event.payload.records[1].message_id = None;
    let error = handler(&state, event).await.unwrap_err();
    assert_eq!(error, BatchError::MessageWithoutId { index: 1 });
    let diagnostic = lambda_runtime::Diagnostic::from(error);
    assert_eq!(diagnostic.error_type, "SqsMessageWithoutId");
    assert!(store.rows().is_empty());
}

#[path = "../tests/support/racing.rs"]
mod racing;

/// A store where a registration creates or touches the row just before each of our
/// first `races` lifecycle writes, so the write meets a version conflict.
fn raced_by_registrations(inner: &MemorySubscriberStore, races: usize) -> racing::RacingStore {
    racing::RacingStore::new(
        inner.clone(),
        races,
        Box::new(|store, row, now| {
            Box::pin(async move {
                let (license, account) = (&row.license_arn, &row.customer_aws_account_id);
                store
                    .add_registered_region(license, account, PRODUCT, ("eu-west-1", &[]), now)
                    .await
                    .unwrap();
                let current = store.get(license, account).await.unwrap();
                current.unwrap_or(row)
            })
        }),
    )
}

#[tokio::test]
async fn version_conflicts_are_reread_and_reapplied() {
    let inner = MemorySubscriberStore::new();
    let state = state_with(Arc::new(raced_by_registrations(&inner, 2)));
    let failed = deliver(&state, &[(UPDATED, H10)]).await;
    assert!(failed.is_empty());
    let row = only_row(&inner);
    assert_eq!(row.subscription_status, Some(SubscriptionStatus::Active));
    // The concurrent registration survived the lifecycle write.
    assert_eq!(row.registered_regions, ["eu-west-1"]);
}

#[tokio::test]
async fn endless_contention_fails_the_message_for_redelivery() {
    let inner = MemorySubscriberStore::new();
    let state = state_with(Arc::new(raced_by_registrations(&inner, usize::MAX)));
    let body = event_at(UPDATED, H10);
    let outcome = handle_message(&state, "m", Some(&body)).await;
    assert!(
        matches!(outcome, Err(EventError::Contention { attempts, .. }) if attempts == MAX_WRITE_ATTEMPTS)
    );
}

#[path = "../tests/support/logs.rs"]
mod logs;
use logs::capture_logs;

/// A harness whose function reads rate cards from `api`, which knows the fixtures'
/// agreement.
fn with_rate_cards() -> (
    State,
    MemorySubscriberStore,
    awsmp_core::memory::MemoryAgreementApi,
) {
    use awsmp_core::memory::agreement_contract::{record, seed};
    let (mut state, store) = harness();
    let api = awsmp_core::memory::MemoryAgreementApi::new();
    let mut agreement = seed(AGREEMENT);
    agreement.license_arn = LICENSE.to_string();
    agreement.account = ACCOUNT.to_string();
    agreement.start = t("2024-08-30T21:00:00Z");
    api.seed(record(
        &agreement,
        awsmp_core::ports::AgreementStatus::Active,
        agreement.start,
    ));
    state.config = Arc::new(Config {
        subscribers_table: "awsmp-subscribers-test".into(),
        rate_cards: true,
    });
    state.agreements = Some(Arc::new(api.clone()));
    (state, store, api)
}

#[tokio::test]
async fn with_rate_cards_license_updated_keeps_the_agreements_card_on_the_row() {
    let (state, store, api) = with_rate_cards();
    assert!(
        deliver(&state, &[(UPDATED, "2024-08-30T21:36:03Z")])
            .await
            .is_empty()
    );
    let row = only_row(&store);
    let card = row.current_rate_card().expect("a card at activation");
    assert_eq!(card.agreement_id, AGREEMENT);
    assert_eq!(
        card.terms
            .rate_card
            .get("requests")
            .map(ToString::to_string),
        Some("0.0025".to_string())
    );
    assert_eq!(card.start, t("2024-08-30T21:00:00Z"));
    // A redelivery reads nothing more; a deprovisioning reads nothing at all.
    deliver(
        &state,
        &[
            (UPDATED, "2024-08-30T21:36:03Z"),
            (DEPROVISIONED, "2024-08-30T22:00:00Z"),
        ],
    )
    .await;
    assert_eq!(api.calls(awsmp_core::memory::AgreementOp::Terms), 1);
}

#[tokio::test]
async fn with_rate_cards_a_throttled_read_never_fails_the_activation() {
    let (state, store, api) = with_rate_cards();
    api.throttle_next(awsmp_core::memory::AgreementOp::Terms);
    assert!(
        deliver(&state, &[(UPDATED, "2024-08-30T21:36:03Z")])
            .await
            .is_empty(),
        "the message is done: the reconciliation reads the card"
    );
    let row = only_row(&store);
    assert_eq!(row.subscription_status, Some(SubscriptionStatus::Active));
    assert!(row.rate_card.is_none());
}

#[test]
fn rate_cards_must_be_enabled_or_disabled() {
    let lookup = |value: &'static str| {
        move |name: &str| match name {
            "SUBSCRIBERS_TABLE" => Some("t".to_string()),
            "RATE_CARDS" => Some(value.to_string()),
            _ => None,
        }
    };
    assert!(Config::from_lookup(&lookup("enabled")).unwrap().rate_cards);
    assert!(!Config::from_lookup(&lookup("disabled")).unwrap().rate_cards);
    let err = Config::from_lookup(&lookup("yes")).unwrap_err().to_string();
    assert!(
        err.contains("RATE_CARDS must be enabled or disabled"),
        "{err}"
    );
}

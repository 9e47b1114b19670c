//! The subscription handler on the real DynamoDB adapter, against moto: every event
//! type and ordering case with AWS's example events, the deprovisioning index, and the
//! PII-free check (the exact attribute set ever written to the subscribers table).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};

use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use aws_sdk_dynamodb::types::AttributeValue;
use awsmp_aws::DynamoSubscriberStore;
use awsmp_core::lifecycle::expire_deprovisioning;
use awsmp_core::model::{AgreementStatus, Subscriber, SubscriptionStatus};
use awsmp_core::ports::SubscriberStore;
use awsmp_core::time::parse_usage_timestamp;
use awsmp_local_aws::{MotoServer, create_subscribers_table};
use awsmp_subscription::{Config, State, handler};
use lambda_runtime::LambdaEvent;

#[path = "support/events.rs"]
mod events;
use events::*;

const TABLE: &str = "awsmp-subscribers-test";

/// What a registration writes to the row besides its keys, product and stamps.
const REGISTERED: &[&str] = &[
    "registeredRegions",
    "registrationCount",
    "lastRegisteredRegion",
    "registeredFields",
];

/// Every attribute the subscribers table may ever hold (docs/design.md, "Tables").
const ALLOWED: &[&str] = &[
    "licenseArn",
    "customerAWSAccountId",
    "productCode",
    "agreementId",
    "agreementStatus",
    "subscriptionStatus",
    "deprovisioningExpiry",
    "registeredRegions",
    "registrationCount",
    "lastRegisteredRegion",
    "registeredFields",
    "createdAt",
    "updatedAt",
    "agreementEventAt",
    "subscriptionEventAt",
    "version",
    "deprovisioningIndex",
];

fn batch(messages: &[(String, String)]) -> LambdaEvent<SqsEvent> {
    let mut event = SqsEvent::default();
    event.records = messages
        .iter()
        .map(|(id, body)| {
            let mut record: SqsMessage =
                serde_json::from_value(fixture("sqs-record.json")).unwrap();
            record.message_id = Some(id.clone());
            record.body = Some(body.clone());
            record
        })
        .collect();
    LambdaEvent::new(event, lambda_runtime::Context::default())
}

struct Env {
    moto: MotoServer,
    client: aws_sdk_dynamodb::Client,
}

impl Env {
    async fn start() -> Env {
        let moto = MotoServer::start().await.unwrap_or_else(|e| panic!("{e}"));
        let client = moto.dynamodb();
        Env { moto, client }
    }

    /// A fresh subscribers table (one per case) and the state `main` builds on it.
    async fn state(&self, table: &str) -> (State, DynamoSubscriberStore) {
        create_subscribers_table(&self.client, table).await.unwrap();
        let store = DynamoSubscriberStore::new(self.client.clone(), table);
        let config = Config {
            subscribers_table: table.to_string(),
            rate_cards: false,
        };
        (State::connect(&self.moto.sdk_config(), &config), store)
    }

    /// Every item's attribute names and values.
    async fn items(&self, table: &str) -> Vec<BTreeMap<String, AttributeValue>> {
        let out = self.client.scan().table_name(table).send().await.unwrap();
        out.items
            .unwrap_or_default()
            .into_iter()
            .map(|item| item.into_iter().collect())
            .collect()
    }

    /// Sends each (message id, body) as its own batch, in order, to a fresh table
    /// `table`; checks that none fails (`what` names the case) and returns the row.
    async fn delivered(
        &self,
        table: &str,
        messages: &[(String, String)],
        what: &str,
    ) -> (Subscriber, DynamoSubscriberStore) {
        let (state, store) = self.state(table).await;
        for (id, body) in messages {
            let response = send(&state, id, body.clone()).await;
            assert!(
                response.batch_item_failures.is_empty(),
                "{what}: message {id} failed"
            );
        }
        (store.get(LICENSE, ACCOUNT).await.unwrap().unwrap(), store)
    }

    async fn names(&self, table: &str) -> BTreeSet<String> {
        let items = self.items(table).await;
        assert_eq!(items.len(), 1, "{items:?}");
        items[0].keys().cloned().collect()
    }
}

async fn send(state: &State, id: &str, body: String) -> SqsBatchResponse {
    handler(state, batch(&[(id.to_string(), body)]))
        .await
        .unwrap()
}

/// The row is deprovisioning, its final-usage window open until `expiry`.
fn assert_deprovisioning_until(row: &Subscriber, expiry: &str, what: &str) {
    assert_eq!(
        row.subscription_status,
        Some(SubscriptionStatus::Deprovisioning),
        "{what}"
    );
    assert_eq!(
        row.deprovisioning_expiry,
        Some(parse_usage_timestamp(expiry).unwrap()),
        "{what}"
    );
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|n| n.to_string()).collect()
}

#[tokio::test]
async fn every_event_type_and_ordering_case_on_moto() {
    let env = Env::start().await;
    for (i, (name, events, agreement, subscription)) in ordering_cases().into_iter().enumerate() {
        let messages: Vec<_> = events
            .iter()
            .enumerate()
            .map(|(j, (fixture, time))| (format!("m{j}"), event_at(fixture, time)))
            .collect();
        let (row, store) = env
            .delivered(&format!("{TABLE}-{i}"), &messages, name)
            .await;
        assert_eq!(row.agreement_status, agreement, "{name}");
        assert_eq!(row.subscription_status, subscription, "{name}");
        let in_index = store.deprovisioning().await.unwrap().len();
        assert_eq!(
            in_index,
            usize::from(subscription == Some(SubscriptionStatus::Deprovisioning)),
            "{name}"
        );
    }
}

#[tokio::test]
async fn ended_before_the_license_is_redelivered_until_it_applies_on_moto() {
    let env = Env::start().await;
    let (state, store) = env.state(TABLE).await;
    let ended = event_at(ENDED_M, H12);
    let response = send(&state, "ended", ended.clone()).await;
    assert_eq!(response.batch_item_failures.len(), 1);
    assert!(env.items(TABLE).await.is_empty());
    send(&state, "updated", event_at(UPDATED, H10)).await;
    let response = send(&state, "ended", ended).await;
    assert!(response.batch_item_failures.is_empty());
    let row = store.get(LICENSE, ACCOUNT).await.unwrap().unwrap();
    assert_eq!(row.agreement_status, Some(AgreementStatus::Inactive));
}

#[tokio::test]
async fn malformed_messages_fail_alone_and_write_nothing_on_moto() {
    let env = Env::start().await;
    let (state, _) = env.state(TABLE).await;
    let mut no_arn = fixture(UPDATED);
    no_arn["detail"].as_object_mut().unwrap().remove("license");
    let response = handler(
        &state,
        batch(&[
            ("bad-json".into(), "{".into()),
            ("no-arn".into(), no_arn.to_string()),
            ("created".into(), event_at(CREATED_M, H10)),
        ]),
    )
    .await
    .unwrap();
    assert_eq!(failed_ids(&response), ["bad-json", "no-arn"]);
    assert!(env.items(TABLE).await.is_empty());
}

/// The PII-free check: drive one row through everything that ever writes the
/// subscribers table (every event type, registration from two Regions, the
/// deprovisioning close) and compare the exact attribute set after each step.
#[tokio::test]
async fn the_subscribers_table_only_ever_holds_the_documented_attributes() {
    let env = Env::start().await;
    let (state, store) = env.state(TABLE).await;
    let now = parse_usage_timestamp("2026-11-30T10:30:00Z").unwrap();
    let lifecycle = [
        "licenseArn",
        "customerAWSAccountId",
        "productCode",
        "agreementId",
        "agreementStatus",
        "subscriptionStatus",
        "agreementEventAt",
        "subscriptionEventAt",
        "version",
        "createdAt",
        "updatedAt",
    ];
    let mut ever = BTreeSet::new();

    // Registration first (it can come before License Updated): identity + Region only.
    store
        .add_registered_region(
            LICENSE,
            ACCOUNT,
            "aw4fgf5tyo5w2ap6fEXAMPLE",
            (
                "eu-west-1",
                &["companyName".to_string(), "email".to_string()],
            ),
            now,
        )
        .await
        .unwrap();
    let names = env.names(TABLE).await;
    assert_eq!(
        names,
        set(&[
            "licenseArn",
            "customerAWSAccountId",
            "productCode",
            "registeredRegions",
            "registrationCount",
            "lastRegisteredRegion",
            "registeredFields",
            "createdAt",
            "updatedAt"
        ])
    );
    ever.extend(names);

    // Purchase Agreement Created is ignored: nothing changes.
    send(
        &state,
        "created",
        event_at(CREATED_M, "2026-11-30T09:59:00Z"),
    )
    .await;
    assert_eq!(env.names(TABLE).await, ever);

    for (i, (fixture, time)) in [(UPDATED, H10), (AMENDED_M, "2026-11-30T10:30:00Z")]
        .into_iter()
        .enumerate()
    {
        send(&state, &format!("m{i}"), event_at(fixture, time)).await;
        let names = env.names(TABLE).await;
        let mut expected = set(&lifecycle);
        expected.extend(set(REGISTERED));
        assert_eq!(names, expected, "after {fixture}");
        ever.extend(names);
    }

    // A second Region registers: the set does not grow.
    store
        .add_registered_region(
            LICENSE,
            ACCOUNT,
            "aw4fgf5tyo5w2ap6fEXAMPLE",
            ("us-west-2", &["email".to_string(), "phone".to_string()]),
            now,
        )
        .await
        .unwrap();
    // Counted, the latest Region kept, the field names added up (never a value).
    let told = store
        .get(LICENSE, ACCOUNT)
        .await
        .unwrap()
        .unwrap()
        .registrations;
    assert_eq!(
        (told.count, told.last_region.as_deref(), told.fields),
        (
            2,
            Some("us-west-2"),
            vec!["companyName".to_string(), "email".into(), "phone".into()]
        )
    );
    ever.extend(env.names(TABLE).await);

    send(&state, "ended", event_at(ENDED_M, H11)).await;
    send(
        &state,
        "deprovisioned",
        event_at(DEPROVISIONED, "2026-11-30T11:00:05Z"),
    )
    .await;
    let names = env.names(TABLE).await;
    let mut expected = set(&lifecycle);
    expected.extend(set(REGISTERED));
    expected.extend(set(&["deprovisioningExpiry", "deprovisioningIndex"]));
    assert_eq!(names, expected, "while deprovisioning");
    ever.extend(names);

    // deprovision-cleanup's write: the sparse-index marker goes, the expiry stays.
    let row = store.get(LICENSE, ACCOUNT).await.unwrap().unwrap();
    let closed = expire_deprovisioning(&row, parse_usage_timestamp(H12_05).unwrap()).unwrap();
    assert!(store.put_lifecycle(&closed, now).await.unwrap());
    let names = env.names(TABLE).await;
    assert!(!names.contains("deprovisioningIndex"));
    assert!(names.contains("deprovisioningExpiry"));
    ever.extend(names);

    assert_eq!(
        ever,
        set(ALLOWED),
        "the union of every attribute ever written"
    );

    // And no value anywhere carries anything but identity, statuses, Regions and times.
    let item = env.items(TABLE).await.remove(0);
    assert_eq!(
        item["registeredRegions"],
        AttributeValue::Ss(vec!["eu-west-1".into(), "us-west-2".into()])
    );
    assert_eq!(
        item["agreementStatus"],
        AttributeValue::S("inactive".into())
    );
    assert_eq!(
        item["subscriptionStatus"],
        AttributeValue::S("inactive".into())
    );
}

#[tokio::test]
async fn every_delivery_order_of_one_row_converges_on_moto() {
    // Two copies of License Updated and a Deprovisioned reach the same row in every
    // possible order; the conditional writes make the result the time-ordered one.
    // (Truly simultaneous requests are not tested here: moto's threaded server does
    // not make a conditional check and its write atomic, which DynamoDB does; the
    // version race itself is covered against the in-memory store.)
    let env = Env::start().await;
    let orders = [
        ["a", "b", "c"],
        ["a", "c", "b"],
        ["b", "a", "c"],
        ["b", "c", "a"],
        ["c", "a", "b"],
        ["c", "b", "a"],
    ];
    for (i, order) in orders.iter().enumerate() {
        let messages: Vec<_> = order
            .iter()
            .map(|id| match *id {
                "c" => (id.to_string(), event_at(DEPROVISIONED, H12)),
                _ => (id.to_string(), event_at(UPDATED, H10)),
            })
            .collect();
        let what = format!("order {order:?}");
        let (row, _) = env
            .delivered(&format!("{TABLE}-order-{i}"), &messages, &what)
            .await;
        assert_deprovisioning_until(&row, H13, &what);
    }
}

#[tokio::test]
async fn same_second_updated_and_deprovisioned_open_the_window_in_either_order_on_moto() {
    // A License Deprovisioned in the same second as its License Updated is not a
    // duplicate: whichever is delivered first, the row ends deprovisioning with the
    // window open from that second, and the agreement active.
    let env = Env::start().await;
    const T: &str = H12;
    for (i, order) in [[UPDATED, DEPROVISIONED], [DEPROVISIONED, UPDATED]]
        .iter()
        .enumerate()
    {
        let messages: Vec<_> = order
            .iter()
            .enumerate()
            .map(|(j, fixture)| (format!("m{j}"), event_at(fixture, T)))
            .collect();
        let what = format!("order {order:?}");
        let (row, store) = env
            .delivered(&format!("{TABLE}-same-second-{i}"), &messages, &what)
            .await;
        assert_deprovisioning_until(&row, H13, &what);
        assert_eq!(
            row.agreement_status,
            Some(AgreementStatus::Active),
            "{what}"
        );
        assert_eq!(
            store.deprovisioning().await.unwrap().len(),
            1,
            "{what}: in the deprovisioning index"
        );
    }
}

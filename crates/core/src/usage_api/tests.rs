#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};

use super::envelope::{CLOUDEVENTS_BATCH, JSON};
use super::*;
use crate::guardrails::quantity_of_json;
use crate::memory::StoreOp;
use crate::model::{ReasonCode, SubscriptionStatus};
use crate::pipeline::testkit::{ACCOUNT_A, PRODUCT, World, license, t};
use crate::ports::{PortError, SubscriberStore};
use crate::submit::DeploymentMode;

fn event(id: &str, quantity: i64) -> Value {
    json!({
        "id": id,
        "licenseArn": license(1),
        "customerAWSAccountId": ACCOUNT_A,
        "dimension": "api_calls",
        "quantity": quantity,
    })
}

fn batch(events: Vec<Value>) -> Vec<PostedEvent> {
    let body = serde_json::to_vec(&json!({ "events": events })).unwrap();
    parse_batch(MediaType::Json, &body).unwrap()
}

async fn post(world: &World, events: Vec<Value>, now: &str) -> Vec<Verdict> {
    let target = Target {
        store: &world.usage,
        mode: DeploymentMode::Full,
        product_code: PRODUCT,
    };
    record_batch(target, batch(events), t(now)).await.unwrap()
}

fn statuses(verdicts: &[Verdict]) -> Vec<&'static str> {
    verdicts.iter().map(Verdict::status).collect()
}

fn reason(verdict: &Verdict) -> &str {
    match verdict {
        Verdict::Rejected { reason, .. } => reason,
        other => panic!("not rejected: {other:?}"),
    }
}

#[test]
fn the_envelope_is_refused_whole_with_the_status_that_says_why() {
    assert_eq!(
        MediaType::of(Some("application/json; charset=utf-8")),
        Ok(MediaType::Json)
    );
    assert_eq!(
        MediaType::of(Some("Application/CloudEvents-Batch+JSON")),
        Ok(MediaType::CloudEventsBatch)
    );
    for given in [
        None,
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
    ] {
        let refused = MediaType::of(given).unwrap_err();
        assert_eq!(refused.status(), 415);
        assert!(
            refused.to_string().contains(JSON) && refused.to_string().contains(CLOUDEVENTS_BATCH)
        );
    }
    let refused = |media, body: &[u8]| parse_batch(media, body).unwrap_err();
    assert_eq!(refused(MediaType::Json, b"{not json").status(), 400);
    assert_eq!(refused(MediaType::Json, b"[]").status(), 400);
    assert_eq!(refused(MediaType::Json, br#"{"events": []}"#).status(), 400);
    assert_eq!(
        refused(MediaType::Json, br#"{"events": [], "x": 1}"#).status(),
        400
    );
    assert_eq!(
        refused(MediaType::CloudEventsBatch, br#"{"events": []}"#).status(),
        400
    );
    let many =
        serde_json::to_vec(&json!({ "events": vec![event("e", 1); MAX_EVENTS + 1] })).unwrap();
    assert_eq!(
        refused(MediaType::Json, &many),
        EnvelopeError::TooManyEvents(101)
    );
    assert_eq!(refused(MediaType::Json, &many).status(), 413);
    let big = vec![b' '; MAX_BODY_BYTES + 1];
    assert_eq!(refused(MediaType::Json, &big).status(), 413);
    let full = serde_json::to_vec(&json!({ "events": vec![event("e", 1); MAX_EVENTS] })).unwrap();
    assert_eq!(
        parse_batch(MediaType::Json, &full).unwrap().len(),
        MAX_EVENTS
    );
}

#[test]
fn each_event_is_read_as_far_as_it_goes_and_a_bad_one_says_what_to_fix() {
    let mut no_id = event("x", 1);
    no_id.as_object_mut().unwrap().remove("id");
    let mut typo = event("typo", 1);
    typo["quantitiy"] = json!(3);
    let mut ttl = event("ttl", 1);
    ttl["expiresAt"] = json!(1);
    let mut both = event("both", 1);
    both["tags"] = json!({"team": "a"});
    both["usageAllocations"] = json!([]);
    let mut numeric_license = event("num", 1);
    numeric_license["licenseArn"] = json!(7);
    let mut fractional = event("frac", 1);
    fractional["quantity"] = json!(1.5);
    let mut text_quantity = event("text", 1);
    text_quantity["quantity"] = json!("12");
    let mut offset = event("offset", 1);
    offset["timestamp"] = json!("2026-12-03T11:15:42.750+01:00");
    let mut bad_time = event("bad-time", 1);
    bad_time["timestamp"] = json!("yesterday");
    let mut tags = event("tags", 4);
    tags["tags"] = json!({"z": "1", "a": "2"});
    let parsed = batch(vec![
        no_id,
        typo,
        ttl,
        both,
        numeric_license,
        fractional,
        text_quantity,
        offset,
        bad_time,
        json!(3),
        tags,
    ]);
    let refusal = |i: usize| parsed[i].usage.clone().unwrap_err();
    assert_eq!(parsed[0].id, None);
    assert_eq!(refusal(0).reason, "MissingId");
    assert!(
        refusal(1).message.contains("\"quantitiy\""),
        "{:?}",
        refusal(1)
    );
    assert_eq!(refusal(2).code, Some(ReasonCode::ReservedAttribute));
    assert_eq!(refusal(3).reason, "MalformedEvent");
    assert!(refusal(4).message.contains("licenseArn is a string"));
    assert_eq!(refusal(5).code, Some(ReasonCode::NonIntegerQuantity));
    assert_eq!(parsed[6].usage.as_ref().unwrap().quantity, 12);
    // Any RFC 3339 offset, read as UTC with the fraction dropped.
    assert_eq!(
        parsed[7].usage.as_ref().unwrap().timestamp,
        Some(t("2026-12-03T10:15:42Z"))
    );
    assert_eq!(refusal(8).code, Some(ReasonCode::MalformedTimestamp));
    assert_eq!(parsed[9].id, None);
    assert_eq!(refusal(9).reason, "MalformedEvent");
    // Tags given as an object: one tag set of the whole quantity, in key order.
    let allocations = parsed[10]
        .usage
        .as_ref()
        .unwrap()
        .allocations
        .clone()
        .unwrap();
    assert_eq!(allocations.len(), 1);
    assert_eq!(allocations[0].quantity, 4);
    let keys: Vec<&str> = allocations[0].tags.iter().map(|t| t.key.as_str()).collect();
    assert_eq!(keys, ["a", "z"]);
    assert_eq!(
        quantity_of_json(&json!(-1)),
        Err(ReasonCode::NegativeQuantity)
    );
    assert_eq!(
        quantity_of_json(&json!(null)),
        Err(ReasonCode::NonNumericQuantity)
    );
}

#[test]
fn a_cloudevents_batch_carries_the_same_usage() {
    let body = serde_json::to_vec(&json!([
        {
            "specversion": "1.0", "id": "ce-1", "source": "/billing/api", "type": "com.example.usage",
            "time": "2026-12-03T10:00:05Z", "datacontenttype": "application/json",
            "traceparent": "00-abc-def-01",
            "data": {"licenseArn": license(1), "customerAWSAccountId": ACCOUNT_A, "dimension": "api_calls", "quantity": 2}
        },
        {"specversion": "0.3", "id": "ce-2", "data": {}},
        {"specversion": "1.0", "id": "ce-3", "data": {"id": "x", "quantity": 1}},
        {"specversion": "1.0", "id": "ce-4", "Weird-Name": 1, "data": {}},
        {"specversion": "1.0", "id": "ce-5", "data": "text"},
    ]))
    .unwrap();
    let parsed = parse_batch(MediaType::CloudEventsBatch, &body).unwrap();
    let usage = parsed[0].usage.as_ref().unwrap();
    assert_eq!(parsed[0].id.as_deref(), Some("ce-1"));
    assert_eq!(usage.timestamp, Some(t("2026-12-03T10:00:05Z")));
    assert_eq!(usage.quantity, 2);
    for refused in &parsed[1..] {
        assert_eq!(
            refused.usage.as_ref().unwrap_err().reason,
            "MalformedEvent",
            "{refused:?}"
        );
    }
}

#[tokio::test]
async fn every_event_gets_its_verdict_in_order_and_a_retry_writes_nothing() {
    let world = World::new(t("2026-12-03T10:30:00Z"));
    let mut late = event("late", 1);
    late["timestamp"] = json!("2026-12-01T10:00:00Z");
    let mut bad_license = event("bad-license", 1);
    bad_license["licenseArn"] = json!("l-0123");
    let mut hash = event("a#b", 1);
    hash["dimension"] = json!("api");
    let first = post(
        &world,
        vec![
            event("e-1", 3),
            late.clone(),
            bad_license,
            event("e-2", 4),
            hash,
        ],
        "2026-12-03T10:30:00Z",
    )
    .await;
    assert_eq!(
        statuses(&first),
        ["accepted", "rejected", "rejected", "accepted", "rejected"]
    );
    assert_eq!(reason(&first[1]), "TimestampOutOfWindow");
    assert!(matches!(
        &first[1],
        Verdict::Rejected {
            server_side: Some("TimestampOutOfBoundsException"),
            ..
        }
    ));
    assert_eq!(reason(&first[2]), "InvalidLicenseArn");
    assert_eq!(reason(&first[4]), "Unwritable");
    let rows = world.tables.raw_rows().len();
    assert_eq!(rows, 4, "two rows and their two markers");

    // The whole batch again, a minute later (a client retrying after a timeout): the
    // defaulted timestamps are a later "now", and still nothing is written.
    let again = post(
        &world,
        vec![event("e-1", 3), late, event("e-2", 4)],
        "2026-12-03T10:31:00Z",
    )
    .await;
    assert_eq!(statuses(&again), ["duplicate", "rejected", "duplicate"]);
    let Verdict::Duplicate {
        recorded: Some(recorded),
        ..
    } = &again[0]
    else {
        panic!("{:?}", again[0]);
    };
    assert_eq!(
        recorded.timestamp,
        t("2026-12-03T10:30:00Z"),
        "the first write's instant"
    );
    assert_eq!(recorded.quantity, 3);
    assert_eq!(world.tables.raw_rows().len(), rows);

    // The same id with other usage: a conflict naming both, nothing written.
    let conflict = post(&world, vec![event("e-1", 30)], "2026-12-03T10:32:00Z").await;
    let Verdict::Conflict {
        recorded,
        this,
        message,
        ..
    } = &conflict[0]
    else {
        panic!("{:?}", conflict[0]);
    };
    assert_eq!(
        (recorded.as_ref().unwrap().quantity, this.quantity),
        (3, 30)
    );
    assert!(message.contains("new id"));
    assert_eq!(world.tables.raw_rows().len(), rows);
    let wire = serde_json::to_value(&conflict[0]).unwrap();
    assert_eq!(wire["status"], "conflict");
    assert_eq!(wire["recorded"]["customerAWSAccountId"], ACCOUNT_A);
    assert_eq!(wire["this"]["quantity"], 30);
}

#[tokio::test]
async fn an_id_repeated_inside_one_batch_is_judged_against_its_first_occurrence() {
    let world = World::new(t("2026-12-03T10:30:00Z"));
    let verdicts = post(
        &world,
        vec![
            event("same", 2),
            event("other", 1),
            event("same", 2),
            event("same", 5),
        ],
        "2026-12-03T10:30:00Z",
    )
    .await;
    assert_eq!(
        statuses(&verdicts),
        ["accepted", "accepted", "duplicate", "conflict"]
    );
    assert_eq!(world.tables.raw_rows().len(), 4);
}

#[tokio::test]
async fn a_direct_submit_stack_or_a_throttled_table_gets_no_verdicts() {
    let world = World::new(t("2026-12-03T10:30:00Z"));
    let direct = Target {
        store: &world.usage,
        mode: DeploymentMode::DirectSubmit,
        product_code: PRODUCT,
    };
    let refused = record_batch(
        direct,
        batch(vec![event("e", 1)]),
        t("2026-12-03T10:30:00Z"),
    )
    .await;
    assert!(matches!(refused, Err(BatchError::DirectSubmit(_))));
    assert!(world.tables.raw_rows().is_empty());

    world.tables.fail_after(
        StoreOp::UsagePutRow,
        1,
        PortError::Transient {
            operation: "put_row",
            message: "ProvisionedThroughputExceededException".into(),
        },
    );
    let full = Target {
        mode: DeploymentMode::Full,
        ..direct
    };
    let events = || batch(vec![event("a", 1), event("a", 1), event("b", 2)]);
    let throttled = record_batch(full, events(), t("2026-12-03T10:30:00Z")).await;
    assert!(matches!(
        throttled,
        Err(BatchError::Store(PortError::Transient { .. }))
    ));
    // The retry of the whole batch finds what the first attempt wrote and writes the rest.
    let retried = record_batch(full, events(), t("2026-12-03T10:30:05Z"))
        .await
        .unwrap();
    assert_eq!(statuses(&retried), ["duplicate", "duplicate", "accepted"]);
    assert_eq!(world.tables.raw_rows().len(), 4);
}

#[tokio::test]
async fn an_events_fate_follows_it_from_pending_through_its_hours_record_to_billed() {
    let world = World::new(t("2026-12-03T10:30:00Z"));
    world.subscribe(&license(1), ACCOUNT_A, SubscriptionStatus::Active, None);
    world.api.entitle(&license(1), ACCOUNT_A);
    post(
        &world,
        vec![event("e-1", 3), event("e-2", 4)],
        "2026-12-03T10:30:00Z",
    )
    .await;
    let fate = |id: &'static str| {
        let world = world.clone();
        async move {
            event_fate(
                &world.usage,
                &world.aggregated,
                &world.subscribers,
                &license(1),
                id,
            )
            .await
            .unwrap()
        }
    };
    assert_eq!(fate("never").await, None);
    let pending = fate("e-1").await.unwrap();
    assert_eq!(pending.fate, Fate::Pending);
    assert_eq!(pending.usage.unwrap().quantity, 3);

    // The hour closes; the pipeline aggregates and bills it.
    world.run_upstream(t("2026-12-03T11:05:00Z")).await;
    let counted = fate("e-2").await.unwrap();
    let Fate::Counted { record } = &counted.fate else {
        panic!("{counted:?}");
    };
    assert_eq!(record.quantity, 7);
    assert_eq!(
        record.metering_status,
        crate::model::AggregatedStatus::Pending
    );
    world.submit(t("2026-12-03T11:06:00Z")).await;
    let billed = fate("e-2").await.unwrap();
    let Fate::Counted { record } = &billed.fate else {
        panic!("{billed:?}");
    };
    assert_eq!(
        record.metering_status,
        crate::model::AggregatedStatus::Success
    );
    assert!(record.metering_record_id.is_some());
    let wire = serde_json::to_value(&billed).unwrap();
    assert_eq!(wire["fate"]["state"], "counted");
    assert_eq!(wire["fate"]["record"]["meteringStatus"], "Success");
    assert_eq!(wire["fate"]["record"]["hourBucket"], "2026-12-03T10");
    // No rate card kept on the buyer's row yet: said so, never priced at 0.
    assert_eq!(
        wire["fate"]["record"]["estimatedCharge"],
        json!({"amount": null, "currency": null, "basis": "no rate card"})
    );

    // The reconciliation kept the agreement's card: 7 x 0.0025 USD, exact.
    let mut row = world
        .subscribers
        .get(&license(1), ACCOUNT_A)
        .await
        .unwrap()
        .unwrap();
    row.agreement_id = Some("agmt-1".into());
    let now = t("2026-12-03T11:06:00Z");
    row.rate_card = Some(Box::new(crate::charges::StoredRateCard {
        card: crate::charges::RateCard {
            agreement_id: "agmt-1".into(),
            start: t("2026-11-01T00:00:00Z"),
            terms: crate::ports::AgreementTerms {
                currency: Some("USD".into()),
                rate_card: [("api_calls".to_string(), "0.0025".parse().unwrap())].into(),
                free_trial: None,
                has_upfront: false,
            },
        },
        agreement_updated_at: None,
        read_at: now,
    }));
    world.subscribers.insert(row, now);
    let priced = serde_json::to_value(fate("e-2").await.unwrap()).unwrap();
    assert_eq!(
        priced["fate"]["record"]["estimatedCharge"],
        json!({"amount": "0.0175", "currency": "USD", "basis": "priced"})
    );

    // A record that keeps the unit price it was aggregated at (0.01, before an
    // amendment) is worth that, whatever the row's card says now.
    let mut record = world
        .tables
        .aggregated_records()
        .into_iter()
        .find(|r| r.key.hour.to_string() == "2026-12-03T10")
        .unwrap();
    record.unit_price = Some(crate::charges::UnitPrice {
        agreement_id: "agmt-1".into(),
        basis: crate::charges::PriceBasis::Priced {
            price: "0.01".parse().unwrap(),
            currency: "USD".into(),
        },
    });
    world.tables.insert_aggregated(record, now);
    let kept = serde_json::to_value(fate("e-2").await.unwrap()).unwrap();
    assert_eq!(
        kept["fate"]["record"]["estimatedCharge"],
        json!({"amount": "0.07", "currency": "USD", "basis": "priced"})
    );
}

fn cloud(source: &str, id: &str, quantity: i64, time: Option<&str>) -> Value {
    let mut event = json!({
        "specversion": "1.0", "id": id, "source": source, "type": "com.example.usage",
        "data": {"licenseArn": license(1), "customerAWSAccountId": ACCOUNT_A,
                 "dimension": "api_calls", "quantity": quantity},
    });
    if let Some(time) = time {
        event["time"] = json!(time);
    }
    event
}

async fn post_cloud(world: &World, events: Vec<Value>, now: &str) -> Vec<Verdict> {
    let target = Target {
        store: &world.usage,
        mode: DeploymentMode::Full,
        product_code: PRODUCT,
    };
    let body = serde_json::to_vec(&json!(events)).unwrap();
    let parsed = parse_batch(MediaType::CloudEventsBatch, &body).unwrap();
    record_batch(target, parsed, t(now)).await.unwrap()
}

#[tokio::test]
async fn two_cloudevents_producers_numbering_their_events_alike_never_collide() {
    let world = World::new(t("2026-12-03T10:30:00Z"));
    let now = "2026-12-03T10:30:00Z";
    let first = post_cloud(&world, vec![cloud("/billing/a", "1", 2, None)], now).await;
    let second = post_cloud(
        &world,
        vec![
            cloud("/billing/b", "1", 5, None),
            cloud("/billing/b", "1", 5, None),
            cloud("/billing/a", "1", 2, None),
        ],
        now,
    )
    .await;
    assert_eq!(statuses(&first), ["accepted"]);
    assert_eq!(
        statuses(&second),
        ["accepted", "duplicate", "duplicate"],
        "another producer's id 1 is another event; each producer's retry a duplicate"
    );
    // The native format's ids keep their own keys: its "1" is a third event.
    assert_eq!(
        statuses(&post(&world, vec![event("1", 7)], now).await),
        ["accepted"]
    );
    assert_eq!(
        world.tables.raw_rows().len(),
        6,
        "three rows and their markers"
    );
    // No native id can pass for a CloudEvent's key.
    let forged = crate::items::ingestion::cloudevents_event_key("/billing/a", "1");
    let verdicts = post(&world, vec![event(&forged, 2)], now).await;
    assert_eq!(reason(&verdicts[0]), "Unwritable");
    // Without its source a CloudEvent has no key.
    let mut sourceless = cloud("/billing/a", "2", 1, None);
    sourceless.as_object_mut().unwrap().remove("source");
    let verdicts = post_cloud(&world, vec![sourceless], now).await;
    assert_eq!(reason(&verdicts[0]), "MissingSource");
    assert_eq!(world.tables.raw_rows().len(), 6);
}

#[tokio::test]
async fn a_retry_refused_by_the_clock_answers_what_its_first_write_recorded() {
    let world = World::new(t("2026-11-30T23:59:55Z"));
    let mut last_second = event("e-1", 3);
    last_second["timestamp"] = json!("2026-11-30T23:59:50Z");
    let first = post(&world, vec![last_second.clone()], "2026-11-30T23:59:55Z").await;
    assert_eq!(statuses(&first), ["accepted"]);
    let rows = world.tables.raw_rows().len();

    // The whole batch again after last month's grace ended: written and billable when
    // first sent, so a duplicate, not "rejected, nothing written".
    let mut other = last_second.clone();
    other["quantity"] = json!(4);
    let again = post(
        &world,
        vec![last_second, other, event("e-2", 1)],
        "2026-12-01T06:00:05Z",
    )
    .await;
    assert_eq!(statuses(&again), ["duplicate", "conflict", "accepted"]);
    let Verdict::Conflict { recorded, this, .. } = &again[1] else {
        panic!("{:?}", again[1]);
    };
    assert_eq!((recorded.as_ref().unwrap().quantity, this.quantity), (3, 4));
    // The same for a CloudEvent, whose key is its source and id.
    let at = Some("2026-11-30T23:59:50Z");
    let ce = post_cloud(
        &world,
        vec![cloud("/a", "1", 2, at)],
        "2026-11-30T23:59:56Z",
    )
    .await;
    assert_eq!(statuses(&ce), ["accepted"]);
    let ce = post_cloud(
        &world,
        vec![cloud("/a", "1", 2, at), cloud("/b", "1", 2, at)],
        "2026-12-01T06:00:05Z",
    )
    .await;
    assert_eq!(statuses(&ce), ["duplicate", "rejected"]);
    assert_eq!(world.tables.raw_rows().len(), rows + 4);
}

#[tokio::test]
async fn usage_whose_hours_record_can_no_longer_be_sent_is_rejected_saying_so() {
    let world = World::new(t("2026-12-03T10:20:00Z"));
    // Within 24 h of its own instant, but its record is stamped 10:00 yesterday.
    let mut late = event("late", 1);
    late["timestamp"] = json!("2026-12-02T10:50:00Z");
    let mut in_time = event("in-time", 1);
    in_time["timestamp"] = json!("2026-12-02T11:05:00Z");
    let verdicts = post(&world, vec![late, in_time], "2026-12-03T10:20:00Z").await;
    assert_eq!(statuses(&verdicts), ["rejected", "accepted"]);
    let Verdict::Rejected {
        reason,
        server_side,
        message,
        ..
    } = &verdicts[0]
    else {
        panic!("{:?}", verdicts[0]);
    };
    assert_eq!(reason, "TimestampOutOfWindow");
    assert_eq!(*server_side, Some("TimestampOutOfBoundsException"));
    assert!(
        message.contains("2026-12-02T10:00:00Z") && message.contains("no longer be sent"),
        "{message}"
    );
    assert_eq!(
        world.tables.raw_rows().len(),
        2,
        "only in-time and its marker"
    );
}

#[tokio::test]
async fn an_id_too_long_for_a_key_is_refused_alone_and_the_others_get_their_verdicts() {
    let world = World::new(t("2026-12-03T10:30:00Z"));
    let long = "x".repeat(1100);
    let verdicts = post(
        &world,
        vec![event("e-1", 1), event(&long, 1), event("e-2", 1)],
        "2026-12-03T10:30:00Z",
    )
    .await;
    assert_eq!(statuses(&verdicts), ["accepted", "rejected", "accepted"]);
    let Verdict::Rejected {
        reason, message, ..
    } = &verdicts[1]
    else {
        panic!("{:?}", verdicts[1]);
    };
    assert_eq!(reason, "Unwritable");
    assert!(message.contains("1024"), "{message}");
    assert_eq!(world.tables.raw_rows().len(), 4);
}

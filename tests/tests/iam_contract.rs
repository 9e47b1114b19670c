//! The IAM contract: moto checks no permissions, so this test records every AWS call
//! each function really makes while the real handlers run end to end (subscription
//! events, a registration, a full metering run with a deprovisioning flush, late usage,
//! a not-yet-subscribed buyer, age-out, deprovision-cleanup), turns each call into the
//! IAM requests AWS authorizes (`awsmp_e2e::calls`: index ARNs, each item of a
//! transaction, queue ARNs, the Region the call went to), adds what each function's
//! SQS event source mappings and Lambda logging need, and evaluates all of it against
//! the function's role in the templates (`awsmp_local_aws::iam`). It fails on any
//! request the role does not allow, and on any grant no request uses (least privilege),
//! naming the function, action, resource and role, and what to change.
//!
//! The main stack runs in eu-west-1 here, so a grant built with the wrong Region (the
//! subscribers table is always in us-east-1) is caught.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use aws_lambda_events::apigw::ApiGatewayProxyRequest;
use aws_lambda_events::encodings::Body;
use awsmp_core::memory::{Decorator, SubscriberDecorator};
use awsmp_core::model::{Subscriber, SubscriptionStatus};
use awsmp_core::ports::{PortError, SubscriberStore};
use awsmp_core::time::Instant;
use awsmp_e2e::calls::Authorization;
use awsmp_e2e::events::{Delivered, queue_arn, scheduled_event, sqs_event};
use awsmp_e2e::{QueueKind, SUBSCRIBERS_REGION, Stack, StackOptions, license};
use awsmp_local_aws::cfn::DEFAULT_ACCOUNT;
use awsmp_local_aws::{
    Context, Decision, ResourcePolicy, StackTemplate, function_wiring, key_decision,
    resource_policies, workspace_root,
};
use awsmp_marketplace_sim::EntitlementSeed;
use common::*;

/// The main stack's Region in this test (not the subscribers table's).
const MAIN_REGION: &str = "eu-west-1";
/// The subscription events queue, as the events template names it for stage `test`.
const SUBSCRIPTION_QUEUE: &str = "awsmp-subscription-events-test";
/// The stage and product the harness's table and queue names are built from.
const STAGE: &str = "test";
const PRODUCT: &str = "prod-e2e";
/// The seller's key for the events stack's table and queues (`DataKmsKeyArn`), given
/// to the main stack too (`SubscribersKmsKeyArn`).
const EVENTS_KEY: &str = "arn:aws:kms:us-east-1:123456789012:key/events-data";

/// Grants kept although no recorded run uses them, each with the reason, as
/// (role, statement sid, action, reason). Empty: every grant is used by a recorded
/// call, an event source mapping or the function's log writes. A grant here that a
/// run starts using is reported, so the entry can go.
const KEPT_WITHOUT_A_RECORDED_CALL: &[(&str, &str, &str, &str)] = &[
    (
        "AggregatorRole",
        "UsageReadAndClaim",
        "dynamodb:GetItem",
        "a final write (a zero row under skip) whose condition fails reads the row back \
         to tell its own lost answer from another writer's; no recorded run loses one",
    ),
    (
        "SubmitterRole",
        "AggregatedClaimAndRecord",
        "dynamodb:GetItem",
        "an age-out whose condition fails reads the record back to tell its own lost \
         answer from another writer's; no recorded run loses one",
    ),
];

/// Every function (its binary) and the template that deploys it.
const FUNCTIONS: &[(&str, &str)] = &[
    ("subscription", "template-events.yaml"),
    ("deprovision-cleanup", "template-events.yaml"),
    ("register", "template-main.yaml"),
    ("usage-api", "template-main.yaml"),
    ("outcome-events", "template-main.yaml"),
    ("discoverer", "template-main.yaml"),
    ("aggregator", "template-main.yaml"),
    ("cleanup", "template-main.yaml"),
    ("submitter", "template-main.yaml"),
];

fn fixture(crate_dir: &str, name: &str) -> serde_json::Value {
    let path = workspace_root()
        .join("crates/functions")
        .join(crate_dir)
        .join("tests/fixtures")
        .join(name);
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// An AWS Marketplace event (the subscription crate's fixtures) for one license.
fn marketplace_event(
    fixture_name: &str,
    license_arn: &str,
    account: &str,
    agreement: &str,
    time: &str,
) -> String {
    let mut event = fixture("subscription", fixture_name);
    event["time"] = time.into();
    event["detail"]["acceptor"]["accountId"] = account.into();
    event["detail"]["agreement"]["id"] = agreement.into();
    if event["detail"].get("license").is_some() {
        event["detail"]["license"]["arn"] = license_arn.into();
        event["detail"]["product"]["code"] = PRODUCT.into();
    }
    event.to_string()
}

fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Plays the subscription function as `LocalStack::connect` builds it, its calls recorded.
async fn deliver_events(stack: &Stack, events: Vec<String>) {
    let state = stack
        .connect(
            &stack.events,
            "subscription",
            &BTreeMap::new(),
            awsmp_subscription::Config::from_lookup,
            awsmp_subscription::State::connect,
        )
        .unwrap();
    let messages: Vec<Delivered> = events
        .into_iter()
        .enumerate()
        .map(|(i, body)| Delivered {
            message_id: format!("event-{i}"),
            receipt_handle: format!("receipt-{i}"),
            body,
        })
        .collect();
    // One message per batch: the events of one license apply in order.
    for message in messages {
        let queue = queue_arn(&stack.events.region, SUBSCRIPTION_QUEUE);
        let event = sqs_event(&queue, std::slice::from_ref(&message)).unwrap();
        let response = awsmp_subscription::handler(&state, event).await.unwrap();
        assert!(
            response.batch_item_failures.is_empty(),
            "subscription refused {}",
            message.body
        );
    }
}

/// Plays one buyer registration through the register function as `LocalStack::connect` builds it.
async fn register(stack: &Stack, license_arn: &str, account: &str) {
    // The customer-profile table is the main template's (the stack deployed it).
    stack.registered_only(license_arn, account).unwrap();
    // What the local stack sets where the page is served (no CloudFront here).
    let page = BTreeMap::from([
        (
            "REGISTRATION_PAGE_URL".to_string(),
            "https://register.example.com/index.html".to_string(),
        ),
        (
            "ALLOWED_ORIGIN".to_string(),
            "https://register.example.com".to_string(),
        ),
    ]);
    let mut state = stack
        .connect(
            &stack.main,
            "register",
            &page,
            awsmp_register::Config::from_lookup,
            awsmp_register::State::connect,
        )
        .unwrap();
    state.metrics = Arc::new(awsmp_core::memory::RecordingMetrics::new());
    let mut request: ApiGatewayProxyRequest =
        serde_json::from_value(fixture("register", "apigw-register-urlencoded.json")).unwrap();
    let token = format!("token-{license_arn}-{account}");
    request.body = Some(format!(
        "x-amzn-marketplace-token={}&companyName=Example+Corp",
        percent_encode(&token)
    ));
    let response = awsmp_register::handle(&state, request).await;
    let body = match &response.body {
        Some(Body::Text(text)) => text.clone(),
        other => format!("{other:?}"),
    };
    assert_eq!(response.status_code, 200, "registration failed: {body}");
}

/// One request to the usage API's handler; its JSON answer (a 200 expected).
async fn call_usage_api(
    state: &awsmp_usage_api::State,
    method: &str,
    path: &str,
    license_arn: Option<&str>,
    body: Option<serde_json::Value>,
) -> serde_json::Value {
    let mut request = ApiGatewayProxyRequest::default();
    request.http_method = method.parse().unwrap();
    request.path = Some(path.to_string());
    if let Some(body) = body {
        request
            .headers
            .insert("content-type", "application/json".parse().unwrap());
        request.body = Some(body.to_string());
    }
    if let Some(license_arn) = license_arn {
        request.query_string_parameters =
            std::collections::HashMap::from([("licenseArn".to_string(), license_arn.to_string())])
                .into();
    }
    let response = awsmp_usage_api::handle(state, request).await;
    let body = match &response.body {
        Some(Body::Text(text)) => text.clone(),
        other => format!("{other:?}"),
    };
    assert_eq!(response.status_code, 200, "{method} {path}: {body}");
    serde_json::from_str(&body).unwrap()
}

/// The function's real store, with a concurrent lifecycle writer (the harness's own,
/// unrecorded store) rewriting the row just before the function's first write, so the
/// function meets a real version conflict and takes its re-read path.
struct RacedOnce {
    inner: Arc<dyn SubscriberStore>,
    rival: Arc<dyn SubscriberStore>,
    raced: AtomicBool,
}

impl Decorator for RacedOnce {}

#[async_trait::async_trait]
impl SubscriberDecorator for RacedOnce {
    type Inner = dyn SubscriberStore;

    fn inner(&self) -> &Self::Inner {
        self.inner.as_ref()
    }

    async fn before_put_lifecycle(&self, row: &Subscriber, now: Instant) -> Result<(), PortError> {
        if !self.raced.swap(true, Ordering::SeqCst)
            && let Some(current) = self
                .rival
                .get(&row.license_arn, &row.customer_aws_account_id)
                .await?
        {
            assert!(self.rival.put_lifecycle(&current, now).await?);
        }
        Ok(())
    }
}

/// Plays deprovision-cleanup at "now" as `LocalStack::connect` builds it, racing one
/// concurrent lifecycle write.
async fn run_deprovision_cleanup(stack: &Stack) -> awsmp_deprovision_cleanup::DeprovisionReport {
    let mut state = stack
        .connect(
            &stack.events,
            "deprovision-cleanup",
            &BTreeMap::new(),
            awsmp_deprovision_cleanup::Config::from_lookup,
            awsmp_deprovision_cleanup::State::connect,
        )
        .unwrap();
    state.subscribers = Arc::new(RacedOnce {
        inner: state.subscribers.clone(),
        rival: stack.subscribers.clone(),
        raced: AtomicBool::new(false),
    });
    let event = scheduled_event("awsmp-deprovision-cleanup", stack.now()).unwrap();
    awsmp_deprovision_cleanup::handler(&state, event)
        .await
        .unwrap()
}

/// Marketplace entitles the buyer (what License Updated means on its side).
fn entitle(stack: &Stack, license_arn: &str, account: &str) {
    stack
        .sim
        .handle()
        .entitle(EntitlementSeed {
            license_arn: license_arn.to_string(),
            customer_aws_account_id: account.to_string(),
            product_code: PRODUCT.to_string(),
        })
        .unwrap();
}

/// Runs every function through the paths the pipeline has, on one stack.
async fn drive_every_function() -> Stack {
    let stack = stack_with("2026-11-30T10:30:00Z", |o: &mut StackOptions| {
        o.region = MAIN_REGION.to_string();
    })
    .await;
    let (staying, leaving, ended, pending) = (license(1), license(5), license(3), license(4));

    // Subscription events: activations, a deprovisioning, an agreement end (found
    // through the agreement index).
    let mut events = Vec::new();
    for (l, account) in [
        (&staying, ACCOUNT_A),
        (&leaving, ACCOUNT_A),
        (&ended, ACCOUNT_B),
    ] {
        events.push(marketplace_event(
            "license-updated-manufacturer.json",
            l,
            account,
            &format!("agmt-{}", &l[l.len() - 4..]),
            "2026-11-30T06:00:00Z",
        ));
        entitle(&stack, l, account);
    }
    events.push(marketplace_event(
        "license-deprovisioned-manufacturer.json",
        &leaving,
        ACCOUNT_A,
        &format!("agmt-{}", &leaving[leaving.len() - 4..]),
        "2026-11-30T09:40:00Z",
    ));
    events.push(marketplace_event(
        "purchase-agreement-ended-manufacturer.json",
        &ended,
        ACCOUNT_B,
        &format!("agmt-{}", &ended[ended.len() - 4..]),
        "2026-11-30T08:00:00Z",
    ));
    deliver_events(&stack, events).await;

    // A registration: ResolveCustomer, the profile row, registeredRegions.
    register(&stack, &staying, ACCOUNT_A).await;

    // Usage: closed hours, the leaving license's open hour (the deprovisioning flush),
    // a rejected row, a buyer Marketplace does not entitle yet (CustomerNotSubscribed,
    // no subscriber row), and a row past the window (age-out).
    for (l, account, dimension, at, quantity) in [
        (&staying, ACCOUNT_A, "requests", "2026-11-30T08:10:00Z", 3),
        (&staying, ACCOUNT_A, "requests", "2026-11-30T09:20:00Z", 4),
        (&staying, ACCOUNT_A, "storage", "2026-11-30T09:25:00Z", 5),
        (&leaving, ACCOUNT_A, "requests", "2026-11-30T09:50:00Z", 6),
        (&leaving, ACCOUNT_A, "requests", "2026-11-30T10:20:00Z", 7),
        (&pending, ACCOUNT_B, "requests", "2026-11-30T09:05:00Z", 8),
        (&staying, ACCOUNT_A, "requests", "2026-11-29T08:00:00Z", 9),
    ] {
        stack
            .put_usage(l, account, dimension, at, quantity)
            .await
            .unwrap();
    }
    stack
        .put_usage(&staying, ACCOUNT_A, "users", "2026-11-30T09:61:00Z", 1)
        .await
        .unwrap();
    // A group over 99 rows commits in several transactions.
    for i in 0..120 {
        let at = format!("2026-11-30T08:{:02}:{:02}Z", i / 60, i % 60);
        stack
            .put_usage(&staying, ACCOUNT_A, "storage", &at, 1)
            .await
            .unwrap();
    }
    stack.registered_only(&pending, ACCOUNT_B).unwrap();

    // Aggregation and cleanup; one cleanup message also names a row outside its
    // group's range (cleanup reads such a row by key).
    stack.run_discoverer().await.unwrap();
    stack.drain_aggregator().await.unwrap();
    let cleanup_messages = stack.peek(QueueKind::Cleanup).await.unwrap();
    let mut named: serde_json::Value = serde_json::from_str(
        cleanup_messages
            .first()
            .expect("the aggregator enqueued cleanup work"),
    )
    .unwrap();
    named["aggregated"]
        .as_array_mut()
        .expect("a cleanup message lists its counted rows")
        .push(format!("{ACCOUNT_A}#requests#2026-11-30T07:00:00Z").into());
    stack
        .send_raw(QueueKind::Cleanup, &named.to_string())
        .await
        .unwrap();
    stack.drain_cleanup().await.unwrap();

    // A late row folds into a record not yet sent.
    stack
        .put_usage(&staying, ACCOUNT_A, "requests", "2026-11-30T09:40:00Z", 2)
        .await
        .unwrap();
    stack.run_discoverer().await.unwrap();
    stack.drain_aggregator().await.unwrap();
    stack.drain_cleanup().await.unwrap();

    stack.run_submitter().await.unwrap();
    let billed = stack.billed();
    assert_eq!(
        billed.get(&key(&leaving, ACCOUNT_A, "requests", "2026-11-30T10")),
        Some(&7),
        "the deprovisioning flush billed the open hour: {billed:?}"
    );
    assert_eq!(
        billed.get(&key(&staying, ACCOUNT_A, "requests", "2026-11-30T09")),
        Some(&6),
        "the late row was folded in before the send: {billed:?}"
    );
    assert_eq!(
        billed.get(&key(&staying, ACCOUNT_A, "storage", "2026-11-30T08")),
        Some(&120)
    );

    // Late usage for an hour already billed, then another run.
    stack
        .put_usage(&staying, ACCOUNT_A, "requests", "2026-11-30T09:59:00Z", 1)
        .await
        .unwrap();
    stack.advance(chrono::Duration::minutes(5));
    stack.run_pipeline().await.unwrap();
    assert!(stack.peek(QueueKind::Cleanup).await.unwrap().is_empty());

    // The usage API: a batch accepted, sent again (duplicates read back their first
    // write), an id reused for other usage (a conflict reads the marker and row); the
    // pipeline meters it, and the event is read back with its hour's record.
    let api = stack.usage_api().unwrap();
    let event = |quantity: i64| {
        serde_json::json!({"events": [{
            "id": "api-1", "licenseArn": staying, "customerAWSAccountId": ACCOUNT_A,
            "dimension": "api_calls", "quantity": quantity,
        }]})
    };
    for (quantity, want) in [(3, "accepted"), (3, "duplicate"), (4, "conflict")] {
        let answer =
            call_usage_api(&api, "POST", "/usage/events", None, Some(event(quantity))).await;
        assert_eq!(answer["results"][0]["status"], want, "{answer}");
    }
    stack.advance(chrono::Duration::minutes(65));
    stack.run_pipeline().await.unwrap();
    let fate = call_usage_api(&api, "GET", "/usage/events/api-1", Some(&staying), None).await;
    assert_eq!(fate["fate"]["state"], "counted", "{fate}");

    // The outcome events of what the run made final: the aggregated table's records as
    // its stream tells them (each the change from Pending to its status).
    publish_outcomes(&stack).await;

    // The deprovisioning window closes; deprovision-cleanup ends it.
    stack.advance(chrono::Duration::minutes(30));
    let report = run_deprovision_cleanup(&stack).await;
    assert_eq!(report.closed, 1, "{report:?}");
    let row = stack.subscribers.get(&leaving, ACCOUNT_A).await.unwrap();
    assert_eq!(
        row.and_then(|r| r.subscription_status),
        Some(SubscriptionStatus::Inactive)
    );
    stack
}

/// Plays the outcome-events function on a stream batch built from the aggregated
/// table's final records (its calls recorded) and checks the bus took every event.
async fn publish_outcomes(stack: &Stack) {
    let state = stack.outcome_events().unwrap();
    let table = stack.main.tables.get("AggregatedUsageTable").unwrap();
    let stream_arn = stack
        .main
        .attribute("AggregatedUsageTable", "StreamArn")
        .unwrap();
    let items = stack
        .dynamodb
        .scan()
        .table_name(table)
        .send()
        .await
        .unwrap()
        .items
        .unwrap_or_default();
    let records: Vec<serde_json::Value> = items
        .iter()
        .enumerate()
        .filter_map(|(i, item)| {
            let image: serde_json::Map<String, serde_json::Value> = item
                .iter()
                .filter_map(|(k, v)| {
                    let value = match v {
                        aws_sdk_dynamodb::types::AttributeValue::S(s) => serde_json::json!({"S": s}),
                        aws_sdk_dynamodb::types::AttributeValue::N(n) => serde_json::json!({"N": n}),
                        _ => return None,
                    };
                    Some((k.clone(), value))
                })
                .collect();
            let status = image.get("meteringStatus")?["S"].as_str()?.to_string();
            (status != "Pending").then(|| {
                let mut old = image.clone();
                old.insert("meteringStatus".into(), serde_json::json!({"S": "Pending"}));
                serde_json::json!({
                    "eventID": format!("iam-{i}"),
                    "eventName": "MODIFY",
                    "eventSourceARN": stream_arn,
                    "dynamodb": {"SequenceNumber": format!("{}", 1000 + i), "NewImage": image, "OldImage": old},
                })
            })
        })
        .collect();
    assert!(!records.is_empty(), "the run made no record final");
    let event: awsmp_outcome_events::StreamEvent =
        serde_json::from_value(serde_json::json!({ "Records": records })).unwrap();
    let response = awsmp_outcome_events::handler(
        &state,
        lambda_runtime::LambdaEvent::new(event, lambda_runtime::Context::default()),
    )
    .await
    .unwrap();
    assert!(
        response.batch_item_failures.is_empty(),
        "the bus refused outcome events: {:?}",
        response.batch_item_failures
    );
}

/// One thing a function needs IAM to allow, and why.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Need {
    request: Authorization,
    because: String,
}

/// The request context AWS gives a function's request: who calls (its role), over TLS,
/// the condition keys the call itself carries, and for a KMS call made through
/// DynamoDB the service and account.
fn context(principal: &str, request: &Authorization) -> Context {
    let mut context = Context::new()
        .with("aws:PrincipalArn", [principal])
        .with("aws:SecureTransport", ["true"]);
    if !request.attributes.is_empty() {
        context = context.with("dynamodb:Attributes", request.attributes.iter().cloned());
    }
    if let Some(values) = &request.return_values {
        context = context.with("dynamodb:ReturnValues", [values.clone()]);
    }
    if let Some(service) = &request.via_service {
        let region = request.resource.split(':').nth(3).unwrap_or_default();
        context = context
            .with(
                "kms:ViaService",
                [format!("{service}.{region}.amazonaws.com")],
            )
            .with("kms:CallerAccount", [DEFAULT_ACCOUNT]);
    }
    context
}

/// IAM's decision for `principal` (with `identity`) making `request`: the role's
/// policy and the policy of the resource it names (a table's resource policy: a
/// deny in either wins, an allow in either allows); for a key of the template its key
/// policy (which may delegate to the role's policy by naming the account), and for a
/// key the seller brings (`DataKmsKeyArn`, ...) the role's policy, as the documented
/// key policy delegates to IAM.
fn decide(
    identity: &awsmp_local_aws::Policy,
    policies: &[ResourcePolicy],
    principal: &str,
    request: &Authorization,
) -> Decision {
    let context = context(principal, request);
    let (action, resource) = (request.action.as_str(), request.resource.as_str());
    let governing = policies.iter().filter(|p| p.governs(resource));
    if action.starts_with("kms:") {
        return governing
            .map(|p| key_decision(&p.policy, identity, principal, action, resource, &context))
            .next()
            .unwrap_or_else(|| identity.evaluate_in(action, resource, &context));
    }
    governing.fold(
        identity.evaluate_in(action, resource, &context),
        |decision, p| {
            decision
                .with_resource_policy(p.policy.evaluate_for(principal, action, resource, &context))
        },
    )
}

/// Each table and queue of `template` encrypted with a customer-managed KMS key (the
/// template's own or one its parameters name), as (resource ARN, key ARN, the service
/// that uses the key on a caller's behalf).
fn encrypted(template: &StackTemplate) -> Vec<(String, String, &'static str)> {
    let mut out = Vec::new();
    for (kind, path, service) in [
        (
            "AWS::DynamoDB::Table",
            &["SSESpecification", "KMSMasterKeyId"][..],
            "dynamodb",
        ),
        ("AWS::SQS::Queue", &["KmsMasterKeyId"][..], "sqs"),
    ] {
        for (id, resource) in template.resources_of_type(kind) {
            if !template.is_deployed(&id).unwrap() {
                continue;
            }
            let mut value = resource.get("Properties");
            for key in path {
                value = value.and_then(|v| v.get(*key));
            }
            let key = value
                .and_then(|k| template.resolve(k).unwrap())
                .and_then(|k| k.as_str().map(str::to_string))
                .filter(|k| k.starts_with("arn:"));
            if let Some(key) = key {
                out.push((template.attribute(&id, "Arn").unwrap(), key, service));
            }
        }
    }
    out
}

/// What using a resource encrypted with a KMS key asks of the caller: DynamoDB
/// decrypts the table key as the caller; SQS decrypts a message's data key for a
/// receiver and makes one for a sender (as the caller, through the service).
fn key_needs(
    request: &Authorization,
    keys: &[(String, String, &'static str)],
) -> Vec<Authorization> {
    let Some((_, key, service)) = keys.iter().find(|(arn, _, _)| {
        request.resource == *arn || request.resource.starts_with(&format!("{arn}/"))
    }) else {
        return Vec::new();
    };
    let actions: &[&str] = match (request.action.as_str(), *service) {
        (action, "dynamodb") if action.starts_with("dynamodb:") => &["kms:Decrypt"],
        ("sqs:ReceiveMessage", "sqs") => &["kms:Decrypt"],
        ("sqs:SendMessage", "sqs") => &["kms:GenerateDataKey", "kms:Decrypt"],
        _ => &[],
    };
    actions
        .iter()
        .map(|action| Authorization::via(action, key, service))
        .collect()
}

#[tokio::test]
async fn every_recorded_call_is_allowed_by_the_functions_role_and_every_grant_is_used() {
    let stack = drive_every_function().await;
    let main = StackTemplate::load(
        &workspace_root().join("template-main.yaml"),
        &[
            ("ProductCode", PRODUCT),
            ("StageName", STAGE),
            ("AWS::Region", MAIN_REGION),
            ("OutcomeEvents", "enabled"),
            ("ProfileRetentionDays", "30"),
            ("SubscribersKmsKeyArn", EVENTS_KEY),
        ],
    )
    .unwrap();
    let events = StackTemplate::load(
        &workspace_root().join("template-events.yaml"),
        &[
            ("StageName", STAGE),
            ("AWS::Region", SUBSCRIBERS_REGION),
            ("DataKmsKeyArn", EVENTS_KEY),
        ],
    )
    .unwrap();

    let mut policies = resource_policies(&main).unwrap();
    policies.extend(resource_policies(&events).unwrap());
    let mut keys = encrypted(&main);
    keys.extend(encrypted(&events));
    for (resource, key) in [
        (
            "table/awsmp-prod-e2e-customer-profile",
            "key/CustomerProfileKey",
        ),
        ("table/awsmp-subscribers-test", EVENTS_KEY),
        ("awsmp-subscription-events-test", EVENTS_KEY),
    ] {
        assert!(
            keys.iter()
                .any(|(arn, k, _)| arn.ends_with(resource) && k.ends_with(key)),
            "{resource} is encrypted with {key} under these parameters: {keys:?}"
        );
    }

    let mut denied = Vec::new();
    let mut unused = Vec::new();
    let mut kept_but_used = Vec::new();
    let mut summary = String::new();
    for (function, template_name) in FUNCTIONS {
        let template = if *template_name == "template-main.yaml" {
            &main
        } else {
            &events
        };
        let wiring = function_wiring(template, function).unwrap();
        let role = format!("{} ({})", wiring.role, wiring.template);

        // What the function needs: its recorded calls, its event sources, its logs.
        let calls = stack.calls.calls_of(function);
        assert!(
            !calls.is_empty(),
            "{function}: no AWS call was recorded; is its State built with Stack::connect (a recording SDK config)?"
        );
        let mut needs: BTreeSet<Need> = BTreeSet::new();
        for call in &calls {
            for request in call.authorizations(DEFAULT_ACCOUNT).unwrap() {
                needs.insert(Need {
                    request,
                    because: format!("recorded {}", call.target),
                });
            }
        }
        for queue in &wiring.sqs_sources {
            for action in [
                "sqs:ReceiveMessage",
                "sqs:DeleteMessage",
                "sqs:GetQueueAttributes",
            ] {
                needs.insert(Need {
                    request: Authorization::new(action.to_string(), queue.clone()),
                    because: "its SQS event source mapping".to_string(),
                });
            }
        }
        for stream in &wiring.stream_sources {
            for action in [
                "dynamodb:DescribeStream",
                "dynamodb:GetRecords",
                "dynamodb:GetShardIterator",
                "dynamodb:ListStreams",
            ] {
                needs.insert(Need {
                    request: Authorization::new(action.to_string(), stream.clone()),
                    because: "its DynamoDB stream event source mapping".to_string(),
                });
            }
        }
        for queue in &wiring.failure_destinations {
            needs.insert(Need {
                request: Authorization::new("sqs:SendMessage".to_string(), queue.clone()),
                because: "its mapping's on-failure destination".to_string(),
            });
        }
        if let Some(group) = &wiring.log_group_arn {
            for action in ["logs:CreateLogStream", "logs:PutLogEvents"] {
                needs.insert(Need {
                    request: Authorization::new(
                        action.to_string(),
                        format!("{group}:log-stream:2026/11/30/[$LATEST]0123abcd"),
                    ),
                    because: "Lambda writing its LoggingConfig.LogGroup".to_string(),
                });
            }
        }

        // Using a table or queue under a customer-managed key asks KMS too, as the
        // caller, through the service: the key policy (or, for the seller's key, the
        // role) must allow it.
        for need in needs.clone() {
            for request in key_needs(&need.request, &keys) {
                needs.insert(Need {
                    request,
                    because: format!(
                        "{} on {}, encrypted with it",
                        need.request.action, need.request.resource
                    ),
                });
            }
        }

        // Every need is allowed.
        let principal = template.attribute(&wiring.role, "Arn").unwrap();
        let mut requests: BTreeMap<&Authorization, Vec<&str>> = BTreeMap::new();
        for need in &needs {
            requests
                .entry(&need.request)
                .or_default()
                .push(&need.because);
        }
        for (request, because) in &requests {
            let decision = decide(&wiring.policy, &policies, &principal, request);
            summary.push_str(&format!(
                "  {function:<20} {:<34} {:<100} {}\n",
                request.action,
                request.resource,
                match &decision {
                    Decision::Allowed { by } => format!("allowed by {}", by.join(", ")),
                    Decision::ImplicitDeny { .. } => "DENIED".to_string(),
                    Decision::ExplicitDeny { by } => format!("DENIED by {by}"),
                }
            ));
            let resource = template
                .arn_expression(&request.resource)
                .unwrap_or_else(|| format!("\"{}\"", request.resource));
            let fix = match &decision {
                Decision::ExplicitDeny { by } => format!(
                    "Let statement {by} spare {} (a table's ResourcePolicy or a key's KeyPolicy \
                     names the roles it spares)",
                    wiring.role
                ),
                Decision::ImplicitDeny { .. } if request.action.starts_with("kms:") => format!(
                    "Name {} in the key policy's statement for its users",
                    wiring.role
                ),
                _ => format!(
                    "Add to {}: Action {}, Resource {resource}",
                    wiring.role, request.action
                ),
            };
            let why = match decision {
                Decision::Allowed { .. } => continue,
                Decision::ExplicitDeny { by } => {
                    format!("statement {by} (of the role or the resource's policy) denies it")
                }
                Decision::ImplicitDeny { conditional } if !conditional.is_empty() => format!(
                    "only conditional statements ({}) cover it",
                    conditional.join(", ")
                ),
                Decision::ImplicitDeny { .. } => "no statement allows it".to_string(),
            };
            denied.push(format!(
                "{function}: {} on {} ({}) is not allowed by {role}: {why}. {fix}",
                request.action,
                request.resource,
                because.join("; "),
            ));
        }

        // Every grant is used by some need (or kept on purpose).
        for grant in wiring.policy.grants() {
            let used = needs.iter().any(|n| {
                wiring
                    .policy
                    .grant_covers(&grant, &n.request.action, &n.request.resource)
            });
            let kept = KEPT_WITHOUT_A_RECORDED_CALL.iter().find(|(r, sid, a, _)| {
                *r == wiring.role && *sid == grant.sid && *a == grant.action
            });
            match (used, kept) {
                (true, Some(_)) => kept_but_used.push(format!(
                    "{role} {} {} on {} is used now: drop it from KEPT_WITHOUT_A_RECORDED_CALL",
                    grant.sid, grant.action, grant.resource
                )),
                (false, None) => unused.push(format!(
                    "{function}: {role} statement {} grants {} on {} but no recorded call, \
                     event source mapping or log write of {function} uses it: remove it (or, \
                     if a path these runs cannot reach needs it, add it to \
                     KEPT_WITHOUT_A_RECORDED_CALL with the reason and say why in the template)",
                    grant.sid, grant.action, grant.resource
                )),
                _ => {}
            }
        }
    }
    eprintln!("IAM requests per function:\n{summary}");
    for note in &kept_but_used {
        eprintln!("note: {note}");
    }
    assert!(
        denied.is_empty() && unused.is_empty(),
        "IAM contract broken:\n\nDENIED ({}):\n{}\n\nUNUSED GRANTS ({}):\n{}\n",
        denied.len(),
        denied.join("\n"),
        unused.len(),
        unused.join("\n")
    );
}

/// What the register role and the profile table's own policies refuse, whatever else
/// IAM grants: the buyer rows to any role but the register function's and
/// `ProfileAccessRoleArn`, every request without TLS, a profile write naming an
/// attribute outside the allowlist, and reading a subscriber row back.
#[test]
fn buyer_profiles_are_closed_to_every_other_principal_and_the_register_role_reads_nothing_back() {
    const ACCESS_ROLE: &str = "arn:aws:iam::123456789012:role/pii-reader";
    const DEPLOYER_ROLE: &str = "arn:aws:iam::123456789012:role/awsmp-cfn";
    let main = StackTemplate::load(
        &workspace_root().join("template-main.yaml"),
        &[
            ("ProductCode", PRODUCT),
            ("StageName", STAGE),
            ("AWS::Region", MAIN_REGION),
            ("ProfileAccessRoleArn", ACCESS_ROLE),
            ("DeployerRoleArn", DEPLOYER_ROLE),
        ],
    )
    .unwrap();
    let policies = resource_policies(&main).unwrap();
    let table = main.attribute("CustomerProfileTable", "Arn").unwrap();
    let key = main.attribute("CustomerProfileKey", "Arn").unwrap();
    let register_role = main.attribute("RegisterRole", "Arn").unwrap();
    let register = function_wiring(&main, "register").unwrap().policy;
    // A developer or CI role with every permission IAM can give.
    let everything = awsmp_local_aws::Policy::from_yaml(
        "Statement: [{Effect: Allow, Action: \"*\", Resource: \"*\"}]",
    )
    .unwrap();
    let developer = "arn:aws:iam::123456789012:role/developer";
    let request = |action: &str, resource: &str| Authorization::new(action, resource);

    for action in [
        "dynamodb:GetItem",
        "dynamodb:Scan",
        "dynamodb:ExportTableToPointInTime",
    ] {
        assert!(
            matches!(
                decide(&everything, &policies, developer, &request(action, &table)),
                Decision::ExplicitDeny { .. }
            ),
            "{action} by a role with AdministratorAccess must be denied by the table's policy"
        );
        assert!(
            decide(
                &everything,
                &policies,
                ACCESS_ROLE,
                &request(action, &table)
            )
            .is_allowed(),
            "{action} by ProfileAccessRoleArn (with IAM permissions) must be allowed"
        );
    }
    assert!(
        !decide(
            &everything,
            &policies,
            developer,
            &Authorization::via("kms:Decrypt", &key, "dynamodb")
        )
        .is_allowed(),
        "the profile key must not let a role with AdministratorAccess decrypt"
    );
    assert!(
        decide(
            &everything,
            &policies,
            ACCESS_ROLE,
            &Authorization::via("kms:Decrypt", &key, "dynamodb")
        )
        .is_allowed()
    );
    // The deployer selects the key for the table, through DynamoDB only.
    assert!(
        decide(
            &everything,
            &policies,
            DEPLOYER_ROLE,
            &Authorization::via("kms:CreateGrant", &key, "dynamodb")
        )
        .is_allowed()
    );
    let direct = Context::new()
        .with("aws:PrincipalArn", [DEPLOYER_ROLE])
        .with("kms:CallerAccount", ["123456789012"]);
    let key_policy = &policies.iter().find(|p| p.arn == key).unwrap().policy;
    assert!(
        !key_decision(
            key_policy,
            &everything,
            DEPLOYER_ROLE,
            "kms:Decrypt",
            &key,
            &direct
        )
        .is_allowed(),
        "the deployer may not decrypt with the profile key outside DynamoDB"
    );
    // Table management stays with IAM.
    assert!(
        decide(
            &everything,
            &policies,
            developer,
            &request("dynamodb:DescribeTable", &table)
        )
        .is_allowed()
    );
    // Without TLS even the register function is refused.
    let mut write = request("dynamodb:UpdateItem", &table);
    write.attributes = [
        "licenseArn",
        "customerAWSAccountId",
        "productCode",
        "createdAt",
        "updatedAt",
    ]
    .map(str::to_string)
    .to_vec();
    assert!(decide(&register, &policies, &register_role, &write).is_allowed());
    let plain = Context::new()
        .with("aws:SecureTransport", ["false"])
        .with("aws:PrincipalArn", [register_role.clone()]);
    let table_policy = policies.iter().find(|p| p.governs(&table)).unwrap();
    assert!(matches!(
        table_policy
            .policy
            .evaluate_for(&register_role, "dynamodb:UpdateItem", &table, &plain),
        Decision::ExplicitDeny { .. }
    ));
    // An attribute outside the allowlist, or the old row back: refused by the role.
    let mut extra = write.clone();
    extra.attributes.push("isAdmin".to_string());
    assert!(!decide(&register, &policies, &register_role, &extra).is_allowed());
    let mut read_back = write.clone();
    read_back.return_values = Some("ALL_OLD".to_string());
    assert!(!decide(&register, &policies, &register_role, &read_back).is_allowed());
    let subscribers = format!(
        "arn:aws:dynamodb:{SUBSCRIBERS_REGION}:123456789012:table/awsmp-subscribers-{STAGE}"
    );
    let mut add_region = request("dynamodb:UpdateItem", &subscribers);
    add_region.attributes = [
        "licenseArn",
        "customerAWSAccountId",
        "registeredRegions",
        "updatedAt",
    ]
    .map(str::to_string)
    .to_vec();
    assert!(decide(&register, &policies, &register_role, &add_region).is_allowed());
    for returned in ["ALL_NEW", "ALL_OLD", "UPDATED_OLD", "UPDATED_NEW"] {
        let mut read_back = add_region.clone();
        read_back.return_values = Some(returned.to_string());
        assert!(
            !decide(&register, &policies, &register_role, &read_back).is_allowed(),
            "the register role must not read a subscriber row back (ReturnValues {returned})"
        );
    }
}

/// Only the Marketplace events rule (and `EventsQueueAdminRoleArn`) may put a message
/// on the subscription queue, and only the rule (its dead-letter deliveries) on its DLQ,
/// whose depth alarm says redrive: a role with every SQS permission cannot forge a
/// lifecycle event in either, nor can another rule, and nothing reaches them without TLS.
#[test]
fn only_the_marketplace_rule_can_put_a_lifecycle_event_on_the_subscription_queue() {
    const ADMIN: &str = "arn:aws:iam::123456789012:role/queue-admin";
    let everything = awsmp_local_aws::Policy::from_yaml(
        "Statement: [{Effect: Allow, Action: \"*\", Resource: \"*\"}]",
    )
    .unwrap();
    for admin in [None, Some(ADMIN)] {
        let mut parameters = vec![("StageName", STAGE), ("AWS::Region", SUBSCRIBERS_REGION)];
        parameters.extend(admin.map(|a| ("EventsQueueAdminRoleArn", a)));
        let events =
            StackTemplate::load(&workspace_root().join("template-events.yaml"), &parameters)
                .unwrap();
        let policies = resource_policies(&events).unwrap();
        let rule = events.attribute("MarketplaceEventsRule", "Arn").unwrap();
        for (logical, admin_sends) in [
            ("SubscriptionEventsQueue", admin.is_some()),
            ("SubscriptionEventsDlq", false),
        ] {
            let queue = events.attribute(logical, "Arn").unwrap();
            let queue_policy = policies
                .iter()
                .find(|p| p.governs(&queue))
                .unwrap_or_else(|| panic!("{logical} has a queue policy"));
            let send = |who: &str, identity: &awsmp_local_aws::Policy, context: Context| {
                identity
                    .evaluate_in("sqs:SendMessage", &queue, &context)
                    .with_resource_policy(queue_policy.policy.evaluate_for(
                        who,
                        "sqs:SendMessage",
                        &queue,
                        &context,
                    ))
            };
            let tls = |who: &str| {
                Context::new()
                    .with("aws:SecureTransport", ["true"])
                    .with("aws:PrincipalArn", [who])
            };
            let none = awsmp_local_aws::Policy::default();
            // The rule, through EventBridge (a delivery, or a dead-letter one).
            let from_rule = tls("events.amazonaws.com").with("aws:SourceArn", [rule.clone()]);
            assert!(
                send("events.amazonaws.com", &none, from_rule).is_allowed(),
                "{logical}: the rule's delivery"
            );
            // Another rule of the account, or a role with every permission.
            let other_rule = tls("events.amazonaws.com").with(
                "aws:SourceArn",
                ["arn:aws:events:us-east-1:123456789012:rule/forged"],
            );
            assert!(
                !send("events.amazonaws.com", &none, other_rule).is_allowed(),
                "{logical}: another rule"
            );
            let developer = "arn:aws:iam::123456789012:role/developer";
            assert!(
                matches!(
                    send(developer, &everything, tls(developer)),
                    Decision::ExplicitDeny { .. }
                ),
                "{logical}: a role with every permission must be denied"
            );
            // The admin role, when named, sends to the queue (to redrive), over TLS
            // only; never to the DLQ.
            assert_eq!(
                send(ADMIN, &everything, tls(ADMIN)).is_allowed(),
                admin_sends,
                "{logical}: EventsQueueAdminRoleArn {admin:?}"
            );
            let plain = Context::new()
                .with("aws:SecureTransport", ["false"])
                .with("aws:PrincipalArn", [ADMIN]);
            assert!(!send(ADMIN, &everything, plain).is_allowed());
        }
    }
}

/// The main stack's work queues: only the discoverer sends work (a forged `flush`
/// would fold a locked hour early), only the aggregator sends cleanup, the optional
/// `WorkQueueAdminRoleArn` redrives; nobody sends to a DLQ.
#[test]
fn only_the_pipeline_roles_can_put_work_on_the_pipeline_queues() {
    const ADMIN: &str = "arn:aws:iam::123456789012:role/work-admin";
    let everything = awsmp_local_aws::Policy::from_yaml(
        "Statement: [{Effect: Allow, Action: \"*\", Resource: \"*\"}]",
    )
    .unwrap();
    for admin in [None, Some(ADMIN)] {
        let mut parameters = vec![
            ("ProductCode", PRODUCT),
            ("StageName", STAGE),
            ("AWS::Region", MAIN_REGION),
        ];
        parameters.extend(admin.map(|a| ("WorkQueueAdminRoleArn", a)));
        let main =
            StackTemplate::load(&workspace_root().join("template-main.yaml"), &parameters).unwrap();
        let policies = resource_policies(&main).unwrap();
        let discoverer = main.attribute("DiscovererRole", "Arn").unwrap();
        let aggregator = main.attribute("AggregatorRole", "Arn").unwrap();
        let developer = "arn:aws:iam::123456789012:role/developer";
        for (queue, sender) in [
            ("WorkQueue", Some(&discoverer)),
            ("DeprovisionWorkQueue", Some(&discoverer)),
            ("CleanupQueue", Some(&aggregator)),
            ("WorkDlq", None),
            ("DeprovisionWorkDlq", None),
            ("CleanupDlq", None),
        ] {
            let arn = main.attribute(queue, "Arn").unwrap();
            let sends = |who: &str| {
                decide(
                    &everything,
                    &policies,
                    who,
                    &Authorization::new("sqs:SendMessage", &arn),
                )
                .is_allowed()
            };
            for who in [&discoverer, &aggregator] {
                assert_eq!(
                    sends(who),
                    sender == Some(who),
                    "{queue}: SendMessage by {who}"
                );
            }
            assert!(
                !sends(developer),
                "{queue}: a role with every permission must not send"
            );
            assert_eq!(
                sends(ADMIN),
                admin.is_some() && sender.is_some(),
                "{queue}: SendMessage by WorkQueueAdminRoleArn {admin:?}"
            );
        }
    }
}

/// What keeps the buyer rows closed can itself be changed only by the deployer: the
/// table's resource policy (put or deleted), a backup (which restores without that
/// policy and the key), the key's policy. A role with every permission IAM can give
/// is refused all of them; `DeployerRoleArn` is not. Without a deployer role (only
/// with ProfileKey=shared: the created key requires one) only CloudFormation, calling
/// with the deployer's credentials, may change the table's policy.
#[test]
fn only_the_deployer_can_change_what_keeps_buyer_profiles_closed() {
    const DEPLOYER_ROLE: &str = "arn:aws:iam::123456789012:role/awsmp-cfn";
    let developer = "arn:aws:iam::123456789012:role/developer";
    let everything = awsmp_local_aws::Policy::from_yaml(
        "Statement: [{Effect: Allow, Action: \"*\", Resource: \"*\"}]",
    )
    .unwrap();
    let guarded = [
        "dynamodb:PutResourcePolicy",
        "dynamodb:DeleteResourcePolicy",
        "dynamodb:CreateBackup",
        "dynamodb:StartAwsBackupJob",
    ];
    for (profile_key, deployer) in [("create", Some(DEPLOYER_ROLE)), ("shared", None)] {
        let mut parameters = vec![
            ("ProductCode", PRODUCT),
            ("StageName", STAGE),
            ("AWS::Region", MAIN_REGION),
            ("ProfileKey", profile_key),
        ];
        parameters.extend(deployer.map(|d| ("DeployerRoleArn", d)));
        let main =
            StackTemplate::load(&workspace_root().join("template-main.yaml"), &parameters).unwrap();
        let policies = resource_policies(&main).unwrap();
        let table = main.attribute("CustomerProfileTable", "Arn").unwrap();
        let table_policy = &policies.iter().find(|p| p.governs(&table)).unwrap().policy;
        let decide_table = |who: &str, action: &str, context: Context| {
            everything
                .evaluate_in(action, &table, &context)
                .with_resource_policy(table_policy.evaluate_for(who, action, &table, &context))
        };
        let direct = |who: &str| {
            Context::new()
                .with("aws:PrincipalArn", [who])
                .with("aws:SecureTransport", ["true"])
        };
        for action in guarded {
            assert!(
                matches!(
                    decide_table(developer, action, direct(developer)),
                    Decision::ExplicitDeny { .. }
                ),
                "ProfileKey={profile_key}: {action} by a role with AdministratorAccess must be denied"
            );
            let via_cloudformation =
                direct(developer).with("aws:CalledVia", ["cloudformation.amazonaws.com"]);
            assert_eq!(
                decide_table(developer, action, via_cloudformation).is_allowed(),
                deployer.is_none(),
                "ProfileKey={profile_key}: {action} through CloudFormation by another role \
                 (allowed only without DeployerRoleArn)"
            );
            if let Some(deployer) = deployer {
                assert!(
                    decide_table(deployer, action, direct(deployer)).is_allowed(),
                    "{action} by DeployerRoleArn"
                );
            }
        }
        if let Some(deployer) = deployer {
            let key = main.attribute("CustomerProfileKey", "Arn").unwrap();
            let key_policy = &policies.iter().find(|p| p.arn == key).unwrap().policy;
            let put = |who: &str| {
                key_decision(
                    key_policy,
                    &everything,
                    who,
                    "kms:PutKeyPolicy",
                    &key,
                    &direct(who),
                )
                .is_allowed()
            };
            assert!(
                !put(developer),
                "kms:PutKeyPolicy on the profile key by a role with AdministratorAccess"
            );
            assert!(put(deployer), "kms:PutKeyPolicy by DeployerRoleArn");
        }
    }
}

/// Only an outcome-events role may put `source: awsmp.metering` on the default bus (the
/// bus policy statement the main stack adds): a role with every permission cannot forge
/// an outcome a consumer would move money on, and may still put its own sources.
#[test]
fn only_the_outcome_events_role_can_put_the_products_source_on_the_default_bus() {
    let everything = awsmp_local_aws::Policy::from_yaml(
        "Statement: [{Effect: Allow, Action: \"*\", Resource: \"*\"}]",
    )
    .unwrap();
    let main = StackTemplate::load(
        &workspace_root().join("template-main.yaml"),
        &[
            ("ProductCode", PRODUCT),
            ("StageName", STAGE),
            ("AWS::Region", MAIN_REGION),
            ("OutcomeEvents", "enabled"),
        ],
    )
    .unwrap();
    let policies = resource_policies(&main).unwrap();
    let bus = format!("arn:aws:events:{MAIN_REGION}:{DEFAULT_ACCOUNT}:event-bus/default");
    let bus_policy = &policies
        .iter()
        .find(|p| p.governs(&bus))
        .expect("the main stack adds a statement to the default bus's policy")
        .policy;
    let outcome_role = main.attribute("OutcomeEventsRole", "Arn").unwrap();
    let put = |who: &str, source: &str| {
        let context = Context::new()
            .with("aws:PrincipalArn", [who])
            .with("events:source", [source]);
        everything
            .evaluate_in("events:PutEvents", &bus, &context)
            .with_resource_policy(bus_policy.evaluate_for(who, "events:PutEvents", &bus, &context))
    };
    let developer = "arn:aws:iam::123456789012:role/developer";
    assert!(matches!(
        put(developer, "awsmp.metering"),
        Decision::ExplicitDeny { .. }
    ));
    assert!(put(developer, "my.app").is_allowed());
    assert!(
        put(&outcome_role, "awsmp.metering").is_allowed(),
        "{outcome_role} must put awsmp.metering"
    );
}

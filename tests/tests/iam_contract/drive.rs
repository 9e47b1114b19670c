//! Driving every function end to end on the local stack with its calls recorded:
//! the subscription events, a registration, a metering run with its flush, late usage,
//! age-out, deprovision-cleanup, the outcome events and the buyer events, as the
//! contract evaluates them.

use super::*;

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
    let (path, query) = path.split_once('?').unwrap_or((path, ""));
    request.path = Some(path.to_string());
    if let Some(body) = body {
        request
            .headers
            .insert("content-type", "application/json".parse().unwrap());
        request.body = Some(body.to_string());
    }
    let mut parameters: std::collections::HashMap<String, String> = query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    if let Some(license_arn) = license_arn {
        parameters.insert("licenseArn".to_string(), license_arn.to_string());
    }
    request.query_string_parameters = parameters.into();
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
pub(crate) async fn drive_every_function() -> Stack {
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
    // The staying buyer's agreement is in the Agreement API: its License Updated is
    // followed by its rate card (DescribeAgreement, GetAgreementTerms). It is filed
    // under another product id than the one the reconciliation below searches.
    stack
        .sim
        .handle()
        .seed_agreement(awsmp_e2e::agreement_seed(
            &format!("agmt-{}", &staying[staying.len() - 4..]),
            &staying,
            ACCOUNT_A,
            (PRODUCT, "prod-e2estaying"),
            stack.now() - chrono::Duration::days(1),
        ))
        .unwrap();
    deliver_events(&stack, events).await;
    assert!(
        stack
            .subscribers
            .get(&staying, ACCOUNT_A)
            .await
            .unwrap()
            .and_then(|row| row
                .current_rate_card()
                .map(|card| card.agreement_id.clone()))
            .is_some(),
        "License Updated keeps the buyer's rate card"
    );

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
    // The entitlement answer: GetItem with the buyer account, Query on the license
    // without it, both on the subscribers table in its own Region.
    let encoded = staying.replace(':', "%3A").replace('/', "%2F");
    let by_license = call_usage_api(
        &api,
        "GET",
        &format!("/subscriptions/{encoded}"),
        None,
        None,
    )
    .await;
    assert_eq!(by_license["usage"], "billed", "{by_license}");
    let by_account = call_usage_api(
        &api,
        "GET",
        &format!("/subscriptions/{encoded}?customerAWSAccountId={ACCOUNT_A}"),
        None,
        None,
    )
    .await;
    assert_eq!(
        by_account["customerAWSAccountId"], ACCOUNT_A,
        "{by_account}"
    );

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
    run_agreement_reconcile(&stack).await;
    // The buyer events of every subscribers row, as its stream tells them.
    publish_buyer_events(&stack).await;
    stack
}

/// Plays agreement-reconcile as `LocalStack::connect` builds it: Marketplace holds an
/// active agreement for a license whose License Updated never arrived, so the run
/// searches the agreements, reads the row, writes the repair, then reads the
/// agreement's terms and keeps its rate card on the row.
async fn run_agreement_reconcile(stack: &Stack) {
    let lost = license(6);
    let start = stack.now() - chrono::Duration::days(1);
    stack
        .sim
        .handle()
        .seed_agreement(awsmp_e2e::agreement_seed(
            "agmt-lost",
            &lost,
            ACCOUNT_A,
            (PRODUCT, "prod-e2eagreements"),
            start,
        ))
        .unwrap();
    let mut state = stack
        .connect(
            &stack.events,
            "agreement-reconcile",
            &BTreeMap::new(),
            awsmp_agreement_reconcile::Config::from_lookup,
            awsmp_agreement_reconcile::State::connect,
        )
        .unwrap();
    state.clock = Arc::new(stack.clock.clone());
    let event = scheduled_event("awsmp-agreement-reconcile", stack.now()).unwrap();
    let report = awsmp_agreement_reconcile::handler(&state, event)
        .await
        .unwrap();
    assert_eq!(report.repaired(), 1, "{report:?}");
    assert_eq!(report.rate_cards.refreshed, 1, "{report:?}");
    let row = stack
        .subscribers
        .get(&lost, ACCOUNT_A)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.subscription_status, Some(SubscriptionStatus::Active));
    assert_eq!(
        row.current_rate_card()
            .map(|card| card.agreement_id.as_str()),
        Some("agmt-lost")
    );
}

/// Every item of `table` (scanned on `client`) as a stream record's image carries it:
/// DynamoDB's attribute-value JSON (the rate card's map included).
async fn stream_images(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
) -> Vec<serde_json::Map<String, serde_json::Value>> {
    let items = client
        .scan()
        .table_name(table)
        .send()
        .await
        .unwrap()
        .items
        .unwrap_or_default();
    items
        .iter()
        .map(|item| {
            item.iter()
                .map(|(k, v)| {
                    let value =
                        awsmp_lambda::stream::dynamodb_json(&awsmp_aws::item::attr_from_dynamo(v));
                    (k.clone(), value)
                })
                .collect()
        })
        .collect()
}

/// Plays the buyer-events function on a stream batch built from the subscribers
/// table's rows, each as its insert (its calls recorded), and checks the bus took
/// every event.
async fn publish_buyer_events(stack: &Stack) {
    let state = stack.buyer_events().unwrap();
    let table = stack.events.tables.get("SubscribersTable").unwrap();
    let stream_arn = stack
        .events
        .attribute("SubscribersTable", "StreamArn")
        .unwrap();
    let dynamodb = aws_sdk_dynamodb::Client::new(&stack.moto.sdk_config_in(SUBSCRIBERS_REGION));
    let records: Vec<serde_json::Value> = stream_images(&dynamodb, table)
        .await
        .into_iter()
        .enumerate()
        .map(|(i, image)| {
            serde_json::json!({
                "eventID": format!("iam-buyer-{i}"),
                "eventName": "INSERT",
                "eventSourceARN": stream_arn,
                "dynamodb": {"SequenceNumber": format!("{}", 2000 + i), "NewImage": image},
            })
        })
        .collect();
    assert!(!records.is_empty(), "the subscribers table has no row");
    deliver_stream(records, "buyer events", |event| {
        awsmp_buyer_events::handler(&state, event)
    })
    .await;
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
    let records: Vec<serde_json::Value> = stream_images(&stack.dynamodb, table)
        .await
        .into_iter()
        .enumerate()
        .filter_map(|(i, image)| {
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
    deliver_stream(records, "outcome events", |event| {
        awsmp_outcome_events::handler(&state, event)
    })
    .await;
}

/// Hands `records` to a stream function's `handler` as one batch, as its mapping would,
/// and checks the bus took every event (`what`).
async fn deliver_stream<F>(
    records: Vec<serde_json::Value>,
    what: &str,
    handler: impl FnOnce(lambda_runtime::LambdaEvent<awsmp_lambda::stream::StreamEvent>) -> F,
) where
    F: std::future::Future<
            Output = Result<
                aws_lambda_events::streams::DynamoDbEventResponse,
                std::convert::Infallible,
            >,
        >,
{
    let event = serde_json::from_value(serde_json::json!({ "Records": records })).unwrap();
    let response = handler(lambda_runtime::LambdaEvent::new(
        event,
        lambda_runtime::Context::default(),
    ))
    .await
    .unwrap();
    assert!(
        response.batch_item_failures.is_empty(),
        "the bus refused {what}: {:?}",
        response.batch_item_failures
    );
}

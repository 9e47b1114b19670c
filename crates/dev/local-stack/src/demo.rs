//! The scripted buyer lifecycle `awsmp local up` drives: subscribe, register through
//! the page's endpoints, post usage to the usage API, meter, deprovision, final flush,
//! inactive, ask the usage API whether each buyer is still billed; then a summary of what happened to every row and what was billed, checked against the
//! conservation invariant.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use aws_sdk_dynamodb::types::AttributeValue;
use awsmp_core::time::{HourBucket, Instant, format_instant};
use awsmp_marketplace_sim::AgreementSeed;
use awsmp_marketplace_sim::model::{ProductSeed, TokenSeed};
use chrono::Duration;

use crate::LocalError;
use crate::system::{LOCAL_PRODUCT_CODE, LOCAL_PRODUCT_ID, LocalSystem};

/// The demo buyer's account (holds two licenses).
pub const BUYER_ACCOUNT: &str = "111122223333";
/// The license that is later deprovisioned.
pub const LICENSE_A: &str =
    "arn:aws:license-manager::123456789012:license:l-0a1b2c3d4e5f60718293a4b5c6d7e8f9";
/// A second, concurrent license of the same account.
pub const LICENSE_B: &str =
    "arn:aws:license-manager::123456789012:license:l-1f2e3d4c5b6a79807162534a5b6c7d8e";
/// Dimensions of the local product.
pub const DIMENSIONS: [&str; 2] = ["requests", "storage_gb"];

/// A Marketplace lifecycle event (`detail_type`) of `license` under `agreement` at `time`,
/// for the demo buyer, as EventBridge delivers it to the events stack.
pub fn lifecycle_event(
    detail_type: &str,
    license: &str,
    agreement: &str,
    time: Instant,
) -> serde_json::Value {
    serde_json::json!({
        "version": "0",
        "id": format!("local-{}-{}", detail_type.replace(' ', "-"), time.timestamp()),
        "detail-type": detail_type,
        "source": "aws.agreement-marketplace",
        "account": "123456789012",
        "time": format_instant(time),
        "region": "us-east-1",
        "resources": [format!("arn:aws:aws-marketplace::aws:agreement:{agreement}")],
        "detail": {
            "requestId": "local",
            "catalog": "AWSMarketplace",
            "agreement": {"id": agreement},
            "product": {"code": LOCAL_PRODUCT_CODE, "id": LOCAL_PRODUCT_ID},
            "license": {"arn": license},
            "acceptor": {"accountId": BUYER_ACCOUNT},
            "proposer": {"accountId": "123456789012"},
            "offer": {"id": "offer-localdemo"}
        }
    })
}

/// Sends a lifecycle event of `license` at the system's time: the simulator applies it
/// as Marketplace would, and it is put on the events stack's bus.
async fn send_lifecycle_event(
    system: &LocalSystem,
    detail_type: &str,
    license: &str,
    agreement: &str,
) -> Result<(), LocalError> {
    let event = lifecycle_event(detail_type, license, agreement, system.now);
    system
        .sim
        .handle()
        .apply_lifecycle_event(&event)
        .map_err(|e| LocalError::Setup(format!("simulator lifecycle: {e}")))?;
    system.put_marketplace_event(&event).await
}

/// What the demo buyers' agreements price each dimension at (USD).
const PRICES: [(&str, &str); 2] = [("requests", "0.0025"), ("storage_gb", "0.50")];

/// The demo buyer's agreement `agreement` on `license`: pay-as-you-go, priced at
/// [`PRICES`].
fn demo_agreement(
    license: &str,
    agreement: &str,
    start: Instant,
) -> Result<AgreementSeed, awsmp_marketplace_sim::AdminError> {
    AgreementSeed::active(
        agreement,
        license,
        BUYER_ACCOUNT,
        (LOCAL_PRODUCT_CODE, LOCAL_PRODUCT_ID),
        start,
        "offer-localdemo",
    )
    .priced(&PRICES)
}

fn say(system: &LocalSystem, text: &str) {
    println!("[{}] {text}", format_instant(system.now));
}

/// Runs the whole lifecycle; returns the summary text, or the check that failed.
pub async fn run(system: &mut LocalSystem) -> Result<String, LocalError> {
    let step = Duration::minutes(5);
    let hour0 = HourBucket::containing(system.now);
    let at = |minutes: i64| hour0.start() + Duration::minutes(minutes);
    system
        .sim
        .handle()
        .seed_product(ProductSeed {
            product_code: LOCAL_PRODUCT_CODE.into(),
            dimensions: DIMENSIONS.iter().map(|d| d.to_string()).collect(),
        })
        .map_err(|e| LocalError::Setup(format!("seeding the simulator: {e}")))?;
    // The buyer's agreements and their rate card, as the Agreement API answers them
    // (the report's estimated charges, the agreement reconciliation).
    for (license, agreement) in [
        (LICENSE_A, "agmt-localdemoa"),
        (LICENSE_B, "agmt-localdemob"),
    ] {
        demo_agreement(license, agreement, hour0.start())
            .and_then(|seed| system.sim.handle().seed_agreement(seed))
            .map_err(|e| LocalError::Setup(format!("seeding the simulator: {e}")))?;
    }

    // 1. Subscribe: License Updated reaches the subscription function and Marketplace.
    for (license, agreement) in [
        (LICENSE_A, "agmt-localdemoa"),
        (LICENSE_B, "agmt-localdemob"),
    ] {
        send_lifecycle_event(system, "License Updated - Manufacturer", license, agreement).await?;
    }
    system.drain(50).await?;
    say(
        system,
        "buyer subscribed: License Updated for two licenses of one account",
    );
    // Each License Updated was followed by its buyer's rate card, read from the
    // Agreement API by the subscription function: priced from the first hour.
    let cards = kept_rate_cards(system, true).await?;
    say(
        system,
        &format!("rate cards kept when License Updated was handled: {cards}"),
    );

    // 2. Register through the fulfillment endpoint, as the buyer's browser would.
    register(system).await?;
    say(
        system,
        "buyer registered through /fulfillment and /register",
    );

    // 3. Usage in the current hour, including two events in the same second, sent
    //    through the usage API as a seller's service in any language would; the batch
    //    sent again (a client retrying after a timeout) writes nothing. Then one bad
    //    row, as a seller's own buggy writer would store it.
    let events: Vec<serde_json::Value> = [
        (LICENSE_A, "requests", 10, 10, "evt-a1"),
        (LICENSE_A, "requests", 20, 20, "evt-a2"),
        (LICENSE_A, "requests", 20, 12, "evt-a3"),
        (LICENSE_A, "storage_gb", 25, 5, "evt-a4"),
        (LICENSE_B, "requests", 30, 7, "evt-b1"),
        (LICENSE_B, "requests", 40, 8, "evt-b2"),
    ]
    .into_iter()
    .map(|(license, dimension, minute, quantity, id)| {
        serde_json::json!({
            "id": id,
            "licenseArn": license,
            "customerAWSAccountId": BUYER_ACCOUNT,
            "dimension": dimension,
            "quantity": quantity,
            "timestamp": format_instant(at(minute)),
        })
    })
    .collect();
    // Sent once the hour's events have happened (the API refuses a future instant).
    system.advance(at(45), step).await?;
    let unsigned =
        crate::usage_api::post_unsigned(system, &serde_json::json!({ "events": events })).await?;
    if unsigned != 403 {
        return Err(LocalError::Check(format!(
            "an unsigned POST /usage/events answered {unsigned}, expected 403 (no unauthenticated mode)"
        )));
    }
    expect_verdicts(system, &events, "accepted").await?;
    expect_verdicts(system, &events, "duplicate").await?;
    // A Python service (botocore's signer) sending one of them again: a duplicate.
    let resent = serde_json::Value::Array(events[4..5].to_vec());
    let answer = crate::usage_api::post_with_python_client(system, &system.root, &resent)?;
    if answer["results"][0]["status"] != "duplicate" {
        return Err(LocalError::Check(format!(
            "examples/usage-api/post_usage.py resent evt-b1: expected duplicate, got {answer}"
        )));
    }
    // A Node.js service (the AWS SDK's signer) sending another one again: a duplicate.
    // Required where AWSMP_DEMO_NODE_CLIENT=require (make test); otherwise run when
    // `node` is installed, since ./deploy.sh --local needs no Node.js.
    let node_required = std::env::var("AWSMP_DEMO_NODE_CLIENT").as_deref() == Ok("require");
    let node_present = std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let node_line = if node_required || node_present {
        let resent = serde_json::Value::Array(events[5..6].to_vec());
        let answer = crate::usage_api::post_with_node_client(system, &system.root, &resent)?;
        if answer["results"][0]["status"] != "duplicate" {
            return Err(LocalError::Check(format!(
                "examples/usage-api/node/post_usage.mjs resent evt-b2: expected duplicate, got {answer}"
            )));
        }
        "evt-b1 resent by the Python client and evt-b2 by the Node client, both duplicate"
    } else {
        "evt-b1 resent by the Python client duplicate (the Node client skipped: no node on PATH)"
    };
    put_bad_row(system, at(45)).await?;
    say(
        system,
        &format!(
            "usage posted to /usage/events (SigV4; unsigned refused 403): 6 events accepted (two in the same second), the retried batch all duplicate, {node_line}; plus 1 malformed row"
        ),
    );

    // 4. Let the hour complete and the schedules meter it (15-minute steps: the
    //    discoverer's rate; the submitter's 1-minute rate fires at each step).
    let coarse = Duration::minutes(15);
    system.advance(at(95), coarse).await?;
    say(
        system,
        "hour metered by discoverer -> aggregator -> cleanup -> submitter",
    );

    // 5. Deprovision license A; its final-usage window closes an hour later.
    let deprovisioned_at = at(105);
    system.advance(deprovisioned_at, step).await?;
    send_lifecycle_event(
        system,
        "License Deprovisioned - Manufacturer",
        LICENSE_A,
        "agmt-localdemoa",
    )
    .await?;
    system.drain(50).await?;
    say(
        system,
        "License Deprovisioned: final-usage window open for one hour",
    );

    // 6. Trailing usage in the hour the window closes in, which is still open.
    system.advance(at(120), step).await?;
    let trailing = serde_json::json!({
        "id": "evt-a5",
        "licenseArn": LICENSE_A,
        "customerAWSAccountId": BUYER_ACCOUNT,
        "dimension": "requests",
        "quantity": 4,
    });
    expect_verdicts(system, &[trailing], "accepted").await?;
    say(
        system,
        "trailing usage posted in the still-open hour (no timestamp: when received)",
    );

    // 7. The flush meters the open hour before the window closes (5-minute steps so
    //    the submitter runs inside the window); then deprovision-cleanup goes inactive.
    system
        .advance(deprovisioned_at + Duration::minutes(65), step)
        .await?;
    say(system, "final flush submitted before the window closed");
    system
        .advance(deprovisioned_at + Duration::minutes(80), coarse)
        .await?;
    say(system, "deprovision-cleanup closed the subscription");

    // 8. The seller's service reads an event's fate back by its id.
    let (status, fate) = crate::usage_api::get_event(system, "evt-a1", LICENSE_A).await?;
    let record = &fate["fate"]["record"];
    if status != 200
        || record["meteringStatus"] != "Success"
        || record["meteringRecordId"].is_null()
    {
        return Err(LocalError::Check(format!(
            "GET /usage/events/evt-a1 answered {status}: {fate}, expected its record billed"
        )));
    }
    // What the record is worth: its quantity x the agreement's requests price
    // (0.0025), exact: in ten-thousandths, written out without trailing zeros.
    let worth = record["quantity"].as_i64().map(|q| {
        let tenths_of_mills = q * 25;
        let text = format!(
            "{}.{:04}",
            tenths_of_mills / 10_000,
            tenths_of_mills % 10_000
        );
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    });
    let charge = &record["estimatedCharge"];
    if charge["basis"] != "priced"
        || charge["currency"] != "USD"
        || charge["amount"].as_str().map(str::to_string) != worth
    {
        return Err(LocalError::Check(format!(
            "GET /usage/events/evt-a1 says its record is worth {charge}, expected {worth:?} USD (its quantity x 0.0025)"
        )));
    }
    say(
        system,
        &format!(
            "GET /usage/events/evt-a1: counted into {} {}, Success, meteringRecordId {}, worth {} USD (estimated from the buyer's agreement terms)",
            record["hourBucket"].as_str().unwrap_or("?"),
            fate["usage"]["dimension"].as_str().unwrap_or("?"),
            record["meteringRecordId"].as_str().unwrap_or("?"),
            charge["amount"].as_str().unwrap_or("?"),
        ),
    );

    // 9. The seller's service asks whether each buyer is entitled: A's window has
    //    closed (usage written now is never billed), B is still billed.
    let mut told = Vec::new();
    for (license, name, want) in [(LICENSE_A, "A", "notBilled"), (LICENSE_B, "B", "billed")] {
        let (status, answer) = crate::usage_api::get_subscription(system, license).await?;
        if status != 200 || answer["usage"] != want {
            return Err(LocalError::Check(format!(
                "GET /subscriptions for license {name} answered {status}: {answer}, expected usage {want}"
            )));
        }
        told.push(format!(
            "{name} {} ({})",
            answer["subscriptionStatus"].as_str().unwrap_or("?"),
            want
        ));
    }
    say(
        system,
        &format!("GET /subscriptions: license {}", told.join(", license ")),
    );

    // 10. Every outcome reached the seller's rule on the default bus, once.
    let line = check_outcome_events(system).await?;
    say(system, &line);

    // 11. The buyer's lifecycle reached the seller's rule too: what a provisioning
    //     system would act on.
    for line in check_buyer_events(system).await? {
        say(system, &line);
    }

    // 12. The agreement reconciliation kept each buyer's rate card on its row: what
    //     the estimates price with, and what the discoverer held each dimension to
    //     before billing it (every dimension here is priced: no UnpricedUsage).
    let line = check_rate_cards(system).await?;
    say(system, &line);

    summary(system).await
}

/// Each buyer's rate card, as kept on its subscribers row by the agreement
/// reconciliation (which read each once more, learning its agreement's
/// `lastUpdateTime`), and no unpriced dimension counted.
async fn check_rate_cards(system: &LocalSystem) -> Result<String, LocalError> {
    let told = kept_rate_cards(system, false).await?;
    let metrics = metric_counts(&system.metrics_log);
    for name in ["UnpricedUsage", "UnpricedUsageUnchecked"] {
        if let Some(count) = metrics.get(name).filter(|c| **c > 0) {
            return Err(LocalError::Check(format!(
                "the discoverer counted {count} {name}, yet every dimension metered is priced and every row readable"
            )));
        }
    }
    Ok(format!(
        "rate cards kept on the subscribers rows by the agreement reconciliation: {told}; the discoverer found no unpriced dimension before billing"
    ))
}

/// Each buyer's rate card on its subscribers row, checked to be of the buyer's
/// agreement and to price every dimension the demo meters; `at_activation`: read
/// after License Updated (it knows no `lastUpdateTime`), else by the reconciliation.
async fn kept_rate_cards(system: &LocalSystem, at_activation: bool) -> Result<String, LocalError> {
    use awsmp_core::ports::SubscriberStore;
    let store = awsmp_aws::DynamoSubscriberStore::new(
        system.dynamodb.clone(),
        system.table("SubscribersTable")?,
    );
    let mut told = Vec::new();
    for (license, name, agreement) in [
        (LICENSE_A, "A", "agmt-localdemoa"),
        (LICENSE_B, "B", "agmt-localdemob"),
    ] {
        let row = store
            .get(license, BUYER_ACCOUNT)
            .await
            .map_err(|e| LocalError::Check(format!("reading license {name}'s row: {e}")))?;
        let kept_by = if at_activation {
            "the subscription function did not keep it after License Updated"
        } else {
            "the agreement reconciliation did not keep it"
        };
        let Some(card) = row.as_ref().and_then(|r| r.current_rate_card()) else {
            return Err(LocalError::Check(format!(
                "license {name}'s row holds no rate card of {agreement}: {kept_by}"
            )));
        };
        let read_on_event = row
            .as_ref()
            .and_then(|r| r.rate_card.as_ref())
            .is_some_and(|stored| stored.agreement_updated_at.is_none());
        if read_on_event != at_activation {
            return Err(LocalError::Check(format!(
                "license {name}'s rate card: {kept_by}"
            )));
        }
        let currency = card.terms.currency.clone().unwrap_or_default();
        let prices: Vec<String> = DIMENSIONS
            .iter()
            .map(|d| match card.terms.rate_card.get(*d) {
                Some(price) => Ok(format!("{d} {} {currency}", price.normalize())),
                None => Err(LocalError::Check(format!(
                    "license {name}'s rate card does not price {d}"
                ))),
            })
            .collect::<Result<_, _>>()?;
        told.push(format!(
            "{name} {} ({})",
            card.agreement_id,
            prices.join(", ")
        ));
    }
    Ok(told.join("; "))
}

/// The buyer lifecycle events the local rule caught, in order, one line each; checks
/// that license A's story was told (subscribed, registered, deprovisioning until its
/// window's end, inactive) and license B's subscription, each event once.
async fn check_buyer_events(system: &LocalSystem) -> Result<Vec<String>, LocalError> {
    use awsmp_core::lifecycle::buyer_events::SOURCE;
    let events = system.take_buyer_events().await?;
    if events.is_empty() {
        return Ok(vec!["buyer events are disabled in this stack".into()]);
    }
    let mut told: Vec<(String, String)> = Vec::new();
    let mut lines = Vec::new();
    let mut ids = std::collections::BTreeSet::new();
    for event in &events {
        let d = &event["detail"];
        let kind = event["detail-type"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let license = d["licenseArn"].as_str().unwrap_or_default().to_string();
        if event["source"] != SOURCE || !ids.insert(d["eventId"].to_string()) {
            return Err(LocalError::Check(format!(
                "a buyer event from another source, or told twice: {event}"
            )));
        }
        let until = d["billedUntil"]
            .as_str()
            .map(|u| format!(", billed until {u}"))
            .unwrap_or_default();
        // A registration tells the form's field names, never what the buyer typed.
        let text = event.to_string();
        if text.contains("Example Corp") || text.contains("ops@example.com") {
            return Err(LocalError::Check(format!(
                "a buyer event carries what the buyer typed into the form: {event}"
            )));
        }
        let fields = d["formFields"]
            .as_array()
            .map(|names| {
                let names: Vec<&str> = names.iter().filter_map(|n| n.as_str()).collect();
                format!(
                    ", registration {} (form fields {}, names only)",
                    d["registrationCount"],
                    names.join(", ")
                )
            })
            .unwrap_or_default();
        lines.push(format!(
            "buyer event {kind}: license {}{until}{fields}",
            short(&license)
        ));
        told.push((license, kind));
    }
    for (license, kind) in [
        (LICENSE_A, "Buyer Subscribed"),
        (LICENSE_A, "Buyer Registered"),
        (LICENSE_A, "Buyer Deprovisioning"),
        (LICENSE_A, "Buyer Inactive"),
        (LICENSE_B, "Buyer Subscribed"),
    ] {
        if !told.iter().any(|(l, k)| l == license && k == kind) {
            return Err(LocalError::Check(format!(
                "no {kind} event for license {} on the default bus: {lines:?}",
                short(license)
            )));
        }
    }
    Ok(lines)
}

/// Checks the outcome events the local rule caught against the tables: one `Usage
/// Record Outcome` per aggregated record in a terminal status and one `Usage Row Not
/// Billed` per raw row rejected or aged out, each exactly once, with the status the
/// table holds. Without outcome events in the stack, says so.
async fn check_outcome_events(system: &LocalSystem) -> Result<String, LocalError> {
    if system.outcome_queue.is_none() {
        return Ok("outcome events are disabled in this stack".into());
    }
    use awsmp_core::outcomes::{RECORD_OUTCOME, ROW_NOT_BILLED, SOURCE, Table};
    let mut expected: Vec<(String, String, String)> = Vec::new();
    let mut records = 0;
    for (logical_id, table, sort_key) in [
        (
            "AggregatedUsageTable",
            Table::Aggregated,
            "account_dimension_hour",
        ),
        (
            "UsageTable",
            Table::Usage,
            "customerAWSAccountId_dimension_timestamp",
        ),
    ] {
        for item in scan(system, system.table(logical_id)?).await? {
            let status = item.get("meteringStatus").cloned().unwrap_or_default();
            if table.told_statuses().contains(&status.as_str()) {
                let text = |name: &str| item.get(name).cloned().unwrap_or_default();
                expected.push((text("licenseArn"), text(sort_key), status));
                records += usize::from(table == Table::Aggregated);
            }
        }
    }
    let mut got: Vec<(String, String, String)> = Vec::new();
    let mut worth = rust_decimal::Decimal::ZERO;
    for event in system.take_outcome_events().await? {
        let d = &event["detail"];
        let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
        if event["source"] != SOURCE {
            return Err(LocalError::Check(format!(
                "an event from another source: {event}"
            )));
        }
        let key = match event["detail-type"].as_str() {
            Some(RECORD_OUTCOME) => {
                worth += estimated_charge(d)?;
                text(&d["recordKey"])
            }
            Some(ROW_NOT_BILLED) => text(&d["usageRowKey"]),
            _ => {
                return Err(LocalError::Check(format!(
                    "an unknown outcome event: {event}"
                )));
            }
        };
        got.push((text(&d["licenseArn"]), key, text(&d["status"])));
    }
    expected.sort();
    got.sort();
    if got != expected || expected.is_empty() {
        return Err(LocalError::Check(format!(
            "outcome events on the default bus: expected one per final record and not-billed row {expected:?}, got {got:?}"
        )));
    }
    Ok(format!(
        "outcome events on the default bus (source {SOURCE}): {records} {RECORD_OUTCOME} (worth {} USD together, estimated from the buyers' agreement terms), {} {ROW_NOT_BILLED}, each once",
        worth.normalize(),
        expected.len() - records
    ))
}

/// What a record's outcome event says it is worth, checked: exactly its quantity x its
/// dimension's price in [`PRICES`], as the record keeps it from the rate card the
/// discoverer read (every demo record is priced; a record never billed counts 0).
fn estimated_charge(detail: &serde_json::Value) -> Result<rust_decimal::Decimal, LocalError> {
    let charge = &detail["estimatedCharge"];
    let price = PRICES
        .iter()
        .find(|(d, _)| detail["dimension"] == *d)
        .and_then(|(_, p)| p.parse::<rust_decimal::Decimal>().ok());
    let expected = detail["quantity"]
        .as_i64()
        .zip(price)
        .map(|(q, p)| p * rust_decimal::Decimal::from(q));
    let told = charge["amount"]
        .as_str()
        .and_then(|a| a.parse::<rust_decimal::Decimal>().ok());
    if charge["basis"] != "priced"
        || charge["currency"] != "USD"
        || told.is_none()
        || told != expected
    {
        return Err(LocalError::Check(format!(
            "an outcome event says its record is worth {charge}, expected {expected:?} USD (its quantity x the agreement's price): {detail}"
        )));
    }
    Ok(if detail["billed"] == true {
        told.unwrap_or_default()
    } else {
        rust_decimal::Decimal::ZERO
    })
}

/// Posts `events` to the local usage API and checks every verdict is `want`.
async fn expect_verdicts(
    system: &LocalSystem,
    events: &[serde_json::Value],
    want: &str,
) -> Result<(), LocalError> {
    let answer =
        crate::usage_api::post_events(system, &serde_json::json!({ "events": events })).await?;
    let results = answer["results"].as_array().cloned().unwrap_or_default();
    if results.len() != events.len() || results.iter().any(|r| r["status"] != want) {
        return Err(LocalError::Check(format!(
            "POST /usage/events: expected every event {want}, got {answer}"
        )));
    }
    Ok(())
}

async fn register(system: &LocalSystem) -> Result<(), LocalError> {
    let token = "local-demo-registration-token";
    system
        .sim
        .handle()
        .seed_token(TokenSeed {
            token: token.into(),
            license_arn: LICENSE_A.into(),
            customer_aws_account_id: BUYER_ACCOUNT.into(),
            product_code: LOCAL_PRODUCT_CODE.into(),
            issued_at: Some(system.now),
        })
        .map_err(|e| LocalError::Setup(format!("seeding a token: {e}")))?;
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| LocalError::Setup(e.to_string()))?;
    let fulfillment = client
        .post(format!("{}/fulfillment", system.page.url()))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("x-amzn-marketplace-token={token}"))
        .send()
        .await
        .map_err(|e| LocalError::Check(format!("POST /fulfillment: {e}")))?;
    let location = fulfillment
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    if fulfillment.status().as_u16() != 303
        || !location.starts_with(&format!("{}/#token=", system.page.url()))
    {
        return Err(LocalError::Check(format!(
            "/fulfillment answered {} with Location {location:?}, expected 303 to the page with #token=",
            fulfillment.status()
        )));
    }
    let response = client
        .post(format!("{}/register", system.page.url()))
        .header("content-type", "application/x-www-form-urlencoded")
        .header("origin", system.page.url())
        .body(format!(
            "x-amzn-marketplace-token={token}&companyName=Example%20Corp&contactEmail=ops%40example.com"
        ))
        .send()
        .await
        .map_err(|e| LocalError::Check(format!("POST /register: {e}")))?;
    let status = response.status();
    let body = response.text().await.unwrap_or_default();
    if !status.is_success() {
        return Err(LocalError::Check(format!(
            "/register answered {status}: {body}"
        )));
    }
    Ok(())
}

/// A row as a seller's buggy writer might store it: negative quantity.
async fn put_bad_row(system: &LocalSystem, timestamp: Instant) -> Result<(), LocalError> {
    let ts = format_instant(timestamp);
    let s = |v: &str| AttributeValue::S(v.to_string());
    system
        .dynamodb
        .put_item()
        .table_name(system.table("UsageTable")?)
        .item("licenseArn", s(LICENSE_B))
        .item(
            "customerAWSAccountId_dimension_timestamp",
            s(&format!("{BUYER_ACCOUNT}#requests#{ts}")),
        )
        .item("customerAWSAccountId", s(BUYER_ACCOUNT))
        .item("dimension", s("requests"))
        .item("timestamp", s(&ts))
        .item("quantity", AttributeValue::N("-3".into()))
        .item(
            "meteringPending",
            s(&HourBucket::containing(timestamp).to_string()),
        )
        .send()
        .await
        .map_err(|e| LocalError::Aws(format!("PutItem: {e}")))?;
    Ok(())
}

type Item = BTreeMap<String, String>;

async fn scan(system: &LocalSystem, table: &str) -> Result<Vec<Item>, LocalError> {
    let mut items = Vec::new();
    let mut start = None;
    loop {
        let out = system
            .dynamodb
            .scan()
            .table_name(table)
            .set_exclusive_start_key(start)
            .send()
            .await
            .map_err(|e| LocalError::Aws(format!("Scan {table}: {e}")))?;
        for item in out.items.unwrap_or_default() {
            items.push(
                item.into_iter()
                    .map(|(k, v)| {
                        let text = match v {
                            AttributeValue::S(s) | AttributeValue::N(s) => s,
                            AttributeValue::Ss(ss) => ss.join(","),
                            other => format!("{other:?}"),
                        };
                        (k, text)
                    })
                    .collect(),
            );
        }
        start = out.last_evaluated_key;
        if start.is_none() {
            return Ok(items);
        }
    }
}

fn short(license: &str) -> String {
    let id = license.rsplit('/').next().unwrap_or(license);
    let id = id.rsplit(':').next().unwrap_or(id);
    if id.len() > 12 {
        format!("{}…", &id[..12])
    } else {
        id.to_string()
    }
}

/// The summary table, and the conservation checks behind it.
pub async fn summary(system: &LocalSystem) -> Result<String, LocalError> {
    // The ingestion markers (`event#<eventId>`, one per event written through
    // `put_row`) share the usage table but are not usage.
    let raw: Vec<Item> = scan(system, system.table("UsageTable")?)
        .await?
        .into_iter()
        .filter(|item| {
            item.get(awsmp_core::model::attr::USAGE_SORT_KEY)
                .is_none_or(|key| awsmp_core::items::ingestion_marker_event_id(key).is_none())
        })
        .collect();
    let aggregated = scan(system, system.table("AggregatedUsageTable")?).await?;
    let ledger = system.sim.handle().ledger();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n{:<15} {:<11} {:<14} {:<34} {:>10} {:<22} {:>7}",
        "license", "dimension", "hour", "raw rows", "aggregated", "status", "billed"
    );
    let mut groups: BTreeMap<(String, String, String), Vec<&Item>> = BTreeMap::new();
    for row in &raw {
        let hour = row
            .get("timestamp")
            .map(|t| t.chars().take(13).collect::<String>())
            .unwrap_or_default();
        groups
            .entry((
                row.get("licenseArn").cloned().unwrap_or_default(),
                row.get("dimension").cloned().unwrap_or_default(),
                hour,
            ))
            .or_default()
            .push(row);
    }
    let mut problems = Vec::new();
    for ((license, dimension, hour), rows) in &groups {
        let mut statuses: BTreeMap<String, usize> = BTreeMap::new();
        let mut counted = 0i64;
        for row in rows {
            let status = match (row.get("meteringStatus"), row.get("meteringStatusReason")) {
                (Some(s), Some(r)) => format!("{s}({r})"),
                (Some(s), None) => s.clone(),
                (None, _) => "pending".into(),
            };
            if row.get("meteringStatus").map(String::as_str) == Some("Aggregated") {
                counted += row
                    .get("quantity")
                    .and_then(|q| q.parse::<i64>().ok())
                    .unwrap_or(0);
            }
            if row.get("meteringStatus").is_none() {
                problems.push(format!(
                    "{} {dimension} {hour}: a raw row never reached a terminal status",
                    short(license)
                ));
            }
            *statuses.entry(status).or_default() += 1;
        }
        let record = aggregated.iter().find(|a| {
            a.get("licenseArn") == Some(license)
                && a.get("dimension") == Some(dimension)
                && a.get("hourBucket") == Some(hour)
        });
        let billed: i64 = ledger
            .records
            .iter()
            .filter(|r| {
                &r.license_arn == license
                    && &r.dimension == dimension
                    && r.hour.format("%Y-%m-%dT%H").to_string() == *hour
            })
            .map(|r| i64::from(r.quantity))
            .sum();
        let (agg_qty, agg_status) = match record {
            Some(a) => (
                a.get("quantity").cloned().unwrap_or_default(),
                a.get("meteringStatus")
                    .cloned()
                    .unwrap_or_else(|| "pending".into()),
            ),
            None => ("-".into(), "-".into()),
        };
        if record.is_some() && agg_qty.parse::<i64>().ok() != Some(counted) {
            problems.push(format!(
                "{} {dimension} {hour}: aggregated {agg_qty} but the Aggregated rows sum to {counted}",
                short(license)
            ));
        }
        if agg_status == "Success" && agg_qty.parse::<i64>().ok() != Some(billed) {
            problems.push(format!(
                "{} {dimension} {hour}: aggregated {agg_qty} but Marketplace billed {billed}",
                short(license)
            ));
        }
        let raw_text = statuses
            .iter()
            .map(|(s, n)| format!("{n} {s}"))
            .collect::<Vec<_>>()
            .join(", ");
        let _ = writeln!(
            out,
            "{:<15} {:<11} {:<14} {:<34} {:>10} {:<22} {:>7}",
            short(license),
            dimension,
            hour,
            raw_text,
            agg_qty,
            agg_status,
            billed
        );
    }
    let subscribers = scan(system, system.table("SubscribersTable")?).await?;
    let _ = writeln!(out, "\nsubscribers:");
    for s in &subscribers {
        let _ = writeln!(
            out,
            "  {} agreement={} subscription={} registeredRegions={}",
            short(s.get("licenseArn").map(String::as_str).unwrap_or("")),
            s.get("agreementStatus").map(String::as_str).unwrap_or("-"),
            s.get("subscriptionStatus")
                .map(String::as_str)
                .unwrap_or("-"),
            s.get("registeredRegions")
                .map(String::as_str)
                .unwrap_or("-"),
        );
    }
    let _ = writeln!(out, "\nmetrics (namespace AwsMarketplace/Metering):");
    for (name, count) in metric_counts(&system.metrics_log) {
        let _ = writeln!(out, "  {name}: {count}");
    }
    let total: i64 = ledger.records.iter().map(|r| i64::from(r.quantity)).sum();
    let _ = writeln!(
        out,
        "\nbilled records: {} (total quantity {total}); conflicts: {}",
        ledger.records.len(),
        ledger.conflicts.len()
    );
    let a = subscribers
        .iter()
        .find(|s| s.get("licenseArn").map(String::as_str) == Some(LICENSE_A));
    if a.and_then(|s| s.get("subscriptionStatus"))
        .map(String::as_str)
        != Some("inactive")
    {
        problems.push("the deprovisioned license did not end inactive".into());
    }
    if ledger.records.is_empty() {
        problems.push("nothing was billed".into());
    }
    if problems.is_empty() {
        Ok(out)
    } else {
        Err(LocalError::Check(format!("{out}\n{}", problems.join("\n"))))
    }
}

/// Sums the EMF lines by metric name and dimension values.
fn metric_counts(path: &std::path::Path) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    let text = std::fs::read_to_string(path).unwrap_or_default();
    for line in text.lines() {
        let Ok(value) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let Some(definition) = value.pointer("/_aws/CloudWatchMetrics/0") else {
            continue;
        };
        let dims: Vec<String> = definition
            .pointer("/Dimensions/0")
            .and_then(|d| d.as_array())
            .map(|names| {
                names
                    .iter()
                    .filter_map(|n| n.as_str())
                    .map(|n| {
                        format!(
                            "{n}={}",
                            value.get(n).and_then(|v| v.as_str()).unwrap_or("?")
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        for m in definition
            .get("Metrics")
            .and_then(|m| m.as_array())
            .into_iter()
            .flatten()
        {
            let Some(name) = m.get("Name").and_then(|n| n.as_str()) else {
                continue;
            };
            let label = if dims.is_empty() {
                name.to_string()
            } else {
                format!("{name}{{{}}}", dims.join(","))
            };
            *counts.entry(label).or_default() +=
                value.get(name).and_then(|v| v.as_u64()).unwrap_or(0);
        }
    }
    counts
}

//! `awsmp adjust` and `awsmp adjustments`, the shipped binary against what the real
//! pipeline billed on moto and the Marketplace simulator (its Agreement API over RPC
//! v2 CBOR, invoices built from its ledger): a dry run files nothing, a correction is
//! filed once through two lost answers (the SDK's retries, each with the same client
//! token), a rerun sends nothing, other quantities and an under-bill are refused, and
//! `adjustments` follows the refund to COMPLETED with its credit memo.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use awsmp_e2e::common::*;
use awsmp_e2e::{AGGREGATED_TABLE, SUBSCRIBERS_TABLE, USAGE_TABLE, license};
use awsmp_marketplace_sim::{ClockSetting, FaultKind, FaultSpec, FaultTarget};
use common::binary::{Ran, awsmp_env};

const NOW: &str = "2026-11-30T10:30:00Z";

async fn awsmp(stack: &awsmp_e2e::Stack, tail: &[&str]) -> Ran {
    let home = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("awsmp-adjust-home");
    let mut args = vec![
        "--region",
        stack.options.region.as_str(),
        "--usage-table",
        USAGE_TABLE,
        "--aggregated-table",
        AGGREGATED_TABLE,
        "--subscribers-table",
        SUBSCRIBERS_TABLE,
    ];
    args.extend_from_slice(tail);
    let sim = stack.sim.endpoint_url();
    awsmp_env(
        stack.moto.endpoint(),
        &home,
        &args,
        &[("AWS_ENDPOINT_URL_MARKETPLACE_AGREEMENT", sim.as_str())],
    )
    .await
}

fn json(ran: &Ran) -> serde_json::Value {
    serde_json::from_str(&ran.stdout)
        .unwrap_or_else(|e| panic!("{e}: {} / {}", ran.stdout, ran.stderr))
}

fn line(ran: &Ran) -> serde_json::Value {
    let value = json(ran);
    assert_eq!(value["corrections"].as_array().unwrap().len(), 1, "{value}");
    value["corrections"][0].clone()
}

/// GIVEN 1000 requests and 10 storage billed on November 30th under an agreement
/// pricing requests at 0.0025 and storage at 0.5 USD, and December begun (November
/// invoiced), WHEN the seller corrects the requests to 600 THEN 1.00 USD is refunded
/// once, whatever is lost or rerun, and followed to COMPLETED.
#[tokio::test]
async fn an_over_bill_is_refunded_once_and_followed_to_completed() {
    let stack = stack_with(NOW, |_| {}).await;
    let l1 = license(1);
    stack.license_updated(&l1, ACCOUNT_A).await.unwrap();
    for (dimension, ts, q) in [
        ("requests", "2026-11-30T07:10:00Z", 1000),
        ("storage", "2026-11-30T08:05:00Z", 10),
    ] {
        stack
            .put_usage(&l1, ACCOUNT_A, dimension, ts, q)
            .await
            .unwrap();
    }
    stack.run_pipeline().await.unwrap();
    let billed = stack.billed();
    assert_eq!(billed.values().sum::<i64>(), 1010, "{billed:?}");
    stack
        .seed_priced_agreement(
            &l1,
            ACCOUNT_A,
            &[("requests", "0.0025"), ("storage", "0.5")],
        )
        .unwrap();
    stack.sim.handle().set_clock(ClockSetting::Fixed {
        at: "2026-12-01T01:00:00Z".parse().unwrap(),
    });
    let requests = format!("{l1}|{ACCOUNT_A}|requests|2026-11-30T07");
    let to_600 = format!("{requests}=600");

    // A dry run: the plan, nothing filed.
    let plan = awsmp(&stack, &["--json", "adjust", &to_600, "--dry-run"]).await;
    assert_eq!(plan.code, 0, "{} / {}", plan.stdout, plan.stderr);
    let planned = line(&plan);
    assert_eq!(planned["result"], "planned");
    assert_eq!(planned["amount"], "1");
    assert_eq!(planned["currency"], "USD");
    assert_eq!(planned["billed_quantity"], 1000);
    assert!(
        planned["invoice_id"]
            .as_str()
            .unwrap()
            .starts_with("E2E202611")
    );
    assert!(stack.sim.handle().billing_adjustments().is_empty());

    // Without a terminal to ask on, it must be told --yes.
    let unasked = awsmp(&stack, &["adjust", &to_600]).await;
    assert_eq!(unasked.code, 2, "{}", unasked.stderr);
    assert!(unasked.stderr.contains("--yes"), "{}", unasked.stderr);

    // Two answers lost after the adjustment was made: the SDK retries with the same
    // token and AWS answers the one adjustment it made.
    stack
        .sim
        .handle()
        .inject_fault(FaultSpec {
            kind: FaultKind::LoseResponse {
                mode: Default::default(),
            },
            count: 2,
            operation: FaultTarget::BillingAdjustments,
        })
        .unwrap();
    let filed = awsmp(&stack, &["--json", "adjust", &to_600, "--yes"]).await;
    assert_eq!(filed.code, 0, "{} / {}", filed.stdout, filed.stderr);
    let filed = line(&filed);
    assert_eq!(filed["result"], "filed", "{filed}");
    let made = stack.sim.handle().billing_adjustments();
    assert_eq!(made.len(), 1, "{made:?}");
    assert_eq!(made[0].adjustment_amount, "1".parse().unwrap());
    assert_eq!(made[0].adjustment_reason_code, "INCORRECT_METERING");
    assert_eq!(
        filed["adjustment_id"].as_str(),
        Some(made[0].billing_adjustment_request_id.as_str())
    );

    // A rerun sends nothing; other quantities for the same record are refused.
    let again = awsmp(&stack, &["--json", "adjust", &to_600, "--yes"]).await;
    assert_eq!(line(&again)["result"], "already filed");
    let other = awsmp(&stack, &["adjust", &format!("{requests}=500"), "--yes"]).await;
    assert_eq!(other.code, 3, "{}", other.stdout);
    assert!(
        other.stdout.contains("already has a correction"),
        "{}",
        other.stdout
    );
    // An under-bill cannot be added to an hour Marketplace billed.
    let storage = format!("{l1}|{ACCOUNT_A}|storage|2026-11-30T08=12");
    let under = awsmp(&stack, &["adjust", &storage, "--yes"]).await;
    assert_eq!(under.code, 3, "{}", under.stdout);
    assert!(
        under.stdout.contains("under-billed by 2"),
        "{}",
        under.stdout
    );
    assert_eq!(stack.sim.handle().billing_adjustments().len(), 1);

    // `adjustments` follows it to COMPLETED once AWS processed it.
    let pending = awsmp(&stack, &["--json", "adjustments"]).await;
    assert_eq!(line(&pending)["result"], "pending", "{}", pending.stdout);
    stack.sim.handle().advance_clock(120);
    let done = awsmp(&stack, &["--json", "adjustments"]).await;
    assert_eq!(done.code, 0, "{} / {}", done.stdout, done.stderr);
    let value = json(&done);
    assert_eq!(value["corrections"][0]["result"], "completed", "{value}");
    assert_eq!(value["totals"]["USD"]["refunded"], "1");
    assert_eq!(value["totals"]["USD"]["pending"], "0");
    let human = awsmp(&stack, &["adjustments", "--no-refresh"]).await;
    assert!(
        human.stdout.contains("USD: refunded 1, pending 0"),
        "{}",
        human.stdout
    );
}

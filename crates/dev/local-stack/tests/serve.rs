//! Serving after the demo: the stack's one clock catches up with the real clock and
//! runs on from there, and every handler reads it, so usage posted "now" (no
//! timestamp) is billed once its hour has ended and the lock has passed on that clock.
//! Run at 3,600x here, so the two hours that takes pass in a few real seconds.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use awsmp_core::ports::Clock;
use awsmp_local_stack::demo::{self, BUYER_ACCOUNT, LICENSE_B};
use awsmp_local_stack::system::{LocalPaths, LocalSystem};
use awsmp_local_stack::{demo_start, usage_api};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_written_now_bills_on_the_stacks_clock_once_serving() {
    let root = awsmp_local_aws::workspace_root();
    let mut system = LocalSystem::start(&LocalPaths { root }, demo_start(chrono::Utc::now()))
        .await
        .expect("the local stack starts (moto from the project's venv: make venv)");
    demo::run(&mut system).await.unwrap();

    // Caught up: the stack's time is the real time.
    system.catch_up_and_run(3600).await.unwrap();
    let lag = chrono::Utc::now() - system.clock.now();
    assert!(
        lag.num_seconds().abs() <= 2,
        "the stack's clock is {lag} behind"
    );

    let answer = usage_api::post_events(
        &system,
        &serde_json::json!({"events": [{
            "id": "serve-now-1",
            "licenseArn": LICENSE_B,
            "customerAWSAccountId": BUYER_ACCOUNT,
            "dimension": "requests",
            "quantity": 2,
        }]}),
    )
    .await
    .unwrap();
    assert_eq!(answer["results"][0]["status"], "accepted", "{answer}");
    let posted_at = system.clock.now();

    // At 3,600x a real second is an hour: the hour ends, the lock passes, it bills.
    let mut fate = serde_json::Value::Null;
    for _ in 0..40 {
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        system.step_to_clock().await.unwrap();
        fate = usage_api::get_event(&system, "serve-now-1", LICENSE_B)
            .await
            .unwrap()
            .1;
        if fate["fate"]["record"]["meteringStatus"] == "Success" {
            break;
        }
    }
    assert_eq!(
        fate["fate"]["record"]["meteringStatus"],
        "Success",
        "posted at {posted_at}, the stack's clock at {}: {fate}",
        system.clock.now()
    );
}

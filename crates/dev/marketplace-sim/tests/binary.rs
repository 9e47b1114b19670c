//! The `awsmp-marketplace-sim` binary: flags and a config file, the address line on
//! stdout, and the real SDK client against the running process.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::process::Stdio;

use aws_sdk_marketplacemetering::types::UsageRecordResultStatus;
use common::*;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// Starts the binary with `args` and reads its address line.
async fn spawn(args: &[&str]) -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_awsmp-marketplace-sim"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("binary starts");
    let stdout = child.stdout.take().expect("stdout piped");
    let mut lines = BufReader::new(stdout).lines();
    let line = lines
        .next_line()
        .await
        .expect("stdout readable")
        .expect("the address line");
    let endpoint = line
        .strip_prefix("awsmp-marketplace-sim listening on ")
        .expect("address line format")
        .to_owned();
    (child, endpoint)
}

#[tokio::test]
async fn the_binary_serves_the_seeds_of_its_config_file() {
    let dir = std::env::temp_dir().join(format!("awsmp-sim-binary-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let config_path = dir.join("sim.json");
    let config = json!({
        "clock": {"mode": "fixed", "at": NOW},
        "products": [{"product_code": PRODUCT, "dimensions": ["requests"]}],
        "entitlements": [{"license_arn": LICENSE, "customer_aws_account_id": ACCOUNT, "product_code": PRODUCT}],
        "tokens": [{"token": "tok", "license_arn": LICENSE, "customer_aws_account_id": ACCOUNT, "product_code": PRODUCT}]
    });
    std::fs::write(&config_path, config.to_string()).expect("config written");

    let (mut child, endpoint) = spawn(&[
        "--port",
        "0",
        "--config",
        config_path.to_str().expect("utf-8 path"),
        "--no-throttle",
        "--latency-ms",
        "1",
    ])
    .await;
    let client = client_for(&endpoint).await;

    let out = meter_ok(&client, vec![record(1, "requests", 8)]).await;
    assert_eq!(first_status(&out), Some(&UsageRecordResultStatus::Success));
    let resolved = resolve(&client, "tok").await.expect("resolved");
    assert_eq!(resolved.customer_aws_account_id(), Some(ACCOUNT));
    let throttle = get_json(&format!("{endpoint}/admin/throttle")).await;
    assert_eq!(
        throttle["enabled"], false,
        "--no-throttle overrides the file"
    );
    let latency = get_json(&format!("{endpoint}/admin/latency")).await;
    assert_eq!(latency["ms"], 1);

    child.kill().await.expect("stopped");
    std::fs::remove_dir_all(&dir).expect("temp dir removed");
}

#[tokio::test]
async fn a_bad_config_file_stops_the_binary_with_the_reason() {
    let dir = std::env::temp_dir().join(format!("awsmp-sim-badconfig-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let config_path = dir.join("bad.json");
    std::fs::write(&config_path, r#"{"throtle": {}}"#).expect("config written");

    let output = Command::new(env!("CARGO_BIN_EXE_awsmp-marketplace-sim"))
        .args(["--config", config_path.to_str().expect("utf-8 path")])
        .output()
        .await
        .expect("binary ran");

    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("throtle"), "{stderr}");
    std::fs::remove_dir_all(&dir).expect("temp dir removed");
}

//! The shipped `awsmp` binary writing usage against moto through the real SDK: a write
//! names exactly one deployment (Marketplace deduplicates per Region, so usage written
//! into two Regions is billed twice), an import's progress belongs to one table and one
//! version of the file, an event id reused with other usage is a conflict (exit 5), and
//! a direct-submit stack takes no raw usage.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;

use aws_sdk_dynamodb::Client;
use awsmp_local_aws::MotoServer;
use awsmp_local_aws::tables::create_usage_table;
use chrono::{Duration, SubsecRound, Utc};
use common::binary::{Ran, awsmp_at};

const LICENSE: &str = "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0";
const ACCOUNT: &str = "111122223333";
const TABLE: &str = "awsmp-prodcode-usage-test";
const PRODUCT: &str = "prodcode";

/// `awsmp ARGS` against moto (Region us-east-1 unless the arguments name one).
async fn awsmp(moto: &MotoServer, home: &Path, args: &[&str]) -> Ran {
    awsmp_at(moto.endpoint(), home, args).await
}

/// The usage table named TABLE, in `region`.
fn tables_in(moto: &MotoServer, region: &str) -> Client {
    Client::new(&moto.sdk_config_in(region))
}

/// The usage rows (not the event markers) of the table: (sort key, quantity).
async fn rows(db: &Client) -> Vec<(String, String)> {
    let items = db.scan().table_name(TABLE).send().await.unwrap();
    let mut rows: Vec<(String, String)> = items
        .items()
        .iter()
        .filter_map(|item| {
            let sk = item
                .get("customerAWSAccountId_dimension_timestamp")?
                .as_s()
                .ok()?;
            if sk.starts_with("event#") {
                return None;
            }
            Some((sk.clone(), item.get("quantity")?.as_n().ok()?.clone()))
        })
        .collect();
    rows.sort();
    rows
}

fn explicit(region: &str) -> Vec<String> {
    [
        "--product-code",
        PRODUCT,
        "--region",
        region,
        "--usage-table",
        TABLE,
        "--aggregated-table",
        "awsmp-prodcode-aggregated-usage-test",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn args<'a>(head: &'a [String], tail: &[&'a str]) -> Vec<&'a str> {
    head.iter()
        .map(String::as_str)
        .chain(tail.iter().copied())
        .collect()
}

/// `awsmp usage put` of `quantity` requests under `event`, after the deployment flags.
fn put_args<'a>(head: &'a [String], event: &'a str, quantity: &'a str) -> Vec<&'a str> {
    args(
        head,
        &[
            "usage",
            "put",
            "--license",
            LICENSE,
            "--account",
            ACCOUNT,
            "--dimension",
            "requests",
            "--quantity",
            quantity,
            "--event-id",
            event,
        ],
    )
}

fn json(ran: &Ran) -> serde_json::Value {
    serde_json::from_str(&ran.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}\n{}", ran.stdout, ran.stderr))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_writes_name_one_deployment_and_never_skip_or_drop_usage() {
    let moto = MotoServer::start().await.expect("moto (run `make venv`)");
    let east = tables_in(&moto, "us-east-1");
    let west = tables_in(&moto, "us-west-2");
    create_usage_table(&east, TABLE).await.unwrap();
    create_usage_table(&west, TABLE).await.unwrap();
    let home = std::env::temp_dir().join(format!("awsmp-usage-writes-{}", std::process::id()));
    std::fs::create_dir_all(&home).unwrap();

    let at = (Utc::now() - Duration::minutes(10)).trunc_subsecs(0);
    let at = at.format("%Y-%m-%dT%H:%M:%SZ").to_string();
    let file = home.join("usage.csv");
    let write_file = |q1: &str, e2: &str| {
        std::fs::write(
            &file,
            format!(
                "licenseArn,customerAWSAccountId,dimension,timestamp,quantity,eventId\n\
                 {LICENSE},{ACCOUNT},requests,{at},{q1},imp-1\n\
                 {LICENSE},{ACCOUNT},requests,{at},3,{e2}\n"
            ),
        )
        .unwrap();
    };
    write_file("2", "imp-2");
    let file_arg = file.to_str().unwrap();
    let both = [
        "--product-code",
        PRODUCT,
        "--usage-table",
        TABLE,
        "--aggregated-table",
        "agg",
        "--region",
        "us-east-1",
        "--region",
        "us-west-2",
    ]
    .map(String::from);

    // GIVEN two Regions named WHEN writing THEN refused (exit 2), nothing written.
    let import_both = awsmp(&moto, &home, &args(&both, &["usage", "import", file_arg])).await;
    assert_eq!(import_both.code, 2, "{}", import_both.stderr);
    assert!(
        import_both.stderr.contains("one deployment"),
        "{}",
        import_both.stderr
    );
    let put_both = awsmp(&moto, &home, &put_args(&both, "put-both", "1")).await;
    assert_eq!(put_both.code, 2, "{}", put_both.stderr);
    assert!(
        put_both.stderr.contains("one deployment"),
        "{}",
        put_both.stderr
    );
    let all = awsmp(
        &moto,
        &home,
        &[
            "--stage",
            "test",
            "--product-code",
            PRODUCT,
            "--all-regions",
            "usage",
            "import",
            file_arg,
        ],
    )
    .await;
    assert_eq!(all.code, 2, "{}", all.stderr);
    assert!(all.stderr.contains("one deployment"), "{}", all.stderr);
    assert!(rows(&east).await.is_empty());
    assert!(rows(&west).await.is_empty());

    // GIVEN one file WHEN imported into each deployment in turn THEN both hold its rows
    // (the progress of the first import is not the second's).
    let east_args = explicit("us-east-1");
    let west_args = explicit("us-west-2");
    let first = awsmp(
        &moto,
        &home,
        &args(&east_args, &["--json", "usage", "import", file_arg]),
    )
    .await;
    assert_eq!(first.code, 0, "{}", first.stderr);
    assert_eq!(json(&first)["written"], 2);
    let second = awsmp(
        &moto,
        &home,
        &args(&west_args, &["--json", "usage", "import", file_arg]),
    )
    .await;
    assert_eq!(second.code, 0, "{}", second.stderr);
    assert_eq!(json(&second)["written"], 2, "{}", second.stdout);
    assert_eq!(rows(&east).await.len(), 2);
    assert_eq!(rows(&west).await.len(), 2);
    // A rerun into the same table resumes past both lines.
    let rerun = awsmp(
        &moto,
        &home,
        &args(&east_args, &["--json", "usage", "import", file_arg]),
    )
    .await;
    assert_eq!(rerun.code, 0, "{}", rerun.stderr);
    assert_eq!(json(&rerun)["resumed_past"], 2, "{}", rerun.stdout);

    // GIVEN the file edited to the same length (a quantity changed under its event id,
    // an event id changed) WHEN imported again THEN every line is checked again: the new
    // event is written, the reused event id is a conflict (exit 5), never skipped.
    write_file("7", "imp-9");
    let edited = std::fs::read_to_string(&file).unwrap();
    assert_eq!(
        edited.len(),
        std::fs::metadata(&file).unwrap().len() as usize
    );
    let after_edit = awsmp(
        &moto,
        &home,
        &args(&east_args, &["--json", "usage", "import", file_arg]),
    )
    .await;
    let report = json(&after_edit);
    assert_eq!(report["resumed_past"], 0, "{}", after_edit.stdout);
    assert_eq!(report["written"], 1, "{}", after_edit.stdout);
    assert_eq!(report["already_written"], 0, "{}", after_edit.stdout);
    let conflicts = report["conflicts"].as_array().expect("conflicts listed");
    assert_eq!(conflicts.len(), 1, "{}", after_edit.stdout);
    assert_eq!(conflicts[0]["line"], 2);
    assert_eq!(conflicts[0]["event_id"], "imp-1");
    assert_eq!(conflicts[0]["recorded"]["quantity"], 2);
    assert_eq!(conflicts[0]["this"]["quantity"], 7);
    assert_eq!(after_edit.code, 5, "{}", after_edit.stderr);
    assert_eq!(
        rows(&east).await.len(),
        3,
        "the conflicting line wrote nothing"
    );

    // GIVEN an event id written WHEN put again with another quantity THEN exit 5 with
    // both quantities; with the same quantity THEN already written (exit 0).
    let put = |event: &'static str, quantity: &'static str| put_args(&east_args, event, quantity);
    let written = awsmp(&moto, &home, &put("put-1", "3")).await;
    assert_eq!(written.code, 0, "{}", written.stderr);
    let same = awsmp(&moto, &home, &put("put-1", "3")).await;
    assert_eq!(same.code, 0, "{}", same.stderr);
    assert!(same.stdout.contains("already written"), "{}", same.stdout);
    let other = awsmp(&moto, &home, &put("put-1", "4")).await;
    assert_eq!(other.code, 5, "{}\n{}", other.stdout, other.stderr);
    assert!(
        other.stderr.contains("quantity 3") && other.stderr.contains("quantity 4"),
        "{}",
        other.stderr
    );
    assert_eq!(rows(&east).await.len(), 4);

    // GIVEN a direct-submit stack WHEN usage is written into it THEN refused, pointing
    // at the aggregated-usage table; nothing written.
    let cloudformation = aws_sdk_cloudformation::Client::new(&moto.sdk_config());
    let body = serde_json::json!({
        "Resources": {"Stand": {"Type": "AWS::CloudFormation::WaitConditionHandle"}},
        "Outputs": {
            "UsageTableName": {"Value": TABLE},
            "AggregatedUsageTableName": {"Value": "awsmp-prodcode-aggregated-usage-ds"},
            "DeploymentMode": {"Value": "direct-submit"},
        },
    });
    cloudformation
        .create_stack()
        .stack_name(format!("awsmp-main-{PRODUCT}-ds"))
        .template_body(body.to_string())
        .send()
        .await
        .unwrap();
    let stack = [
        "--stage",
        "ds",
        "--product-code",
        PRODUCT,
        "--region",
        "us-east-1",
    ]
    .map(String::from);
    let direct_put = awsmp(&moto, &home, &put_args(&stack, "direct-1", "1")).await;
    assert_eq!(direct_put.code, 2, "{}", direct_put.stderr);
    assert!(
        direct_put.stderr.contains("direct-submit")
            && direct_put.stderr.contains("aggregated-usage"),
        "{}",
        direct_put.stderr
    );
    let direct_import = awsmp(&moto, &home, &args(&stack, &["usage", "import", file_arg])).await;
    assert_eq!(direct_import.code, 2, "{}", direct_import.stderr);
    assert!(
        direct_import.stderr.contains("direct-submit"),
        "{}",
        direct_import.stderr
    );
    assert_eq!(rows(&east).await.len(), 4, "nothing written");
    std::fs::remove_dir_all(&home).unwrap();
}

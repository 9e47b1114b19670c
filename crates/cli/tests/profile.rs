//! `awsmp profile show|erase`, the shipped binary against moto through the real SDK:
//! the customer-profile table found from each main stack's outputs (or named), one
//! buyer's row read and erased per Region, the erasure confirmed and audited without
//! the data, an absent row a clear answer, and a refusal (moto enforces no resource
//! policy: a front on moto answers as DynamoDB does) saying which role to use.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use awsmp_local_aws::MotoServer;
use awsmp_local_aws::tables::{create_aggregated_table, create_profile_table, create_usage_table};
use common::binary::{Ran, awsmp_at};
use common::front::{dynamodb_access_denied, front};

const LICENSE: &str = "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0";
const ACCOUNT: &str = "111122223333";
const TABLE: &str = "awsmp-prod-customer-profile";
const REGIONS: [&str; 2] = ["us-east-1", "eu-west-1"];

/// `awsmp ARGS` with every AWS call sent to `endpoint` (moto, or a front on it).
async fn awsmp(endpoint: &str, args: &[&str]) -> Ran {
    let home = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("awsmp-profile-home");
    awsmp_at(endpoint, &home, args).await
}

/// A main stack `awsmp-main-prod-test` in each Region of REGIONS, with its tables and
/// the `CustomerProfileTableName` output; the buyer registered in the first only.
async fn deployed(moto: &MotoServer) {
    for region in REGIONS {
        let config = moto.sdk_config_in(region);
        let db = aws_sdk_dynamodb::Client::new(&config);
        create_usage_table(&db, "awsmp-prod-usage-test")
            .await
            .unwrap();
        create_aggregated_table(&db, "awsmp-prod-aggregated-usage-test")
            .await
            .unwrap();
        create_profile_table(&db, TABLE).await.unwrap();
        let body = serde_json::json!({
            "Resources": {"Marker": {"Type": "AWS::CloudFormation::WaitConditionHandle"}},
            "Outputs": {
                "UsageTableName": {"Value": "awsmp-prod-usage-test"},
                "AggregatedUsageTableName": {"Value": "awsmp-prod-aggregated-usage-test"},
                "CustomerProfileTableName": {"Value": TABLE},
            },
        });
        aws_sdk_cloudformation::Client::new(&config)
            .create_stack()
            .stack_name("awsmp-main-prod-test")
            .template_body(body.to_string())
            .send()
            .await
            .unwrap();
    }
    let s = |v: &str| AttributeValue::S(v.to_string());
    let item: HashMap<String, AttributeValue> = [
        ("licenseArn", s(LICENSE)),
        ("customerAWSAccountId", s(ACCOUNT)),
        ("productCode", s("prod")),
        ("createdAt", s("2026-11-30T10:00:00Z")),
        ("updatedAt", s("2026-11-30T10:05:00Z")),
        ("companyName", s("Example Corp")),
        ("contactEmail", s("ops@example.com")),
        ("contactPhone", s("+1 555 0100")),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    moto.dynamodb()
        .put_item()
        .table_name(TABLE)
        .set_item(Some(item))
        .send()
        .await
        .unwrap();
}

/// Whether the buyer's row is in the table of `region`.
async fn stored(moto: &MotoServer, region: &str) -> bool {
    aws_sdk_dynamodb::Client::new(&moto.sdk_config_in(region))
        .get_item()
        .table_name(TABLE)
        .key("licenseArn", AttributeValue::S(LICENSE.into()))
        .key("customerAWSAccountId", AttributeValue::S(ACCOUNT.into()))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item
        .is_some()
}

/// `--stage test --product-code prod`, both Regions, then `tail`.
fn both<'a>(tail: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "--stage",
        "test",
        "--product-code",
        "prod",
        "--region",
        REGIONS[0],
        "--region",
        REGIONS[1],
    ];
    args.extend_from_slice(tail);
    args
}

const BUYER: [&str; 4] = ["--license", LICENSE, "--account", ACCOUNT];

fn with_buyer<'a>(command: &[&'a str]) -> Vec<&'a str> {
    command.iter().chain(BUYER.iter()).copied().collect()
}

/// GIVEN the buyer registered in one of two Regions, WHEN shown, erased (refused
/// without --yes off a terminal, a dry run, for real) and erased again, THEN each
/// Region answers for itself, the row is gone only after the real erasure, its audit
/// line carries identifiers and no data, and the second erasure says nothing was there.
#[tokio::test]
async fn show_then_erase_one_buyer_in_each_region() {
    let moto = MotoServer::start().await.unwrap();
    deployed(&moto).await;
    let endpoint = moto.endpoint();

    let shown = awsmp(endpoint, &both(&with_buyer(&["profile", "show"]))).await;
    assert_eq!(shown.code, 0, "{}\n{}", shown.stdout, shown.stderr);
    assert!(
        shown.stdout.contains(&format!(
            "us-east-1 ({TABLE}): the profile of {LICENSE} / {ACCOUNT}"
        )),
        "{}",
        shown.stdout
    );
    for value in [
        "Example Corp",
        "ops@example.com",
        "+1 555 0100",
        "2026-11-30T10:05:00Z",
    ] {
        assert!(shown.stdout.contains(value), "{value}: {}", shown.stdout);
    }
    assert!(
        shown.stdout.contains(&format!(
            "eu-west-1 ({TABLE}): no profile for {LICENSE} / {ACCOUNT} in eu-west-1"
        )),
        "{}",
        shown.stdout
    );
    let json = awsmp(endpoint, &both(&with_buyer(&["--json", "profile", "show"]))).await;
    assert_eq!(json.code, 0, "{}", json.stderr);
    let doc: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(doc["regions"][0]["region"], "us-east-1");
    assert_eq!(
        doc["regions"][0]["profile"]["fields"]["companyName"],
        "Example Corp"
    );
    assert_eq!(doc["regions"][1]["found"], false);

    // Off a terminal, without --yes: refused before anything is read or deleted.
    let unconfirmed = awsmp(endpoint, &both(&with_buyer(&["profile", "erase"]))).await;
    assert_eq!(unconfirmed.code, 2, "{}", unconfirmed.stderr);
    assert!(
        unconfirmed.stderr.contains("pass --yes"),
        "{}",
        unconfirmed.stderr
    );
    assert!(stored(&moto, "us-east-1").await);

    let dry = awsmp(
        endpoint,
        &both(&with_buyer(&["profile", "erase", "--dry-run"])),
    )
    .await;
    assert_eq!(dry.code, 0, "{}", dry.stderr);
    assert!(
        dry.stdout.contains("would erase the profile"),
        "{}",
        dry.stdout
    );
    assert!(!dry.stderr.contains("audit"), "{}", dry.stderr);
    assert!(stored(&moto, "us-east-1").await);

    let erased = awsmp(
        endpoint,
        &both(&with_buyer(&["--json", "profile", "erase", "--yes"])),
    )
    .await;
    assert_eq!(erased.code, 0, "{}\n{}", erased.stdout, erased.stderr);
    assert!(!stored(&moto, "us-east-1").await, "the row is gone");
    let doc: serde_json::Value = serde_json::from_str(&erased.stdout).unwrap();
    assert_eq!(doc["regions"][0]["result"], "erased");
    assert_eq!(doc["regions"][0]["audit"]["event"], "ProfileErased");
    assert_eq!(doc["regions"][1]["result"], "absent");
    let audits: Vec<&str> = erased
        .stderr
        .lines()
        .filter(|l| l.starts_with("awsmp: audit: "))
        .collect();
    assert_eq!(audits.len(), 1, "{}", erased.stderr);
    let audit: serde_json::Value =
        serde_json::from_str(audits[0].trim_start_matches("awsmp: audit: ")).unwrap();
    assert_eq!(audit["license_arn"], LICENSE);
    assert_eq!(audit["customer_aws_account_id"], ACCOUNT);
    assert_eq!(audit["region"], "us-east-1");
    assert_eq!(audit["table"], TABLE);
    for data in ["Example Corp", "ops@example.com", "555", "companyName"] {
        assert!(!erased.stderr.contains(data), "{data}: {}", erased.stderr);
        assert!(!erased.stdout.contains(data), "{data}: {}", erased.stdout);
    }

    let again = awsmp(endpoint, &both(&with_buyer(&["profile", "erase", "--yes"]))).await;
    assert_eq!(again.code, 3, "{}\n{}", again.stdout, again.stderr);
    for region in REGIONS {
        assert!(
            again.stdout.contains(&format!(
                "no profile for {LICENSE} / {ACCOUNT} in {region}; nothing erased"
            )),
            "{}",
            again.stdout
        );
    }
    assert!(!again.stderr.contains("audit"), "{}", again.stderr);
}

/// `--customer-profile-table` with `--region`: no stack is read (the PII role needs no
/// DescribeStacks), and a stack without the output says to pass it.
#[tokio::test]
async fn a_named_table_needs_no_stack() {
    let moto = MotoServer::start().await.unwrap();
    deployed(&moto).await;
    let (url, log) = front(moto.endpoint(), Box::new(|_| None)).await;
    let shown = awsmp(
        &url,
        &with_buyer(&[
            "--region",
            "us-east-1",
            "--customer-profile-table",
            TABLE,
            "profile",
            "show",
        ]),
    )
    .await;
    assert_eq!(shown.code, 0, "{}\n{}", shown.stdout, shown.stderr);
    assert!(shown.stdout.contains("Example Corp"), "{}", shown.stdout);
    let operations: Vec<String> = log
        .lock()
        .unwrap()
        .iter()
        .map(|s| s.json_operation().to_string())
        .collect();
    assert_eq!(
        operations,
        ["GetItem"],
        "one GetItem, no DescribeStacks, no Scan"
    );

    let bad = awsmp(
        moto.endpoint(),
        &["profile", "show", "--license", LICENSE, "--account", "1111"],
    )
    .await;
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    assert!(bad.stderr.contains("12 digits"), "{}", bad.stderr);
}

/// GIVEN the table's resource policy refuses these credentials (DynamoDB answers
/// AccessDeniedException), WHEN shown or erased, THEN exit 1 with the advice to use
/// the ProfileAccessRoleArn role, no SDK trace, and the row untouched.
#[tokio::test]
async fn access_denied_says_which_role_may_read_or_erase() {
    let moto = MotoServer::start().await.unwrap();
    deployed(&moto).await;
    let (url, _) = front(
        moto.endpoint(),
        Box::new(|seen| {
            matches!(seen.json_operation(), "GetItem" | "DeleteItem").then(|| {
                dynamodb_access_denied(&format!(
                    "User: arn:aws:sts::123456789012:assumed-role/Operator/me is not authorized to perform: dynamodb:{} on resource: arn:aws:dynamodb:us-east-1:123456789012:table/{TABLE} with an explicit deny in a resource-based policy",
                    seen.json_operation()
                ))
            })
        }),
    )
    .await;
    for command in [&["profile", "show"][..], &["profile", "erase", "--yes"]] {
        let args: Vec<&str> = [&["--stage", "test", "--product-code", "prod"][..], command]
            .concat()
            .into_iter()
            .chain(BUYER)
            .collect();
        let ran = awsmp(&url, &args).await;
        assert_eq!(ran.code, 1, "{command:?}: {}\n{}", ran.stdout, ran.stderr);
        assert!(
            ran.stderr.starts_with("awsmp: us-east-1: "),
            "{}",
            ran.stderr
        );
        assert!(
            ran.stderr.contains("was refused (AccessDeniedException: User: arn:aws:sts::123456789012:assumed-role/Operator/me is not authorized"),
            "{}",
            ran.stderr
        );
        assert!(
            ran.stderr.contains("lets only the register function's role and the PII role named by the stack parameter ProfileAccessRoleArn read or delete its items: run `awsmp profile` with that role's credentials"),
            "{}",
            ran.stderr
        );
        assert!(!ran.stderr.contains("ServiceError"), "{}", ran.stderr);
    }
    assert!(stored(&moto, "us-east-1").await);
}

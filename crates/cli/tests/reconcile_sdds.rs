//! `awsmp reconcile` against the SDDS feeds: the committed Daily Usage, Account and
//! Product fixtures (bi-temporal revisions, soft deletes, a row whose account is not
//! in the account feed) read from disk, joined, and compared per account, product,
//! dimension and UTC day with our aggregated records.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use awsmp_cli::reconcile::{
    AwsRecords, ReconcileArgs, SddsFiles, load_our_records, reconcile_report,
};
use awsmp_cli::trail::ReportError;
use awsmp_core::memory::MemoryTables;
use awsmp_core::model::{AggregatedRecord, AggregatedStatus, GroupKey};
use awsmp_core::time::Instant;

const PRODUCT: &str = "prodsim1234567890abcdef";
const LICENSE: &str =
    "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef";
const LICENSE_2: &str =
    "arn:aws:license-manager::123456789012:license:l-fedcba9876543210fedcba9876543210";

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../core/tests/fixtures/sdds")
        .join(name)
}

fn now() -> Instant {
    "2026-03-20T08:00:00Z".parse().unwrap()
}

fn billed(
    tables: &MemoryTables,
    license: &str,
    account: &str,
    dimension: &str,
    hour: &str,
    quantity: i64,
) {
    tables.insert_aggregated(
        AggregatedRecord {
            key: GroupKey {
                license_arn: license.into(),
                customer_aws_account_id: account.into(),
                dimension: dimension.into(),
                hour: hour.parse().unwrap(),
            },
            product_code: PRODUCT.into(),
            quantity,
            allocations: None,
            status: AggregatedStatus::Success,
            status_reason: None,
            metering_record_id: Some(format!("id-{account}-{dimension}-{hour}")),
            attempt_count: 1,
            version: 1,
            in_flight_until: None,
            claim_id: None,
            sent_quantity: Some(quantity),
            folding: false,
        },
        now(),
    );
}

#[tokio::test]
async fn the_feeds_are_joined_resolved_and_compared_per_day() {
    // GIVEN what we billed: mostly what the feed says, with three differences
    let tables = MemoryTables::new();
    let a = "111122223333";
    let b = "044455556666";
    billed(&tables, LICENSE, a, "requests", "2026-03-15T10", 40);
    billed(&tables, LICENSE, a, "requests", "2026-03-15T11", 2); // day total 42: agrees
    billed(&tables, LICENSE, a, "storage_gb", "2026-03-15T03", 45); // feed corrected to 45.5
    billed(&tables, LICENSE, a, "requests", "2026-03-14T00", 12); // newest revision: 12
    billed(&tables, LICENSE_2, b, "requests", "2026-03-13T05", 9); // deleted, re-inserted
    billed(&tables, LICENSE_2, b, "requests", "2026-03-12T05", 5); // newest revision deleted
    billed(&tables, LICENSE_2, b, "requests", "2026-03-11T05", 8); // tie: later line
    billed(&tables, LICENSE_2, b, "requests", "2026-03-16T05", 3); // feed: 3.25
    billed(&tables, LICENSE_2, b, "storage_gb", "2026-03-15T05", 7); // soft-deleted in the feed
    let files = SddsFiles::read(
        &fixture("daily_usage.csv"),
        &fixture("account.csv"),
        &fixture("product.csv"),
    )
    .unwrap();
    let (ours, malformed) = load_our_records(&tables.operator_store(), None)
        .await
        .unwrap();
    let args = ReconcileArgs {
        month: Some("2026-03".into()),
        region: "us-east-1".into(),
        json: true,
        ..ReconcileArgs::default()
    };

    // WHEN reconciled against the feeds
    let report = reconcile_report(AwsRecords::Sdds(&files), &ours, &malformed, &args, now())
        .await
        .unwrap();

    // THEN three discrepancies, the orphan usage line reported, the rest agreed
    assert!(report.attention);
    let doc: serde_json::Value = serde_json::from_str(&report.text).unwrap();
    let r = &doc["reconciliation"];
    let got: Vec<String> = r["discrepancies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            format!(
                "{} {} {} {} {}/{}",
                d["kind"].as_str().unwrap(),
                d["key"]["account"].as_str().unwrap(),
                d["key"]["dimension"].as_str().unwrap(),
                d["key"]["period"]["day"].as_str().unwrap(),
                d["ours"],
                d["aws"]
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            "QuantityDiffers 044455556666 requests 2026-03-16 \"3\"/\"3.25\"",
            "MissingOnAws 044455556666 storage_gb 2026-03-15 \"7\"/null",
            "QuantityDiffers 111122223333 storage_gb 2026-03-15 \"45\"/\"45.5\"",
        ]
    );
    assert_eq!(r["agreed"], 5);
    assert_eq!(r["totals"]["QuantityDiffers"]["count"], 2);
    assert_eq!(r["totals"]["QuantityDiffers"]["aws"], "48.75");
    assert_eq!(
        doc["compared_to"], "2026-03-20",
        "up to yesterday: today is not delivered yet"
    );
    let problems: Vec<&str> = doc["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].starts_with("daily usage feed line 17: end_user_account_id acct-unknown"),
        "{problems:?}"
    );

    let human = reconcile_report(
        AwsRecords::Sdds(&files),
        &ours,
        &malformed,
        &ReconcileArgs {
            json: false,
            ..args
        },
        now(),
    )
    .await
    .unwrap();
    assert!(
        human.text.contains("SDDS Daily Usage feed"),
        "{}",
        human.text
    );
    assert!(
        human.text.contains("daily usage feed line 17"),
        "{}",
        human.text
    );
    assert!(
        human.text.contains("| different quantity | 2 "),
        "{}",
        human.text
    );
}

#[tokio::test]
async fn malformed_feed_lines_are_listed_with_their_numbers() {
    let files = SddsFiles::read(
        &fixture("daily_usage_malformed.csv"),
        &fixture("account.csv"),
        &fixture("product.csv"),
    )
    .unwrap();
    let args = ReconcileArgs {
        month: Some("2026-03".into()),
        region: "us-east-1".into(),
        json: true,
        ..ReconcileArgs::default()
    };
    let report = reconcile_report(AwsRecords::Sdds(&files), &[], &[], &args, now())
        .await
        .unwrap();
    assert!(report.attention);
    let doc: serde_json::Value = serde_json::from_str(&report.text).unwrap();
    let lines: Vec<String> = doc["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap().split(':').next().unwrap().to_string())
        .collect();
    assert_eq!(
        lines,
        [3, 4, 5, 6, 7, 8, 10].map(|n| format!("daily usage feed line {n}"))
    );
    // The two good lines are AWS's records we never billed.
    assert_eq!(doc["reconciliation"]["totals"]["ExtraOnAws"]["count"], 2);
}

#[test]
fn a_missing_feed_file_says_which() {
    let err = SddsFiles::read(
        &fixture("daily_usage.csv"),
        &fixture("no-such-account.csv"),
        &fixture("product.csv"),
    )
    .unwrap_err();
    assert!(matches!(err, ReportError::Io(_)));
    assert!(err.to_string().contains("account feed file"), "{err}");
}

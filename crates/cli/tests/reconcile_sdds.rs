//! `awsmp reconcile` against the SDDS feeds: the committed Daily Usage, Account and
//! Product fixtures (bi-temporal revisions, soft deletes, a row whose account is not
//! in the account feed) read from disk, joined, and compared per account, product,
//! dimension and UTC day with our aggregated records.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::PathBuf;

use awsmp_cli::commands::reconcile::{AwsRecords, ReconcileArgs, SddsFiles, reconcile_report};
use awsmp_cli::commands::trail::ReportError;
use awsmp_core::memory::MemoryTables;
use awsmp_core::model::AggregatedStatus;
use awsmp_core::time::Instant;
use common::{LICENSE, LICENSE_2, group, json_of, march_as_json, our_records, sent};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../operate/tests/fixtures/sdds")
        .join(name)
}

/// The feeds of the fixtures `usage`, `account` and `product.csv`.
fn read_feeds(usage: &str, account: &str) -> Result<SddsFiles, ReportError> {
    SddsFiles::read(&fixture(usage), &fixture(account), &fixture("product.csv"))
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
    let id = format!("id-{account}-{dimension}-{hour}");
    tables.insert_aggregated(
        sent(
            group(license, account, dimension, hour),
            quantity,
            AggregatedStatus::Success,
            Some(id),
        ),
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
    let files = read_feeds("daily_usage.csv", "account.csv").unwrap();
    let (ours, malformed) = our_records(&tables).await;
    let args = march_as_json();

    // WHEN reconciled against the feeds
    let report = reconcile_report(AwsRecords::Sdds(&files), &ours, &malformed, &args, now())
        .await
        .unwrap();

    // THEN three discrepancies, the orphan usage line reported, the rest agreed
    assert!(report.attention);
    let doc = json_of(&report);
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

    // With each license's rate card, each discrepancy says what it is worth: 0.25 x
    // 0.0025, 7 x 0.5 and 0.5 x 0.5 USD.
    let card = |agreement: &str| awsmp_core::charges::RateCard {
        agreement_id: agreement.into(),
        start: "2026-01-01T00:00:00Z".parse().unwrap(),
        terms: awsmp_core::ports::AgreementTerms {
            currency: Some("USD".into()),
            rate_card: [("requests", "0.0025"), ("storage_gb", "0.5")]
                .into_iter()
                .map(|(d, p)| (d.to_string(), p.parse().unwrap()))
                .collect(),
            free_trial: None,
            has_upfront: false,
        },
    };
    let priced = reconcile_report(
        AwsRecords::Sdds(&files),
        &ours,
        &malformed,
        &ReconcileArgs {
            rate_cards: Some(
                [(LICENSE, card("agmt-a")), (LICENSE_2, card("agmt-b"))]
                    .into_iter()
                    .map(|(l, c)| (l.to_string(), c))
                    .collect(),
            ),
            ..args.clone()
        },
        now(),
    )
    .await
    .unwrap();
    let priced = json_of(&priced);
    let values: Vec<&str> = priced["reconciliation"]["discrepancies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["value"]["amount"].as_str().unwrap())
        .collect();
    assert_eq!(values, ["0.000625", "3.5", "0.25"]);
    assert_eq!(
        priced["reconciliation"]["discrepancy_value"]["USD"],
        "3.750625"
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
    let files = read_feeds("daily_usage_malformed.csv", "account.csv").unwrap();
    let args = march_as_json();
    let report = reconcile_report(AwsRecords::Sdds(&files), &[], &[], &args, now())
        .await
        .unwrap();
    assert!(report.attention);
    let doc = json_of(&report);
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
    let err = read_feeds("daily_usage.csv", "no-such-account.csv").unwrap_err();
    assert!(matches!(err, ReportError::Io(_)));
    assert!(err.to_string().contains("account feed file"), "{err}");
}

// ---- The same feeds read from the data feed bucket (moto's S3, the real client) ----

use awsmp_cli::commands::reconcile::s3::{SddsBucket, SddsS3Error, s3_client};
use awsmp_local_aws::MotoServer;
use common::binary::{Ran, awsmp_at};
use common::front::{Log, Seen, front, s3_access_denied};

const BUCKET: &str = "seller-data-feeds";
const PREFIX: &str = "marketplace";
/// The account moto creates every bucket in (moto ignores `ExpectedBucketOwner`).
const OWNER: &str = "123456789012";

fn text(name: &str) -> String {
    std::fs::read_to_string(fixture(name)).unwrap()
}

async fn put(client: &aws_sdk_s3::Client, key: &str, body: String) {
    client
        .put_object()
        .bucket(BUCKET)
        .key(key)
        .body(body.into_bytes().into())
        .send()
        .await
        .unwrap();
}

/// A bucket laid out as AWS Marketplace writes it, `usage` as March's Daily Usage
/// file, with what must not be read beside it: February's file (usage of March in it
/// would be an extra record), an unversioned older folder, a header-only current
/// product file (the history is in the 2010 backfill), and other feeds' folders.
async fn bucket_with(moto: &MotoServer, usage: &str) -> aws_sdk_s3::Client {
    let client = s3_client(&moto.sdk_config(), None);
    client.create_bucket().bucket(BUCKET).send().await.unwrap();
    let key = |feed: &str, y: u32, m: u32, file: &str| {
        format!("{PREFIX}/{feed}/year={y}/month={m:02}/{file}")
    };
    put(
        &client,
        &key("DailyUsageFeed_V1", 2026, 3, "data.csv"),
        text(usage),
    )
    .await;
    let header = text("daily_usage.csv").lines().next().unwrap().to_string();
    put(
        &client,
        &key("DailyUsageFeed_V1", 2026, 2, "data.csv"),
        format!(
            "{header}\n2026-03-16T00:00:00Z,2026-03-16T00:00:00Z,2026-03-16T00:00:00Z,,uf-feb,2026-03-15,prod-1,,acct-1,acct-1,us-east-1,other,Units,99,USD,0.10,rec-1,offer-1,0.100000,x\n"
        ),
    )
    .await;
    put(
        &client,
        &key("DailyUsageFeed", 2026, 3, "data.csv"),
        "not,the,current,version\n".into(),
    )
    .await;
    put(
        &client,
        &key("AccountFeed_V1", 2026, 1, "data.csv"),
        text("account.csv"),
    )
    .await;
    put(
        &client,
        &key("ProductFeed_V1", 2010, 1, "data.csv"),
        text("product.csv"),
    )
    .await;
    let product_header = text("product.csv").lines().next().unwrap().to_string();
    put(
        &client,
        &key("ProductFeed_V1", 2026, 3, "data.csv"),
        format!("{product_header}\n"),
    )
    .await;
    for m in 1..=6 {
        put(
            &client,
            &key("OfferFeed_V1", 2026, m, "data.csv"),
            "offer_id\n".into(),
        )
        .await;
    }
    client
}

/// The `--json` reconciliation of March of our table against `files`.
async fn reconciled(files: &SddsFiles, tables: &MemoryTables) -> serde_json::Value {
    let ours = our_records(tables).await.0;
    let report = reconcile_report(AwsRecords::Sdds(files), &ours, &[], &march_as_json(), now())
        .await
        .unwrap();
    json_of(&report)
}

/// The problems without the file names, which only the bucket's files carry.
fn problem_lines(doc: &serde_json::Value) -> Vec<String> {
    doc["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let p = p.as_str().unwrap();
            match p.split_once(".csv line ") {
                Some((feed, rest)) => format!(
                    "{} line {rest}",
                    feed.split(" feed ").next().unwrap().to_string() + " feed"
                ),
                None => p.to_string(),
            }
        })
        .collect()
}

/// GIVEN the fixture feeds in moto's S3 laid out as the data feed writes them (and
/// every listing paged two keys at a time), WHEN read for March through the real S3
/// client, THEN exactly the right files are read, and the reconciliation equals the
/// one of the same files given as local paths: discrepancies, totals and problems.
#[tokio::test]
async fn the_bucket_gives_the_same_discrepancies_as_the_local_files() {
    let moto = MotoServer::start().await.unwrap();
    for (usage, problems) in [("daily_usage.csv", 1), ("daily_usage_malformed.csv", 7)] {
        let client = bucket_with(&moto, usage).await;
        let tables = MemoryTables::new();
        billed(
            &tables,
            LICENSE,
            "111122223333",
            "requests",
            "2026-03-15T10",
            40,
        );
        billed(
            &tables,
            LICENSE,
            "111122223333",
            "storage_gb",
            "2026-03-15T03",
            45,
        );
        billed(
            &tables,
            LICENSE_2,
            "044455556666",
            "requests",
            "2026-03-16T05",
            3,
        );

        let bucket = SddsBucket::open(&moto.sdk_config(), BUCKET, OWNER, Some(PREFIX))
            .await
            .unwrap()
            .with_page_size(2);
        let read = std::sync::Mutex::new(Vec::new());
        let from_s3 = bucket
            .read_month((2026, 3), &|key| read.lock().unwrap().push(key.to_string()))
            .await
            .unwrap();
        assert_eq!(
            read.into_inner().unwrap(),
            [
                "marketplace/DailyUsageFeed_V1/year=2026/month=03/data.csv",
                "marketplace/AccountFeed_V1/year=2026/month=01/data.csv",
                "marketplace/ProductFeed_V1/year=2010/month=01/data.csv",
                "marketplace/ProductFeed_V1/year=2026/month=03/data.csv",
            ]
        );
        let local = read_feeds(usage, "account.csv").unwrap();
        let s3_doc = reconciled(&from_s3, &tables).await;
        let local_doc = reconciled(&local, &tables).await;
        assert_eq!(
            s3_doc["reconciliation"], local_doc["reconciliation"],
            "{usage}"
        );
        assert!(
            !s3_doc["reconciliation"]["discrepancies"]
                .as_array()
                .unwrap()
                .is_empty(),
            "{usage}: the fixtures disagree with our records somewhere"
        );
        assert_eq!(problem_lines(&s3_doc), problem_lines(&local_doc), "{usage}");
        assert_eq!(problem_lines(&s3_doc).len(), problems, "{usage}");
        assert!(
            s3_doc["problems"][0]
                .as_str()
                .unwrap()
                .contains("marketplace/DailyUsageFeed_V1/year=2026/month=03/data.csv line "),
            "{}",
            s3_doc["problems"]
        );
        assert_eq!(s3_doc["sdds_source"], "s3://seller-data-feeds/marketplace/");
        assert_eq!(local_doc["sdds_source"], "local files");

        // Empty the bucket for the next round (moto keeps it across rounds).
        let listed = client
            .list_objects_v2()
            .bucket(BUCKET)
            .send()
            .await
            .unwrap();
        for object in listed.contents() {
            client
                .delete_object()
                .bucket(BUCKET)
                .key(object.key().unwrap())
                .send()
                .await
                .unwrap();
        }
        client.delete_bucket().bucket(BUCKET).send().await.unwrap();
    }
}

/// A missing bucket, a month the feed has no file for, and a prefix with no feeds
/// each say what to do.
#[tokio::test]
async fn a_missing_bucket_month_or_feed_says_what_to_do() {
    let moto = MotoServer::start().await.unwrap();
    let config = moto.sdk_config();
    let missing = SddsBucket::open(&config, "no-such-feeds", OWNER, None)
        .await
        .unwrap_err();
    assert_eq!(
        missing,
        SddsS3Error::NoBucket {
            bucket: "no-such-feeds".into()
        }
    );
    assert!(missing.to_string().contains("--sdds-bucket"), "{missing}");

    bucket_with(&moto, "daily_usage.csv").await;
    let bucket = SddsBucket::open(&config, BUCKET, OWNER, Some("marketplace/"))
        .await
        .unwrap();
    let april = bucket.read_month((2026, 4), &|_| ()).await.unwrap_err();
    assert!(
        matches!(&april, SddsS3Error::NoMonthFile { month, .. } if month == "2026-04"),
        "{april:?}"
    );
    assert!(
        april
            .to_string()
            .contains("no DailyUsageFeed file for 2026-04 under s3://seller-data-feeds/marketplace/DailyUsageFeed_V1/"),
        "{april}"
    );

    let wrong_prefix = SddsBucket::open(&config, BUCKET, OWNER, None)
        .await
        .unwrap();
    let error = wrong_prefix
        .read_month((2026, 3), &|_| ())
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains(
            "no DailyUsageFeed feed under s3://seller-data-feeds/ (folders there: marketplace)"
        ),
        "{error}"
    );
    let error = ReportError::from(error);
    assert!(matches!(error, ReportError::Sdds(_)));
}

// ---- What the operator sees when IAM or KMS refuses (moto enforces neither) ----

/// `config` sending every call through the front at `url`.
fn through(moto: &MotoServer, url: &str) -> aws_config::SdkConfig {
    moto.sdk_config().into_builder().endpoint_url(url).build()
}

/// A front that answers every `GetObject` as S3 does when the caller lacks a
/// permission: 403 with an `AccessDenied` error document carrying `message`.
/// Everything else is forwarded, so the listing works as on AWS.
async fn denying_get_object(moto: &MotoServer, message: &'static str) -> String {
    let (url, _) = front(
        moto.endpoint(),
        Box::new(move |seen| {
            (seen.s3_operation() == "GetObject").then(|| s3_access_denied(message))
        }),
    )
    .await;
    url
}

/// The bucket lists, but reading a feed file is refused: by S3 (no s3:GetObject) or
/// by KMS (no kms:Decrypt on the feed's key). Through the real client and the real
/// error document, each error names the permission to grant and the resource.
#[tokio::test]
async fn a_refused_read_names_the_permission_to_grant() {
    let moto = MotoServer::start().await.unwrap();
    bucket_with(&moto, "daily_usage.csv").await;
    let cases = [
        (
            "Access Denied",
            "grant s3:GetObject on arn:aws:s3:::seller-data-feeds/*",
        ),
        (
            "User: arn:aws:iam::123456789012:user/operator is not authorized to perform: kms:Decrypt on the resource associated with this ciphertext because the resource does not exist in this Region, no resource-based policies allow access, or a resource-based policy explicitly denies access",
            "grant kms:Decrypt on that key",
        ),
    ];
    for (message, needle) in cases {
        let proxy = denying_get_object(&moto, message).await;
        let config = through(&moto, &proxy);
        let bucket = SddsBucket::open(&config, BUCKET, OWNER, Some(PREFIX))
            .await
            .expect("listing is allowed");
        let refused = bucket.read_month((2026, 3), &|_| ()).await.unwrap_err();
        assert!(
            matches!(refused, SddsS3Error::AccessDenied { .. }),
            "{refused:?}"
        );
        let text = refused.to_string();
        assert!(text.contains(needle), "{text}");
        assert!(
            text.contains("DailyUsageFeed_V1/year=2026/month=03/data.csv"),
            "names the object: {text}"
        );
        let error = ReportError::from(refused);
        assert!(matches!(error, ReportError::Sdds(_)));
    }
}

// ---- The bucket's owner: named on every call, a bucket of another owner refused ----

/// GIVEN the feeds in moto's S3, WHEN a month is read through a front that records
/// every request as it goes on the wire, THEN each S3 request (HeadBucket, every
/// ListObjectsV2 page, every GetObject) carries `x-amz-expected-bucket-owner` with the
/// owner given (moto itself ignores the header).
#[tokio::test]
async fn every_s3_request_names_the_expected_owner() {
    let moto = MotoServer::start().await.unwrap();
    bucket_with(&moto, "daily_usage.csv").await;
    let (url, seen) = front(moto.endpoint(), Box::new(|_| None)).await;
    let bucket = SddsBucket::open(&through(&moto, &url), BUCKET, OWNER, Some(PREFIX))
        .await
        .unwrap()
        .with_page_size(2);
    assert_eq!(bucket.owner(), OWNER);
    bucket.read_month((2026, 3), &|_| ()).await.unwrap();

    let seen = seen.lock().unwrap().clone();
    let mut operations: Vec<&str> = seen.iter().map(Seen::s3_operation).collect();
    operations.dedup();
    for operation in ["HeadBucket", "ListObjectsV2", "GetObject"] {
        assert!(operations.contains(&operation), "{operation}: {seen:?}");
    }
    assert!(!operations.contains(&"other"), "{seen:?}");
    assert!(seen.len() > 6, "pages of two keys: {seen:?}");
    for request in &seen {
        assert_eq!(
            request.header("x-amz-expected-bucket-owner"),
            Some(OWNER),
            "{} {}?{}",
            request.method,
            request.path,
            request.query
        );
    }
}

/// A front that answers as S3 does for a bucket owned by `owner`: an S3 request
/// naming another expected owner is refused (403 AccessDenied; a bare 403 to a HEAD),
/// whatever the caller's permissions. Other services' calls go to moto.
async fn owned_by(moto: &MotoServer, owner: &'static str) -> (String, Log) {
    front(
        moto.endpoint(),
        Box::new(move |seen| {
            (seen.s3_operation() != "other"
                && seen.header("x-amz-expected-bucket-owner") != Some(owner))
            .then(|| s3_access_denied("Access Denied"))
        }),
    )
    .await
}

/// GIVEN a bucket of the right name now held by another account, WHEN it is opened
/// naming our account as its owner, THEN S3's 403 comes back as a clear error naming
/// the owner we expected (and the permission, S3's other reason for a 403); named with
/// its real owner, the same bucket reads.
#[tokio::test]
async fn a_bucket_of_another_owner_is_refused_naming_the_expected_owner() {
    let moto = MotoServer::start().await.unwrap();
    bucket_with(&moto, "daily_usage.csv").await;
    let (taken_over, _) = owned_by(&moto, "999988887777").await;
    let config = through(&moto, &taken_over);

    let refused = SddsBucket::open(&config, BUCKET, OWNER, Some(PREFIX))
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, SddsS3Error::AccessDenied { operation: "HeadBucket", expected_owner: Some(o), .. } if o == OWNER),
        "{refused:?}"
    );
    let text = ReportError::from(refused).to_string();
    assert!(
        text.contains("the bucket is not owned by account 123456789012"),
        "{text}"
    );
    assert!(text.contains("--sdds-bucket-owner"), "{text}");
    assert!(
        text.contains("grant s3:ListBucket on arn:aws:s3:::seller-data-feeds"),
        "{text}"
    );

    let files = SddsBucket::open(&config, BUCKET, "999988887777", Some(PREFIX))
        .await
        .unwrap()
        .read_month((2026, 3), &|_| ())
        .await
        .unwrap();
    assert_eq!(files.daily_usage.len(), 1);
}

// ---- The owner by default: the main stack's account, through the shipped binary ----

/// `awsmp ARGS` with every AWS call sent to `endpoint` (moto, or a front on it).
async fn awsmp(endpoint: &str, args: &[&str]) -> Ran {
    let home = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("awsmp-sdds-owner-home");
    awsmp_at(endpoint, &home, args).await
}

/// GIVEN a main stack in moto (whose stack id names account 123456789012) and the
/// feeds' bucket, WHEN `awsmp reconcile --sdds-bucket` runs with no owner given, THEN
/// every S3 call names the stack's account: a bucket that account owns is read, one
/// another account holds is refused naming the owner expected; `--sdds-bucket-owner`
/// overrides it (12 digits, checked), and without a stack it must be given.
#[tokio::test]
async fn reconcile_holds_the_bucket_to_the_main_stacks_account() {
    let moto = MotoServer::start().await.unwrap();
    bucket_with(&moto, "daily_usage.csv").await;
    let db = moto.dynamodb();
    awsmp_local_aws::tables::create_usage_table(&db, "awsmp-prod-usage-test")
        .await
        .unwrap();
    awsmp_local_aws::tables::create_aggregated_table(&db, "awsmp-prod-aggregated-usage-test")
        .await
        .unwrap();
    let body = serde_json::json!({
        "Resources": {"Marker": {"Type": "AWS::CloudFormation::WaitConditionHandle"}},
        "Outputs": {
            "UsageTableName": {"Value": "awsmp-prod-usage-test"},
            "AggregatedUsageTableName": {"Value": "awsmp-prod-aggregated-usage-test"},
        },
    });
    let created = aws_sdk_cloudformation::Client::new(&moto.sdk_config())
        .create_stack()
        .stack_name("awsmp-main-prod-test")
        .template_body(body.to_string())
        .send()
        .await
        .unwrap();
    assert!(
        created.stack_id().unwrap().contains(":123456789012:stack/"),
        "{created:?}"
    );
    let reconcile = |extra: &[&'static str]| -> Vec<&'static str> {
        let mut args = vec![
            "--stage",
            "test",
            "--product-code",
            "prod",
            "--region",
            "us-east-1",
            "reconcile",
            "--month",
            "2026-03",
            "--sdds-bucket",
            BUCKET,
            "--sdds-prefix",
            PREFIX,
        ];
        args.extend_from_slice(extra);
        args
    };

    let (ours, log) = owned_by(&moto, OWNER).await;
    let ran = awsmp(&ours, &reconcile(&[])).await;
    assert!(
        ran.code == 0 || ran.code == 3,
        "{}\n{}",
        ran.stdout,
        ran.stderr
    );
    assert!(
        ran.stdout.contains("s3://seller-data-feeds/marketplace/"),
        "{}",
        ran.stdout
    );
    let s3: Vec<Seen> = log
        .lock()
        .unwrap()
        .iter()
        .filter(|s| s.s3_operation() != "other")
        .cloned()
        .collect();
    assert!(s3.len() >= 6, "{s3:?}");
    assert!(
        s3.iter()
            .all(|s| s.header("x-amz-expected-bucket-owner") == Some(OWNER)),
        "{s3:?}"
    );

    let (theirs, _) = owned_by(&moto, "999988887777").await;
    let refused = awsmp(&theirs, &reconcile(&[])).await;
    assert_eq!(refused.code, 1, "{}\n{}", refused.stdout, refused.stderr);
    assert!(
        refused
            .stderr
            .contains("or the bucket is not owned by account 123456789012"),
        "{}",
        refused.stderr
    );
    let named = awsmp(
        &theirs,
        &reconcile(&["--sdds-bucket-owner", "999988887777"]),
    )
    .await;
    assert!(
        named.code == 0 || named.code == 3,
        "{}\n{}",
        named.stdout,
        named.stderr
    );

    let bad = awsmp(&ours, &reconcile(&["--sdds-bucket-owner", "12345"])).await;
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    assert!(bad.stderr.contains("12 digits"), "{}", bad.stderr);

    let no_stack = awsmp(
        &ours,
        &[
            "--region",
            "us-east-1",
            "--usage-table",
            "awsmp-prod-usage-test",
            "--aggregated-table",
            "awsmp-prod-aggregated-usage-test",
            "reconcile",
            "--month",
            "2026-03",
            "--sdds-bucket",
            BUCKET,
        ],
    )
    .await;
    assert_eq!(no_stack.code, 2, "{}", no_stack.stderr);
    assert!(
        no_stack.stderr.contains("pass --sdds-bucket-owner ACCOUNT"),
        "{}",
        no_stack.stderr
    );
}

//! `Meter` against a real usage table on the moto emulator, through the real SDK
//! client: a retry writes nothing twice, the same event id with other usage is a
//! conflict, a row the aggregator would reject is never written, and what is written
//! is a row the pipeline counts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use awsmp_aws::DynamoUsageStore;
use awsmp_core::guardrails::{GuardrailContext, validate_row};
use awsmp_core::model::{GroupKey, ReasonCode};
use awsmp_core::ports::UsageStore;
use awsmp_core::time::HourBucket;
use awsmp_local_aws::MotoServer;
use awsmp_local_aws::tables::create_usage_table;
use awsmp_usage::{Meter, Recorded, Usage, UsageError};
use chrono::{Duration, Utc};

const LICENSE: &str = "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0";
const TABLE: &str = "awsmp-prod-usage-test";

#[tokio::test]
async fn records_once_per_event_id_and_only_what_the_aggregator_counts() {
    let moto = MotoServer::start().await.expect("moto (run `make venv`)");
    let db = moto.dynamodb();
    create_usage_table(&db, TABLE).await.unwrap();
    let meter = Meter::new(&moto.sdk_config(), TABLE, "prodcode");

    let at = Utc::now() - Duration::minutes(5);
    let usage = Usage::new(LICENSE, "111122223333", "api_calls", 7, "req-1")
        .at(at)
        .tag("team", "search");
    assert_eq!(meter.record(&usage).await.unwrap(), Recorded::Written);
    // The retry after a lost response: same event id, nothing written.
    assert_eq!(
        meter.record(&usage).await.unwrap(),
        Recorded::AlreadyWritten
    );
    // The same id with another quantity: a conflict naming both, nothing written.
    let other = Usage::new(LICENSE, "111122223333", "api_calls", 8, "req-1")
        .at(at)
        .tag("team", "search");
    match meter.record(&other).await.unwrap_err() {
        UsageError::Conflict(conflict) => {
            assert_eq!(conflict.recorded.as_ref().map(|r| r.quantity), Some(7));
            assert_eq!(conflict.this.quantity, 8);
        }
        other => panic!("expected a conflict, got {other}"),
    }

    let future = Usage::new(LICENSE, "111122223333", "api_calls", 1, "req-2")
        .at(Utc::now() + Duration::hours(2));
    match meter.record(&future).await.unwrap_err() {
        UsageError::Rejected { reason, hint } => {
            assert_eq!(reason, ReasonCode::TimestampInFuture);
            assert!(hint.contains("UTC"), "{hint}");
        }
        other => panic!("expected a rejection, got {other}"),
    }
    let missing = Meter::new(&moto.sdk_config(), "no-such-table", "prodcode");
    let err = missing.record(&usage).await.unwrap_err();
    assert!(matches!(err, UsageError::Store(_)), "{err}");
    assert!(!err.is_retryable(), "{err}");

    // Exactly one row, and it is one the aggregator counts as written.
    let store = DynamoUsageStore::new(db, TABLE);
    let key = GroupKey {
        license_arn: LICENSE.into(),
        customer_aws_account_id: "111122223333".into(),
        dimension: "api_calls".into(),
        hour: HourBucket::containing(at),
    };
    let rows = store.group_rows(&key).await.unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    let valid = validate_row(&rows[0], &GuardrailContext::new(Utc::now(), "prodcode")).unwrap();
    assert_eq!(valid.quantity, 7);
    assert_eq!(valid.allocations.unwrap()[0].tags[0].value, "search");
}

/// The entitlement answer from a real subscribers table, read in its own Region.
#[tokio::test]
async fn entitlements_answer_from_the_subscribers_table_in_its_region() {
    use awsmp_core::model::{Subscriber, SubscriptionStatus};
    use awsmp_core::ports::SubscriberStore;
    use awsmp_local_aws::tables::create_subscribers_table;
    use awsmp_usage::{EntitlementError, Entitlements, UsageBilling};

    let moto = MotoServer::start().await.expect("moto (run `make venv`)");
    let east = aws_sdk_dynamodb::Client::new(&moto.sdk_config_in("us-east-1"));
    create_subscribers_table(&east, "awsmp-subscribers-test")
        .await
        .unwrap();
    let store = awsmp_aws::DynamoSubscriberStore::new(east, "awsmp-subscribers-test");
    let mut row = Subscriber::new(LICENSE, "111122223333");
    row.subscription_status = Some(SubscriptionStatus::Active);
    store.put_lifecycle(&row, Utc::now()).await.unwrap();

    // A service in another Region reads the table where it lives.
    let entitlements = Entitlements::new(
        &moto.sdk_config_in("eu-west-1"),
        "awsmp-subscribers-test",
        "us-east-1",
    );
    let answer = entitlements
        .get(LICENSE, Some("111122223333"))
        .await
        .unwrap();
    assert_eq!(answer.usage, UsageBilling::Billed);
    assert_eq!(
        entitlements.get(LICENSE, None).await.unwrap(),
        answer,
        "by the license's only account"
    );
    let unknown = entitlements
        .get(LICENSE, Some("444455556666"))
        .await
        .unwrap_err();
    assert!(
        matches!(unknown, EntitlementError::Unknown { .. }),
        "{unknown}"
    );
}

//! deprovision-cleanup over the in-memory subscribers store, driven by AWS's scheduled
//! event shape (`tests/fixtures/scheduled-event.json`). The same run is checked against
//! moto in `tests/moto.rs`.

use std::sync::Arc;

use aws_lambda_events::eventbridge::EventBridgeEvent;
use awsmp_core::clock::ManualClock;
use awsmp_core::memory::{MemorySubscriberStore, StoreOp};
use awsmp_core::model::{AgreementStatus, Subscriber, SubscriptionStatus};
use awsmp_core::ports::{PortError, SubscriberStore};
use awsmp_core::time::{Instant, parse_usage_timestamp};

use super::*;

#[path = "../../subscription/tests/support/deprovisioning.rs"]
mod deprovisioning;
use deprovisioning::licenses_in_index;

fn t(s: &str) -> Instant {
    parse_usage_timestamp(s).unwrap()
}

fn scheduled(time: Option<&str>) -> LambdaEvent<EventBridgeEvent> {
    let path = format!(
        "{}/tests/fixtures/scheduled-event.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    match time {
        Some(time) => json["time"] = serde_json::Value::String(time.to_string()),
        None => {
            json.as_object_mut().unwrap().remove("time");
        }
    }
    LambdaEvent::new(
        serde_json::from_value(json).unwrap(),
        lambda_runtime::Context::default(),
    )
}

fn row(license: &str, status: SubscriptionStatus, expiry: Option<&str>) -> Subscriber {
    let mut row = Subscriber::new(license, "845735284135");
    row.product_code = Some("prod-abc".into());
    row.agreement_id = Some("agmt-1".into());
    row.agreement_status = Some(AgreementStatus::Inactive);
    row.subscription_status = Some(status);
    row.deprovisioning_expiry = expiry.map(t);
    row.subscription_event_at = expiry.map(|e| t(e) - chrono::Duration::hours(1));
    row.version = 2;
    row
}

fn state_with(store: Arc<dyn SubscriberStore>, clock_at: &str) -> State {
    State {
        config: Arc::new(Config {
            subscribers_table: "awsmp-subscribers-test".into(),
        }),
        subscribers: store,
        clock: Arc::new(ManualClock::new(t(clock_at))),
    }
}

/// Rows A (window ended 13:00), B (ends exactly 13:15), C (ends 13:30), D active,
/// E already inactive.
fn seeded() -> MemorySubscriberStore {
    let store = MemorySubscriberStore::new();
    let at = t("2026-11-30T12:00:00Z");
    use SubscriptionStatus as S;
    store.insert(
        row("l-a", S::Deprovisioning, Some("2026-11-30T13:00:00Z")),
        at,
    );
    store.insert(
        row("l-b", S::Deprovisioning, Some("2026-11-30T13:15:00Z")),
        at,
    );
    store.insert(
        row("l-c", S::Deprovisioning, Some("2026-11-30T13:30:00Z")),
        at,
    );
    store.insert(row("l-d", S::Active, None), at);
    store.insert(row("l-e", S::Inactive, Some("2026-11-30T09:00:00Z")), at);
    store
}

fn status_of(store: &MemorySubscriberStore, license: &str) -> Option<SubscriptionStatus> {
    store
        .rows()
        .into_iter()
        .find(|r| r.license_arn == license)
        .and_then(|r| r.subscription_status)
}

#[tokio::test]
async fn closes_exactly_the_rows_whose_window_has_passed() {
    let store = seeded();
    let state = state_with(Arc::new(store.clone()), "2026-12-31T00:00:00Z");
    // The event's time (13:15:00) is "now", not the clock.
    let report = handler(&state, scheduled(Some("2026-11-30T13:15:00Z")))
        .await
        .unwrap();
    assert_eq!(
        report,
        DeprovisionReport {
            now: "2026-11-30T13:15:00Z".into(),
            deprovisioning: 3,
            closed: 2,
            still_open: 1,
            changed_meanwhile: 0,
        }
    );
    use SubscriptionStatus as S;
    assert_eq!(status_of(&store, "l-a"), Some(S::Inactive));
    assert_eq!(status_of(&store, "l-b"), Some(S::Inactive));
    assert_eq!(status_of(&store, "l-c"), Some(S::Deprovisioning));
    assert_eq!(status_of(&store, "l-d"), Some(S::Active));
    assert_eq!(status_of(&store, "l-e"), Some(S::Inactive));
    // Only the lifecycle status moved: the expiry stays as the record of the window.
    let closed = store
        .rows()
        .into_iter()
        .find(|r| r.license_arn == "l-a")
        .unwrap();
    assert_eq!(
        closed.deprovisioning_expiry,
        Some(t("2026-11-30T13:00:00Z"))
    );
    assert_eq!(closed.agreement_status, Some(AgreementStatus::Inactive));
    assert_eq!(closed.version, 3);
    // The closed rows left the index; a second run at the same time does nothing.
    assert_eq!(licenses_in_index(&store).await, ["l-c"]);
    let again = handler(&state, scheduled(Some("2026-11-30T13:15:00Z")))
        .await
        .unwrap();
    assert_eq!((again.closed, again.still_open), (0, 1));
}

#[tokio::test]
async fn without_an_event_time_the_clock_is_now() {
    let store = seeded();
    let state = state_with(Arc::new(store.clone()), "2026-11-30T13:45:00Z");
    let report = handler(&state, scheduled(None)).await.unwrap();
    assert_eq!(report.now, "2026-11-30T13:45:00Z");
    assert_eq!(report.closed, 3);
}

#[tokio::test]
async fn replaying_an_earlier_run_closes_nothing_early() {
    let store = seeded();
    let state = state_with(Arc::new(store.clone()), "2026-12-31T00:00:00Z");
    let report = handler(&state, scheduled(Some("2026-11-30T12:59:59Z")))
        .await
        .unwrap();
    assert_eq!((report.closed, report.still_open), (0, 3));
}

#[tokio::test]
async fn a_failing_row_does_not_stop_the_others_and_is_retried_next_run() {
    let store = seeded();
    store.fail_next(
        StoreOp::SubscriberPutLifecycle,
        PortError::Transient {
            operation: "UpdateItem",
            message: "ThrottlingException".into(),
        },
    );
    let state = state_with(Arc::new(store.clone()), "2026-11-30T14:00:00Z");
    let error = run(&state, t("2026-11-30T14:00:00Z")).await.unwrap_err();
    let CleanupError::RowsFailed { report, failures } = &error else {
        panic!("expected RowsFailed, got {error:?}");
    };
    assert_eq!((report.closed, failures.len()), (2, 1));
    assert_eq!(failures[0].license_arn, "l-a");
    let diagnostic = lambda_runtime::Diagnostic::from(error.clone());
    assert_eq!(diagnostic.error_type, "DeprovisionCleanupIncomplete");
    assert!(diagnostic.error_message.contains("l-a/845735284135"));
    // The next run picks up the row that failed.
    let report = run(&state, t("2026-11-30T14:15:00Z")).await.unwrap();
    assert_eq!(report.closed, 1);
    assert!(store.deprovisioning().await.unwrap().is_empty());
}

#[tokio::test]
async fn an_unreadable_index_fails_the_run() {
    let store = seeded();
    store.fail_next(
        StoreOp::SubscriberDeprovisioning,
        PortError::Failed {
            operation: "Query",
            message: "ResourceNotFoundException".into(),
        },
    );
    let state = state_with(Arc::new(store), "2026-11-30T14:00:00Z");
    let error = run(&state, t("2026-11-30T14:00:00Z")).await.unwrap_err();
    assert!(matches!(error, CleanupError::Index(_)));
    assert_eq!(
        lambda_runtime::Diagnostic::from(error).error_type,
        "DeprovisioningIndexUnavailable"
    );
}

#[path = "../../subscription/tests/support/racing.rs"]
mod racing;

/// Runs at 14:00 over row l-a (window ended 13:00) while another writer applies
/// `their_change` to it just before our write, so our write meets a version conflict.
async fn run_raced_by(
    their_change: fn(&mut Subscriber),
) -> (MemorySubscriberStore, DeprovisionReport) {
    let inner = MemorySubscriberStore::new();
    inner.insert(
        row(
            "l-a",
            SubscriptionStatus::Deprovisioning,
            Some("2026-11-30T13:00:00Z"),
        ),
        t("2026-11-30T12:00:00Z"),
    );
    let racing = racing::RacingStore::new(
        inner.clone(),
        1,
        Box::new(move |store, row, _| {
            Box::pin(async move {
                let (license, account) = (&row.license_arn, &row.customer_aws_account_id);
                let mut theirs = store.get(license, account).await.unwrap().unwrap();
                their_change(&mut theirs);
                theirs
            })
        }),
    );
    let state = state_with(Arc::new(racing), "2026-11-30T14:00:00Z");
    let report = run(&state, t("2026-11-30T14:00:00Z")).await.unwrap();
    (inner, report)
}

#[tokio::test]
async fn a_concurrent_agreement_write_is_kept_and_the_row_still_closes() {
    let (inner, report) = run_raced_by(|r: &mut Subscriber| {
        r.agreement_status = Some(AgreementStatus::Inactive);
        r.agreement_event_at = Some(parse_usage_timestamp("2026-11-30T13:05:00Z").unwrap());
    })
    .await;
    assert_eq!(report.closed, 1);
    let stored = inner.rows().remove(0);
    assert_eq!(
        stored.subscription_status,
        Some(SubscriptionStatus::Inactive)
    );
    assert_eq!(stored.agreement_event_at, Some(t("2026-11-30T13:05:00Z")));
}

#[tokio::test]
async fn a_row_closed_by_someone_else_meanwhile_is_not_written_again() {
    let (inner, report) = run_raced_by(|r: &mut Subscriber| {
        r.subscription_status = Some(SubscriptionStatus::Inactive);
    })
    .await;
    assert_eq!((report.closed, report.changed_meanwhile), (0, 1));
    assert_eq!(inner.rows()[0].version, 3);
}

//! agreement-reconcile over the memory Agreement API and subscribers table: its
//! configuration, a run that repairs, and a run that leaves a drift failing the
//! invocation with every unresolved row named.

use std::sync::Arc;

use awsmp_core::clock::ManualClock;
use awsmp_core::lifecycle::MarketplaceEvent;
use awsmp_core::lifecycle::reconcile::DriftAction;
use awsmp_core::memory::agreement_contract::{BUYER, LICENSE, PRODUCT, now, record, seed};
use awsmp_core::memory::{AgreementOp, MemoryAgreementApi, MemorySubscriberStore};
use awsmp_core::model::SubscriptionStatus;
use awsmp_core::ports::AgreementStatus;
use chrono::TimeDelta;

use super::*;

fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let vars: Vec<(String, String)> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |k| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
}

#[test]
fn the_products_are_read_once_and_a_bad_pair_is_named() {
    let config = Config::from_lookup(&env(&[
        ("SUBSCRIBERS_TABLE", "t"),
        ("RECONCILE_PRODUCTS", "prod-a=code1, prod-b=code2"),
    ]))
    .unwrap();
    assert_eq!(config.products.len(), 2);
    assert_eq!(config.products[1].product_code, "code2");
    for bad in ["code1", "prod-a=", "abc=code", " , "] {
        let err = Config::from_lookup(&env(&[
            ("SUBSCRIBERS_TABLE", "t"),
            ("RECONCILE_PRODUCTS", bad),
        ]))
        .unwrap_err()
        .to_string();
        assert!(err.contains("RECONCILE_PRODUCTS"), "{bad}: {err}");
    }
    let err = Config::from_lookup(&env(&[])).unwrap_err().to_string();
    assert!(
        err.contains("SUBSCRIBERS_TABLE") && err.contains("RECONCILE_PRODUCTS"),
        "every problem at once: {err}"
    );
}

fn state(api: &MemoryAgreementApi, store: &MemorySubscriberStore) -> State {
    State {
        config: Arc::new(Config {
            subscribers_table: "t".into(),
            products: parse_products(&format!("{PRODUCT}=code")).unwrap(),
        }),
        subscribers: Arc::new(store.clone()),
        agreements: Arc::new(api.clone()),
        clock: Arc::new(ManualClock::new(now())),
    }
}

/// The API holding one active agreement, started two days ago, whose License Updated
/// never arrived; the function's state over both.
fn one_active_agreement() -> (MemoryAgreementApi, MemorySubscriberStore, State) {
    let (api, store) = (MemoryAgreementApi::new(), MemorySubscriberStore::new());
    let start = now() - TimeDelta::days(2);
    let mut agreement = seed("agmt-1");
    agreement.start = start;
    api.seed(record(&agreement, AgreementStatus::Active, start));
    let state = state(&api, &store);
    (api, store, state)
}

#[tokio::test]
async fn a_run_repairs_and_one_that_leaves_a_drift_fails_naming_it() {
    let (api, store, state) = one_active_agreement();

    let report = run(&state).await.unwrap();
    assert_eq!(report.repaired(), 1);
    let row = store.get(LICENSE, BUYER).await.unwrap().unwrap();
    assert_eq!(row.subscription_status, Some(SubscriptionStatus::Active));

    // Deprovisioned (the event arrived), yet the API still says active: reported.
    let event = MarketplaceEvent::LicenseDeprovisioned {
        license_arn: LICENSE.into(),
        account: BUYER.into(),
        product_code: Some("code".into()),
        agreement_id: "agmt-1".into(),
        time: now() - TimeDelta::minutes(5),
    };
    let next = awsmp_core::lifecycle::apply(Some(&row), &event);
    store
        .put_lifecycle(next.row().unwrap(), now())
        .await
        .unwrap();
    let err = run(&state).await.unwrap_err();
    assert_eq!(err.error_type(), "SubscriberDriftUnresolved");
    assert!(err.to_string().contains(LICENSE), "{err}");
    let RunError::Unresolved { report } = err else {
        panic!()
    };
    assert_eq!(report.drifts[0].action, DriftAction::Reported);

    api.throttle_next(AgreementOp::Search);
    let err = run(&state).await.unwrap_err();
    assert_eq!(err.error_type(), "AgreementsUnreadable");
}

#[tokio::test]
async fn a_rate_card_that_cannot_be_read_fails_the_run_after_the_rows_are_repaired() {
    let (api, store, state) = one_active_agreement();
    api.fail_next(
        AgreementOp::Terms,
        awsmp_core::ports::AgreementError::AccessDenied {
            operation: "GetAgreementTerms",
            message: "not authorized".into(),
        },
    );

    let err = run(&state).await.unwrap_err();
    assert_eq!(err.error_type(), "RateCardsUnread");
    let text = err.to_string();
    assert!(
        text.contains("agmt-1") && text.contains("GetAgreementTerms"),
        "{text}"
    );
    let row = store.get(LICENSE, BUYER).await.unwrap().unwrap();
    assert_eq!(row.subscription_status, Some(SubscriptionStatus::Active));
    assert!(row.rate_card.is_none());

    let report = run(&state).await.unwrap();
    assert_eq!(report.rate_cards.refreshed, 1);
    assert!(
        store
            .get(LICENSE, BUYER)
            .await
            .unwrap()
            .unwrap()
            .current_rate_card()
            .is_some()
    );
}

/// The `AgreementDriftMetricFilter`'s pattern (`{ $.path = "value" }`) and metric
/// value (`$.path`), as the events template declares them.
fn drift_metric_filter() -> ((String, String), String) {
    let template = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../template-events.yaml"),
    )
    .unwrap();
    let filter = &template[template.find("  AgreementDriftMetricFilter:").unwrap()..];
    let field = |name: &str| {
        let at = filter.find(&format!("{name}: ")).unwrap() + name.len() + 2;
        filter[at..].lines().next().unwrap().trim().to_string()
    };
    let pattern = field("FilterPattern");
    let inner = pattern.trim_matches(['\'', '{', '}', ' ']);
    let (path, value) = inner.split_once(" = ").unwrap();
    let path = path.trim().trim_start_matches("$.").to_string();
    let value = value.trim().trim_matches('"').to_string();
    let metric = field("MetricValue").trim_start_matches("$.").to_string();
    ((path, value), metric)
}

/// The value at a dotted `path` of a JSON log line.
fn at_path<'a>(line: &'a serde_json::Value, path: &str) -> &'a serde_json::Value {
    path.split('.').fold(line, |v, key| &v[key])
}

#[test]
fn the_drift_alarms_metric_filter_counts_each_repair_from_the_runs_summary_line() {
    let ((path, want), metric) = drift_metric_filter();
    let (_api, _store, state) = one_active_agreement();
    let logged = std::sync::Arc::new(std::sync::Mutex::new(Vec::<u8>::new()));
    let writer = {
        let logged = logged.clone();
        move || Sink(logged.clone())
    };
    let subscriber = awsmp_lambda::logging::json_subscriber(None, Some("INFO"), writer);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    tracing::subscriber::with_default(subscriber, || {
        runtime.block_on(async {
            run(&state).await.unwrap();
            run(&state).await.unwrap();
        })
    });
    let text = String::from_utf8(logged.lock().unwrap().clone()).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // What CloudWatch Logs would count: the metric value of each matching line.
    let counted: Vec<u64> = lines
        .iter()
        .filter(|l| at_path(l, &path) == want.as_str())
        .map(|l| at_path(l, &metric).as_u64().expect("a number"))
        .collect();
    assert_eq!(counted, vec![1, 0], "one repair, then none: {text}");
    let repaired: Vec<&serde_json::Value> = lines
        .iter()
        .filter(|l| l["fields"]["message"] == "subscriber row disagrees with the Agreement API")
        .collect();
    assert_eq!(repaired.len(), 1, "{text}");
    assert_eq!(repaired[0]["fields"]["license"], LICENSE);
    assert_eq!(repaired[0]["fields"]["kind"], "LicenseUpdatedLost");
    assert_eq!(repaired[0]["fields"]["action"], "Repaired");
}

/// A log writer into shared bytes.
struct Sink(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Sink {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

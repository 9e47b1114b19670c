//! `SdkMeteringApi` and `SdkCustomerResolver` against the Marketplace simulator: the
//! Concurrent-Agreements wire shape, results mapped to input order, every error
//! class, one attempt per call, unprocessed records, and ResolveCustomer outcomes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use awsmp_aws::{SdkCustomerResolver, SdkMeteringApi};
use awsmp_core::model::{Allocation, GroupKey, Tag};
use awsmp_core::ports::{
    CONNECT_FAILURE, CustomerResolver, MeteringApi, MeteringError, MeteringRecord, RecordVerdict,
    ResolveError, UnclearAnswer,
};
use awsmp_local_aws::SimServer;
use awsmp_local_aws::marketplace_sim::{
    AuthFailure, ClockSetting, EntitlementKey, EntitlementSeed, FaultKind, FaultSpec, FaultTarget,
    LossMode, ProductSeed, SimConfig, ThrottleConfig, TokenSeed,
};
use common::*;

const PRODUCT: &str = "prodcode123";
const NOW: &str = "2026-11-30T12:30:00Z";

fn config() -> SimConfig {
    SimConfig {
        throttle: ThrottleConfig {
            enabled: false,
            ..ThrottleConfig::default()
        },
        clock: ClockSetting::Fixed { at: t(NOW) },
        products: vec![ProductSeed {
            product_code: PRODUCT.into(),
            dimensions: vec!["requests".into(), "storage".into()],
        }],
        entitlements: vec![EntitlementSeed {
            license_arn: LICENSE.into(),
            customer_aws_account_id: ACCOUNT.into(),
            product_code: PRODUCT.into(),
        }],
        ..SimConfig::default()
    }
}

fn metering_record(dimension: &str, h: &str, quantity: i64) -> MeteringRecord {
    MeteringRecord {
        key: group(dimension, h),
        product_code: PRODUCT.into(),
        quantity,
        allocations: None,
    }
}

async fn api() -> (SimServer, SdkMeteringApi) {
    let sim = SimServer::start(config()).await.unwrap();
    let api = SdkMeteringApi::new(sim.metering_client());
    (sim, api)
}

fn fault(kind: FaultKind) -> FaultSpec {
    FaultSpec {
        kind,
        count: 1,
        operation: FaultTarget::BatchMeterUsage,
    }
}

#[tokio::test]
async fn a_batch_bills_per_license_and_maps_results_to_input_order() {
    let (sim, api) = api().await;
    let mut tagged = metering_record("storage", "2026-11-30T11", 5);
    tagged.allocations = Some(vec![
        Allocation {
            quantity: 3,
            tags: vec![Tag {
                key: "team".into(),
                value: "a".into(),
            }],
        },
        Allocation {
            quantity: 2,
            tags: vec![],
        },
    ]);
    let records = vec![
        metering_record("requests", "2026-11-30T10", 7),
        tagged,
        metering_record("requests", "2026-11-30T11", 0),
    ];
    let verdicts = api.batch_meter_usage(&records).await.unwrap();
    assert_eq!(verdicts.len(), 3);
    let ledger = sim.handle().ledger();
    assert_eq!(ledger.records.len(), 3);
    assert!(
        ledger.rejected_requests.is_empty(),
        "{:?}",
        ledger.rejected_requests
    );
    for (record, verdict) in records.iter().zip(&verdicts) {
        let RecordVerdict::Success { metering_record_id } = verdict else {
            panic!("{verdict:?}");
        };
        let billed = ledger
            .records
            .iter()
            .find(|b| &b.metering_record_id == metering_record_id)
            .unwrap();
        // Billed per license + account, at the hour's start, with the quantity sent.
        assert_eq!(billed.license_arn, record.key.license_arn);
        assert_eq!(
            billed.customer_aws_account_id,
            record.key.customer_aws_account_id
        );
        assert_eq!(billed.dimension, record.key.dimension);
        assert_eq!(billed.timestamp, record.key.hour.start());
        assert_eq!(i64::from(billed.quantity), record.quantity);
        assert_eq!(billed.product_code, PRODUCT);
    }
    let storage = ledger
        .records
        .iter()
        .find(|b| b.dimension == "storage")
        .unwrap();
    assert_eq!(storage.allocations.len(), 2);

    // The same group again with another quantity: first write wins.
    let again = api
        .batch_meter_usage(&[metering_record("requests", "2026-11-30T10", 8)])
        .await
        .unwrap();
    assert!(
        matches!(again[0], RecordVerdict::DuplicateRecord { .. }),
        "{again:?}"
    );
    assert_eq!(sim.handle().ledger().records.len(), 3);
}

#[tokio::test]
async fn a_revoked_license_is_customer_not_subscribed() {
    let (sim, api) = api().await;
    sim.handle()
        .revoke(&EntitlementKey {
            license_arn: LICENSE.into(),
            customer_aws_account_id: ACCOUNT.into(),
        })
        .unwrap();
    let verdicts = api
        .batch_meter_usage(&[metering_record("requests", "2026-11-30T10", 1)])
        .await
        .unwrap();
    assert_eq!(verdicts, vec![RecordVerdict::CustomerNotSubscribed]);
}

#[tokio::test]
async fn a_throttled_call_is_throttled_after_exactly_one_attempt() {
    let (sim, api) = api().await;
    sim.handle()
        .inject_fault(fault(FaultKind::Throttling))
        .unwrap();
    let err = api
        .batch_meter_usage(&[metering_record("requests", "2026-11-30T10", 1)])
        .await
        .unwrap_err();
    assert!(matches!(err, MeteringError::Throttled(_)), "{err:?}");
    // The SDK did not retry behind the submitter's back.
    assert_eq!(sim.handle().stats().batch_meter_usage_calls, 1);
    assert!(sim.handle().ledger().records.is_empty());

    // The quota itself: a burst of one, then throttled.
    sim.handle()
        .set_throttle(ThrottleConfig {
            enabled: true,
            rate_per_second: 0.0001,
            burst: 1,
        })
        .unwrap();
    api.batch_meter_usage(&[metering_record("requests", "2026-11-30T10", 1)])
        .await
        .unwrap();
    let err = api
        .batch_meter_usage(&[metering_record("requests", "2026-11-30T11", 1)])
        .await
        .unwrap_err();
    assert!(matches!(err, MeteringError::Throttled(_)), "{err:?}");
}

#[tokio::test]
async fn an_unprocessed_record_comes_back_as_unprocessed_in_its_place() {
    let (sim, api) = api().await;
    sim.handle()
        .inject_fault(fault(FaultKind::Unprocessed { records: 1 }))
        .unwrap();
    let records = vec![
        metering_record("requests", "2026-11-30T10", 1),
        metering_record("requests", "2026-11-30T11", 2),
    ];
    let verdicts = api.batch_meter_usage(&records).await.unwrap();
    assert!(
        matches!(verdicts[0], RecordVerdict::Success { .. }),
        "{verdicts:?}"
    );
    assert_eq!(verdicts[1], RecordVerdict::Unprocessed);
    let ledger = sim.handle().ledger();
    assert_eq!(ledger.records.len(), 1);
    assert_eq!(ledger.records[0].quantity, 1);
    // Retried, it is billed.
    let retried = api.batch_meter_usage(&records[1..]).await.unwrap();
    assert!(
        matches!(retried[0], RecordVerdict::Success { .. }),
        "{retried:?}"
    );
}

#[tokio::test]
async fn only_unprocessed_records_are_unprocessed_an_unclear_answer_is_ambiguous() {
    let (sim, api) = api().await;
    let cases = [
        (
            FaultKind::OmitResults { records: 1 },
            UnclearAnswer::Missing,
        ),
        (
            FaultKind::UnknownStatus { records: 1 },
            UnclearAnswer::UnknownStatus("Unknown".into()),
        ),
        (
            FaultKind::WrongEcho { records: 1 },
            UnclearAnswer::NotEchoed,
        ),
    ];
    for (hour, (kind, why)) in ["2026-11-30T09", "2026-11-30T10", "2026-11-30T11"]
        .into_iter()
        .zip(cases)
    {
        // GIVEN a call Marketplace processes in full whose answer leaves the last record
        // without a definite verdict
        sim.handle().inject_fault(fault(kind)).unwrap();
        let records = vec![
            metering_record("requests", hour, 1),
            metering_record("storage", hour, 2),
        ];
        let verdicts = api.batch_meter_usage(&records).await.unwrap();
        // THEN that record may have been billed (it was): ambiguous, not unprocessed
        assert!(
            matches!(verdicts[0], RecordVerdict::Success { .. }),
            "{kind:?}: {verdicts:?}"
        );
        assert_eq!(verdicts[1], RecordVerdict::Ambiguous { why }, "{kind:?}");
        // AND a re-send of exactly what was sent is answered for what was billed
        let again = api.batch_meter_usage(&records[1..]).await.unwrap();
        assert!(
            matches!(
                again[0],
                RecordVerdict::DuplicateRecord { .. } | RecordVerdict::Success { .. }
            ),
            "{kind:?}: {again:?}"
        );
    }
    let ledger = sim.handle().ledger();
    assert_eq!(ledger.records.len(), 6);
    assert!(ledger.conflicts.is_empty(), "{:?}", ledger.conflicts);
}

#[tokio::test]
async fn request_level_errors_map_to_their_classes() {
    let (sim, api) = api().await;
    let one = [metering_record("requests", "2026-11-30T10", 1)];

    let err = api
        .batch_meter_usage(&[metering_record("no-such-dimension", "2026-11-30T10", 1)])
        .await
        .unwrap_err();
    assert!(
        matches!(&err, MeteringError::Validation { name, .. } if name == "InvalidUsageDimensionException"),
        "{err:?}"
    );
    // Outside the 24 h window.
    let err = api
        .batch_meter_usage(&[metering_record("requests", "2026-11-29T11", 1)])
        .await
        .unwrap_err();
    assert!(
        matches!(&err, MeteringError::Validation { name, .. } if name == "TimestampOutOfBoundsException"),
        "{err:?}"
    );
    // A quantity the API cannot carry never leaves the process.
    let err = api
        .batch_meter_usage(&[metering_record("requests", "2026-11-30T10", 1 << 40)])
        .await
        .unwrap_err();
    assert!(
        matches!(&err, MeteringError::Validation { name, .. } if name == "ValidationException"),
        "{err:?}"
    );

    sim.handle()
        .inject_fault(fault(FaultKind::InternalError))
        .unwrap();
    let err = api.batch_meter_usage(&one).await.unwrap_err();
    assert!(matches!(err, MeteringError::Transient(_)), "{err:?}");

    sim.handle()
        .inject_fault(fault(FaultKind::Disabled))
        .unwrap();
    let err = api.batch_meter_usage(&one).await.unwrap_err();
    assert!(matches!(err, MeteringError::Disabled(_)), "{err:?}");

    assert!(sim.handle().ledger().records.is_empty());
}

/// A response lost after the call was processed (billed) is an ambiguous outcome:
/// `Transient`, never a verdict. The record is billed all the same, and a re-send
/// of the same quantity is answered `DuplicateRecord` with the original id.
#[tokio::test]
async fn a_response_lost_after_billing_is_transient_and_the_resend_is_a_duplicate() {
    for mode in [LossMode::Http500, LossMode::Drop] {
        let (sim, api) = api().await;
        sim.handle()
            .inject_fault(fault(FaultKind::LoseResponse { mode }))
            .unwrap();
        let one = [metering_record("requests", "2026-11-30T11", 9)];

        let err = api.batch_meter_usage(&one).await.unwrap_err();
        assert!(
            matches!(err, MeteringError::Transient(_)),
            "{mode:?}: {err:?}"
        );
        let ledger = sim.handle().ledger();
        assert_eq!(
            ledger.records.len(),
            1,
            "{mode:?}: billed despite the lost answer"
        );
        assert_eq!(ledger.records[0].quantity, 9);
        assert_eq!(ledger.records[0].license_arn, LICENSE);

        let verdicts = api.batch_meter_usage(&one).await.unwrap();
        assert_eq!(
            verdicts,
            vec![RecordVerdict::DuplicateRecord {
                metering_record_id: Some(ledger.records[0].metering_record_id.clone())
            }],
            "{mode:?}"
        );
        assert_eq!(
            sim.handle().ledger().records.len(),
            1,
            "{mode:?}: billed once"
        );
        assert!(sim.handle().ledger().conflicts.is_empty(), "{mode:?}");
        assert_eq!(sim.handle().stats().lost_responses, 1, "{mode:?}");
    }
}

#[tokio::test]
async fn a_connection_refused_before_the_request_is_written_is_refused_not_ambiguous() {
    let port = awsmp_local_aws::moto::free_port().unwrap();
    let config = awsmp_local_aws::test_sdk_config(&format!("http://127.0.0.1:{port}"), "us-east-1");
    let api = SdkMeteringApi::new(aws_sdk_marketplacemetering::Client::new(&config));
    let err = api
        .batch_meter_usage(&[metering_record("requests", "2026-11-30T10", 1)])
        .await
        .unwrap_err();
    assert!(
        matches!(&err, MeteringError::Refused { name, .. } if name == CONNECT_FAILURE),
        "{err:?}"
    );
}

/// Every authentication, authorization and signature refusal, answered on the wire
/// with the status AWS gives it, reads as refused before processing: nothing billed.
#[tokio::test]
async fn auth_and_signature_refusals_on_the_wire_are_definite() {
    let (sim, api) = api().await;
    let one = [metering_record("requests", "2026-11-30T10", 1)];
    for exception in AuthFailure::ALL {
        sim.handle()
            .inject_fault(fault(FaultKind::Unauthorized { exception }))
            .unwrap();
        let err = api.batch_meter_usage(&one).await.unwrap_err();
        assert!(
            matches!(&err, MeteringError::Refused { name, .. } if name == exception.wire_name()),
            "{exception:?}: {err:?}"
        );
    }
    assert!(sim.handle().ledger().records.is_empty());
    // The refusals over, the same record bills as a first send.
    let verdicts = api.batch_meter_usage(&one).await.unwrap();
    assert!(
        matches!(verdicts[0], RecordVerdict::Success { .. }),
        "{verdicts:?}"
    );
}

#[tokio::test]
async fn resolve_customer_maps_tokens_to_customers_or_token_errors() {
    let sim = SimServer::start(config()).await.unwrap();
    let seed = |token: &str, issued: &str| TokenSeed {
        token: token.into(),
        license_arn: LICENSE.into(),
        customer_aws_account_id: ACCOUNT.into(),
        product_code: PRODUCT.into(),
        issued_at: Some(t(issued)),
    };
    sim.handle()
        .seed_token(seed("fresh", "2026-11-30T12:00:00Z"))
        .unwrap();
    sim.handle()
        .seed_token(seed("stale", "2026-11-30T07:00:00Z"))
        .unwrap();
    let resolver = SdkCustomerResolver::new(sim.metering_client());

    let customer = resolver.resolve("fresh").await.unwrap();
    assert_eq!(customer.license_arn, LICENSE);
    assert_eq!(customer.customer_aws_account_id, ACCOUNT);
    assert_eq!(customer.product_code, PRODUCT);
    // Reusable until it expires.
    assert_eq!(resolver.resolve("fresh").await.unwrap(), customer);
    assert_eq!(
        resolver.resolve("stale").await.unwrap_err(),
        ResolveError::ExpiredToken
    );
    assert_eq!(
        resolver.resolve("unknown").await.unwrap_err(),
        ResolveError::InvalidToken
    );

    sim.handle()
        .inject_fault(FaultSpec {
            kind: FaultKind::Disabled,
            count: 1,
            operation: FaultTarget::ResolveCustomer,
        })
        .unwrap();
    let err = resolver.resolve("fresh").await.unwrap_err();
    assert!(
        matches!(err, ResolveError::Unavailable(ref m) if m.contains("DisabledApiException")),
        "{err:?}"
    );
}

#[test]
fn the_wire_record_is_concurrent_agreements_shaped() {
    let record = awsmp_aws::metering::usage_record(&MeteringRecord {
        key: GroupKey {
            hour: hour("2026-11-30T10"),
            ..group("requests", "2026-11-30T10")
        },
        product_code: PRODUCT.into(),
        quantity: 42,
        allocations: None,
    })
    .unwrap();
    assert_eq!(record.license_arn(), Some(LICENSE));
    assert_eq!(record.customer_aws_account_id(), Some(ACCOUNT));
    assert_eq!(
        record.timestamp().secs(),
        t("2026-11-30T10:00:00Z").timestamp()
    );
    assert_eq!(record.quantity(), Some(42));
    assert!(record.usage_allocations().is_empty());
}

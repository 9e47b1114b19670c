//! The BatchMeterUsage quota and injected faults through the real SDK client (retries
//! disabled, so every throttle and failure surfaces), and the configurable latency.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use aws_sdk_marketplacemetering::error::ProvideErrorMetadata;
use aws_sdk_marketplacemetering::error::SdkError;
use aws_sdk_marketplacemetering::types::UsageRecordResultStatus;
use awsmp_marketplace_sim::{
    FaultKind, FaultSpec, FaultTarget, LossMode, RunningSim, SimConfig, ThrottleConfig,
};
use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinSet;

#[tokio::test]
async fn the_default_quota_throttles_a_burst_over_ten_per_second() {
    // The default configuration: 10 requests/second, burst 10, on.
    let sim = start(SimConfig {
        throttle: ThrottleConfig::default(),
        ..config()
    })
    .await;
    let client = client(&sim).await;

    let mut calls = JoinSet::new();
    for _ in 0..25 {
        let client = client.clone();
        calls.spawn(async move { meter(&client, vec![record(1, "requests", 1)]).await });
    }
    let mut throttled = 0;
    let mut accepted = 0;
    while let Some(joined) = calls.join_next().await {
        match joined.expect("task ran") {
            Ok(_) => accepted += 1,
            Err(err) => {
                let (err, status) = service_error(err);
                assert!(err.is_throttling_exception(), "{err:?}");
                assert_eq!(status, 400);
                throttled += 1;
            }
        }
    }

    assert!(throttled >= 1, "25 calls at once must exceed a burst of 10");
    assert!(accepted >= 10, "the burst of 10 is served");
    let stats = sim.handle().stats();
    assert_eq!(stats.throttled, throttled);
    assert_eq!(
        stats.errors_by_type.get("ThrottlingException"),
        Some(&throttled)
    );
    assert_eq!(stats.batch_meter_usage_calls, 25);
}

#[tokio::test]
async fn a_configured_quota_throttles_exactly_past_its_burst() {
    let sim = start(config()).await;
    // One token per ~3 hours: nothing refills during the test.
    sim.handle()
        .set_throttle(ThrottleConfig {
            enabled: true,
            rate_per_second: 0.0001,
            burst: 3,
        })
        .expect("quota set");
    let client = client(&sim).await;

    for minute in 0..3 {
        meter(&client, vec![record(minute, "requests", 1)])
            .await
            .expect("within the burst");
    }
    let (err, _) = meter_err(&client, vec![record(5, "requests", 1)]).await;

    assert!(err.is_throttling_exception(), "{err:?}");
    assert!(err.message().expect("message").contains("Rate exceeded"));
    // ResolveCustomer is not under the BatchMeterUsage quota.
    let resolve = resolve(&client, "unknown")
        .await
        .expect_err("unknown token");
    assert_eq!(resolve.code(), Some("InvalidTokenException"));
    // Turning the quota off lets calls through again.
    sim.handle()
        .set_throttle(ThrottleConfig {
            enabled: false,
            ..ThrottleConfig::default()
        })
        .expect("quota off");
    meter(&client, vec![record(5, "requests", 1)])
        .await
        .expect("quota off");
}

#[tokio::test]
async fn injected_internal_errors_fail_with_http_500_then_stop() {
    let sim = start(config()).await;
    inject(
        &sim,
        FaultKind::InternalError,
        2,
        FaultTarget::BatchMeterUsage,
    );
    let client = client(&sim).await;

    for _ in 0..2 {
        let (err, status) = meter_err(&client, vec![record(1, "requests", 1)]).await;
        assert!(err.is_internal_service_error_exception(), "{err:?}");
        assert_eq!(status, 500);
    }
    assert!(
        sim.handle().ledger().records.is_empty(),
        "failed calls bill nothing"
    );

    meter(&client, vec![record(1, "requests", 1)])
        .await
        .expect("third call succeeds");
    assert_eq!(sim.handle().ledger().records.len(), 1);
}

#[tokio::test]
async fn injected_throttling_and_disabled_api_fire_in_order() {
    let sim = start(config()).await;
    for kind in [FaultKind::Throttling, FaultKind::Disabled] {
        inject(&sim, kind, 1, FaultTarget::Any);
    }
    let client = client(&sim).await;

    let (first, status) = meter_err(&client, vec![record(1, "requests", 1)]).await;
    assert!(first.is_throttling_exception(), "{first:?}");
    assert_eq!(status, 400);
    let (second, status) = meter_err(&client, vec![record(1, "requests", 1)]).await;
    assert!(second.is_disabled_api_exception(), "{second:?}");
    assert_eq!(status, 400);
    meter(&client, vec![record(1, "requests", 1)])
        .await
        .expect("no faults left");

    let stats = sim.handle().stats();
    assert_eq!(stats.throttled, 0, "injected throttling is not the quota");
    assert_eq!(stats.errors_by_type.get("ThrottlingException"), Some(&1));
    assert_eq!(stats.errors_by_type.get("DisabledApiException"), Some(&1));
}

#[tokio::test]
async fn invalid_faults_are_refused() {
    let sim = start(config()).await;
    let zero = sim.handle().inject_fault(FaultSpec {
        kind: FaultKind::Throttling,
        count: 0,
        operation: FaultTarget::Any,
    });
    assert!(zero.is_err());
    let unprocessed_resolve = sim.handle().inject_fault(FaultSpec {
        kind: FaultKind::Unprocessed { records: 1 },
        count: 1,
        operation: FaultTarget::ResolveCustomer,
    });
    assert!(unprocessed_resolve.is_err());
    assert!(sim.handle().pending_faults().is_empty());
}

#[tokio::test]
async fn latency_delays_every_answer_by_at_least_the_configured_time() {
    let sim = start(config()).await;
    let client = client(&sim).await;
    // Warm the connection so the measured call is the simulator's delay, not set-up.
    meter(&client, vec![record(1, "requests", 1)])
        .await
        .expect("warm-up");
    sim.handle().set_latency(Duration::from_millis(300));

    let started = Instant::now();
    meter_ok(&client, vec![record(2, "requests", 1)]).await;

    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(sim.handle().latency(), Duration::from_millis(300));
}

/// Queues `count` lost BatchMeterUsage answers in `mode`.
fn lose(sim: &RunningSim, mode: LossMode, count: u32) {
    inject(
        sim,
        FaultKind::LoseResponse { mode },
        count,
        FaultTarget::BatchMeterUsage,
    );
}

#[tokio::test]
async fn a_lost_response_in_500_mode_bills_then_answers_http_500() {
    let sim = start(config()).await;
    lose(&sim, LossMode::Http500, 1);
    let client = client(&sim).await;

    let (err, status) = meter_err(&client, vec![record(1, "requests", 7)]).await;
    assert!(err.is_internal_service_error_exception(), "{err:?}");
    assert_eq!(status, 500);
    let ledger = sim.handle().ledger();
    assert_eq!(ledger.records.len(), 1, "the call was processed in full");
    assert_eq!(ledger.records[0].quantity, 7);
    assert!(
        ledger.rejected_requests.is_empty(),
        "a processed call is not a refused one"
    );

    // The re-send finds the record billed.
    let out = meter(&client, vec![record(1, "requests", 7)])
        .await
        .expect("no faults left");
    assert_eq!(
        first_status(&out),
        Some(&UsageRecordResultStatus::DuplicateRecord)
    );
    assert_eq!(
        out.results()[0].metering_record_id(),
        Some(ledger.records[0].metering_record_id.as_str())
    );
    let stats = sim.handle().stats();
    assert_eq!(stats.lost_responses, 1);
    assert_eq!(stats.records_by_status.get("Success"), Some(&1));
    assert_eq!(stats.records_by_status.get("DuplicateRecord"), Some(&1));
}

#[tokio::test]
async fn a_lost_response_in_drop_mode_bills_then_closes_the_connection() {
    let sim = start(config()).await;
    lose(&sim, LossMode::Drop, 2);
    let client = client(&sim).await;

    for _ in 0..2 {
        let err = meter(&client, vec![record(1, "requests", 3)])
            .await
            .expect_err("no answer");
        assert!(
            matches!(
                err,
                SdkError::DispatchFailure(_) | SdkError::ResponseError(_)
            ),
            "a dropped connection is not a service answer: {err:?}"
        );
    }
    let ledger = sim.handle().ledger();
    assert_eq!(
        ledger.records.len(),
        1,
        "billed once, answered duplicate once"
    );
    let stats = sim.handle().stats();
    assert_eq!(stats.lost_responses, 2);
    assert_eq!(stats.records_by_status.get("DuplicateRecord"), Some(&1));
    assert!(sim.handle().pending_faults().is_empty());
    meter(&client, vec![record(1, "requests", 3)])
        .await
        .expect("answered again once the fault is used up");
}

#[tokio::test]
async fn a_dropped_connection_writes_no_status_line() {
    let sim = start(config()).await;
    lose(&sim, LossMode::Drop, 1);
    let body = format!(
        "{{\"UsageRecords\":[{{\"Timestamp\":{},\"Dimension\":\"requests\",\"Quantity\":1,\
         \"CustomerAWSAccountId\":\"{ACCOUNT}\",\"LicenseArn\":\"{LICENSE}\"}}]}}",
        now().timestamp() - 60
    );
    let request = format!(
        "POST / HTTP/1.1\r\nhost: {}\r\nx-amz-target: AWSMPMeteringService.BatchMeterUsage\r\n\
         content-type: application/x-amz-json-1.1\r\ncontent-length: {}\r\n\r\n{body}",
        sim.addr(),
        body.len()
    );
    let mut stream = tokio::net::TcpStream::connect(sim.addr())
        .await
        .expect("connect");
    stream
        .write_all(request.as_bytes())
        .await
        .expect("request sent");
    let mut answer = Vec::new();
    // EOF or a reset: either way, nothing must have been written.
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer))
        .await
        .expect("the server closes the connection");
    assert!(
        answer.is_empty(),
        "expected no bytes, got {:?}",
        String::from_utf8_lossy(&answer)
    );
    assert_eq!(sim.handle().ledger().records.len(), 1, "processed");
}

#[tokio::test]
async fn lost_responses_apply_to_their_operation_only() {
    let sim = start(config()).await;
    inject(
        &sim,
        FaultKind::LoseResponse {
            mode: LossMode::Http500,
        },
        1,
        FaultTarget::ResolveCustomer,
    );
    let client = client(&sim).await;
    meter(&client, vec![record(1, "requests", 1)])
        .await
        .expect("BatchMeterUsage is not affected");
    let err = resolve(&client, "unknown").await.expect_err("lost");
    assert_eq!(err.code(), Some("InternalServiceErrorException"));
    assert_eq!(sim.handle().stats().lost_responses, 1);
}

#[tokio::test]
async fn garbled_answers_bill_the_call_and_leave_its_last_results_unclear() {
    let sim = start(config()).await;
    let admin = sim.endpoint_url();
    // Queued over the admin API, as the simulation and the e2e tests do.
    for kind in ["omit_results", "unknown_status", "wrong_echo"] {
        let (status, pending) = post_json(
            &format!("{admin}/admin/faults"),
            &serde_json::json!({"kind": kind, "records": 1}),
        )
        .await;
        assert_eq!(status, 200, "{pending}");
    }
    let client = client(&sim).await;
    // One batch per hour, so no record is a duplicate of another.
    let batch = |hours_ago: i64| {
        vec![
            record(60 * hours_ago, "requests", 4),
            record(60 * hours_ago, "storage_gb", 5),
        ]
    };

    // omit_results: the last record is in neither list.
    let out = meter_ok(&client, batch(1)).await;
    assert_eq!(out.results().len(), 1);
    assert!(out.unprocessed_records().is_empty());
    assert_eq!(
        out.results()[0].usage_record().map(|r| r.dimension()),
        Some("requests")
    );
    // unknown_status: the last result's Status is not one the model knows.
    let out = meter_ok(&client, batch(2)).await;
    assert_eq!(
        statuses(&out),
        vec![
            Some(UsageRecordResultStatus::Success),
            Some(UsageRecordResultStatus::from("Unknown")),
        ]
    );
    // wrong_echo: the last result echoes another quantity than sent.
    let out = meter_ok(&client, batch(3)).await;
    let echoed: Vec<Option<i32>> = out
        .results()
        .iter()
        .map(|r| r.usage_record().and_then(|u| u.quantity()))
        .collect();
    assert_eq!(echoed, vec![Some(4), Some(6)]);
    assert_eq!(statuses(&out)[1], Some(UsageRecordResultStatus::Success));

    // Every record was processed (billed) as usual, whatever the answer said.
    let ledger = sim.handle().ledger();
    assert_eq!(ledger.records.len(), 6);
    assert!(
        ledger
            .records
            .iter()
            .all(|r| r.quantity == 4 || r.quantity == 5)
    );
    assert_eq!(sim.handle().stats().garbled_results, 3);
    assert!(sim.handle().pending_faults().is_empty());
}

#[tokio::test]
async fn garbling_faults_need_a_record_and_batch_meter_usage() {
    let sim = start(config()).await;
    for kind in [
        FaultKind::OmitResults { records: 0 },
        FaultKind::UnknownStatus { records: 0 },
        FaultKind::WrongEcho { records: 0 },
    ] {
        let refused = sim.handle().inject_fault(FaultSpec {
            kind,
            count: 1,
            operation: FaultTarget::BatchMeterUsage,
        });
        assert!(refused.is_err(), "{kind:?}");
    }
    let refused = sim.handle().inject_fault(FaultSpec {
        kind: FaultKind::OmitResults { records: 1 },
        count: 1,
        operation: FaultTarget::Any,
    });
    assert!(refused.is_err());
    assert!(sim.handle().pending_faults().is_empty());
}

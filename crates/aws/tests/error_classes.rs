//! The adapters' error classes on scripted SDK answers (aws-smithy-mocks), for the
//! sequences moto cannot produce: throttling and timeout codes, 5xx answers, transport
//! failures, final errors, and a throttle that the SDK's retry or ours gets past.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::operation::get_item::GetItemOutput;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsOutput;
use aws_sdk_dynamodb::operation::update_item::UpdateItemOutput;
use aws_sdk_marketplacemetering::operation::batch_meter_usage::BatchMeterUsageOutput;
use aws_sdk_marketplacemetering::types::{UsageRecordResult, UsageRecordResultStatus};
use aws_sdk_sqs::operation::send_message_batch::SendMessageBatchOutput;
use aws_sdk_sqs::types::SendMessageBatchResultEntry;
use aws_smithy_mocks::{Rule, RuleMode, mock, mock_client};
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::HttpRequest;
use aws_smithy_runtime_api::client::result::ConnectorError;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_runtime_api::http::StatusCode;
use aws_smithy_types::body::SdkBody;
use aws_smithy_types::retry::{ErrorKind, RetryConfig};
use aws_smithy_types::timeout::TimeoutConfig;
use awsmp_aws::{
    DynamoAggregatedStore, DynamoSubscriberStore, DynamoUsageStore, SdkMeteringApi, SqsWorkQueue,
};
use awsmp_core::model::Subscriber;
use awsmp_core::ports::{
    AggregatedStore, IngestOutcome, MeteringApi, MeteringError, MeteringRecord, NewUsageRow,
    PortError, RecordVerdict, SubscriberStore, UsageStore, WorkMessage, WorkQueue,
};
use common::*;

/// Every code the SDK's default classifier retries, and the ones we add: transient on
/// every DynamoDB and SQS adapter. `(status, code)`; `None` is an answer with no body.
const TRANSIENT_ANSWERS: &[(u16, Option<&str>)] = &[
    (400, Some("RequestTimeout")),
    (400, Some("RequestTimeoutException")),
    (400, Some("ThrottledException")),
    (400, Some("ThrottlingException")),
    (400, Some("Throttling")),
    (400, Some("ProvisionedThroughputExceededException")),
    (400, Some("RequestLimitExceeded")),
    (400, Some("TooManyRequestsException")),
    (400, Some("TransactionInProgressException")),
    (400, Some("TransactionConflictException")),
    (500, Some("InternalServerError")),
    (503, Some("ServiceUnavailable")),
    (500, None),
    (502, None),
    (503, None),
    (504, None),
];

/// Answers that retrying cannot change: reported, never transient.
const FINAL_ANSWERS: &[(u16, Option<&str>)] = &[
    (400, Some("ValidationException")),
    (400, Some("AccessDeniedException")),
    (400, Some("ResourceNotFoundException")),
    (400, Some("UnrecognizedClientException")),
    (400, Some("SerializationException")),
    (400, None),
    (403, None),
];

/// A service's JSON error answer, as the awsJson protocols send it.
fn answer(status: u16, code: Option<&str>, content_type: &'static str) -> HttpResponse {
    let body = match code {
        Some(code) => SdkBody::from(format!(
            r#"{{"__type":"com.amazonaws.scripted#{code}","message":"scripted {code}"}}"#
        )),
        None => SdkBody::empty(),
    };
    let mut response = HttpResponse::new(StatusCode::try_from(status).unwrap(), body);
    response.headers_mut().insert("content-type", content_type);
    response
}

fn dynamo_answer(status: u16, code: Option<&str>) -> HttpResponse {
    answer(status, code, "application/x-amz-json-1.0")
}

/// A `TransactionCanceledException` with these cancellation reasons, as DynamoDB sends it.
fn canceled(reasons: &[&str]) -> HttpResponse {
    let reasons: Vec<String> = reasons
        .iter()
        .map(|code| format!(r#"{{"Code":"{code}","Message":"scripted {code}"}}"#))
        .collect();
    let body = format!(
        r#"{{"__type":"com.amazonaws.dynamodb.v20120810#TransactionCanceledException","message":"Transaction cancelled, please refer cancellation reasons for specific reasons","CancellationReasons":[{}]}}"#,
        reasons.join(",")
    );
    let mut response = HttpResponse::new(StatusCode::try_from(400).unwrap(), SdkBody::from(body));
    response
        .headers_mut()
        .insert("content-type", "application/x-amz-json-1.0");
    response
}

/// The SDK's standard retries with `attempts` attempts and no real backoff.
fn retries(attempts: u32) -> RetryConfig {
    RetryConfig::standard()
        .with_max_attempts(attempts)
        .with_initial_backoff(Duration::from_millis(1))
        .with_max_backoff(Duration::from_millis(5))
}

fn dynamo(rule: &Rule, attempts: u32) -> aws_sdk_dynamodb::Client {
    mock_client!(aws_sdk_dynamodb, RuleMode::Sequential, &[rule], |conf| {
        conf.retry_config(retries(attempts))
    })
}

fn sqs(rule: &Rule, attempts: u32) -> aws_sdk_sqs::Client {
    mock_client!(aws_sdk_sqs, RuleMode::Sequential, &[rule], |conf| {
        conf.retry_config(retries(attempts))
    })
}

fn metering(rule: &Rule, attempts: u32) -> aws_sdk_marketplacemetering::Client {
    mock_client!(
        aws_sdk_marketplacemetering,
        RuleMode::Sequential,
        &[rule],
        |conf| conf.retry_config(retries(attempts))
    )
}

fn describe(status: u16, code: Option<&str>) -> String {
    format!("{status} {}", code.unwrap_or("(no body)"))
}

fn assert_transient(case: &str, result: Result<impl std::fmt::Debug, PortError>) {
    match result {
        Err(PortError::Transient { .. }) => {}
        other => panic!("{case}: expected a transient failure, got {other:?}"),
    }
}

fn assert_failed(case: &str, result: Result<impl std::fmt::Debug, PortError>) {
    match result {
        Err(PortError::Failed { .. }) => {}
        other => panic!("{case}: expected a reported failure, got {other:?}"),
    }
}

fn new_row(event_id: &str) -> NewUsageRow {
    NewUsageRow {
        license_arn: LICENSE.into(),
        customer_aws_account_id: ACCOUNT.into(),
        dimension: "requests".into(),
        timestamp: t("2026-11-30T10:20:00Z"),
        quantity: 3,
        allocations: None,
        product_code: None,
        event_id: event_id.into(),
        timestamp_defaulted: false,
    }
}

// ---- DynamoDB ----

#[tokio::test]
async fn dynamodb_reads_class_every_retryable_answer_as_transient() {
    for &(status, code) in TRANSIENT_ANSWERS {
        let case = describe(status, code);
        let rule = mock!(aws_sdk_dynamodb::Client::get_item)
            .sequence()
            .http_response(move || dynamo_answer(status, code))
            .build();
        let client = dynamo(&rule, 1);

        let subscribers = DynamoSubscriberStore::new(client.clone(), SUBSCRIBERS);
        assert_transient(&case, subscribers.get(LICENSE, ACCOUNT).await);
        assert_eq!(rule.num_calls(), 1, "{case}: one attempt, one answer");

        let rule = mock!(aws_sdk_dynamodb::Client::get_item)
            .sequence()
            .http_response(move || dynamo_answer(status, code))
            .times(2)
            .build();
        let client = dynamo(&rule, 1);
        let usage = DynamoUsageStore::new(client.clone(), USAGE);
        assert_transient(&case, usage.get_row(LICENSE, "111122223333#x").await);
        let aggregated = DynamoAggregatedStore::new(client, AGGREGATED).claiming_rows_of(USAGE);
        assert_transient(
            &case,
            aggregated.get(&group("requests", "2026-11-30T10")).await,
        );
    }
}

#[tokio::test]
async fn dynamodb_final_answers_are_reported_not_retried() {
    for &(status, code) in FINAL_ANSWERS {
        let case = describe(status, code);
        // GIVEN the SDK's retries on: a final answer is not retried by it either.
        let rule = mock!(aws_sdk_dynamodb::Client::get_item)
            .sequence()
            .http_response(move || dynamo_answer(status, code))
            .repeatedly()
            .build();
        let store = DynamoSubscriberStore::new(dynamo(&rule, 3), SUBSCRIBERS);
        assert_failed(&case, store.get(LICENSE, ACCOUNT).await);
        assert_eq!(rule.num_calls(), 1, "{case}: the SDK sent it once");
    }
}

#[tokio::test]
async fn dynamodb_throttling_then_success_is_retried_by_the_sdk() {
    // GIVEN two throttling answers, then the item's answer.
    let rule = mock!(aws_sdk_dynamodb::Client::get_item)
        .sequence()
        .http_response(|| dynamo_answer(400, Some("ProvisionedThroughputExceededException")))
        .http_response(|| dynamo_answer(400, Some("ThrottlingException")))
        .output(|| GetItemOutput::builder().build())
        .build();
    let store = DynamoSubscriberStore::new(dynamo(&rule, 3), SUBSCRIBERS);
    // WHEN the port reads, THEN the SDK's retries reach the answer.
    assert_eq!(store.get(LICENSE, ACCOUNT).await.unwrap(), None);
    assert_eq!(rule.num_calls(), 3);
}

#[tokio::test]
async fn dynamodb_throttling_past_the_sdk_retries_is_transient_and_our_retry_succeeds() {
    // GIVEN throttling for every attempt the SDK makes (3), then an answer.
    let rule = mock!(aws_sdk_dynamodb::Client::get_item)
        .sequence()
        .http_response(|| dynamo_answer(400, Some("ThrottledException")))
        .times(2)
        .http_response(|| dynamo_answer(400, Some("RequestTimeout")))
        .output(|| GetItemOutput::builder().build())
        .build();
    let store = DynamoSubscriberStore::new(dynamo(&rule, 3), SUBSCRIBERS);
    // WHEN the port reads, THEN it says try again (the caller or SQS retries) ...
    assert_transient("3 throttles", store.get(LICENSE, ACCOUNT).await);
    assert_eq!(rule.num_calls(), 3);
    // ... AND the retry gets the answer.
    assert_eq!(store.get(LICENSE, ACCOUNT).await.unwrap(), None);
}

#[tokio::test]
async fn a_failed_condition_stays_an_answer_and_a_throttled_conditional_write_is_transient() {
    let conditional = |status: u16, code: &'static str| {
        mock!(aws_sdk_dynamodb::Client::update_item)
            .sequence()
            .http_response(move || dynamo_answer(status, Some(code)))
            .build()
    };
    let row = Subscriber::new(LICENSE, ACCOUNT);
    let now = t("2026-11-30T10:20:00Z");

    let rule = conditional(400, "ConditionalCheckFailedException");
    let store = DynamoSubscriberStore::new(dynamo(&rule, 3), SUBSCRIBERS);
    assert!(!store.put_lifecycle(&row, now).await.unwrap());
    assert_eq!(rule.num_calls(), 1);

    for code in ["ThrottlingException", "TransactionConflictException"] {
        let rule = conditional(400, code);
        let store = DynamoSubscriberStore::new(dynamo(&rule, 1), SUBSCRIBERS);
        assert_transient(code, store.put_lifecycle(&row, now).await);
    }
    let rule = conditional(400, "ValidationException");
    let store = DynamoSubscriberStore::new(dynamo(&rule, 1), SUBSCRIBERS);
    assert_failed("ValidationException", store.put_lifecycle(&row, now).await);

    // A 503 answer, then the write going through: the SDK's retry.
    let rule = mock!(aws_sdk_dynamodb::Client::update_item)
        .sequence()
        .http_response(|| dynamo_answer(503, None))
        .output(|| UpdateItemOutput::builder().build())
        .build();
    let store = DynamoSubscriberStore::new(dynamo(&rule, 3), SUBSCRIBERS);
    assert!(store.put_lifecycle(&row, now).await.unwrap());
    assert_eq!(rule.num_calls(), 2);
}

#[tokio::test]
async fn ingestion_transactions_keep_their_cancellation_answers() {
    let now = t("2026-11-30T10:21:00Z");
    let put = |response: fn() -> HttpResponse| {
        let rule = mock!(aws_sdk_dynamodb::Client::transact_write_items)
            .sequence()
            .http_response(response)
            .build();
        let store = DynamoUsageStore::new(dynamo(&rule, 1), USAGE);
        (rule, store)
    };

    // The row or its marker exists: written before (no item returned to compare: the
    // retry it most likely is).
    let (_rule, store) = put(|| canceled(&["ConditionalCheckFailed", "None"]));
    assert_eq!(
        store.put_row(&new_row("e-1"), now).await.unwrap(),
        IngestOutcome::Duplicate
    );
    // A concurrent transaction holds an item: try again.
    let (_rule, store) = put(|| canceled(&["TransactionConflict", "None"]));
    assert_transient(
        "TransactionConflict",
        store.put_row(&new_row("e-1"), now).await,
    );
    // Too large: retrying cannot help.
    let (_rule, store) = put(|| canceled(&["ValidationError", "None"]));
    assert_failed("ValidationError", store.put_row(&new_row("e-1"), now).await);
    // Throttled or timed out before the transaction ran.
    for code in [
        "ThrottlingException",
        "ProvisionedThroughputExceededException",
        "RequestTimeout",
        "TransactionInProgressException",
    ] {
        let rule = mock!(aws_sdk_dynamodb::Client::transact_write_items)
            .sequence()
            .http_response(move || dynamo_answer(400, Some(code)))
            .build();
        let store = DynamoUsageStore::new(dynamo(&rule, 1), USAGE);
        assert_transient(code, store.put_row(&new_row("e-1"), now).await);
    }
    let (_rule, store) = put(|| dynamo_answer(400, Some("ValidationException")));
    assert_failed(
        "ValidationException",
        store.put_row(&new_row("e-1"), now).await,
    );

    // A conflict, a throttle, then the write: the SDK retries only the throttle, our
    // retry gets past the conflict.
    let rule = mock!(aws_sdk_dynamodb::Client::transact_write_items)
        .sequence()
        .http_response(|| canceled(&["TransactionConflict", "None"]))
        .http_response(|| dynamo_answer(400, Some("ThrottlingException")))
        .output(|| TransactWriteItemsOutput::builder().build())
        .build();
    let store = DynamoUsageStore::new(dynamo(&rule, 3), USAGE);
    assert_transient("conflict", store.put_row(&new_row("e-2"), now).await);
    assert_eq!(
        rule.num_calls(),
        1,
        "the SDK does not retry a canceled transaction"
    );
    assert_eq!(
        store.put_row(&new_row("e-2"), now).await.unwrap(),
        IngestOutcome::Created
    );
    assert_eq!(rule.num_calls(), 3);
}

// ---- transport failures ----

/// An HTTP client whose every request fails the way `failure` says.
#[derive(Debug, Clone, Copy)]
enum Transport {
    Io,
    Timeout,
    User,
    Other(Option<ErrorKind>),
    /// Never answers (the SDK's attempt timeout ends it).
    Hang,
}

impl HttpConnector for Transport {
    fn call(&self, _request: HttpRequest) -> HttpConnectorFuture {
        let source = || -> BoxError { format!("scripted {self:?}").into() };
        let error = match *self {
            Transport::Io => ConnectorError::io(source()),
            Transport::Timeout => ConnectorError::timeout(source()),
            Transport::User => ConnectorError::user(source()),
            Transport::Other(kind) => ConnectorError::other(source(), kind),
            Transport::Hang => return HttpConnectorFuture::new(std::future::pending()),
        };
        HttpConnectorFuture::ready(Err(error))
    }
}

impl HttpClient for Transport {
    fn http_connector(
        &self,
        _settings: &HttpConnectorSettings,
        _components: &RuntimeComponents,
    ) -> SharedHttpConnector {
        SharedHttpConnector::new(*self)
    }
}

fn dynamo_over(transport: Transport) -> aws_sdk_dynamodb::Client {
    let conf = aws_sdk_dynamodb::Config::builder()
        .with_test_defaults_v2()
        .http_client(transport)
        .retry_config(retries(1))
        .timeout_config(
            TimeoutConfig::builder()
                .operation_attempt_timeout(Duration::from_millis(50))
                .build(),
        )
        .build();
    aws_sdk_dynamodb::Client::from_conf(conf)
}

#[tokio::test]
async fn transport_failures_are_classed_as_the_sdk_classes_them() {
    let transient = [
        Transport::Io,
        Transport::Timeout,
        Transport::Hang,
        Transport::Other(Some(ErrorKind::TransientError)),
    ];
    for transport in transient {
        let store = DynamoSubscriberStore::new(dynamo_over(transport), SUBSCRIBERS);
        assert_transient(&format!("{transport:?}"), store.get(LICENSE, ACCOUNT).await);
    }
    // A request the connector refuses (a bad endpoint, an unknown failure) does not
    // get better by retrying; the SDK does not retry it either.
    for transport in [Transport::User, Transport::Other(None)] {
        let store = DynamoSubscriberStore::new(dynamo_over(transport), SUBSCRIBERS);
        assert_failed(&format!("{transport:?}"), store.get(LICENSE, ACCOUNT).await);
    }
}

// ---- SQS ----

fn sqs_answer(status: u16, code: Option<&str>) -> HttpResponse {
    answer(status, code, "application/x-amz-json-1.0")
}

fn message() -> WorkMessage {
    WorkMessage::Aggregate {
        group: group("requests", "2026-11-30T10"),
        flush: false,
        price: None,
    }
}

fn sent() -> SendMessageBatchOutput {
    SendMessageBatchOutput::builder()
        .successful(
            SendMessageBatchResultEntry::builder()
                .id("0")
                .message_id("m-0")
                .md5_of_message_body("0")
                .build()
                .unwrap(),
        )
        .set_failed(Some(Vec::new()))
        .build()
        .unwrap()
}

#[tokio::test]
async fn sqs_sends_class_retryable_and_final_answers() {
    let queue_url = "https://sqs.us-east-1.amazonaws.com/123456789012/work";
    for &(status, code) in TRANSIENT_ANSWERS {
        let case = describe(status, code);
        let rule = mock!(aws_sdk_sqs::Client::send_message_batch)
            .sequence()
            .http_response(move || sqs_answer(status, code))
            .build();
        let queue = SqsWorkQueue::new(sqs(&rule, 1), queue_url);
        assert_transient(&case, queue.send(&[message()]).await);
    }
    for &(status, code) in FINAL_ANSWERS {
        let case = describe(status, code);
        let rule = mock!(aws_sdk_sqs::Client::send_message_batch)
            .sequence()
            .http_response(move || sqs_answer(status, code))
            .repeatedly()
            .build();
        let queue = SqsWorkQueue::new(sqs(&rule, 3), queue_url);
        assert_failed(&case, queue.send(&[message()]).await);
        assert_eq!(rule.num_calls(), 1, "{case}: the SDK sent it once");
    }

    // Throttled, then accepted: the SDK's retry.
    let rule = mock!(aws_sdk_sqs::Client::send_message_batch)
        .sequence()
        .http_response(|| sqs_answer(400, Some("RequestThrottled")))
        .output(sent)
        .build();
    let queue = SqsWorkQueue::new(sqs(&rule, 3), queue_url);
    let report = queue.send(&[message()]).await.unwrap();
    assert!(report.failed.is_empty(), "{report:?}");
    assert_eq!(rule.num_calls(), 2);
}

// ---- Marketplace Metering ----

fn metering_answer(status: u16, code: Option<&str>) -> HttpResponse {
    answer(status, code, "application/x-amz-json-1.1")
}

fn metering_record() -> MeteringRecord {
    MeteringRecord {
        key: group("requests", "2026-11-30T10"),
        product_code: "prodcode".into(),
        quantity: 5,
        allocations: None,
    }
}

fn billed() -> BatchMeterUsageOutput {
    let wire = awsmp_aws::metering::usage_record(&metering_record()).unwrap();
    BatchMeterUsageOutput::builder()
        .results(
            UsageRecordResult::builder()
                .usage_record(wire)
                .metering_record_id("mr-1")
                .status(UsageRecordResultStatus::Success)
                .build(),
        )
        .build()
}

/// What `BatchMeterUsage` answers map to: throttling the submitter paces on, a batch to
/// bisect, refused before processing (nothing billed: the records are released
/// unpinned), or transient (the call may have billed: the records stay pending, their
/// sent quantity kept).
#[tokio::test]
async fn metering_answers_map_to_the_submitters_classes() {
    let cases: &[(u16, Option<&str>, &str)] = &[
        (400, Some("ThrottlingException"), "throttled"),
        (400, Some("ThrottledException"), "transient"),
        (400, Some("RequestTimeout"), "transient"),
        (500, Some("InternalServiceErrorException"), "transient"),
        (500, None, "transient"),
        (503, None, "transient"),
        (400, Some("DisabledApiException"), "disabled"),
        (400, Some("ValidationException"), "validation"),
        (400, Some("InvalidUsageDimensionException"), "validation"),
        (400, Some("TimestampOutOfBoundsException"), "validation"),
        // Refused before processing: nothing billed, never ambiguous.
        (400, Some("AccessDeniedException"), "refused"),
        (403, Some("AccessDeniedException"), "refused"),
        (400, Some("UnrecognizedClientException"), "refused"),
        (400, Some("ExpiredTokenException"), "refused"),
        (400, Some("InvalidSignatureException"), "refused"),
        (403, Some("InvalidClientTokenId"), "refused"),
        (403, Some("MissingAuthenticationToken"), "refused"),
        (403, Some("IncompleteSignature"), "refused"),
        (403, None, "refused"),
        (401, None, "refused"),
        (400, None, "transient"),
    ];
    for &(status, code, expected) in cases {
        let case = describe(status, code);
        // GIVEN a client built with the SDK's retries on: the adapter still makes one
        // attempt (pacing and backoff are the submitter's).
        let rule = mock!(aws_sdk_marketplacemetering::Client::batch_meter_usage)
            .sequence()
            .http_response(move || metering_answer(status, code))
            .repeatedly()
            .build();
        let api = SdkMeteringApi::new(metering(&rule, 3));
        let got = api.batch_meter_usage(&[metering_record()]).await;
        let class = match &got {
            Err(MeteringError::Throttled(_)) => "throttled",
            Err(MeteringError::Transient(_)) => "transient",
            Err(MeteringError::Disabled(_)) => "disabled",
            Err(MeteringError::Validation { .. }) => "validation",
            Err(MeteringError::Refused { .. }) => "refused",
            Ok(_) => "ok",
        };
        assert_eq!(class, expected, "{case}: {got:?}");
        assert_eq!(rule.num_calls(), 1, "{case}: one attempt per call");
    }
}

#[tokio::test]
async fn metering_throttling_then_success_is_the_submitters_retry() {
    let rule = mock!(aws_sdk_marketplacemetering::Client::batch_meter_usage)
        .sequence()
        .http_response(|| metering_answer(400, Some("ThrottlingException")))
        .output(billed)
        .build();
    let api = SdkMeteringApi::new(metering(&rule, 3));
    let first = api.batch_meter_usage(&[metering_record()]).await;
    assert!(
        matches!(first, Err(MeteringError::Throttled(_))),
        "{first:?}"
    );
    assert_eq!(
        rule.num_calls(),
        1,
        "the SDK does not retry for the submitter"
    );
    assert_eq!(
        api.batch_meter_usage(&[metering_record()]).await.unwrap(),
        vec![RecordVerdict::Success {
            metering_record_id: "mr-1".into()
        }]
    );
}

fn metering_over(transport: Transport) -> aws_sdk_marketplacemetering::Client {
    let conf = aws_sdk_marketplacemetering::Config::builder()
        .with_test_defaults_v2()
        .http_client(transport)
        .retry_config(retries(1))
        .timeout_config(
            TimeoutConfig::builder()
                .operation_attempt_timeout(Duration::from_millis(50))
                .build(),
        )
        .build();
    aws_sdk_marketplacemetering::Client::from_conf(conf)
}

/// A transport failure that is not a failed connect (the connector cannot tell how far
/// the request went: an I/O error, a timeout, a hang, anything else) may have delivered
/// the request: transient, never refused. A refused connect is read as refused on the
/// real wire (tests/metering.rs).
#[tokio::test]
async fn metering_transport_failures_after_connecting_stay_ambiguous() {
    for transport in [
        Transport::Io,
        Transport::Timeout,
        Transport::Hang,
        Transport::User,
        Transport::Other(None),
        Transport::Other(Some(ErrorKind::TransientError)),
    ] {
        let api = SdkMeteringApi::new(metering_over(transport));
        let got = api.batch_meter_usage(&[metering_record()]).await;
        assert!(
            matches!(got, Err(MeteringError::Transient(_))),
            "{transport:?}: {got:?}"
        );
    }
}

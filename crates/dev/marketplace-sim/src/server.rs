//! HTTP: `POST /` speaks the Marketplace Metering JSON 1.1 protocol (and CloudTrail's
//! `LookupEvents` and the Agreement API's awsJson 1.0, told apart by `X-Amz-Target`);
//! `POST /service/AWSMPCommerceService_v20200301/operation/{op}` is the Agreement
//! API's RPC v2 CBOR; `/admin/...` is the simulator's JSON admin API. SigV4
//! signatures are not verified.

use std::time::{Duration, Instant};

use axum::Json;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::rejection::{BytesRejection, FailedToBufferBody, JsonRejection};
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::agreement::model::{
    AdjustmentFailure, Agreement, AgreementEnd, AgreementSeed, BillingAdjustment,
};
use crate::agreement::{self as agreement_api, AgreementReply, Protocol};
use crate::clock::ClockSetting;
use crate::cloudtrail::Caller;
use crate::engine::{READ_CAP_BYTES, RequestBody};
use crate::error::{AdminError, ApiError};
use crate::handle::SimHandle;
use crate::model::{EntitlementKey, EntitlementSeed, FaultSpec, ProductSeed, TokenSeed};
use crate::throttle::ThrottleConfig;
use crate::wire::{CONTENT_TYPE, WireError};

/// The router serving both the wire protocol and the admin API on `handle`.
pub fn router(handle: SimHandle) -> Router {
    Router::new()
        .route("/", post(wire))
        .route(
            "/service/AWSMPCommerceService_v20200301/operation/{operation}",
            post(agreement_cbor),
        )
        .route(
            "/admin/agreements",
            post(seed_agreement).get(list_agreements),
        )
        .route("/admin/agreements/end", post(end_agreement))
        .route("/admin/billing-adjustments", get(billing_adjustments))
        .route(
            "/admin/billing-adjustments/fail",
            post(fail_billing_adjustment),
        )
        .route(
            "/admin/agreement-events",
            get(agreement_events).delete(clear_agreement_events),
        )
        .route("/admin/health", get(health))
        .route("/admin/products", post(seed_product))
        .route("/admin/entitlements", post(entitle).get(list_entitlements))
        .route("/admin/entitlements/revoke", post(revoke))
        .route("/admin/tokens", post(seed_token))
        .route("/admin/lifecycle-events", post(lifecycle_event))
        .route(
            "/admin/faults",
            post(inject_fault).get(list_faults).delete(clear_faults),
        )
        .route("/admin/clock", get(get_clock).post(set_clock))
        .route("/admin/clock/advance", post(advance_clock))
        .route("/admin/throttle", get(get_throttle).post(set_throttle))
        .route("/admin/latency", get(get_latency).post(set_latency))
        .route("/admin/reset", post(reset))
        .route("/admin/ledger", get(ledger))
        .route("/admin/stats", get(stats))
        // The 1 MB rule is answered by the engine itself, as ValidationException.
        .layer(DefaultBodyLimit::max(READ_CAP_BYTES))
        .with_state(handle)
}

// ---- wire -------------------------------------------------------------------

fn json_11(status: StatusCode, body: Vec<u8>) -> Response {
    let mut response = (status, body).into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
    response
}

fn error_response(err: &ApiError) -> Response {
    let body = WireError {
        error_type: err.kind.wire_name().to_owned(),
        message: err.message.clone(),
    };
    let bytes = serde_json::to_vec(&body).unwrap_or_default();
    let mut response = json_11(err.kind.http_status(), bytes);
    response.headers_mut().insert(
        "x-amzn-errortype",
        HeaderValue::from_static(err.kind.wire_name()),
    );
    response
}

async fn wire(
    State(handle): State<SimHandle>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let real_now = Instant::now();
    let target = headers
        .get("x-amz-target")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    if let Some(operation) = target
        .as_deref()
        .and_then(|t| t.strip_prefix(agreement_api::TARGET_PREFIX))
    {
        return agreement(&handle, Protocol::AwsJson10, operation, body, real_now).await;
    }
    let caller = Caller::from_authorization(
        headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok()),
    );
    let outcome = match &body {
        Ok(bytes) => handle.with(|e| {
            e.call_from(
                target.as_deref(),
                RequestBody::Complete(bytes),
                real_now,
                &caller,
            )
        }),
        Err(BytesRejection::FailedToBufferBody(FailedToBufferBody::LengthLimitError(_))) => handle
            .with(|e| e.call_from(target.as_deref(), RequestBody::TooLarge, real_now, &caller)),
        // The client went away mid-body: nothing was processed and nobody reads this.
        Err(rejection) => return (rejection.status(), rejection.body_text()).into_response(),
    };
    if !outcome.latency.is_zero() {
        tokio::time::sleep(outcome.latency).await;
    }
    if outcome.drop_connection {
        return dropped_connection();
    }
    match outcome.result {
        Ok(value) => json_11(
            StatusCode::OK,
            serde_json::to_vec(&value).unwrap_or_default(),
        ),
        Err(err) => error_response(&err),
    }
}

/// The Agreement API's RPC v2 CBOR: the operation is the path's last segment.
async fn agreement_cbor(
    State(handle): State<SimHandle>,
    Path(operation): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    agreement(
        &handle,
        Protocol::RpcV2Cbor,
        &operation,
        body,
        Instant::now(),
    )
    .await
}

async fn agreement(
    handle: &SimHandle,
    protocol: Protocol,
    operation: &str,
    body: Result<Bytes, BytesRejection>,
    real_now: Instant,
) -> Response {
    let reply: AgreementReply = match &body {
        Ok(bytes) => handle.with(|e| {
            e.agreement_call(protocol, operation, RequestBody::Complete(bytes), real_now)
        }),
        Err(BytesRejection::FailedToBufferBody(FailedToBufferBody::LengthLimitError(_))) => {
            handle.with(|e| e.agreement_call(protocol, operation, RequestBody::TooLarge, real_now))
        }
        Err(rejection) => return (rejection.status(), rejection.body_text()).into_response(),
    };
    if !reply.latency.is_zero() {
        tokio::time::sleep(reply.latency).await;
    }
    let mut response = (reply.status, reply.body).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(reply.content_type),
    );
    if protocol == Protocol::RpcV2Cbor {
        headers.insert("smithy-protocol", HeaderValue::from_static("rpc-v2-cbor"));
    }
    if let Some(error_type) = reply.error_type {
        headers.insert("x-amzn-errortype", HeaderValue::from_static(error_type));
    }
    response
}

/// A response whose body fails before its first byte: hyper then closes the
/// connection without writing anything (no status line), which the client sees
/// as a connection closed before any answer.
fn dropped_connection() -> Response {
    let failing = futures_util::stream::once(async {
        Err::<Bytes, std::io::Error>(std::io::Error::new(
            std::io::ErrorKind::ConnectionAborted,
            "injected lose_response fault: connection dropped without an answer",
        ))
    });
    Response::new(Body::from_stream(failing))
}

// ---- admin ------------------------------------------------------------------

/// The admin API's error body.
#[derive(Debug, Serialize)]
struct AdminErrorBody {
    error: String,
}

impl IntoResponse for AdminError {
    fn into_response(self) -> Response {
        (
            self.http_status(),
            Json(AdminErrorBody {
                error: self.to_string(),
            }),
        )
            .into_response()
    }
}

type AdminResult<T> = Result<Json<T>, AdminError>;

fn body<T>(json: Result<Json<T>, JsonRejection>) -> Result<T, AdminError> {
    json.map(|Json(v)| v)
        .map_err(|rejection| AdminError::Invalid(rejection.body_text()))
}

#[derive(Debug, Serialize)]
struct Done {
    ok: bool,
}

const DONE: Done = Done { ok: true };

async fn health() -> Json<Done> {
    Json(DONE)
}

async fn seed_product(
    State(h): State<SimHandle>,
    json: Result<Json<ProductSeed>, JsonRejection>,
) -> AdminResult<Done> {
    h.seed_product(body(json)?)?;
    Ok(Json(DONE))
}

async fn entitle(
    State(h): State<SimHandle>,
    json: Result<Json<EntitlementSeed>, JsonRejection>,
) -> AdminResult<crate::model::Entitlement> {
    Ok(Json(h.entitle(body(json)?)?))
}

async fn list_entitlements(State(h): State<SimHandle>) -> Json<Vec<crate::model::Entitlement>> {
    Json(h.entitlements())
}

async fn revoke(
    State(h): State<SimHandle>,
    json: Result<Json<EntitlementKey>, JsonRejection>,
) -> AdminResult<crate::model::Entitlement> {
    Ok(Json(h.revoke(&body(json)?)?))
}

async fn seed_token(
    State(h): State<SimHandle>,
    json: Result<Json<TokenSeed>, JsonRejection>,
) -> AdminResult<Done> {
    h.seed_token(body(json)?)?;
    Ok(Json(DONE))
}

async fn lifecycle_event(
    State(h): State<SimHandle>,
    json: Result<Json<serde_json::Value>, JsonRejection>,
) -> AdminResult<crate::model::LifecycleOutcome> {
    Ok(Json(h.apply_lifecycle_event(&body(json)?)?))
}

async fn inject_fault(
    State(h): State<SimHandle>,
    json: Result<Json<FaultSpec>, JsonRejection>,
) -> AdminResult<Vec<FaultSpec>> {
    h.inject_fault(body(json)?)?;
    Ok(Json(h.pending_faults()))
}

async fn list_faults(State(h): State<SimHandle>) -> Json<Vec<FaultSpec>> {
    Json(h.pending_faults())
}

async fn clear_faults(State(h): State<SimHandle>) -> Json<Done> {
    h.clear_faults();
    Json(DONE)
}

/// The clock as the admin API reports it.
#[derive(Debug, Serialize)]
struct ClockView {
    now: DateTime<Utc>,
    setting: ClockSetting,
}

fn clock_view(h: &SimHandle) -> ClockView {
    ClockView {
        now: h.now(),
        setting: h.clock_setting(),
    }
}

async fn get_clock(State(h): State<SimHandle>) -> Json<ClockView> {
    Json(clock_view(&h))
}

async fn set_clock(
    State(h): State<SimHandle>,
    json: Result<Json<ClockSetting>, JsonRejection>,
) -> AdminResult<ClockView> {
    h.set_clock(body(json)?);
    Ok(Json(clock_view(&h)))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Advance {
    seconds: i64,
}

async fn advance_clock(
    State(h): State<SimHandle>,
    json: Result<Json<Advance>, JsonRejection>,
) -> AdminResult<ClockView> {
    h.advance_clock(body(json)?.seconds);
    Ok(Json(clock_view(&h)))
}

async fn get_throttle(State(h): State<SimHandle>) -> Json<ThrottleConfig> {
    Json(h.throttle())
}

async fn set_throttle(
    State(h): State<SimHandle>,
    json: Result<Json<ThrottleConfig>, JsonRejection>,
) -> AdminResult<ThrottleConfig> {
    h.set_throttle(body(json)?)?;
    Ok(Json(h.throttle()))
}

/// The wire latency as the admin API reads and writes it.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Latency {
    ms: u64,
}

async fn get_latency(State(h): State<SimHandle>) -> Json<Latency> {
    Json(Latency {
        ms: u64::try_from(h.latency().as_millis()).unwrap_or(u64::MAX),
    })
}

async fn set_latency(
    State(h): State<SimHandle>,
    json: Result<Json<Latency>, JsonRejection>,
) -> AdminResult<Latency> {
    let ms = body(json)?.ms;
    h.set_latency(Duration::from_millis(ms));
    Ok(Json(Latency { ms }))
}

async fn reset(State(h): State<SimHandle>) -> AdminResult<Done> {
    h.reset()?;
    Ok(Json(DONE))
}

async fn ledger(State(h): State<SimHandle>) -> Json<crate::model::LedgerSnapshot> {
    Json(h.ledger())
}

async fn stats(State(h): State<SimHandle>) -> Json<crate::model::Stats> {
    Json(h.stats())
}

async fn seed_agreement(
    State(h): State<SimHandle>,
    json: Result<Json<AgreementSeed>, JsonRejection>,
) -> AdminResult<Agreement> {
    Ok(Json(h.seed_agreement(body(json)?)?))
}

async fn list_agreements(State(h): State<SimHandle>) -> Json<Vec<Agreement>> {
    Json(h.agreements())
}

async fn end_agreement(
    State(h): State<SimHandle>,
    json: Result<Json<AgreementEnd>, JsonRejection>,
) -> AdminResult<Agreement> {
    Ok(Json(h.end_agreement(&body(json)?)?))
}

async fn billing_adjustments(State(h): State<SimHandle>) -> Json<Vec<BillingAdjustment>> {
    Json(h.billing_adjustments())
}

async fn fail_billing_adjustment(
    State(h): State<SimHandle>,
    json: Result<Json<AdjustmentFailure>, JsonRejection>,
) -> AdminResult<BillingAdjustment> {
    Ok(Json(h.fail_billing_adjustment(body(json)?)?))
}

async fn agreement_events(State(h): State<SimHandle>) -> Json<Vec<serde_json::Value>> {
    Json(h.agreement_events())
}

async fn clear_agreement_events(State(h): State<SimHandle>) -> Json<Done> {
    h.clear_agreement_events();
    Json(DONE)
}

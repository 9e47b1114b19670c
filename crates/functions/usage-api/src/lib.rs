//! The usage API Lambda (main stack, behind an API Gateway HTTP API, payload format
//! 1.0, IAM or JWT authorization):
//!
//! | route | what it does |
//! |---|---|
//! | `POST /usage/events` | a batch of up to 100 events (1 MB): each checked as the aggregator checks it and written idempotently by its id ([`awsmp_core::usage_api::record_batch`]); `200` with every event's verdict in order |
//! | `GET /usage/events/{id}?licenseArn=[&source=]` | the event's fate so far ([`awsmp_core::usage_api::event_fate`]); a CloudEvent is named by its `source` too |
//! | `GET /subscriptions/{licenseArn}[?customerAWSAccountId=]` | the entitlement answer ([`awsmp_core::usage_api::entitlement`]): the buyer's statuses, Regions, agreement, deprovisioning window, and whether usage written now is billed; `404` for a license the subscribers table does not know |
//!
//! The status says only whether the envelope was understood: `400` malformed, `413` too
//! large, `415` media type, `409` a direct-submit stack (no raw usage there), `503` with
//! `Retry-After` when the table throttles (a retry of the whole batch is always safe:
//! what was written answers `duplicate`); `429` comes from the API's own throttling.
//! Every error is JSON `{"code", "message"}`; a `500` or `503` says only what to do and
//! the request id, the store's own message (table, key and role names) goes to the log.
//! Routes, headers, bodies and answers (with their security headers) are the shared
//! skeleton's, [`awsmp_lambda::http`].
//!
//! With JWT authorization (`USAGE_API_READ_SCOPE` set), a verdict's `recorded` (what an
//! id's first write recorded) goes only to a token with the read scope (`null` to any
//! other): without it the write route would read usage back.

pub mod config;

use std::convert::Infallible;
use std::sync::Arc;

use aws_config::SdkConfig;
use aws_lambda_events::apigw::{ApiGatewayProxyRequest, ApiGatewayProxyResponse};
use aws_lambda_events::http::Method;
use aws_lambda_events::http::header::HeaderValue;
use awsmp_core::ports::{AggregatedStore, Clock, PortError, SubscriberStore, UsageStore};
use awsmp_core::submit::DeploymentMode;
use awsmp_core::usage_api::{
    BatchError, EntitlementError, EnvelopeError, MediaType, Target, Verdict, entitlement,
    event_fate, event_key, parse_batch, record_batch,
};
use awsmp_lambda::http::{self, Routed, error, header};
use lambda_runtime::LambdaEvent;
use serde_json::{Value, json};

pub use config::{Config, ENV_VARS};

/// Seconds a client waits before retrying a batch the table throttled.
pub const RETRY_AFTER_SECONDS: u32 = 1;

/// The handler's dependencies, built once per process and shared by every invocation.
#[derive(Clone)]
pub struct State {
    /// Settings.
    pub config: Arc<Config>,
    /// The usage table.
    pub usage: Arc<dyn UsageStore>,
    /// The aggregated-usage table (read by `GET`).
    pub aggregated: Arc<dyn AggregatedStore>,
    /// The subscribers table (read by `GET /subscriptions/{licenseArn}`).
    pub subscribers: Arc<dyn SubscriberStore>,
    /// "When received", the default instant of an event without one.
    pub clock: Arc<dyn Clock>,
}

impl State {
    /// Builds the AWS clients once, on `sdk` (the subscribers table's in its own
    /// Region), for `config`.
    pub fn connect(sdk: &SdkConfig, config: &Config) -> Self {
        let client = aws_sdk_dynamodb::Client::new(sdk);
        let subscribers_sdk = awsmp_aws::in_region(sdk, &config.subscribers_table_region);
        State {
            subscribers: Arc::new(awsmp_aws::DynamoSubscriberStore::new(
                aws_sdk_dynamodb::Client::new(&subscribers_sdk),
                config.subscribers_table.clone(),
            )),
            usage: Arc::new(awsmp_aws::DynamoUsageStore::new(
                client.clone(),
                config.usage_table.clone(),
            )),
            aggregated: Arc::new(awsmp_aws::DynamoAggregatedStore::new(
                client,
                config.aggregated_table.clone(),
            )),
            clock: Arc::new(awsmp_aws::SystemClock),
            config: Arc::new(config.clone()),
        }
    }
}

/// Which route a request is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    Events,
    Event,
    Subscription,
}

/// The routes, matched on the path's last segments (so a custom domain's base path in
/// front of them does not matter); the event id is the path parameter API Gateway
/// decoded, else the path segment percent-decoded.
const ROUTES: &[http::Route<Route>] = &[
    http::Route {
        key: Route::Events,
        pattern: "/usage/events",
        methods: &[Method::POST],
    },
    http::Route {
        key: Route::Event,
        pattern: "/usage/events/{id}",
        methods: &[Method::GET],
    },
    http::Route {
        key: Route::Subscription,
        pattern: "/subscriptions/{licenseArn}",
        methods: &[Method::GET],
    },
];

/// The Lambda entry point: every outcome is an HTTP answer, so it never fails.
pub async fn handler(
    state: &State,
    event: LambdaEvent<ApiGatewayProxyRequest>,
) -> Result<ApiGatewayProxyResponse, Infallible> {
    Ok(handle(state, event.payload).await)
}

/// Answers one proxy request.
pub async fn handle(state: &State, request: ApiGatewayProxyRequest) -> ApiGatewayProxyResponse {
    match http::route(ROUTES, &request) {
        Routed::Found {
            key: Route::Events, ..
        } => post_events(state, &request).await,
        Routed::Found {
            key: Route::Event,
            params,
        } => get_event(state, &request, params.get("id").unwrap_or_default()).await,
        Routed::Found {
            key: Route::Subscription,
            params,
        } => {
            get_subscription(
                state,
                &request,
                params.get("licenseArn").unwrap_or_default(),
            )
            .await
        }
        Routed::MethodNotAllowed { allow } => {
            let mut response = error(
                405,
                "MethodNotAllowed",
                &format!("{} is not answered here", request.http_method),
            );
            http::set_allow(&mut response, &allow);
            response
        }
        Routed::NotFound { .. } => error(
            404,
            "NotFound",
            "the usage API answers POST /usage/events, GET /usage/events/{id}?licenseArn=... and GET /subscriptions/{licenseArn}",
        ),
    }
}

/// The body's bytes (API Gateway delivers some media types base64-encoded); its size is
/// checked with the batch's.
fn body_of(request: &ApiGatewayProxyRequest) -> Result<Vec<u8>, EnvelopeError> {
    http::body(request, None).map_err(|e| EnvelopeError::Malformed(e.to_string()))
}

async fn post_events(state: &State, request: &ApiGatewayProxyRequest) -> ApiGatewayProxyResponse {
    let now = state.clock.now();
    let parsed = MediaType::of(header(request, "content-type"))
        .and_then(|media| Ok((media, body_of(request)?)))
        .and_then(|(media, body)| parse_batch(media, &body));
    let events = match parsed {
        Ok(events) => events,
        Err(e) => {
            tracing::warn!(status = e.status(), code = e.code(), "batch refused: {e}");
            return error(e.status(), e.code(), &e.to_string());
        }
    };
    let target = Target {
        store: state.usage.as_ref(),
        mode: state.config.deployment_mode,
        product_code: &state.config.product_code,
    };
    let may_read = may_read(&state.config, request);
    match record_batch(target, events, now).await {
        Ok(verdicts) => {
            let count = |status: &str| verdicts.iter().filter(|v| v.status() == status).count();
            let summary = json!({
                "accepted": count("accepted"),
                "duplicate": count("duplicate"),
                "conflict": count("conflict"),
                "rejected": count("rejected"),
            });
            tracing::info!(%summary, caller = caller(request), "batch recorded");
            let results: Vec<Value> = verdicts.iter().map(|v| verdict_json(v, may_read)).collect();
            http::json(200, &json!({ "results": results, "summary": summary }))
        }
        Err(e) => batch_error(&e, request),
    }
}

/// Whether the caller may see what an id recorded: always without a read scope (IAM
/// authorization), else only a JWT whose scopes (the authorizer's `scopes`, or the
/// token's `scope` / `scp` claim) include it.
fn may_read(config: &Config, request: &ApiGatewayProxyRequest) -> bool {
    let Some(read_scope) = config.read_scope.as_deref() else {
        return true;
    };
    let authorizer = &request.request_context.authorizer.fields;
    let claims = authorizer.get("claims");
    let listed = |value: Option<&Value>| -> Vec<String> {
        match value {
            Some(Value::Array(items)) => items
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect(),
            Some(Value::String(text)) => text.split_whitespace().map(str::to_string).collect(),
            _ => Vec::new(),
        }
    };
    [
        authorizer.get("scopes"),
        claims.and_then(|c| c.get("scope")),
        claims.and_then(|c| c.get("scp")),
    ]
    .into_iter()
    .flat_map(listed)
    .any(|scope| scope == read_scope)
}

fn verdict_json(verdict: &Verdict, may_read: bool) -> Value {
    let mut value = serde_json::to_value(verdict).unwrap_or_else(
        |e| json!({"status": "rejected", "reason": "Unwritable", "message": e.to_string()}),
    );
    if !may_read && let Some(recorded) = value.get_mut("recorded") {
        *recorded = Value::Null;
    }
    value
}

fn batch_error(e: &BatchError, request: &ApiGatewayProxyRequest) -> ApiGatewayProxyResponse {
    match e {
        BatchError::DirectSubmit(refusal) => {
            tracing::warn!("usage refused: {refusal}");
            error(409, "DirectSubmitStack", &refusal.to_string())
        }
        BatchError::Store(store) => store_error(store, request),
    }
}

/// A store failure: the detail (the SDK's message names tables, keys and roles) in the
/// log with the request id, a generic answer with the same id.
fn store_error(e: &PortError, request: &ApiGatewayProxyRequest) -> ApiGatewayProxyResponse {
    let request_id = request
        .request_context
        .request_id
        .as_deref()
        .unwrap_or("unknown");
    match e {
        PortError::Transient { .. } => {
            tracing::warn!(error = %e, request_id, "usage table throttled");
            let mut response = error(
                503,
                "Throttled",
                &format!(
                    "the usage table is throttling (request {request_id}); retry the whole request after {RETRY_AFTER_SECONDS} s: events already written answer duplicate"
                ),
            );
            response.headers.insert(
                "retry-after",
                HeaderValue::from_str(&RETRY_AFTER_SECONDS.to_string())
                    .unwrap_or(HeaderValue::from_static("1")),
            );
            response
        }
        other => {
            tracing::error!(error = %other, request_id, "usage table unavailable");
            error(
                500,
                "StoreFailed",
                &format!(
                    "the usage table could not be used (request {request_id}, detail in the function's log); retry the whole request later: events already written answer duplicate"
                ),
            )
        }
    }
}

async fn get_event(
    state: &State,
    request: &ApiGatewayProxyRequest,
    id: &str,
) -> ApiGatewayProxyResponse {
    if state.config.deployment_mode == DeploymentMode::DirectSubmit {
        return batch_error(
            &BatchError::DirectSubmit(awsmp_core::guardrails::write::DirectSubmitRefusal),
            request,
        );
    }
    let Some(license_arn) = request
        .query_string_parameters
        .first("licenseArn")
        .filter(|l| !l.is_empty())
    else {
        return error(
            400,
            "MissingLicenseArn",
            "name the event's license: GET /usage/events/{id}?licenseArn=<the licenseArn it was posted with> (event ids are unique per license)",
        );
    };
    // A CloudEvent's key is its source and id together.
    let source = request
        .query_string_parameters
        .first("source")
        .filter(|s| !s.is_empty());
    let key = event_key(source, id);
    match event_fate(
        state.usage.as_ref(),
        state.aggregated.as_ref(),
        state.subscribers.as_ref(),
        license_arn,
        &key,
    )
    .await
    {
        Ok(Some(mut fate)) => {
            // Told by the id it was posted with, not the key it is stored under.
            fate.id = id.to_string();
            http::json(
                200,
                &serde_json::to_value(&fate)
                    .unwrap_or_else(|e| json!({"id": id, "error": e.to_string()})),
            )
        }
        Ok(None) => error(
            404,
            "UnknownEvent",
            &format!(
                "no event {id:?}{} was written for license {license_arn}: check the id, the license it was posted with and, for a CloudEvent, its source (?source=)",
                source
                    .map(|s| format!(" of source {s:?}"))
                    .unwrap_or_default()
            ),
        ),
        Err(e) => store_error(&e, request),
    }
}

/// `GET /subscriptions/{licenseArn}`: one read of the subscribers table. The store's
/// failures are answered as the usage table's are (detail in the log only).
async fn get_subscription(
    state: &State,
    request: &ApiGatewayProxyRequest,
    license_arn: &str,
) -> ApiGatewayProxyResponse {
    if license_arn.is_empty() {
        return error(
            400,
            "MissingLicenseArn",
            "name the license: GET /subscriptions/{licenseArn}, the ARN percent-encoded",
        );
    }
    let account = request
        .query_string_parameters
        .first("customerAWSAccountId")
        .filter(|a| !a.is_empty());
    if let Some(account) = account
        && !(account.len() == 12 && account.bytes().all(|b| b.is_ascii_digit()))
    {
        return error(
            400,
            "InvalidCustomerAWSAccountId",
            &format!("customerAWSAccountId must be a 12-digit AWS account id, not {account:?}"),
        );
    }
    let now = state.clock.now();
    match entitlement(state.subscribers.as_ref(), license_arn, account, now).await {
        Ok(answer) => http::json(
            200,
            &serde_json::to_value(&answer)
                .unwrap_or_else(|e| json!({"licenseArn": license_arn, "error": e.to_string()})),
        ),
        Err(e @ EntitlementError::Unknown { .. }) => {
            error(404, "UnknownSubscription", &e.to_string())
        }
        Err(e @ EntitlementError::Ambiguous { .. }) => {
            error(400, "AmbiguousLicense", &e.to_string())
        }
        Err(EntitlementError::Store(e)) => subscribers_error(&e, request),
    }
}

/// A subscribers-table failure, answered without the store's own message.
fn subscribers_error(e: &PortError, request: &ApiGatewayProxyRequest) -> ApiGatewayProxyResponse {
    let request_id = request
        .request_context
        .request_id
        .as_deref()
        .unwrap_or("unknown");
    tracing::error!(error = %e, request_id, "subscribers table unavailable");
    let (status, code) = match e {
        PortError::Transient { .. } => (503, "Throttled"),
        _ => (500, "StoreFailed"),
    };
    let mut response = error(
        status,
        code,
        &format!(
            "the subscribers table could not be read (request {request_id}, detail in the function's log); retry after {RETRY_AFTER_SECONDS} s"
        ),
    );
    if status == 503 {
        response
            .headers
            .insert("retry-after", HeaderValue::from_static("1"));
    }
    response
}

/// Who called, for the log: the IAM principal or the JWT's subject.
fn caller(request: &ApiGatewayProxyRequest) -> String {
    let context = &request.request_context;
    context
        .identity
        .user_arn
        .clone()
        .or_else(|| {
            context
                .authorizer
                .fields
                .get("claims")
                .and_then(|claims| claims.get("sub"))
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .unwrap_or_default()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests;

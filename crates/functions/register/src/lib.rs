//! The register Lambda (main stack, behind API Gateway REST, which the page's CloudFront
//! distribution serves on the page's own origin):
//!
//! | route | what it does |
//! |---|---|
//! | `POST /fulfillment` | Marketplace's browser form POST: `303` to `REGISTRATION_PAGE_URL#token=...` (the token travels in the fragment, which never reaches a server log or a third party) |
//! | `POST /register` | the page's post: the use case `awsmp_core::register` (`ResolveCustomer`, then the in-Region customer-profile row and the PII-free subscriber row, `registeredRegions`) |
//! | `OPTIONS /register` | CORS preflight for `ALLOWED_ORIGIN` only (the page posts on its own origin, so the API routes no `OPTIONS`; this serves a page hosted elsewhere by a proxy of the seller's) |
//!
//! Every answer is JSON with a `code` and a buyer-actionable `message` (see
//! [`RegisterError`]). The token is never stored or logged; form values are never
//! logged. Registration never gates metering: it writes no lifecycle field. Routes,
//! headers, bodies and answers (with their security headers) are the shared skeleton's,
//! [`awsmp_lambda::http`]; CORS for the page's origin is [`cors`]'s.

pub mod config;
pub mod cors;
pub mod error;
pub mod form;

use std::convert::Infallible;
use std::sync::Arc;

use aws_config::SdkConfig;
use aws_lambda_events::apigw::{ApiGatewayProxyRequest, ApiGatewayProxyResponse};
use aws_lambda_events::http::Method;
use awsmp_core::ports::{Clock, CustomerResolver, MetricsSink, ProfileStore, SubscriberStore};
use awsmp_core::register::{RegisterPorts, Registration};
use awsmp_lambda::http::{self, Routed, header};
use lambda_runtime::LambdaEvent;
use serde_json::json;

pub use config::{Config, ENV_VARS, RUNTIME_ENV_VARS};
pub use error::{MARKETPLACE_LIBRARY_URL, RegisterError};
use form::{RegistrationForm, parse_form};

/// The handler's dependencies, built once per process and shared by every invocation.
#[derive(Clone)]
pub struct State {
    /// Settings.
    pub config: Arc<Config>,
    /// `ResolveCustomer` (in `RESOLVE_CUSTOMER_REGION`).
    pub resolver: Arc<dyn CustomerResolver>,
    /// The subscribers table (in `SUBSCRIBERS_TABLE_REGION`).
    pub subscribers: Arc<dyn SubscriberStore>,
    /// The in-Region customer-profile table; `None` when `CUSTOMER_PROFILE_TABLE` is
    /// unset or empty (every registration then answers HTTP 500).
    pub profiles: Option<Arc<dyn ProfileStore>>,
    /// Time, for the audit stamps.
    pub clock: Arc<dyn Clock>,
    /// Metrics (`RegistrationFieldDropped`).
    pub metrics: Arc<dyn MetricsSink>,
}

impl State {
    /// Builds the AWS clients once, on `sdk`, for `config`: the in-Region profile table,
    /// the subscribers table in its own Region, `ResolveCustomer` in its configured
    /// Region.
    pub fn connect(sdk: &SdkConfig, config: &Config) -> Self {
        let here = aws_sdk_dynamodb::Client::new(sdk);
        let subscribers = awsmp_aws::in_region(sdk, &config.subscribers_table_region);
        let resolve = awsmp_aws::in_region(sdk, &config.resolve_customer_region);
        State {
            subscribers: Arc::new(awsmp_aws::DynamoSubscriberStore::new(
                aws_sdk_dynamodb::Client::new(&subscribers),
                &config.subscribers_table,
            )),
            resolver: Arc::new(awsmp_aws::SdkCustomerResolver::new(
                aws_sdk_marketplacemetering::Client::new(&resolve),
            )),
            profiles: config.customer_profile_table.as_ref().map(|table| {
                Arc::new(awsmp_aws::DynamoProfileStore::new(here, table)) as Arc<dyn ProfileStore>
            }),
            clock: Arc::new(awsmp_aws::SystemClock),
            metrics: Arc::new(awsmp_aws::EmfMetrics::stdout(
                &config.product_code,
                &config.stage,
            )),
            config: Arc::new(config.clone()),
        }
    }
}

/// What a request asks of the function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    /// Marketplace's form post.
    Fulfillment,
    /// A reload or bookmark of the fulfillment URL.
    FulfillmentReload,
    /// The page's post.
    Register,
    /// The CORS preflight of the page's post.
    Preflight,
}

/// The routes, matched on the path's last segment (the API Gateway resource, or the
/// path), so a custom domain's base path in front does not matter.
const ROUTES: &[http::Route<Route>] = &[
    http::Route {
        key: Route::Register,
        pattern: "/register",
        methods: &[Method::POST],
    },
    http::Route {
        key: Route::Preflight,
        pattern: "/register",
        methods: &[Method::OPTIONS],
    },
    http::Route {
        key: Route::Fulfillment,
        pattern: "/fulfillment",
        methods: &[Method::POST],
    },
    http::Route {
        key: Route::FulfillmentReload,
        pattern: "/fulfillment",
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
    let origin = &state.config.allowed_origin;
    let route = match http::route(ROUTES, &request) {
        Routed::Found { key, .. } => key,
        Routed::NotFound { path } => {
            return error_response(&RegisterError::NotFound(path), origin);
        }
        Routed::MethodNotAllowed { allow } => {
            let error = RegisterError::MethodNotAllowed {
                method: request.http_method.to_string(),
                path: request.path.clone().unwrap_or_default(),
            };
            let mut response = error_response(&error, origin);
            http::set_allow(&mut response, &allow);
            return response;
        }
    };
    match route {
        Route::Fulfillment => fulfillment(state, &request).await,
        // A reload or bookmark of the fulfillment URL: send the buyer to the page, which
        // explains how to get a fresh link.
        Route::FulfillmentReload => {
            http::see_other(&page_location(&state.config, "error=missing-token"))
        }
        Route::Register => match register(state, &request).await {
            Ok(response) => response,
            Err(e) => error_response(&e, origin),
        },
        Route::Preflight => match check_origin(&state.config, &request) {
            Ok(()) => cors::preflight(origin),
            Err(e) => error_response(&e, origin),
        },
    }
}

/// `REGISTRATION_PAGE_URL` with `fragment`.
fn page_location(config: &Config, fragment: &str) -> String {
    let mut url = config.registration_page_url.clone();
    url.set_fragment(Some(fragment));
    url.to_string()
}

async fn read_form(
    state: &State,
    request: &ApiGatewayProxyRequest,
) -> Result<RegistrationForm, RegisterError> {
    Ok(parse_form(
        header(request, "content-type"),
        request.body.as_deref(),
        request.is_base64_encoded,
        &state.config.allowed_fields,
    )
    .await?)
}

/// Marketplace's form POST: pass the token to the page in the URL fragment.
async fn fulfillment(state: &State, request: &ApiGatewayProxyRequest) -> ApiGatewayProxyResponse {
    let fragment = match read_form(state, request).await {
        Ok(RegistrationForm {
            token: Some(token), ..
        }) => {
            tracing::info!("fulfillment: redirecting the buyer to the registration page");
            let encoded: String =
                url::form_urlencoded::byte_serialize(token.expose().as_bytes()).collect();
            format!("token={encoded}")
        }
        Ok(_) => {
            tracing::warn!("fulfillment: the post carried no x-amzn-marketplace-token");
            "error=missing-token".to_string()
        }
        Err(e) => {
            tracing::warn!(error = %e, code = e.code(), "fulfillment: unreadable form post");
            let code = if e.needs_new_token() {
                "invalid-token"
            } else {
                "bad-request"
            };
            format!("error={code}")
        }
    };
    http::see_other(&page_location(&state.config, &fragment))
}

/// A browser request from another origin than the page is refused; requests without an
/// `Origin` (curl, server-side callers) pass, since CORS only binds browsers.
fn check_origin(config: &Config, request: &ApiGatewayProxyRequest) -> Result<(), RegisterError> {
    match header(request, "origin") {
        None => Ok(()),
        Some(origin) if origin == config.allowed_origin => Ok(()),
        Some(origin) => Err(RegisterError::OriginNotAllowed(origin.to_string())),
    }
}

/// The page's post: read the form, then register (`awsmp_core::register`: resolve the
/// token, write the profile and the subscriber row).
async fn register(
    state: &State,
    request: &ApiGatewayProxyRequest,
) -> Result<ApiGatewayProxyResponse, RegisterError> {
    let config = &state.config;
    let Some(profiles) = &state.profiles else {
        return Err(RegisterError::StoreNotConfigured);
    };
    check_origin(config, request)?;
    let form = read_form(state, request).await?;
    let token = form.token.as_ref().ok_or(RegisterError::MissingToken)?;
    let ports = RegisterPorts {
        resolver: state.resolver.clone(),
        subscribers: state.subscribers.clone(),
        profiles: profiles.clone(),
        clock: state.clock.clone(),
        metrics: state.metrics.clone(),
    };
    let registration = Registration {
        token: token.expose(),
        fields: form.fields,
        dropped: form.dropped,
    };
    awsmp_core::register::register(&ports, &config.product_code, &config.region, registration)
        .await?;
    Ok(cors::allow_origin(
        http::json(
            200,
            &json!({
                "code": "registered",
                "message": "Your account is set up. You can close this page.",
            }),
        ),
        &config.allowed_origin,
    ))
}

/// Logs the failure (at a level matching whose fault it is) and answers with its JSON.
fn error_response(error: &RegisterError, allowed_origin: &str) -> ApiGatewayProxyResponse {
    let status = error.status();
    // The message is the error's Display text: for the missing table that is exactly
    // the spec's log line, `CUSTOMER_PROFILE_TABLE not configured`.
    if status >= 500 {
        tracing::error!(status, code = error.code(), "{error}");
    } else {
        tracing::warn!(status, code = error.code(), "{error}");
    }
    let mut details = Vec::new();
    if let Some(field) = error.field() {
        details.push(("field", json!(field)));
    }
    if error.needs_new_token() {
        details.push(("marketplaceUrl", json!(MARKETPLACE_LIBRARY_URL)));
    }
    cors::allow_origin(
        http::error_with(status, error.code(), &error.buyer_message(), &details),
        allowed_origin,
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests;

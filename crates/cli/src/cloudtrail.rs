//! The CloudTrail Event History adapter: [`TrailEvents`] over `aws-sdk-cloudtrail`
//! `LookupEvents`, in the metering Region (Event History is regional), 50 events a
//! page. Never CloudTrail Lake.
//!
//! The lookup filters on `EventName = BatchMeterUsage`, not on `EventSource`: the
//! seller guide says the source is `metering-marketplace.amazonaws.com`, the Smithy
//! model says `marketplacemetering.amazonaws.com`, and `LookupAttributes` takes only
//! one item. Events of either source are kept (checked in the core, per event).
//!
//! `LookupEvents` allows two calls per second per account and Region: the adapter
//! spaces its calls [`MIN_CALL_INTERVAL`] apart, and the SDK retries a throttled one.

use std::sync::Arc;

use async_trait::async_trait;
use aws_sdk_cloudtrail::Client;
use aws_sdk_cloudtrail::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_cloudtrail::primitives::DateTime;
use aws_sdk_cloudtrail::types::{LookupAttribute, LookupAttributeKey};
use awsmp_core::time::Instant;
use awsmp_operate::reconcile::{
    EVENT_NAME, MAX_RESULTS, RawTrailEvent, TrailError, TrailEvents, TrailPage,
};

/// The least time between two `LookupEvents` calls of one adapter (the API allows
/// two per second per account and Region).
pub const MIN_CALL_INTERVAL: std::time::Duration = std::time::Duration::from_millis(500);

/// [`TrailEvents`] over the CloudTrail SDK client of one Region.
#[derive(Debug, Clone)]
pub struct SdkTrailEvents {
    client: Client,
    last_call: Arc<tokio::sync::Mutex<Option<tokio::time::Instant>>>,
}

impl SdkTrailEvents {
    /// Wraps a client already configured for the metering Region.
    pub fn new(client: Client) -> Self {
        SdkTrailEvents {
            client,
            last_call: Arc::new(tokio::sync::Mutex::new(None)),
        }
    }

    /// Waits until [`MIN_CALL_INTERVAL`] has passed since the previous call.
    async fn pace(&self) {
        let mut last = self.last_call.lock().await;
        if let Some(at) = *last {
            tokio::time::sleep_until(at + MIN_CALL_INTERVAL).await;
        }
        *last = Some(tokio::time::Instant::now());
    }

    /// A client for `region` from a loaded SDK config (credentials, profile and
    /// endpoint overrides such as `AWS_ENDPOINT_URL_CLOUDTRAIL` come from it).
    pub fn in_region(config: &aws_config::SdkConfig, region: &str) -> Self {
        let conf = aws_sdk_cloudtrail::config::Builder::from(config)
            .region(aws_sdk_cloudtrail::config::Region::new(region.to_string()))
            .retry_config(aws_config::retry::RetryConfig::standard().with_max_attempts(5))
            .build();
        SdkTrailEvents::new(Client::from_conf(conf))
    }
}

fn map_error<E>(err: SdkError<E>) -> TrailError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let code = err.code().map(str::to_string);
    let message = err.message().map(str::to_string);
    let text = match (&code, &message) {
        (Some(c), Some(m)) => format!("{c}: {m}"),
        (Some(c), None) => c.clone(),
        _ => match not_cloudtrail(&err) {
            Some(answer) => answer,
            None => DisplayErrorContext(&err).to_string(),
        },
    };
    match code.as_deref() {
        Some(
            "AccessDeniedException"
            | "UnrecognizedClientException"
            | "OperationNotPermittedException"
            | "InvalidClientTokenId"
            | "ExpiredTokenException",
        ) => TrailError::Denied(text),
        Some("ThrottlingException" | "Throttling" | "TooManyRequestsException") => {
            TrailError::Throttled(text)
        }
        Some("InvalidNextTokenException") => TrailError::InvalidNextToken(text),
        _ => TrailError::Failed(text),
    }
}

/// An answer that is not CloudTrail's (no error code, a body that is not JSON: a web
/// page, another emulator), said in one line with what to check, instead of the
/// deserializer's dump.
fn not_cloudtrail<E>(err: &SdkError<E>) -> Option<String> {
    let raw = err.raw_response()?;
    let kind = raw
        .headers()
        .get("content-type")
        .unwrap_or("no content type");
    if kind.contains("json") {
        return None;
    }
    Some(format!(
        "the endpoint did not answer as CloudTrail (HTTP {}, {kind}): check AWS_ENDPOINT_URL_CLOUDTRAIL \
         or AWS_ENDPOINT_URL (on the local stack, point AWS_ENDPOINT_URL_CLOUDTRAIL at the Marketplace \
         simulator's URL, which `awsmp local up --serve` prints)",
        raw.status().as_u16()
    ))
}

#[async_trait]
impl TrailEvents for SdkTrailEvents {
    #[tracing::instrument(skip(self, next_token))]
    async fn lookup(
        &self,
        since: Instant,
        until: Instant,
        next_token: Option<String>,
    ) -> Result<TrailPage, TrailError> {
        let attribute = LookupAttribute::builder()
            .attribute_key(LookupAttributeKey::EventName)
            .attribute_value(EVENT_NAME)
            .build()
            .map_err(|e| TrailError::Failed(e.to_string()))?;
        self.pace().await;
        let out = self
            .client
            .lookup_events()
            .lookup_attributes(attribute)
            .start_time(DateTime::from_secs(since.timestamp()))
            .end_time(DateTime::from_secs(until.timestamp()))
            .max_results(MAX_RESULTS)
            .set_next_token(next_token)
            .send()
            .await
            .map_err(map_error)?;
        let raw = out
            .events()
            .iter()
            .map(|e| RawTrailEvent {
                event_id: e.event_id().map(str::to_string),
                event_name: e.event_name().map(str::to_string),
                cloudtrail_event: e.cloud_trail_event().map(str::to_string),
            })
            .collect();
        Ok(TrailPage::from_raw(
            raw,
            out.next_token()
                .map(str::to_string)
                .filter(|t| !t.is_empty()),
        ))
    }
}

//! Process-level helpers every Lambda's `main` uses: the SDK config, JSON tracing, the
//! system clock, and reading work messages.

use std::time::Duration;

use async_trait::async_trait;
use aws_config::{BehaviorVersion, Region, SdkConfig};
use awsmp_core::ports::{Clock, WorkMessage};
use awsmp_core::time::Instant;
use chrono::{DateTime, Utc};
use tracing_subscriber::EnvFilter;

/// The SDK config, loaded once per process. Endpoints come from the SDK's own
/// variables (`AWS_ENDPOINT_URL`, `AWS_ENDPOINT_URL_DYNAMODB`, `AWS_ENDPOINT_URL_SQS`,
/// `AWS_ENDPOINT_URL_MARKETPLACE_METERING`); handlers never read them.
pub async fn load_sdk_config() -> SdkConfig {
    if let Some(local) = crate::local::local_sdk_config(None) {
        return local;
    }
    aws_config::load_defaults(BehaviorVersion::latest()).await
}

/// Like [`load_sdk_config`] for another Region (the subscribers table lives in
/// us-east-1; `ResolveCustomer` may be called in its own Region).
pub async fn load_sdk_config_in(region: &str) -> SdkConfig {
    if let Some(local) = crate::local::local_sdk_config(Some(region)) {
        return local;
    }
    aws_config::defaults(BehaviorVersion::latest())
        .region(Region::new(region.to_string()))
        .load()
        .await
}

/// JSON logs for Lambda (`LogFormat: JSON`), no ANSI colours. The filter is `RUST_LOG`
/// when set, else Lambda's `AWS_LAMBDA_LOG_LEVEL`, else `info`. Calling it twice is
/// harmless (the second call does nothing).
pub fn init_tracing() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        let level = std::env::var("AWS_LAMBDA_LOG_LEVEL")
            .ok()
            .map(|l| lambda_level(&l))
            .unwrap_or("info");
        EnvFilter::new(level)
    });
    // At TRACE the SDK's orchestrator logs whole request bodies, which would put a
    // ResolveCustomer registration token in the logs: cap it, whatever was asked.
    let filter = match SDK_ORCHESTRATOR_CAP.parse() {
        Ok(cap) => filter.add_directive(cap),
        Err(_) => filter,
    };
    let _ = tracing_subscriber::fmt()
        .json()
        .with_env_filter(filter)
        .with_ansi(false)
        .with_current_span(false)
        .try_init();
}

/// The most verbose level the SDK's request orchestrator may log at (see [`init_tracing`]).
pub const SDK_ORCHESTRATOR_CAP: &str = "aws_smithy_runtime::client::orchestrator=info";

/// Lambda's log levels as `tracing` levels (FATAL has no equal: error).
fn lambda_level(level: &str) -> &'static str {
    match level.trim().to_ascii_uppercase().as_str() {
        "TRACE" => "trace",
        "DEBUG" => "debug",
        "WARN" => "warn",
        "ERROR" | "FATAL" => "error",
        _ => "info",
    }
}

/// The real clock: whole-second UTC now, `tokio::time::sleep`.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

#[async_trait]
impl Clock for SystemClock {
    fn now(&self) -> Instant {
        let now = Utc::now();
        // Instants have whole-second meaning everywhere in the domain.
        DateTime::from_timestamp(now.timestamp(), 0).unwrap_or(now)
    }

    async fn sleep(&self, duration: Duration) {
        tokio::time::sleep(duration).await;
    }
}

/// An SQS body that is not a [`WorkMessage`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("message body is not a work message ({reason}); body starts with {excerpt:?}")]
pub struct WorkMessageError {
    /// What serde found wrong.
    pub reason: String,
    /// The first characters of the body.
    pub excerpt: String,
}

/// Reads an SQS body written by [`crate::SqsWorkQueue`].
pub fn parse_work_message(body: &str) -> Result<WorkMessage, WorkMessageError> {
    serde_json::from_str(body).map_err(|e| WorkMessageError {
        reason: e.to_string(),
        excerpt: body.chars().take(120).collect(),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use awsmp_core::model::{GroupKey, ReasonCode};

    #[test]
    fn work_messages_round_trip_and_garbage_is_explained() {
        let group = GroupKey {
            license_arn: "arn:aws:license-manager::1:license:l-1".into(),
            customer_aws_account_id: "111122223333".into(),
            dimension: "requests".into(),
            hour: "2026-11-30T10".parse().unwrap(),
        };
        let messages = [
            WorkMessage::Aggregate {
                group: group.clone(),
                flush: true,
            },
            WorkMessage::Cleanup {
                group,
                aggregated: vec!["a".into()],
                rejected: vec![("b".into(), ReasonCode::MalformedTimestamp)],
            },
        ];
        for message in messages {
            let body = serde_json::to_string(&message).unwrap();
            assert_eq!(parse_work_message(&body).unwrap(), message);
        }
        let err = parse_work_message(r#"{"kind":"explode"}"#).unwrap_err();
        assert!(err.to_string().contains("explode"), "{err}");
        assert!(parse_work_message("").is_err());
    }

    #[test]
    fn the_orchestrator_cap_is_a_valid_directive() {
        assert!(
            SDK_ORCHESTRATOR_CAP
                .parse::<tracing_subscriber::filter::Directive>()
                .is_ok()
        );
    }

    #[test]
    fn lambda_levels_map_to_tracing_levels() {
        assert_eq!(lambda_level("DEBUG"), "debug");
        assert_eq!(lambda_level("fatal"), "error");
        assert_eq!(lambda_level("bogus"), "info");
    }

    #[test]
    fn system_clock_has_whole_seconds() {
        assert_eq!(SystemClock.now().timestamp_subsec_nanos(), 0);
    }
}

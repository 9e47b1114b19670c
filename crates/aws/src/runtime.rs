//! Process-level helpers every Lambda's `main` uses: the SDK config, JSON tracing, the
//! system clock, and reading work messages.

use std::time::Duration;

use async_trait::async_trait;
use aws_config::{BehaviorVersion, Region, SdkConfig};
use awsmp_core::ports::{Clock, WorkMessage};
use awsmp_core::time::Instant;
use chrono::{DateTime, Utc};
use tracing_subscriber::EnvFilter;

/// The SDK behaviour every client of ours runs with, pinned so that an SDK upgrade
/// cannot change retries or timeouts unseen (`latest()` moves with the SDK); raise it
/// deliberately, reading the new version's notes.
pub fn behavior_version() -> BehaviorVersion {
    BehaviorVersion::v2026_01_12()
}

/// The SDK config, loaded once per process. Endpoints come from the SDK's own
/// variables (`AWS_ENDPOINT_URL`, `AWS_ENDPOINT_URL_DYNAMODB`, `AWS_ENDPOINT_URL_SQS`,
/// `AWS_ENDPOINT_URL_MARKETPLACE_METERING`); handlers never read them.
pub async fn load_sdk_config() -> SdkConfig {
    if let Some(local) = crate::local::local_sdk_config(None) {
        return local;
    }
    aws_config::load_defaults(behavior_version()).await
}

/// Like [`load_sdk_config`] for another Region (the subscribers table lives in
/// us-east-1; `ResolveCustomer` may be called in its own Region).
pub async fn load_sdk_config_in(region: &str) -> SdkConfig {
    if let Some(local) = crate::local::local_sdk_config(Some(region)) {
        return local;
    }
    aws_config::defaults(behavior_version())
        .region(Region::new(region.to_string()))
        .load()
        .await
}

/// JSON logs for Lambda (`LogFormat: JSON`), no ANSI colours, filtered by
/// [`tracing_filter`] over `RUST_LOG` and Lambda's `AWS_LAMBDA_LOG_LEVEL`. Calling it
/// twice is harmless (the second call does nothing).
pub fn init_tracing() {
    let filter = tracing_filter(
        std::env::var("RUST_LOG").ok().as_deref(),
        std::env::var("AWS_LAMBDA_LOG_LEVEL").ok().as_deref(),
    );
    let _ = tracing_subscriber::fmt()
        .json()
        .with_env_filter(filter)
        .with_ansi(false)
        .with_current_span(false)
        .try_init();
}

/// The filter: `rust_log` when set and valid, else the Lambda log level, else `info`;
/// then every [`CAPPED_TARGETS`] directive on top, whatever was asked. At DEBUG and
/// TRACE the Lambda runtime logs the raw invocation event, and the HTTP stack and the
/// SDK's orchestrator log request and response bodies: a registration token, form
/// fields, or `ResolveCustomer`'s request would reach the logs.
pub fn tracing_filter(rust_log: Option<&str>, lambda_log_level: Option<&str>) -> EnvFilter {
    let mut filter = rust_log
        .filter(|directives| !directives.trim().is_empty())
        .and_then(|directives| EnvFilter::try_new(directives).ok())
        .unwrap_or_else(|| EnvFilter::new(lambda_log_level.map_or("info", lambda_level)));
    for cap in CAPPED_TARGETS {
        if let Ok(directive) = cap.parse() {
            filter = filter.add_directive(directive);
        }
    }
    filter
}

/// The most verbose level the SDK's request orchestrator may log at (see [`init_tracing`]).
pub const SDK_ORCHESTRATOR_CAP: &str = "aws_smithy_runtime::client::orchestrator=info";

/// Crates that log what they carry (events, request and response bodies, headers) at
/// DEBUG or TRACE, each capped at INFO: the Lambda runtime and its API client, the HTTP
/// stack (hyper, h2, the smithy HTTP client), the SDK's runtime and request signing.
pub const CAPPED_TARGETS: &[&str] = &[
    SDK_ORCHESTRATOR_CAP,
    "aws_smithy_runtime=info",
    "aws_smithy_runtime_api=info",
    "aws_smithy_http_client=info",
    "aws_smithy_http=info",
    "aws_sigv4=info",
    "aws_config=info",
    "lambda_runtime=info",
    "lambda_runtime_api_client=info",
    "hyper=info",
    "hyper_util=info",
    "h2=info",
    "rustls=info",
    "tower=info",
];

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
    fn every_cap_is_a_valid_directive() {
        for cap in CAPPED_TARGETS {
            assert!(
                cap.parse::<tracing_subscriber::filter::Directive>().is_ok(),
                "{cap}"
            );
        }
    }

    #[derive(Clone, Default)]
    struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// What the JSON logs hold after the runtime, the HTTP stack and the SDK log a
    /// token at every level, and the application logs a marker at TRACE.
    fn logged_under(rust_log: Option<&str>, lambda_level: Option<&str>) -> String {
        const TOKEN: &str = "tok-SECRET-registration-token";
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .json()
            .with_env_filter(tracing_filter(rust_log, lambda_level))
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            macro_rules! everywhere {
                ($target:literal) => {
                    tracing::trace!(target: $target, body = TOKEN, "raw event");
                    tracing::debug!(target: $target, body = TOKEN, "raw event");
                };
            }
            everywhere!("lambda_runtime");
            everywhere!("lambda_runtime::layers::trace");
            everywhere!("lambda_runtime_api_client");
            everywhere!("hyper::proto::h1::io");
            everywhere!("hyper_util::client::legacy");
            everywhere!("h2::codec");
            everywhere!("aws_smithy_runtime::client::orchestrator");
            everywhere!("aws_smithy_runtime::client::http");
            everywhere!("aws_smithy_http_client::hyper_1");
            everywhere!("aws_sigv4::http_request::sign");
            tracing::trace!(target: "awsmp_register", "application trace marker");
        });
        let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
        assert!(
            !text.contains(TOKEN),
            "a token was logged under RUST_LOG={rust_log:?}, level {lambda_level:?}:\n{text}"
        );
        text
    }

    #[test]
    fn no_configurable_level_logs_a_token() {
        // Every level the templates' ApplicationLogLevel offers, and the ones it refuses.
        for level in ["TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL"] {
            logged_under(None, Some(level));
        }
        // RUST_LOG asking for everything, or for exactly the capped crates.
        logged_under(Some("trace"), None);
        logged_under(
            Some("lambda_runtime=trace,hyper=trace,aws_smithy_runtime=trace,aws_sigv4=trace"),
            Some("TRACE"),
        );
        // The filter still lets the application log at TRACE: the caps are not a blanket.
        assert!(logged_under(None, Some("TRACE")).contains("application trace marker"));
        assert!(!logged_under(None, Some("INFO")).contains("application trace marker"));
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

//! JSON tracing for Lambda, with the filter that keeps tokens and request bodies out
//! of the logs whatever level is asked for.

use tracing_subscriber::EnvFilter;

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

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

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
}

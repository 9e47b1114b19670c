//! JSON tracing for Lambda, with the filter that keeps tokens and request bodies out
//! of the logs whatever level is asked for.

use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::{FilterExt, LevelFilter, Targets};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;

/// JSON logs for Lambda (`LogFormat: JSON`), no ANSI colours, filtered by
/// [`tracing_filter`] over `RUST_LOG` and Lambda's `AWS_LAMBDA_LOG_LEVEL`, and by the
/// caps ([`caps`]). Calling it twice is harmless (the second call does nothing).
pub fn init_tracing() {
    let subscriber = json_subscriber(
        std::env::var("RUST_LOG").ok().as_deref(),
        std::env::var("AWS_LAMBDA_LOG_LEVEL").ok().as_deref(),
        std::io::stdout,
    );
    // `try_init` also forwards the `log` crate's records (tracing-log), as before.
    let _ = tracing_subscriber::util::SubscriberInitExt::try_init(subscriber);
}

/// The Lambdas' subscriber writing to `writer`: JSON lines that pass both the level
/// asked for ([`tracing_filter`]) and the caps ([`caps`]). The caps are a filter of
/// their own, so no `RUST_LOG` directive lifts them: `[span]=trace` enables every
/// event inside that span in an `EnvFilter`, the capped crates' included, but not past
/// a second filter that reads only each event's target and level.
pub fn json_subscriber<W>(
    rust_log: Option<&str>,
    lambda_log_level: Option<&str>,
    writer: W,
) -> impl tracing::Subscriber + Send + Sync + 'static
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let layer = tracing_subscriber::fmt::layer()
        .json()
        .with_ansi(false)
        .with_current_span(false)
        .with_writer(writer);
    tracing_subscriber::registry().with(tracing_subscriber::Layer::with_filter(
        layer,
        tracing_filter(rust_log, lambda_log_level).and(caps()),
    ))
}

/// [`CAPPED_TARGETS`] as a filter: each capped crate at INFO at most, everything else
/// let through (the level asked for decides).
pub fn caps() -> Targets {
    CAPPED_TARGETS
        .iter()
        .filter_map(|cap| cap.split_once('='))
        .fold(
            Targets::new().with_default(LevelFilter::TRACE),
            |targets, (target, level)| {
                targets.with_target(target, level.parse().unwrap_or(LevelFilter::INFO))
            },
        )
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
        let subscriber = json_subscriber(rust_log, lambda_level, move || writer.clone());
        tracing::subscriber::with_default(subscriber, || {
            // Inside a span, as the runtime's invocation span encloses every handler.
            let span = tracing::info_span!("Lambda runtime invoke");
            let _inside = span.enter();
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
        // A span directive: in an EnvFilter alone it enables every event inside the
        // invocation's span, the SDK's request dump included.
        logged_under(Some("[Lambda runtime invoke]=trace"), None);
        logged_under(
            Some("info,[{body}]=trace,[Lambda runtime invoke]=trace"),
            None,
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

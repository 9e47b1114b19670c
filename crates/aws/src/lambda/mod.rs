//! What every Lambda crate of ours shares beside its handler: its configuration read
//! from the environment ([`EnvReader`]), the SQS partial-batch loop ([`sqs_batch`]),
//! the scheduled run's and each message's "now" ([`scheduled_now`], [`message_now`]) and
//! one mapping of a handler's error to
//! the runtime's [`Diagnostic`] ([`FunctionError`], [`diagnostic`]).
//!
//! Each crate has the same shape: `Config::from_env()` (through [`EnvReader`]), a
//! `State` built once by `State::connect(&SdkConfig, &Config)` from the one SDK config
//! its `main.rs` loads (`aws_config::load_defaults(awsmp_aws::behavior_version())`), and
//! `handler(&State, LambdaEvent<_>)`; `main.rs` is bootstrap only.

mod batch;
mod env;

use aws_lambda_events::eventbridge::EventBridgeEvent;
use awsmp_core::ports::Clock;
use awsmp_core::time::Instant;
use chrono::Timelike;
use lambda_runtime::Diagnostic;

pub use awsmp_core::config::ConfigError;
pub use batch::{BatchError, MessageFailure, sqs_batch};
pub use env::{EnvReader, process_env};

/// A handler error with a stable name, the runtime's `errorType`: what the function's
/// logs and error metrics are filtered by, so it never changes with the message.
pub trait FunctionError: std::error::Error {
    /// The stable name of this failure.
    fn error_type(&self) -> &'static str;
}

/// The [`Diagnostic`] the runtime reports for `error`: its [`FunctionError::error_type`]
/// and its message. Every crate's `From<…> for Diagnostic` is this.
pub fn diagnostic<E: FunctionError + ?Sized>(error: &E) -> Diagnostic {
    Diagnostic {
        error_type: error.error_type().to_string(),
        error_message: error.to_string(),
    }
}

/// The instant a scheduled run works at: the event's `time` when it carries one (so any
/// run can be replayed with its event), else the clock; whole seconds either way.
pub fn scheduled_now(event: &EventBridgeEvent, clock: &dyn Clock) -> Instant {
    awsmp_core::pipeline::now_from_event(event.time, clock)
}

/// The instant one SQS message is handled at: the clock, in whole seconds (instants
/// have whole-second meaning in the domain; [`crate::SystemClock`] has full precision).
pub fn message_now(clock: &dyn Clock) -> Instant {
    let now = clock.now();
    now.with_nanosecond(0).unwrap_or(now)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use awsmp_core::clock::ManualClock;

    #[derive(Debug, thiserror::Error)]
    #[error("the table is gone")]
    struct Gone;

    impl FunctionError for Gone {
        fn error_type(&self) -> &'static str {
            "TableGone"
        }
    }

    #[test]
    fn a_diagnostic_names_the_failure_and_carries_its_message() {
        let d = diagnostic(&Gone);
        assert_eq!(d.error_type, "TableGone");
        assert_eq!(d.error_message, "the table is gone");
    }

    #[test]
    fn a_scheduled_run_works_at_its_event_time_else_the_clock_in_whole_seconds() {
        let clock = ManualClock::new("2026-11-30T10:00:00.750Z".parse().unwrap());
        let mut event: EventBridgeEvent = EventBridgeEvent::default();
        assert_eq!(
            scheduled_now(&event, &clock),
            "2026-11-30T10:00:00Z".parse::<Instant>().unwrap()
        );
        event.time = Some("2026-11-30T09:15:42.500Z".parse().unwrap());
        assert_eq!(
            scheduled_now(&event, &clock),
            "2026-11-30T09:15:42Z".parse::<Instant>().unwrap()
        );
    }

    #[test]
    fn a_message_is_handled_at_the_clock_in_whole_seconds() {
        let clock = ManualClock::new("2026-11-30T10:00:00.750Z".parse().unwrap());
        assert_eq!(
            message_now(&clock),
            "2026-11-30T10:00:00Z".parse::<Instant>().unwrap()
        );
    }
}

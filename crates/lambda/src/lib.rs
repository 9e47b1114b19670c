//! awsmp-lambda: the one Lambda skeleton every function crate of ours shares beside its
//! handler: its bootstrap ([`init`]: JSON tracing from [`logging`], the SDK config from
//! [`sdk`]),
//! its configuration read from the environment ([`EnvReader`], with the variables
//! several functions read in one place), the SQS partial-batch loop ([`sqs_batch`]) and
//! the work-message loop on it ([`work_batch`], [`MessageError`]), the scheduled run's
//! and each message's "now" and time budget ([`scheduled_now`], [`message_now`],
//! [`invocation_budget`]), the scheduled runs' outcome ([`finish_run`], [`RunError`]),
//! the config and state of the subscribers-table functions ([`SubscribersTableConfig`],
//! [`SubscribersTableState`]) and one mapping of a handler's error to the runtime's
//! [`Diagnostic`] ([`FunctionError`], [`diagnostic`]); and for the functions behind API
//! Gateway, the one HTTP skeleton ([`http`]: routes, headers, bodies, answers and their
//! security headers).
//!
//! Each crate has the same shape: `Config::from_lookup(lookup)` (through
//! [`EnvReader`]), a `State` built once by `State::connect(&SdkConfig, &Config)`, and
//! `handler(&State, LambdaEvent<_>)`; `main.rs` is bootstrap only: [`init`] (tracing,
//! config from the process environment, the one SDK config, the state), then
//! `lambda_runtime::run`.

mod batch;
mod env;
pub mod http;
mod init;
pub mod logging;
mod scheduled;
pub mod sdk;
pub mod stream;
mod subscribers;
mod vars;
mod work;

use aws_lambda_events::eventbridge::EventBridgeEvent;
use awsmp_core::pipeline::budget::Budget;
use awsmp_core::ports::Clock;
use awsmp_core::time::Instant;
use chrono::Timelike;
use lambda_runtime::{Context, Diagnostic};

pub use awsmp_core::config::ConfigError;
pub use batch::{BatchError, MessageFailure, sqs_batch};
pub use env::{EnvReader, process_env};
pub use init::init;
pub use logging::init_tracing;
pub use scheduled::{RunError, RunReport, finish_run};
pub use subscribers::{SUBSCRIBERS_TABLE_ENV_VARS, SubscribersTableConfig, SubscribersTableState};
pub use work::{MessageError, work_batch};

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
/// have whole-second meaning in the domain; [`awsmp_aws::SystemClock`] has full precision).
pub fn message_now(clock: &dyn Clock) -> Instant {
    let now = clock.now();
    now.with_nanosecond(0).unwrap_or(now)
}

/// The time budget of the invocation of `context`: its deadline less `margin_seconds`
/// (room to finish the write in progress and answer); none for a hand-built context.
pub fn invocation_budget(context: &Context, margin_seconds: i64) -> Budget {
    Budget::from_deadline_millis(context.deadline, chrono::Duration::seconds(margin_seconds))
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

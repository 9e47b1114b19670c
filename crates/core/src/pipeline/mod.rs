//! The metering use cases each Lambda runs over the ports: discover, aggregate, clean
//! up, submit. Pure orchestration: every decision comes from the domain modules, every
//! effect goes through a `&dyn Port`, and each is tested with the in-memory ports.
//!
//! Every status transition, and the function that makes it:
//!
//! | row | transition | made by |
//! |---|---|---|
//! | raw | pending -> counted (`aggregatedInto` set, atomically with the record fold) | [`aggregation::aggregate_group`] via `AggregatedStore::commit` |
//! | raw | counted -> `Aggregated` | [`cleanup::cleanup`]; [`discover::discover`] when the row's hour has expired first |
//! | raw | pending -> `RejectedClientSide` + reason (guardrails, `HourAlreadySubmitted`) | [`cleanup::cleanup`], from the aggregator's verdicts |
//! | raw | pending -> `RejectedClientSide` + reason (row the index cannot place) | [`discover::discover`] |
//! | raw | zero-quantity group under `skip` -> `Aggregated` (no record) | [`aggregation::aggregate_group`] |
//! | raw | pending -> `AggregationExpired` | [`discover::discover`] (age-out) |
//! | aggregated | created / folded `Pending` | [`aggregation::aggregate_group`] (or the seller, direct-submit) |
//! | aggregated | claimed (`inFlightUntil`) / released | [`submit::submit`] |
//! | aggregated | -> `Success`, `DuplicateRecord`, `CustomerNotSubscribed`, `Error` | [`submit::submit`] |
//! | aggregated | -> `DryRunSubmitted` | [`submit::submit`] in dry-run mode |
//! | aggregated | -> `SubmissionExpired` | [`submit::submit`] (age-out) |

pub mod aggregation;
pub mod budget;
pub mod cleanup;
pub mod discover;
pub mod error;
pub mod pacing;
pub mod retry;
pub mod submit;

use chrono::Timelike;

use crate::ports::Clock;
use crate::time::Instant;

/// The instant a scheduled run works at: the triggering event's `time` when it carries
/// one (so any run can be replayed), else the clock; whole seconds either way.
pub fn now_from_event(event_time: Option<Instant>, clock: &dyn Clock) -> Instant {
    let now = event_time.unwrap_or_else(|| clock.now());
    now.with_nanosecond(0).unwrap_or(now)
}

#[cfg(test)]
pub(crate) mod testkit;

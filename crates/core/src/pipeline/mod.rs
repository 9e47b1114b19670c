//! What every use case shares (each use case lives with its feature: `discover`,
//! `aggregate::run`, `cleanup`, `submit`; `lifecycle::subscription` and
//! `lifecycle::deprovision` in the events stack): the invocation's time [`budget`], the
//! use-case [`error`], [`retry`] of transient store failures, and the run's "now".
//! Use cases are pure orchestration: every decision comes from the domain modules,
//! every effect goes through a `&dyn Port`, and each is tested with the in-memory ports.
//!
//! Which function writes each status transition: the map in ARCHITECTURE.md
//! ("Status transitions and their code"), kept in one place.

pub mod budget;
pub mod error;
pub mod retry;

use std::ops::Range;

use chrono::Timelike;

use crate::ports::Clock;
use crate::time::Instant;

/// The instant a scheduled run works at: the triggering event's `time` when it carries
/// one (so any run can be replayed), else the clock; whole seconds either way.
pub fn now_from_event(event_time: Option<Instant>, clock: &dyn Clock) -> Instant {
    let now = event_time.unwrap_or_else(|| clock.now());
    now.with_nanosecond(0).unwrap_or(now)
}

/// Splits entries of `sizes` bytes, in order, into consecutive batches of at most
/// `max_entries` entries whose sizes add up to at most `max_bytes`. A body larger than
/// `max_bytes` gets a batch of its own (callers refuse those before sending). SQS's `SendMessageBatch` and EventBridge's
/// `PutEvents` both take ten entries and 256 KiB a request.
pub fn batch_ranges(sizes: &[usize], max_entries: usize, max_bytes: usize) -> Vec<Range<usize>> {
    let mut ranges = Vec::new();
    let mut start = 0;
    let mut bytes = 0usize;
    for (i, size) in sizes.iter().enumerate() {
        let full = i - start >= max_entries.max(1) || bytes.saturating_add(*size) > max_bytes;
        if i > start && full {
            ranges.push(start..i);
            start = i;
            bytes = 0;
        }
        bytes = bytes.saturating_add(*size);
    }
    if start < sizes.len() {
        ranges.push(start..sizes.len());
    }
    ranges
}

#[cfg(test)]
pub(crate) mod testkit;

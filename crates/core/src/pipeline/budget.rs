//! The time budget of one invocation: a deadline (from the Lambda context, minus a
//! safety margin) checked against the [`Clock`] port, so long walks stop cleanly and
//! leave the rest for the next run instead of being killed mid-write.

use chrono::Duration;

use crate::ports::Clock;
use crate::time::Instant;

/// When a run must stop starting new work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    deadline: Option<Instant>,
    /// When the invocation itself ends (Lambda stops it): the deadline plus its margin.
    end: Option<Instant>,
}

impl Budget {
    /// No deadline (tools and tests that run to completion).
    pub const UNLIMITED: Budget = Budget {
        deadline: None,
        end: None,
    };

    /// Stop starting work at `deadline`, which is also when the run ends.
    pub fn until(deadline: Instant) -> Self {
        Budget {
            deadline: Some(deadline),
            end: Some(deadline),
        }
    }

    /// The budget of a Lambda invocation that ends at `deadline`: stop starting work
    /// `margin` before it (room to finish the write in progress and report).
    pub fn before(deadline: Instant, margin: Duration) -> Self {
        Budget {
            deadline: Some(deadline - margin),
            end: Some(deadline),
        }
    }

    /// The budget of a Lambda invocation whose context deadline is `deadline_ms`
    /// (epoch milliseconds). 0, what a hand-built test context carries, means none.
    pub fn from_deadline_millis(deadline_ms: u64, margin: Duration) -> Self {
        i64::try_from(deadline_ms)
            .ok()
            .filter(|ms| *ms > 0)
            .and_then(chrono::DateTime::from_timestamp_millis)
            .map_or(Budget::UNLIMITED, |d| Budget::before(d, margin))
    }

    /// The same budget, but starting no work after `at` either (the end, and so every
    /// claim's lease, is unchanged).
    pub fn stopping_by(self, at: Instant) -> Self {
        Budget {
            deadline: Some(self.deadline.map_or(at, |d| d.min(at))),
            end: self.end,
        }
    }

    /// The deadline, if any.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// When the invocation ends (nothing it holds outlives this), if it has a deadline.
    pub fn end(&self) -> Option<Instant> {
        self.end
    }

    /// Whether the deadline has passed on `clock`.
    pub fn exhausted(&self, clock: &dyn Clock) -> bool {
        self.deadline.is_some_and(|d| clock.now() >= d)
    }

    /// Time left on `clock` (`None` when unlimited; zero once exhausted).
    pub fn remaining(&self, clock: &dyn Clock) -> Option<Duration> {
        self.deadline
            .map(|d| (d - clock.now()).max(Duration::zero()))
    }
}

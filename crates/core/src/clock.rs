//! A [`Clock`] under the caller's control: a virtual time for the local stack,
//! simulations and tests, where sleeping advances the time instead of waiting.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;

use crate::ports::Clock;
use crate::sync::lock;
use crate::time::Instant;

#[derive(Debug)]
struct ClockState {
    now: Instant,
    sleeps: Vec<Duration>,
}

/// [`Clock`] under test control: `sleep` returns at once, advancing the time by the
/// duration and recording it, so backoff is observable and tests never wait.
#[derive(Debug, Clone)]
pub struct ManualClock {
    state: Arc<Mutex<ClockState>>,
}

impl ManualClock {
    /// A clock standing at `start`.
    pub fn new(start: Instant) -> Self {
        ManualClock {
            state: Arc::new(Mutex::new(ClockState {
                now: start,
                sleeps: Vec::new(),
            })),
        }
    }

    /// Moves the time to `now` (backwards too).
    pub fn set(&self, now: Instant) {
        lock(&self.state).now = now;
    }

    /// Moves the time forward by `duration`, without recording a sleep.
    pub fn advance(&self, duration: Duration) {
        let mut state = lock(&self.state);
        state.now = add_std(state.now, duration);
    }

    /// Every sleep so far, in order.
    pub fn sleeps(&self) -> Vec<Duration> {
        lock(&self.state).sleeps.clone()
    }

    /// The sum of every sleep so far.
    pub fn total_slept(&self) -> Duration {
        lock(&self.state).sleeps.iter().sum()
    }
}

/// `t + d`, saturating at the latest representable instant.
fn add_std(t: Instant, d: Duration) -> Instant {
    chrono::Duration::from_std(d)
        .ok()
        .and_then(|d| t.checked_add_signed(d))
        .unwrap_or(chrono::DateTime::<chrono::Utc>::MAX_UTC)
}

#[async_trait]
impl Clock for ManualClock {
    fn now(&self) -> Instant {
        lock(&self.state).now
    }

    async fn sleep(&self, duration: Duration) {
        let mut state = lock(&self.state);
        state.now = add_std(state.now, duration);
        state.sleeps.push(duration);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::time::parse_usage_timestamp;

    fn t(s: &str) -> Instant {
        parse_usage_timestamp(s).unwrap()
    }
    #[tokio::test]
    async fn manual_clock_sleep_advances_and_records() {
        let clock = ManualClock::new(t("2026-11-30T10:00:00Z"));
        clock.sleep(Duration::from_millis(1500)).await;
        clock.sleep(Duration::from_secs(2)).await;
        clock.advance(Duration::from_secs(60));
        assert_eq!(
            clock.sleeps(),
            vec![Duration::from_millis(1500), Duration::from_secs(2)]
        );
        assert_eq!(clock.total_slept(), Duration::from_millis(3500));
        assert_eq!(
            clock.now(),
            t("2026-11-30T10:01:03Z") + chrono::Duration::milliseconds(500)
        );
        clock.set(t("2026-12-01T00:00:00Z"));
        assert_eq!(clock.now(), t("2026-12-01T00:00:00Z"));
    }
}

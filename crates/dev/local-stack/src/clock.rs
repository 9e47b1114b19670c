//! The local stack's one clock: every handler, the usage API's "when received", each
//! invocation's deadline and the schedules read it. It stands still between the steps
//! the system takes (a handler's sleep, its pacing or backoff, moves it forward
//! instead of waiting), so a run's budget and its calls agree however fast the steps
//! come; serving, the steps follow the wall clock (`LocalSystem::step_to_clock`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use awsmp_core::ports::Clock;
use awsmp_core::time::Instant;

/// The local stack's clock (cheap to clone; clones share it).
#[derive(Debug, Clone)]
pub struct LocalClock {
    at: Arc<Mutex<Instant>>,
}

impl LocalClock {
    /// A clock standing at `start`.
    pub fn new(start: Instant) -> Self {
        LocalClock {
            at: Arc::new(Mutex::new(start)),
        }
    }

    /// Moves the clock forward to `at` (never back: a handler's sleep may have moved it
    /// past `at` already).
    pub fn advance_to(&self, at: Instant) {
        let mut now = crate::lock(&self.at);
        if at > *now {
            *now = at;
        }
    }
}

#[async_trait]
impl Clock for LocalClock {
    fn now(&self) -> Instant {
        *crate::lock(&self.at)
    }

    async fn sleep(&self, duration: Duration) {
        *crate::lock(&self.at) += chrono::Duration::from_std(duration).unwrap_or_default();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use awsmp_core::time::parse_usage_timestamp;

    #[tokio::test]
    async fn it_stands_still_and_only_moves_forward() {
        let start = parse_usage_timestamp("2026-12-03T10:00:00Z").unwrap();
        let clock = LocalClock::new(start);
        clock.sleep(Duration::from_millis(100)).await;
        assert_eq!(clock.now(), start + chrono::Duration::milliseconds(100));
        clock.advance_to(start);
        assert_eq!(
            clock.now(),
            start + chrono::Duration::milliseconds(100),
            "never back"
        );
        clock.advance_to(start + chrono::Duration::minutes(5));
        assert_eq!(clock.now(), start + chrono::Duration::minutes(5));
    }
}

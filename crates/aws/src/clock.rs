//! The real [`Clock`]: the system's UTC time at full precision, `tokio::time::sleep`.

use std::time::Duration;

use async_trait::async_trait;
use awsmp_core::ports::Clock;
use awsmp_core::time::Instant;

/// The real clock: UTC now at full precision (the submitter spaces its calls 100 ms
/// apart, and deadlines are milliseconds), `tokio::time::sleep`. Where an instant has
/// whole-second meaning (a scheduled run's or a message's "now", every stored stamp),
/// the caller truncates it: `awsmp_lambda::scheduled_now`,
/// `awsmp_lambda::message_now`, [`awsmp_core::time::format_instant`].
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

#[async_trait]
impl Clock for SystemClock {
    fn now(&self) -> Instant {
        chrono::Utc::now()
    }

    async fn sleep(&self, duration: Duration) {
        tokio::time::sleep(duration).await;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_system_clock_sees_milliseconds() {
        let clock = SystemClock;
        let before = clock.now();
        clock.sleep(Duration::from_millis(30)).await;
        let elapsed = clock.now() - before;
        assert!(elapsed >= chrono::Duration::milliseconds(30), "{elapsed}");
        assert!(elapsed < chrono::Duration::seconds(1), "{elapsed}");
    }
}

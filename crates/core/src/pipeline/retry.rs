//! Retrying transient store failures (throttling, a blip) with exponential backoff and
//! full jitter, sleeping through the [`Clock`] port so tests never wait. Jitter keeps
//! concurrent retries (many aggregators, many cleanups) from re-colliding in lockstep.

use std::future::Future;
use std::time::Duration;

use tracing::warn;

use crate::backoff::Backoff;
use crate::ports::{Clock, PortError};
use crate::random::random_u64;

/// The seeding of [`random_u64`], at the path crates/dev/dst still imports it from
/// (its home is [`crate::random`]; drop this once the simulation imports it there).
#[cfg(feature = "test-util")]
pub use crate::random::seed_randomness;

/// How often and how patiently to retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Total attempts (1 = no retry).
    pub attempts: u32,
    /// The wait between attempts (the one full-jitter backoff, [`Backoff`]).
    pub backoff: Backoff,
}

impl RetryPolicy {
    /// Store writes inside an SQS-driven stage: a few quick tries, then the message
    /// fails and SQS redelivers it later (the longer backoff).
    pub const STORE: RetryPolicy = RetryPolicy {
        attempts: 4,
        backoff: Backoff {
            base: Duration::from_millis(50),
            cap: Duration::from_secs(2),
        },
    };

    /// The backoff before retry number `retry` (1-based): uniformly random in
    /// `[0, min(cap, base * 2^(retry-1)))` ("full jitter", [`Backoff::delay`]).
    pub fn delay(&self, retry: u32) -> Duration {
        self.backoff.delay(retry, random_u64())
    }
}

/// Runs `op`, retrying [`PortError::Transient`] failures per `policy`; other errors
/// and the last transient one are returned.
pub async fn retry_transient<T, F, Fut>(
    clock: &dyn Clock,
    policy: RetryPolicy,
    mut op: F,
) -> Result<T, PortError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, PortError>>,
{
    let mut attempt = 1;
    loop {
        match op().await {
            Err(PortError::Transient { operation, message }) if attempt < policy.attempts => {
                let delay = policy.delay(attempt);
                warn!(operation, %message, attempt, ?delay, "transient store failure; backing off");
                clock.sleep(delay).await;
                attempt += 1;
            }
            other => return other,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn delays_stay_under_a_doubling_capped_ceiling_and_spread() {
        let policy = RetryPolicy {
            attempts: 10,
            backoff: Backoff {
                base: Duration::from_millis(100),
                cap: Duration::from_millis(500),
            },
        };
        let mut seen = std::collections::BTreeSet::new();
        for retry in 1..=8u32 {
            for _ in 0..50 {
                let delay = policy.delay(retry);
                let ceiling =
                    Duration::from_millis(100 * (1 << (retry - 1))).min(policy.backoff.cap);
                assert!(delay <= ceiling, "retry {retry}: {delay:?} > {ceiling:?}");
                seen.insert(delay.as_micros());
            }
        }
        // Jitter: 400 draws are not a handful of fixed values.
        assert!(seen.len() > 100, "only {} distinct delays", seen.len());
    }
}

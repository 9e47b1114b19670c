//! Retrying transient store failures (throttling, a blip) with exponential backoff and
//! full jitter, sleeping through the [`Clock`] port so tests never wait. Jitter keeps
//! concurrent retries (many aggregators, many cleanups) from re-colliding in lockstep.

use std::future::Future;
use std::hash::{BuildHasher, RandomState};
use std::time::Duration;

use tracing::warn;

use crate::ports::{Clock, PortError};
use crate::submit::outcome::Backoff;

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

/// 64 uniformly random bits from the standard library's randomly keyed hasher (or,
/// in a simulation that seeded this thread with `seed_randomness` (test-util), from that seed).
pub fn random_u64() -> u64 {
    #[cfg(feature = "test-util")]
    if let Some(bits) = seeded::next() {
        return bits;
    }
    RandomState::new().hash_one(std::time::SystemTime::now())
}

/// Makes [`random_u64`] (jitter, claim ids) on this thread a deterministic stream from
/// `seed`, so a simulation schedule replays exactly; `None` restores real randomness.
#[cfg(feature = "test-util")]
pub fn seed_randomness(seed: Option<u64>) {
    seeded::set(seed);
}

#[cfg(feature = "test-util")]
mod seeded {
    //! The per-thread seeded stream behind `random_u64` in simulations (splitmix64).
    use std::cell::Cell;

    thread_local! {
        static STATE: Cell<Option<u64>> = const { Cell::new(None) };
    }

    pub(super) fn set(seed: Option<u64>) {
        STATE.with(|s| s.set(seed));
    }

    pub(super) fn next() -> Option<u64> {
        STATE.with(|s| {
            let state = s.get()?.wrapping_add(0x9E37_79B9_7F4A_7C15);
            s.set(Some(state));
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            Some(z ^ (z >> 31))
        })
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

//! The one backoff: exponential with full jitter, for `BatchMeterUsage` retries
//! ([`Backoff::METERING`], the submitter) and store retries
//! ([`crate::pipeline::retry::RetryPolicy`]). Pure: the randomness is passed in
//! ([`crate::random::random_u64`] where it is drawn). Below both the pipeline and the
//! submitter, so neither imports the other for it.

use std::time::Duration;

/// Exponential backoff with full jitter: retry `n` waits a uniformly random time in
/// `[0, min(cap, base * 2^(n-1)))`. Jitter spreads concurrent retries apart. The one
/// backoff: `BatchMeterUsage` retries ([`Backoff::METERING`]) and store retries
/// ([`crate::pipeline::retry::RetryPolicy`]) both wait with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// Ceiling of the first retry's wait.
    pub base: Duration,
    /// Largest ceiling.
    pub cap: Duration,
}

impl Backoff {
    /// `BatchMeterUsage` retries: 200 ms doubling to 5 s, inside a one-minute submitter run
    /// whose calls are paced at the 10 requests/s quota.
    pub const METERING: Backoff = Backoff {
        base: Duration::from_millis(200),
        cap: Duration::from_secs(5),
    };

    /// The wait before retry `retry` (1-based; 0 is read as 1), given 64 uniformly random
    /// bits `random`. The same inputs always give the same wait.
    pub fn delay(&self, retry: u32, random: u64) -> Duration {
        let doublings = retry.saturating_sub(1).min(63);
        let ceiling = self
            .base
            .as_nanos()
            .saturating_mul(1u128 << doublings)
            .min(self.cap.as_nanos());
        // `random / 2^64` is a fraction in [0, 1); the product cannot overflow u128.
        let nanos = (ceiling * u128::from(random)) >> 64;
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }
}

/// [`Backoff::METERING`]'s wait before retry `retry`, with randomness `random`.
pub fn backoff_delay(retry: u32, random: u64) -> Duration {
    Backoff::METERING.delay(retry, random)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn backoff_doubles_to_the_cap() {
        let max = u64::MAX;
        assert_eq!(backoff_delay(0, 0), Duration::ZERO);
        // Just under the ceiling with all-ones randomness.
        let near =
            |d: Duration, ceiling: Duration| d < ceiling && ceiling - d < Duration::from_micros(1);
        assert!(near(backoff_delay(1, max), Duration::from_millis(200)));
        assert!(near(backoff_delay(2, max), Duration::from_millis(400)));
        assert!(near(backoff_delay(5, max), Duration::from_millis(3200)));
        assert!(near(backoff_delay(6, max), Duration::from_secs(5)));
        assert!(near(backoff_delay(u32::MAX, max), Duration::from_secs(5)));
        assert_eq!(backoff_delay(0, max), backoff_delay(1, max));
        // Half the randomness range is half the ceiling.
        assert_eq!(backoff_delay(3, 1 << 63), Duration::from_millis(400));
    }

    proptest! {
        #[test]
        fn backoff_stays_within_the_jittered_ceiling(retry in 0u32..100, random: u64, other: u64) {
            let delay = backoff_delay(retry, random);
            let ceiling = Duration::from_millis(200)
                .saturating_mul(1u32 << retry.saturating_sub(1).min(20))
                .min(Duration::from_secs(5));
            prop_assert!(delay < ceiling);
            prop_assert_eq!(delay, backoff_delay(retry, random), "deterministic");
            // More randomness never waits less.
            let (low, high) = if random <= other { (random, other) } else { (other, random) };
            prop_assert!(backoff_delay(retry, low) <= backoff_delay(retry, high));
        }
    }
}

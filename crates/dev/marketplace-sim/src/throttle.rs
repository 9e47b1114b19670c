//! The BatchMeterUsage quota: a token bucket on REAL time (not the sim clock), so
//! moving the sim clock never refills or drains it.

use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::error::AdminError;

/// The published quota: 10 BatchMeterUsage calls per second per account and Region.
pub const DEFAULT_RATE_PER_SECOND: f64 = 10.0;
/// Burst equal to one second of the quota.
pub const DEFAULT_BURST: u32 = 10;

/// How the quota behaves.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ThrottleConfig {
    /// Off: every call passes.
    pub enabled: bool,
    /// Tokens added per second of real time.
    pub rate_per_second: f64,
    /// Most tokens the bucket holds (the largest burst of back-to-back calls).
    pub burst: u32,
}

impl Default for ThrottleConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            rate_per_second: DEFAULT_RATE_PER_SECOND,
            burst: DEFAULT_BURST,
        }
    }
}

impl ThrottleConfig {
    /// Checks that the rate is a positive finite number and the burst at least 1.
    pub fn validate(&self) -> Result<(), AdminError> {
        if !(self.rate_per_second.is_finite() && self.rate_per_second > 0.0) {
            return Err(AdminError::Invalid(format!(
                "throttle rate_per_second must be a positive number, got {}",
                self.rate_per_second
            )));
        }
        if self.burst == 0 {
            return Err(AdminError::Invalid(
                "throttle burst must be at least 1".to_owned(),
            ));
        }
        Ok(())
    }
}

/// A token bucket that starts full.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    config: ThrottleConfig,
    tokens: f64,
    refilled_at: Instant,
}

impl TokenBucket {
    /// A full bucket following `config`.
    pub fn new(config: ThrottleConfig, now: Instant) -> Self {
        Self {
            config,
            tokens: f64::from(config.burst),
            refilled_at: now,
        }
    }

    /// The configuration in force.
    pub fn config(&self) -> ThrottleConfig {
        self.config
    }

    /// Takes one token at real time `now`; false when the call must be throttled.
    /// Always true when throttling is off.
    pub fn try_take(&mut self, now: Instant) -> bool {
        if !self.config.enabled {
            return true;
        }
        let elapsed = now
            .saturating_duration_since(self.refilled_at)
            .as_secs_f64();
        self.tokens =
            (self.tokens + elapsed * self.config.rate_per_second).min(f64::from(self.config.burst));
        self.refilled_at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn burst_then_refill_at_the_configured_rate() {
        let start = Instant::now();
        let mut bucket = TokenBucket::new(ThrottleConfig::default(), start);
        for call in 0..10 {
            assert!(bucket.try_take(start), "call {call} is within the burst");
        }
        assert!(
            !bucket.try_take(start),
            "the 11th call in the same instant is throttled"
        );
        // 100 ms at 10/s refills exactly one token.
        let later = start + Duration::from_millis(100);
        assert!(bucket.try_take(later));
        assert!(!bucket.try_take(later));
    }

    #[test]
    fn refill_never_exceeds_the_burst() {
        let start = Instant::now();
        let config = ThrottleConfig {
            enabled: true,
            rate_per_second: 10.0,
            burst: 2,
        };
        let mut bucket = TokenBucket::new(config, start);
        let much_later = start + Duration::from_secs(3600);
        assert!(bucket.try_take(much_later));
        assert!(bucket.try_take(much_later));
        assert!(!bucket.try_take(much_later));
    }

    #[test]
    fn disabled_bucket_passes_everything() {
        let start = Instant::now();
        let config = ThrottleConfig {
            enabled: false,
            ..ThrottleConfig::default()
        };
        let mut bucket = TokenBucket::new(config, start);
        assert!((0..1000).all(|_| bucket.try_take(start)));
    }

    #[test]
    fn validation_refuses_zero_rate_and_zero_burst() {
        let zero_rate = ThrottleConfig {
            rate_per_second: 0.0,
            ..ThrottleConfig::default()
        };
        assert!(zero_rate.validate().is_err());
        let zero_burst = ThrottleConfig {
            burst: 0,
            ..ThrottleConfig::default()
        };
        assert!(zero_burst.validate().is_err());
        assert!(ThrottleConfig::default().validate().is_ok());
    }
}

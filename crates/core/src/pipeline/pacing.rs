//! Request pacing for `BatchMeterUsage`: the quota is 10 requests per second per
//! account and Region, so the single submitter spaces its calls (bisection and retry
//! calls included) at least 100 ms apart, start to start. Staying under the quota by
//! design means throttling is a fault, not the steady state.

use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;

use crate::ports::{Clock, MeteringApi, MeteringError, MeteringRecord, RecordVerdict};
use crate::time::Instant;

/// The documented `BatchMeterUsage` quota, requests per second.
pub const QUOTA_REQUESTS_PER_SECOND: u32 = 10;

/// The spacing that keeps a serial caller at the quota.
pub const MIN_CALL_INTERVAL: Duration =
    Duration::from_millis(1000 / QUOTA_REQUESTS_PER_SECOND as u64);

/// A [`MeteringApi`] that waits (through the [`Clock`]) until `interval` has passed
/// since the previous call started.
pub struct PacedMeteringApi<'a> {
    inner: &'a dyn MeteringApi,
    clock: &'a dyn Clock,
    interval: Duration,
    last_start: Mutex<Option<Instant>>,
    calls: Mutex<u64>,
}

impl<'a> PacedMeteringApi<'a> {
    /// Paces `inner` at one call per `interval`.
    pub fn new(inner: &'a dyn MeteringApi, clock: &'a dyn Clock, interval: Duration) -> Self {
        PacedMeteringApi {
            inner,
            clock,
            interval,
            last_start: Mutex::new(None),
            calls: Mutex::new(0),
        }
    }

    /// Calls made through this wrapper.
    pub fn calls(&self) -> u64 {
        *self
            .calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Waits out the rest of the interval, then marks a call as started.
    async fn wait_turn(&self) {
        let last = *self
            .last_start
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(last) = last {
            let elapsed = (self.clock.now() - last).to_std().unwrap_or(Duration::ZERO);
            if elapsed < self.interval {
                self.clock.sleep(self.interval - elapsed).await;
            }
        }
        *self
            .last_start
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(self.clock.now());
        *self
            .calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) += 1;
    }
}

#[async_trait]
impl MeteringApi for PacedMeteringApi<'_> {
    async fn batch_meter_usage(
        &self,
        records: &[MeteringRecord],
    ) -> Result<Vec<RecordVerdict>, MeteringError> {
        self.wait_turn().await;
        self.inner.batch_meter_usage(records).await
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::memory::{ManualClock, MemoryMeteringApi};
    use crate::time::parse_usage_timestamp;

    #[tokio::test]
    async fn calls_start_at_least_an_interval_apart() {
        let clock = ManualClock::new(parse_usage_timestamp("2026-11-30T10:00:00Z").unwrap());
        let api = MemoryMeteringApi::new();
        let paced = PacedMeteringApi::new(&api, &clock, MIN_CALL_INTERVAL);
        let start = clock.now();
        for _ in 0..10 {
            paced.batch_meter_usage(&[]).await.unwrap();
        }
        // Nine waits of 100 ms: ten calls take at least 900 ms, so never over 10/s.
        assert_eq!(clock.sleeps().len(), 9);
        assert_eq!((clock.now() - start).num_milliseconds(), 900);
        // Time already spent between calls is not waited again.
        clock.advance(Duration::from_millis(70));
        paced.batch_meter_usage(&[]).await.unwrap();
        assert_eq!(clock.sleeps().last(), Some(&Duration::from_millis(30)));
        assert_eq!(paced.calls(), 11);
    }
}

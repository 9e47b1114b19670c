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

/// Two calls never start closer than this fraction of the interval, even when the
/// schedule catches up on a late wake-up.
const MIN_GAP_PERCENT: u32 = 90;

/// When calls may start.
#[derive(Debug, Default)]
struct Schedule {
    /// The slot the next call is scheduled for.
    next_slot: Option<Instant>,
    /// When the previous call actually started.
    last_start: Option<Instant>,
}

/// A [`MeteringApi`] that starts calls on a fixed schedule, one slot per `interval`,
/// waiting through the [`Clock`].
///
/// The schedule advances from the slot a call was due at, not from when the waiting
/// task happened to wake up, so scheduler lateness is absorbed instead of added to
/// every interval; after an idle gap (longer than one interval) it restarts from now.
/// Slots are `interval` apart, so over any stretch of time the calls average at most
/// one per `interval` (10 per second); no two calls start closer than 90% of it.
pub struct PacedMeteringApi<'a> {
    inner: &'a dyn MeteringApi,
    clock: &'a dyn Clock,
    interval: Duration,
    schedule: Mutex<Schedule>,
    calls: Mutex<u64>,
}

impl<'a> PacedMeteringApi<'a> {
    /// Paces `inner` at one call per `interval`.
    pub fn new(inner: &'a dyn MeteringApi, clock: &'a dyn Clock, interval: Duration) -> Self {
        PacedMeteringApi {
            inner,
            clock,
            interval,
            schedule: Mutex::new(Schedule::default()),
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

    /// Waits until the next call's slot is due, without taking it: the caller can judge
    /// what to send at the moment it goes out, and the call that follows starts at once.
    pub async fn ready(&self) {
        let min_gap = chrono::Duration::from_std(self.interval * MIN_GAP_PERCENT / 100)
            .unwrap_or(chrono::Duration::MAX);
        let earliest = {
            let schedule = self
                .schedule
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let slot = schedule.next_slot.unwrap_or_else(|| self.clock.now());
            schedule
                .last_start
                .map_or(slot, |last| slot.max(last + min_gap))
        };
        let now = self.clock.now();
        if earliest > now {
            self.clock
                .sleep((earliest - now).to_std().unwrap_or(Duration::ZERO))
                .await;
        }
    }

    /// Waits for the next slot, then marks a call as started.
    async fn wait_turn(&self) {
        let interval = chrono::Duration::from_std(self.interval).unwrap_or(chrono::Duration::MAX);
        let min_gap = chrono::Duration::from_std(self.interval * MIN_GAP_PERCENT / 100)
            .unwrap_or(chrono::Duration::MAX);
        let (slot, earliest) = {
            let schedule = self
                .schedule
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let now = self.clock.now();
            let slot = schedule.next_slot.unwrap_or(now);
            let earliest = schedule
                .last_start
                .map_or(slot, |last| slot.max(last + min_gap));
            (slot, earliest)
        };
        let now = self.clock.now();
        if earliest > now {
            self.clock
                .sleep((earliest - now).to_std().unwrap_or(Duration::ZERO))
                .await;
        }
        let start = self.clock.now();
        // Late by more than an interval (idle, or a long bisection): restart from now
        // rather than bursting to catch up.
        let slot = if start - slot > interval { start } else { slot };
        let mut schedule = self
            .schedule
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        schedule.next_slot = Some(slot + interval);
        schedule.last_start = Some(start);
        drop(schedule);
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
    use crate::clock::ManualClock;
    use crate::memory::MemoryMeteringApi;
    use crate::time::parse_usage_timestamp;

    fn clock() -> ManualClock {
        ManualClock::new(parse_usage_timestamp("2026-11-30T10:00:00Z").unwrap())
    }

    #[tokio::test]
    async fn calls_start_one_interval_apart() {
        let clock = clock();
        let api = MemoryMeteringApi::new();
        let paced = PacedMeteringApi::new(&api, &clock, MIN_CALL_INTERVAL);
        let start = clock.now();
        for _ in 0..10 {
            paced.batch_meter_usage(&[]).await.unwrap();
        }
        // Nine waits of 100 ms: ten calls take 900 ms, never more than 10 a second.
        assert_eq!(clock.sleeps().len(), 9);
        assert_eq!((clock.now() - start).num_milliseconds(), 900);
        // Time already spent between calls is not waited again.
        clock.advance(Duration::from_millis(70));
        paced.batch_meter_usage(&[]).await.unwrap();
        assert_eq!(clock.sleeps().last(), Some(&Duration::from_millis(30)));
        assert_eq!(paced.calls(), 11);
        // After an idle gap the schedule restarts: no burst to catch up.
        clock.advance(Duration::from_secs(5));
        paced.batch_meter_usage(&[]).await.unwrap();
        paced.batch_meter_usage(&[]).await.unwrap();
        assert_eq!(clock.sleeps().last(), Some(&Duration::from_millis(100)));
    }

    /// A clock whose sleeps overshoot, as a busy scheduler's wake-ups do.
    struct LateClock {
        inner: ManualClock,
        lateness: Duration,
    }

    #[async_trait]
    impl Clock for LateClock {
        fn now(&self) -> Instant {
            self.inner.now()
        }
        async fn sleep(&self, duration: Duration) {
            self.inner.sleep(duration + self.lateness).await;
        }
    }

    #[tokio::test]
    async fn late_wake_ups_are_absorbed_not_accumulated() {
        let clock = LateClock {
            inner: clock(),
            lateness: Duration::from_millis(8),
        };
        let api = MemoryMeteringApi::new();
        let paced = PacedMeteringApi::new(&api, &clock, MIN_CALL_INTERVAL);
        let mut starts = Vec::new();
        for _ in 0..51 {
            paced.batch_meter_usage(&[]).await.unwrap();
            starts.push(clock.now());
        }
        // 50 intervals in 5 s plus one wake-up's lateness, not 50 x 108 ms.
        let total = (starts[50] - starts[0]).num_milliseconds();
        assert!((5_000..=5_010).contains(&total), "{total} ms");
        // Never two calls closer than 90 ms, never more than 10 in any second.
        for pair in starts.windows(2) {
            assert!((pair[1] - pair[0]).num_milliseconds() >= 90);
        }
        for window in starts.windows(11) {
            assert!((window[10] - window[0]).num_milliseconds() >= 1_000 - 10);
        }
    }
}

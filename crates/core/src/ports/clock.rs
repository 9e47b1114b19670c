//! Time: now, and sleeping (virtual under test).

use std::time::Duration;

use async_trait::async_trait;

use crate::time::Instant;

/// Time, injectable so every run can be replayed.
#[async_trait]
pub trait Clock: Send + Sync {
    /// Now.
    fn now(&self) -> Instant;
    /// Waits (backoff, pacing). A test clock advances instead of sleeping.
    async fn sleep(&self, duration: Duration);
}

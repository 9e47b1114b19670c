//! Test support shared by the subscribers-table functions' tests (subscription and
//! deprovision-cleanup mount this file with `#[path]`): a subscribers store where
//! another writer gets in just before some of our lifecycle writes (a
//! [`SubscriberDecorator`]: every other call passes straight through).

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;

use async_trait::async_trait;
use awsmp_core::memory::{Decorator, MemorySubscriberStore, SubscriberDecorator};
use awsmp_core::model::Subscriber;
use awsmp_core::ports::{PortError, SubscriberStore};
use awsmp_core::time::Instant;

/// What the other writer does before one of our writes: given the store, the row we
/// are about to write and "now", the row it writes first (at the version it read).
pub type Rival =
    Box<dyn Fn(MemorySubscriberStore, Subscriber, Instant) -> RivalWrite + Send + Sync>;

/// The other writer's work, ending with the row it writes.
pub type RivalWrite = Pin<Box<dyn Future<Output = Subscriber> + Send>>;

/// A store where, before each of our first `races` lifecycle writes, the [`Rival`]
/// writes the row, so our write meets a version conflict.
pub struct RacingStore {
    inner: MemorySubscriberStore,
    races: Mutex<usize>,
    rival: Rival,
}

impl RacingStore {
    /// `inner`, raced before each of our first `races` lifecycle writes by `rival`.
    pub fn new(inner: MemorySubscriberStore, races: usize, rival: Rival) -> Self {
        RacingStore {
            inner,
            races: Mutex::new(races),
            rival,
        }
    }
}

impl Decorator for RacingStore {}

#[async_trait]
impl SubscriberDecorator for RacingStore {
    type Inner = MemorySubscriberStore;

    fn inner(&self) -> &MemorySubscriberStore {
        &self.inner
    }

    async fn before_put_lifecycle(&self, row: &Subscriber, now: Instant) -> Result<(), PortError> {
        let race = {
            let mut races = self.races.lock().unwrap();
            let race = *races > 0;
            *races = races.saturating_sub(1);
            race
        };
        if race {
            let theirs = (self.rival)(self.inner.clone(), row.clone(), now).await;
            assert!(self.inner.put_lifecycle(&theirs, now).await?);
        }
        Ok(())
    }
}

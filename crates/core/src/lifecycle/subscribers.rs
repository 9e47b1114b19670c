//! The one optimistic update of a subscriber row both events-stack use cases make
//! ([`super::subscription`], [`super::deprovision`]): decide from the row as read,
//! write at the version read, and on a version conflict re-read and decide again, a
//! bounded number of times. A concurrent writer's change is never overwritten.

use crate::model::Subscriber;
use crate::ports::{PortError, SubscriberStore};
use crate::time::Instant;

/// What a use case decides from the row as read (`None`: no row).
pub enum Decision<N, D> {
    /// Write this row (its `version` is the one read), then report `N`.
    Write(Subscriber, N),
    /// Nothing to write: the update ends with `D`.
    Done(D),
}

/// How an update ended.
#[derive(Debug)]
pub enum Updated<N, D> {
    /// The row was written (the decision's note, the row written).
    Written(N, Subscriber),
    /// The decision wrote nothing.
    Done(D),
}

/// Why an update did not end.
#[derive(Debug)]
pub enum UpdateError {
    /// The table failed.
    Store(PortError),
    /// The row's version moved under every one of `attempts` writes.
    Contention {
        /// Writes tried.
        attempts: usize,
    },
}

/// Decides from `current` and writes, re-reading the row after each version conflict,
/// at most `max_attempts` writes. `decide` is told the attempt (1-based); each write is
/// stamped with `now()` of that attempt.
pub async fn update_subscriber<N, D>(
    store: &dyn SubscriberStore,
    now: &(dyn Fn() -> Instant + Sync),
    license_arn: &str,
    account: &str,
    mut current: Option<Subscriber>,
    max_attempts: usize,
    mut decide: impl FnMut(Option<&Subscriber>, usize) -> Decision<N, D> + Send,
) -> Result<Updated<N, D>, UpdateError>
where
    N: Send,
    D: Send,
{
    for attempt in 1..=max_attempts {
        match decide(current.as_ref(), attempt) {
            Decision::Done(done) => return Ok(Updated::Done(done)),
            Decision::Write(row, note) => {
                if store
                    .put_lifecycle(&row, now())
                    .await
                    .map_err(UpdateError::Store)?
                {
                    return Ok(Updated::Written(note, row));
                }
                tracing::debug!(
                    license = license_arn,
                    account,
                    attempt,
                    "version conflict: re-reading the row"
                );
                current = store
                    .get(license_arn, account)
                    .await
                    .map_err(UpdateError::Store)?;
            }
        }
    }
    Err(UpdateError::Contention {
        attempts: max_attempts,
    })
}

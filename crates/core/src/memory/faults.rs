//! One-shot failure injection for the in-memory stores: [`StoreOp`] names an
//! operation, `fail_next`/`fail_after` queue its next outcomes.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use crate::ports::PortError;
use crate::sync::lock;

/// A store operation, for injecting a one-shot failure with `fail_next`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StoreOp {
    /// [`UsageStore::pending_page`].
    UsagePendingPage,
    /// [`UsageStore::group_rows`].
    UsageGroupRows,
    /// [`UsageStore::get_row`].
    UsageGetRow,
    /// [`UsageStore::finalize_row`].
    UsageFinalizeRow,
    /// [`UsageStore::put_row`].
    UsagePutRow,
    /// [`UsageStore::stray_pending_page`].
    UsageStrayPendingPage,
    /// [`UsageStore::repair_pending`].
    UsageRepairPending,
    /// [`AggregatedStore::get`].
    AggregatedGet,
    /// [`AggregatedStore::commit`].
    AggregatedCommit,
    /// [`AggregatedStore::pending_page`].
    AggregatedPendingPage,
    /// [`AggregatedStore::claim`].
    AggregatedClaim,
    /// [`AggregatedStore::record`].
    AggregatedRecord,
    /// [`AggregatedStore::put_direct`].
    AggregatedPutDirect,
    /// [`AggregatedStore::reject_malformed`].
    AggregatedRejectMalformed,
    /// [`AggregatedStore::stray_pending_page`].
    AggregatedStrayPendingPage,
    /// [`SubscriberStore::get`].
    SubscriberGet,
    /// [`SubscriberStore::by_license`].
    SubscriberByLicense,
    /// [`SubscriberStore::by_agreement`].
    SubscriberByAgreement,
    /// [`SubscriberStore::deprovisioning`].
    SubscriberDeprovisioning,
    /// [`SubscriberStore::put_lifecycle`].
    SubscriberPutLifecycle,
    /// [`SubscriberStore::add_registered_region`].
    SubscriberAddRegisteredRegion,
    /// [`ProfileStore::upsert`].
    ProfileUpsert,
}

/// Queued one-shot outcomes per operation: `None` lets one call through, `Some` fails it.
#[derive(Debug, Default)]
pub(crate) struct Faults(Mutex<HashMap<StoreOp, VecDeque<Option<PortError>>>>);

impl Faults {
    pub(crate) fn push(&self, op: StoreOp, error: PortError) {
        lock(&self.0).entry(op).or_default().push_back(Some(error));
    }

    /// Lets the next `calls` calls of `op` through, then fails the one after with `error`.
    pub(crate) fn push_after(&self, op: StoreOp, calls: usize, error: PortError) {
        let mut faults = lock(&self.0);
        let queue = faults.entry(op).or_default();
        queue.extend(std::iter::repeat_n(None, calls));
        queue.push_back(Some(error));
    }

    /// Fails with the next queued error for `op`, if any.
    pub(crate) fn check(&self, op: StoreOp) -> Result<(), PortError> {
        match lock(&self.0).get_mut(&op).and_then(VecDeque::pop_front) {
            Some(Some(error)) => Err(error),
            Some(None) | None => Ok(()),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::memory::MemoryTables;
    use crate::memory::fixtures::*;
    use crate::ports::UsageStore;
    #[tokio::test]
    async fn injected_store_failures_fire_once() {
        let tables = MemoryTables::new();
        let store = tables.usage_store();
        let error = PortError::Transient {
            operation: "query",
            message: "throttled".into(),
        };
        tables.fail_next(StoreOp::UsagePendingPage, error.clone());
        assert_eq!(
            store.pending_page(hour("2026-11-30T10"), None).await,
            Err(error)
        );
        assert!(
            store
                .pending_page(hour("2026-11-30T10"), None)
                .await
                .is_ok()
        );
    }
}

//! One-shot failure injection for the in-memory stores: [`StoreOp`] names an
//! operation, `fail_next`/`fail_after` queue its next outcomes.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use crate::ports::PortError;
#[cfg(doc)]
use crate::ports::{AggregatedStore, ProfileStore, SubscriberStore, UsageStore};
use crate::sync::lock;

/// A store operation: for injecting a one-shot failure with `fail_next`, and what a
/// [`Decorator`](super::Decorator) is told each call is.
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
    /// [`SubscriberStore::get_many`].
    SubscriberGetMany,
    /// [`SubscriberStore::by_license`].
    SubscriberByLicense,
    /// [`SubscriberStore::by_agreement`].
    SubscriberByAgreement,
    /// [`SubscriberStore::deprovisioning`].
    SubscriberDeprovisioning,
    /// [`SubscriberStore::put_lifecycle`].
    SubscriberPutLifecycle,
    /// [`SubscriberStore::put_rate_card`].
    SubscriberPutRateCard,
    /// [`SubscriberStore::add_registered_region`].
    SubscriberAddRegisteredRegion,
    /// [`ProfileStore::upsert`].
    ProfileUpsert,
    /// [`ProfileStore::expire`].
    ProfileExpire,
}

impl StoreOp {
    /// `table.method`, the port method's name (`usage.pending_page`).
    pub fn name(self) -> &'static str {
        match self {
            StoreOp::UsagePendingPage => "usage.pending_page",
            StoreOp::UsageGroupRows => "usage.group_rows",
            StoreOp::UsageGetRow => "usage.get_row",
            StoreOp::UsageFinalizeRow => "usage.finalize_row",
            StoreOp::UsagePutRow => "usage.put_row",
            StoreOp::UsageStrayPendingPage => "usage.stray_pending_page",
            StoreOp::UsageRepairPending => "usage.repair_pending",
            StoreOp::AggregatedGet => "aggregated.get",
            StoreOp::AggregatedCommit => "aggregated.commit",
            StoreOp::AggregatedPendingPage => "aggregated.pending_page",
            StoreOp::AggregatedClaim => "aggregated.claim_all",
            StoreOp::AggregatedRecord => "aggregated.record_all",
            StoreOp::AggregatedPutDirect => "aggregated.put_direct",
            StoreOp::AggregatedRejectMalformed => "aggregated.reject_malformed",
            StoreOp::AggregatedStrayPendingPage => "aggregated.stray_pending_page",
            StoreOp::SubscriberGet => "subscribers.get",
            StoreOp::SubscriberGetMany => "subscribers.get_many",
            StoreOp::SubscriberByLicense => "subscribers.by_license",
            StoreOp::SubscriberByAgreement => "subscribers.by_agreement",
            StoreOp::SubscriberDeprovisioning => "subscribers.deprovisioning",
            StoreOp::SubscriberPutLifecycle => "subscribers.put_lifecycle",
            StoreOp::SubscriberPutRateCard => "subscribers.put_rate_card",
            StoreOp::SubscriberAddRegisteredRegion => "subscribers.add_registered_region",
            StoreOp::ProfileUpsert => "profiles.upsert",
            StoreOp::ProfileExpire => "profiles.expire",
        }
    }

    /// Whether the operation writes (its effect may land though its answer is lost).
    pub fn is_write(self) -> bool {
        matches!(
            self,
            StoreOp::UsageFinalizeRow
                | StoreOp::UsagePutRow
                | StoreOp::UsageRepairPending
                | StoreOp::AggregatedCommit
                | StoreOp::AggregatedClaim
                | StoreOp::AggregatedRecord
                | StoreOp::AggregatedPutDirect
                | StoreOp::AggregatedRejectMalformed
                | StoreOp::SubscriberPutLifecycle
                | StoreOp::SubscriberPutRateCard
                | StoreOp::SubscriberAddRegisteredRegion
                | StoreOp::ProfileUpsert
                | StoreOp::ProfileExpire
        )
    }
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

//! Store decorators, delegation written once: a test double that wraps a real store
//! (the simulation's fault injection, the e2e suite's call counting, a test's rival
//! writer) says what it does around one call, and every port method is passed to the
//! store it wraps through that.
//!
//! A decorator implements [`Decorator`] (what happens around each call) and one of
//! [`UsageDecorator`], [`AggregatedDecorator`], [`SubscriberDecorator`] (which store it
//! wraps); the port itself then comes from the blanket implementations here, so a new
//! port method is delegated in this file and nowhere else.

use std::future::Future;

use async_trait::async_trait;

use super::faults::StoreOp;
use crate::model::{AggregatedRecord, GroupKey, RawUsageRow, Subscriber};
use crate::ports::{
    AggregatedStore, AggregationCommit, ClaimGrant, ClaimRequest, CommitOutcome, Cursor,
    IngestOutcome, MalformedItem, NewUsageRow, OutcomeWrite, Page, PendingRawRef, PortError,
    PutOutcome, RowClaim, RowFinal, StrayPending, SubscriberStore, UsageStore,
};
use crate::time::{HourBucket, Instant};

/// A future that is pending once, and wakes itself (as every pending future must: a
/// combinator such as a stream's buffered reads polls only what was woken). A
/// decorator awaits it to let other calls in flight be seen at the same time, and the
/// simulation's scheduler to switch tasks.
pub async fn yield_now() {
    let mut yielded = false;
    std::future::poll_fn(|cx| {
        if yielded {
            std::task::Poll::Ready(())
        } else {
            yielded = true;
            cx.waker().wake_by_ref();
            std::task::Poll::Pending
        }
    })
    .await;
}

/// One call passed through a decorator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreCall {
    /// Which operation.
    pub op: StoreOp,
    /// Items a batched write writes: a commit's record and claimed rows, one per claim
    /// or outcome; 0 for every other call.
    pub items: usize,
}

impl StoreCall {
    fn of(op: StoreOp) -> Self {
        StoreCall { op, items: 0 }
    }

    fn writing(op: StoreOp, items: usize) -> Self {
        StoreCall { op, items }
    }
}

/// What a decorator does around each call of the store it wraps.
#[async_trait]
pub trait Decorator: Send + Sync {
    /// Runs `inner`, the wrapped store's answer to `call`: awaits it (or not), and may
    /// fail before or after it. By default, just the call.
    async fn around<T: Send>(
        &self,
        _call: StoreCall,
        inner: impl Future<Output = Result<T, PortError>> + Send,
    ) -> Result<T, PortError> {
        inner.await
    }
}

/// A decorator of a [`UsageStore`]; it is a [`UsageStore`] itself.
pub trait UsageDecorator: Decorator {
    /// The store it wraps.
    type Inner: UsageStore + ?Sized;
    /// The store it wraps.
    fn inner(&self) -> &Self::Inner;

    /// What a `pending_page` query of the index answers, given the wrapped store's
    /// fresh page: an eventually consistent index may answer an older one. By default,
    /// the fresh page.
    fn index_page(
        &self,
        _hour: HourBucket,
        _cursor: Option<&Cursor>,
        fresh: Page<PendingRawRef>,
    ) -> Page<PendingRawRef> {
        fresh
    }
}

/// A decorator of an [`AggregatedStore`]; it is an [`AggregatedStore`] itself.
#[async_trait]
pub trait AggregatedDecorator: Decorator {
    /// The store it wraps.
    type Inner: AggregatedStore + ?Sized;
    /// The store it wraps.
    fn inner(&self) -> &Self::Inner;

    /// Before a commit reaches [`Decorator::around`]: `Some` answers it without the
    /// wrapped store (a spurious transaction conflict); a rival writer may act here.
    async fn before_commit(&self, _commit: &AggregationCommit) -> Option<CommitOutcome> {
        None
    }

    /// What a `pending_page` query of the index answers, given the wrapped store's
    /// fresh page: an eventually consistent index may answer an older one. By default,
    /// the fresh page.
    fn index_page(
        &self,
        _hour: HourBucket,
        _cursor: Option<&Cursor>,
        fresh: Page<AggregatedRecord>,
    ) -> Page<AggregatedRecord> {
        fresh
    }
}

/// A decorator of a [`SubscriberStore`]; it is a [`SubscriberStore`] itself.
#[async_trait]
pub trait SubscriberDecorator: Decorator {
    /// The store it wraps.
    type Inner: SubscriberStore + ?Sized;
    /// The store it wraps.
    fn inner(&self) -> &Self::Inner;

    /// Before a lifecycle write reaches [`Decorator::around`]: a rival writer may act
    /// here (rewrite the row, so the write meets a version conflict).
    async fn before_put_lifecycle(
        &self,
        _row: &Subscriber,
        _now: Instant,
    ) -> Result<(), PortError> {
        Ok(())
    }
}

#[async_trait]
impl<D: UsageDecorator> UsageStore for D {
    async fn pending_page(
        &self,
        hour: HourBucket,
        cursor: Option<Cursor>,
    ) -> Result<Page<PendingRawRef>, PortError> {
        let inner = self.inner().pending_page(hour, cursor.clone());
        let fresh = self
            .around(StoreCall::of(StoreOp::UsagePendingPage), inner)
            .await?;
        Ok(self.index_page(hour, cursor.as_ref(), fresh))
    }

    async fn group_rows(&self, key: &GroupKey) -> Result<Vec<RawUsageRow>, PortError> {
        let inner = self.inner().group_rows(key);
        self.around(StoreCall::of(StoreOp::UsageGroupRows), inner)
            .await
    }

    async fn get_row(
        &self,
        license_arn: &str,
        sort_key: &str,
    ) -> Result<Option<RawUsageRow>, PortError> {
        let inner = self.inner().get_row(license_arn, sort_key);
        self.around(StoreCall::of(StoreOp::UsageGetRow), inner)
            .await
    }

    async fn finalize_row(
        &self,
        license_arn: &str,
        sort_key: &str,
        claim: RowClaim<'_>,
        outcome: RowFinal,
        now: Instant,
    ) -> Result<bool, PortError> {
        let inner = self
            .inner()
            .finalize_row(license_arn, sort_key, claim, outcome, now);
        self.around(StoreCall::of(StoreOp::UsageFinalizeRow), inner)
            .await
    }

    async fn put_row(&self, row: &NewUsageRow, now: Instant) -> Result<IngestOutcome, PortError> {
        let inner = self.inner().put_row(row, now);
        self.around(StoreCall::of(StoreOp::UsagePutRow), inner)
            .await
    }

    async fn stray_pending_page(
        &self,
        live: &[HourBucket],
        cursor: Option<Cursor>,
    ) -> Result<Page<StrayPending>, PortError> {
        let inner = self.inner().stray_pending_page(live, cursor);
        self.around(StoreCall::of(StoreOp::UsageStrayPendingPage), inner)
            .await
    }

    async fn repair_pending(
        &self,
        license_arn: &str,
        sort_key: &str,
        from: &str,
        hour: HourBucket,
        now: Instant,
    ) -> Result<bool, PortError> {
        let inner = self
            .inner()
            .repair_pending(license_arn, sort_key, from, hour, now);
        self.around(StoreCall::of(StoreOp::UsageRepairPending), inner)
            .await
    }
}

#[async_trait]
impl<D: AggregatedDecorator> AggregatedStore for D {
    async fn get(&self, key: &GroupKey) -> Result<Option<AggregatedRecord>, PortError> {
        let inner = self.inner().get(key);
        self.around(StoreCall::of(StoreOp::AggregatedGet), inner)
            .await
    }

    async fn commit(&self, commit: &AggregationCommit) -> Result<CommitOutcome, PortError> {
        if let Some(outcome) = self.before_commit(commit).await {
            return Ok(outcome);
        }
        let call = StoreCall::writing(StoreOp::AggregatedCommit, 1 + commit.claimed_rows.len());
        self.around(call, self.inner().commit(commit)).await
    }

    async fn pending_page(
        &self,
        hour: HourBucket,
        cursor: Option<Cursor>,
    ) -> Result<Page<AggregatedRecord>, PortError> {
        let inner = self.inner().pending_page(hour, cursor.clone());
        let fresh = self
            .around(StoreCall::of(StoreOp::AggregatedPendingPage), inner)
            .await?;
        Ok(self.index_page(hour, cursor.as_ref(), fresh))
    }

    async fn claim_all(
        &self,
        requests: &[ClaimRequest],
    ) -> Result<Vec<Option<ClaimGrant>>, PortError> {
        let call = StoreCall::writing(StoreOp::AggregatedClaim, requests.len());
        self.around(call, self.inner().claim_all(requests)).await
    }

    async fn record_all(
        &self,
        writes: &[OutcomeWrite],
        now: Instant,
    ) -> Result<Vec<bool>, PortError> {
        let call = StoreCall::writing(StoreOp::AggregatedRecord, writes.len());
        self.around(call, self.inner().record_all(writes, now))
            .await
    }

    async fn reject_malformed(
        &self,
        item: &MalformedItem,
        reason: &str,
        expires_at: Option<Instant>,
        now: Instant,
    ) -> Result<bool, PortError> {
        let inner = self.inner().reject_malformed(item, reason, expires_at, now);
        self.around(StoreCall::of(StoreOp::AggregatedRejectMalformed), inner)
            .await
    }

    async fn stray_pending_page(
        &self,
        live: &[HourBucket],
        cursor: Option<Cursor>,
    ) -> Result<Page<AggregatedRecord>, PortError> {
        let inner = self.inner().stray_pending_page(live, cursor);
        self.around(StoreCall::of(StoreOp::AggregatedStrayPendingPage), inner)
            .await
    }

    async fn put_direct(
        &self,
        record: &AggregatedRecord,
        now: Instant,
    ) -> Result<PutOutcome, PortError> {
        let inner = self.inner().put_direct(record, now);
        self.around(StoreCall::of(StoreOp::AggregatedPutDirect), inner)
            .await
    }
}

#[async_trait]
impl<D: SubscriberDecorator> SubscriberStore for D {
    async fn get(&self, license_arn: &str, account: &str) -> Result<Option<Subscriber>, PortError> {
        let inner = self.inner().get(license_arn, account);
        self.around(StoreCall::of(StoreOp::SubscriberGet), inner)
            .await
    }

    async fn get_many(&self, keys: &[(String, String)]) -> Result<Vec<Subscriber>, PortError> {
        let inner = self.inner().get_many(keys);
        self.around(StoreCall::of(StoreOp::SubscriberGetMany), inner)
            .await
    }

    async fn by_license(&self, license_arn: &str) -> Result<Vec<Subscriber>, PortError> {
        let inner = self.inner().by_license(license_arn);
        self.around(StoreCall::of(StoreOp::SubscriberByLicense), inner)
            .await
    }

    async fn by_agreement(&self, agreement_id: &str) -> Result<Vec<Subscriber>, PortError> {
        let inner = self.inner().by_agreement(agreement_id);
        self.around(StoreCall::of(StoreOp::SubscriberByAgreement), inner)
            .await
    }

    async fn deprovisioning(&self) -> Result<Vec<Subscriber>, PortError> {
        let inner = self.inner().deprovisioning();
        self.around(StoreCall::of(StoreOp::SubscriberDeprovisioning), inner)
            .await
    }

    async fn put_lifecycle(&self, row: &Subscriber, now: Instant) -> Result<bool, PortError> {
        self.before_put_lifecycle(row, now).await?;
        let inner = self.inner().put_lifecycle(row, now);
        self.around(StoreCall::of(StoreOp::SubscriberPutLifecycle), inner)
            .await
    }

    async fn put_rate_card(
        &self,
        license_arn: &str,
        account: &str,
        card: &crate::charges::StoredRateCard,
        now: Instant,
    ) -> Result<bool, PortError> {
        let inner = self.inner().put_rate_card(license_arn, account, card, now);
        self.around(StoreCall::of(StoreOp::SubscriberPutRateCard), inner)
            .await
    }

    async fn add_registered_region(
        &self,
        license_arn: &str,
        account: &str,
        product_code: &str,
        registered: (&str, &[String]),
        now: Instant,
    ) -> Result<(), PortError> {
        let inner =
            self.inner()
                .add_registered_region(license_arn, account, product_code, registered, now);
        self.around(StoreCall::of(StoreOp::SubscriberAddRegisteredRegion), inner)
            .await
    }
}

//! awsmp-usage: record metered usage into an awsmp-metering deployment from your own
//! Rust service.
//!
//! Each call writes one raw usage row into the deployment's usage table (the
//! `UsageTableName` output of its main stack), where the pipeline aggregates it per
//! license, dimension and hour and bills it through `BatchMeterUsage`. Two promises:
//!
//! - **A retry is a no-op.** The row's key ends with your event id, and the write
//!   is conditional on it: record the same [`Usage`] again (after a timeout, a crash,
//!   a redelivered message) and you get [`Recorded::AlreadyWritten`], never a second
//!   row. Use an id your service already has for the event (a request id, a message
//!   id); never a fresh random one per attempt. The same id with other usage (another
//!   quantity, dimension, account, allocations, or another instant given with
//!   [`Usage::at`]) is [`UsageError::Conflict`], with what the first write stored and
//!   what this call carries: nothing is written, and it is not billed under that id.
//! - **Only where it is billed.** A stack deployed with `DeploymentMode=direct-submit`
//!   aggregates no raw usage; tell the meter the stack's `DeploymentMode` output with
//!   [`Meter::in_mode`] and it refuses such usage ([`UsageError::DirectSubmit`])
//!   instead of writing rows that would stay pending for ever.
//! - **Nothing is written that would not be billed.** The row is checked first,
//!   exactly as the aggregator checks a stored row (the same code): a row the
//!   aggregator would reject comes back as [`UsageError::Rejected`] with its reason
//!   code and what to do, and nothing is written. So does usage whose hour's record can
//!   no longer be sent (records are sent stamped at the hour's start, once the hour
//!   and the metering lock have passed, and Marketplace takes them only within 24 hours
//!   of that start, last month's only until 06:00 UTC on the 1st):
//!   [`UsageError::Unsendable`]. A retry refused so after its first attempt was written
//!   is still [`Recorded::AlreadyWritten`].
//!
//! ```no_run
//! # async fn example() -> Result<(), awsmp_usage::UsageError> {
//! let config = aws_config::load_defaults(awsmp_usage::behavior_version()).await;
//! let meter = awsmp_usage::Meter::new(&config, "awsmp-myproduct-usage-prod", "myproductcode");
//! let usage = awsmp_usage::Usage::new(
//!     "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0",
//!     "111122223333",
//!     "api_calls",
//!     3,
//!     "req-7f3a",
//! )
//! .tag("team", "search");
//! match meter.record(&usage).await {
//!     Ok(awsmp_usage::Recorded::Written) => {}
//!     Ok(awsmp_usage::Recorded::AlreadyWritten) => { /* a retry: nothing changed */ }
//!     // The id was used before for other usage: a bug in how ids are chosen.
//!     Err(awsmp_usage::UsageError::Conflict(conflict)) => eprintln!("{conflict}"),
//!     Err(other) => return Err(other),
//! }
//! # Ok(()) }
//! ```
//!
//! The caller needs `dynamodb:PutItem` on the usage table: the row and its event-id
//! marker are written together in one `TransactWriteItems`, which IAM authorizes as one
//! `PutItem` per item. The SDK config's Region must be the stack's.
//!
//! [`Entitlements`] answers what the usage API's `GET /subscriptions/{licenseArn}`
//! answers: is the buyer entitled, and is usage written now billed (and until when),
//! from one read of the subscribers table (`dynamodb:GetItem`, or `dynamodb:Query`
//! without the buyer account, on the events stack's `SubscribersTableName`).

use std::sync::Arc;

/// The AWS SDK behaviour version this crate is tested with (pinned, not `latest()`).
pub use awsmp_aws::behavior_version;

use awsmp_aws::DynamoUsageStore;
use awsmp_core::guardrails::GuardrailContext;
pub use awsmp_core::guardrails::sendable::Unsendable;
use awsmp_core::guardrails::write::{DirectSubmitRefusal, RowProblem, WriteRefused, write_checked};
use awsmp_core::model::{Allocation, ReasonCode, Tag};
pub use awsmp_core::ports::EventConflict;
use awsmp_core::ports::{IngestOutcome, NewUsageRow, PortError, SubscriberStore, UsageStore};
use awsmp_core::remedy;
pub use awsmp_core::submit::DeploymentMode;
use awsmp_core::time::Instant;
pub use awsmp_core::usage_api::{Entitlement, EntitlementError, UsageBilling};
use chrono::{DateTime, SubsecRound, Utc};

/// One event's usage: a quantity of one dimension for one license, at one instant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Usage {
    license_arn: String,
    account: String,
    dimension: String,
    quantity: i64,
    event_id: String,
    at: Option<DateTime<Utc>>,
    allocations: Option<Vec<Allocation>>,
}

impl Usage {
    /// `quantity` of `dimension` (the catalog's name, case-sensitive) used by the
    /// buyer `account` (12 digits) under `license_arn` (both as `ResolveCustomer`
    /// returned them at registration), identified by your `event_id`. The usage
    /// instant is the moment it is recorded unless [`Usage::at`] says otherwise.
    pub fn new(
        license_arn: impl Into<String>,
        account: impl Into<String>,
        dimension: impl Into<String>,
        quantity: i64,
        event_id: impl Into<String>,
    ) -> Self {
        Usage {
            license_arn: license_arn.into(),
            account: account.into(),
            dimension: dimension.into(),
            quantity,
            event_id: event_id.into(),
            at: None,
            allocations: None,
        }
    }

    /// The instant the usage happened (UTC; truncated to whole seconds). It must lie
    /// inside the last 24 hours when recorded, and never in the future.
    pub fn at(mut self, instant: DateTime<Utc>) -> Self {
        self.at = Some(instant.trunc_subsecs(0));
        self
    }

    /// Adds a cost-allocation tag (vendor-metered tagging) to the whole quantity. At
    /// most 5 tags; call [`Usage::allocate`] instead to split the quantity.
    pub fn tag(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        let tag = Tag {
            key: key.into(),
            value: value.into(),
        };
        match &mut self.allocations {
            Some(list) if list.len() == 1 && list[0].quantity == self.quantity => {
                list[0].tags.push(tag)
            }
            _ => {
                self.allocations = Some(vec![Allocation {
                    quantity: self.quantity,
                    tags: vec![tag],
                }])
            }
        }
        self
    }

    /// Splits the quantity across tag sets: each call adds `quantity` under `tags`.
    /// The allocations must add up to the usage's quantity.
    pub fn allocate<K, V>(mut self, quantity: i64, tags: impl IntoIterator<Item = (K, V)>) -> Self
    where
        K: Into<String>,
        V: Into<String>,
    {
        let allocation = Allocation {
            quantity,
            tags: tags
                .into_iter()
                .map(|(key, value)| Tag {
                    key: key.into(),
                    value: value.into(),
                })
                .collect(),
        };
        self.allocations
            .get_or_insert_with(Vec::new)
            .push(allocation);
        self
    }

    /// The row this usage becomes when recorded at `now`.
    pub fn to_row(&self, now: Instant) -> NewUsageRow {
        NewUsageRow {
            license_arn: self.license_arn.clone(),
            customer_aws_account_id: self.account.clone(),
            dimension: self.dimension.clone(),
            timestamp: self.at.unwrap_or_else(|| now.trunc_subsecs(0)),
            quantity: self.quantity,
            allocations: self.allocations.clone(),
            product_code: None,
            event_id: self.event_id.clone(),
            timestamp_defaulted: self.at.is_none(),
        }
    }
}

/// What recording did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    /// The row was written; the pipeline will bill it.
    Written,
    /// This event id was already written with the same usage (this was a retry):
    /// nothing changed. (Its instant may differ only when neither call gave one.)
    AlreadyWritten,
}

/// Why usage was not recorded. Nothing was written in every case.
#[derive(Debug, thiserror::Error)]
pub enum UsageError {
    /// The aggregator would reject the row with `reason`, so it was not written.
    #[error("usage not written: the aggregator would reject it with {reason} ({hint})")]
    Rejected {
        /// The reason code the aggregator would give.
        reason: ReasonCode,
        /// What to do about it.
        hint: &'static str,
    },
    /// The row cannot be stored at all (an empty event id, `#` in a key part, a key
    /// longer than DynamoDB takes).
    #[error("usage not written: {0}")]
    Unwritable(String),
    /// Its hour's record can no longer be sent before Marketplace's window for it
    /// closes (reason code `TimestampOutOfWindow`), so it was not written.
    #[error("usage not written: {0}")]
    Unsendable(#[from] Unsendable),
    /// The table could not be written (throttled, missing, access denied); the
    /// write may be retried with the same event id.
    #[error("usage not written: {0}")]
    Store(#[from] PortError),
    /// The event id was already written with other usage: nothing was written. A
    /// retry must carry exactly the first attempt's usage; new usage needs a new id.
    #[error("usage not written: {0}")]
    Conflict(Box<EventConflict>),
    /// The stack is deployed in direct-submit mode, where no raw usage is billed.
    #[error("usage not written: {0}")]
    DirectSubmit(#[from] DirectSubmitRefusal),
}

impl UsageError {
    /// Whether retrying the same usage later may succeed (throttling, a timeout).
    pub fn is_retryable(&self) -> bool {
        matches!(self, UsageError::Store(PortError::Transient { .. }))
    }
}

/// Records usage into one deployment's usage table.
#[derive(Clone)]
pub struct Meter {
    store: Arc<dyn UsageStore>,
    product_code: String,
    mode: DeploymentMode,
}

impl std::fmt::Debug for Meter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Meter")
            .field("product_code", &self.product_code)
            .finish_non_exhaustive()
    }
}

impl Meter {
    /// A meter writing to `usage_table` (the main stack's `UsageTableName` output, in
    /// the stack's Region: the SDK config's Region must be that one) for the product
    /// `product_code`.
    pub fn new(
        config: &aws_types::SdkConfig,
        usage_table: impl Into<String>,
        product_code: impl Into<String>,
    ) -> Self {
        let client = aws_sdk_dynamodb::Client::new(config);
        Meter::with_store(
            Arc::new(DynamoUsageStore::new(client, usage_table)),
            product_code,
        )
    }

    /// A meter over any usage store (the in-memory one in tests).
    pub fn with_store(store: Arc<dyn UsageStore>, product_code: impl Into<String>) -> Self {
        Meter {
            store,
            product_code: product_code.into(),
            mode: DeploymentMode::Full,
        }
    }

    /// The same meter for a stack deployed in `mode` (its `DeploymentMode` output,
    /// `"full"` or `"direct-submit"`, parses with `str::parse`). A meter is for a
    /// `full` stack unless told otherwise; for a direct-submit one every
    /// [`Meter::record`] is refused with [`UsageError::DirectSubmit`], nothing written.
    pub fn in_mode(self, mode: DeploymentMode) -> Self {
        Meter { mode, ..self }
    }

    /// Records `usage` now.
    pub async fn record(&self, usage: &Usage) -> Result<Recorded, UsageError> {
        self.record_at(usage, Utc::now()).await
    }

    /// Records `usage` as of `now` (the instant the checks run against, and the usage
    /// instant when [`Usage::at`] was not given).
    pub async fn record_at(&self, usage: &Usage, now: Instant) -> Result<Recorded, UsageError> {
        let row = usage.to_row(now);
        let ctx = GuardrailContext::new(now, self.product_code.clone());
        let written = write_checked(self.store.as_ref(), self.mode, &row, &ctx, now)
            .await
            .map_err(|refused| match refused {
                WriteRefused::DirectSubmit(refusal) => UsageError::DirectSubmit(refusal),
                WriteRefused::Row(RowProblem::Rejected(reason)) => UsageError::Rejected {
                    reason,
                    hint: remedy::for_reason(reason),
                },
                WriteRefused::Row(RowProblem::Unwritable(why)) => UsageError::Unwritable(why),
                WriteRefused::Row(RowProblem::Unsendable(why)) => UsageError::Unsendable(why),
                WriteRefused::Store(e) => UsageError::Store(e),
            })?;
        match written {
            IngestOutcome::Created => Ok(Recorded::Written),
            IngestOutcome::Duplicate => Ok(Recorded::AlreadyWritten),
            IngestOutcome::Conflict(conflict) => Err(UsageError::Conflict(conflict)),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use awsmp_core::memory::MemoryTables;
    use awsmp_core::time::parse_usage_timestamp;

    const LICENSE: &str = "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0";

    fn t(text: &str) -> Instant {
        parse_usage_timestamp(text).unwrap()
    }

    #[tokio::test]
    async fn writes_once_per_event_id_and_refuses_what_the_aggregator_would_reject() {
        let tables = MemoryTables::new();
        let meter = Meter::with_store(Arc::new(tables.usage_store()), "prod");
        let now = t("2026-11-30T12:30:00Z");
        let usage = Usage::new(LICENSE, "111122223333", "api", 3, "req-1").tag("team", "a");
        assert_eq!(
            meter.record_at(&usage, now).await.unwrap(),
            Recorded::Written
        );
        let later = t("2026-11-30T12:31:07Z");
        assert_eq!(
            meter.record_at(&usage, later).await.unwrap(),
            Recorded::AlreadyWritten
        );
        let stale =
            Usage::new(LICENSE, "111122223333", "api", 3, "req-2").at(t("2026-11-29T10:00:00Z"));
        let err = meter.record_at(&stale, now).await.unwrap_err();
        assert!(
            matches!(
                err,
                UsageError::Rejected {
                    reason: ReasonCode::TimestampOutOfWindow,
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("24 h"), "{err}");
        let hash = Usage::new(LICENSE, "111122223333", "a#b", 1, "req-3");
        assert!(matches!(
            meter.record_at(&hash, now).await.unwrap_err(),
            UsageError::Unwritable(_)
        ));
        let split = Usage::new(LICENSE, "111122223333", "api", 5, "req-4")
            .allocate(2, [("team", "a")])
            .allocate(2, [("team", "b")]);
        assert!(matches!(
            meter.record_at(&split, now).await.unwrap_err(),
            UsageError::Rejected {
                reason: ReasonCode::AllocationSumMismatch,
                ..
            }
        ));
        // One row (beside its event-id marker) in the hour, none elsewhere.
        let key = awsmp_core::model::GroupKey {
            license_arn: LICENSE.into(),
            customer_aws_account_id: "111122223333".into(),
            dimension: "api".into(),
            hour: awsmp_core::time::HourBucket::containing(now),
        };
        let rows = tables.usage_store().group_rows(&key).await.unwrap();
        assert_eq!(rows.len(), 1, "{rows:?}");
        assert_eq!(tables.raw_rows().len(), 2, "the row and its marker");
    }

    #[tokio::test]
    async fn an_event_id_reused_with_other_usage_is_a_conflict_never_a_retry() {
        let tables = MemoryTables::new();
        let meter = Meter::with_store(Arc::new(tables.usage_store()), "prod");
        let now = t("2026-11-30T12:30:00Z");
        let usage = Usage::new(LICENSE, "111122223333", "api", 3, "req-1");
        assert_eq!(
            meter.record_at(&usage, now).await.unwrap(),
            Recorded::Written
        );
        // Its retry a minute later ("now" again, later): the same usage.
        let retry = t("2026-11-30T12:31:00Z");
        assert_eq!(
            meter.record_at(&usage, retry).await.unwrap(),
            Recorded::AlreadyWritten
        );
        let other = Usage::new(LICENSE, "111122223333", "api", 4, "req-1");
        let err = meter.record_at(&other, retry).await.unwrap_err();
        let UsageError::Conflict(conflict) = &err else {
            panic!("expected a conflict, got {err}")
        };
        assert_eq!(conflict.recorded.as_ref().unwrap().quantity, 3);
        assert_eq!(conflict.this.quantity, 4);
        assert!(!err.is_retryable());
        // A given instant is part of the usage.
        let at =
            Usage::new(LICENSE, "111122223333", "api", 3, "req-1").at(t("2026-11-30T12:00:00Z"));
        assert!(matches!(
            meter.record_at(&at, retry).await,
            Err(UsageError::Conflict(_))
        ));
        assert_eq!(tables.raw_rows().len(), 2, "one row and its marker");
    }

    #[tokio::test]
    async fn a_direct_submit_stack_takes_no_raw_usage() {
        let tables = MemoryTables::new();
        let meter = Meter::with_store(Arc::new(tables.usage_store()), "prod")
            .in_mode("direct-submit".parse().unwrap());
        let now = t("2026-11-30T12:30:00Z");
        let usage = Usage::new(LICENSE, "111122223333", "api", 3, "req-1");
        let err = meter.record_at(&usage, now).await.unwrap_err();
        assert!(matches!(err, UsageError::DirectSubmit(_)), "{err}");
        assert!(err.to_string().contains("aggregated-usage"), "{err}");
        assert!(tables.raw_rows().is_empty());
    }

    #[test]
    fn the_usage_instant_is_whole_seconds_and_defaults_to_now() {
        let now = t("2026-11-30T12:30:00Z") + chrono::Duration::milliseconds(750);
        let row = Usage::new(LICENSE, "111122223333", "api", 1, "e").to_row(now);
        assert_eq!(row.timestamp, t("2026-11-30T12:30:00Z"));
        let at = t("2026-11-30T12:00:01Z") + chrono::Duration::milliseconds(999);
        let row = Usage::new(LICENSE, "111122223333", "api", 1, "e")
            .at(at)
            .to_row(now);
        assert_eq!(row.timestamp, t("2026-11-30T12:00:01Z"));
    }
}

/// Reads entitlement answers from the deployment's subscribers table (the events
/// stack's `SubscribersTableName` output, in the events stack's Region, us-east-1).
#[derive(Clone)]
pub struct Entitlements {
    store: Arc<dyn SubscriberStore>,
}

impl std::fmt::Debug for Entitlements {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entitlements").finish_non_exhaustive()
    }
}

impl Entitlements {
    /// Answers from `subscribers_table` in `region` (the events stack's), whatever
    /// Region `config` names.
    pub fn new(
        config: &aws_types::SdkConfig,
        subscribers_table: impl Into<String>,
        region: &str,
    ) -> Self {
        let client = aws_sdk_dynamodb::Client::new(&awsmp_aws::in_region(config, region));
        Entitlements::with_store(Arc::new(awsmp_aws::DynamoSubscriberStore::new(
            client,
            subscribers_table.into(),
        )))
    }

    /// Answers from any subscribers store (the in-memory one in tests).
    pub fn with_store(store: Arc<dyn SubscriberStore>) -> Self {
        Entitlements { store }
    }

    /// The entitlement of `license_arn` for `account` (or the license's only buyer
    /// account) now.
    pub async fn get(
        &self,
        license_arn: &str,
        account: Option<&str>,
    ) -> Result<Entitlement, EntitlementError> {
        self.get_at(license_arn, account, Utc::now()).await
    }

    /// The same, as of `now`.
    pub async fn get_at(
        &self,
        license_arn: &str,
        account: Option<&str>,
        now: Instant,
    ) -> Result<Entitlement, EntitlementError> {
        awsmp_core::usage_api::entitlement(self.store.as_ref(), license_arn, account, now).await
    }
}

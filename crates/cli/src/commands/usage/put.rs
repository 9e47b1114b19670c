//! `awsmp usage put`: one usage row, written the way a seller's service writes it
//! (through `awsmp_usage::Meter`), checked first and idempotent by event id.

use std::sync::Arc;

use awsmp_core::lifecycle::normalize_license_arn;
use awsmp_core::model::{SubscriptionStatus, Tag};
use awsmp_core::ports::{SubscriberStore, UsageStore};
use awsmp_core::time::{HourBucket, Instant, parse_usage_timestamp};
use awsmp_usage::{Meter, Recorded, Usage, UsageError};

use crate::error::CommandError;
use crate::output::{Format, Outcome, json};

/// What the subscribers table says of the license and account a row is for, before it
/// is written: an `inactive` subscription is refused unless `force` (Marketplace answers
/// `CustomerNotSubscribed`: the usage could never be billed); no row at all is written
/// with a warning (the subscription event may still be on its way, and the submitter
/// keeps such usage pending inside its window; or the license is not this product's).
pub async fn check_subscription(
    subscribers: &dyn SubscriberStore,
    license_arn: &str,
    account: &str,
    force: bool,
) -> Result<Option<String>, CommandError> {
    let license = normalize_license_arn(license_arn);
    let row = subscribers.get(&license, account).await?;
    match row.and_then(|r| r.subscription_status) {
        Some(SubscriptionStatus::Active | SubscriptionStatus::Deprovisioning) => Ok(None),
        Some(SubscriptionStatus::Inactive) if force => Ok(Some(format!(
            "{license} is inactive for {account} (written because of --force): Marketplace will answer CustomerNotSubscribed"
        ))),
        Some(SubscriptionStatus::Inactive) => Err(CommandError::Usage(format!(
            "{license} is inactive for {account} in the subscribers table (its deprovisioning window closed): Marketplace would answer CustomerNotSubscribed and the usage could never be billed. Nothing was written; pass --force to write it anyway"
        ))),
        None => Ok(Some(format!(
            "the subscribers table has no active subscription of {license} for {account}: written, but it is billed only once Marketplace's subscription event arrives (the submitter keeps it pending inside the 24 h window); if the license is not this product's, Marketplace will refuse it (InvalidLicenseException)"
        ))),
    }
}

/// Parses `key=value` VMT tags (`--tag team=a`).
pub fn parse_tag(text: &str) -> Result<Tag, CommandError> {
    let (key, value) = text.split_once('=').ok_or_else(|| {
        CommandError::Usage(format!(
            "--tag {text:?}: expected key=value, e.g. --tag team=a"
        ))
    })?;
    Ok(Tag {
        key: key.to_string(),
        value: value.to_string(),
    })
}

/// What `awsmp usage put` writes.
#[derive(Debug, Clone)]
pub struct UsagePut {
    /// License.
    pub license_arn: String,
    /// Buyer account.
    pub account: String,
    /// Dimension.
    pub dimension: String,
    /// Quantity.
    pub quantity: i64,
    /// Usage instant (`YYYY-MM-DDTHH:MM:SS[Z]`, UTC); now when absent.
    pub timestamp: Option<String>,
    /// The caller's event id: a retry with the same id is a no-op.
    pub event_id: String,
    /// VMT tags for the whole quantity (one allocation), if any.
    pub tags: Vec<Tag>,
}

impl UsagePut {
    /// The usage these arguments describe (its instant: `--timestamp`, else the moment
    /// it is recorded).
    pub fn to_usage(&self) -> Result<Usage, CommandError> {
        let mut usage = Usage::new(
            &self.license_arn,
            &self.account,
            &self.dimension,
            self.quantity,
            &self.event_id,
        );
        if let Some(text) = &self.timestamp {
            usage = usage
                .at(parse_usage_timestamp(text).map_err(|e| CommandError::Usage(e.to_string()))?);
        }
        Ok(self
            .tags
            .iter()
            .fold(usage, |usage, tag| usage.tag(&tag.key, &tag.value)))
    }
}

/// What `awsmp usage put` did with one row.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct PutResult {
    /// `written`, or `already_written` (the event id was written before with the same
    /// usage: nothing changed).
    pub result: &'static str,
    /// The row's license.
    pub license_arn: String,
    /// The buyer account.
    pub account: String,
    /// The dimension.
    pub dimension: String,
    /// The usage instant written (UTC).
    pub timestamp: String,
    /// The hour it is billed in (`YYYY-MM-DDTHH`).
    pub hour: String,
    /// The quantity.
    pub quantity: i64,
    /// The caller's event id.
    pub event_id: String,
}

impl PutResult {
    /// One line (human) or one JSON document.
    pub fn render(&self, format: Format) -> Outcome {
        Outcome::ok(match format {
            Format::Json => json(self),
            Format::Human if self.result == WRITTEN => format!(
                "written: {} {} {} quantity {} (hour {})",
                self.license_arn, self.dimension, self.timestamp, self.quantity, self.hour
            ),
            Format::Human => format!(
                "already written (event id {}): nothing changed",
                self.event_id
            ),
        })
    }
}

const WRITTEN: &str = "written";

/// Writes one usage row through [`awsmp_usage::Meter`], as a seller's service would:
/// checked first as the aggregator checks it (a row it would reject is refused with
/// its reason code, nothing written), then written idempotently: a retry with the same
/// `--event-id` and the same usage writes nothing, even when its timestamp (by default
/// "now") differs from the first attempt's; the same id with other usage (or another
/// `--timestamp` given) is a conflict ([`CommandError::Conflict`], exit 5), nothing
/// written.
pub async fn put<S>(store: &S, put: &UsagePut, now: Instant) -> Result<PutResult, CommandError>
where
    S: UsageStore + Clone + 'static,
{
    let usage = put.to_usage()?;
    // The row names no product code, so the check needs none.
    let meter = Meter::with_store(Arc::new(store.clone()), "");
    let row = usage.to_row(now);
    let result = match meter.record_at(&usage, now).await {
        Ok(Recorded::Written) => WRITTEN,
        Ok(Recorded::AlreadyWritten) => "already_written",
        Err(UsageError::Store(e)) => return Err(CommandError::Store(e)),
        Err(UsageError::Conflict(conflict)) => {
            return Err(CommandError::Conflict(format!(
                "usage not written: {conflict}"
            )));
        }
        Err(refused) => return Err(CommandError::Usage(refused.to_string())),
    };
    Ok(PutResult {
        result,
        license_arn: row.license_arn.clone(),
        account: row.customer_aws_account_id.clone(),
        dimension: row.dimension.clone(),
        timestamp: awsmp_core::time::format_instant(row.timestamp),
        hour: HourBucket::containing(row.timestamp).to_string(),
        quantity: row.quantity,
        event_id: row.event_id,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use awsmp_core::model::{Attr, GroupKey, attr};

    fn arguments() -> UsagePut {
        UsagePut {
            license_arn: "arn:aws:license-manager::123456789012:license:l-1".into(),
            account: "111122223333".into(),
            dimension: "requests".into(),
            quantity: 5,
            timestamp: Some("2026-11-30T10:15:00Z".into()),
            event_id: "evt-1".into(),
            tags: vec![parse_tag("team=a").unwrap()],
        }
    }

    #[test]
    fn builds_a_tagged_row_with_the_event_id() {
        let row = arguments().to_usage().unwrap().to_row(chrono::Utc::now());
        assert_eq!(row.event_id, "evt-1");
        assert_eq!(row.allocations.unwrap()[0].quantity, 5);
    }

    #[tokio::test]
    async fn refuses_bad_arguments_with_what_to_do_and_writes_nothing() {
        let tables = awsmp_core::memory::MemoryTables::new();
        let store = tables.usage_store();
        let now = parse_usage_timestamp("2026-11-30T10:20:00Z").unwrap();
        let refused = |args: UsagePut| {
            let store = store.clone();
            async move { put(&store, &args, now).await.unwrap_err().to_string() }
        };
        let mut bad = arguments();
        bad.event_id = "a#b".into();
        assert!(refused(bad).await.contains("event id"));
        let mut bad = arguments();
        bad.quantity = -1;
        assert!(refused(bad).await.contains("NegativeQuantity"));
        let mut bad = arguments();
        bad.timestamp = Some("2026-11-30 10:15".into());
        assert!(refused(bad).await.contains("UTC"));
        let mut bad = arguments();
        bad.timestamp = Some("2026-11-29T09:00:00Z".into());
        assert!(refused(bad).await.contains("TimestampOutOfWindow"));
        assert!(parse_tag("nokey").is_err());
        assert!(tables.raw_rows().is_empty());
    }

    #[tokio::test]
    async fn a_retry_with_the_same_event_id_and_the_default_timestamp_writes_one_row() {
        let tables = awsmp_core::memory::MemoryTables::new();
        let store = tables.usage_store();
        let mut args = arguments();
        args.timestamp = None;
        let first_try = parse_usage_timestamp("2026-11-30T10:15:42Z").unwrap();
        let retry = parse_usage_timestamp("2026-11-30T10:15:43Z").unwrap();

        let first = put(&store, &args, first_try).await.unwrap();
        let first = first.render(Format::Human).text;
        assert!(first.starts_with("written:"), "{first}");
        let again = put(&store, &args, retry).await.unwrap();
        assert_eq!(again.result, "already_written");
        let again = again.render(Format::Human).text;
        assert!(
            again.contains("already written (event id evt-1)"),
            "{again}"
        );

        let group = GroupKey {
            license_arn: args.license_arn.clone(),
            customer_aws_account_id: args.account.clone(),
            dimension: args.dimension.clone(),
            hour: HourBucket::containing(first_try),
        };
        let rows = store.group_rows(&group).await.unwrap();
        assert_eq!(rows.len(), 1, "{rows:?}");
        assert_eq!(
            rows[0].attrs.get(attr::TIMESTAMP),
            Some(&Attr::S("2026-11-30T10:15:42Z".into()))
        );
        // `inspect` reads the group: it shows the one row, not the event's marker.
        let view = crate::commands::inspect::group(&store, &tables.aggregated_store(), &group)
            .await
            .unwrap();
        let shown = view.render(Format::Human).text;
        assert!(shown.contains("raw rows (1):"), "{shown}");
        assert!(!shown.contains("event#"), "{shown}");
    }

    /// GIVEN the subscribers table WHEN usage is put for a license THEN an inactive one
    /// is refused unless forced, an unknown one is written with a warning, an active or
    /// deprovisioning one is written quietly.
    #[tokio::test]
    async fn an_inactive_license_is_refused_and_an_unknown_one_warned_about() {
        use awsmp_core::memory::MemorySubscriberStore;
        use awsmp_core::model::Subscriber;
        let now = parse_usage_timestamp("2026-11-30T10:20:00Z").unwrap();
        let store = MemorySubscriberStore::new();
        let license = "arn:aws:license-manager::123456789012:license:l-1";
        let row = |account: &str, status| Subscriber {
            subscription_status: Some(status),
            ..Subscriber::new(license, account)
        };
        store.insert(row("111111111111", SubscriptionStatus::Active), now);
        store.insert(row("222222222222", SubscriptionStatus::Deprovisioning), now);
        store.insert(row("333333333333", SubscriptionStatus::Inactive), now);
        let check = |account: &'static str, force| {
            let store = store.clone();
            async move { check_subscription(&store, license, account, force).await }
        };
        assert_eq!(check("111111111111", false).await.unwrap(), None);
        assert_eq!(check("222222222222", false).await.unwrap(), None);
        let refused = check("333333333333", false).await.unwrap_err();
        assert!(matches!(refused, CommandError::Usage(_)));
        assert!(refused.to_string().contains("--force"), "{refused}");
        assert!(check("333333333333", true).await.unwrap().is_some());
        let unknown = check("444444444444", false).await.unwrap().unwrap();
        assert!(unknown.contains("no active subscription"), "{unknown}");
    }
}

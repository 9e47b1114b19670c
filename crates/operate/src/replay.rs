//! `awsmp replay`: when an `Error` record may be sent again. Only an `Error` record
//! (nothing was billed), only inside Marketplace's 24 h window, only with the quantity
//! it already holds (its `sentQuantity` stays, so no late row folds in), and only when a
//! second send can succeed.

use serde::Serialize;

use awsmp_core::model::{AggregatedRecord, AggregatedStatus, GroupKey};
use awsmp_core::ports::{AggregatedStore, OperatorStore, PortError};
use awsmp_core::submit::{REASON_MALFORMED_ITEM, REASON_REQUEST_TOO_LARGE};

/// The exception of a license Marketplace refuses for the record's customer and hour.
const INVALID_LICENSE: &str = "InvalidLicenseException";
use awsmp_core::time::{HourBucket, Instant, bucket_expired};

/// Why a record is not replayed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplayRefusal {
    /// Only `Error` records are replayed; others are billed, final or still pending.
    #[error("{key} is {status}, not Error: {why}")]
    NotError {
        /// The group.
        key: String,
        /// Its status.
        status: AggregatedStatus,
        /// What that status means here.
        why: &'static str,
    },
    /// The hour left Marketplace's 24 h window: it can never be billed.
    #[error(
        "{key}: hour {hour} is outside Marketplace's 24 h window; it cannot be billed any more"
    )]
    WindowClosed {
        /// The group.
        key: String,
        /// Its hour.
        hour: String,
    },
    /// A second send fails the same way whatever is fixed outside the record.
    #[error("{key}: {reason} cannot succeed when sent again as it is")]
    CannotSucceed {
        /// The group.
        key: String,
        /// The stored reason.
        reason: String,
    },
    /// The record changed since it was read (another replay, or the pipeline).
    #[error("{key} changed while replaying; nothing was written, read it again")]
    Changed {
        /// The group.
        key: String,
    },
}

/// Whether `record` may be replayed at `now`.
pub fn check_replay(record: &AggregatedRecord, now: Instant) -> Result<(), ReplayRefusal> {
    let key = record.key.to_string();
    let why = match record.status {
        AggregatedStatus::Error => "",
        AggregatedStatus::Pending => "it is still pending and will be sent by the submitter",
        AggregatedStatus::Success | AggregatedStatus::DuplicateRecord => {
            "it is billed; sending it again would not bill more"
        }
        AggregatedStatus::CustomerNotSubscribed => {
            "that answer is final (do not retry); see `awsmp inspect license`"
        }
        AggregatedStatus::SubmissionExpired => "its hour aged out unsent",
        AggregatedStatus::DryRunSubmitted => "it was a dry run; deploy with METERING_MODE live",
    };
    if record.status != AggregatedStatus::Error {
        return Err(ReplayRefusal::NotError {
            key,
            status: record.status,
            why,
        });
    }
    if bucket_expired(record.key.hour, now) {
        return Err(ReplayRefusal::WindowClosed {
            key,
            hour: record.key.hour.to_string(),
        });
    }
    let reason = record.status_reason.as_deref().unwrap_or_default();
    // The license, the account and the hour are the record's own: a license Marketplace
    // refused for them (unknown, another customer's, outside its activation period) is
    // refused again, so the usage must be written anew under the right license.
    if reason == REASON_REQUEST_TOO_LARGE
        || reason.starts_with(REASON_MALFORMED_ITEM)
        || reason == INVALID_LICENSE
    {
        return Err(ReplayRefusal::CannotSucceed {
            key,
            reason: reason.to_string(),
        });
    }
    Ok(())
}

/// Which records to replay.
#[derive(Debug, Clone)]
pub enum Selection {
    /// These groups.
    Groups(Vec<GroupKey>),
    /// Every `Error` record of usage hours from this one.
    FailedSince(HourBucket),
}

/// What happened to one record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct ReplayLine {
    /// The group (`license|account|dimension|hour`).
    pub group: String,
    /// `replayed`, `would replay` (dry run) or `refused`.
    pub result: &'static str,
    /// The quantity it is sent with.
    pub quantity: Option<i64>,
    /// Why it was refused.
    pub why: Option<String>,
}

/// Replays the selection at `now` (with `dry_run`, only says what it would do): each
/// record is read, checked ([`check_replay`]) and put back under the condition that it
/// is still as read ([`OperatorStore::replay`]).
pub async fn replay(
    aggregated: &dyn AggregatedStore,
    operator: &dyn OperatorStore,
    selection: &Selection,
    now: Instant,
    dry_run: bool,
) -> Result<Vec<ReplayLine>, PortError> {
    let mut found: Vec<Result<AggregatedRecord, GroupKey>> = Vec::new();
    match selection {
        Selection::Groups(keys) => {
            for key in keys {
                found.push(aggregated.get(key).await?.ok_or_else(|| key.clone()));
            }
        }
        Selection::FailedSince(since) => {
            let mut cursor = None;
            loop {
                let page = operator.records_page(None, cursor).await?;
                found.extend(
                    page.items
                        .into_iter()
                        .filter(|r| r.status == AggregatedStatus::Error && r.key.hour >= *since)
                        .map(Ok),
                );
                match page.next {
                    Some(next) => cursor = Some(next),
                    None => break,
                }
            }
        }
    }
    let mut lines = Vec::new();
    for record in found {
        let record = match record {
            Ok(record) => record,
            Err(key) => {
                lines.push(ReplayLine {
                    group: key.to_string(),
                    result: "refused",
                    quantity: None,
                    why: Some(
                        "no aggregated record for this group (check the key with `awsmp inspect license`)"
                            .into(),
                    ),
                });
                continue;
            }
        };
        let group = record.key.to_string();
        let quantity = Some(record.quantity_to_send());
        let line = |result, why: Option<String>| ReplayLine {
            group: group.clone(),
            result,
            quantity,
            why,
        };
        lines.push(match check_replay(&record, now) {
            Err(refusal) => line("refused", Some(refusal.to_string())),
            Ok(()) if dry_run => line("would replay", None),
            Ok(()) if operator.replay(&record, now).await? => line("replayed", None),
            Ok(()) => line(
                "refused",
                Some(ReplayRefusal::Changed { key: group.clone() }.to_string()),
            ),
        });
    }
    Ok(lines)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use awsmp_core::time::parse_usage_timestamp;

    fn record(hour: &str, status: AggregatedStatus, reason: &str) -> AggregatedRecord {
        awsmp_core::memory::fixtures::operator_record("api", hour, status, 4, Some(reason))
    }

    #[test]
    fn replays_only_a_fixable_error_inside_the_window() {
        let now = parse_usage_timestamp("2026-11-30T12:30:00Z").unwrap();
        let fixable = record(
            "2026-11-30T10",
            AggregatedStatus::Error,
            "InvalidUsageDimensionException",
        );
        assert_eq!(check_replay(&fixable, now), Ok(()));
        let old = record(
            "2026-11-29T12",
            AggregatedStatus::Error,
            "InvalidUsageDimensionException",
        );
        assert!(matches!(
            check_replay(&old, now),
            Err(ReplayRefusal::WindowClosed { .. })
        ));
        let billed = record("2026-11-30T10", AggregatedStatus::Success, "");
        let refusal = check_replay(&billed, now).unwrap_err().to_string();
        assert!(refusal.contains("billed"), "{refusal}");
        let large = record(
            "2026-11-30T10",
            AggregatedStatus::Error,
            REASON_REQUEST_TOO_LARGE,
        );
        assert!(matches!(
            check_replay(&large, now),
            Err(ReplayRefusal::CannotSucceed { .. })
        ));
        // A license refused for this customer and hour is refused again.
        let license = record(
            "2026-11-30T10",
            AggregatedStatus::Error,
            "InvalidLicenseException",
        );
        assert!(matches!(
            check_replay(&license, now),
            Err(ReplayRefusal::CannotSucceed { .. })
        ));
    }
}

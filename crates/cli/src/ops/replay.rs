//! `awsmp replay`: sends `Error` records again after their cause was fixed, only
//! inside the 24 h window and only with their stored quantity; every refusal says why.

use awsmp_core::model::{AggregatedStatus, GroupKey};
use awsmp_core::operate::replay::{ReplayRefusal, check_replay};
use awsmp_core::ports::{AggregatedStore, OperatorStore};
use awsmp_core::time::{HourBucket, Instant};
use serde::Serialize;

use super::all_records;
use crate::commands::CommandError;
use crate::output::{Format, Outcome, json, table};

/// Which records to replay.
#[derive(Debug, Clone)]
pub enum Selection {
    /// These groups (`license|account|dimension|hour`).
    Groups(Vec<GroupKey>),
    /// Every `Error` record of usage hours from this one.
    FailedSince(HourBucket),
}

/// What happened to one record.
#[derive(Debug, Clone, Serialize)]
pub struct ReplayLine {
    /// The group.
    pub group: String,
    /// `replayed`, `would replay` (dry run) or `refused`.
    pub result: &'static str,
    /// The quantity it will be sent with.
    pub quantity: Option<i64>,
    /// Why it was refused.
    pub why: Option<String>,
}

/// Parses `license|account|dimension|hour` (as `awsmp failures` prints it).
pub fn parse_group(text: &str) -> Result<GroupKey, CommandError> {
    let parts: Vec<&str> = text.split('|').collect();
    let [license, account, dimension, hour] = parts.as_slice() else {
        return Err(CommandError::Usage(format!(
            "group {text:?}: expected license|account|dimension|hour, as `awsmp failures` prints it"
        )));
    };
    let hour = hour
        .parse()
        .map_err(|e| CommandError::Usage(format!("group {text:?}: {e}")))?;
    Ok(GroupKey {
        license_arn: license.to_string(),
        customer_aws_account_id: account.to_string(),
        dimension: dimension.to_string(),
        hour,
    })
}

/// Replays the selection (or, with `dry_run`, says what it would do).
pub async fn replay(
    aggregated: &dyn AggregatedStore,
    operator: &dyn OperatorStore,
    selection: &Selection,
    now: Instant,
    dry_run: bool,
) -> Result<Vec<ReplayLine>, CommandError> {
    let records = match selection {
        Selection::Groups(keys) => {
            let mut found = Vec::new();
            for key in keys {
                match aggregated.get(key).await? {
                    Some(record) => found.push(Ok(record)),
                    None => found.push(Err(key.clone())),
                }
            }
            found
        }
        Selection::FailedSince(since) => all_records(operator, None)
            .await?
            .0
            .into_iter()
            .filter(|r| r.status == AggregatedStatus::Error && r.key.hour >= *since)
            .map(Ok)
            .collect(),
    };
    let mut lines = Vec::new();
    for found in records {
        let record = match found {
            Ok(record) => record,
            Err(key) => {
                lines.push(ReplayLine {
                    group: key.to_string(),
                    result: "refused",
                    quantity: None,
                    why: Some("no aggregated record for this group (check the key with `awsmp inspect license`)".into()),
                });
                continue;
            }
        };
        let group = record.key.to_string();
        let quantity = Some(record.quantity_to_send());
        let refused = |why: String| ReplayLine {
            group: group.clone(),
            result: "refused",
            quantity,
            why: Some(why),
        };
        if let Err(refusal) = check_replay(&record, now) {
            lines.push(refused(refusal.to_string()));
            continue;
        }
        if dry_run {
            lines.push(ReplayLine {
                group,
                result: "would replay",
                quantity,
                why: None,
            });
            continue;
        }
        if operator.replay(&record, now).await? {
            lines.push(ReplayLine {
                group,
                result: "replayed",
                quantity,
                why: None,
            });
        } else {
            lines.push(refused(
                ReplayRefusal::Changed { key: group.clone() }.to_string(),
            ));
        }
    }
    Ok(lines)
}

/// Renders the results; attention when any was refused.
pub fn render(lines: &[ReplayLine], format: Format) -> Outcome {
    let attention = lines.iter().any(|l| l.result == "refused");
    let text = match format {
        Format::Json => json(&lines),
        Format::Human if lines.is_empty() => "nothing to replay\n".to_string(),
        Format::Human => {
            let mut out = table(
                &["group", "result", "quantity", "why"],
                lines.iter().map(|l| {
                    vec![
                        l.group.clone(),
                        l.result.to_string(),
                        crate::output::cell(l.quantity),
                        l.why.clone().unwrap_or_default(),
                    ]
                }),
            );
            out.push('\n');
            if lines.iter().any(|l| l.result == "replayed") {
                out.push_str(
                    "the submitter sends replayed records on its next run (every few minutes)\n",
                );
            }
            out
        }
    };
    Outcome { text, attention }
}

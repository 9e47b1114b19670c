//! Read-only views of the tables for assertions (a full `Scan`: fine for a test's
//! small tables, never used by the pipeline itself).

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use awsmp_core::model::attr;

use crate::HarnessError;

/// One raw usage row as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawRowView {
    /// `licenseArn`.
    pub license_arn: String,
    /// Sort key.
    pub sort_key: String,
    /// `customerAWSAccountId`, if a string.
    pub account: Option<String>,
    /// `dimension`, if a string.
    pub dimension: Option<String>,
    /// `quantity`, if an integer number.
    pub quantity: Option<i64>,
    /// `meteringStatus`.
    pub status: Option<String>,
    /// `meteringStatusReason`.
    pub reason: Option<String>,
    /// Still carries `meteringPending`.
    pub pending: bool,
    /// `aggregatedInto` (the claim).
    pub aggregated_into: Option<String>,
}

/// One aggregated record as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AggregatedView {
    /// `licenseArn`.
    pub license_arn: String,
    /// `account_dimension_hour`.
    pub sort_key: String,
    /// `customerAWSAccountId`.
    pub account: String,
    /// `dimension`.
    pub dimension: String,
    /// `hourBucket`.
    pub hour: String,
    /// `quantity`.
    pub quantity: i64,
    /// `meteringStatus` (`Pending` while pending).
    pub status: String,
    /// `meteringStatusReason`.
    pub reason: Option<String>,
    /// `meteringRecordId`.
    pub metering_record_id: Option<String>,
    /// `sentQuantity`.
    pub sent_quantity: Option<i64>,
    /// Still carries `meteringPending`.
    pub pending: bool,
    /// `inFlightUntil` present.
    pub in_flight: bool,
}

fn s(item: &HashMap<String, AttributeValue>, name: &str) -> Option<String> {
    item.get(name).and_then(|v| v.as_s().ok()).cloned()
}

fn n(item: &HashMap<String, AttributeValue>, name: &str) -> Option<i64> {
    item.get(name)
        .and_then(|v| v.as_n().ok())
        .and_then(|t| t.parse().ok())
}

/// Every item of `table`.
pub async fn scan(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
) -> Result<Vec<HashMap<String, AttributeValue>>, HarnessError> {
    let mut items = Vec::new();
    let mut start = None;
    loop {
        let page = client
            .scan()
            .table_name(table)
            .set_exclusive_start_key(start)
            .send()
            .await
            .map_err(|e| HarnessError::Aws(format!("Scan {table}: {e:?}")))?;
        items.extend(page.items().iter().cloned());
        match page.last_evaluated_key() {
            Some(key) if !key.is_empty() => start = Some(key.clone()),
            _ => return Ok(items),
        }
    }
}

/// Every raw usage row (not the ingestion markers `event#<eventId>` that
/// `UsageStore::put_row` writes beside its rows: they are not usage).
pub async fn raw_rows(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
) -> Result<Vec<RawRowView>, HarnessError> {
    Ok(scan(client, table)
        .await?
        .iter()
        .filter(|item| {
            s(item, attr::USAGE_SORT_KEY)
                .is_none_or(|key| awsmp_core::items::ingestion_marker_event_id(&key).is_none())
        })
        .map(|item| RawRowView {
            license_arn: s(item, attr::LICENSE_ARN).unwrap_or_default(),
            sort_key: s(item, attr::USAGE_SORT_KEY).unwrap_or_default(),
            account: s(item, attr::CUSTOMER_ACCOUNT),
            dimension: s(item, attr::DIMENSION),
            quantity: n(item, attr::QUANTITY),
            status: s(item, attr::METERING_STATUS),
            reason: s(item, attr::METERING_STATUS_REASON),
            pending: item.contains_key(attr::METERING_PENDING),
            aggregated_into: s(item, attr::AGGREGATED_INTO),
        })
        .collect())
}

/// Every aggregated record.
pub async fn aggregated_rows(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
) -> Result<Vec<AggregatedView>, HarnessError> {
    Ok(scan(client, table)
        .await?
        .iter()
        .map(|item| AggregatedView {
            license_arn: s(item, attr::LICENSE_ARN).unwrap_or_default(),
            sort_key: s(item, attr::AGGREGATED_SORT_KEY).unwrap_or_default(),
            account: s(item, attr::CUSTOMER_ACCOUNT).unwrap_or_default(),
            dimension: s(item, attr::DIMENSION).unwrap_or_default(),
            hour: s(item, attr::HOUR_BUCKET).unwrap_or_default(),
            quantity: n(item, attr::QUANTITY).unwrap_or_default(),
            status: s(item, attr::METERING_STATUS).unwrap_or_else(|| "Pending".to_string()),
            reason: s(item, attr::METERING_STATUS_REASON),
            metering_record_id: s(item, attr::METERING_RECORD_ID),
            sent_quantity: n(item, attr::SENT_QUANTITY),
            pending: item.contains_key(attr::METERING_PENDING),
            in_flight: item.contains_key(attr::IN_FLIGHT_UNTIL),
        })
        .collect())
}

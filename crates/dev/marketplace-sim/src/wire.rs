//! The JSON 1.1 shapes of BatchMeterUsage and ResolveCustomer as they travel on the
//! wire (PascalCase names, timestamps as epoch-second numbers). Every field is
//! optional here so that a missing required field gets a specific error from the
//! validator instead of a generic parse failure.

use serde::{Deserialize, Serialize};
use serde_json::Number;

/// The `X-Amz-Target` prefix of every Marketplace Metering operation.
pub const TARGET_PREFIX: &str = "AWSMPMeteringService.";
/// The content type of requests and responses.
pub const CONTENT_TYPE: &str = "application/x-amz-json-1.1";

/// A `BatchMeterUsage` request body.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct BatchMeterUsageRequest {
    /// The records, at most 25.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage_records: Option<Vec<WireUsageRecord>>,
    /// Legacy request-level product code; must be absent for LicenseArn records.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub product_code: Option<String>,
}

/// One usage record, kept as sent so it can be echoed back unchanged.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct WireUsageRecord {
    /// Epoch seconds (integer or fractional).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<Number>,
    /// Legacy customer id; the SDK always sends `""`, which counts as absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub customer_identifier: Option<String>,
    /// The dimension API name (case-sensitive).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dimension: Option<String>,
    /// 0..=2147483647; absent means 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quantity: Option<Number>,
    /// Tagged split of the quantity.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage_allocations: Option<Vec<WireUsageAllocation>>,
    /// The buyer's 12-digit account.
    #[serde(
        rename = "CustomerAWSAccountId",
        skip_serializing_if = "Option::is_none"
    )]
    pub customer_aws_account_id: Option<String>,
    /// The buyer's license (Concurrent Agreements).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub license_arn: Option<String>,
}

/// One allocation of a record's quantity.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct WireUsageAllocation {
    /// 0..=2147483647.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allocated_usage_quantity: Option<Number>,
    /// 1..=5 tags; absent for the untagged bucket.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tags: Option<Vec<WireTag>>,
}

/// One allocation tag.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct WireTag {
    /// 1..=100 characters of the tag pattern.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// 1..=256 characters of the tag pattern.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

/// A `BatchMeterUsage` response body.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct BatchMeterUsageResponse {
    /// One result per processed record, in request order.
    pub results: Vec<WireUsageRecordResult>,
    /// Records the service did not process (only when a fault is injected).
    pub unprocessed_records: Vec<WireUsageRecord>,
}

/// The outcome of one processed record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct WireUsageRecordResult {
    /// The record as sent.
    pub usage_record: WireUsageRecord,
    /// The id of the billed record (for a duplicate: the id of the original).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metering_record_id: Option<String>,
    /// `Success`, `CustomerNotSubscribed` or `DuplicateRecord` (or, under an injected
    /// `unknown_status` fault, `Unknown`).
    pub status: RecordStatus,
}

/// The status of one processed record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum RecordStatus {
    /// Accepted and billed.
    Success,
    /// No active entitlement for (license, account) at the sim time of the call.
    CustomerNotSubscribed,
    /// The (account, license, dimension, hour) was already billed; nothing new billed.
    DuplicateRecord,
    /// A status AWS does not document ([`crate::model::UNKNOWN_STATUS`]): only an
    /// injected `unknown_status` fault answers it, on a record processed as usual.
    Unknown,
}

impl RecordStatus {
    /// The status as it appears on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Success => "Success",
            Self::CustomerNotSubscribed => "CustomerNotSubscribed",
            Self::DuplicateRecord => "DuplicateRecord",
            Self::Unknown => crate::model::UNKNOWN_STATUS,
        }
    }
}

/// A `ResolveCustomer` request body.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ResolveCustomerRequest {
    /// The `x-amzn-marketplace-token` the buyer's browser posted.
    pub registration_token: Option<String>,
}

/// A `ResolveCustomer` response body; `CustomerIdentifier` is never sent, as for new
/// SaaS integrations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResolveCustomerResponse {
    /// The buyer's account.
    #[serde(rename = "CustomerAWSAccountId")]
    pub customer_aws_account_id: String,
    /// The product the buyer subscribed to.
    #[serde(rename = "ProductCode")]
    pub product_code: String,
    /// The buyer's license.
    #[serde(rename = "LicenseArn")]
    pub license_arn: String,
}

/// The body of every error response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WireError {
    /// The exception name.
    #[serde(rename = "__type")]
    pub error_type: String,
    /// Why.
    pub message: String,
}

//! The simulator's public data: what the admin API seeds (products, entitlements,
//! tokens, faults) and what it reports (entitlements, the billed-records ledger,
//! conflicts, rejected requests, stats). All JSON in snake_case.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::error::AdminError;

/// A product and its metering dimensions (API names, case-sensitive).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProductSeed {
    /// The product code.
    pub product_code: String,
    /// The dimensions BatchMeterUsage accepts for this product.
    pub dimensions: Vec<String>,
}

/// An active entitlement of `customer_aws_account_id` to `product_code` through
/// `license_arn`. The license becomes known to the simulator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EntitlementSeed {
    /// The buyer's license.
    pub license_arn: String,
    /// The buyer's account.
    pub customer_aws_account_id: String,
    /// The product the license is for.
    pub product_code: String,
}

/// Names one entitlement, for revocation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EntitlementKey {
    /// The buyer's license.
    pub license_arn: String,
    /// The buyer's account.
    pub customer_aws_account_id: String,
}

/// A registration token that `ResolveCustomer` will resolve. Seeding a token makes
/// its license known (for the product) but does not entitle it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenSeed {
    /// The opaque `x-amzn-marketplace-token` value.
    pub token: String,
    /// The license it resolves to.
    pub license_arn: String,
    /// The account it resolves to.
    pub customer_aws_account_id: String,
    /// The product it resolves to.
    pub product_code: String,
    /// When it was issued (sim clock); absent: now. Expires 4 h later.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issued_at: Option<DateTime<Utc>>,
}

/// Where an entitlement stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum EntitlementState {
    /// Metering is accepted.
    Active,
    /// `License Deprovisioned` arrived: metering is accepted until `ends_at` (sim clock).
    Deprovisioning {
        /// One hour after the event was applied.
        ends_at: DateTime<Utc>,
    },
    /// Revoked through the admin API: metering is refused.
    Revoked {
        /// When it was revoked (sim clock).
        at: DateTime<Utc>,
    },
}

impl EntitlementState {
    /// Whether BatchMeterUsage bills this customer at sim time `now`.
    pub fn is_active(&self, now: DateTime<Utc>) -> bool {
        match self {
            Self::Active => true,
            Self::Deprovisioning { ends_at } => now < *ends_at,
            Self::Revoked { .. } => false,
        }
    }
}

/// One entitlement as the simulator holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entitlement {
    /// The buyer's license.
    pub license_arn: String,
    /// The buyer's account.
    pub customer_aws_account_id: String,
    /// The product the license is for.
    pub product_code: String,
    /// Where it stands.
    #[serde(flatten)]
    pub state: EntitlementState,
    /// Last change (sim clock).
    pub updated_at: DateTime<Utc>,
}

/// Which failure an injected fault produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum FaultKind {
    /// `ThrottlingException` (HTTP 400).
    Throttling,
    /// `InternalServiceErrorException` (HTTP 500).
    InternalError,
    /// `DisabledApiException` (HTTP 400).
    Disabled,
    /// The call is refused before it is processed because its caller is not
    /// authenticated or not authorized (a role edited, expired credentials, a bad
    /// signature): `exception` says which, with the HTTP status AWS answers it with.
    Unauthorized {
        /// Which refusal (default `access_denied`).
        #[serde(default)]
        exception: AuthFailure,
    },
    /// The call succeeds but its last `records` records come back in
    /// `UnprocessedRecords`, unbilled. BatchMeterUsage only.
    Unprocessed {
        /// How many records of each affected call are left unprocessed.
        records: usize,
    },
    /// The call is processed in full — billed, duplicates answered, every state
    /// change exactly as for a normal answer — and then its answer is lost: the
    /// caller gets an HTTP 500 or a dropped connection instead (an ambiguous
    /// outcome: it cannot know whether anything was billed).
    LoseResponse {
        /// How the answer is lost (default `http_500`).
        #[serde(default)]
        mode: LossMode,
    },
    /// The call is processed in full (billed, duplicates answered), and then the
    /// results of its last `records` records are left out of the answer: listed
    /// neither in `Results` nor in `UnprocessedRecords`. BatchMeterUsage only.
    OmitResults {
        /// How many records of each affected call go unanswered.
        records: usize,
    },
    /// The call is processed in full, and then the results of its last `records`
    /// records carry a `Status` AWS does not document ([`UNKNOWN_STATUS`]).
    /// BatchMeterUsage only.
    UnknownStatus {
        /// How many results of each affected call get the unknown status.
        records: usize,
    },
    /// The call is processed in full, and then the results of its last `records`
    /// records echo a `UsageRecord` that is not the one sent (its `Quantity` one
    /// more). BatchMeterUsage only.
    WrongEcho {
        /// How many results of each affected call echo another record.
        records: usize,
    },
}

/// The exception an [`FaultKind::Unauthorized`] fault refuses the call with.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum AuthFailure {
    /// `AccessDeniedException` (HTTP 400): the role may not call the operation.
    #[default]
    AccessDenied,
    /// `UnrecognizedClientException` (HTTP 400): the access key is unknown.
    UnrecognizedClient,
    /// `ExpiredTokenException` (HTTP 400): the session's credentials expired.
    ExpiredToken,
    /// `InvalidSignatureException` (HTTP 400): the signature does not match.
    InvalidSignature,
    /// `InvalidClientTokenId` (HTTP 403): the security token is invalid.
    InvalidClientTokenId,
    /// `MissingAuthenticationToken` (HTTP 403): the request is not signed.
    MissingAuthenticationToken,
    /// `IncompleteSignature` (HTTP 403): the signature lacks a part.
    IncompleteSignature,
}

impl AuthFailure {
    /// Every refusal, in order.
    pub const ALL: [AuthFailure; 7] = [
        AuthFailure::AccessDenied,
        AuthFailure::UnrecognizedClient,
        AuthFailure::ExpiredToken,
        AuthFailure::InvalidSignature,
        AuthFailure::InvalidClientTokenId,
        AuthFailure::MissingAuthenticationToken,
        AuthFailure::IncompleteSignature,
    ];

    /// The exception name on the wire (`__type`).
    pub fn wire_name(self) -> &'static str {
        match self {
            Self::AccessDenied => "AccessDeniedException",
            Self::UnrecognizedClient => "UnrecognizedClientException",
            Self::ExpiredToken => "ExpiredTokenException",
            Self::InvalidSignature => "InvalidSignatureException",
            Self::InvalidClientTokenId => "InvalidClientTokenId",
            Self::MissingAuthenticationToken => "MissingAuthenticationToken",
            Self::IncompleteSignature => "IncompleteSignature",
        }
    }

    /// The HTTP status AWS answers it with.
    pub fn http_status(self) -> u16 {
        match self {
            Self::AccessDenied
            | Self::UnrecognizedClient
            | Self::ExpiredToken
            | Self::InvalidSignature => 400,
            Self::InvalidClientTokenId
            | Self::MissingAuthenticationToken
            | Self::IncompleteSignature => 403,
        }
    }
}

/// The `Status` an [`FaultKind::UnknownStatus`] fault answers.
pub const UNKNOWN_STATUS: &str = "Unknown";

/// How a [`FaultKind::LoseResponse`] fault loses the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum LossMode {
    /// An HTTP 500 `InternalServiceErrorException` answer (as when the service fails
    /// after committing).
    #[default]
    #[serde(rename = "http_500", alias = "500")]
    Http500,
    /// The connection is closed without any answer (no status line).
    #[serde(rename = "drop")]
    Drop,
}

/// When, in the processing of a call, a fault takes effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultPhase {
    /// Before processing: the call is refused, nothing changes.
    Refuse,
    /// During processing: some records are left unprocessed.
    Unprocess,
    /// After processing: some results are left out of the answer or garbled.
    Garble,
    /// After processing: the answer is lost.
    LoseAnswer,
}

impl FaultKind {
    /// When the fault takes effect.
    pub fn phase(self) -> FaultPhase {
        match self {
            Self::Throttling | Self::InternalError | Self::Disabled | Self::Unauthorized { .. } => {
                FaultPhase::Refuse
            }
            Self::Unprocessed { .. } => FaultPhase::Unprocess,
            Self::OmitResults { .. } | Self::UnknownStatus { .. } | Self::WrongEcho { .. } => {
                FaultPhase::Garble
            }
            Self::LoseResponse { .. } => FaultPhase::LoseAnswer,
        }
    }

    /// For a fault on some records of a BatchMeterUsage call: its name and how many.
    pub(crate) fn per_record(self) -> Option<(&'static str, usize)> {
        match self {
            Self::Unprocessed { records } => Some(("unprocessed", records)),
            Self::OmitResults { records } => Some(("omit_results", records)),
            Self::UnknownStatus { records } => Some(("unknown_status", records)),
            Self::WrongEcho { records } => Some(("wrong_echo", records)),
            Self::Throttling
            | Self::InternalError
            | Self::Disabled
            | Self::Unauthorized { .. }
            | Self::LoseResponse { .. } => None,
        }
    }

    /// Whether the fault refuses the whole call before processing it.
    pub fn fails_call(self) -> bool {
        self.phase() == FaultPhase::Refuse
    }
}

/// Which operation a fault applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum FaultTarget {
    /// `BatchMeterUsage` calls (the default).
    #[default]
    BatchMeterUsage,
    /// `ResolveCustomer` calls.
    ResolveCustomer,
    /// Calls of either metering operation.
    Any,
    /// `BatchCreateBillingAdjustmentRequest` calls (Agreement API): `lose_response`
    /// only, answered HTTP 500 after the adjustments were made.
    BillingAdjustments,
}

fn one() -> u32 {
    1
}

/// "The next `count` calls of `operation` fail with / are affected by `kind`."
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultSpec {
    /// The failure.
    #[serde(flatten)]
    pub kind: FaultKind,
    /// How many calls it affects (at least 1; default 1).
    #[serde(default = "one")]
    pub count: u32,
    /// Which operation's calls (default `batch_meter_usage`).
    #[serde(default)]
    pub operation: FaultTarget,
}

impl FaultSpec {
    /// Checks the count, and that a fault on some records of a call (`unprocessed`,
    /// `omit_results`, `unknown_status`, `wrong_echo`) names at least one record and
    /// targets BatchMeterUsage only.
    pub fn validate(&self) -> Result<(), AdminError> {
        if self.count == 0 {
            return Err(AdminError::Invalid(
                "fault count must be at least 1".to_owned(),
            ));
        }
        if self.operation == FaultTarget::BillingAdjustments
            && !matches!(self.kind, FaultKind::LoseResponse { .. })
        {
            return Err(AdminError::Invalid(
                "a billing_adjustments fault must be lose_response (the adjustments are made, the answer lost)".to_owned(),
            ));
        }
        if let Some((name, records)) = self.kind.per_record() {
            if records == 0 {
                return Err(AdminError::Invalid(format!(
                    "an {name} fault must affect at least 1 record"
                )));
            }
            if self.operation != FaultTarget::BatchMeterUsage {
                return Err(AdminError::Invalid(format!(
                    "an {name} fault applies to batch_meter_usage only"
                )));
            }
        }
        Ok(())
    }
}

/// One tag of a billed allocation.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct AllocationTag {
    /// Tag key.
    pub key: String,
    /// Tag value.
    pub value: String,
}

/// One allocation of a billed record.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Allocation {
    /// Quantity of this allocation.
    pub allocated_usage_quantity: u32,
    /// Its tags (empty: the untagged bucket).
    pub tags: Vec<AllocationTag>,
}

/// One billed record: the first write for its (account, license, dimension, hour).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BilledRecord {
    /// The buyer's account.
    pub customer_aws_account_id: String,
    /// The buyer's license.
    pub license_arn: String,
    /// The product of the license's entitlement.
    pub product_code: String,
    /// The dimension.
    pub dimension: String,
    /// The UTC hour the record's timestamp falls in (the dedup bucket).
    pub hour: DateTime<Utc>,
    /// The record's timestamp.
    pub timestamp: DateTime<Utc>,
    /// The billed quantity.
    pub quantity: u32,
    /// The billed allocations (empty when none were sent).
    pub allocations: Vec<Allocation>,
    /// The id returned to the caller.
    pub metering_record_id: String,
    /// When it was billed (sim clock).
    pub billed_at: DateTime<Utc>,
}

/// A later record for an already billed (account, license, dimension, hour) that
/// differs from what was billed. It was answered `DuplicateRecord` and not billed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Conflict {
    /// The buyer's account.
    pub customer_aws_account_id: String,
    /// The buyer's license.
    pub license_arn: String,
    /// The dimension.
    pub dimension: String,
    /// The dedup hour.
    pub hour: DateTime<Utc>,
    /// The quantity that stays billed.
    pub billed_quantity: u32,
    /// The quantity of the refused record.
    pub attempted_quantity: u32,
    /// The allocations that stay billed.
    pub billed_allocations: Vec<Allocation>,
    /// The allocations of the refused record.
    pub attempted_allocations: Vec<Allocation>,
    /// The id of the billed record.
    pub original_metering_record_id: String,
    /// When the refused record arrived (sim clock).
    pub attempted_at: DateTime<Utc>,
}

/// A call refused with an exception (nothing of it was billed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RejectedRequest {
    /// When (sim clock).
    pub at: DateTime<Utc>,
    /// `BatchMeterUsage`, `ResolveCustomer`, or the unknown target as sent.
    pub operation: String,
    /// The exception name.
    pub error_type: String,
    /// The exception message.
    pub message: String,
    /// How many usage records the request carried (0 when unparsed or not metering).
    pub record_count: usize,
}

/// The read-only view of what was billed and refused.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct LedgerSnapshot {
    /// Billed records, in billing order.
    pub records: Vec<BilledRecord>,
    /// Refused conflicting duplicates, in arrival order.
    pub conflicts: Vec<Conflict>,
    /// Refused calls, in arrival order (the oldest are dropped past
    /// [`crate::engine::REJECTED_LOG_CAPACITY`]).
    pub rejected_requests: Vec<RejectedRequest>,
}

/// Counters since start or the last reset.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Stats {
    /// BatchMeterUsage calls received (including refused ones).
    pub batch_meter_usage_calls: u64,
    /// ResolveCustomer calls received (including refused ones).
    pub resolve_customer_calls: u64,
    /// Calls with a missing or unknown `X-Amz-Target`.
    pub unknown_operation_calls: u64,
    /// Calls refused by the quota (not counting injected throttling faults).
    pub throttled: u64,
    /// Refused calls by exception name (injected faults and the quota included).
    pub errors_by_type: BTreeMap<String, u64>,
    /// Processed records by status, plus `Unprocessed` for records left unprocessed.
    pub records_by_status: BTreeMap<String, u64>,
    /// Conflicting duplicates recorded in the ledger.
    pub conflicts: u64,
    /// Requests that sent a request-level `ProductCode` together with LicenseArn
    /// records (AWS would bill both ways: double billing).
    pub product_code_with_license_arn: u64,
    /// Calls processed in full whose answer an injected `lose_response` fault
    /// replaced by an HTTP 500 or a dropped connection.
    #[serde(default)]
    pub lost_responses: u64,
    /// Results an injected `omit_results`, `unknown_status` or `wrong_echo` fault left
    /// out of an answer or garbled (their records were processed as usual).
    #[serde(default)]
    pub garbled_results: u64,
}

/// What the simulator did with a lifecycle event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum LifecycleOutcome {
    /// `License Updated`: the entitlement is active.
    Entitled {
        /// The entitlement now in force.
        entitlement: Entitlement,
    },
    /// `License Deprovisioned`: the entitlement ends one hour (sim clock) after it
    /// was first applied.
    Deprovisioning {
        /// The entitlement now in force.
        entitlement: Entitlement,
    },
    /// An event that does not change entitlements (the agreement events).
    Ignored {
        /// Its `detail-type`.
        detail_type: String,
    },
}

//! Test support shared by this crate's unit tests and its moto test (both mount this
//! file with `#[path]`): AWS's example events in `tests/fixtures`, the license and
//! account they carry, the hours of 2026-11-30 the ordering cases happen at, the
//! ordering cases themselves, and the message ids a batch response fails.

use aws_lambda_events::sqs::SqsBatchResponse;
use awsmp_core::model::{AgreementStatus, SubscriptionStatus};
use serde_json::Value;

/// `detail.license.arn` of AWS's example, normalised (the example has no `arn:` prefix).
pub const LICENSE: &str =
    "arn:aws:license-manager:us-east-1:123456789012:l-e52ca6f38bf84d0fafb8802ca15ac11x";
pub const ACCOUNT: &str = "845735284135";

pub const UPDATED: &str = "license-updated-manufacturer.json";
pub const DEPROVISIONED: &str = "license-deprovisioned-manufacturer.json";
pub const ENDED_M: &str = "purchase-agreement-ended-manufacturer.json";
pub const ENDED_P: &str = "purchase-agreement-ended-proposer.json";
pub const AMENDED_M: &str = "purchase-agreement-amended-manufacturer.json";
pub const AMENDED_P: &str = "purchase-agreement-amended-proposer.json";
pub const CREATED_M: &str = "purchase-agreement-created-manufacturer.json";
pub const CREATED_P: &str = "purchase-agreement-created-proposer.json";

/// The hours of 2026-11-30 the ordering cases happen at.
pub const H10: &str = "2026-11-30T10:00:00Z";
pub const H11: &str = "2026-11-30T11:00:00Z";
pub const H12: &str = "2026-11-30T12:00:00Z";
pub const H13: &str = "2026-11-30T13:00:00Z";
/// Five seconds after noon: a Deprovisioned just after its agreement's end.
pub const H12_05: &str = "2026-11-30T12:00:05Z";

/// One ordering case: its name, the events (fixture, time) delivered one message each,
/// and the row's agreement and subscription status after them.
pub type Case = (
    &'static str,
    Vec<(&'static str, &'static str)>,
    Option<AgreementStatus>,
    Option<SubscriptionStatus>,
);

/// AWS's example event `name` from `tests/fixtures`.
pub fn fixture(name: &str) -> Value {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// AWS's example event `name` with its `time` set to `time`.
pub fn event_at(name: &str, time: &str) -> String {
    let mut event = fixture(name);
    event["time"] = Value::String(time.to_string());
    event.to_string()
}

/// The message ids `response` hands back to SQS, in order.
pub fn failed_ids(response: &SqsBatchResponse) -> Vec<&str> {
    response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.as_str())
        .collect()
}

/// Every ordering and duplicate case, as SQS delivers them (each event its own
/// message): the unit tests run them against the in-memory store, the moto test
/// against DynamoDB.
pub fn ordering_cases() -> Vec<Case> {
    use AgreementStatus as A;
    use SubscriptionStatus as S;
    vec![
        (
            "License Updated",
            vec![(UPDATED, H10)],
            Some(A::Active),
            Some(S::Active),
        ),
        (
            "License Updated, then Deprovisioned",
            vec![(UPDATED, H10), (DEPROVISIONED, H12)],
            Some(A::Active),
            Some(S::Deprovisioning),
        ),
        (
            "duplicate License Updated",
            vec![(UPDATED, H10), (UPDATED, H10)],
            Some(A::Active),
            Some(S::Active),
        ),
        (
            "Amended by both roles keeps the row current",
            vec![(UPDATED, H10), (AMENDED_M, H11), (AMENDED_P, H11)],
            Some(A::Active),
            Some(S::Active),
        ),
        (
            "Created by both roles is ignored",
            vec![(UPDATED, H10), (CREATED_M, H11), (CREATED_P, H11)],
            Some(A::Active),
            Some(S::Active),
        ),
        (
            "stale License Updated after Deprovisioned never reactivates",
            vec![(UPDATED, H10), (DEPROVISIONED, H12), (UPDATED, H11)],
            Some(A::Active),
            Some(S::Deprovisioning),
        ),
        (
            "newer License Updated after Deprovisioned is refused",
            vec![(UPDATED, H10), (DEPROVISIONED, H12), (UPDATED, H13)],
            Some(A::Active),
            Some(S::Deprovisioning),
        ),
        (
            "Deprovisioned before License Updated",
            vec![(DEPROVISIONED, H12), (UPDATED, H10)],
            None,
            Some(S::Deprovisioning),
        ),
        (
            "Ended by both roles, the Manufacturer's copy first",
            vec![(UPDATED, H10), (ENDED_M, H12), (ENDED_P, H12)],
            Some(A::Inactive),
            Some(S::Active),
        ),
        (
            "Ended by both roles, the Proposer's copy first",
            vec![(UPDATED, H10), (ENDED_P, H12), (ENDED_M, H12)],
            Some(A::Inactive),
            Some(S::Active),
        ),
        (
            "Ended, then Deprovisioned (the documented real order)",
            vec![(UPDATED, H10), (ENDED_P, H12), (DEPROVISIONED, H12_05)],
            Some(A::Inactive),
            Some(S::Deprovisioning),
        ),
        (
            "stale Ended before the License Updated is a no-op",
            vec![(UPDATED, H10), (ENDED_M, "2026-11-30T09:00:00Z")],
            Some(A::Active),
            Some(S::Active),
        ),
        (
            "newer Amended after Ended never reactivates",
            vec![(UPDATED, H10), (ENDED_M, H12), (AMENDED_M, H13)],
            Some(A::Inactive),
            Some(S::Active),
        ),
        (
            "a stale License Updated delivered after Ended leaves the agreement ended",
            vec![(UPDATED, H10), (ENDED_M, H12), (UPDATED, H11)],
            Some(A::Inactive),
            Some(S::Active),
        ),
    ]
}

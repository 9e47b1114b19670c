//! Buyer PII with a lifecycle (`awsmp profile`): one buyer's row of a Region's
//! customer-profile table shown, or erased with an audit record that names the buyer by
//! the row's keys (identifiers, not PII) and carries none of its data. Point-in-time
//! recovery keeps an erased row restorable for [`PITR_RECOVERY_DAYS`]: the erasure is
//! complete only then. Through [`PiiTable`], which cannot list the table.

use std::collections::BTreeMap;

use chrono::Duration;
use serde::Serialize;

use awsmp_core::model::{Attr, PROFILE_FIXED_ATTRS, attr};
use awsmp_core::time::Instant;

use crate::ports::{PiiTable, ProfileError, ProfileKey};

/// Days point-in-time recovery can restore a table to (DynamoDB's recovery period, 35
/// unless the table sets `RecoveryPeriodInDays`; the stack sets none): an erased row
/// can be brought back from a restore until then.
pub const PITR_RECOVERY_DAYS: i64 = 35;

/// The audit record's event: a profile was erased.
pub const PROFILE_ERASED: &str = "ProfileErased";

/// Where a profile is looked for: a Region and its customer-profile table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfilePlace {
    /// The Region.
    pub region: String,
    /// The table (`awsmp-<productCode>-customer-profile`).
    pub table: String,
}

/// One buyer's row as shown: the attributes the register function writes, and every
/// other attribute (the registration form's fields) as text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct ProfileView {
    /// `productCode`.
    pub product_code: Option<String>,
    /// `createdAt`: the first registration.
    pub created_at: Option<String>,
    /// `updatedAt`: the last registration.
    pub updated_at: Option<String>,
    /// `expiresAt`, the table's TTL attribute (`ProfileRetentionDays`), as an ISO-8601
    /// time: DynamoDB deletes the row after it (usually within a few days). A value
    /// that is not epoch seconds is shown as stored.
    pub expires_at: Option<String>,
    /// Every other attribute by name: the registration form's fields (a value that is
    /// not a string is shown as text).
    pub fields: BTreeMap<String, String>,
}

impl ProfileView {
    /// The view of a stored row (its keys left out: the caller named them).
    pub fn of_row(row: &BTreeMap<String, Attr>) -> Self {
        let text = |name: &str| row.get(name).map(attr_text);
        ProfileView {
            product_code: text(attr::PRODUCT_CODE),
            created_at: text(attr::CREATED_AT),
            updated_at: text(attr::UPDATED_AT),
            expires_at: row.get(attr::EXPIRES_AT).map(|value| match value {
                Attr::N(seconds) => seconds
                    .parse::<i64>()
                    .ok()
                    .and_then(|s| chrono::DateTime::from_timestamp(s, 0))
                    .map_or_else(|| seconds.clone(), awsmp_core::time::format_instant),
                other => attr_text(other),
            }),
            fields: row
                .iter()
                .filter(|(name, _)| !PROFILE_FIXED_ATTRS.contains(&name.as_str()))
                .map(|(name, value)| (name.clone(), attr_text(value)))
                .collect(),
        }
    }
}

/// A stored value as text: a string as it is, a number as its digits, a list, set or
/// map with its members; a type the domain only names (binary, number set) by its type.
pub fn attr_text(value: &Attr) -> String {
    match value {
        Attr::S(text) | Attr::N(text) => text.clone(),
        Attr::Bool(b) => b.to_string(),
        Attr::Null => "null".into(),
        Attr::Ss(items) => format!("[{}]", items.join(", ")),
        Attr::L(items) => format!(
            "[{}]",
            items.iter().map(attr_text).collect::<Vec<_>>().join(", ")
        ),
        Attr::M(map) => format!(
            "{{{}}}",
            map.iter()
                .map(|(k, v)| format!("{k}: {}", attr_text(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Attr::Other(kind) => format!("(a {kind} value)"),
    }
}

/// One Region's answer to `awsmp profile show`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct RegionProfile {
    /// The Region.
    pub region: String,
    /// Its customer-profile table.
    pub table: String,
    /// Whether the table holds a row for the buyer.
    pub found: bool,
    /// The row, when found.
    pub profile: Option<ProfileView>,
}

/// Reads the buyer's row in one Region (one `GetItem`).
pub async fn show(
    table: &dyn PiiTable,
    key: &ProfileKey,
    place: &ProfilePlace,
) -> Result<RegionProfile, ProfileError> {
    let row = table.get(key).await?;
    Ok(RegionProfile {
        region: place.region.clone(),
        table: place.table.clone(),
        found: row.is_some(),
        profile: row.as_ref().map(ProfileView::of_row),
    })
}

/// What `awsmp profile erase` did in one Region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErasureResult {
    /// The row was deleted.
    Erased,
    /// Dry run: the row exists and would be deleted.
    WouldErase,
    /// There was no row: nothing was (or would be) deleted.
    Absent,
}

/// The audit record of one erasure: who was erased (by the row's keys), where, when and
/// by whom when known; never the data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct ErasureAudit {
    /// Always `ProfileErased`.
    pub event: String,
    /// The buyer's license.
    pub license_arn: String,
    /// The buyer's AWS account.
    pub customer_aws_account_id: String,
    /// The Region of the table.
    pub region: String,
    /// The table the row was deleted from.
    pub table: String,
    /// When it was deleted (the operator's clock).
    #[serde(serialize_with = "crate::serialize_instant")]
    pub erased_at: Instant,
    /// Until when point-in-time recovery can still restore the row (35 days, its
    /// recovery period, after `erased_at`): the erasure is complete then.
    #[serde(serialize_with = "crate::serialize_instant")]
    pub recoverable_until: Instant,
    /// The named AWS profile the credentials came from (`--profile`, `AWS_PROFILE`), if
    /// any: the only caller identity `awsmp` knows without asking STS.
    pub aws_profile: Option<String>,
}

impl ErasureAudit {
    /// The record as one line of JSON (for stderr and log collectors).
    pub fn line(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"event\":\"{PROFILE_ERASED}\",\"error\":\"cannot serialize the audit record: {e}\"}}"))
    }
}

/// One Region's answer to `awsmp profile erase`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct RegionErasure {
    /// The Region.
    pub region: String,
    /// Its customer-profile table.
    pub table: String,
    /// What was done.
    pub result: ErasureResult,
    /// The audit record, when a row was erased.
    pub audit: Option<ErasureAudit>,
}

/// Erases the buyer's row in one Region: a `DeleteItem` that applies only while the
/// row exists; with `dry_run`, a `GetItem` that says whether it would. `aws_profile` is
/// recorded in the audit record.
pub async fn erase(
    table: &dyn PiiTable,
    key: &ProfileKey,
    place: &ProfilePlace,
    now: Instant,
    aws_profile: Option<&str>,
    dry_run: bool,
) -> Result<RegionErasure, ProfileError> {
    let answer = |result, audit| RegionErasure {
        region: place.region.clone(),
        table: place.table.clone(),
        result,
        audit,
    };
    if dry_run {
        let result = match table.get(key).await? {
            Some(_) => ErasureResult::WouldErase,
            None => ErasureResult::Absent,
        };
        return Ok(answer(result, None));
    }
    if !table.delete_existing(key).await? {
        return Ok(answer(ErasureResult::Absent, None));
    }
    let audit = ErasureAudit {
        event: PROFILE_ERASED.into(),
        license_arn: key.license_arn.clone(),
        customer_aws_account_id: key.customer_aws_account_id.clone(),
        region: place.region.clone(),
        table: place.table.clone(),
        erased_at: now,
        recoverable_until: now + Duration::days(PITR_RECOVERY_DAYS),
        aws_profile: aws_profile.map(str::to_string),
    };
    Ok(answer(ErasureResult::Erased, Some(audit)))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::memory::MemoryProfiles;
    use crate::reconcile::at;

    fn key() -> ProfileKey {
        ProfileKey {
            license_arn: "arn:aws:license-manager::123456789012:license:l-1".into(),
            customer_aws_account_id: "111122223333".into(),
        }
    }

    fn place() -> ProfilePlace {
        ProfilePlace {
            region: "eu-west-1".into(),
            table: "awsmp-p-customer-profile".into(),
        }
    }

    fn registered() -> MemoryProfiles {
        let table = MemoryProfiles::new();
        table.insert(
            &key(),
            &[
                ("productCode", "p"),
                ("createdAt", "2026-03-01T10:00:00Z"),
                ("updatedAt", "2026-03-02T10:00:00Z"),
                ("companyName", "Example Corp"),
                ("contactEmail", "ops@example.com"),
            ],
        );
        table
    }

    #[tokio::test]
    async fn show_reads_one_row_by_its_keys() {
        let table = registered();
        let shown = show(&table, &key(), &place()).await.unwrap();
        assert!(shown.found);
        let profile = shown.profile.unwrap();
        assert_eq!(profile.product_code.as_deref(), Some("p"));
        assert_eq!(profile.updated_at.as_deref(), Some("2026-03-02T10:00:00Z"));
        assert_eq!(
            profile.fields.into_iter().collect::<Vec<_>>(),
            [
                ("companyName".to_string(), "Example Corp".to_string()),
                ("contactEmail".to_string(), "ops@example.com".to_string()),
            ],
            "the form's fields, without the keys and stamps"
        );
        let other = ProfileKey {
            customer_aws_account_id: "444455556666".into(),
            ..key()
        };
        let absent = show(&table, &other, &place()).await.unwrap();
        assert!(!absent.found);
        assert_eq!(absent.profile, None);
        assert_eq!(table.calls(), ["get", "get"]);
    }

    #[tokio::test]
    async fn erase_deletes_the_row_and_audits_it_without_its_data() {
        let table = registered();
        let now = at("2026-03-20T08:00:00Z");
        let erased = erase(&table, &key(), &place(), now, Some("pii"), false)
            .await
            .unwrap();
        assert_eq!(erased.result, ErasureResult::Erased);
        assert!(!table.contains(&key()));
        let audit = erased.audit.unwrap();
        assert_eq!(audit.recoverable_until, at("2026-04-24T08:00:00Z"));
        let line = audit.line();
        let doc: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(doc["event"], "ProfileErased");
        assert_eq!(doc["license_arn"], key().license_arn);
        assert_eq!(doc["customer_aws_account_id"], "111122223333");
        assert_eq!(doc["region"], "eu-west-1");
        assert_eq!(doc["erased_at"], "2026-03-20T08:00:00Z");
        assert_eq!(doc["aws_profile"], "pii");
        for data in ["Example Corp", "ops@example.com", "companyName"] {
            assert!(!line.contains(data), "{line}");
        }

        // Again: nothing to erase, and no audit record.
        let again = erase(&table, &key(), &place(), now, None, false)
            .await
            .unwrap();
        assert_eq!(again.result, ErasureResult::Absent);
        assert_eq!(again.audit, None);
        assert_eq!(table.calls(), ["delete_existing", "delete_existing"]);
    }

    #[tokio::test]
    async fn a_dry_run_reads_and_deletes_nothing() {
        let table = registered();
        let now = at("2026-03-20T08:00:00Z");
        let dry = erase(&table, &key(), &place(), now, None, true)
            .await
            .unwrap();
        assert_eq!(dry.result, ErasureResult::WouldErase);
        assert_eq!(dry.audit, None);
        assert!(table.contains(&key()));
        assert_eq!(table.calls(), ["get"]);
    }

    #[tokio::test]
    async fn a_refusal_is_passed_on_with_the_advice() {
        let table = registered();
        table.refuse(Some(ProfileError::Denied {
            operation: "DeleteItem".into(),
            table: "awsmp-p-customer-profile".into(),
            message: "AccessDeniedException: explicit deny".into(),
        }));
        let error = erase(
            &table,
            &key(),
            &place(),
            at("2026-03-20T08:00:00Z"),
            None,
            false,
        )
        .await
        .unwrap_err();
        let text = error.to_string();
        assert!(text.contains("ProfileAccessRoleArn"), "{text}");
        assert!(text.contains("register function's role"), "{text}");
        assert!(table.contains(&key()));
    }

    #[test]
    fn values_that_are_not_strings_are_shown_as_text() {
        let map = Attr::M(
            [
                ("a".to_string(), Attr::N("1".into())),
                ("b".to_string(), Attr::Bool(true)),
            ]
            .into(),
        );
        assert_eq!(attr_text(&map), "{a: 1, b: true}");
        assert_eq!(
            attr_text(&Attr::L(vec![Attr::Null, Attr::Ss(vec!["x".into()])])),
            "[null, [x]]"
        );
        assert_eq!(attr_text(&Attr::Other("B".into())), "(a B value)");
    }

    #[test]
    fn the_ttl_is_shown_as_a_time_and_not_among_the_fields() {
        let row = |expires: Attr| -> BTreeMap<String, Attr> {
            [
                ("companyName".to_string(), Attr::S("Example Corp".into())),
                (attr::EXPIRES_AT.to_string(), expires),
            ]
            .into()
        };
        let view = ProfileView::of_row(&row(Attr::N("1798628400".into())));
        assert_eq!(view.expires_at.as_deref(), Some("2026-12-30T11:00:00Z"));
        assert_eq!(view.fields.keys().collect::<Vec<_>>(), ["companyName"]);
        // Not epoch seconds: shown as stored.
        let odd = ProfileView::of_row(&row(Attr::S("soon".into())));
        assert_eq!(odd.expires_at.as_deref(), Some("soon"));
        assert_eq!(ProfileView::of_row(&BTreeMap::new()).expires_at, None);
    }
}

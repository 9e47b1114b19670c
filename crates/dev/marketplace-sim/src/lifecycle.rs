//! Reads the EventBridge lifecycle events (source `aws.agreement-marketplace`) the
//! events stack consumes, so the simulator's entitlements follow the same events:
//! `License Updated` entitles, `License Deprovisioned` starts the final hour, the
//! agreement events change nothing here.

use serde::Deserialize;

use crate::error::AdminError;

/// The EventBridge source of Marketplace agreement and license events.
pub const EVENT_SOURCE: &str = "aws.agreement-marketplace";

/// What an event asks of the simulator's entitlements.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LifecycleChange {
    /// Entitle (license, account) to the product.
    LicenseUpdated {
        /// `detail.license.arn`, as sent (it may lack the `arn:` prefix, as in the docs).
        license_arn: String,
        /// `detail.acceptor.accountId`.
        customer_aws_account_id: String,
        /// `detail.product.code`.
        product_code: String,
    },
    /// Start the final metering hour of (license, account).
    LicenseDeprovisioned {
        /// `detail.license.arn`.
        license_arn: String,
        /// `detail.acceptor.accountId`.
        customer_aws_account_id: String,
        /// `detail.product.code`, when present.
        product_code: Option<String>,
    },
    /// Any other event of the source (agreement created/amended/ended).
    Ignored {
        /// Its `detail-type`.
        detail_type: String,
    },
}

#[derive(Debug, Deserialize)]
struct Envelope {
    #[serde(rename = "detail-type")]
    detail_type: String,
    #[serde(default)]
    source: Option<String>,
    #[serde(default)]
    detail: Detail,
}

#[derive(Debug, Default, Deserialize)]
struct Detail {
    #[serde(default)]
    product: Option<Product>,
    #[serde(default)]
    license: Option<License>,
    #[serde(default)]
    acceptor: Option<Acceptor>,
}

#[derive(Debug, Deserialize)]
struct Product {
    #[serde(default)]
    code: Option<String>,
}

#[derive(Debug, Deserialize)]
struct License {
    #[serde(default)]
    arn: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Acceptor {
    #[serde(rename = "accountId", default)]
    account_id: Option<String>,
}

fn required(value: Option<String>, path: &str, detail_type: &str) -> Result<String, AdminError> {
    value
        .filter(|v| !v.is_empty())
        .ok_or_else(|| AdminError::Invalid(format!("{detail_type} event has no {path}")))
}

/// Reads one EventBridge event. Refuses events of another source, and license
/// events without license ARN, acceptor account (or, for License Updated, product code).
pub fn parse_event(event: &serde_json::Value) -> Result<LifecycleChange, AdminError> {
    let envelope = Envelope::deserialize(event)
        .map_err(|e| AdminError::Invalid(format!("not an EventBridge event: {e}")))?;
    if let Some(source) = envelope.source.as_deref().filter(|s| *s != EVENT_SOURCE) {
        return Err(AdminError::Invalid(format!(
            "event source {source:?} is not {EVENT_SOURCE:?}"
        )));
    }
    let detail_type = envelope.detail_type;
    let detail = envelope.detail;
    let license_arn = detail.license.and_then(|l| l.arn);
    let account = detail.acceptor.and_then(|a| a.account_id);
    let product_code = detail.product.and_then(|p| p.code);
    if detail_type.starts_with("License Updated - ") {
        Ok(LifecycleChange::LicenseUpdated {
            license_arn: required(license_arn, "detail.license.arn", &detail_type)?,
            customer_aws_account_id: required(account, "detail.acceptor.accountId", &detail_type)?,
            product_code: required(product_code, "detail.product.code", &detail_type)?,
        })
    } else if detail_type.starts_with("License Deprovisioned - ") {
        Ok(LifecycleChange::LicenseDeprovisioned {
            license_arn: required(license_arn, "detail.license.arn", &detail_type)?,
            customer_aws_account_id: required(account, "detail.acceptor.accountId", &detail_type)?,
            product_code: product_code.filter(|p| !p.is_empty()),
        })
    } else {
        Ok(LifecycleChange::Ignored { detail_type })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// AWS's documented `License Updated - Manufacturer` example (the fixture the
    /// subscription crate's tests read too), as `detail_type`.
    fn license_event(detail_type: &str) -> serde_json::Value {
        let mut event: serde_json::Value = serde_json::from_str(include_str!(
            "../../../functions/subscription/tests/fixtures/license-updated-manufacturer.json"
        ))
        .expect("the fixture is JSON");
        event["detail-type"] = serde_json::json!(detail_type);
        event
    }

    #[test]
    fn license_updated_from_the_documented_example() {
        let change = parse_event(&license_event("License Updated - Manufacturer")).expect("parses");
        assert_eq!(
            change,
            LifecycleChange::LicenseUpdated {
                license_arn:
                    "aws:license-manager:us-east-1:123456789012:l-e52ca6f38bf84d0fafb8802ca15ac11x"
                        .to_owned(),
                customer_aws_account_id: "845735284135".to_owned(),
                product_code: "aw4fgf5tyo5w2ap6fEXAMPLE".to_owned(),
            }
        );
    }

    #[test]
    fn license_deprovisioned_and_agreement_events() {
        let change =
            parse_event(&license_event("License Deprovisioned - Manufacturer")).expect("parses");
        assert!(matches!(
            change,
            LifecycleChange::LicenseDeprovisioned { .. }
        ));
        let ended =
            parse_event(&license_event("Purchase Agreement Ended - Proposer")).expect("parses");
        assert_eq!(
            ended,
            LifecycleChange::Ignored {
                detail_type: "Purchase Agreement Ended - Proposer".to_owned()
            }
        );
    }

    #[test]
    fn refusals_name_the_missing_field_or_wrong_source() {
        let mut no_license = license_event("License Updated - Manufacturer");
        no_license["detail"]
            .as_object_mut()
            .expect("object")
            .remove("license");
        let err = parse_event(&no_license).expect_err("no license");
        assert!(err.to_string().contains("detail.license.arn"), "{err}");

        let mut other_source = license_event("License Updated - Manufacturer");
        other_source["source"] = serde_json::json!("aws.ec2");
        assert!(parse_event(&other_source).is_err());

        assert!(parse_event(&serde_json::json!({"detail": {}})).is_err());
    }
}

//! The simulator's start-up configuration: port, quota, latency, clock and the
//! state seeded at start (and restored by a reset). Loadable from a JSON file.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::agreement::model::AgreementSeed;
use crate::clock::ClockSetting;
use crate::error::SimError;
use crate::model::{EntitlementSeed, ProductSeed, TokenSeed};
use crate::throttle::ThrottleConfig;

/// What a second record for an already billed (account, license, dimension, hour)
/// with the SAME quantity and allocations is answered. Either way nothing more is
/// billed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum IdenticalRetryStatus {
    /// `DuplicateRecord` (the default, and what our pipeline must handle).
    #[default]
    DuplicateRecord,
    /// `Success` with the original `MeteringRecordId` (the idempotent reading of
    /// the AWS docs: "Identical requests are idempotent").
    Success,
}

/// Everything the simulator starts from. Every field has a default, so `{}` is a
/// valid configuration file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SimConfig {
    /// Port on 127.0.0.1; 0 lets the OS choose.
    pub port: u16,
    /// The BatchMeterUsage quota (10/s, burst 10, on by default).
    pub throttle: ThrottleConfig,
    /// Real-time delay added before every answer on the wire.
    pub latency_ms: u64,
    /// The starting clock.
    pub clock: ClockSetting,
    /// How an identical retry is answered.
    pub identical_retry_status: IdenticalRetryStatus,
    /// Products and their dimensions.
    pub products: Vec<ProductSeed>,
    /// Active entitlements.
    pub entitlements: Vec<EntitlementSeed>,
    /// Registration tokens.
    pub tokens: Vec<TokenSeed>,
    /// Agreements (the Agreement API), seeded after the entitlements and tokens.
    pub agreements: Vec<AgreementSeed>,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            port: 0,
            throttle: ThrottleConfig::default(),
            latency_ms: 0,
            clock: ClockSetting::Real,
            identical_retry_status: IdenticalRetryStatus::default(),
            products: Vec::new(),
            entitlements: Vec::new(),
            tokens: Vec::new(),
            agreements: Vec::new(),
        }
    }
}

impl SimConfig {
    /// Reads a configuration from a JSON file.
    pub fn from_json_file(path: &Path) -> Result<Self, SimError> {
        let text = std::fs::read_to_string(path).map_err(|source| SimError::ConfigRead {
            path: path.display().to_string(),
            source,
        })?;
        serde_json::from_str(&text).map_err(|source| SimError::ConfigParse {
            path: path.display().to_string(),
            source,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn empty_object_is_the_default_configuration() {
        let config: SimConfig = serde_json::from_str("{}").expect("parses");
        assert_eq!(config, SimConfig::default());
        assert!(config.throttle.enabled);
        assert_eq!(config.throttle.burst, 10);
    }

    #[test]
    fn unknown_fields_are_refused_by_name() {
        let err = serde_json::from_str::<SimConfig>(r#"{"throtle":{}}"#)
            .expect_err("typo must not be ignored");
        assert!(err.to_string().contains("throtle"), "{err}");
    }

    #[test]
    fn full_configuration_parses() {
        let json = r#"{
            "port": 18080,
            "throttle": {"enabled": false},
            "latency_ms": 25,
            "clock": {"mode": "fixed", "at": "2026-03-15T12:00:00Z"},
            "identical_retry_status": "success",
            "products": [{"product_code": "prod1", "dimensions": ["requests"]}],
            "entitlements": [{"license_arn": "arn:aws:license-manager::1:license:l-1",
                              "customer_aws_account_id": "111122223333",
                              "product_code": "prod1"}],
            "tokens": [{"token": "t", "license_arn": "arn:aws:license-manager::1:license:l-1",
                        "customer_aws_account_id": "111122223333", "product_code": "prod1"}]
        }"#;
        let config: SimConfig = serde_json::from_str(json).expect("parses");
        assert_eq!(config.port, 18080);
        assert!(!config.throttle.enabled);
        assert_eq!(config.throttle.rate_per_second, 10.0);
        assert_eq!(config.identical_retry_status, IdenticalRetryStatus::Success);
        assert_eq!(config.tokens[0].issued_at, None);
    }
}

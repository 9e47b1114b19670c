//! The SDK behaviour every client of ours is pinned to, and one config moved to another
//! Region. A Lambda loads its config with `awsmp_lambda::sdk::load_sdk_config`; the
//! local stack and the tests build theirs ([`crate::LocalEndpoints::sdk_config`]).

use aws_config::{BehaviorVersion, Region, SdkConfig};

/// The SDK behaviour every client of ours runs with, pinned so that an SDK upgrade
/// cannot change retries or timeouts unseen (`latest()` moves with the SDK); raise it
/// deliberately, reading the new version's notes.
pub fn behavior_version() -> BehaviorVersion {
    BehaviorVersion::v2026_01_12()
}

/// `sdk` for another Region (the subscribers table lives in us-east-1;
/// `ResolveCustomer` may be called in its own Region): the same credentials, endpoints
/// and behaviour, only the Region changed. Endpoints set through the SDK's own
/// variables (`AWS_ENDPOINT_URL`, `AWS_ENDPOINT_URL_DYNAMODB`, ...) carry over.
pub fn in_region(sdk: &SdkConfig, region: &str) -> SdkConfig {
    sdk.to_builder()
        .region(Region::new(region.to_string()))
        .build()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn another_region_keeps_everything_else() {
        let endpoints = crate::LocalEndpoints {
            aws: "http://127.0.0.1:1".into(),
            metering: "http://127.0.0.1:2".into(),
        };
        let sdk = endpoints.sdk_config("eu-west-1");
        let there = in_region(&sdk, "us-east-1");
        assert_eq!(there.region().map(|r| r.as_ref()), Some("us-east-1"));
        assert_eq!(sdk.region().map(|r| r.as_ref()), Some("eu-west-1"));
        assert!(there.credentials_provider().is_some());
        assert_eq!(there.behavior_version(), sdk.behavior_version());
        // The per-service endpoints (the emulator's, the simulator's) come along.
        assert!(there.service_config().is_some());
    }
}

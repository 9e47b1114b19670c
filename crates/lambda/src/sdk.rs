//! The SDK config every Lambda's `main.rs` loads once ([`load_sdk_config`]) and hands
//! to its `State::connect`; the local stack and the tests hand in their own, pointed at
//! the emulator and the simulator (`awsmp_aws::LocalEndpoints::sdk_config`).

use aws_config::{ConfigLoader, SdkConfig};
use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode};
use aws_types::sdk_config::SharedHttpClient;
use awsmp_aws::behavior_version;

/// What a Lambda runs with: `aws_config`'s default chains (Region, credentials and
/// endpoints from the function's environment, `AWS_ENDPOINT_URL*` included) and
/// [`behavior_version`], with [`https_client`] as the HTTP client of every SDK client
/// and of the credential providers.
pub async fn load_sdk_config() -> SdkConfig {
    sdk_config_loader().load().await
}

fn sdk_config_loader() -> ConfigLoader {
    aws_config::defaults(behavior_version()).http_client(https_client())
}

/// The Lambdas' HTTP client: the SDK's default one (hyper 1, rustls 0.23, the system's
/// trust roots, TLS 1.2 and 1.3, HTTP/1.1 and HTTP/2, the operation's connect and read
/// timeouts) with rustls on ring's crypto instead of aws-lc's. The SDK's
/// `default-https-client` hard-codes aws-lc, C code that made up the largest part of
/// each bootstrap, so the root build does without that feature and every Lambda's
/// config carries this client explicitly (an SDK client with no HTTP client fails at
/// its first call). What ring lacks: post-quantum key exchange (rustls on aws-lc
/// prefers X25519MLKEM768; on ring it offers X25519, P-256 and P-384) and a FIPS mode.
/// Unlike the default client it reads no `HTTP(S)_PROXY`/`NO_PROXY` variables: a
/// Lambda's environment sets none (docs/performance.md, "Lambda artifacts").
pub fn https_client() -> SharedHttpClient {
    aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(CryptoMode::Ring))
        .build_https()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use aws_config::Region;

    use super::*;

    #[tokio::test]
    async fn the_lambdas_config_carries_its_own_http_client() {
        // Without it (no `default-https-client` in a root build) the first call of
        // every SDK client would fail with "no HTTP client". The Region is given so
        // that the loader does not go looking for one (IMDS); tests/lambda_sdk_config.rs
        // calls `load_sdk_config` itself, in a Lambda's environment.
        let sdk = sdk_config_loader()
            .region(Region::from_static("us-east-1"))
            .load()
            .await;
        assert!(sdk.http_client().is_some());
        assert_eq!(sdk.behavior_version(), Some(behavior_version()));
    }
}

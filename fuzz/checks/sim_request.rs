//! Target `sim_request`: a JSON 1.1 call to the Marketplace simulator's engine
//! ([`Engine::call`], what its HTTP layer hands every request to): the `X-Amz-Target`
//! and the body come from the input, and the same call is made up to three times, the
//! sim clock moving between calls, to reach the dedup and conflict rules. The engine
//! knows one product, one entitlement and one token, with the quota off.
//!
//! Input layout: one flag byte (bits 0..=1: the target, one choice reading it from the
//! first input line; bits 2..=3: extra repeats; bits 4..=7: ten-minute steps of the
//! clock between calls), then the body.
//!
//! Properties: nothing panics; each call answers a JSON object or an exception with a
//! 4xx status (no fault is injected, so never a 5xx), and never drops the connection.

use std::sync::OnceLock;
use std::time::Instant as RealInstant;

use awsmp_marketplace_sim::engine::{Engine, RequestBody};
use awsmp_marketplace_sim::validate::Patterns;
use awsmp_marketplace_sim::{
    ClockSetting, EntitlementSeed, ProductSeed, SimConfig, ThrottleConfig, TokenSeed,
};

use super::input::Reader;
use super::{ACCOUNT, LICENSE, PRODUCT};

/// The token the simulator resolves.
pub const SIM_TOKEN: &str = "tok-sim";

fn config() -> SimConfig {
    SimConfig {
        throttle: ThrottleConfig {
            enabled: false,
            ..ThrottleConfig::default()
        },
        clock: ClockSetting::Fixed { at: super::now() },
        products: vec![ProductSeed {
            product_code: PRODUCT.into(),
            dimensions: vec!["requests".into(), "storage".into()],
        }],
        entitlements: vec![EntitlementSeed {
            license_arn: LICENSE.into(),
            customer_aws_account_id: ACCOUNT.into(),
            product_code: PRODUCT.into(),
        }],
        tokens: vec![TokenSeed {
            token: SIM_TOKEN.into(),
            license_arn: LICENSE.into(),
            customer_aws_account_id: ACCOUNT.into(),
            product_code: PRODUCT.into(),
            issued_at: None,
        }],
        ..SimConfig::default()
    }
}

fn patterns() -> Patterns {
    static PATTERNS: OnceLock<Patterns> = OnceLock::new();
    PATTERNS
        .get_or_init(|| Patterns::compile().expect("the model's patterns compile"))
        .clone()
}

/// Checks one call (and its repeats).
pub fn check(data: &[u8]) {
    let mut reader = Reader::new(data);
    let flags = reader.byte();
    let target = match flags & 0b11 {
        0 => Some("AWSMPMeteringService.BatchMeterUsage".to_string()),
        1 => Some("AWSMPMeteringService.ResolveCustomer".to_string()),
        2 => None,
        _ => Some(reader.line()),
    };
    let calls = 1 + ((flags >> 2) & 0b11);
    let step = i64::from(flags >> 4) * 600;
    let body = reader.rest();

    let real_now = RealInstant::now();
    let mut engine =
        Engine::new(config(), patterns(), real_now).expect("the fixed simulator config is valid");
    for _ in 0..calls.min(3) {
        let outcome = engine.call(target.as_deref(), RequestBody::Complete(body), real_now);
        assert!(!outcome.drop_connection, "{outcome:?}");
        match &outcome.result {
            Ok(answer) => assert!(answer.is_object(), "{answer}"),
            Err(e) => assert!(e.kind.http_status().is_client_error(), "{e:?}"),
        }
        engine.advance_clock(step);
    }
}

//! The Agreement API contract (`awsmp_core::memory::agreement_contract`) against
//! `SdkAgreementApi` on the Marketplace simulator over HTTP (RPC v2 CBOR): the same
//! cases the in-memory API passes. The client comes from the local stack's config
//! (`LocalEndpoints`), so this also checks that it sends the Agreement API to the
//! simulator, in us-east-1. Usage is billed into the simulator's ledger through a real
//! `BatchMeterUsage` call (the metering SDK client), so its invoices are built as it
//! builds them for any seller.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use async_trait::async_trait;
use aws_sdk_marketplaceagreement::config::retry::RetryConfig;
use aws_sdk_marketplacemetering::primitives::DateTime as MeteringTime;
use aws_sdk_marketplacemetering::types::{UsageRecord, UsageRecordResultStatus};
use awsmp_aws::{LocalEndpoints, SdkAgreementApi, agreement_client};
use awsmp_core::memory::agreement_contract::{
    AgreementBackend, PAGE_SIZE, SELLER, SeedAgreement, now,
};
use awsmp_core::ports::{AgreementApi, AgreementStatus};
use awsmp_core::time::Instant;
use awsmp_local_aws::SimServer;
use awsmp_local_aws::marketplace_sim::{
    self as sim, ClockSetting, EntitlementSeed, FixedUpfrontSeed, FreeTrialSeed, GrantSeed,
    ProductSeed, RateSeed, SimConfig, ThrottleConfig,
};
use chrono::TimeDelta;

/// The product every seeded agreement is of.
const PRODUCT_CODE: &str = "prodcode123";

/// The simulator (quota off, clock fixed at the contract's `NOW`) and the adapter on it.
struct SimBackend {
    sim: SimServer,
    api: SdkAgreementApi,
    metering: aws_sdk_marketplacemetering::Client,
}

async fn simulator() -> SimBackend {
    let sim = SimServer::start(SimConfig {
        throttle: ThrottleConfig {
            enabled: false,
            ..ThrottleConfig::default()
        },
        clock: ClockSetting::Fixed { at: now() },
        // The dimensions the contract bills: two priced by its rate cards, one not.
        products: vec![ProductSeed {
            product_code: PRODUCT_CODE.into(),
            dimensions: vec!["requests".into(), "storage_gb".into(), "unpriced".into()],
        }],
        ..SimConfig::default()
    })
    .await
    .unwrap();
    let endpoints = LocalEndpoints {
        // Nothing listens there: only the Agreement API is called.
        aws: "http://127.0.0.1:1".into(),
        metering: sim.endpoint(),
    };
    // Another Region on purpose: the client moves itself to us-east-1.
    let client = agreement_client(&endpoints.sdk_config("eu-west-1"));
    assert_eq!(
        client.config().region().map(|r| r.as_ref()),
        Some("us-east-1")
    );
    // One attempt per call, so the throttling case sees the simulator's answer.
    let client = aws_sdk_marketplaceagreement::Client::from_conf(
        client
            .config()
            .to_builder()
            .retry_config(RetryConfig::standard().with_max_attempts(1))
            .build(),
    );
    SimBackend {
        api: SdkAgreementApi::new(client).with_page_size(PAGE_SIZE),
        metering: sim.metering_client(),
        sim,
    }
}

fn sim_status(status: &AgreementStatus) -> sim::AgreementStatus {
    serde_json::from_value(serde_json::Value::String(status.as_str().to_string())).unwrap()
}

#[async_trait]
impl AgreementBackend for SimBackend {
    fn api(&self) -> &dyn AgreementApi {
        &self.api
    }

    async fn seed(&self, a: &SeedAgreement) {
        self.sim
            .handle()
            .seed_agreement(sim::AgreementSeed {
                agreement_id: a.agreement_id.clone(),
                license_arn: a.license_arn.clone(),
                product_code: PRODUCT_CODE.into(),
                product_id: Some(a.product_id.clone()),
                customer_aws_account_id: a.account.clone(),
                proposer_account_id: SELLER.into(),
                offer_id: a.offer_id.clone(),
                offer_set_id: None,
                resale_authorization_id: None,
                seller_of_record: true,
                start_time: Some(a.start),
                end_time: a.end,
                acceptance_time: None,
                status: sim::AgreementStatus::Active,
                currency_code: a.currency.clone(),
                rate_card: a
                    .rate_card
                    .iter()
                    .map(|(dimension, price)| RateSeed {
                        dimension_key: dimension.clone(),
                        price: *price,
                    })
                    .collect(),
                free_trial: a.free_trial.as_ref().map(|trial| FreeTrialSeed {
                    duration_days: trial.duration_days,
                    grants: trial
                        .grants
                        .iter()
                        .map(|g| GrantSeed {
                            dimension_key: g.dimension.clone(),
                            max_quantity: g.max_quantity.map(|q| i32::try_from(q).unwrap()),
                        })
                        .collect(),
                }),
                fixed_upfront: a.upfront.map(|price| FixedUpfrontSeed {
                    duration: "P12M".into(),
                    price,
                    grants: vec![],
                }),
                initial_agreement_id: None,
                entitle: false,
            })
            .unwrap();
    }

    async fn end(&self, agreement_id: &str, status: AgreementStatus) {
        self.sim
            .handle()
            .end_agreement(&sim::AgreementEnd {
                agreement_id: agreement_id.to_string(),
                status: sim_status(&status),
            })
            .unwrap();
    }

    async fn advance(&self, by: TimeDelta) {
        self.sim.handle().advance_clock(by.num_seconds());
    }

    async fn throttle_describe(&self) {
        // DescribeAgreement's 5 calls per second.
        self.sim
            .handle()
            .set_throttle(ThrottleConfig::default())
            .unwrap();
    }

    async fn bill(
        &self,
        license: &str,
        account: &str,
        dimension: &str,
        quantity: u32,
        hour: Instant,
    ) {
        let handle = self.sim.handle();
        let clock = handle.clock_setting();
        assert!(hour <= handle.now(), "billed at {hour}, after the clock");
        // BatchMeterUsage takes the last 24 hours only: meter within the hour, then
        // put the clock back.
        handle.set_clock(ClockSetting::Fixed {
            at: hour + TimeDelta::minutes(30),
        });
        handle
            .entitle(EntitlementSeed {
                license_arn: license.to_string(),
                customer_aws_account_id: account.to_string(),
                product_code: PRODUCT_CODE.into(),
            })
            .unwrap();
        let record = UsageRecord::builder()
            .timestamp(MeteringTime::from_secs(hour.timestamp()))
            .customer_aws_account_id(account)
            .license_arn(license)
            .dimension(dimension)
            .quantity(i32::try_from(quantity).unwrap())
            .build()
            .unwrap();
        let out = self
            .metering
            .batch_meter_usage()
            // Records of a license carry no ProductCode (the license names it).
            .usage_records(record)
            .send()
            .await;
        handle.set_clock(clock);
        let out = out.unwrap();
        assert!(out.unprocessed_records().is_empty(), "{out:?}");
        assert!(
            matches!(
                out.results()[0].status(),
                Some(UsageRecordResultStatus::Success | UsageRecordResultStatus::DuplicateRecord)
            ),
            "{out:?}"
        );
    }

    async fn settle(&self) {
        // A minute of processing; the next Agreement API call completes them.
        self.sim.handle().advance_clock(120);
    }
}

awsmp_core::agreement_contract_tests!(simulator().await);

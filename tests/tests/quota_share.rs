//! One quota, several products: the `BatchMeterUsage` quota (10 requests/s) is per
//! account and Region, so two products' submitters in one Region must share it. Each
//! submitter paces at its `METERING_REQUESTS_PER_SECOND` share; two at 5/s against one
//! Marketplace simulator enforcing 10/s are never throttled and both bill everything,
//! while two at the default 10/s throttle each other.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;

use awsmp_core::aggregate::ZeroQuantityPolicy;
use awsmp_core::memory::MemoryTables;
use awsmp_core::memory::fixtures::pending_record;
use awsmp_core::model::GroupKey;
use awsmp_core::ports::AggregatedStore;
use awsmp_e2e::common::*;
use awsmp_e2e::{Stack, license};
use awsmp_marketplace_sim::{EntitlementSeed, ProductSeed};

const NOW: &str = "2026-11-30T10:30:00Z";
/// Records per product: several seconds of calls at a 5/s share.
const RECORDS: u32 = 250;

/// A second stack's submitter: the same function and Marketplace, its own product and
/// aggregated table (in memory: what is shared here is the Marketplace quota), paced at
/// `share` requests per second.
fn submitter(
    stack: &Stack,
    product: &str,
    share: u32,
) -> (awsmp_submitter::State, Arc<dyn AggregatedStore>) {
    let table: Arc<dyn AggregatedStore> =
        Arc::new(MemoryTables::with_page_size(1000).aggregated_store());
    let mut settings = (*stack.submitter.settings).clone();
    settings.product_code = product.to_string();
    settings.zero_policy = ZeroQuantityPolicy::Submit;
    settings.min_call_interval = awsmp_submitter::call_interval(share);
    let mut state = stack.submitter.clone();
    state.settings = Arc::new(settings);
    state.ports.aggregated = table.clone();
    (state, table)
}

async fn seed(stack: &Stack, table: &dyn AggregatedStore, product: &str, first_license: u32) {
    stack
        .sim
        .handle()
        .seed_product(ProductSeed {
            product_code: product.to_string(),
            dimensions: (0..25).map(|d| format!("dim{d:03}")).collect(),
        })
        .unwrap();
    for n in 0..RECORDS {
        let arn = license(first_license + n / 25);
        if n % 25 == 0 {
            stack
                .sim
                .handle()
                .entitle(EntitlementSeed {
                    license_arn: arn.clone(),
                    customer_aws_account_id: ACCOUNT_A.to_string(),
                    product_code: product.to_string(),
                })
                .unwrap();
        }
        let record = pending_record(
            GroupKey {
                license_arn: arn,
                customer_aws_account_id: ACCOUNT_A.to_string(),
                dimension: format!("dim{:03}", n % 25),
                hour: "2026-11-30T09".parse().unwrap(),
            },
            product,
            1,
            1,
        );
        table.put_direct(&record, stack.now()).await.unwrap();
    }
}

/// Runs two products' submitters at once, each at `share` requests/s, and returns
/// the records each billed and the calls the quota refused.
async fn two_products(share: u32) -> (usize, usize, u64) {
    let stack = stack_with(NOW, |o| {
        o.dimensions = (0..25).map(|d| format!("dim{d:03}")).collect();
    })
    .await;
    let (a, table_a) = submitter(&stack, "prod-aaaa", share);
    let (b, table_b) = submitter(&stack, "prod-bbbb", share);
    seed(&stack, table_a.as_ref(), "prod-aaaa", 1).await;
    seed(&stack, table_b.as_ref(), "prod-bbbb", 101).await;
    let event = || {
        serde_json::from_value(serde_json::json!({
            "version": "0", "id": "schedule", "detail-type": "Scheduled Event",
            "source": "aws.events", "account": "123456789012", "time": NOW,
            "region": "us-east-1", "resources": [], "detail": {}
        }))
        .unwrap()
    };
    let run = |state: awsmp_submitter::State| async move {
        awsmp_submitter::handler(
            &state,
            lambda_runtime::LambdaEvent::new(event(), lambda_runtime::Context::default()),
        )
        .await
    };
    let (ra, rb) = tokio::join!(run(a), run(b));
    let (ra, rb) = (ra.unwrap_or_default(), rb.unwrap_or_default());
    (ra.success, rb.success, stack.sim.handle().stats().throttled)
}

#[tokio::test]
async fn two_products_at_half_the_quota_each_share_it_without_throttling() {
    let (a, b, throttled) = two_products(5).await;
    assert_eq!(throttled, 0, "calls refused by the shared quota");
    assert_eq!(
        (a, b),
        (RECORDS as usize, RECORDS as usize),
        "neither starves"
    );
}

#[tokio::test]
async fn two_products_at_the_whole_quota_each_are_throttled() {
    let (_, _, throttled) = two_products(10).await;
    assert!(
        throttled > 0,
        "20 requests/s against a 10/s quota must be throttled"
    );
}

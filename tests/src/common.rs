//! Helpers shared by the end-to-end tests (this crate's and the operator tool's).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, HashMap};

use crate::views::AggregatedView;
use crate::{Stack, StackOptions, license};
use aws_sdk_dynamodb::types::AttributeValue;
use awsmp_core::time::{Instant, parse_usage_timestamp};
use awsmp_marketplace_sim::{FaultKind, FaultSpec, FaultTarget};

/// Buyer accounts.
pub const ACCOUNT_A: &str = "111122223333";
/// Another buyer.
pub const ACCOUNT_B: &str = "444455556666";

/// A whole-second UTC instant.
pub fn at(text: &str) -> Instant {
    parse_usage_timestamp(text).expect("test instant")
}

/// A stack at `now` with default options.
pub async fn stack(now: &str) -> Stack {
    Stack::start(StackOptions::at(at(now)))
        .await
        .expect("stack starts")
}

/// A stack with adjusted options.
pub async fn stack_with(now: &str, adjust: impl FnOnce(&mut StackOptions)) -> Stack {
    let mut options = StackOptions::at(at(now));
    adjust(&mut options);
    Stack::start(options).await.expect("stack starts")
}

/// License `n` on `account`, activated by a License Updated event.
pub async fn active_license(stack: &Stack, n: u32, account: &str) -> String {
    let license_arn = license(n);
    stack
        .license_updated(&license_arn, account)
        .await
        .expect("License Updated is handled");
    license_arn
}

/// Every stage but the submitter, once: the discoverer runs, then the aggregator's and
/// cleanup's queues are drained.
pub async fn discover_and_aggregate(stack: &Stack) {
    stack.run_discoverer().await.expect("discoverer runs");
    stack.drain_aggregator().await.expect("aggregator drains");
    stack.drain_cleanup().await.expect("cleanup drains");
}

/// Makes the simulator answer the next `count` `BatchMeterUsage` calls with `kind`.
#[track_caller]
pub fn fail_batch_meter_usage(stack: &Stack, kind: FaultKind, count: u32) {
    stack
        .sim
        .handle()
        .inject_fault(FaultSpec {
            kind,
            count,
            operation: FaultTarget::BatchMeterUsage,
        })
        .expect("fault injected");
}

/// Asserts that the simulator billed `group` exactly `quantity`.
#[track_caller]
pub fn assert_billed(stack: &Stack, group: &Group, quantity: i64) {
    assert_eq!(
        stack.billed().get(group),
        Some(&quantity),
        "billed quantity of {group:?}"
    );
}

/// Runs the whole pipeline once more, then asserts that `group` is billed exactly
/// `quantity` and that conservation holds (`settled` as for [`assert_conserved`]).
pub async fn run_pipeline_and_assert_billed(
    stack: &Stack,
    group: &Group,
    quantity: i64,
    settled: bool,
) {
    stack.run_pipeline().await.expect("pipeline runs");
    assert_billed(stack, group, quantity);
    assert_conserved(stack, settled).await;
}

/// The first aggregated record (of a table that holds one, or of a scan's order).
pub async fn first_record(stack: &Stack) -> AggregatedView {
    stack
        .aggregated_rows()
        .await
        .expect("aggregated rows")
        .into_iter()
        .next()
        .expect("an aggregated record")
}

/// Asserts the conservation invariant.
pub async fn assert_conserved(stack: &Stack, settled: bool) {
    let violations = stack.conservation(settled).await.expect("read tables");
    assert!(
        violations.is_empty(),
        "conservation violated:\n{}",
        violations.join("\n")
    );
}

/// A group as the ledger view keys it: (license, account, dimension, hour).
pub type Group = (String, String, String, String);

/// Group key as the ledger view uses it.
pub fn key(license: &str, account: &str, dimension: &str, hour: &str) -> Group {
    (
        license.to_string(),
        account.to_string(),
        dimension.to_string(),
        hour.to_string(),
    )
}

/// Expected billing: sums per group of (group, quantity) pairs.
pub fn sums(rows: &[(Group, i64)]) -> HashMap<Group, i64> {
    let mut out = HashMap::new();
    for (group, quantity) in rows {
        *out.entry(group.clone()).or_insert(0) += quantity;
    }
    out
}

/// Raw statuses by sort key.
pub async fn raw_statuses(stack: &Stack) -> BTreeMap<String, (Option<String>, Option<String>)> {
    stack
        .raw_rows()
        .await
        .expect("raw rows")
        .into_iter()
        .map(|r| (r.sort_key, (r.status, r.reason)))
        .collect()
}

/// A `usageAllocations` list attribute.
pub fn allocations(parts: &[(i64, &[(&str, &str)])]) -> AttributeValue {
    AttributeValue::L(
        parts
            .iter()
            .map(|(quantity, tags)| {
                AttributeValue::M(HashMap::from([
                    (
                        "allocatedUsageQuantity".to_string(),
                        AttributeValue::N(quantity.to_string()),
                    ),
                    (
                        "tags".to_string(),
                        AttributeValue::L(
                            tags.iter()
                                .map(|(k, v)| {
                                    AttributeValue::M(HashMap::from([
                                        ("key".to_string(), AttributeValue::S(k.to_string())),
                                        ("value".to_string(), AttributeValue::S(v.to_string())),
                                    ]))
                                })
                                .collect(),
                        ),
                    ),
                ]))
            })
            .collect(),
    )
}

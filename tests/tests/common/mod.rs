//! Helpers shared by the end-to-end tests.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, HashMap};

use aws_sdk_dynamodb::types::AttributeValue;
use awsmp_core::time::{Instant, parse_usage_timestamp};
use awsmp_e2e::{Stack, StackOptions};

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

//! Batching of metering records for `BatchMeterUsage`: one product per call, at most
//! 25 records and at most 1,000,000 bytes of request body, measured on the exact JSON
//! body the AWS SDK sends (docs/design.md: aggregation commit).
//!
//! The request body is built here by [`request_body`] for size purposes only (the
//! adapter sends SDK types). It has no way to carry a request-level `ProductCode`: records
//! carry `LicenseArn`, and AWS bills twice when one customer-hour is metered with both.

use std::collections::HashMap;

use crate::model::{Allocation, GroupKey};
use crate::ports::MeteringRecord;

/// Most records in one `BatchMeterUsage` request (the model's `UsageRecordList` max).
pub const MAX_RECORDS_PER_REQUEST: usize = 25;

/// Largest request body we send, in bytes.
///
/// AWS says the request "must be less than 1 MB" without saying whether a MB is 10^6 or
/// 2^20 bytes or whether headers count. 1,000,000 bytes of body stays under the decimal
/// megabyte's worth of payload and leaves 48,576 bytes below 1 MiB (1,048,576) for the
/// HTTP and SigV4 headers, so the request is accepted under either reading.
pub const MAX_REQUEST_BODY_BYTES: usize = 1_000_000;

/// Opening of every request body, up to the first record.
const BODY_PREFIX: &str = "{\"UsageRecords\":[";
/// Close of every request body after the last record.
const BODY_SUFFIX: &str = "]}";
/// Bytes a request body spends outside its records (prefix and suffix).
const BODY_OVERHEAD: usize = BODY_PREFIX.len() + BODY_SUFFIX.len();

/// The caps one batch must respect. [`BatchLimits::AWS`] is the service's; tighter
/// limits exist for tests and for callers that want smaller calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchLimits {
    max_records: usize,
    max_body_bytes: usize,
}

/// Batch limits that are not within the service's own caps.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidBatchLimits {
    /// The record cap is 0 or above [`MAX_RECORDS_PER_REQUEST`].
    #[error("records per request must be from 1 to {MAX_RECORDS_PER_REQUEST}, got {0}")]
    Records(usize),
    /// The byte cap cannot hold a request, or exceeds [`MAX_REQUEST_BODY_BYTES`].
    #[error(
        "request body cap must be from {min} to {MAX_REQUEST_BODY_BYTES} bytes, got {0}",
        min = BODY_OVERHEAD + 1
    )]
    Bytes(usize),
}

impl BatchLimits {
    /// The service's caps: 25 records, [`MAX_REQUEST_BODY_BYTES`] of body.
    pub const AWS: BatchLimits = BatchLimits {
        max_records: MAX_RECORDS_PER_REQUEST,
        max_body_bytes: MAX_REQUEST_BODY_BYTES,
    };

    /// Limits at most as large as the service's. Errors name the cap that is out of range.
    pub fn new(max_records: usize, max_body_bytes: usize) -> Result<Self, InvalidBatchLimits> {
        if !(1..=MAX_RECORDS_PER_REQUEST).contains(&max_records) {
            return Err(InvalidBatchLimits::Records(max_records));
        }
        if !(BODY_OVERHEAD + 1..=MAX_REQUEST_BODY_BYTES).contains(&max_body_bytes) {
            return Err(InvalidBatchLimits::Bytes(max_body_bytes));
        }
        Ok(BatchLimits {
            max_records,
            max_body_bytes,
        })
    }

    /// Most records per batch.
    pub fn max_records(&self) -> usize {
        self.max_records
    }

    /// Most request-body bytes per batch.
    pub fn max_body_bytes(&self) -> usize {
        self.max_body_bytes
    }
}

impl Default for BatchLimits {
    fn default() -> Self {
        BatchLimits::AWS
    }
}

/// One `BatchMeterUsage` call's worth of records: a single product, within the
/// limits it was planned with, in input order. Only [`plan_batches`] builds one, so a
/// `Batch` always satisfies its caps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    product_code: String,
    records: Vec<MeteringRecord>,
    input_indexes: Vec<usize>,
    body_bytes: usize,
}

impl Batch {
    /// The product every record belongs to (never sent as request `ProductCode`).
    pub fn product_code(&self) -> &str {
        &self.product_code
    }

    /// The records, oldest first as given.
    pub fn records(&self) -> &[MeteringRecord] {
        &self.records
    }

    /// For each record, its index in the slice given to [`plan_batches`].
    pub fn input_indexes(&self) -> &[usize] {
        &self.input_indexes
    }

    /// Size of [`request_body`] for these records, in bytes.
    pub fn body_bytes(&self) -> usize {
        self.body_bytes
    }

    /// Number of records.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Never true for a planned batch; present for API symmetry with `len`.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }
}

/// A record that cannot be sent: a request holding it alone exceeds the byte cap.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "record {index} ({key}) makes a {body_bytes}-byte BatchMeterUsage request on its own, \
     over the {limit}-byte cap; it cannot be sent"
)]
pub struct OversizedRecord {
    /// Index in the slice given to [`plan_batches`].
    pub index: usize,
    /// The record's group.
    pub key: GroupKey,
    /// Size of a request holding only this record.
    pub body_bytes: usize,
    /// The byte cap it exceeds.
    pub limit: usize,
}

/// The result of [`plan_batches`]: every input record is in exactly one batch or is
/// reported oversized.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BatchPlan {
    /// Batches, grouped by product in order of each product's first record.
    pub batches: Vec<Batch>,
    /// Records too large to send even alone, in input order.
    pub oversized: Vec<OversizedRecord>,
}

/// Splits records into `BatchMeterUsage` calls: per product (in order of first
/// appearance), each within `limits`, keeping input order (oldest first) inside a
/// product. Greedy: a batch is closed when the next record would break a cap.
pub fn plan_batches(records: &[MeteringRecord], limits: BatchLimits) -> BatchPlan {
    let mut products: Vec<(&str, Vec<usize>)> = Vec::new();
    let mut product_slot: HashMap<&str, usize> = HashMap::new();
    for (index, record) in records.iter().enumerate() {
        let slot = *product_slot
            .entry(record.product_code.as_str())
            .or_insert_with(|| {
                products.push((record.product_code.as_str(), Vec::new()));
                products.len() - 1
            });
        if let Some((_, members)) = products.get_mut(slot) {
            members.push(index);
        }
    }

    let mut plan = BatchPlan::default();
    for (product_code, members) in products {
        let mut current: Option<Batch> = None;
        for index in members {
            let Some(record) = records.get(index) else {
                continue;
            };
            let record_bytes = record_json(record).len();
            let alone_bytes = BODY_OVERHEAD + record_bytes;
            if alone_bytes > limits.max_body_bytes {
                plan.oversized.push(OversizedRecord {
                    index,
                    key: record.key.clone(),
                    body_bytes: alone_bytes,
                    limit: limits.max_body_bytes,
                });
                continue;
            }
            // A record after the first costs its bytes plus the separating comma.
            let fits = current.as_ref().is_some_and(|batch| {
                batch.records.len() < limits.max_records
                    && batch.body_bytes + 1 + record_bytes <= limits.max_body_bytes
            });
            match current.as_mut() {
                Some(batch) if fits => {
                    batch.body_bytes += 1 + record_bytes;
                    batch.records.push(record.clone());
                    batch.input_indexes.push(index);
                }
                _ => {
                    if let Some(full) = current.take() {
                        plan.batches.push(full);
                    }
                    current = Some(Batch {
                        product_code: product_code.to_string(),
                        records: vec![record.clone()],
                        input_indexes: vec![index],
                        body_bytes: alone_bytes,
                    });
                }
            }
        }
        if let Some(last) = current {
            plan.batches.push(last);
        }
    }
    plan
}

/// The awsJson1_1 body the AWS SDK sends for these records, byte for byte:
/// `{"UsageRecords":[...]}` with each record as [`record_json`] writes it. There is no
/// request-level `ProductCode`, by construction.
pub fn request_body(records: &[MeteringRecord]) -> String {
    let mut body = String::from(BODY_PREFIX);
    for (position, record) in records.iter().enumerate() {
        if position > 0 {
            body.push(',');
        }
        write_record(&mut body, record);
    }
    body.push_str(BODY_SUFFIX);
    body
}

/// One record as the SDK serializes a `UsageRecord`, fields in the SDK's order:
/// `Timestamp` (epoch seconds of the hour start), `CustomerIdentifier` (always `""`: the
/// model defaults it), `Dimension`, `Quantity`, `UsageAllocations` (omitted when absent
/// or empty; `Tags` omitted when empty, as the model's minimum list lengths require of
/// the adapter), `CustomerAWSAccountId`, `LicenseArn`. The record's product code is not
/// part of it.
pub fn record_json(record: &MeteringRecord) -> String {
    let mut out = String::new();
    write_record(&mut out, record);
    out
}

fn write_record(out: &mut String, record: &MeteringRecord) {
    out.push_str("{\"Timestamp\":");
    out.push_str(&record.key.hour.start().timestamp().to_string());
    out.push_str(",\"CustomerIdentifier\":\"\",\"Dimension\":");
    write_json_string(out, &record.key.dimension);
    out.push_str(",\"Quantity\":");
    out.push_str(&record.quantity.to_string());
    if let Some(allocations) = record.allocations.as_deref().filter(|a| !a.is_empty()) {
        out.push_str(",\"UsageAllocations\":[");
        for (position, allocation) in allocations.iter().enumerate() {
            if position > 0 {
                out.push(',');
            }
            write_allocation(out, allocation);
        }
        out.push(']');
    }
    out.push_str(",\"CustomerAWSAccountId\":");
    write_json_string(out, &record.key.customer_aws_account_id);
    out.push_str(",\"LicenseArn\":");
    write_json_string(out, &record.key.license_arn);
    out.push('}');
}

fn write_allocation(out: &mut String, allocation: &Allocation) {
    out.push_str("{\"AllocatedUsageQuantity\":");
    out.push_str(&allocation.quantity.to_string());
    if !allocation.tags.is_empty() {
        out.push_str(",\"Tags\":[");
        for (position, tag) in allocation.tags.iter().enumerate() {
            if position > 0 {
                out.push(',');
            }
            out.push_str("{\"Key\":");
            write_json_string(out, &tag.key);
            out.push_str(",\"Value\":");
            write_json_string(out, &tag.value);
            out.push('}');
        }
        out.push(']');
    }
    out.push('}');
}

/// A quoted JSON string escaped exactly as `aws-smithy-json` does (and serde_json:
/// the SDK's own tests check they agree): `"` and `\` backslashed, the short forms for
/// backspace, form feed, newline, carriage return and tab, `\u00xx` for the other
/// control characters, and everything else (non-ASCII included) as raw UTF-8.
fn write_json_string(out: &mut String, value: &str) {
    out.push('"');
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0C}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::model::Tag;
    use crate::time::HourBucket;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    const LICENSE: &str =
        "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef";

    fn record(product: &str, dimension: &str, quantity: i64) -> MeteringRecord {
        MeteringRecord {
            key: GroupKey {
                license_arn: LICENSE.to_string(),
                customer_aws_account_id: "111122223333".to_string(),
                dimension: dimension.to_string(),
                hour: "2026-01-01T00".parse().unwrap(),
            },
            product_code: product.to_string(),
            quantity,
            allocations: None,
        }
    }

    /// `count` allocations of quantity 1, each with one tag whose value is `value_len` long.
    fn allocated(mut r: MeteringRecord, count: usize, value_len: usize) -> MeteringRecord {
        let allocations = (0..count)
            .map(|i| Allocation {
                quantity: 1,
                tags: vec![Tag {
                    key: format!("k{i}"),
                    value: "v".repeat(value_len),
                }],
            })
            .collect::<Vec<_>>();
        r.quantity = count as i64;
        r.allocations = Some(allocations);
        r
    }

    fn assert_plan_invariants(records: &[MeteringRecord], plan: &BatchPlan, limits: BatchLimits) {
        let mut seen = BTreeSet::new();
        for batch in &plan.batches {
            assert!(!batch.is_empty());
            assert!(batch.len() <= limits.max_records());
            let body = request_body(batch.records());
            assert_eq!(
                body.len(),
                batch.body_bytes(),
                "tracked size is the real size"
            );
            assert!(body.len() <= limits.max_body_bytes());
            assert!(
                batch.input_indexes().windows(2).all(|w| w[0] < w[1]),
                "input order kept"
            );
            for (record, &index) in batch.records().iter().zip(batch.input_indexes()) {
                assert_eq!(record, &records[index]);
                assert_eq!(record.product_code, batch.product_code());
                assert!(seen.insert(index), "record {index} in two batches");
            }
        }
        for oversized in &plan.oversized {
            assert!(oversized.body_bytes > limits.max_body_bytes());
            assert_eq!(
                oversized.body_bytes,
                request_body(&records[oversized.index..=oversized.index]).len()
            );
            assert!(
                seen.insert(oversized.index),
                "oversized record {} also batched",
                oversized.index
            );
        }
        assert_eq!(seen.len(), records.len(), "every record accounted for");
    }

    #[test]
    fn body_matches_the_captured_sdk_request_byte_for_byte() {
        // GIVEN the record behind the body captured from aws-sdk-marketplacemetering 1.124.0
        let mut r = record("prod-a", "requests", 42);
        r.allocations = Some(vec![Allocation {
            quantity: 42,
            tags: vec![Tag {
                key: "team".into(),
                value: "a".into(),
            }],
        }]);
        // THEN our body is that capture exactly
        assert_eq!(
            request_body(&[r]),
            "{\"UsageRecords\":[{\"Timestamp\":1767225600,\"CustomerIdentifier\":\"\",\
             \"Dimension\":\"requests\",\"Quantity\":42,\"UsageAllocations\":[{\"AllocatedUsageQuantity\":42,\
             \"Tags\":[{\"Key\":\"team\",\"Value\":\"a\"}]}],\"CustomerAWSAccountId\":\"111122223333\",\
             \"LicenseArn\":\"arn:aws:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef\"}]}"
        );
    }

    #[test]
    fn body_never_carries_product_code() {
        let records = vec![record("prod-a", "a", 1), record("prod-a", "b", 2)];
        let body = request_body(&records);
        assert!(!body.contains("ProductCode"));
        assert!(!body.contains("prod-a"));
        let parsed: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            parsed.as_object().unwrap().keys().collect::<Vec<_>>(),
            vec!["UsageRecords"]
        );
    }

    #[test]
    fn untagged_allocations_and_absent_allocations_are_left_out() {
        let mut r = record("p", "d", 3);
        r.allocations = Some(vec![Allocation {
            quantity: 3,
            tags: vec![],
        }]);
        assert!(record_json(&r).contains("\"UsageAllocations\":[{\"AllocatedUsageQuantity\":3}]"));
        r.allocations = Some(vec![]);
        assert!(!record_json(&r).contains("UsageAllocations"));
        r.allocations = None;
        assert!(!record_json(&r).contains("UsageAllocations"));
    }

    #[test]
    fn escaping_counts_toward_the_size() {
        let plain = record("p", "abc", 1);
        let escaped = record("p", "a\"\\\n\u{1}", 1);
        // `a"\<LF><SOH>` is 5 characters and 13 bytes escaped: a \" \\ \n \u0001
        assert_eq!(
            record_json(&escaped).len(),
            record_json(&plain).len() - 3 + 13
        );
        assert!(record_json(&escaped).contains(r#""Dimension":"a\"\\\n\u0001""#));
    }

    #[test]
    fn at_most_25_records_per_batch() {
        // GIVEN 60 small records of one product
        let records: Vec<_> = (0..60).map(|i| record("p", &format!("d{i}"), i)).collect();
        // WHEN planned with the AWS caps
        let plan = plan_batches(&records, BatchLimits::AWS);
        // THEN 25 + 25 + 10, in input order
        assert_eq!(
            plan.batches.iter().map(Batch::len).collect::<Vec<_>>(),
            vec![25, 25, 10]
        );
        assert_eq!(plan.batches[1].input_indexes()[0], 25);
        assert!(plan.oversized.is_empty());
        assert_plan_invariants(&records, &plan, BatchLimits::AWS);
    }

    #[test]
    fn one_megabyte_cap_with_large_allocations() {
        // GIVEN 20 records of ~125 KB each (500 allocations with 200-byte tag values)
        let records: Vec<_> = (0..20)
            .map(|i| allocated(record("p", &format!("d{i}"), 0), 500, 200))
            .collect();
        let one = record_json(&records[0]).len();
        assert!(one > 100_000 && one < 200_000, "record is {one} bytes");
        // WHEN planned
        let plan = plan_batches(&records, BatchLimits::AWS);
        // THEN each batch holds as many as fit under 1,000,000 bytes, far fewer than 25
        let per_batch = (MAX_REQUEST_BODY_BYTES - BODY_OVERHEAD + 1) / (one + 1);
        assert!(per_batch < 25);
        assert_eq!(plan.batches[0].len(), per_batch);
        assert!(
            plan.batches
                .iter()
                .all(|b| b.body_bytes() <= MAX_REQUEST_BODY_BYTES)
        );
        assert_plan_invariants(&records, &plan, BatchLimits::AWS);
    }

    #[test]
    fn a_batch_exactly_at_the_byte_cap_is_allowed() {
        let records: Vec<_> = (0..3).map(|i| record("p", &format!("d{i}"), 1)).collect();
        let two = request_body(&records[..2]).len();
        let limits = BatchLimits::new(25, two).unwrap();
        let plan = plan_batches(&records, limits);
        assert_eq!(
            plan.batches.iter().map(Batch::len).collect::<Vec<_>>(),
            vec![2, 1]
        );
        assert_eq!(plan.batches[0].body_bytes(), two);
    }

    #[test]
    fn products_are_never_mixed_and_keep_their_order() {
        // GIVEN records of two products interleaved
        let records = vec![
            record("b", "1", 1),
            record("a", "2", 1),
            record("b", "3", 1),
            record("a", "4", 1),
            record("b", "5", 1),
        ];
        let plan = plan_batches(&records, BatchLimits::AWS);
        // THEN one batch per product, products in order of first appearance
        assert_eq!(plan.batches.len(), 2);
        assert_eq!(plan.batches[0].product_code(), "b");
        assert_eq!(plan.batches[0].input_indexes(), &[0, 2, 4]);
        assert_eq!(plan.batches[1].product_code(), "a");
        assert_eq!(plan.batches[1].input_indexes(), &[1, 3]);
        assert_plan_invariants(&records, &plan, BatchLimits::AWS);
    }

    #[test]
    fn a_record_too_large_alone_is_an_error_not_a_batch() {
        // GIVEN a record of ~5 MB (2,500 allocations, 5 maximal tags each) between two small ones
        let mut huge = record("p", "big", 2500);
        huge.allocations = Some(
            (0..2500)
                .map(|i| Allocation {
                    quantity: 1,
                    tags: (0..5)
                        .map(|t| Tag {
                            key: format!("{i}-{t}-{}", "k".repeat(90)),
                            value: "v".repeat(256),
                        })
                        .collect(),
                })
                .collect(),
        );
        let records = vec![record("p", "a", 1), huge, record("p", "b", 1)];
        // WHEN planned
        let plan = plan_batches(&records, BatchLimits::AWS);
        // THEN it is reported with its size, and the small ones still form one batch
        assert_eq!(plan.oversized.len(), 1);
        let err = &plan.oversized[0];
        assert_eq!(err.index, 1);
        assert!(err.body_bytes > 4_000_000);
        assert_eq!(err.limit, MAX_REQUEST_BODY_BYTES);
        assert!(err.to_string().contains("cannot be sent"));
        assert_eq!(plan.batches.len(), 1);
        assert_eq!(plan.batches[0].input_indexes(), &[0, 2]);
        assert_plan_invariants(&records, &plan, BatchLimits::AWS);
    }

    #[test]
    fn empty_input_plans_nothing() {
        assert_eq!(plan_batches(&[], BatchLimits::AWS), BatchPlan::default());
        assert_eq!(request_body(&[]), "{\"UsageRecords\":[]}");
    }

    #[test]
    fn limits_outside_the_service_caps_are_refused() {
        assert_eq!(
            BatchLimits::new(0, 1000),
            Err(InvalidBatchLimits::Records(0))
        );
        assert_eq!(
            BatchLimits::new(26, 1000),
            Err(InvalidBatchLimits::Records(26))
        );
        assert_eq!(BatchLimits::new(5, 19), Err(InvalidBatchLimits::Bytes(19)));
        assert_eq!(
            BatchLimits::new(5, MAX_REQUEST_BODY_BYTES + 1),
            Err(InvalidBatchLimits::Bytes(MAX_REQUEST_BODY_BYTES + 1))
        );
        assert_eq!(
            BatchLimits::new(25, MAX_REQUEST_BODY_BYTES),
            Ok(BatchLimits::AWS)
        );
        assert!(
            InvalidBatchLimits::Bytes(3)
                .to_string()
                .contains("from 20 to 1000000")
        );
    }

    fn arb_text() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-z0-9_-]{1,12}",
            prop::collection::vec(any::<char>(), 1..10).prop_map(String::from_iter),
            prop::collection::vec(
                prop::sample::select(vec![
                    '\u{0}', '\u{8}', '\n', '\u{1f}', '"', '\\', '/', 'é', '€', '😀'
                ]),
                1..8
            )
            .prop_map(String::from_iter),
        ]
    }

    fn arb_record() -> impl Strategy<Value = MeteringRecord> {
        (
            prop::sample::select(vec!["prod-a", "prod-b", "prod-c"]),
            arb_text(),
            0i64..=2_147_483_647,
            0u32..48,
            prop::option::of(prop::collection::vec(
                (
                    0i64..1000,
                    prop::collection::vec((arb_text(), arb_text()), 0..5),
                ),
                0..12,
            )),
        )
            .prop_map(|(product, dimension, quantity, hours_back, allocations)| {
                MeteringRecord {
                    key: GroupKey {
                        license_arn: LICENSE.to_string(),
                        customer_aws_account_id: "111122223333".to_string(),
                        dimension,
                        hour: "2026-03-02T12"
                            .parse::<HourBucket>()
                            .unwrap()
                            .plus_hours(-i64::from(hours_back)),
                    },
                    product_code: product.to_string(),
                    quantity,
                    allocations: allocations.map(|list| {
                        list.into_iter()
                            .map(|(quantity, tags)| Allocation {
                                quantity,
                                tags: tags
                                    .into_iter()
                                    .map(|(key, value)| Tag { key, value })
                                    .collect(),
                            })
                            .collect()
                    }),
                }
            })
    }

    proptest! {
        #[test]
        fn every_record_in_exactly_one_batch_within_the_caps(
            records in prop::collection::vec(arb_record(), 0..80),
            max_records in 1usize..=25,
            max_bytes in prop_oneof![200usize..4_000, 4_000usize..60_000, Just(MAX_REQUEST_BODY_BYTES)],
        ) {
            let limits = BatchLimits::new(max_records, max_bytes).unwrap();
            let plan = plan_batches(&records, limits);
            assert_plan_invariants(&records, &plan, limits);
        }

        #[test]
        fn body_is_valid_json_of_exactly_the_measured_size(records in prop::collection::vec(arb_record(), 0..6)) {
            let body = request_body(&records);
            let parsed: serde_json::Value = serde_json::from_str(&body).unwrap();
            // serde_json (which escapes as aws-smithy-json does) re-serializes to the same length
            prop_assert_eq!(serde_json::to_string(&parsed).unwrap().len(), body.len());
            let usage = parsed["UsageRecords"].as_array().unwrap();
            prop_assert_eq!(usage.len(), records.len());
            for (json, record) in usage.iter().zip(&records) {
                prop_assert_eq!(json["Dimension"].as_str().unwrap(), record.key.dimension.as_str());
                prop_assert_eq!(json["Timestamp"].as_i64().unwrap(), record.key.hour.start().timestamp());
                prop_assert!(json.get("ProductCode").is_none());
            }
            prop_assert!(parsed.get("ProductCode").is_none());
        }
    }
}

//! The usage/aggregated store contract (`awsmp_core::memory::contract`) against the
//! DynamoDB adapters on moto: the same cases the in-memory stores pass.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use async_trait::async_trait;
use awsmp_aws::item::{attr_from_dynamo, expiry, raw_row_item, s};
use awsmp_aws::{DynamoAggregatedStore, DynamoOperatorStore, DynamoUsageStore};
use awsmp_core::items::expiry_of;
use awsmp_core::memory::contract::{Backend, PAGE_SIZE};
use awsmp_core::model::{GroupKey, RawUsageRow, attr};
use awsmp_core::ports::{AggregatedStore, OperatorStore, UsageStore};
use awsmp_core::time::Instant;
use awsmp_local_aws::MotoServer;
use common::{AGGREGATED, USAGE, moto_with_tables};

/// The DynamoDB stores on a fresh moto, paging by [`PAGE_SIZE`].
struct MotoBackend {
    _moto: MotoServer,
    db: aws_sdk_dynamodb::Client,
    usage: DynamoUsageStore,
    aggregated: DynamoAggregatedStore,
    operator: DynamoOperatorStore,
}

async fn moto() -> MotoBackend {
    let (moto, db) = moto_with_tables().await;
    let limit = i32::try_from(PAGE_SIZE).unwrap();
    MotoBackend {
        usage: DynamoUsageStore::new(db.clone(), USAGE).with_page_limit(limit),
        aggregated: DynamoAggregatedStore::new(db.clone(), AGGREGATED)
            .claiming_rows_of(USAGE)
            .with_page_limit(limit),
        operator: DynamoOperatorStore::new(db.clone(), USAGE, AGGREGATED).with_page_limit(limit),
        db,
        _moto: moto,
    }
}

#[async_trait]
impl Backend for MotoBackend {
    fn usage(&self) -> &dyn UsageStore {
        &self.usage
    }
    fn aggregated(&self) -> &dyn AggregatedStore {
        &self.aggregated
    }
    fn operator(&self) -> &dyn OperatorStore {
        &self.operator
    }
    async fn insert_raw_row(&self, row: &RawUsageRow) {
        self.db
            .put_item()
            .table_name(USAGE)
            .set_item(Some(raw_row_item(row).unwrap()))
            .send()
            .await
            .unwrap();
    }
    async fn record_expiry(&self, key: &GroupKey) -> Option<Instant> {
        let item = self
            .db
            .get_item()
            .table_name(AGGREGATED)
            .consistent_read(true)
            .key(attr::LICENSE_ARN, s(&key.license_arn))
            .key(attr::AGGREGATED_SORT_KEY, s(key.aggregated_sort_key()))
            .send()
            .await
            .unwrap()
            .item?;
        let value = attr_from_dynamo(item.get(attr::EXPIRES_AT)?);
        Some(expiry_of(&value).expect("expiresAt is epoch seconds"))
    }
    async fn set_record_expiry(&self, key: &GroupKey, at: Instant) {
        self.db
            .update_item()
            .table_name(AGGREGATED)
            .key(attr::LICENSE_ARN, s(&key.license_arn))
            .key(attr::AGGREGATED_SORT_KEY, s(key.aggregated_sort_key()))
            .update_expression("SET #e = :e")
            .expression_attribute_names("#e", attr::EXPIRES_AT)
            .expression_attribute_values(":e", expiry(at))
            .send()
            .await
            .unwrap();
    }
    fn enforces_transaction_bytes(&self) -> bool {
        // moto 5.2 refuses more than 100 actions but never sums the items' sizes.
        false
    }
}

awsmp_core::store_contract_tests!(moto().await);

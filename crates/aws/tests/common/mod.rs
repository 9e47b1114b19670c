//! Shared fixtures of the adapter tests: fixed instants, a license, group keys and a
//! moto server with the project's tables.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use awsmp_core::model::GroupKey;
use awsmp_core::time::{HourBucket, Instant, parse_usage_timestamp};
use awsmp_local_aws::{
    MotoServer, create_aggregated_table, create_profile_table, create_subscribers_table,
    create_usage_table,
};

pub const LICENSE: &str =
    "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef";
pub const ACCOUNT: &str = "111122223333";
pub const USAGE: &str = "usage";
pub const AGGREGATED: &str = "aggregated";
pub const SUBSCRIBERS: &str = "subscribers";
pub const PROFILE: &str = "profile";

pub fn t(s: &str) -> Instant {
    parse_usage_timestamp(s).unwrap()
}

pub fn hour(s: &str) -> HourBucket {
    s.parse().unwrap()
}

pub fn group(dimension: &str, h: &str) -> GroupKey {
    GroupKey {
        license_arn: LICENSE.to_string(),
        customer_aws_account_id: ACCOUNT.to_string(),
        dimension: dimension.to_string(),
        hour: hour(h),
    }
}

/// moto with all four tables (docs/design.md's definitions).
pub async fn moto_with_tables() -> (MotoServer, aws_sdk_dynamodb::Client) {
    let moto = MotoServer::start().await.unwrap();
    let db = moto.dynamodb();
    create_usage_table(&db, USAGE).await.unwrap();
    create_aggregated_table(&db, AGGREGATED).await.unwrap();
    create_subscribers_table(&db, SUBSCRIBERS).await.unwrap();
    create_profile_table(&db, PROFILE).await.unwrap();
    (moto, db)
}

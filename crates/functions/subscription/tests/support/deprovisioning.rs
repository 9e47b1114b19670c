//! Test support shared by deprovision-cleanup's unit tests and its moto test (both mount
//! this file with `#[path]`, next to the other subscribers-table support here): what
//! the deprovisioning index holds, on any subscribers store.

use awsmp_core::ports::SubscriberStore;

/// The license ARNs of the rows in the deprovisioning index, in the store's order.
pub async fn licenses_in_index(store: &dyn SubscriberStore) -> Vec<String> {
    store
        .deprovisioning()
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.license_arn)
        .collect()
}

//! The operator commands over a deployment's tables and queues: each reads through
//! the ports, computes with `awsmp_operate`, and renders a table or JSON.

pub mod dlq;
pub mod failures;
pub mod import;
pub mod inspect;
pub mod queues;
pub mod replay;
pub mod report;
pub mod status;

use awsmp_core::model::{AggregatedRecord, RawUsageRow};
use awsmp_core::ports::{MalformedItem, OperatorStore};

use crate::commands::CommandError;
use crate::output::spinner;

/// Every raw usage item (of one license when given), following pages to the end.
pub async fn all_rows(
    store: &dyn OperatorStore,
    license_arn: Option<&str>,
) -> Result<Vec<RawUsageRow>, CommandError> {
    let bar = spinner("reading the usage table");
    let mut rows = Vec::new();
    let mut cursor = None;
    loop {
        let page = store.raw_rows_page(license_arn, cursor).await?;
        rows.extend(page.items);
        bar.set_message(format!("reading the usage table: {} items", rows.len()));
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    bar.finish_and_clear();
    Ok(rows)
}

/// Every aggregated record (of one license when given) and the items that cannot be
/// read as records.
pub async fn all_records(
    store: &dyn OperatorStore,
    license_arn: Option<&str>,
) -> Result<(Vec<AggregatedRecord>, Vec<MalformedItem>), CommandError> {
    let bar = spinner("reading the aggregated table");
    let (mut records, mut malformed) = (Vec::new(), Vec::new());
    let mut cursor = None;
    loop {
        let page = store.records_page(license_arn, cursor).await?;
        records.extend(page.items);
        malformed.extend(page.malformed);
        bar.set_message(format!(
            "reading the aggregated table: {} records",
            records.len()
        ));
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    bar.finish_and_clear();
    Ok((records, malformed))
}

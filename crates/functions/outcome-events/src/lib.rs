//! The outcome-events Lambda (main stack, only with `OutcomeEvents=enabled`): two
//! DynamoDB stream event-source mappings, one per usage table, whose filters pass only
//! items moving into a told status. Each change becomes at most one event on the
//! account's default bus ([`awsmp_core::outcomes`]); a change whose event the bus did
//! not take is reported as a batch item failure, so the stream delivers it (and the
//! changes after it) again. It reads nothing and writes nothing but the bus.

use aws_lambda_events::streams::DynamoDbEventResponse;
use awsmp_core::config::ConfigError;
use awsmp_core::outcomes::{Change, Table, publish};
use awsmp_lambda::EnvReader;
use lambda_runtime::LambdaEvent;
use tracing::{error, info};

pub use awsmp_lambda::stream::{
    StreamChange, StreamEvent, StreamRecord, dynamodb_attr, dynamodb_image, dynamodb_json,
    failed_positions, table_name_of,
};

/// Every environment variable this function reads (its template sets exactly these).
pub const ENV_VARS: &[&str] = &["USAGE_TABLE", "AGGREGATED_TABLE"];

/// The function's configuration, read once at init.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `USAGE_TABLE`: changes from its stream are raw rows.
    pub usage_table: String,
    /// `AGGREGATED_TABLE`: changes from its stream are aggregated records.
    pub aggregated_table: String,
}

impl Config {
    /// Reads the variables through `lookup`; every problem is reported at once.
    pub fn from_lookup(lookup: &dyn Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let mut env = EnvReader::new(lookup);
        let config = Config {
            usage_table: env.usage_table(),
            aggregated_table: env.aggregated_table(),
        };
        env.finish(config)
    }

    /// Which table a stream's source ARN belongs to.
    pub fn table_of(&self, event_source_arn: &str) -> Option<Table> {
        match table_name_of(event_source_arn)? {
            name if name == self.usage_table => Some(Table::Usage),
            name if name == self.aggregated_table => Some(Table::Aggregated),
            _ => None,
        }
    }
}

/// Handler state: the settings and the default bus (`State::connect` builds its
/// client once).
pub type State = awsmp_aws::BusState<Config>;

/// Handles one batch of stream records: publishes their outcome events and names the
/// records whose event was not taken. A record from a table the function does not know
/// is logged and skipped (retrying it could never succeed and would hold the shard).
pub async fn handler(
    state: &State,
    event: LambdaEvent<StreamEvent>,
) -> Result<DynamoDbEventResponse, std::convert::Infallible> {
    let mut failures = Vec::new();
    let mut published = 0;
    let mut silent = 0;
    // One invocation's records come from one mapping (one table); each table's
    // changes are published in stream order either way.
    let mut changes: [(Table, Vec<Change>); 2] =
        [(Table::Usage, Vec::new()), (Table::Aggregated, Vec::new())];
    for record in &event.payload.records {
        match state.config.table_of(&record.event_source_arn) {
            Some(table) => {
                if let Some((_, list)) = changes.iter_mut().find(|(t, _)| *t == table) {
                    list.push(record.change());
                }
            }
            None => {
                error!(source = %record.event_source_arn, position = %record.dynamodb.sequence_number, "a stream record from a table this function does not know; skipped");
                silent += 1;
            }
        }
    }
    for (table, list) in changes.iter().filter(|(_, list)| !list.is_empty()) {
        let report = publish(*table, list, state.bus.as_ref()).await;
        published += report.published;
        silent += report.silent;
        failures.extend(report.failed);
    }
    info!(
        records = event.payload.records.len(),
        published,
        silent,
        failed = failures.len(),
        "outcome events put"
    );
    Ok(awsmp_lambda::stream::batch_response(failures))
}

#[cfg(test)]
mod tests;

//! The buyer-events Lambda (events stack, us-east-1, only with `BuyerEvents=enabled`):
//! one DynamoDB stream event-source mapping on the subscribers table. Each change of a
//! row becomes zero or more buyer lifecycle events on the account's default bus
//! ([`awsmp_core::lifecycle::buyer_events`]); a change one of whose events the bus did
//! not take is reported as a batch item failure, so the stream delivers it (and the
//! changes after it) again with the same `eventId`s. It reads nothing and writes
//! nothing but the bus: never the customer-profile table.

use aws_lambda_events::streams::DynamoDbEventResponse;
use awsmp_core::config::ConfigError;
use awsmp_core::lifecycle::buyer_events::publish;
use awsmp_core::outcomes::Change;
use awsmp_lambda::EnvReader;
use awsmp_lambda::stream::{batch_response, table_name_of};
use lambda_runtime::LambdaEvent;
use tracing::{error, info};

pub use awsmp_lambda::stream::{
    StreamChange, StreamEvent, StreamRecord, dynamodb_image, failed_positions,
};

/// Every environment variable this function reads (its template sets exactly these).
pub const ENV_VARS: &[&str] = &["SUBSCRIBERS_TABLE"];

/// The function's configuration, read once at init.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `SUBSCRIBERS_TABLE`: the table whose stream the mapping reads.
    pub subscribers_table: String,
}

impl Config {
    /// Reads the variables through `lookup`; every problem is reported at once.
    pub fn from_lookup(lookup: &dyn Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let mut env = EnvReader::new(lookup);
        let config = Config {
            subscribers_table: env.subscribers_table(),
        };
        env.finish(config)
    }

    /// Whether a stream's source ARN is the subscribers table's.
    pub fn is_subscribers_stream(&self, event_source_arn: &str) -> bool {
        table_name_of(event_source_arn) == Some(self.subscribers_table.as_str())
    }
}

/// Handler state: the settings and the default bus (`State::connect` builds its
/// client once).
pub type State = awsmp_aws::BusState<Config>;

/// Handles one batch of stream records: publishes their buyer events and names the
/// records one of whose events was not taken. A record from a table the function does
/// not know is logged and skipped (retrying it could never succeed and would hold the
/// shard).
pub async fn handler(
    state: &State,
    event: LambdaEvent<StreamEvent>,
) -> Result<DynamoDbEventResponse, std::convert::Infallible> {
    let mut skipped = 0;
    let mut changes: Vec<Change> = Vec::new();
    for record in &event.payload.records {
        if state.config.is_subscribers_stream(&record.event_source_arn) {
            changes.push(record.change());
        } else {
            error!(source = %record.event_source_arn, position = %record.dynamodb.sequence_number, "a stream record from a table this function does not know; skipped");
            skipped += 1;
        }
    }
    let report = publish(&changes, state.bus.as_ref()).await;
    info!(
        records = event.payload.records.len(),
        published = report.published,
        silent = report.silent + skipped,
        failed = report.failed.len(),
        "buyer events put"
    );
    Ok(batch_response(report.failed))
}

#[cfg(test)]
mod tests;

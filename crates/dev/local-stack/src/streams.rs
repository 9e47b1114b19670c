//! DynamoDB stream event-source mappings, as Lambda runs them: read each shard of a
//! table's stream from its start (`TRIM_HORIZON`), pass only the records a mapping's
//! filters match ([`awsmp_local_aws::pattern`]), invoke the function with at most a
//! batch of them, and on a reported failure read again from the lowest failed
//! sequence number (so the records after it are delivered again too, as in AWS).
//! The stream is read over moto's DynamoDB Streams JSON API, and each record is handed
//! to the function exactly as the emulator returns it, plus its `eventSourceARN`.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use lambda_runtime::LambdaEvent;
use serde_json::{Value, json};

use awsmp_core::ports::Clock;

use crate::LocalError;
use crate::clock::LocalClock;
use crate::resources::LOCAL_REGION;
use crate::runtime::{LocalFunction, PollStats, context};

/// A stream read over the emulator's JSON API.
pub struct StreamMapping {
    /// Index of the function it feeds.
    pub function: usize,
    /// The table's stream ARN (`eventSourceARN` of each record).
    pub stream_arn: String,
    /// Batch size from the template.
    pub batch_size: u32,
    /// Whether the template asks for partial batch failures.
    pub report_batch_item_failures: bool,
    /// The mapping's filter patterns.
    pub filters: Vec<String>,
    /// Function timeout.
    pub timeout: Duration,
    clock: LocalClock,
    endpoint: String,
    http: reqwest::Client,
    /// Shard id -> the iterator to read next.
    iterators: Mutex<BTreeMap<String, String>>,
}

impl StreamMapping {
    /// A mapping of `stream_arn` onto function `function`, read from `endpoint` (moto).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        endpoint: &str,
        clock: &LocalClock,
        function: usize,
        stream_arn: String,
        batch_size: u32,
        report_batch_item_failures: bool,
        filters: Vec<String>,
        timeout: Duration,
    ) -> Self {
        StreamMapping {
            function,
            stream_arn,
            batch_size,
            report_batch_item_failures,
            filters,
            timeout,
            clock: clock.clone(),
            endpoint: endpoint.to_string(),
            http: reqwest::Client::new(),
            iterators: Mutex::new(BTreeMap::new()),
        }
    }

    async fn call(&self, action: &str, body: Value) -> Result<Value, LocalError> {
        // moto picks the service from the credential scope and the target; it checks
        // no signature.
        let response = self
            .http
            .post(&self.endpoint)
            .header("X-Amz-Target", format!("DynamoDBStreams_20120810.{action}"))
            .header("Content-Type", "application/x-amz-json-1.0")
            .header(
                "Authorization",
                format!("AWS4-HMAC-SHA256 Credential=test/20260101/{LOCAL_REGION}/dynamodb/aws4_request, SignedHeaders=host, Signature=0"),
            )
            .body(body.to_string())
            .send()
            .await
            .map_err(|e| LocalError::Aws(format!("{action} {}: {e}", self.stream_arn)))?;
        let status = response.status();
        let text = response
            .text()
            .await
            .map_err(|e| LocalError::Aws(format!("{action}: {e}")))?;
        if !status.is_success() {
            return Err(LocalError::Aws(format!(
                "{action} answered {status}: {text}"
            )));
        }
        serde_json::from_str(&text).map_err(|e| LocalError::Aws(format!("{action}: {e}: {text}")))
    }

    async fn iterator(
        &self,
        shard: &str,
        kind: &str,
        sequence: Option<&str>,
    ) -> Result<String, LocalError> {
        let mut body =
            json!({"StreamArn": self.stream_arn, "ShardId": shard, "ShardIteratorType": kind});
        if let Some(sequence) = sequence {
            body["SequenceNumber"] = json!(sequence);
        }
        let out = self.call("GetShardIterator", body).await?;
        out["ShardIterator"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| LocalError::Aws(format!("GetShardIterator gave no iterator: {out}")))
    }

    /// Reads one batch from every shard and hands the records its filters pass to
    /// `function`.
    pub async fn poll_once(&self, function: &dyn LocalFunction) -> Result<PollStats, LocalError> {
        let description = self
            .call("DescribeStream", json!({"StreamArn": self.stream_arn}))
            .await?;
        let shards: Vec<String> = description["StreamDescription"]["Shards"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s["ShardId"].as_str().map(str::to_string))
            .collect();
        let mut stats = PollStats::default();
        for shard in shards {
            let known = crate::lock(&self.iterators).get(&shard).cloned();
            let iterator = match known {
                Some(iterator) => iterator,
                None => self.iterator(&shard, "TRIM_HORIZON", None).await?,
            };
            let out = self
                .call(
                    "GetRecords",
                    json!({"ShardIterator": iterator, "Limit": self.batch_size.max(1)}),
                )
                .await?;
            let next = out["NextShardIterator"].as_str().map(str::to_string);
            let records: Vec<Value> = out["Records"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(|mut r| {
                    r["eventSourceARN"] = json!(self.stream_arn);
                    r
                })
                .filter(|r| awsmp_local_aws::pattern::any_matches(&self.filters, r))
                .collect();
            let advance = |next: Option<String>| {
                if let Some(next) = next {
                    crate::lock(&self.iterators).insert(shard.clone(), next);
                }
            };
            if records.is_empty() {
                advance(next);
                continue;
            }
            stats.received += records.len();
            let first = records[0]["dynamodb"]["SequenceNumber"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let result = function
                .stream(LambdaEvent::new(
                    json!({ "Records": records }),
                    context(function.name(), self.timeout, self.clock.now()),
                ))
                .await;
            let failed: Vec<String> = match result {
                Ok(response) if self.report_batch_item_failures => response["batchItemFailures"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|f| f["itemIdentifier"].as_str().map(str::to_string))
                    .collect(),
                Ok(_) => Vec::new(),
                Err(e) => {
                    tracing::warn!(function = function.name(), error = %e, "invocation failed; the batch will be delivered again");
                    vec![first]
                }
            };
            // Lambda checkpoints before the lowest failed sequence number.
            match failed
                .iter()
                .min_by_key(|s| s.parse::<u128>().unwrap_or(u128::MAX))
            {
                None => advance(next),
                Some(lowest) => {
                    stats.failed += failed.len();
                    let again = self
                        .iterator(&shard, "AT_SEQUENCE_NUMBER", Some(lowest))
                        .await?;
                    crate::lock(&self.iterators).insert(shard.clone(), again);
                }
            }
        }
        Ok(stats)
    }
}

//! [`MetricsSink`] as CloudWatch Embedded Metric Format: one JSON line per count on
//! stdout, which Lambda's log pipeline turns into metrics with no API call.
//!
//! Line format (namespace `AwsMarketplace/Metering`, unit `Count`):
//!
//! ```json
//! {"_aws":{"Timestamp":1764497742000,"CloudWatchMetrics":[{"Namespace":"AwsMarketplace/Metering",
//!   "Dimensions":[["Reason"]],"Metrics":[{"Name":"UsageRecordRejected","Unit":"Count"}]}]},
//!  "Reason":"MalformedTimestamp","UsageRecordRejected":3}
//! ```
//!
//! (one line in practice). A count with no dimensions has `"Dimensions":[[]]`.

use std::io::Write;
use std::sync::Mutex;

use awsmp_core::ports::{MetricsSink, metric};
use serde_json::{Map, Value, json};

/// Writes EMF lines to stdout (or any writer, for tests).
pub struct EmfMetrics {
    out: Mutex<Box<dyn Write + Send>>,
}

impl std::fmt::Debug for EmfMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmfMetrics").finish_non_exhaustive()
    }
}

impl EmfMetrics {
    /// EMF lines on the process's stdout (Lambda ships them to CloudWatch); in a
    /// process routed to the local stack with a metrics log, to that file instead.
    pub fn stdout() -> Self {
        match crate::local::local_metrics_writer() {
            Some(file) => EmfMetrics {
                out: Mutex::new(file),
            },
            None => Self::to_writer(std::io::stdout()),
        }
    }

    /// EMF lines on `writer`.
    pub fn to_writer(writer: impl Write + Send + 'static) -> Self {
        EmfMetrics {
            out: Mutex::new(Box::new(writer)),
        }
    }
}

/// One EMF line (without the newline) for `value` of `name` with `dimensions`, stamped
/// `timestamp_ms` (milliseconds since the epoch).
pub fn emf_line(name: &str, dimensions: &[(&str, &str)], value: u64, timestamp_ms: i64) -> String {
    let dimension_names: Vec<&str> = dimensions.iter().map(|(k, _)| *k).collect();
    let mut root = Map::new();
    root.insert(
        "_aws".to_string(),
        json!({
            "Timestamp": timestamp_ms,
            "CloudWatchMetrics": [{
                "Namespace": metric::NAMESPACE,
                "Dimensions": [dimension_names],
                "Metrics": [{ "Name": name, "Unit": "Count" }],
            }],
        }),
    );
    for (key, val) in dimensions {
        root.insert((*key).to_string(), Value::String((*val).to_string()));
    }
    root.insert(name.to_string(), json!(value));
    Value::Object(root).to_string()
}

impl MetricsSink for EmfMetrics {
    fn count(&self, name: &str, dimensions: &[(&str, &str)], value: u64) {
        let mut line = emf_line(
            name,
            dimensions,
            value,
            chrono::Utc::now().timestamp_millis(),
        );
        line.push('\n');
        let mut out = self
            .out
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // One write per line, so concurrent log lines never split a metric.
        if let Err(e) = out.write_all(line.as_bytes()).and_then(|()| out.flush()) {
            // A lost metric must not fail metering; say so in the logs.
            tracing::warn!(metric = name, error = %e, "could not write an EMF metric line");
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn one_emf_line_per_count_with_dimensions_and_value() {
        let buffer = Shared::default();
        let metrics = EmfMetrics::to_writer(buffer.clone());
        metrics.count(
            metric::USAGE_RECORD_REJECTED,
            &[("Reason", "MalformedTimestamp")],
            3,
        );
        metrics.count(metric::USAGE_RECORD_SUBMITTED, &[], 25);
        let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        let first: Value = serde_json::from_str(lines[0]).unwrap();
        let directive = &first["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(directive["Namespace"], "AwsMarketplace/Metering");
        assert_eq!(directive["Dimensions"], json!([["Reason"]]));
        assert_eq!(
            directive["Metrics"],
            json!([{"Name": "UsageRecordRejected", "Unit": "Count"}])
        );
        assert_eq!(first["Reason"], "MalformedTimestamp");
        assert_eq!(first["UsageRecordRejected"], 3);
        assert!(first["_aws"]["Timestamp"].as_i64().unwrap() > 1_700_000_000_000);
        let second: Value = serde_json::from_str(lines[1]).unwrap();
        assert_eq!(
            second["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
            json!([[]])
        );
        assert_eq!(second["UsageRecordSubmitted"], 25);
    }
}

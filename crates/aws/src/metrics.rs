//! [`MetricsSink`] as CloudWatch Embedded Metric Format: one JSON line per count on
//! stdout, which Lambda's log pipeline turns into metrics with no API call.
//!
//! Every metric carries the deployment's `ProductCode` and `Stage` dimensions first, so
//! the alarms of one stage (or product) never fire on another's numbers in the same
//! account and Region. Line format (namespace `AwsMarketplace/Metering`, unit `Count`):
//!
//! ```json
//! {"_aws":{"Timestamp":1764497742000,"CloudWatchMetrics":[{"Namespace":"AwsMarketplace/Metering",
//!   "Dimensions":[["ProductCode","Stage","Reason"]],"Metrics":[{"Name":"UsageRecordRejected","Unit":"Count"}]}]},
//!  "ProductCode":"abc123","Stage":"prod","Reason":"MalformedTimestamp","UsageRecordRejected":3}
//! ```
//!
//! (one line in practice). A count with no dimensions of its own has
//! `"Dimensions":[["ProductCode","Stage"]]`.

use std::io::Write;
use std::sync::Mutex;

use awsmp_core::ports::{MetricsSink, metric};
use serde_json::{Map, Value, json};

/// The dimension naming the product on every metric.
pub const PRODUCT_CODE_DIMENSION: &str = "ProductCode";
/// The dimension naming the stage on every metric.
pub const STAGE_DIMENSION: &str = "Stage";

/// Why a `STAGE` value is refused (it must match the templates' `StageName` pattern:
/// a lowercase letter, then up to 15 lowercase letters, digits or hyphens).
pub fn stage_problem(stage: &str) -> Option<String> {
    let mut chars = stage.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_lowercase());
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if first_ok && rest_ok && stage.len() <= 16 {
        None
    } else {
        Some(format!(
            "STAGE={stage:?} is not a stage name (a lowercase letter, then up to 15 lowercase \
             letters, digits or hyphens: the template sets it from StageName)"
        ))
    }
}

/// Writes EMF lines to stdout (or any writer, for tests), each with the deployment's
/// `ProductCode` and `Stage`.
pub struct EmfMetrics {
    out: Mutex<Box<dyn Write + Send>>,
    product_code: String,
    stage: String,
}

impl std::fmt::Debug for EmfMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmfMetrics")
            .field("product_code", &self.product_code)
            .field("stage", &self.stage)
            .finish_non_exhaustive()
    }
}

impl EmfMetrics {
    /// EMF lines on the process's stdout (Lambda ships them to CloudWatch).
    pub fn stdout(product_code: &str, stage: &str) -> Self {
        Self::to_writer(std::io::stdout(), product_code, stage)
    }

    /// EMF lines on `writer`.
    pub fn to_writer(writer: impl Write + Send + 'static, product_code: &str, stage: &str) -> Self {
        EmfMetrics {
            out: Mutex::new(Box::new(writer)),
            product_code: product_code.to_string(),
            stage: stage.to_string(),
        }
    }
}

/// One EMF line (without the newline) for `value` of `name` with `dimensions`, stamped
/// `timestamp_ms` (milliseconds since the epoch). The caller includes the deployment's
/// dimensions ([`EmfMetrics`] puts `ProductCode` and `Stage` first).
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
        let mut all: Vec<(&str, &str)> = Vec::with_capacity(dimensions.len() + 2);
        all.push((PRODUCT_CODE_DIMENSION, &self.product_code));
        all.push((STAGE_DIMENSION, &self.stage));
        // A handler's own dimension never overrides the deployment's.
        all.extend(
            dimensions
                .iter()
                .filter(|(k, _)| *k != PRODUCT_CODE_DIMENSION && *k != STAGE_DIMENSION),
        );
        let mut line = emf_line(name, &all, value, chrono::Utc::now().timestamp_millis());
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

    fn lines(buffer: &Shared) -> Vec<Value> {
        let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    #[test]
    fn one_emf_line_per_count_with_dimensions_and_value() {
        let buffer = Shared::default();
        let metrics = EmfMetrics::to_writer(buffer.clone(), "abc123", "prod");
        metrics.count(
            metric::USAGE_RECORD_REJECTED,
            &[("Reason", "MalformedTimestamp")],
            3,
        );
        metrics.count(metric::USAGE_RECORD_SUBMITTED, &[], 25);
        let lines = lines(&buffer);
        assert_eq!(lines.len(), 2);
        let first = &lines[0];
        let directive = &first["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(directive["Namespace"], "AwsMarketplace/Metering");
        assert_eq!(
            directive["Dimensions"],
            json!([["ProductCode", "Stage", "Reason"]])
        );
        assert_eq!(
            directive["Metrics"],
            json!([{"Name": "UsageRecordRejected", "Unit": "Count"}])
        );
        assert_eq!(first["Reason"], "MalformedTimestamp");
        assert_eq!(first["UsageRecordRejected"], 3);
        assert!(first["_aws"]["Timestamp"].as_i64().unwrap() > 1_700_000_000_000);
        let second = &lines[1];
        assert_eq!(
            second["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
            json!([["ProductCode", "Stage"]])
        );
        assert_eq!(second["UsageRecordSubmitted"], 25);
    }

    #[test]
    fn every_metric_names_its_product_and_stage() {
        // GIVEN two deployments writing to the same log stream
        let buffer = Shared::default();
        let dev = EmfMetrics::to_writer(buffer.clone(), "abc123", "dev");
        let other = EmfMetrics::to_writer(buffer.clone(), "xyz789", "prod");
        // WHEN each counts, one even trying to name another stage
        dev.count(metric::INCOMPLETE_RUN, &[("Function", "submitter")], 1);
        other.count(metric::UNEXPECTED_DUPLICATE_RECORD, &[("Stage", "dev")], 1);
        // THEN every line is dimensioned by its own product and stage
        let lines = lines(&buffer);
        let scopes: Vec<(String, String, Value)> = lines
            .iter()
            .map(|l| {
                (
                    l["ProductCode"].as_str().unwrap().to_string(),
                    l["Stage"].as_str().unwrap().to_string(),
                    l["_aws"]["CloudWatchMetrics"][0]["Dimensions"][0].clone(),
                )
            })
            .collect();
        assert_eq!(
            scopes,
            vec![
                (
                    "abc123".into(),
                    "dev".into(),
                    json!(["ProductCode", "Stage", "Function"])
                ),
                (
                    "xyz789".into(),
                    "prod".into(),
                    json!(["ProductCode", "Stage"])
                ),
            ]
        );
    }

    #[test]
    fn stage_names_follow_the_template_pattern() {
        for good in ["prod", "dev", "a", "stage-2", "abcdefghijklmnop"] {
            assert_eq!(stage_problem(good), None, "{good}");
        }
        for bad in [
            "",
            "Prod",
            "2dev",
            "-x",
            "dev_1",
            "abcdefghijklmnopq",
            "pr od",
        ] {
            let problem = stage_problem(bad).expect(bad);
            assert!(problem.contains("StageName"), "{problem}");
        }
    }
}

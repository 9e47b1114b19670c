//! [`MetricsSink`] that keeps the counts in process: what the handlers emitted, for the
//! local stack, simulations and tests.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::ports::MetricsSink;
use crate::sync::lock;

/// A metric series: name plus its dimensions, sorted by dimension name.
type Series = (String, Vec<(String, String)>);

/// [`MetricsSink`] that adds up counts per name and dimension set (dimension order
/// does not matter).
#[derive(Debug, Clone, Default)]
pub struct RecordingMetrics {
    counts: Arc<Mutex<BTreeMap<Series, u64>>>,
}

fn series(name: &str, dimensions: &[(&str, &str)]) -> Series {
    let mut dims: Vec<(String, String)> = dimensions
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    dims.sort();
    (name.to_string(), dims)
}

impl RecordingMetrics {
    /// An empty recorder.
    pub fn new() -> Self {
        Self::default()
    }

    /// The count of `name` with exactly these dimensions (0 if never counted).
    pub fn get(&self, name: &str, dimensions: &[(&str, &str)]) -> u64 {
        lock(&self.counts)
            .get(&series(name, dimensions))
            .copied()
            .unwrap_or(0)
    }

    /// The count of `name` summed over every dimension set.
    pub fn total(&self, name: &str) -> u64 {
        lock(&self.counts)
            .iter()
            .filter(|((n, _), _)| n == name)
            .map(|(_, v)| *v)
            .sum()
    }

    /// Every series and its count.
    pub fn snapshot(&self) -> BTreeMap<(String, Vec<(String, String)>), u64> {
        lock(&self.counts).clone()
    }
}

impl MetricsSink for RecordingMetrics {
    fn count(&self, name: &str, dimensions: &[(&str, &str)], value: u64) {
        let mut counts = lock(&self.counts);
        let total = counts.entry(series(name, dimensions)).or_insert(0);
        *total = total.saturating_add(value);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    #[test]
    fn metrics_count_by_name_and_dimensions() {
        let metrics = RecordingMetrics::new();
        metrics.count(
            "UsageRecordRejected",
            &[("Reason", "MalformedTimestamp")],
            1,
        );
        metrics.count(
            "UsageRecordRejected",
            &[("Reason", "MalformedTimestamp")],
            2,
        );
        metrics.count("UsageRecordRejected", &[("Reason", "TooManyTags")], 1);
        metrics.count("X", &[("b", "2"), ("a", "1")], 1);
        assert_eq!(
            metrics.get("UsageRecordRejected", &[("Reason", "MalformedTimestamp")]),
            3
        );
        assert_eq!(metrics.total("UsageRecordRejected"), 4);
        assert_eq!(metrics.get("X", &[("a", "1"), ("b", "2")]), 1);
        assert_eq!(metrics.get("Missing", &[]), 0);
    }
}

//! `awsmp usage import` and `usage put`: each line is checked as the aggregator will
//! check it (`awsmp_core::guardrails::write`), written into exactly one deployment
//! ([`one_deployment`]), and an interrupted import resumes from progress kept per
//! target table and per content of the file ([`write_lines`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use awsmp_core::ports::{EventConflict, IngestOutcome, NewUsageRow, PortError, UsageStore};
use awsmp_core::time::Instant;

/// A write command naming several deployments. Marketplace deduplicates usage per
/// Region, so usage written into several Regions' tables is billed once in each.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{command} writes into one deployment, got {given}: Marketplace deduplicates usage per Region, so usage written into several Regions is billed once in each. Name the one Region whose stack meters this usage with --region"
)]
pub struct SeveralDeployments {
    /// The command.
    pub command: String,
    /// What its arguments named.
    pub given: String,
}

/// The one deployment a write command (`usage put`, `usage import`) writes into, of
/// those its arguments `named` (`None`: they named none, the caller's default).
pub fn one_deployment<T: std::fmt::Display>(
    command: &str,
    mut named: Vec<T>,
) -> Result<Option<T>, SeveralDeployments> {
    if named.len() > 1 {
        return Err(SeveralDeployments {
            command: command.to_string(),
            given: named
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", "),
        });
    }
    Ok(named.pop())
}

/// What one import writes into and from: the key its progress is kept under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportTarget {
    /// The usage table and its Region.
    pub table: String,
    /// Hex SHA-256 of the file's content.
    pub sha256: String,
}

impl ImportTarget {
    /// Importing `content` into `usage_table` in `region`.
    pub fn new(region: &str, usage_table: &str, content: &[u8]) -> Self {
        use sha2::{Digest, Sha256};
        ImportTarget {
            table: format!("{region}/{usage_table}"),
            sha256: Sha256::digest(content)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect(),
        }
    }
}

/// Progress of importing one file, per target table: a rerun into the same table of
/// the same content resumes after the last completed line; an import into another
/// table (another Region or stage), or of a changed file (even one edited to the same
/// length), starts from the first line (the event ids make that safe).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Progress {
    /// [`ImportTarget::table`] -> how far the import into it got.
    targets: BTreeMap<String, TargetProgress>,
}

/// How far the import of one version of the file into one table got.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
struct TargetProgress {
    /// [`ImportTarget::sha256`] of the file imported.
    sha256: String,
    /// Usage lines completed, in order.
    done: usize,
}

impl Progress {
    /// Lines an earlier run into `target` completed: none for another table or for
    /// other content.
    pub fn resume_point(&self, target: &ImportTarget) -> usize {
        match self.targets.get(&target.table) {
            Some(p) if p.sha256 == target.sha256 => p.done,
            _ => 0,
        }
    }

    fn record(&mut self, target: &ImportTarget, done: usize) {
        self.targets.insert(
            target.table.clone(),
            TargetProgress {
                sha256: target.sha256.clone(),
                done,
            },
        );
    }
}

/// Where an import's progress is kept (beside the file, for the CLI), and who is shown it.
pub trait ProgressKeeper {
    /// Keeps `progress` (every [`KEEP_EVERY`] lines and at the end).
    fn keep(&mut self, progress: &Progress) -> Result<(), String>;
    /// One more line handled.
    fn advanced(&mut self) {}
}

/// Lines between two saves of an import's progress.
pub const KEEP_EVERY: usize = 100;

/// What writing an import's lines did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Written {
    /// Rows written now.
    pub written: usize,
    /// Lines whose event id was already written with the same usage (a rerun).
    pub already_written: usize,
    /// Lines skipped because an earlier run of this import, into the same table and of
    /// the same content, completed them.
    pub resumed_past: usize,
    /// Lines not written because their event id holds other usage: line number, conflict.
    pub conflicts: Vec<(usize, EventConflict)>,
}

/// Why an import stopped before its last line (rerun it: it resumes).
#[derive(Debug, thiserror::Error)]
pub enum ImportStopped {
    /// The usage table.
    #[error(transparent)]
    Store(#[from] PortError),
    /// Progress could not be kept.
    #[error("{0}")]
    Keep(String),
}

/// Writes the checked `lines` (line number, row) of an import into `store` at `now`,
/// resuming after what `progress` says an earlier run into `target` completed (from
/// the first line when `restart`), keeping progress through `keeper`.
pub async fn write_lines(
    store: &dyn UsageStore,
    lines: &[(usize, NewUsageRow)],
    target: &ImportTarget,
    restart: bool,
    progress: &mut Progress,
    keeper: &mut dyn ProgressKeeper,
    now: Instant,
) -> Result<Written, ImportStopped> {
    let start = if restart {
        0
    } else {
        progress.resume_point(target).min(lines.len())
    };
    let mut out = Written {
        resumed_past: start,
        ..Written::default()
    };
    for (i, (number, row)) in lines.iter().enumerate().skip(start) {
        match store.put_row(row, now).await? {
            IngestOutcome::Created => out.written += 1,
            IngestOutcome::Duplicate => out.already_written += 1,
            IngestOutcome::Conflict(conflict) => out.conflicts.push((*number, *conflict)),
        }
        keeper.advanced();
        if (i + 1) % KEEP_EVERY == 0 || i + 1 == lines.len() {
            progress.record(target, i + 1);
            keeper.keep(progress).map_err(ImportStopped::Keep)?;
        }
    }
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use awsmp_core::time::parse_usage_timestamp;

    #[test]
    fn a_write_names_one_deployment() {
        assert_eq!(one_deployment::<&str>("usage put", vec![]), Ok(None));
        assert_eq!(one_deployment("usage put", vec!["a"]), Ok(Some("a")));
        let several = one_deployment("usage import", vec!["a", "b"]).unwrap_err();
        assert_eq!(several.given, "a, b");
        assert!(several.to_string().contains("billed once in each"));
    }

    struct Kept(Vec<Progress>);

    impl ProgressKeeper for Kept {
        fn keep(&mut self, progress: &Progress) -> Result<(), String> {
            self.0.push(progress.clone());
            Ok(())
        }
    }

    /// GIVEN a file imported into one table WHEN it is imported again, into another
    /// table, or edited to the same length THEN only the same content into the same
    /// table resumes; every other import checks each line again.
    #[tokio::test]
    async fn progress_resumes_only_the_same_content_into_the_same_table() {
        let tables = awsmp_core::memory::MemoryTables::new();
        let store = tables.usage_store();
        let now = parse_usage_timestamp("2026-11-30T12:30:00Z").unwrap();
        let hour = parse_usage_timestamp("2026-11-30T11:00:00Z").unwrap();
        let license = "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0";
        let lines: Vec<(usize, NewUsageRow)> = (0..3)
            .map(|n| {
                let row = awsmp_core::memory::fixtures::usage_row(
                    license,
                    "111122223333",
                    "requests",
                    hour,
                    1,
                    &format!("e{n}"),
                );
                (n + 1, row)
            })
            .collect();
        let first = ImportTarget::new("us-east-1", "usage", b"abc");
        let mut progress = Progress::default();
        let mut kept = Kept(Vec::new());
        let done = write_lines(&store, &lines, &first, false, &mut progress, &mut kept, now)
            .await
            .unwrap();
        assert_eq!((done.written, done.resumed_past), (3, 0));
        assert_eq!(kept.0.last(), Some(&progress));
        let again = write_lines(&store, &lines, &first, false, &mut progress, &mut kept, now)
            .await
            .unwrap();
        assert_eq!((again.written, again.resumed_past), (0, 3));
        let edited = ImportTarget::new("us-east-1", "usage", b"abd");
        assert_eq!(progress.resume_point(&edited), 0);
        let elsewhere = ImportTarget::new("us-west-2", "usage", b"abc");
        assert_eq!(progress.resume_point(&elsewhere), 0);
        let rerun = write_lines(
            &store,
            &lines,
            &edited,
            false,
            &mut progress,
            &mut kept,
            now,
        )
        .await
        .unwrap();
        assert_eq!((rerun.already_written, rerun.resumed_past), (3, 0));
        let restarted = write_lines(&store, &lines, &first, true, &mut progress, &mut kept, now)
            .await
            .unwrap();
        assert_eq!((restarted.already_written, restarted.resumed_past), (3, 0));
    }
}

//! `awsmp usage import FILE`: usage from a CSV or JSON Lines file. Every line is checked
//! first, exactly as the aggregator would check the row; a file with a bad line writes
//! nothing unless `--write-valid` says so, and each bad line is reported with its line
//! number and reason code. Each line's event id makes a rerun a no-op (a line reusing
//! an event id with other usage is a conflict, listed and not written), and progress
//! is kept beside the file (`FILE.awsmp-import`), per target table and per content
//! hash of the file, so an interrupted import into the same table resumes where it
//! stopped, while an import into another table, or of an edited file, checks every
//! line again.
//!
//! CSV columns (header required, any order): `licenseArn`, `customerAWSAccountId`,
//! `dimension`, `timestamp`, `quantity`, `eventId`, optional `productCode` and `tags`
//! (`key=value;key=value`, for the whole quantity). JSON Lines: the same keys, plus
//! optional `usageAllocations` (`[{"allocatedUsageQuantity": N, "tags": [{"key","value"}]}]`).

use std::path::{Path, PathBuf};

use awsmp_core::guardrails::write::{RowProblem, check_row, judge_refused_repeat};
use awsmp_core::guardrails::{GuardrailContext, quantity_of_json};
use awsmp_core::model::{Allocation, ReasonCode, Tag, attr};
use awsmp_core::ports::{EventContent, NewUsageRow, UsageStore};
use awsmp_core::remedy::{for_reason, server_side_pair};
use awsmp_core::time::{Instant, parse_usage_timestamp};
use awsmp_operate::import::{ImportStopped, ImportTarget, Progress, ProgressKeeper, write_lines};
use serde::{Deserialize, Serialize};

use crate::error::CommandError;

/// The columns a CSV file's header line must name (any order; `productCode` and `tags`
/// may follow).
pub const CSV_COLUMNS: [&str; 6] = [
    "licenseArn",
    "customerAWSAccountId",
    "dimension",
    "timestamp",
    "quantity",
    "eventId",
];

/// What `awsmp usage import --help` says a file holds.
pub const FILE_HELP: &str = "\
The file:
  CSV: a header line naming the columns (any order), then one line per usage row:
    licenseArn,customerAWSAccountId,dimension,timestamp,quantity,eventId
    arn:aws:license-manager::123456789012:license:l-1,111122223333,api,2026-11-30T10:15:00Z,3,req-42
  optional columns: productCode (must be the stack's), tags (key=value;key=value, for the
  whole quantity).
  JSON Lines: one object per line with the same keys; quantity may be a number, and
  usageAllocations ([{\"allocatedUsageQuantity\": 3, \"tags\": [{\"key\": \"team\", \"value\": \"a\"}]}])
  takes the place of tags:
    {\"licenseArn\": \"arn:aws:license-manager::123456789012:license:l-1\", \"customerAWSAccountId\": \"111122223333\", \"dimension\": \"api\", \"timestamp\": \"2026-11-30T10:15:00Z\", \"quantity\": 3, \"eventId\": \"req-42\"}
Timestamps are UTC, YYYY-MM-DDTHH:MM:SS[Z], inside Marketplace's 24 h window. An empty
file, or a CSV file without its header line, is refused.";

/// One line of a file: its number, and its row or why it is bad.
pub type ParsedLine = (usize, Result<NewUsageRow, BadLine>);

/// File format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FileFormat {
    /// Comma-separated values with a header line.
    Csv,
    /// One JSON object per line.
    Jsonl,
}

impl FileFormat {
    /// The format a file name implies (`.csv`, `.jsonl`/`.ndjson`).
    pub fn of(path: &Path) -> Option<FileFormat> {
        match path.extension()?.to_str()? {
            "csv" => Some(FileFormat::Csv),
            "jsonl" | "ndjson" => Some(FileFormat::Jsonl),
            _ => None,
        }
    }
}

/// A line that will not be written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct BadLine {
    /// 1-based line number in the file.
    pub line: usize,
    /// The reason code the aggregator would give, when it is one.
    pub reason: Option<String>,
    /// The server-side exception paired with it, when there is one.
    pub server_side: Option<String>,
    /// What is wrong and what to do.
    pub message: String,
}

/// A line whose event id was already written with other usage: not written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct ConflictLine {
    /// 1-based line number in the file.
    pub line: usize,
    /// The reused event id.
    pub event_id: String,
    /// What the first write of the id stored (`null` when its row is gone).
    pub recorded: Option<EventContent>,
    /// What this line carries.
    pub this: EventContent,
    /// Both, and what to do.
    pub message: String,
}

/// What an import did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct ImportReport {
    /// Usage lines in the file.
    pub lines: usize,
    /// Rows written now.
    pub written: usize,
    /// Lines whose event id was already written with the same usage (a rerun).
    pub already_written: usize,
    /// Lines skipped because an earlier run of this import, into the same table and of
    /// the same file content, completed them.
    pub resumed_past: usize,
    /// Lines not written.
    pub bad: Vec<BadLine>,
    /// Lines not written because their event id was already written with other usage.
    pub conflicts: Vec<ConflictLine>,
}

/// One parsed line, before the guardrails.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Line {
    license_arn: Option<String>,
    #[serde(rename = "customerAWSAccountId")]
    customer_aws_account_id: Option<String>,
    dimension: Option<String>,
    timestamp: Option<String>,
    quantity: Option<serde_json::Value>,
    event_id: Option<String>,
    product_code: Option<String>,
    tags: Option<String>,
    usage_allocations: Option<Vec<JsonAllocation>>,
    /// The tables' TTL attribute, reserved to the pipeline: a line naming it is refused.
    expires_at: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
struct JsonAllocation {
    allocated_usage_quantity: serde_json::Value,
    #[serde(default)]
    tags: Vec<Tag>,
}

fn rejected(line: usize, code: ReasonCode) -> BadLine {
    BadLine {
        line,
        reason: Some(code.to_string()),
        server_side: server_side_pair(code).map(str::to_string),
        message: for_reason(code).to_string(),
    }
}

/// A line the write-time check refuses: the aggregator's reason, or why its hour's
/// record can no longer be sent.
fn refused(line: usize, problem: &RowProblem) -> BadLine {
    match problem {
        RowProblem::Rejected(code) => rejected(line, *code),
        RowProblem::Unsendable(why) => BadLine {
            message: why.to_string(),
            ..rejected(line, ReasonCode::TimestampOutOfWindow)
        },
        RowProblem::Unwritable(m) => malformed(line, m.clone()),
    }
}

fn malformed(line: usize, message: String) -> BadLine {
    BadLine {
        line,
        reason: None,
        server_side: None,
        message,
    }
}

fn tags_column(text: &str) -> Result<Vec<Tag>, String> {
    text.split(';')
        .filter(|t| !t.trim().is_empty())
        .map(|t| {
            t.split_once('=')
                .map(|(k, v)| Tag {
                    key: k.trim().to_string(),
                    value: v.trim().to_string(),
                })
                .ok_or_else(|| {
                    format!("tags: {t:?} is not key=value (write tags as key=value;key=value)")
                })
        })
        .collect()
}

/// The row of one parsed line, or why not.
fn to_row(number: usize, line: Line) -> Result<NewUsageRow, BadLine> {
    let required = |value: Option<String>, name: &str| {
        value
            .filter(|v| !v.trim().is_empty())
            .ok_or_else(|| malformed(number, format!("{name} is missing")))
    };
    if line.expires_at.is_some() {
        return Err(rejected(number, ReasonCode::ReservedAttribute));
    }
    let license_arn = required(line.license_arn, "licenseArn")?;
    let event_id = required(line.event_id, "eventId")?;
    let timestamp_text = required(line.timestamp, "timestamp")?;
    let timestamp = parse_usage_timestamp(timestamp_text.trim())
        .map_err(|_| rejected(number, ReasonCode::MalformedTimestamp))?;
    let quantity = match &line.quantity {
        Some(v) => quantity_of_json(v).map_err(|code| rejected(number, code))?,
        None => return Err(rejected(number, ReasonCode::NonNumericQuantity)),
    };
    let allocations = match (line.usage_allocations, line.tags) {
        (Some(_), Some(_)) => {
            return Err(malformed(
                number,
                "give either tags or usageAllocations, not both".into(),
            ));
        }
        (Some(list), None) => Some(
            list.into_iter()
                .map(|a| {
                    Ok(Allocation {
                        quantity: quantity_of_json(&a.allocated_usage_quantity).map_err(|_| {
                            rejected(number, ReasonCode::NegativeOrNonIntegerAllocation)
                        })?,
                        tags: a.tags,
                    })
                })
                .collect::<Result<Vec<_>, BadLine>>()?,
        ),
        (None, Some(text)) if !text.trim().is_empty() => Some(vec![Allocation {
            quantity,
            tags: tags_column(&text).map_err(|m| malformed(number, m))?,
        }]),
        (None, _) => None,
    };
    Ok(NewUsageRow {
        license_arn: license_arn.trim().to_string(),
        customer_aws_account_id: line
            .customer_aws_account_id
            .unwrap_or_default()
            .trim()
            .to_string(),
        dimension: line.dimension.unwrap_or_default(),
        timestamp,
        quantity,
        allocations,
        product_code: line.product_code.filter(|p| !p.is_empty()),
        event_id: event_id.trim().to_string(),
        timestamp_defaulted: false,
    })
}

/// Parses a whole file: each usage line's number and row, or why it is bad.
///
/// A file with no usage line at all, or a CSV file whose first line is not a header
/// naming [`CSV_COLUMNS`], is refused whole: what is wrong, and what to write.
pub fn parse(text: &str, format: FileFormat) -> Result<Vec<ParsedLine>, String> {
    let lines = parse_lines(text, format)?;
    if lines.is_empty() {
        return Err(format!(
            "the file has no usage lines: {}",
            expected_shape(format)
        ));
    }
    Ok(lines)
}

/// What a file of `format` holds, for the messages that refuse one.
fn expected_shape(format: FileFormat) -> String {
    match format {
        FileFormat::Csv => format!(
            "a CSV file starts with the header line `{}` (optional `productCode` and `tags` columns may follow), then one line per usage row",
            CSV_COLUMNS.join(",")
        ),
        FileFormat::Jsonl => format!(
            "a JSON Lines file holds one object per line with the keys {} (optional `productCode` and `usageAllocations`)",
            CSV_COLUMNS.join(", ")
        ),
    }
}

fn parse_lines(text: &str, format: FileFormat) -> Result<Vec<ParsedLine>, String> {
    Ok(match format {
        FileFormat::Jsonl => text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(i, l)| {
                let number = i + 1;
                let row = serde_json::from_str::<Line>(l)
                    .map_err(|e| malformed(number, format!("not a JSON object of usage: {e}")))
                    .and_then(|line| to_row(number, line));
                (number, row)
            })
            .collect(),
        FileFormat::Csv => {
            let mut reader = csv::ReaderBuilder::new()
                .trim(csv::Trim::Headers)
                .flexible(false)
                .from_reader(text.as_bytes());
            let headers = match reader.headers() {
                Ok(h) => h.clone(),
                Err(e) => return Ok(vec![(1, Err(malformed(1, format!("header line: {e}"))))]),
            };
            let missing: Vec<&str> = CSV_COLUMNS
                .iter()
                .filter(|c| !headers.iter().any(|h| h == **c))
                .copied()
                .collect();
            if !headers.is_empty() && !missing.is_empty() {
                return Err(format!(
                    "the header line names no column {}: {}",
                    missing.join(", "),
                    expected_shape(format)
                ));
            }
            reader
                .records()
                .map(|record| {
                    let number = record
                        .as_ref()
                        .ok()
                        .and_then(|r| r.position())
                        .map_or(0, |p| p.line() as usize);
                    let row = match record {
                        Err(e) => {
                            let number = e.position().map_or(0, |p| p.line() as usize);
                            return (
                                number,
                                Err(malformed(number, format!("not a CSV line: {e}"))),
                            );
                        }
                        Ok(record) => {
                            let field = |name: &str| {
                                headers
                                    .iter()
                                    .position(|h| h == name)
                                    .and_then(|i| record.get(i))
                                    .map(str::to_string)
                            };
                            let line = Line {
                                license_arn: field("licenseArn"),
                                customer_aws_account_id: field("customerAWSAccountId"),
                                dimension: field("dimension"),
                                timestamp: field("timestamp"),
                                quantity: field("quantity").map(serde_json::Value::String),
                                event_id: field("eventId"),
                                product_code: field("productCode"),
                                tags: field("tags"),
                                usage_allocations: None,
                                expires_at: field(attr::EXPIRES_AT).map(serde_json::Value::String),
                            };
                            to_row(number, line)
                        }
                    };
                    (number, row)
                })
                .collect()
        }
    })
}

/// Where the progress of importing `path` is kept.
pub fn progress_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".awsmp-import");
    PathBuf::from(name)
}

/// How to run an import.
#[derive(Debug, Clone)]
pub struct ImportOptions {
    /// File format.
    pub format: FileFormat,
    /// The stack's product code (rows naming another are rejected, as the aggregator does).
    pub product_code: String,
    /// Write the valid lines even when some are bad.
    pub write_valid: bool,
    /// Ignore kept progress and start from the first line.
    pub restart: bool,
    /// The Region of the table written (progress is kept per table).
    pub region: String,
    /// The usage table written.
    pub usage_table: String,
}

/// Imports `path` into `store` at `now`.
pub async fn import(
    store: &dyn UsageStore,
    path: &Path,
    options: &ImportOptions,
    now: Instant,
) -> Result<ImportReport, CommandError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| CommandError::Io(format!("cannot read {}: {e}", path.display())))?;
    let target = ImportTarget::new(&options.region, &options.usage_table, text.as_bytes());
    let ctx = GuardrailContext::new(now, options.product_code.clone());
    let mut report = ImportReport::default();
    let mut writes = Vec::new();
    let parsed = parse(&text, options.format)
        .map_err(|e| CommandError::Usage(format!("{}: {e}", path.display())))?;
    for (number, parsed) in parsed {
        report.lines += 1;
        let checked = match parsed {
            Err(bad) => Err(bad),
            Ok(row) => match check_row(&row, &ctx, now) {
                Ok(_) => Ok(row),
                Err(RowProblem::Unwritable(m)) => Err(malformed(number, m)),
                // A line refused now whose event id an earlier run wrote (the clock
                // passed its window since) stays in the writes: the write answers it
                // already written (or a conflict), and the kept progress still counts
                // the same lines.
                Err(problem) if problem.is_the_clocks() => {
                    match judge_refused_repeat(store, &row).await? {
                        Some(_) => Ok(row),
                        None => Err(refused(number, &problem)),
                    }
                }
                Err(problem) => Err(refused(number, &problem)),
            },
        };
        match checked {
            Ok(row) => writes.push((number, row)),
            Err(bad) => report.bad.push(bad),
        }
    }
    if !report.bad.is_empty() && !options.write_valid {
        return Ok(report);
    }
    let file = progress_path(path);
    // Progress in another shape (an older version's) is dropped: the event ids make
    // starting over safe.
    let mut progress = std::fs::read_to_string(&file)
        .ok()
        .and_then(|t| serde_json::from_str::<Progress>(&t).ok())
        .unwrap_or_default();
    let bar = indicatif::ProgressBar::new(writes.len() as u64);
    if !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    if !options.restart {
        bar.set_position(progress.resume_point(&target).min(writes.len()) as u64);
    }
    let mut keeper = BesideTheFile { file, bar };
    let written = write_lines(
        store,
        &writes,
        &target,
        options.restart,
        &mut progress,
        &mut keeper,
        now,
    )
    .await
    .map_err(|stopped| match stopped {
        ImportStopped::Store(e) => CommandError::from(e),
        ImportStopped::Keep(m) => CommandError::Io(m),
    })?;
    report.written = written.written;
    report.already_written = written.already_written;
    report.resumed_past = written.resumed_past;
    report.conflicts = written
        .conflicts
        .into_iter()
        .map(|(line, conflict)| ConflictLine {
            line,
            message: conflict.to_string(),
            event_id: conflict.event_id,
            recorded: conflict.recorded,
            this: conflict.this,
        })
        .collect();
    keeper.bar.finish_and_clear();
    Ok(report)
}

/// Progress kept beside the file, shown on a bar while the terminal is watched.
struct BesideTheFile {
    file: PathBuf,
    bar: indicatif::ProgressBar,
}

impl ProgressKeeper for BesideTheFile {
    fn keep(&mut self, progress: &Progress) -> Result<(), String> {
        std::fs::write(
            &self.file,
            serde_json::to_string(progress).unwrap_or_default(),
        )
        .map_err(|e| format!("cannot keep progress in {}: {e}", self.file.display()))
    }

    fn advanced(&mut self) {
        self.bar.inc(1);
    }
}

/// Renders an import report; attention when a line was bad.
pub fn render(
    report: &ImportReport,
    written: bool,
    format: crate::output::Format,
) -> crate::output::Outcome {
    let attention = !report.bad.is_empty();
    let conflict = !report.conflicts.is_empty();
    let text = match format {
        crate::output::Format::Json => crate::output::json(report),
        crate::output::Format::Human => {
            let mut out = String::new();
            for bad in &report.bad {
                out.push_str(&format!(
                    "line {}: {}{}: {}\n",
                    bad.line,
                    bad.reason.as_deref().unwrap_or("malformed"),
                    bad.server_side
                        .as_deref()
                        .map(|s| format!(" (server-side {s})"))
                        .unwrap_or_default(),
                    bad.message
                ));
            }
            for c in &report.conflicts {
                out.push_str(&format!("line {}: conflict: {}\n", c.line, c.message));
            }
            if attention && !written {
                out.push_str(&format!(
                    "{} of {} line(s) are bad: nothing was written. Fix them and run again, or pass --write-valid to write the others.\n",
                    report.bad.len(),
                    report.lines
                ));
            } else {
                out.push_str(&format!(
                    "{} line(s): {} written, {} already written (same event id){}{}{}\n",
                    report.lines,
                    report.written,
                    report.already_written,
                    if report.resumed_past > 0 {
                        format!(", resumed after line {}", report.resumed_past)
                    } else {
                        String::new()
                    },
                    if conflict {
                        format!(
                            ", {} conflict(s) (event id written before with other usage: not written)",
                            report.conflicts.len()
                        )
                    } else {
                        String::new()
                    },
                    if attention {
                        format!(", {} bad (not written)", report.bad.len())
                    } else {
                        String::new()
                    },
                ));
            }
            out
        }
    };
    crate::output::Outcome {
        text,
        attention,
        conflict,
        failed: false,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use awsmp_core::memory::MemoryTables;

    const LIC: &str = "arn:aws:license-manager::123456789012:license:l-1";

    fn options(write_valid: bool) -> ImportOptions {
        ImportOptions {
            format: FileFormat::Csv,
            product_code: "prod".into(),
            write_valid,
            restart: false,
            region: "us-east-1".into(),
            usage_table: "usage".into(),
        }
    }

    #[test]
    fn a_line_naming_the_reserved_ttl_attribute_is_refused() {
        let jsonl = format!(
            "{{\"licenseArn\":\"{LIC}\",\"customerAWSAccountId\":\"111122223333\",\"dimension\":\"api\",\"timestamp\":\"2026-11-30T11:00:00Z\",\"quantity\":3,\"eventId\":\"e-1\",\"expiresAt\":1893456000}}\n"
        );
        let csv = format!(
            "licenseArn,customerAWSAccountId,dimension,timestamp,quantity,eventId,expiresAt\n\
             {LIC},111122223333,api,2026-11-30T11:00:00Z,3,e-1,1893456000\n"
        );
        for (text, format) in [(jsonl, FileFormat::Jsonl), (csv, FileFormat::Csv)] {
            let parsed = parse(&text, format).unwrap();
            let bad = parsed[0].1.as_ref().unwrap_err();
            assert_eq!(
                bad.reason.as_deref(),
                Some("ReservedAttribute"),
                "{format:?}"
            );
            assert!(bad.message.contains("expiresAt"), "{}", bad.message);
        }
    }

    #[tokio::test]
    async fn reports_each_bad_line_with_its_reason_and_writes_nothing() {
        let now = parse_usage_timestamp("2026-11-30T12:30:00Z").unwrap();
        let dir = std::env::temp_dir().join(format!("awsmp-import-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("usage.csv");
        std::fs::write(
            &file,
            format!(
                "licenseArn,customerAWSAccountId,dimension,timestamp,quantity,eventId,tags\n\
                 {LIC},111122223333,api,2026-11-30T11:00:00Z,3,e-1,\n\
                 {LIC},111122223333,api,2026-11-30T11:00:00Z,2.5,e-2,\n\
                 {LIC},111122223333,api,2026-11-30 11:00,1,e-3,\n\
                 {LIC},111122223333,api,2026-11-30T11:00:00Z,1,e-4,a=1;b=2;c=3;d=4;e=5;f=6\n"
            ),
        )
        .unwrap();
        let tables = MemoryTables::new();
        let store = tables.usage_store();
        let report = import(&store, &file, &options(false), now).await.unwrap();
        let reasons: Vec<_> = report
            .bad
            .iter()
            .map(|b| (b.line, b.reason.clone().unwrap()))
            .collect();
        assert_eq!(
            reasons,
            vec![
                (3, "NonIntegerQuantity".to_string()),
                (4, "MalformedTimestamp".to_string()),
                (5, "TooManyTags".to_string())
            ]
        );
        assert_eq!(
            report.bad[2].server_side.as_deref(),
            Some("InvalidTagException")
        );
        assert!(tables.raw_rows().is_empty(), "nothing half-written");

        // With --write-valid the good line is written; a rerun writes nothing new.
        let first = import(&store, &file, &options(true), now).await.unwrap();
        assert_eq!(first.written, 1);
        let mut restart = options(true);
        restart.restart = true;
        let again = import(&store, &file, &restart, now).await.unwrap();
        assert_eq!((again.written, again.already_written), (0, 1));
        // Without --restart it resumes past the completed line.
        let resumed = import(&store, &file, &options(true), now).await.unwrap();
        assert_eq!(
            (
                resumed.resumed_past,
                resumed.written,
                resumed.already_written
            ),
            (1, 0, 0)
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn reads_json_lines_with_allocations_and_says_what_is_malformed() {
        let text = format!(
            "{{\"licenseArn\":\"{LIC}\",\"customerAWSAccountId\":\"111122223333\",\"dimension\":\"api\",\"timestamp\":\"2026-11-30T11:00:00Z\",\"quantity\":4,\"eventId\":\"e-1\",\"usageAllocations\":[{{\"allocatedUsageQuantity\":4,\"tags\":[{{\"key\":\"team\",\"value\":\"a\"}}]}}]}}\n\nnot json\n"
        );
        let parsed = parse(&text, FileFormat::Jsonl).unwrap();
        assert_eq!(parsed.len(), 2);
        let row = parsed[0].1.as_ref().unwrap();
        assert_eq!(row.allocations.as_ref().unwrap()[0].tags[0].key, "team");
        let bad = parsed[1].1.as_ref().unwrap_err();
        assert_eq!(bad.line, 3);
        assert!(bad.message.contains("not a JSON object"), "{}", bad.message);
    }

    #[test]
    fn an_empty_file_or_a_csv_without_its_header_is_refused_with_the_shape_to_write() {
        for format in [FileFormat::Csv, FileFormat::Jsonl] {
            let empty = parse("", format).unwrap_err();
            assert!(empty.contains("no usage lines"), "{empty}");
            let header_only = parse("\n\n", format).unwrap_err();
            assert!(header_only.contains("no usage lines"), "{header_only}");
        }
        let header_only = parse(&format!("{}\n", CSV_COLUMNS.join(",")), FileFormat::Csv);
        assert!(header_only.unwrap_err().contains("no usage lines"));
        let no_header = parse(
            &format!("{LIC},111122223333,api,2026-11-30T11:00:00Z,3,e-1\n"),
            FileFormat::Csv,
        )
        .unwrap_err();
        assert!(
            no_header.contains("names no column licenseArn"),
            "{no_header}"
        );
        assert!(
            no_header
                .contains("licenseArn,customerAWSAccountId,dimension,timestamp,quantity,eventId"),
            "{no_header}"
        );
    }
}

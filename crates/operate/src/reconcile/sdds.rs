//! The Seller Delivery Data Feeds (SDDS) that say what AWS metered: the Daily Usage
//! feed, joined through the Account feed (`end_user_account_id` is a per-seller
//! salted hash; the Account feed maps it to the 12-digit `aws_account_id`) and the
//! Product feed (`product_id` to `product_code`). Each file is RFC 4180 CSV, UTF-8,
//! with a header row; columns are found by name (their order is unconfirmed).
//!
//! Rows are bi-temporal. As the facts and AWS's sample queries say: for each key
//! (`usage_feed_id`, `account_id`, `product_id`) keep, within each `valid_from`, the
//! row with the latest `update_date`, and drop it if that row is soft-deleted (a
//! non-empty `delete_date`). Of what remains, the newest `valid_from` is the key's
//! current version. Two rows with the same key, `valid_from` and `update_date`: the
//! later line wins (each day is appended to the month's file).
//!
//! Every line that cannot be used is reported with its line number and why; parsing
//! never stops at a bad line and never panics.

use std::collections::BTreeMap;

use chrono::{NaiveDate, NaiveDateTime, TimeZone, Utc};
use serde::Serialize;

use awsmp_core::time::Instant;

use super::quantity::Quantity;

/// A line of a feed file that cannot be used, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct LineProblem {
    /// Which feed (`daily usage`, `account`, `product`).
    pub feed: &'static str,
    /// The file the line is in, when the feed was read from several (an S3 key).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// 1-based line number in the file (the header is line 1).
    pub line: u64,
    /// What is wrong, naming the column.
    pub problem: String,
}

impl std::fmt::Display for LineProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.file {
            Some(file) => write!(
                f,
                "{} feed {file} line {}: {}",
                self.feed, self.line, self.problem
            ),
            None => write!(f, "{} feed line {}: {}", self.feed, self.line, self.problem),
        }
    }
}

/// One version of a keyed row, with its bi-temporal columns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Versioned<T> {
    /// The row's key (`usage_feed_id`, `account_id`, `product_id`).
    pub key: String,
    /// `valid_from`.
    pub valid_from: Instant,
    /// `update_date`.
    pub update_date: Instant,
    /// A non-empty `delete_date`: the version is soft-deleted.
    pub deleted: bool,
    /// Which file of the feed it is in (0 for a single file; see [`ParsedFeed::files`]).
    pub file: usize,
    /// Its line in the file.
    pub line: u64,
    /// The other columns.
    pub value: T,
}

/// A parsed feed file: the readable rows and the problems.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ParsedFeed<T> {
    /// Every readable row, every version.
    pub rows: Vec<Versioned<T>>,
    /// Every line that could not be read.
    pub problems: Vec<LineProblem>,
    /// The files read, in the order the feed wrote them (empty for one unnamed file).
    pub files: Vec<String>,
}

/// One file of a feed: its name (an S3 key or a path) and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedFile {
    /// Where it was read from, for problems (empty: problems name no file).
    pub name: String,
    /// The CSV text.
    pub text: String,
}

impl<T> ParsedFeed<T> {
    /// Parses several files of one feed (e.g. a month's file and the months after),
    /// oldest first: a version in a later file wins a tie with one in an earlier
    /// file, as a later line wins within a file. Every problem names its file.
    pub fn from_files(files: &[FeedFile], parse: impl Fn(&str) -> ParsedFeed<T>) -> Self {
        let mut out = ParsedFeed {
            rows: Vec::new(),
            problems: Vec::new(),
            files: Vec::new(),
        };
        for (index, file) in files.iter().enumerate() {
            let parsed = parse(&file.text);
            out.rows.extend(parsed.rows.into_iter().map(|mut r| {
                r.file = index;
                r
            }));
            let name = (!file.name.is_empty()).then(|| file.name.clone());
            out.problems
                .extend(parsed.problems.into_iter().map(|mut p| {
                    p.file = name.clone();
                    p
                }));
            out.files.push(file.name.clone());
        }
        out
    }

    /// The name of file `index`, when the feed was read from named files.
    pub fn file_name(&self, index: usize) -> Option<String> {
        self.files.get(index).filter(|n| !n.is_empty()).cloned()
    }
}

/// A Daily Usage row's own columns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct UsageRow {
    /// `usage_date`: the UTC day the usage is aggregated over.
    pub usage_date: NaiveDate,
    /// `product_id` (join to the Product feed).
    pub product_id: String,
    /// `agreement_id` (may be null).
    pub agreement_id: Option<String>,
    /// `offer_id` (may be null).
    pub offer_id: Option<String>,
    /// `end_user_account_id` (salted hash; join to the Account feed).
    pub end_user_account_id: String,
    /// `dimension_key`.
    pub dimension_key: String,
    /// `usage_quantity` (up to 2 decimal places).
    pub usage_quantity: Quantity,
    /// `region`.
    pub region: Option<String>,
}

/// An Account feed row's own columns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct AccountRow {
    /// `aws_account_id`, left-padded to 12 digits.
    pub aws_account_id: String,
    /// `encrypted_account_id` (the legacy `CustomerIdentifier`).
    pub encrypted_account_id: Option<String>,
}

/// A Product feed row's own columns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct ProductRow {
    /// `product_code`.
    pub product_code: String,
}

/// The Daily Usage feed's name in problems.
pub const USAGE_FEED: &str = "daily usage";
/// The Account feed's name in problems.
pub const ACCOUNT_FEED: &str = "account";
/// The Product feed's name in problems.
pub const PRODUCT_FEED: &str = "product";

/// Parses a feed timestamp: ISO 8601 UTC (`2026-03-16T00:00:00Z`, with or without
/// `Z`, fractional seconds, or an offset), the space-separated form Athena shows
/// (`2026-03-16 00:00:00`), or a bare date (midnight UTC).
pub fn parse_feed_time(text: &str) -> Option<Instant> {
    let text = text.trim();
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(text) {
        return Some(t.with_timezone(&Utc));
    }
    for format in ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f"] {
        if let Ok(n) = NaiveDateTime::parse_from_str(text, format) {
            return Some(Utc.from_utc_datetime(&n));
        }
    }
    NaiveDate::parse_from_str(text, "%Y-%m-%d")
        .ok()
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .map(|n| Utc.from_utc_datetime(&n))
}

/// Parses `usage_date`: a date (`2026-03-15`), or a timestamp whose date is taken.
pub fn parse_usage_date(text: &str) -> Option<NaiveDate> {
    NaiveDate::parse_from_str(text.trim(), "%Y-%m-%d")
        .ok()
        .or_else(|| parse_feed_time(text).map(|t| t.date_naive()))
}

/// Reads `aws_account_id`, which may have lost its leading zeros (loaded as a number):
/// 1 to 12 digits, left-padded to 12.
pub fn normalize_account_id(text: &str) -> Option<String> {
    let text = text.trim();
    (!text.is_empty() && text.len() <= 12 && text.bytes().all(|b| b.is_ascii_digit()))
        .then(|| format!("{text:0>12}"))
}

/// One CSV record with its columns found by name.
struct Line<'a> {
    feed: &'static str,
    line: u64,
    record: &'a csv::StringRecord,
    columns: &'a BTreeMap<&'static str, usize>,
}

impl Line<'_> {
    fn get(&self, column: &str) -> &str {
        self.columns
            .get(column)
            .and_then(|&i| self.record.get(i))
            .unwrap_or("")
    }

    fn optional(&self, column: &str) -> Option<String> {
        let v = self.get(column).trim();
        (!v.is_empty()).then(|| v.to_string())
    }

    fn required(&self, column: &str) -> Result<String, LineProblem> {
        self.optional(column)
            .ok_or_else(|| self.problem(format!("{column} is empty")))
    }

    fn time(&self, column: &str) -> Result<Instant, LineProblem> {
        let text = self.required(column)?;
        parse_feed_time(&text).ok_or_else(|| {
            self.problem(format!(
                "{column} {text:?} is not an ISO 8601 UTC time (e.g. 2026-03-16T00:00:00Z)"
            ))
        })
    }

    fn problem(&self, problem: String) -> LineProblem {
        LineProblem {
            feed: self.feed,
            file: None,
            line: self.line,
            problem,
        }
    }

    fn versioned<T>(&self, key_column: &str, value: T) -> Result<Versioned<T>, LineProblem> {
        Ok(Versioned {
            key: self.required(key_column)?,
            valid_from: self.time("valid_from")?,
            update_date: self.time("update_date")?,
            deleted: self.optional("delete_date").is_some(),
            file: 0,
            line: self.line,
            value,
        })
    }
}

/// Reads a CSV feed: finds `required` columns in the header, then hands every data
/// line to `row`. A missing column or an unreadable header is one problem on line 1
/// and no rows.
fn parse_feed<T>(
    feed: &'static str,
    text: &str,
    required: &[&'static str],
    optional: &[&'static str],
    row: impl Fn(&Line<'_>) -> Result<Versioned<T>, LineProblem>,
) -> ParsedFeed<T> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut parsed = ParsedFeed {
        rows: Vec::new(),
        problems: Vec::new(),
        files: Vec::new(),
    };
    let header_problem = |problem: String| LineProblem {
        feed,
        file: None,
        line: 1,
        problem,
    };
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(true)
        .flexible(true)
        .from_reader(text.as_bytes());
    let header = match reader.headers() {
        Ok(h) if h.iter().any(|c| !c.trim().is_empty()) => h.clone(),
        Ok(_) => {
            parsed
                .problems
                .push(header_problem("empty file: no header row".into()));
            return parsed;
        }
        Err(e) => {
            parsed
                .problems
                .push(header_problem(format!("unreadable header row: {e}")));
            return parsed;
        }
    };
    let mut columns = BTreeMap::new();
    for name in required.iter().chain(optional) {
        if let Some(i) = header.iter().position(|c| c.trim() == *name) {
            columns.insert(*name, i);
        }
    }
    let missing: Vec<&str> = required
        .iter()
        .copied()
        .filter(|c| !columns.contains_key(c))
        .collect();
    if !missing.is_empty() {
        parsed.problems.push(header_problem(format!(
            "the header lacks column(s) {}: is this the {feed} feed?",
            missing.join(", ")
        )));
        return parsed;
    }
    let width = header.len();
    let mut record = csv::StringRecord::new();
    loop {
        let line = reader.position().line();
        match reader.read_record(&mut record) {
            Ok(false) => break,
            Ok(true) => {
                let line = record.position().map_or(line, |p| p.line());
                if record.len() == 1 && record.get(0).is_some_and(|f| f.trim().is_empty()) {
                    continue; // a blank line
                }
                if record.len() != width {
                    parsed.problems.push(LineProblem {
                        feed,
                        file: None,
                        line,
                        problem: format!(
                            "{} fields where the header has {width} (an unquoted comma or a cut-off line?)",
                            record.len()
                        ),
                    });
                    continue;
                }
                let view = Line {
                    feed,
                    line,
                    record: &record,
                    columns: &columns,
                };
                match row(&view) {
                    Ok(v) => parsed.rows.push(v),
                    Err(p) => parsed.problems.push(p),
                }
            }
            Err(e) => {
                let line = e.position().map_or(line, |p| p.line());
                parsed.problems.push(LineProblem {
                    feed,
                    file: None,
                    line,
                    problem: format!("not valid CSV: {e}"),
                });
                if !matches!(e.kind(), csv::ErrorKind::Utf8 { .. }) {
                    break; // the reader cannot resynchronise after an I/O-level error
                }
            }
        }
    }
    parsed
}

/// Parses the Daily Usage feed CSV.
pub fn parse_usage_feed(text: &str) -> ParsedFeed<UsageRow> {
    parse_feed(
        USAGE_FEED,
        text,
        &[
            "valid_from",
            "update_date",
            "delete_date",
            "usage_feed_id",
            "usage_date",
            "product_id",
            "end_user_account_id",
            "dimension_key",
            "usage_quantity",
        ],
        &["agreement_id", "offer_id", "region", "insert_date"],
        |line| {
            let date_text = line.required("usage_date")?;
            let usage_date = parse_usage_date(&date_text).ok_or_else(|| {
                line.problem(format!("usage_date {date_text:?} is not a date YYYY-MM-DD"))
            })?;
            let quantity_text = line.required("usage_quantity")?;
            let usage_quantity = Quantity::parse(&quantity_text)
                .map_err(|e| line.problem(format!("usage_quantity: {e}")))?;
            let value = UsageRow {
                usage_date,
                product_id: line.required("product_id")?,
                agreement_id: line.optional("agreement_id"),
                offer_id: line.optional("offer_id"),
                end_user_account_id: line.required("end_user_account_id")?,
                dimension_key: line.required("dimension_key")?,
                usage_quantity,
                region: line.optional("region"),
            };
            line.versioned("usage_feed_id", value)
        },
    )
}

/// Parses the Account feed CSV.
pub fn parse_account_feed(text: &str) -> ParsedFeed<AccountRow> {
    parse_feed(
        ACCOUNT_FEED,
        text,
        &[
            "valid_from",
            "update_date",
            "delete_date",
            "account_id",
            "aws_account_id",
        ],
        &["encrypted_account_id", "insert_date"],
        |line| {
            let raw = line.required("aws_account_id")?;
            let aws_account_id = normalize_account_id(&raw).ok_or_else(|| {
                line.problem(format!(
                    "aws_account_id {raw:?} is not an AWS account id (up to 12 digits)"
                ))
            })?;
            let value = AccountRow {
                aws_account_id,
                encrypted_account_id: line.optional("encrypted_account_id"),
            };
            line.versioned("account_id", value)
        },
    )
}

/// Parses the Product feed CSV.
pub fn parse_product_feed(text: &str) -> ParsedFeed<ProductRow> {
    parse_feed(
        PRODUCT_FEED,
        text,
        &[
            "valid_from",
            "update_date",
            "delete_date",
            "product_id",
            "product_code",
        ],
        &["title", "insert_date"],
        |line| {
            let value = ProductRow {
                product_code: line.required("product_code")?,
            };
            line.versioned("product_id", value)
        },
    )
}

/// The current version of every key (see the module doc): within each
/// (key, `valid_from`) the latest `update_date`, dropped if soft-deleted; then the
/// newest `valid_from`.
pub fn resolve<T: Clone>(rows: &[Versioned<T>]) -> BTreeMap<String, Versioned<T>> {
    let mut latest_update: BTreeMap<(&str, Instant), &Versioned<T>> = BTreeMap::new();
    for row in rows {
        let slot = latest_update
            .entry((row.key.as_str(), row.valid_from))
            .or_insert(row);
        if (row.update_date, row.file, row.line) >= (slot.update_date, slot.file, slot.line) {
            *slot = row;
        }
    }
    let mut current: BTreeMap<String, Versioned<T>> = BTreeMap::new();
    // Ordered by (key, valid_from): the last surviving version of a key is its newest.
    for ((key, _), row) in latest_update {
        if !row.deleted {
            current.insert(key.to_string(), row.clone());
        }
    }
    current
}

/// One day of usage of one account, product and dimension as AWS metered it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct AwsDailyUsage {
    /// The buyer's 12-digit AWS account (through the Account feed).
    pub aws_account_id: String,
    /// The product code (through the Product feed).
    pub product_code: String,
    /// `dimension_key`.
    pub dimension: String,
    /// `usage_date`.
    pub usage_date: NaiveDate,
    /// `usage_quantity`.
    pub quantity: Quantity,
    /// `agreement_id`, when present.
    pub agreement_id: Option<String>,
    /// `usage_feed_id`.
    pub usage_feed_id: String,
    /// The usage row's line.
    pub line: u64,
}

/// The three feeds joined.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JoinedUsage {
    /// Every current usage row that joined.
    pub usage: Vec<AwsDailyUsage>,
    /// Problems of all three files, and usage rows that did not join.
    pub problems: Vec<LineProblem>,
}

/// Joins the current Daily Usage rows to the Account and Product feeds. A usage row
/// whose account or product is not in its feed is reported, never dropped silently.
pub fn join_feeds(
    usage: &ParsedFeed<UsageRow>,
    accounts: &ParsedFeed<AccountRow>,
    products: &ParsedFeed<ProductRow>,
) -> JoinedUsage {
    let mut problems: Vec<LineProblem> = usage
        .problems
        .iter()
        .chain(&accounts.problems)
        .chain(&products.problems)
        .cloned()
        .collect();
    let accounts = resolve(&accounts.rows);
    let products = resolve(&products.rows);
    let mut joined = Vec::new();
    for row in resolve(&usage.rows).into_values() {
        let problem = |text: String| LineProblem {
            feed: USAGE_FEED,
            file: usage.file_name(row.file),
            line: row.line,
            problem: text,
        };
        let Some(account) = accounts.get(&row.value.end_user_account_id) else {
            problems.push(problem(format!(
                "end_user_account_id {} is not in the account feed (give the account feed file that covers it)",
                row.value.end_user_account_id
            )));
            continue;
        };
        let Some(product) = products.get(&row.value.product_id) else {
            problems.push(problem(format!(
                "product_id {} is not in the product feed (give the product feed file that covers it)",
                row.value.product_id
            )));
            continue;
        };
        joined.push(AwsDailyUsage {
            aws_account_id: account.value.aws_account_id.clone(),
            product_code: product.value.product_code.clone(),
            dimension: row.value.dimension_key.clone(),
            usage_date: row.value.usage_date,
            quantity: row.value.usage_quantity,
            agreement_id: row.value.agreement_id.clone(),
            usage_feed_id: row.key.clone(),
            line: row.line,
        });
    }
    problems.sort_by(|a, b| (a.feed, &a.file, a.line).cmp(&(b.feed, &b.file, b.line)));
    JoinedUsage {
        usage: joined,
        problems,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;

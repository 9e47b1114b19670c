//! How `awsmp` prints: human tables by default, `--json` for scripts, and exit codes
//! that mean something.
//!
//! | exit code | meaning |
//! |---|---|
//! | 0 | done; nothing needs attention |
//! | 1 | could not run: an AWS call failed, a file could not be read (`profile erase` in several Regions: in one of them, the others' results printed) |
//! | 2 | bad arguments |
//! | 3 | done, and something needs attention (an urgent item or a warning in status, failures listed or in a report, a disagreement in trail or reconcile, bad import lines, a replay refused, no profile of the buyer in any Region named, an erasure not confirmed) |
//! | 4 | the deployment was not found (stack, table or queue) |
//! | 5 | an event id was already written with other usage (`usage put`, `usage import`): that usage was not written |
//!
//! A failed command's code is [`CommandError::exit_code`](crate::error::CommandError::exit_code).

use comfy_table::{ContentArrangement, Table, presets};
use serde::Serialize;

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Format {
    /// Tables for people.
    #[default]
    Human,
    /// One JSON document on stdout.
    Json,
}

/// What a command produced: its text and whether something needs attention.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// What to print on stdout.
    pub text: String,
    /// Whether the exit code says "needs attention" (3).
    pub attention: bool,
    /// Whether an event id was found reused with other usage (exit 5, before 3).
    pub conflict: bool,
    /// Whether part of the run failed after another part was done and is reported in
    /// `text` (exit 1, before 5 and 3): `profile erase` in several Regions.
    pub failed: bool,
}

impl Outcome {
    /// Printed text that needs no attention.
    pub fn ok(text: String) -> Self {
        Outcome {
            text,
            attention: false,
            conflict: false,
            failed: false,
        }
    }

    /// Printed text that needs attention when `attention` says so.
    pub fn flagged(text: String, attention: bool) -> Self {
        Outcome {
            attention,
            ..Outcome::ok(text)
        }
    }
}

/// Exit code 3: ran, and something needs attention.
pub const EXIT_ATTENTION: u8 = 3;

/// Exit code 5: an event id was already written with other usage (a conflict): that
/// usage was not written.
pub const EXIT_CONFLICT: u8 = 5;

/// A table with `headers`, every row a list of cells, in a fixed ASCII style (stable
/// for golden tests, readable in any terminal or log). Cells show stored strings (a
/// seller's dimension, a reason, a license), so each is [`printable`].
pub fn table<I, R>(headers: &[&str], rows: I) -> String
where
    I: IntoIterator<Item = R>,
    R: IntoIterator<Item = String>,
{
    let mut table = Table::new();
    table
        .load_preset(presets::ASCII_MARKDOWN)
        .set_content_arrangement(ContentArrangement::Disabled)
        .set_header(headers.iter().copied());
    for row in rows {
        table.add_row(row.into_iter().map(|cell| printable(&cell)));
    }
    table.to_string()
}

/// `text` with every control character (escape sequences, carriage returns, newlines,
/// bells) shown as its `\u{..}` escape: a stored string cannot move the cursor,
/// recolour or clear the operator's terminal, or forge a table row.
pub fn printable(text: &str) -> String {
    if !text.chars().any(char::is_control) {
        return text.to_string();
    }
    text.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_unicode().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// `value` as pretty JSON (a serialization failure is impossible for our types; it
/// is reported rather than hidden).
pub fn json<T: Serialize>(value: &T) -> String {
    serde_json::to_string_pretty(value)
        .unwrap_or_else(|e| format!("{{\"error\": \"cannot serialize output: {e}\"}}"))
}

/// An optional value as a cell.
pub fn cell<T: std::fmt::Display>(value: Option<T>) -> String {
    value.map_or_else(|| "-".to_string(), |v| v.to_string())
}

/// A progress spinner on stderr for long reads (hidden when stderr is not a terminal).
pub fn spinner(what: &str) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new_spinner();
    if !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    bar.set_message(what.to_string());
    bar.enable_steady_tick(std::time::Duration::from_millis(120));
    bar
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prints_a_stable_ascii_table() {
        let text = table(
            &["hour", "billed"],
            [vec!["2026-11-30T10".to_string(), "3".to_string()]],
        );
        assert_eq!(
            text,
            "| hour          | billed |\n|---------------|--------|\n| 2026-11-30T10 | 3      |"
        );
    }

    #[test]
    fn stored_control_characters_are_shown_not_obeyed() {
        let text = table(
            &["dimension"],
            [vec!["req\u{1b}[2J\rforged | row\n| x".to_string()]],
        );
        assert!(
            !text.chars().any(|c| c.is_control() && c != '\n'),
            "{text:?}"
        );
        assert_eq!(text.lines().count(), 3, "{text}");
        assert!(text.contains("req\\u{1b}[2J\\u{d}forged"), "{text}");
        assert_eq!(printable("requests"), "requests");
    }
}

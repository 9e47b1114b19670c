//! Corpus replay: every committed input of `fuzz/corpus/<target>/` and
//! `fuzz/regressions/<target>/` through its target's check, with the stable toolchain
//! and no fuzzer, so `make test` proves that no input the fuzzers ever kept panics.
//! A missing or empty corpus directory fails the test (the corpus is part of the
//! repository, not a cache).

use std::fs;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

#[path = "../../../../fuzz/checks/mod.rs"]
mod checks;

use checks::TARGETS;

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../fuzz")
}

fn files_in(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = match fs::read_dir(dir) {
        Ok(entries) => entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.is_file())
            .collect(),
        Err(_) => Vec::new(),
    };
    files.sort();
    files
}

/// Runs `check` on every file of `files`; returns the names of those that panicked.
fn replay_files(files: &[PathBuf], check: fn(&[u8])) -> Vec<String> {
    let mut failed = Vec::new();
    for file in files {
        let data = fs::read(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        if catch_unwind(AssertUnwindSafe(|| check(&data))).is_err() {
            failed.push(file.display().to_string());
        }
    }
    failed
}

fn replay(target: &str) {
    let check = TARGETS
        .iter()
        .find(|(name, _)| *name == target)
        .map(|(_, check)| *check)
        .unwrap_or_else(|| panic!("no target {target}"));
    let corpus = fuzz_dir().join("corpus").join(target);
    let files = files_in(&corpus);
    assert!(
        !files.is_empty(),
        "{} is missing or empty: the committed corpus of {target} must be replayed \
         (see fuzz/README.md)",
        corpus.display()
    );
    let regressions = files_in(&fuzz_dir().join("regressions").join(target));
    let mut failed = replay_files(&files, check);
    failed.extend(replay_files(&regressions, check));
    assert!(
        failed.is_empty(),
        "{target}: {} of {} inputs panicked (reproduce with \
         `cargo fuzz run {target} <file>` in fuzz/): {failed:#?}",
        failed.len(),
        files.len() + regressions.len()
    );
    println!(
        "{target}: {} corpus inputs and {} regressions replayed, none panicked",
        files.len(),
        regressions.len()
    );
}

#[test]
fn every_target_has_a_replay_test_and_a_fuzz_target() {
    for (name, _) in TARGETS {
        let target_file = fuzz_dir().join("fuzz_targets").join(format!("{name}.rs"));
        assert!(
            target_file.is_file(),
            "{} is missing",
            target_file.display()
        );
    }
    let this = include_str!("corpus_replay.rs");
    for (name, _) in TARGETS {
        assert!(
            this.contains(&format!("fn {name}_corpus()")),
            "no replay test for {name}"
        );
    }
}

#[test]
fn lifecycle_event_corpus() {
    replay("lifecycle_event");
}

#[test]
fn quantity_corpus() {
    replay("quantity");
}

#[test]
fn register_form_corpus() {
    replay("register_form");
}

#[test]
fn register_request_corpus() {
    replay("register_request");
}

#[test]
fn sim_request_corpus() {
    replay("sim_request");
}

#[test]
fn usage_row_corpus() {
    replay("usage_row");
}

#[test]
fn work_message_corpus() {
    replay("work_message");
}

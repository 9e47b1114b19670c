//! ARCHITECTURE.md stays true: every crate of the workspace is in its crate table, no
//! import runs back up (its "The flow" rules, read from each Cargo.toml), every
//! file it names exists, and every function its tables name (`Type::method` or a
//! `snake_case` name) is still defined in the workspace's sources. A rename, a move or
//! a deletion that forgets the map fails here.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn architecture() -> String {
    std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap()
}

/// The backticked spans of a line.
fn code_spans(line: &str) -> Vec<&str> {
    line.split('`').skip(1).step_by(2).collect()
}

fn is_path(span: &str) -> bool {
    (span.starts_with("crates/") || span.starts_with("tests/") || span.starts_with("scripts/"))
        && !span.contains(' ')
        && !span.contains('<')
}

/// A span naming a function: `Type::method`, `module::function` or a snake_case name
/// with an underscore (single words such as `skip` or `Pending` are statuses or modes).
fn function_name(span: &str) -> Option<&str> {
    let ident = |s: &str| {
        !s.is_empty()
            && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !s.starts_with(|c: char| c.is_ascii_digit())
    };
    if let Some((owner, name)) = span.rsplit_once("::") {
        let owner_ok = owner.split("::").all(ident);
        return (owner_ok && ident(name) && name.chars().all(|c| !c.is_ascii_uppercase()))
            .then_some(name);
    }
    (ident(span) && span.contains('_') && span.chars().all(|c| !c.is_ascii_uppercase()))
        .then_some(span)
}

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n != "target") {
                sources(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(std::fs::read_to_string(&path).unwrap_or_default());
        }
    }
}

fn defined(all: &[String], name: &str) -> bool {
    let (call, generic) = (format!("fn {name}("), format!("fn {name}<"));
    all.iter()
        .any(|text| text.contains(&call) || text.contains(&generic))
}

#[test]
fn every_crate_is_in_the_crate_table() {
    let map = architecture();
    let table: Vec<&str> = map
        .lines()
        .filter(|l| l.starts_with("| `crates/"))
        .collect();
    assert!(!table.is_empty(), "ARCHITECTURE.md has no crate table");
    let mut missing = Vec::new();
    let mut dirs = Vec::new();
    for folder in ["crates", "crates/functions", "crates/dev"] {
        for entry in std::fs::read_dir(root().join(folder)).unwrap() {
            dirs.push(entry.unwrap().path());
        }
    }
    for dir in dirs {
        if !dir.join("Cargo.toml").exists() {
            continue;
        }
        let name = dir
            .strip_prefix(root().join("crates"))
            .unwrap()
            .to_string_lossy()
            .into_owned();
        // A row names a crate by its path, or, for a folder of crates, the folder
        // and then each crate by its name.
        let short = name.rsplit('/').next().unwrap_or(&name);
        let listed = table.iter().any(|row| {
            code_spans(row)
                .iter()
                .any(|s| *s == format!("crates/{name}") || *s == short)
        });
        if !listed {
            missing.push(name);
        }
    }
    assert!(
        missing.is_empty(),
        "crates missing from ARCHITECTURE.md's crate table: {missing:?}"
    );
}

#[test]
fn every_path_and_function_the_map_names_exists() {
    let map = architecture();
    let mut all = Vec::new();
    sources(&root().join("crates"), &mut all);
    let mut problems = Vec::new();
    let mut checked = 0;
    for (number, line) in map.lines().enumerate() {
        let spans = code_spans(line);
        let files: Vec<PathBuf> = spans
            .iter()
            .filter(|s| is_path(s))
            .map(|s| root().join(s.trim_end_matches('/')))
            .collect();
        for file in &files {
            if !file.exists() {
                problems.push(format!(
                    "line {}: {} does not exist",
                    number + 1,
                    file.display()
                ));
            }
        }
        // Functions are checked on the table rows that name source files.
        if !line.starts_with('|')
            || !files
                .iter()
                .any(|f| f.extension().is_some_and(|e| e == "rs"))
        {
            continue;
        }
        for name in spans.iter().filter_map(|s| function_name(s)) {
            checked += 1;
            if !defined(&all, name) {
                problems.push(format!(
                    "line {}: no function `{name}` in crates/",
                    number + 1
                ));
            }
        }
    }
    assert!(
        checked > 20,
        "only {checked} functions checked: the map's shape changed?"
    );
    assert!(
        problems.is_empty(),
        "ARCHITECTURE.md is out of date:\n{}",
        problems.join("\n")
    );
}

/// The `awsmp-*` crates a member's `[dependencies]` name (dev-dependencies aside).
fn normal_dependencies(manifest: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(manifest).unwrap();
    let mut in_deps = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with('[') {
            in_deps = line.trim() == "[dependencies]";
        } else if in_deps && line.starts_with("awsmp-") {
            out.push(line.split(['.', ' ', '=']).next().unwrap().to_string());
        }
    }
    out
}

#[test]
fn no_import_runs_back_up() {
    // The product's crates never link the dev tooling, the operator's code or the
    // operator's binary; the seller's writer never links the Lambda skeleton.
    let product = [
        "core",
        "aws",
        "lambda",
        "usage",
        "operate",
        "subscription",
        "register",
        "discoverer",
        "aggregator",
        "cleanup",
        "submitter",
        "deprovision-cleanup",
    ];
    let tooling = [
        "awsmp-local-aws",
        "awsmp-local-stack",
        "awsmp-marketplace-sim",
        "awsmp-apigw-local",
        "awsmp-dst",
        "awsmp-cli",
    ];
    let mut problems = Vec::new();
    for name in product {
        let folder = match name {
            "core" | "aws" | "lambda" | "usage" | "operate" => "crates".to_string(),
            _ => "crates/functions".to_string(),
        };
        let deps = normal_dependencies(&root().join(folder).join(name).join("Cargo.toml"));
        for dep in &deps {
            let operator_only = dep == "awsmp-operate" && name != "operate";
            if tooling.contains(&dep.as_str()) || operator_only {
                problems.push(format!("awsmp-{name} depends on {dep}"));
            }
        }
        if name == "core" && !deps.is_empty() {
            problems.push(format!("awsmp-core depends on {deps:?}"));
        }
        if name == "usage" && deps.iter().any(|d| d == "awsmp-lambda") {
            problems.push("awsmp-usage depends on awsmp-lambda".into());
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

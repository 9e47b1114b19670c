//! The maps stay true: every crate of the workspace is in ARCHITECTURE.md's code map and
//! in README's Layout, no import runs back up (read from each Cargo.toml), and every file
//! ARCHITECTURE.md, docs/design.md and CONTRIBUTING.md's recipe for a new function name
//! exists, and every function they name (`Type::method` or a `snake_case` name) is still defined in the workspace's
//! sources. A rename, a move or a deletion that forgets a map fails here.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn architecture() -> String {
    read("ARCHITECTURE.md")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap()
}

/// README's Layout: the fenced block under its `## Layout` heading.
fn readme_layout() -> String {
    let readme = read("README.md");
    let section = readme
        .split("\n## Layout")
        .nth(1)
        .expect("README.md has a Layout section");
    section
        .split("```")
        .nth(1)
        .expect("README.md's Layout is a fenced block")
        .to_string()
}

/// Every crate folder of the workspace, relative to `crates/`.
fn workspace_crates() -> Vec<String> {
    let mut names = Vec::new();
    for folder in ["crates", "crates/functions", "crates/dev"] {
        for entry in std::fs::read_dir(root().join(folder)).unwrap() {
            let dir = entry.unwrap().path();
            if dir.join("Cargo.toml").exists() {
                names.push(
                    dir.strip_prefix(root().join("crates"))
                        .unwrap()
                        .to_string_lossy()
                        .into_owned(),
                );
            }
        }
    }
    names.sort();
    names
}

/// The backticked spans of a line.
fn code_spans(line: &str) -> Vec<&str> {
    line.split('`').skip(1).step_by(2).collect()
}

fn is_path(span: &str) -> bool {
    let in_tree = [
        "crates/",
        "tests/",
        "scripts/",
        "deploy-policy/",
        "docs/",
        "web/",
    ]
    .iter()
    .any(|folder| span.starts_with(folder));
    let root_file = !span.contains('/')
        && [".yaml", ".toml", ".md", ".sh"]
            .iter()
            .any(|ext| span.ends_with(ext));
    (in_tree || root_file) && !span.contains(' ') && !span.contains('<') && !span.contains('*')
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

/// Whether the sources still have `name`: a function, a module, a field, a crate of
/// ours (`awsmp_core`), or a stored name (an attribute or index, as a string literal).
fn defined(all: &[String], name: &str) -> bool {
    let forms = [
        format!("fn {name}("),
        format!("fn {name}<"),
        format!("mod {name};"),
        format!("mod {name} {{"),
        format!("pub {name}:"),
        format!("pub(crate) {name}:"),
        format!("\"{name}\""),
    ];
    let ours = name
        .strip_prefix("awsmp_")
        .is_some_and(|rest| crates_named().iter().any(|c| c.replace('-', "_") == rest));
    ours || all
        .iter()
        .any(|text| forms.iter().any(|form| text.contains(form.as_str())))
}

/// The short names of the workspace's crates (`core`, `usage-api`, ...).
fn crates_named() -> Vec<String> {
    workspace_crates()
        .iter()
        .map(|name| name.rsplit('/').next().unwrap_or(name).to_string())
        .collect()
}

#[test]
fn every_crate_is_in_the_code_map() {
    let map = architecture();
    // A crate is named by its path in a code-map heading or a table row, or, for a
    // folder of crates, the folder's heading names each crate by its name.
    let entries: Vec<&str> = map
        .lines()
        .filter(|l| l.starts_with("### `crates/") || l.starts_with("| `crates/"))
        .collect();
    assert!(!entries.is_empty(), "ARCHITECTURE.md has no code map");
    let missing: Vec<String> = workspace_crates()
        .into_iter()
        .filter(|name| {
            let short = name.rsplit('/').next().unwrap_or(name);
            !entries.iter().any(|entry| {
                code_spans(entry)
                    .iter()
                    .any(|s| *s == format!("crates/{name}") || *s == short)
            })
        })
        .collect();
    assert!(
        missing.is_empty(),
        "crates missing from ARCHITECTURE.md's code map: {missing:?}"
    );
}

#[test]
fn every_crate_is_in_the_readme_layout() {
    let layout = readme_layout();
    let words: Vec<&str> = layout
        .split(|c: char| c.is_whitespace() || c == ',' || c == '(' || c == ')')
        .collect();
    let missing: Vec<String> = workspace_crates()
        .into_iter()
        .filter(|name| {
            let short = name.rsplit('/').next().unwrap_or(name);
            let folder = format!("crates/{name}");
            let parent = format!("{}/", folder.rsplit_once('/').unwrap().0);
            // Named by its path, or by its name under its folder's line.
            let named = words.contains(&folder.as_str())
                || (words.contains(&parent.as_str()) && words.contains(&short));
            !named
        })
        .collect();
    assert!(
        missing.is_empty(),
        "crates missing from README.md's Layout: {missing:?}"
    );
    for path in words
        .iter()
        .filter(|w| w.starts_with("crates/") || **w == "tests/")
    {
        assert!(
            root().join(path.trim_end_matches('/')).exists(),
            "README.md's Layout names {path}, which does not exist"
        );
    }
}

/// The problems of one document: files it names that do not exist, and functions it
/// names that no source defines (outside fenced blocks); and how many names it checked.
fn problems_of(name: &str, text: &str, all: &[String]) -> (Vec<String>, usize) {
    let mut problems = Vec::new();
    let mut checked = 0;
    let mut fenced = false;
    for (number, line) in text.lines().enumerate() {
        if line.starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let spans = code_spans(line);
        for file in spans.iter().filter(|s| is_path(s)) {
            checked += 1;
            if !root().join(file.trim_end_matches('/')).exists() {
                problems.push(format!("{name}:{}: {file} does not exist", number + 1));
            }
        }
        for function in spans.iter().filter_map(|s| function_name(s)) {
            checked += 1;
            if !defined(all, function) {
                problems.push(format!(
                    "{name}:{}: no function `{function}` in crates/",
                    number + 1
                ));
            }
        }
    }
    (problems, checked)
}

#[test]
fn every_path_and_function_the_maps_name_exists() {
    let mut all = Vec::new();
    sources(&root().join("crates"), &mut all);
    let mut problems = Vec::new();
    for (name, least) in [
        ("ARCHITECTURE.md", 60),
        ("docs/design.md", 40),
        ("CONTRIBUTING.md", 15),
    ] {
        let (found, checked) = problems_of(name, &read(name), &all);
        assert!(
            checked > least,
            "only {checked} files and functions checked in {name}: its shape changed?"
        );
        problems.extend(found);
    }
    assert!(
        problems.is_empty(),
        "the maps are out of date:\n{}",
        problems.join("\n")
    );
}

#[test]
fn nothing_points_outside_the_repository() {
    let mut problems = Vec::new();
    for name in [
        "ARCHITECTURE.md",
        "README.md",
        "docs/design.md",
        "CONTRIBUTING.md",
    ] {
        for (number, line) in read(name).lines().enumerate() {
            if line.contains("shared/design")
                || line.contains("shared/reference")
                || line.contains("../shared")
            {
                problems.push(format!("{name}:{}: {line}", number + 1));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "documents point outside the repository:\n{}",
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
    // The libraries, then every function crate (the one list: crates/functions/).
    let mut product: Vec<String> = ["core", "aws", "lambda", "usage", "operate"]
        .map(String::from)
        .to_vec();
    let mut functions: Vec<String> = std::fs::read_dir(root().join("crates/functions"))
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.path().join("Cargo.toml").is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    functions.sort();
    product.extend(functions);
    let tooling = [
        "awsmp-local-aws",
        "awsmp-local-stack",
        "awsmp-marketplace-sim",
        "awsmp-apigw-local",
        "awsmp-dst",
        "awsmp-cli",
    ];
    let mut problems = Vec::new();
    for name in &product {
        let name = name.as_str();
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

//! One list of functions: the crates under `crates/functions/` (the workspace's
//! `members` glob) are the Lambdas, and every other place that must name each one is
//! checked against that list here: the root `Cargo.toml` (`default-members`,
//! `[workspace.dependencies]`), the templates (one `AWS::Serverless::Function` building
//! each binary, and no other binary), the local stack's handlers
//! (`crates/dev/local-stack/src/wiring.rs`), the environment contract
//! (`crates/cli/tests/env_contract.rs`), the IAM contract (`FUNCTIONS` in
//! `tests/tests/iam_contract/main.rs`) and what drives each function there
//! (`tests/src/lib.rs` or `tests/tests/iam_contract/drive.rs`), ARCHITECTURE.md's
//! `crates/functions/` heading and README's Layout; and CONTRIBUTING.md's "How to add a
//! function" names every one of those files. Adding a function crate and forgetting a
//! place fails here, naming the place.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use awsmp_local_aws::{StackTemplate, workspace_templates};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The one list: each folder of `crates/functions/` with a `Cargo.toml`, by its name
/// (the function's binary and the template's `Binary`), sorted.
fn functions() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(root().join("crates/functions"))
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.path().join("Cargo.toml").is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert!(!names.is_empty(), "no crate under crates/functions/");
    names
}

fn snake(function: &str) -> String {
    function.replace('-', "_")
}

/// Every place that must name each function, as (place, does it name `function`).
fn places(function: &str) -> Vec<(String, bool)> {
    let cargo = read("Cargo.toml");
    let default_members = cargo
        .split("default-members = [")
        .nth(1)
        .and_then(|rest| rest.split(']').next())
        .expect("Cargo.toml has default-members")
        .to_string();
    let crate_toml = read(&format!("crates/functions/{function}/Cargo.toml"));
    let architecture = read("ARCHITECTURE.md");
    let heading = architecture
        .lines()
        .find(|l| l.starts_with("### `crates/functions/`"))
        .expect("ARCHITECTURE.md has a crates/functions/ heading")
        .to_string();
    let readme = read("README.md");
    let layout = readme
        .split("\n## Layout")
        .nth(1)
        .and_then(|s| s.split("```").nth(1))
        .expect("README.md's Layout is a fenced block")
        .to_string();
    let harness = read("tests/src/lib.rs") + &read("tests/tests/iam_contract/drive.rs");
    let module = snake(function);
    vec![
        (
            format!(
                "crates/functions/{function}/Cargo.toml: package awsmp-{function}, [[bin]] {function}"
            ),
            crate_toml.contains(&format!("name = \"awsmp-{function}\""))
                && crate_toml.contains(&format!("[[bin]]\nname = \"{function}\"")),
        ),
        (
            "Cargo.toml default-members".into(),
            default_members.contains(&format!("\"crates/functions/{function}\"")),
        ),
        (
            "Cargo.toml [workspace.dependencies]".into(),
            cargo.contains(&format!(
                "awsmp-{function} = {{ path = \"crates/functions/{function}\" }}"
            )),
        ),
        (
            "crates/dev/local-stack/src/wiring.rs (its Handler variant)".into(),
            read("crates/dev/local-stack/src/wiring.rs")
                .contains(&format!("(awsmp_{module}::State)")),
        ),
        (
            "crates/cli/tests/env_contract.rs (its Config::from_lookup)".into(),
            read("crates/cli/tests/env_contract.rs").contains(&format!("\"{function}\" =>")),
        ),
        (
            "tests/tests/iam_contract/main.rs FUNCTIONS".into(),
            read("tests/tests/iam_contract/main.rs")
                .contains(&format!("(\"{function}\", \"template-")),
        ),
        (
            "tests/src/lib.rs or tests/tests/iam_contract/drive.rs (what runs it)".into(),
            harness.contains(&format!("awsmp_{module}::")),
        ),
        (
            "ARCHITECTURE.md's crates/functions/ heading".into(),
            heading.contains(&format!("`{function}`")),
        ),
        ("README.md's Layout".into(), layout.contains(function)),
    ]
}

#[test]
fn every_place_names_every_function_crate() {
    let mut problems = Vec::new();
    for function in functions() {
        for (place, names_it) in places(&function) {
            if !names_it {
                problems.push(format!("{function}: missing from {place}"));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "a function crate is not named everywhere (CONTRIBUTING.md, \"How to add a function\"):\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_templates_build_exactly_the_function_crates_once_each() {
    let mut built = Vec::new();
    for path in workspace_templates() {
        let template = StackTemplate::load(&path, &[]).unwrap();
        for function in template.functions().unwrap() {
            built.push(function.binary);
        }
    }
    built.sort();
    let unique: BTreeSet<&String> = built.iter().collect();
    assert_eq!(
        unique.len(),
        built.len(),
        "a binary is built by two template functions: {built:?}"
    );
    assert_eq!(
        built,
        functions(),
        "the templates' Binary list and the crates under crates/functions/ differ"
    );
}

#[test]
fn the_recipe_names_every_place_checked() {
    let contributing = read("CONTRIBUTING.md");
    let recipe = contributing
        .split("## How to add a function")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("CONTRIBUTING.md has a How to add a function section");
    let files = [
        "`Cargo.toml`",
        "`template-main.yaml`",
        "`crates/dev/local-stack/src/wiring.rs`",
        "`crates/cli/tests/env_contract.rs`",
        "`tests/src/lib.rs`",
        "`tests/tests/iam_contract/`",
        "`tests/tests/function_list.rs`",
        "ARCHITECTURE.md",
        "`README.md`",
    ];
    let missing: Vec<&str> = files
        .iter()
        .copied()
        .filter(|f| !recipe.contains(f))
        .collect();
    assert!(
        missing.is_empty(),
        "CONTRIBUTING.md's How to add a function does not name {missing:?}"
    );
}

//! The contract between templates and handlers: every environment variable a
//! handler's `Config::from_lookup` asks for is set by its function in the template,
//! and every variable the template sets is one the handler reads. The templates'
//! values (resolved as CloudFormation would with the template's own defaults) must
//! also be accepted.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use awsmp_local_aws::cfn::StackTemplate as Template;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs `from_lookup` over `env`, returning the names it asked for and its verdict.
fn asked<E: std::fmt::Display, T>(
    env: &BTreeMap<String, String>,
    from_lookup: impl Fn(&dyn Fn(&str) -> Option<String>) -> Result<T, E>,
) -> (BTreeSet<String>, Result<(), String>) {
    let names = RefCell::new(BTreeSet::new());
    let lookup = |k: &str| {
        names.borrow_mut().insert(k.to_string());
        env.get(k).cloned()
    };
    let verdict = from_lookup(&lookup).map(|_| ()).map_err(|e| e.to_string());
    (names.into_inner(), verdict)
}

#[test]
fn every_variable_a_handler_reads_is_set_by_its_template_and_vice_versa() {
    let mut checked = BTreeSet::new();
    for file in ["template-events.yaml", "template-main.yaml"] {
        // A deploy with the template's defaults: ProductCode and StageName have none
        // (the metrics' dimensions come from them); dry-run needs an allowlist and live
        // refuses one, and the defaults are live.
        let mut template = Template::load(
            &root().join(file),
            &[
                ("AWS::Region", "us-west-2"),
                ("AWS::StackName", "awsmp-main-test"),
                ("ProductCode", "prod1234"),
                ("StageName", "test"),
                // The reconciliation exists only with products to reconcile.
                ("ReconcileProducts", "prod-abc123=prod1234"),
            ],
        )
        .unwrap();
        // What CloudFront names the page's distribution once it exists.
        template.set_attribute(
            "PageDistribution",
            "DomainName",
            "d111111abcdef8.cloudfront.net",
        );
        for function in template.functions().unwrap() {
            let mut env = BTreeMap::new();
            for (k, v) in &function.environment {
                env.insert(k.clone(), template.string(v, k).unwrap());
            }
            let mut with_runtime = env.clone();
            with_runtime.insert("AWS_REGION".into(), "us-west-2".into());
            let (names, verdict) = match function.binary.as_str() {
                "subscription" => asked(&with_runtime, awsmp_subscription::Config::from_lookup),
                "deprovision-cleanup" => asked(
                    &with_runtime,
                    awsmp_deprovision_cleanup::Config::from_lookup,
                ),
                "agreement-reconcile" => asked(
                    &with_runtime,
                    awsmp_agreement_reconcile::Config::from_lookup,
                ),
                "register" => asked(&with_runtime, awsmp_register::Config::from_lookup),
                "discoverer" => asked(&with_runtime, awsmp_discoverer::Config::from_lookup),
                "aggregator" => asked(&with_runtime, awsmp_aggregator::Config::from_lookup),
                "cleanup" => asked(&with_runtime, awsmp_cleanup::Config::from_lookup),
                "submitter" => asked(&with_runtime, awsmp_submitter::Config::from_lookup),
                "usage-api" => asked(&with_runtime, awsmp_usage_api::Config::from_lookup),
                "outcome-events" => asked(&with_runtime, awsmp_outcome_events::Config::from_lookup),
                "buyer-events" => asked(&with_runtime, awsmp_buyer_events::Config::from_lookup),
                other => panic!(
                    "{file}: {} declares unknown binary {other}",
                    function.logical_id
                ),
            };
            let read: BTreeSet<String> = names
                .into_iter()
                .filter(|n| n != "AWS_REGION") // set by Lambda itself, not the template
                .collect();
            let set: BTreeSet<String> = env.keys().cloned().collect();
            assert_eq!(
                read, set,
                "{file} {}: handler reads {read:?}, template sets {set:?}",
                function.binary
            );
            assert!(
                verdict.is_ok(),
                "{file} {}: the template's default values are refused: {verdict:?}",
                function.binary
            );
            checked.insert(function.binary.clone());
        }
    }
    // The function crates are the one list (tests/tests/function_list.rs).
    let crates: BTreeSet<String> = std::fs::read_dir(root().join("crates/functions"))
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.path().join("Cargo.toml").is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        checked, crates,
        "every function is in a template: {checked:?}"
    );
}

#[test]
fn a_missing_variable_fails_init_naming_it() {
    let env = BTreeMap::new();
    let (_, verdict) = asked(&env, awsmp_aggregator::Config::from_lookup);
    let message = verdict.unwrap_err();
    assert!(message.contains("USAGE_TABLE"), "{message}");
}

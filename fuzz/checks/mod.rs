//! The fuzz targets' bodies as plain functions, one module per target. Each `check`
//! takes the fuzzer's bytes, feeds them to the real parser or handler, and panics only
//! when the property every target shares is broken: no input panics, and each ends in
//! a reason code, a 4xx, a batch item failure or an error value (plus a few invariants
//! the code documents, named in each module).
//!
//! This directory is not a crate of its own: it is compiled into two, by `#[path]`,
//! so that each check is written once. The cargo-fuzz crate (`fuzz/src/lib.rs`, its
//! binaries in `fuzz/fuzz_targets/`) runs the checks under libFuzzer; the workspace
//! crate `crates/dev/fuzz-replay` runs them on every committed input of
//! `fuzz/corpus/<target>/` and `fuzz/regressions/<target>/` in `make test`. Both get
//! the in-memory ports (`awsmp-core`'s `test-util` feature) as a dev/fuzz-only
//! dependency, never into a Lambda build. Paths inside are relative (`super::`), so
//! the module works wherever it is mounted.

// The fixtures below are constants the checks build once; a failure to build them is
// a bug in these checks, so `expect` is the right answer there.
#![allow(clippy::expect_used)]

pub mod input;
pub mod lifecycle_event;
pub mod quantity;
pub mod register_form;
pub mod register_request;
pub mod sim_request;
pub mod usage_row;
pub mod work_message;

use std::future::Future;

/// One fuzz target: its name (the `fuzz_targets/<name>.rs` file and the
/// `fuzz/corpus/<name>/` directory) and its check.
pub type Target = (&'static str, fn(&[u8]));

/// Every target, by name.
pub const TARGETS: &[Target] = &[
    ("lifecycle_event", lifecycle_event::check),
    ("quantity", quantity::check),
    ("register_form", register_form::check),
    ("register_request", register_request::check),
    ("sim_request", sim_request::check),
    ("usage_row", usage_row::check),
    ("work_message", work_message::check),
];

/// A license ARN of the License Manager form every fixture uses.
pub const LICENSE: &str = "arn:aws:license-manager::123456789012:license:l-0123456789abcdef";
/// The buyer account every fixture uses.
pub const ACCOUNT: &str = "111122223333";
/// The stack's product code.
pub const PRODUCT: &str = "prod-abc123";
/// "Now" of every check (the time inside the guardrail window of the fixtures' rows).
pub const NOW: &str = "2026-11-30T10:30:00Z";

/// [`NOW`] as an instant.
pub fn now() -> awsmp_core::time::Instant {
    awsmp_core::time::parse_usage_timestamp(NOW).expect("NOW is a usage timestamp")
}

thread_local! {
    static RUNTIME: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a current-thread tokio runtime builds");
}

/// Runs a handler's future to completion on this thread's runtime (built once).
pub fn block_on<F: Future>(future: F) -> F::Output {
    RUNTIME.with(|runtime| runtime.block_on(future))
}

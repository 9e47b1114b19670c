//! The SAM templates are read by the workspace's one template reader,
//! `awsmp_test_support::cfn::StackTemplate` (functions, event sources, outputs,
//! conditions and one resolver for every intrinsic); this module names it under the
//! CLI's paths and keeps the CLI's error for it.

pub use awsmp_test_support::cfn::StackTemplate as Template;
pub use awsmp_test_support::{EventSource, FunctionSpec, parse_rate};

/// A template that cannot be read or wired.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct TemplateError(#[from] pub awsmp_test_support::TestSupportError);

//! The operator's use cases (`awsmp`): pure views over what the tables hold (status,
//! failures, one license's chain), when a record may be replayed, what a usage line
//! needs before it is written, and what each failure means. The CLI reads the tables
//! through [`crate::ports::OperatorStore`] and renders these.

pub mod failures;
pub mod import;
pub mod license;
pub mod remedy;
pub mod replay;
pub mod rows;
pub mod status;

use crate::time::{Instant, format_instant};

/// Serializes an instant as the tables store it (`2026-11-30T10:15:42Z`).
pub fn serialize_instant<S: serde::Serializer>(t: &Instant, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format_instant(*t))
}

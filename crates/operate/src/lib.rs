//! awsmp-operate: what the operator tool (`awsmp`) computes, and nothing the Lambdas
//! run. Pure views over what the tables hold (status, failures, one license's chain,
//! the report's series), when a record may be replayed, over-bills corrected and
//! followed ([`corrections`]), how an import is kept to one
//! deployment and resumed, and reconciliation of our records with CloudTrail and the
//! Seller Delivery Data Feeds, and one buyer's profile shown or erased with an audit
//! record ([`pii`]). The CLI reads the tables through
//! [`awsmp_core::ports::OperatorStore`], CloudTrail through [`ports::TrailEvents`] and
//! the customer-profile table through [`ports::PiiTable`], and renders these; no
//! I/O here.

pub mod corrections;
pub mod failures;
pub mod import;
pub mod license;
#[cfg(any(test, feature = "test-util"))]
pub mod memory;
pub mod pii;
pub mod ports;
pub mod reconcile;
pub mod replay;
pub mod report;
pub mod rows;
pub mod status;

use awsmp_core::time::{Instant, format_instant};

/// Serializes an instant as the tables store it (`2026-11-30T10:15:42Z`).
pub fn serialize_instant<S: serde::Serializer>(t: &Instant, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format_instant(*t))
}

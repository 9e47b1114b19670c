//! awsmp-marketplace-sim: a local AWS Marketplace Metering service on the real
//! JSON 1.1 wire protocol (`BatchMeterUsage`, `ResolveCustomer`) with the real
//! semantics (first-write-wins dedup, entitlements, request-level exceptions, the
//! timestamp window, the 10/s quota), fault injection, a drivable clock, and a
//! read-only ledger of what was billed, and CloudTrail `LookupEvents` for the calls
//! it received, and the Marketplace Agreement API ([`agreement`]) on RPC v2 CBOR and
//! awsJson 1.0. Start it embedded with
//! [`Simulator::start`] or as the `awsmp-marketplace-sim` binary.

pub mod agreement;
pub mod cli;
pub mod clock;
pub mod cloudtrail;
pub mod config;
pub mod engine;
pub mod error;
pub mod handle;
mod ids;
pub mod lifecycle;
pub mod model;
pub mod server;
pub mod sim;
pub mod throttle;
pub mod validate;
pub mod wire;

pub use agreement::model::{
    AdjustmentFailure, AdjustmentStatus, Agreement, AgreementEnd, AgreementSeed, AgreementStatus,
    BillingAdjustment, FixedUpfrontSeed, FreeTrialSeed, GrantSeed, RateSeed,
};
pub use clock::ClockSetting;
pub use cloudtrail::Caller;
pub use config::{IdenticalRetryStatus, SimConfig};
pub use error::{AdminError, ApiError, ApiErrorKind, SimError};
pub use handle::SimHandle;
pub use model::{
    Allocation, AllocationTag, AuthFailure, BilledRecord, Conflict, Entitlement, EntitlementKey,
    EntitlementSeed, EntitlementState, FaultKind, FaultPhase, FaultSpec, FaultTarget,
    LedgerSnapshot, LifecycleOutcome, LossMode, ProductSeed, RejectedRequest, Stats, TokenSeed,
};
pub use sim::{RunningSim, Simulator};
pub use throttle::ThrottleConfig;

#[cfg(test)]
mod test_support {
    //! What the unit tests of several modules share.

    use chrono::{DateTime, Utc};

    /// `s`, an RFC 3339 instant written by a test.
    #[allow(clippy::expect_used)]
    pub(crate) fn at(s: &str) -> DateTime<Utc> {
        s.parse().expect("valid RFC 3339 in test")
    }
}

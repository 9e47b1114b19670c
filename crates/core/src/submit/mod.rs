//! The submitter's use case: drain pending aggregated records oldest-first
//! (deprovisioning licenses first), claim each record, send per-product batches of ≤ 25
//! records / ≤ 1 MB to `BatchMeterUsage` with bisection, paced under the 10 requests/s
//! quota, and write every batch's outcome back while the next batch goes out (one claim
//! request and one write-back request per batch, pipelined with the sends). Then age
//! out what can no longer be submitted.
//!
//! Outcome of one record, and the status it is given:
//!
//! | answer | status | metric |
//! |---|---|---|
//! | `Success` | `Success` + `meteringRecordId` | `UsageRecordSubmitted` |
//! | `DuplicateRecord` | `DuplicateRecord` (also when the duplicate is our own earlier send, interrupted before its outcome was written: the hour is billed, first write wins) | |
//! | `CustomerNotSubscribed`, subscribers table has no active row yet | stays `Pending` (retried next run until the window closes) | |
//! | `CustomerNotSubscribed`, otherwise | `CustomerNotSubscribed` | `CustomerNotSubscribed` |
//! | `UnprocessedRecords` twice (one retry after a jittered backoff) | stays `Pending` | `UsageRecordUnprocessed` |
//! | validation exception isolated by bisection | `Error` + exception name | `BatchMeterUsageException{Exception}` (later records of a dimension refused with `InvalidUsageDimensionException` this run are sent alone, not bisected again) |
//! | sub-batch at the bisection depth cap | stays `Pending` | `BisectDepthExceeded` |
//! | throttling / internal error | stays `Pending`; jittered backoff; the run stops after repeated throttling | |
//! | `DisabledApiException` | stays `Pending`; the run stops | `MeteringApiDisabled` |
//! | refused before processing (`AccessDeniedException`, `UnrecognizedClientException`, `ExpiredTokenException`, a signature exception, HTTP 401/403, a connection that failed before the request was written) | stays `Pending`, claim released, not pinned (nothing billed); jittered backoff; the run stops after repeated refusals | `BatchMeterUsageRefused{Exception}` |
//! | larger than 1 MB even alone | `Error` + `RequestTooLarge` | `BatchMeterUsageException{Exception=RequestTooLarge}` |
//! | hour aged out before it was sent (also an hour that left the window during the run: each call is checked against the clock as it goes out) | `SubmissionExpired` | `UsageSubmissionExpired` (not for a zero hour under `skip`: nothing was lost) |
//!
//! The submitter's modes and knobs are `settings`; one run, its claims, sends and
//! write-backs, is `run`; when runs start and stop, `schedule`.

pub mod answer;
pub mod batch;
pub mod bisect;
pub mod outcome;
pub mod pacing;
mod run;
pub mod schedule;
mod settings;

pub use run::{SEND_MARGIN, SubmitPorts, SubmitReport, metering_record, submit};
pub use settings::{
    DeploymentMode, InvalidDeploymentMode, MeteringMode, MeteringModeError, SubmitSettings,
};

/// Records per page of the pending index the submitter asks for: ten calls' worth, so
/// the first call waits for 250 records rather than a full 1 MB page (thousands), while
/// the pages stay few (one query per ten calls, read while the calls go out).
pub const PENDING_PAGE_RECORDS: usize = 250;

/// Reason stored on a record that could not be sent because it exceeds 1 MB alone.
pub const REASON_REQUEST_TOO_LARGE: &str = "RequestTooLarge";
/// Reason stored on a zero hour closed unsent under the `skip` policy.
pub const REASON_ZERO_QUANTITY_SKIPPED: &str = "ZeroQuantitySkipped";
/// Reason stored on a record that aged out while an interrupted run held it, or after
/// a send with an unknown outcome: it may have been billed (check the Seller Reports /
/// `awsmp reconcile`).
pub const REASON_INTERRUPTED_SUBMISSION: &str = "InterruptedSubmission";
/// Reason stored on a record that aged out while the Region refused metering.
pub const REASON_METERING_DISABLED: &str = "DisabledApiException";
/// Reason stored on a record that aged out, never possibly billed, in a run whose
/// calls Marketplace kept refusing before processing them (credentials, role,
/// signature, a connection that could not be made): nothing was billed.
pub const REASON_METERING_REFUSED: &str = "MeteringRefused";
/// Reason prefix stored on an aggregated item that cannot be read (what is wrong follows).
pub const REASON_MALFORMED_ITEM: &str = "MalformedItem";

//! The metrics every function emits (EMF names and dimensions) and the sink they go to.

/// EMF metric names (namespace `AwsMarketplace/Metering`).
pub mod metric {
    /// Namespace of every metric.
    pub const NAMESPACE: &str = "AwsMarketplace/Metering";
    /// A raw row rejected client-side (dimension `Reason`).
    pub const USAGE_RECORD_REJECTED: &str = "UsageRecordRejected";
    /// A record still unprocessed after the retry.
    pub const USAGE_RECORD_UNPROCESSED: &str = "UsageRecordUnprocessed";
    /// A raw row aged out.
    pub const USAGE_AGGREGATION_EXPIRED: &str = "UsageAggregationExpired";
    /// An aggregated row aged out.
    pub const USAGE_SUBMISSION_EXPIRED: &str = "UsageSubmissionExpired";
    /// A request-level exception (dimension `Exception`).
    pub const BATCH_METER_USAGE_EXCEPTION: &str = "BatchMeterUsageException";
    /// A final CustomerNotSubscribed.
    pub const CUSTOMER_NOT_SUBSCRIBED: &str = "CustomerNotSubscribed";
    /// A multi-record sub-batch reached the bisection depth cap.
    pub const BISECT_DEPTH_EXCEEDED: &str = "BisectDepthExceeded";
    /// Records billed.
    pub const USAGE_RECORD_SUBMITTED: &str = "UsageRecordSubmitted";
    /// A late raw row for an already-submitted hour.
    pub const LATE_USAGE_AFTER_SUBMISSION: &str = "LateUsageAfterSubmission";
    /// A `BatchMeterUsage` call refused before Marketplace processed it: credentials,
    /// role or signature, or a connection that failed before the request was written
    /// (dimension `Exception`; nothing billed; alarm: refused for an hour is an outage).
    pub const BATCH_METER_USAGE_REFUSED: &str = "BatchMeterUsageRefused";
    /// The Region refused metering (`DisabledApiException`).
    pub const METERING_API_DISABLED: &str = "MeteringApiDisabled";
    /// `DuplicateRecord` for a record no earlier call of ours may have billed:
    /// something else billed the hour, perhaps with another quantity (alarm).
    pub const UNEXPECTED_DUPLICATE_RECORD: &str = "UnexpectedDuplicateRecord";
    /// A send whose outcome is unknown (the call may have billed): the record is
    /// re-sent with exactly the same quantity until a definite answer (alarm).
    pub const AMBIGUOUS_SUBMISSION: &str = "AmbiguousSubmission";
    /// A run that could not do all it should (unreadable index, store failure,
    /// deadline with work left): dimension `Function` (alarm).
    pub const INCOMPLETE_RUN: &str = "IncompleteRun";
    /// Registration form fields dropped because `ALLOWED_REGISTRATION_FIELDS` does not
    /// list them (the buyer typed them; the profile does not keep them).
    pub const REGISTRATION_FIELD_DROPPED: &str = "RegistrationFieldDropped";
    /// A registration of a buyer already registered in this Region (the link is
    /// reusable for hours): its contact fields were not taken, the first ones kept.
    pub const REGISTRATION_REPEATED: &str = "RegistrationRepeated";
    /// A seller-written item the pipeline cannot read (dimension `Table`).
    pub const MALFORMED_ITEM: &str = "MalformedItem";
    /// Aggregated records a submitter run found pending past their lock and due (a
    /// dry run counts allowlisted accounts only), emitted every run, zero included:
    /// with `UsageRecordSubmitted`, the input of the submission heartbeat alarm.
    pub const PENDING_PAST_LOCK: &str = "PendingPastLock";
    /// A buyer profile's expiry (`ProfileRetentionDays`) the discoverer could not write;
    /// the next run retries. Not an incomplete run: metering is unaffected.
    pub const PROFILE_EXPIRY_FAILED: &str = "ProfileExpiryFailed";
    /// Groups about to be billed of a dimension the buyer's rate card does not price
    /// (dimension `Dimension`; the discoverer, before the record is sent).
    pub const UNPRICED_USAGE: &str = "UnpricedUsage";
    /// Groups the discoverer sent without that check: their buyers' rows could not be
    /// read.
    pub const UNPRICED_USAGE_UNCHECKED: &str = "UnpricedUsageUnchecked";
}

/// Metrics (EMF to stdout in Lambda).
pub trait MetricsSink: Send + Sync {
    /// Adds `value` to the count `name` with the given dimensions.
    fn count(&self, name: &str, dimensions: &[(&str, &str)], value: u64);
}

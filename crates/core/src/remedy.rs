//! What each failure means and what the seller does about it: every client-side
//! reason code with its server-side exception pair, every server-side exception a
//! record can end with, and the remediation `awsmp failures` prints.

use crate::model::{AggregatedStatus, RawStatus, ReasonCode};
use crate::submit::{
    REASON_INTERRUPTED_SUBMISSION, REASON_MALFORMED_ITEM, REASON_METERING_DISABLED,
    REASON_METERING_REFUSED, REASON_REQUEST_TOO_LARGE,
};

/// The server-side exception `BatchMeterUsage` would raise for a row our guardrails
/// rejected before the call (the pair the specification says to name with every
/// rejection), or `None` for checks that exist only on our side.
pub fn server_side_pair(code: ReasonCode) -> Option<&'static str> {
    use ReasonCode::*;
    Some(match code {
        MalformedTimestamp | TimestampInFuture | TimestampOutOfWindow => {
            "TimestampOutOfBoundsException"
        }
        InvalidLicenseArn => "InvalidLicenseException",
        TooManyTags | InvalidTag | MissingTagKeyOrValue => "InvalidTagException",
        TooManyAllocations
        | AllocationSumMismatch
        | MixedAllocatedAndUnallocated
        | MalformedAllocations
        | NegativeOrNonIntegerAllocation => "InvalidUsageAllocationsException",
        ProductCodeMismatch => "InvalidProductCodeException",
        NonNumericQuantity
        | NonIntegerQuantity
        | NegativeQuantity
        | QuantityTooLarge
        | MissingDimension
        | MissingCustomerAWSAccountId => "ValidationException",
        MalformedSortKey
        | SortKeyMismatch
        | HourAlreadySubmitted
        | RecordTooLarge
        | MalformedMeteringPending
        | ReservedAttribute => return None,
    })
}

/// What to do about a raw row rejected client-side with `code`.
pub fn for_reason(code: ReasonCode) -> &'static str {
    use ReasonCode::*;
    match code {
        MalformedSortKey | SortKeyMismatch => {
            "write the sort key as <customerAWSAccountId>#<dimension>#<timestamp>[#<eventId>] from the row's own attributes (awsmp usage put / import do)"
        }
        MalformedTimestamp => {
            "write timestamps as whole-second UTC YYYY-MM-DDTHH:MM:SS with or without Z; write the usage again with a new event id if its hour is still inside the 24 h window"
        }
        NonNumericQuantity | NonIntegerQuantity | NegativeQuantity | QuantityTooLarge => {
            "write quantity as a whole number 0..=2147483647 (a DynamoDB number); fix the writer and write the usage again inside the 24 h window"
        }
        MissingDimension => {
            "set the dimension attribute to the catalog's dimension name (case-sensitive)"
        }
        TimestampInFuture => {
            "the writer's clock or time zone is off: timestamps are UTC and never after now"
        }
        TimestampOutOfWindow => {
            "usage older than 24 h cannot be billed any more; write usage within about an hour of its time"
        }
        InvalidLicenseArn => {
            "use the buyer's LicenseArn exactly as ResolveCustomer returned it (arn:aws:license-manager::<account>:license:l-...)"
        }
        MissingCustomerAWSAccountId => {
            "set customerAWSAccountId to the buyer's 12-digit account id from ResolveCustomer"
        }
        MalformedAllocations | NegativeOrNonIntegerAllocation | AllocationSumMismatch => {
            "usageAllocations must be a list of {allocatedUsageQuantity, tags} whose whole-number quantities sum to the row's quantity"
        }
        MissingTagKeyOrValue | InvalidTag => {
            "every tag needs a non-empty key and value within the API's pattern and length"
        }
        TooManyTags => "at most 5 tags per allocation",
        TooManyAllocations => {
            "at most 2,500 distinct tag sets per license, dimension and hour: use fewer tag values"
        }
        MixedAllocatedAndUnallocated => {
            "within one license, dimension and hour, either every non-zero row carries usageAllocations or none does"
        }
        ProductCodeMismatch => {
            "the row names another product: write it to that product's usage table, or leave productCode out"
        }
        HourAlreadySubmitted => {
            "the hour was already sent with its total; write late usage inside the metering lock (MeteringLockHours) or into the next hour"
        }
        RecordTooLarge => {
            "too many distinct tag sets for one DynamoDB item: use fewer tag values per hour"
        }
        MalformedMeteringPending => {
            "write meteringPending as the row's hour bucket YYYY-MM-DDTHH (or leave it to awsmp usage put / import)"
        }
        ReservedAttribute => {
            "expiresAt is the tables' TTL attribute and only the pipeline sets it (DataRetentionDays, once an item is final): write the usage again without it, with a new event id, inside the 24 h window"
        }
    }
}

/// What to do about an aggregated record that ended `Error` with the server-side
/// `reason` (an exception name, or one of our reasons).
pub fn for_exception(reason: &str) -> &'static str {
    match reason {
        "InvalidUsageDimensionException" => {
            "define the dimension in the product's catalog in the AWS Marketplace Management Portal (case-sensitive; no redeploy), then `awsmp replay` inside the 24 h window; do not change the usage writer"
        }
        "InvalidTagException" | "InvalidUsageAllocationsException" => {
            "the tags or allocations were refused by Marketplace: fix the writer; a replay sends the same allocations and fails again"
        }
        "InvalidProductCodeException" => {
            "the product code is not this seller's or not this product's: check PRODUCT_CODE / the row's productCode"
        }
        "InvalidLicenseException" => {
            "Marketplace refused the LicenseArn for this customer and hour (unknown, another customer's, or outside its activation period); a replay sends the same license and is refused again: check the writer uses the license ResolveCustomer returned for this customer, and write the usage anew under it inside the 24 h window"
        }
        "TimestampOutOfBoundsException" => {
            "the hour was outside Marketplace's 24 h window when sent: it cannot be billed"
        }
        "InvalidCustomerIdentifierException" | "ValidationException" => {
            "the request was malformed for Concurrent Agreements (CustomerAWSAccountId + LicenseArn): check the record's fields"
        }
        REASON_REQUEST_TOO_LARGE => {
            "the record alone exceeds BatchMeterUsage's 1 MB request: reduce its tag sets; it cannot be replayed as it is"
        }
        REASON_METERING_DISABLED => {
            "BatchMeterUsage is not offered in this Region (DisabledApiException): meter in a supported Region"
        }
        other if other.starts_with(REASON_MALFORMED_ITEM) => {
            "the item cannot be read as an aggregated record: fix or delete it (direct-submit writers: see the item shape in README)"
        }
        _ => {
            "see the exception's documentation; replay with `awsmp replay` once the cause is fixed"
        }
    }
}

/// What to do about a record or row in a final status other than billed.
pub fn for_status(status: FailureStatus, reason: Option<&str>) -> String {
    match status {
        FailureStatus::Raw(RawStatus::RejectedClientSide) => reason
            .and_then(|r| r.parse::<ReasonCode>().ok())
            .map(for_reason)
            .unwrap_or("see the reason code")
            .to_string(),
        FailureStatus::Raw(RawStatus::AggregationExpired) => {
            "the row's hour left the 24 h window before it was aggregated: check that the discoverer and aggregator run (alarms, DLQ) and write usage promptly".into()
        }
        FailureStatus::Raw(RawStatus::Aggregated) => "counted; nothing to do".into(),
        FailureStatus::Record(AggregatedStatus::Error) => {
            for_exception(reason.unwrap_or_default()).to_string()
        }
        FailureStatus::Record(AggregatedStatus::CustomerNotSubscribed) => {
            "final, do not retry: the identifier is invalid, the agreement ended, or the buyer's account is suspended; check the subscriber's statuses with `awsmp inspect license`".into()
        }
        FailureStatus::Record(AggregatedStatus::SubmissionExpired) => match reason {
            Some(REASON_INTERRUPTED_SUBMISSION) => {
                "an interrupted send aged out: it may have been billed; check with `awsmp reconcile`".into()
            }
            Some(REASON_METERING_DISABLED) => for_exception(REASON_METERING_DISABLED).into(),
            Some(REASON_METERING_REFUSED) => {
                "BatchMeterUsage refused the submitter's calls before processing them (credentials, the role's aws-marketplace:BatchMeterUsage permission, signature or clock, or no connection: alarm BatchMeterUsageRefused): Marketplace never saw this record and billed nothing; fix the cause, then bill the usage by other means if you must".into()
            }
            _ => "the hour left the 24 h window before it was sent: check that the submitter runs (throttling, alarms)".into(),
        },
        FailureStatus::Record(other) => format!("{other}: nothing to do"),
    }
}

/// A final status worth a seller's attention, on either table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureStatus {
    /// A raw usage row's status.
    Raw(RawStatus),
    /// An aggregated record's status.
    Record(AggregatedStatus),
}

impl FailureStatus {
    /// The stored status name.
    pub fn as_str(&self) -> &'static str {
        match self {
            FailureStatus::Raw(s) => s.as_str(),
            FailureStatus::Record(s) => s.as_str(),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_code_has_a_remedy_and_the_specified_pairs_hold() {
        for code in ReasonCode::ALL {
            assert!(!for_reason(*code).is_empty(), "{code}");
        }
        let pairs = [
            (
                ReasonCode::MalformedTimestamp,
                "TimestampOutOfBoundsException",
            ),
            (ReasonCode::InvalidLicenseArn, "InvalidLicenseException"),
            (ReasonCode::TooManyTags, "InvalidTagException"),
            (
                ReasonCode::AllocationSumMismatch,
                "InvalidUsageAllocationsException",
            ),
            (
                ReasonCode::MixedAllocatedAndUnallocated,
                "InvalidUsageAllocationsException",
            ),
        ];
        for (code, exception) in pairs {
            assert_eq!(server_side_pair(code), Some(exception), "{code}");
        }
        assert_eq!(server_side_pair(ReasonCode::HourAlreadySubmitted), None);
    }

    #[test]
    fn an_undefined_dimension_is_fixed_in_the_catalog_not_the_writer() {
        let remedy = for_status(
            FailureStatus::Record(AggregatedStatus::Error),
            Some("InvalidUsageDimensionException"),
        );
        assert!(remedy.contains("catalog"), "{remedy}");
        assert!(remedy.contains("case-sensitive"), "{remedy}");
        assert!(remedy.contains("awsmp replay"), "{remedy}");
        let rejected = for_status(
            FailureStatus::Raw(RawStatus::RejectedClientSide),
            Some("TooManyTags"),
        );
        assert_eq!(rejected, for_reason(ReasonCode::TooManyTags));
        let interrupted = for_status(
            FailureStatus::Record(AggregatedStatus::SubmissionExpired),
            Some(REASON_INTERRUPTED_SUBMISSION),
        );
        assert!(interrupted.contains("reconcile"), "{interrupted}");
        // Refused before processing: Marketplace never saw it; nothing to reconcile.
        let refused = for_status(
            FailureStatus::Record(AggregatedStatus::SubmissionExpired),
            Some(REASON_METERING_REFUSED),
        );
        assert!(refused.contains("billed nothing"), "{refused}");
        assert!(!refused.contains("reconcile"), "{refused}");
    }
}

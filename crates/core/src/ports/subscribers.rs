//! The PII-free subscribers table (us-east-1) and the in-Region customer-profile table.

use async_trait::async_trait;

use crate::charges::StoredRateCard;
use crate::model::{CustomerProfile, Subscriber};
use crate::time::Instant;

use super::PortError;

/// The PII-free subscribers table (in us-east-1, read cross-Region).
#[async_trait]
pub trait SubscriberStore: Send + Sync {
    /// Reads one row.
    async fn get(&self, license_arn: &str, account: &str) -> Result<Option<Subscriber>, PortError>;

    /// Reads the rows of many (license, account) pairs at once; a pair without a row
    /// is left out. In no particular order.
    async fn get_many(&self, keys: &[(String, String)]) -> Result<Vec<Subscriber>, PortError>;

    /// Rows for a license (any account).
    async fn by_license(&self, license_arn: &str) -> Result<Vec<Subscriber>, PortError>;

    /// Rows of an agreement (through the agreement index).
    async fn by_agreement(&self, agreement_id: &str) -> Result<Vec<Subscriber>, PortError>;

    /// Rows whose `subscriptionStatus` is `deprovisioning` (through the deprovisioning index).
    async fn deprovisioning(&self) -> Result<Vec<Subscriber>, PortError>;

    /// Writes the row's lifecycle fields if the stored version is still
    /// `row.version` (0 = must not exist); stores `row.version + 1`. Never touches
    /// `registeredRegions`. `Ok(false)` on a version conflict (re-read and retry).
    async fn put_lifecycle(&self, row: &Subscriber, now: Instant) -> Result<bool, PortError>;

    /// Stores `card` as the row's `rateCard` if the row is still on the card's agreement
    /// and holds no card read later; never touches anything else (the version
    /// included). `Ok(false)`: the row is gone, on another agreement, or has a newer card.
    async fn put_rate_card(
        &self,
        license_arn: &str,
        account: &str,
        card: &StoredRateCard,
        now: Instant,
    ) -> Result<bool, PortError>;

    /// Registration: sets `productCode` if absent, `ADD registeredRegions :region`
    /// (idempotent), counts the registration (`ADD registrationCount 1`), sets
    /// `lastRegisteredRegion` and adds the names of the form `fields` it carried
    /// (`registeredFields`, never their values), creating the row if needed. Never
    /// touches lifecycle fields.
    async fn add_registered_region(
        &self,
        license_arn: &str,
        account: &str,
        product_code: &str,
        (region, fields): (&str, &[String]),
        now: Instant,
    ) -> Result<(), PortError>;
}

/// What a profile write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProfileWrite {
    /// The buyer's first registration: the row was created with every given field.
    First,
    /// A registration again (the link is valid for hours and anyone holding it may
    /// post): the first registration's fields were kept; only fields it left empty
    /// were filled.
    Again,
}

/// The in-Region customer-profile table (buyer PII stays here).
#[async_trait]
pub trait ProfileStore: Send + Sync {
    /// Writes the allowlisted fields of a registration (always the identity row, even
    /// with none). The first registration's fields are never overwritten by a later
    /// one: a later one only fills fields still absent ([`ProfileWrite::Again`]).
    async fn upsert(
        &self,
        profile: &CustomerProfile,
        now: Instant,
    ) -> Result<ProfileWrite, PortError>;

    /// Sets the profile's `expiresAt` (the table's TTL attribute) to `at`, when the
    /// row exists and does not already say so: `Ok(true)` when this wrote it. Never
    /// creates a row.
    async fn expire(
        &self,
        license_arn: &str,
        account: &str,
        at: Instant,
    ) -> Result<bool, PortError>;
}

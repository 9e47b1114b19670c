//! The register use case (main stack, `POST /register`): resolve the buyer's
//! Marketplace token with `ResolveCustomer`, refuse a token of another product, then
//! write the in-Region customer profile and add this Region to the PII-free subscriber
//! row (`registeredRegions`). Registration never gates metering: it writes no
//! lifecycle field. The token is never stored; the Lambda reads the form and answers
//! HTTP around this.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::model::CustomerProfile;
use crate::ports::{
    Clock, CustomerResolver, MetricsSink, PortError, ProfileStore, ProfileWrite, ResolveError,
    ResolvedCustomer, SubscriberStore, metric,
};

/// The ports a registration goes through.
#[derive(Clone)]
pub struct RegisterPorts {
    /// `ResolveCustomer`.
    pub resolver: Arc<dyn CustomerResolver>,
    /// The subscribers table (in us-east-1).
    pub subscribers: Arc<dyn SubscriberStore>,
    /// The in-Region customer-profile table.
    pub profiles: Arc<dyn ProfileStore>,
    /// Time, for the audit stamps.
    pub clock: Arc<dyn Clock>,
    /// Metrics (`RegistrationFieldDropped`, `RegistrationRepeated`).
    pub metrics: Arc<dyn MetricsSink>,
}

/// What the buyer posted, already read and filtered by the allowlist.
#[derive(Debug, Clone)]
pub struct Registration<'a> {
    /// The Marketplace registration token.
    pub token: &'a str,
    /// The allowlisted fields.
    pub fields: BTreeMap<String, String>,
    /// How many posted fields the allowlist dropped.
    pub dropped: usize,
}

/// Why a registration did not complete.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistrationError {
    /// `ResolveCustomer` refused the token or failed.
    #[error(transparent)]
    Resolve(#[from] ResolveError),
    /// The token belongs to another product than this stack's.
    #[error("the token is for product {found}, this stack meters {expected}")]
    WrongProduct {
        /// This stack's product code.
        expected: String,
        /// What `ResolveCustomer` returned.
        found: String,
    },
    /// A table write failed (retrying the post is safe: both writes are idempotent).
    #[error(transparent)]
    Store(PortError),
}

/// Registers the buyer behind `registration` for `product_code` in `region`; the
/// customer it resolved to.
pub async fn register(
    ports: &RegisterPorts,
    product_code: &str,
    region: &str,
    registration: Registration<'_>,
) -> Result<ResolvedCustomer, RegistrationError> {
    let customer = ports.resolver.resolve(registration.token).await?;
    if customer.product_code != product_code {
        return Err(RegistrationError::WrongProduct {
            expected: product_code.to_string(),
            found: customer.product_code,
        });
    }
    let now = ports.clock.now();
    // The names of the fields the buyer filled in (never their values) go to the
    // PII-free row, for the seller's `Buyer Registered` event.
    let field_names: Vec<String> = registration
        .fields
        .iter()
        .filter(|(_, value)| !value.trim().is_empty())
        .map(|(name, _)| name.clone())
        .collect();
    let profile = CustomerProfile {
        license_arn: customer.license_arn.clone(),
        customer_aws_account_id: customer.customer_aws_account_id.clone(),
        product_code: customer.product_code.clone(),
        fields: registration.fields,
    };
    let write = ports
        .profiles
        .upsert(&profile, now)
        .await
        .map_err(RegistrationError::Store)?;
    ports
        .subscribers
        .add_registered_region(
            &customer.license_arn,
            &customer.customer_aws_account_id,
            &customer.product_code,
            (region, &field_names),
            now,
        )
        .await
        .map_err(RegistrationError::Store)?;
    if registration.dropped > 0 {
        // The page asked for something the allowlist does not keep: the seller loses
        // what the buyer typed until the two agree (metric, alarm-able).
        tracing::warn!(
            dropped_fields = registration.dropped,
            "registration fields not in ALLOWED_REGISTRATION_FIELDS were dropped"
        );
        ports.metrics.count(
            metric::REGISTRATION_FIELD_DROPPED,
            &[],
            u64::try_from(registration.dropped).unwrap_or(u64::MAX),
        );
    }
    if write == ProfileWrite::Again {
        // Anyone holding the buyer's link can post for hours: the first registration's
        // contact fields stand (docs/deploy.md says what to verify before provisioning).
        tracing::warn!(
            license = %customer.license_arn,
            account = %customer.customer_aws_account_id,
            "buyer registered again: the first registration's contact fields are kept, only fields it left empty are filled"
        );
        ports.metrics.count(metric::REGISTRATION_REPEATED, &[], 1);
    }
    tracing::info!(
        license = %customer.license_arn,
        account = %customer.customer_aws_account_id,
        region = %region,
        fields = profile.fields.len(),
        dropped_fields = registration.dropped,
        "buyer registered"
    );
    Ok(customer)
}

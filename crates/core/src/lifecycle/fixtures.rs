//! The license, account, agreement and product every lifecycle test speaks of, and
//! the four consumed events built for them at a given time.

#![allow(clippy::unwrap_used)]

use super::MarketplaceEvent;
use crate::time::{Instant, parse_usage_timestamp};

pub(super) const LICENSE: &str =
    "arn:aws:license-manager::123456789012:license:l-e52ca6f38bf84d0fafb8802ca15ac11x";
pub(super) const ACCOUNT: &str = "845735284135";
pub(super) const AGREEMENT: &str = "agmt-4mwg1nevbokzw95eca5797ixs";
pub(super) const PRODUCT: &str = "aw4fgf5tyo5w2ap6fEXAMPLE";

pub(super) fn t(s: &str) -> Instant {
    parse_usage_timestamp(s).unwrap()
}

pub(super) fn updated(time: &str) -> MarketplaceEvent {
    MarketplaceEvent::LicenseUpdated {
        license_arn: LICENSE.into(),
        account: ACCOUNT.into(),
        product_code: Some(PRODUCT.into()),
        agreement_id: AGREEMENT.into(),
        time: t(time),
    }
}

pub(super) fn deprovisioned(time: &str) -> MarketplaceEvent {
    MarketplaceEvent::LicenseDeprovisioned {
        license_arn: LICENSE.into(),
        account: ACCOUNT.into(),
        product_code: Some(PRODUCT.into()),
        agreement_id: AGREEMENT.into(),
        time: t(time),
    }
}

pub(super) fn ended(time: &str) -> MarketplaceEvent {
    MarketplaceEvent::AgreementEnded {
        agreement_id: AGREEMENT.into(),
        account: ACCOUNT.into(),
        time: t(time),
    }
}

pub(super) fn amended(time: &str) -> MarketplaceEvent {
    MarketplaceEvent::AgreementAmended {
        agreement_id: AGREEMENT.into(),
        account: ACCOUNT.into(),
        time: t(time),
    }
}

//! The Agreement API contract: one set of assertions every [`AgreementApi`] must pass,
//! run against [`MemoryAgreementApi`] (this crate's tests) and against the SDK adapter
//! talking to the Marketplace simulator over HTTP (`crates/aws/tests`), so the fake
//! the reconciliation is tested on answers as the real API does: found and not found,
//! exact rate cards, free trials, terms without a usage price, entitlements by
//! status, search filters, paging to the end, and throttling as a transient failure.
//!
//! A backend implements [`AgreementBackend`] (seeding in the simulator's terms);
//! [`agreement_contract_tests!`](crate::agreement_contract_tests) expands to one
//! `#[tokio::test]` per case.

// A test suite: a failed expectation is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use chrono::TimeDelta;
use rust_decimal::Decimal;

use super::{AgreementOp, AgreementRecord, MemoryAgreementApi};
use crate::ports::{
    AgreementApi, AgreementEntitlement, AgreementError, AgreementFacts, AgreementSearch,
    AgreementStatus, AgreementTerms, EndTimeBehavior, EntitlementStatus, FreeTrial, TrialGrant,
};
use crate::sync::lock;
use crate::time::{Instant, parse_instant};

/// Page size every backend pages by (`maxResults`), so a handful of agreements or
/// terms already spans several pages.
pub const PAGE_SIZE: i32 = 2;
/// The seller (the proposer of every seeded agreement).
pub const SELLER: &str = "123456789012";
/// The buyer of the seeded agreements.
pub const BUYER: &str = "111122223333";
/// A license.
pub const LICENSE: &str = "arn:aws:license-manager::123456789012:license:l-contract0000000001";
/// Another license.
pub const LICENSE_2: &str = "arn:aws:license-manager::123456789012:license:l-contract0000000002";
/// The product.
pub const PRODUCT: &str = "prod-contract1234";
/// The contract's starting instant (every backend's clock starts here).
pub const NOW: &str = "2026-11-30T12:00:00Z";

/// The contract's start instant.
pub fn now() -> Instant {
    parse_instant(NOW).expect("NOW parses")
}

/// A decimal from a test literal.
pub fn dec(s: &str) -> Decimal {
    s.parse().expect("decimal literal")
}

/// An agreement to seed, in the simulator's terms (`AgreementSeed`): always `ACTIVE`
/// when seeded; [`AgreementBackend::end`] ends it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeedAgreement {
    pub agreement_id: String,
    pub license_arn: String,
    pub account: String,
    pub product_id: String,
    pub offer_id: String,
    pub start: Instant,
    pub end: Option<Instant>,
    pub currency: String,
    /// Dimension and price, in order.
    pub rate_card: Vec<(String, Decimal)>,
    pub free_trial: Option<FreeTrial>,
    /// A fixed upfront price.
    pub upfront: Option<Decimal>,
}

/// An active pay-as-you-go agreement on [`LICENSE`], started 30 days before [`NOW`]:
/// `requests` at 0.0025 and `storage_gb` at 0.5 USD.
pub fn seed(agreement_id: &str) -> SeedAgreement {
    SeedAgreement {
        agreement_id: agreement_id.to_string(),
        license_arn: LICENSE.to_string(),
        account: BUYER.to_string(),
        product_id: PRODUCT.to_string(),
        offer_id: "offer-contract".to_string(),
        start: now() - TimeDelta::days(30),
        end: None,
        currency: "USD".to_string(),
        rate_card: vec![
            ("requests".to_string(), dec("0.0025")),
            ("storage_gb".to_string(), dec("0.5")),
        ],
        free_trial: None,
        upfront: None,
    }
}

/// The Agreement API under test, on a fresh backend holding no agreement, paging by
/// [`PAGE_SIZE`], its clock at [`NOW`].
#[async_trait]
pub trait AgreementBackend: Send + Sync {
    /// The port.
    fn api(&self) -> &dyn AgreementApi;
    /// Seeds (or amends) an agreement.
    async fn seed(&self, agreement: &SeedAgreement);
    /// Ends an agreement with `status` (anything but `ACTIVE`).
    async fn end(&self, agreement_id: &str, status: AgreementStatus);
    /// Moves the backend's clock (what `lastUpdateTime` is stamped with) forward.
    async fn advance(&self, by: TimeDelta);
    /// Makes at least one of the next 10 `describe` calls throttled (the memory API
    /// injects it; the simulator turns its 5-per-second quota on).
    async fn throttle_describe(&self);
}

/// What the API answers for a seeded agreement, as the simulator documents it: the
/// memory backend's seeding.
pub fn record(seed: &SeedAgreement, status: AgreementStatus, at: Instant) -> AgreementRecord {
    let active = status == AgreementStatus::Active;
    let mut rate_card = BTreeMap::new();
    for (dimension, price) in &seed.rate_card {
        rate_card.insert(dimension.clone(), *price);
    }
    let priced = !seed.rate_card.is_empty() || seed.upfront.is_some();
    let (entitlement, reason) = if !active {
        (EntitlementStatus::Deprovisioned, "AGREEMENT_INACTIVE")
    } else if seed.start > at {
        (EntitlementStatus::Scheduled, "FUTURE_START_DATE")
    } else {
        (EntitlementStatus::Provisioned, "AGREEMENT_ACTIVE")
    };
    AgreementRecord {
        facts: AgreementFacts {
            agreement_id: seed.agreement_id.clone(),
            status,
            acceptor_account_id: seed.account.clone(),
            proposer_account_id: SELLER.to_string(),
            offer_id: seed.offer_id.clone(),
            offer_set_id: None,
            product_id: Some(seed.product_id.clone()),
            start: seed.start,
            end: seed.end,
            acceptance_time: seed.start,
            initial_agreement_id: Some(seed.agreement_id.clone()),
            end_time_behavior: (active && seed.end.is_some()).then(|| EndTimeBehavior {
                kind: "EXPIRE".to_string(),
                reason_code: Some("NO_RENEWAL_TERM".to_string()),
            }),
        },
        terms: AgreementTerms {
            currency: priced.then(|| seed.currency.clone()),
            rate_card,
            free_trial: seed.free_trial.clone(),
            has_upfront: seed.upfront.is_some(),
        },
        entitlements: vec![AgreementEntitlement {
            license_arn: Some(seed.license_arn.clone()),
            status: entitlement,
            status_reason: Some(reason.to_string()),
        }],
        last_update_time: at,
    }
}

/// [`MemoryAgreementApi`] as an [`AgreementBackend`].
#[derive(Debug, Clone)]
pub struct MemoryAgreementBackend {
    api: MemoryAgreementApi,
    clock: Arc<Mutex<Instant>>,
}

impl MemoryAgreementBackend {
    /// No agreement, the clock at [`NOW`].
    pub fn new() -> Self {
        MemoryAgreementBackend {
            api: MemoryAgreementApi::new(),
            clock: Arc::new(Mutex::new(now())),
        }
    }
}

impl Default for MemoryAgreementBackend {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl AgreementBackend for MemoryAgreementBackend {
    fn api(&self) -> &dyn AgreementApi {
        &self.api
    }

    async fn seed(&self, agreement: &SeedAgreement) {
        let at = *lock(&self.clock);
        self.api
            .seed(record(agreement, AgreementStatus::Active, at));
    }

    async fn end(&self, agreement_id: &str, status: AgreementStatus) {
        let at = *lock(&self.clock);
        let held = self.api.update(agreement_id, |r| {
            r.facts.status = status;
            r.facts.end_time_behavior = None;
            r.last_update_time = at;
            for e in &mut r.entitlements {
                e.status = EntitlementStatus::Deprovisioned;
                e.status_reason = Some("AGREEMENT_INACTIVE".to_string());
            }
        });
        assert!(held, "no agreement {agreement_id} to end");
    }

    async fn advance(&self, by: TimeDelta) {
        *lock(&self.clock) += by;
    }

    async fn throttle_describe(&self) {
        self.api.throttle_next(AgreementOp::Describe);
    }
}

/// Expands to one `#[tokio::test]` per contract case, each on a fresh `$backend`
/// (an expression, awaited inside an async test if it needs to be).
#[macro_export]
macro_rules! agreement_contract_tests {
    ($backend:expr) => {
        $crate::agreement_contract_tests!(@cases $backend;
            describe_answers_a_seeded_agreement_and_none_for_an_unknown_one,
            describe_answers_an_ended_agreement_with_its_status,
            terms_keep_a_rate_card_exact,
            terms_read_a_free_trial,
            terms_without_a_usage_term_have_an_empty_rate_card,
            terms_and_entitlements_of_an_unknown_agreement_are_not_found,
            entitlements_follow_the_agreement,
            search_pages_to_the_end_sorted_by_id,
            search_by_license_arn,
            search_by_status_product_and_update_time,
            throttling_is_transient,
        );
    };
    (@cases $backend:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $case() {
                let backend = $backend;
                $crate::memory::agreement_contract::$case(&backend).await;
            }
        )*
    };
}

pub async fn describe_answers_a_seeded_agreement_and_none_for_an_unknown_one(
    b: &impl AgreementBackend,
) {
    let mut agreement = seed("agmt-describe-1");
    let end = now() + TimeDelta::days(335);
    agreement.end = Some(end);
    b.seed(&agreement).await;
    let facts = b
        .api()
        .describe("agmt-describe-1")
        .await
        .unwrap()
        .expect("found");
    assert_eq!(
        facts,
        record(&agreement, AgreementStatus::Active, now()).facts
    );
    assert_eq!(facts.end, Some(end));
    assert_eq!(
        facts.end_time_behavior.as_ref().map(|b| b.kind.as_str()),
        Some("EXPIRE")
    );
    assert_eq!(b.api().describe("agmt-unknown").await.unwrap(), None);
}

pub async fn describe_answers_an_ended_agreement_with_its_status(b: &impl AgreementBackend) {
    b.seed(&seed("agmt-ended-1")).await;
    b.end("agmt-ended-1", AgreementStatus::Cancelled).await;
    let facts = b.api().describe("agmt-ended-1").await.unwrap().unwrap();
    assert_eq!(facts.status, AgreementStatus::Cancelled);
    assert_eq!(facts.end_time_behavior, None);
}

pub async fn terms_keep_a_rate_card_exact(b: &impl AgreementBackend) {
    b.seed(&seed("agmt-terms-1")).await;
    let terms = b.api().terms("agmt-terms-1").await.unwrap();
    assert_eq!(terms.currency.as_deref(), Some("USD"));
    assert_eq!(terms.rate_card.len(), 2);
    let requests = terms.rate_card["requests"];
    assert_eq!(requests, dec("0.0025"));
    // Exact: the decimal as written, and arithmetic without float error.
    assert_eq!(requests.to_string(), "0.0025");
    assert_eq!(requests * Decimal::from(1_000_000), dec("2500"));
    assert_eq!(terms.rate_card["storage_gb"], dec("0.5"));
    assert_eq!(terms.free_trial, None);
    assert!(!terms.has_upfront);
}

pub async fn terms_read_a_free_trial(b: &impl AgreementBackend) {
    let mut agreement = seed("agmt-trial-1");
    agreement.free_trial = Some(FreeTrial {
        duration_days: 14,
        grants: vec![
            TrialGrant {
                dimension: "requests".to_string(),
                max_quantity: Some(1000),
            },
            TrialGrant {
                dimension: "storage_gb".to_string(),
                max_quantity: Some(5),
            },
        ],
    });
    b.seed(&agreement).await;
    // With PAGE_SIZE 2, its three terms (legal, usage, trial) take two pages.
    let terms = b.api().terms("agmt-trial-1").await.unwrap();
    assert_eq!(terms.free_trial, agreement.free_trial);
    assert_eq!(terms.rate_card.len(), 2, "the usage term is still read");
}

pub async fn terms_without_a_usage_term_have_an_empty_rate_card(b: &impl AgreementBackend) {
    let mut upfront = seed("agmt-upfront-1");
    upfront.rate_card.clear();
    upfront.upfront = Some(dec("1200"));
    upfront.end = Some(now() + TimeDelta::days(335));
    b.seed(&upfront).await;
    let terms = b.api().terms("agmt-upfront-1").await.unwrap();
    assert!(terms.rate_card.is_empty());
    assert!(terms.has_upfront);
    assert_eq!(terms.currency.as_deref(), Some("USD"));

    let mut free = seed("agmt-free-1");
    free.rate_card.clear();
    b.seed(&free).await;
    let terms = b.api().terms("agmt-free-1").await.unwrap();
    assert_eq!(terms, AgreementTerms::default());
}

pub async fn terms_and_entitlements_of_an_unknown_agreement_are_not_found(
    b: &impl AgreementBackend,
) {
    let err = b.api().terms("agmt-unknown").await.unwrap_err();
    assert!(
        matches!(&err, AgreementError::NotFound { agreement_id, .. } if agreement_id == "agmt-unknown"),
        "{err:?}"
    );
    assert!(!err.is_transient());
    let err = b.api().entitlements("agmt-unknown").await.unwrap_err();
    assert!(matches!(err, AgreementError::NotFound { .. }), "{err:?}");
}

pub async fn entitlements_follow_the_agreement(b: &impl AgreementBackend) {
    b.seed(&seed("agmt-ent-1")).await;
    let mut future = seed("agmt-ent-2");
    future.start = now() + TimeDelta::days(3);
    b.seed(&future).await;
    let provisioned = b.api().entitlements("agmt-ent-1").await.unwrap();
    assert_eq!(
        provisioned,
        vec![AgreementEntitlement {
            license_arn: Some(LICENSE.to_string()),
            status: EntitlementStatus::Provisioned,
            status_reason: Some("AGREEMENT_ACTIVE".to_string()),
        }]
    );
    let scheduled = b.api().entitlements("agmt-ent-2").await.unwrap();
    assert_eq!(scheduled.len(), 1);
    assert_eq!(scheduled[0].status, EntitlementStatus::Scheduled);
    assert_eq!(
        scheduled[0].status_reason.as_deref(),
        Some("FUTURE_START_DATE")
    );
    b.end("agmt-ent-1", AgreementStatus::Expired).await;
    let ended = b.api().entitlements("agmt-ent-1").await.unwrap();
    assert_eq!(ended[0].status, EntitlementStatus::Deprovisioned);
    assert_eq!(ended[0].license_arn.as_deref(), Some(LICENSE));
}

pub async fn search_pages_to_the_end_sorted_by_id(b: &impl AgreementBackend) {
    // Seeded out of order; some with an end date, which the API sorts by.
    let ids = [
        "agmt-page-05",
        "agmt-page-02",
        "agmt-page-07",
        "agmt-page-01",
        "agmt-page-04",
        "agmt-page-06",
        "agmt-page-03",
    ];
    for (i, id) in ids.iter().enumerate() {
        let mut agreement = seed(id);
        if i % 2 == 0 {
            agreement.end = Some(now() + TimeDelta::days(100 - i as i64));
        }
        b.seed(&agreement).await;
    }
    let found = b.api().search(&AgreementSearch::default()).await.unwrap();
    let found_ids: Vec<&str> = found.iter().map(|s| s.agreement_id.as_str()).collect();
    let mut sorted = ids.to_vec();
    sorted.sort_unstable();
    assert_eq!(found_ids, sorted, "every page, once each, by id");
    let first = &found[0];
    assert_eq!(first.status, AgreementStatus::Active);
    assert_eq!(first.acceptor_account_id, BUYER);
    assert_eq!(first.start, now() - TimeDelta::days(30));
    assert_eq!(first.license_arns, vec![LICENSE.to_string()]);
    assert_eq!(first.initial_agreement_id.as_deref(), Some("agmt-page-01"));
    assert_eq!(first.last_update_time, Some(now()));
}

pub async fn search_by_license_arn(b: &impl AgreementBackend) {
    b.seed(&seed("agmt-lic-1")).await;
    let mut other = seed("agmt-lic-2");
    other.license_arn = LICENSE_2.to_string();
    other.account = "444455556666".to_string();
    b.seed(&other).await;
    let found = b
        .api()
        .search(&AgreementSearch {
            license_arn: Some(LICENSE_2.to_string()),
            ..AgreementSearch::default()
        })
        .await
        .unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].agreement_id, "agmt-lic-2");
    assert_eq!(found[0].acceptor_account_id, "444455556666");
    assert_eq!(found[0].license_arns, vec![LICENSE_2.to_string()]);
    let none = b
        .api()
        .search(&AgreementSearch {
            license_arn: Some("arn:aws:license-manager::123456789012:license:l-none".into()),
            ..AgreementSearch::default()
        })
        .await
        .unwrap();
    assert!(none.is_empty());
}

pub async fn search_by_status_product_and_update_time(b: &impl AgreementBackend) {
    b.seed(&seed("agmt-filter-1")).await;
    let mut other_product = seed("agmt-filter-2");
    other_product.product_id = "prod-other5678".to_string();
    b.seed(&other_product).await;
    b.advance(TimeDelta::hours(1)).await;
    let later = now() + TimeDelta::hours(1);
    b.seed(&seed("agmt-filter-3")).await;
    b.end("agmt-filter-3", AgreementStatus::Cancelled).await;

    let ids = |found: Vec<crate::ports::AgreementSummary>| -> Vec<String> {
        found.into_iter().map(|s| s.agreement_id).collect()
    };
    let cancelled = b
        .api()
        .search(&AgreementSearch {
            status: Some(AgreementStatus::Cancelled),
            ..AgreementSearch::default()
        })
        .await
        .unwrap();
    assert_eq!(cancelled[0].status, AgreementStatus::Cancelled);
    assert_eq!(ids(cancelled), vec!["agmt-filter-3"]);
    let of_product = b
        .api()
        .search(&AgreementSearch {
            product_id: Some(PRODUCT.to_string()),
            status: Some(AgreementStatus::Active),
            ..AgreementSearch::default()
        })
        .await
        .unwrap();
    assert_eq!(ids(of_product), vec!["agmt-filter-1"]);
    let changed = b
        .api()
        .search(&AgreementSearch {
            updated_after: Some(later),
            ..AgreementSearch::default()
        })
        .await
        .unwrap();
    assert_eq!(changed[0].last_update_time, Some(later));
    assert_eq!(ids(changed), vec!["agmt-filter-3"]);
}

pub async fn throttling_is_transient(b: &impl AgreementBackend) {
    b.seed(&seed("agmt-throttle-1")).await;
    b.throttle_describe().await;
    let mut failures = Vec::new();
    for _ in 0..10 {
        if let Err(err) = b.api().describe("agmt-throttle-1").await {
            failures.push(err);
        }
    }
    assert!(!failures.is_empty(), "no call was throttled");
    for err in failures {
        assert!(err.is_transient(), "{err:?}");
        assert!(err.to_string().contains("Throttling"), "{err}");
    }
}

#[cfg(test)]
mod tests {
    crate::agreement_contract_tests!(
        crate::memory::agreement_contract::MemoryAgreementBackend::new()
    );
}

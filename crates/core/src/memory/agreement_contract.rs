//! The Agreement API contract: one set of assertions every [`AgreementApi`] must pass,
//! run against [`MemoryAgreementApi`] (this crate's tests) and against the SDK adapter
//! talking to the Marketplace simulator over HTTP (`crates/aws/tests`), so the fake
//! the reconciliation is tested on answers as the real API does: found and not found,
//! exact rate cards, free trials, terms without a usage price, entitlements by
//! status, search filters, paging to the end, throttling as a transient failure, and
//! the corrections' calls: invoices built from billed usage once its month has ended,
//! billing adjustments idempotent by client token and never above what an invoice has
//! left, and their status from `PENDING` to `COMPLETED`.
//!
//! A backend implements [`AgreementBackend`] (seeding in the simulator's terms);
//! [`agreement_contract_tests!`](crate::agreement_contract_tests) expands to one
//! `#[tokio::test]` per case.

// A test suite: a failed expectation is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use chrono::{Datelike, Months, TimeDelta, TimeZone, Timelike, Utc};
use rust_decimal::Decimal;

use super::{AgreementOp, AgreementRecord, MemoryAgreementApi};
use crate::ports::{
    AdjustmentRequest, AdjustmentState, AdjustmentStatus, AgreementApi, AgreementEntitlement,
    AgreementError, AgreementFacts, AgreementSearch, AgreementStatus, AgreementTerms,
    BATCH_CREATE_BILLING_ADJUSTMENT_REQUEST, BillingPeriod, EndTimeBehavior, EntitlementStatus,
    FreeTrial, INCORRECT_METERING, InvoiceSummary, LIST_AGREEMENT_INVOICE_LINE_ITEMS, TrialGrant,
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
    /// Moves the backend's clock (what `lastUpdateTime` is stamped with) forward: the
    /// invoices of the months ended by then are issued.
    async fn advance(&self, by: TimeDelta);
    /// Makes at least one of the next 10 `describe` calls throttled (the memory API
    /// injects it; the simulator turns its 5-per-second quota on).
    async fn throttle_describe(&self);
    /// Bills `quantity` of `dimension` for (`license`, `account`) at `hour` (on the
    /// hour, any time before the clock: the clock is not moved), as an accepted
    /// `BatchMeterUsage` record does: the simulator's ledger, where a second record of
    /// the same hour and dimension bills nothing. The invoice of its month (issued on
    /// the 1st of the next) prices it by the rate card of every agreement of that
    /// license and buyer whose term covers the hour, outside its free trial.
    async fn bill(
        &self,
        license: &str,
        account: &str,
        dimension: &str,
        quantity: u32,
        hour: Instant,
    );
    /// Lets every pending billing adjustment complete: the simulator's minute of
    /// processing (the clock moves 2 minutes on).
    async fn settle(&self);
}

/// What a `bill` put in the ledger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BilledHour {
    pub license: String,
    pub account: String,
    pub dimension: String,
    pub quantity: u32,
    pub hour: Instant,
}

/// The first instant of a month.
fn month_start(year: i32, month: u32) -> Option<Instant> {
    Utc.with_ymd_and_hms(year, month, 1, 0, 0, 0).single()
}

/// The invoices the simulator lists for `seed` at `now` (its `invoices`), before
/// adjustments: one per calendar month of billed usage priced by the rate card
/// (issued on the 1st of the next month; free-trial days and unpriced dimensions
/// not charged, nor a month of nothing), and one for an upfront price (issued at
/// acceptance, which is the start here).
pub fn invoices_of(
    seed: &SeedAgreement,
    billed: &[BilledHour],
    now: Instant,
) -> Vec<InvoiceSummary> {
    let trial_end = seed
        .free_trial
        .as_ref()
        .map(|t| seed.start + TimeDelta::days(i64::from(t.duration_days)));
    let mut months: BTreeMap<(i32, u32), Decimal> = BTreeMap::new();
    for record in billed {
        let ours = record.license == seed.license_arn
            && record.account == seed.account
            && record.hour >= seed.start
            && seed.end.is_none_or(|end| record.hour < end)
            && trial_end.is_none_or(|end| record.hour >= end);
        let price = seed
            .rate_card
            .iter()
            .find(|(dimension, _)| *dimension == record.dimension)
            .map(|(_, price)| *price);
        if let (true, Some(price)) = (ours, price) {
            *months
                .entry((record.hour.year(), record.hour.month()))
                .or_default() += price * Decimal::from(record.quantity);
        }
    }
    let invoice =
        |kind: &str, (year, month): (i32, u32), amount: Decimal, issued: Instant| InvoiceSummary {
            agreement_id: seed.agreement_id.clone(),
            invoice_id: format!("E2E{year:04}{month:02}01-{kind}-{}", seed.agreement_id),
            invoice_type: "INVOICE".to_string(),
            amount,
            max_adjustment: amount,
            currency: seed.currency.clone(),
            period: Some(BillingPeriod { year, month }),
            issued: Some(issued),
        };
    let mut out = Vec::new();
    if let Some(price) = seed.upfront {
        let at = seed.start;
        out.push(invoice("upfront", (at.year(), at.month()), price, at));
    }
    for ((year, month), amount) in months {
        let issued = month_start(year, month).and_then(|m| m.checked_add_months(Months::new(1)));
        if let Some(issued) = issued.filter(|_| amount > Decimal::ZERO) {
            out.push(invoice("usage", (year, month), amount, issued));
        }
    }
    out.retain(|i| i.issued.is_some_and(|at| at <= now));
    out
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

/// The memory backend's side of the world: its clock, what was seeded and billed.
#[derive(Debug)]
struct World {
    clock: Instant,
    seeds: BTreeMap<String, SeedAgreement>,
    billed: Vec<BilledHour>,
}

/// [`MemoryAgreementApi`] as an [`AgreementBackend`]: it keeps the seeds and the
/// billed hours, and seeds the invoices the simulator would list ([`invoices_of`],
/// less what adjustments not failed took) whenever the clock, the seeds or the
/// ledger change.
#[derive(Debug, Clone)]
pub struct MemoryAgreementBackend {
    api: MemoryAgreementApi,
    world: Arc<Mutex<World>>,
}

impl MemoryAgreementBackend {
    /// No agreement, the clock at [`NOW`].
    pub fn new() -> Self {
        MemoryAgreementBackend {
            api: MemoryAgreementApi::new(),
            world: Arc::new(Mutex::new(World {
                clock: now(),
                seeds: BTreeMap::new(),
                billed: Vec::new(),
            })),
        }
    }

    fn clock(&self) -> Instant {
        lock(&self.world).clock
    }

    /// Seeds every invoice issued by the clock, its `maxAdjustmentAmount` what its
    /// amount leaves after the adjustments not failed.
    fn issue_invoices(&self) {
        let (now, seeds, billed) = {
            let world = lock(&self.world);
            (world.clock, world.seeds.clone(), world.billed.clone())
        };
        let adjustments = self.api.adjustments();
        for seed in seeds.values() {
            for invoice in invoices_of(seed, &billed, now) {
                let adjusted: Decimal = adjustments
                    .iter()
                    .filter(|(request, state)| {
                        request.agreement_id == invoice.agreement_id
                            && request.original_invoice_id == invoice.invoice_id
                            && state.status != AdjustmentStatus::ValidationFailed
                    })
                    .map(|(request, _)| request.amount)
                    .sum();
                self.api.seed_invoice(InvoiceSummary {
                    max_adjustment: (invoice.amount - adjusted).max(Decimal::ZERO),
                    ..invoice
                });
            }
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
        let at = {
            let mut world = lock(&self.world);
            world
                .seeds
                .insert(agreement.agreement_id.clone(), agreement.clone());
            world.clock
        };
        self.api
            .seed(record(agreement, AgreementStatus::Active, at));
        self.issue_invoices();
    }

    async fn end(&self, agreement_id: &str, status: AgreementStatus) {
        let at = self.clock();
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
        lock(&self.world).clock += by;
        self.issue_invoices();
    }

    async fn throttle_describe(&self) {
        self.api.throttle_next(AgreementOp::Describe);
    }

    async fn bill(
        &self,
        license: &str,
        account: &str,
        dimension: &str,
        quantity: u32,
        hour: Instant,
    ) {
        {
            let mut world = lock(&self.world);
            assert!(hour <= world.clock, "billed at {hour}, after the clock");
            let hour = hour
                .with_minute(0)
                .and_then(|h| h.with_second(0))
                .and_then(|h| h.with_nanosecond(0))
                .expect("an hour");
            let billed = BilledHour {
                license: license.to_string(),
                account: account.to_string(),
                dimension: dimension.to_string(),
                quantity,
                hour,
            };
            // The ledger's key: a second record of the hour bills nothing.
            let known: BTreeSet<_> = world
                .billed
                .iter()
                .map(|b| (&b.license, &b.account, &b.dimension, b.hour))
                .collect();
            if known.contains(&(&billed.license, &billed.account, &billed.dimension, hour)) {
                return;
            }
            world.billed.push(billed);
        }
        self.issue_invoices();
    }

    async fn settle(&self) {
        let at = {
            let mut world = lock(&self.world);
            world.clock += TimeDelta::minutes(2);
            world.clock
        };
        self.api
            .settle_adjustments_at(AdjustmentStatus::Completed, None, Some(at));
        self.issue_invoices();
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
            invoices_list_a_month_of_billed_usage_once_it_has_ended,
            invoices_charge_neither_trial_days_nor_unpriced_dimensions,
            invoices_of_an_unknown_agreement_are_not_found,
            an_adjustment_is_filed_once_per_client_token,
            a_client_token_used_for_another_request_is_refused_on_its_own,
            an_amount_above_what_the_invoice_has_left_refuses_the_whole_call,
            an_adjustment_is_pending_then_completed_with_its_credit_memo,
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

/// The hour the cases bill in: two hours before [`NOW`], in November 2026.
pub fn billed_hour() -> Instant {
    now() - TimeDelta::hours(2)
}

/// How far [`NOW`] is from 2026-12-02T00:00Z: November's invoice has been issued.
pub fn past_month_end() -> TimeDelta {
    TimeDelta::hours(36)
}

/// November 2026, the month the cases bill.
pub const NOVEMBER: BillingPeriod = BillingPeriod {
    year: 2026,
    month: 11,
};

/// An adjustment entry of the cases: `amount` USD off `invoice_id` of `agreement_id`.
pub fn refund(
    agreement_id: &str,
    invoice_id: &str,
    amount: &str,
    token: &str,
) -> AdjustmentRequest {
    AdjustmentRequest {
        agreement_id: agreement_id.to_string(),
        original_invoice_id: invoice_id.to_string(),
        amount: dec(amount),
        currency: "USD".to_string(),
        reason_code: INCORRECT_METERING.to_string(),
        description: Some("contract: metered twice".to_string()),
        client_token: token.to_string(),
    }
}

/// Seeds `agreement_id` ([`seed`]), bills 1000 `requests` (2.50) and 10 `storage_gb`
/// (5.00) at [`billed_hour`], and moves past November: its one invoice of 7.50.
pub async fn billed_invoice(b: &impl AgreementBackend, agreement_id: &str) -> InvoiceSummary {
    b.seed(&seed(agreement_id)).await;
    b.bill(LICENSE, BUYER, "requests", 1000, billed_hour())
        .await;
    b.bill(LICENSE, BUYER, "storage_gb", 10, billed_hour())
        .await;
    b.advance(past_month_end()).await;
    let mut invoices = b.api().invoices(agreement_id, None).await.unwrap();
    assert_eq!(invoices.len(), 1, "{invoices:?}");
    let invoice = invoices.remove(0);
    assert_eq!(invoice.amount, dec("7.5"));
    invoice
}

/// What `invoice_id` of `agreement_id` has left to adjust now.
async fn left(b: &impl AgreementBackend, agreement_id: &str, invoice_id: &str) -> Decimal {
    let invoices = b.api().invoices(agreement_id, None).await.unwrap();
    invoices
        .iter()
        .find(|i| i.invoice_id == invoice_id)
        .unwrap_or_else(|| panic!("no invoice {invoice_id} in {invoices:?}"))
        .max_adjustment
}

fn refused_for(err: &AgreementError) -> Option<&str> {
    match err {
        AgreementError::Refused {
            operation, reason, ..
        } if *operation == BATCH_CREATE_BILLING_ADJUSTMENT_REQUEST => reason.as_deref(),
        _ => None,
    }
}

pub async fn invoices_list_a_month_of_billed_usage_once_it_has_ended(b: &impl AgreementBackend) {
    b.seed(&seed("agmt-inv-1")).await;
    let mut quiet = seed("agmt-inv-2");
    quiet.license_arn = LICENSE_2.to_string();
    b.seed(&quiet).await;
    b.bill(LICENSE, BUYER, "requests", 1000, billed_hour())
        .await;
    b.bill(LICENSE, BUYER, "storage_gb", 10, billed_hour())
        .await;
    b.bill(
        LICENSE,
        BUYER,
        "requests",
        400,
        billed_hour() + TimeDelta::hours(1),
    )
    .await;
    // The same hour and dimension again: the ledger bills it once.
    b.bill(LICENSE, BUYER, "requests", 999, billed_hour()).await;
    assert_eq!(
        b.api().invoices("agmt-inv-1", None).await.unwrap(),
        vec![],
        "November is still open"
    );

    b.advance(past_month_end()).await;
    let invoices = b.api().invoices("agmt-inv-1", None).await.unwrap();
    assert_eq!(invoices.len(), 1, "{invoices:?}");
    let invoice = &invoices[0];
    assert_eq!(invoice.agreement_id, "agmt-inv-1");
    assert!(!invoice.invoice_id.is_empty());
    assert_eq!(invoice.invoice_type, "INVOICE");
    assert!(invoice.is_invoice());
    // 1400 x 0.0025 + 10 x 0.5, exactly.
    assert_eq!(invoice.amount, dec("8.5"));
    assert_eq!(invoice.max_adjustment, invoice.amount);
    assert_eq!(invoice.currency, "USD");
    assert_eq!(invoice.period, Some(NOVEMBER));
    assert_eq!(invoice.issued, parse_instant("2026-12-01T00:00:00Z"));

    let of_november = b
        .api()
        .invoices("agmt-inv-1", Some(NOVEMBER))
        .await
        .unwrap();
    assert_eq!(of_november, invoices);
    for other in [
        BillingPeriod {
            year: 2026,
            month: 10,
        },
        BillingPeriod {
            year: 2026,
            month: 12,
        },
        BillingPeriod {
            year: 2025,
            month: 11,
        },
    ] {
        let none = b.api().invoices("agmt-inv-1", Some(other)).await.unwrap();
        assert!(none.is_empty(), "{other}: {none:?}");
    }
    assert_eq!(
        b.api().invoices("agmt-inv-2", None).await.unwrap(),
        vec![],
        "another license billed nothing"
    );
}

pub async fn invoices_charge_neither_trial_days_nor_unpriced_dimensions(b: &impl AgreementBackend) {
    // Started 2026-10-31T12:00Z; its 14-day trial ends 2026-11-14T12:00Z.
    let mut agreement = seed("agmt-inv-trial");
    agreement.free_trial = Some(FreeTrial {
        duration_days: 14,
        grants: vec![TrialGrant {
            dimension: "requests".to_string(),
            max_quantity: Some(100_000),
        }],
    });
    b.seed(&agreement).await;
    let at = |s: &str| parse_instant(s).unwrap();
    // October: trial days only, so no October invoice at all.
    b.bill(LICENSE, BUYER, "requests", 5000, at("2026-10-31T20:00:00Z"))
        .await;
    b.bill(LICENSE, BUYER, "requests", 5000, at("2026-11-14T11:00:00Z"))
        .await;
    b.bill(LICENSE, BUYER, "requests", 200, at("2026-11-14T12:00:00Z"))
        .await;
    b.bill(LICENSE, BUYER, "unpriced", 50, billed_hour()).await;
    b.advance(past_month_end()).await;
    let invoices = b.api().invoices("agmt-inv-trial", None).await.unwrap();
    assert_eq!(invoices.len(), 1, "{invoices:?}");
    assert_eq!(invoices[0].period, Some(NOVEMBER));
    assert_eq!(
        invoices[0].amount,
        dec("0.5"),
        "200 x 0.0025 after the trial"
    );
}

pub async fn invoices_of_an_unknown_agreement_are_not_found(b: &impl AgreementBackend) {
    let err = b.api().invoices("agmt-unknown", None).await.unwrap_err();
    assert!(
        matches!(&err, AgreementError::NotFound { operation, agreement_id }
            if *operation == LIST_AGREEMENT_INVOICE_LINE_ITEMS && agreement_id == "agmt-unknown"),
        "{err:?}"
    );
    assert!(!err.is_transient());
}

pub async fn an_adjustment_is_filed_once_per_client_token(b: &impl AgreementBackend) {
    let invoice = billed_invoice(b, "agmt-adj-1").await;
    let entry = refund("agmt-adj-1", &invoice.invoice_id, "2.00", "refund-1");
    let first = b
        .api()
        .request_adjustments(std::slice::from_ref(&entry))
        .await
        .unwrap();
    assert_eq!(first.refused, vec![]);
    assert_eq!(first.filed.len(), 1, "{first:?}");
    assert_eq!(first.filed[0].client_token, "refund-1");
    let id = first.filed[0].adjustment_id.clone();
    assert!(id.starts_with("ba-"), "{id}");
    assert_eq!(left(b, "agmt-adj-1", &invoice.invoice_id).await, dec("5.5"));

    // The same entry again (a rerun after a lost answer): the same adjustment.
    let again = b
        .api()
        .request_adjustments(std::slice::from_ref(&entry))
        .await
        .unwrap();
    assert_eq!(again, first);
    assert_eq!(
        left(b, "agmt-adj-1", &invoice.invoice_id).await,
        dec("5.5"),
        "taken once"
    );

    let state = b
        .api()
        .adjustment("agmt-adj-1", &id)
        .await
        .unwrap()
        .expect("the adjustment");
    assert_eq!(state.adjustment_id, id);
    assert_eq!(state.agreement_id, "agmt-adj-1");
    assert_eq!(state.original_invoice_id, invoice.invoice_id);
    assert_eq!(state.amount, dec("2"));
    assert_eq!(state.currency, "USD");
    assert_eq!(
        state.client_token, None,
        "GetBillingAdjustmentRequest has none"
    );
    assert_eq!(state.status, AdjustmentStatus::Pending);
    assert_eq!(state.status_message, None);
}

pub async fn a_client_token_used_for_another_request_is_refused_on_its_own(
    b: &impl AgreementBackend,
) {
    let invoice = billed_invoice(b, "agmt-adj-2").await;
    let id = &invoice.invoice_id;
    let first = b
        .api()
        .request_adjustments(&[refund("agmt-adj-2", id, "2", "refund-1")])
        .await
        .unwrap();
    assert_eq!(first.filed.len(), 1);

    let mixed = b
        .api()
        .request_adjustments(&[
            refund("agmt-adj-2", id, "3", "refund-1"),
            refund("agmt-adj-2", id, "1", "refund-2"),
            refund("agmt-adj-2", "E2E-no-such-invoice", "1", "refund-3"),
        ])
        .await
        .unwrap();
    assert_eq!(mixed.filed.len(), 1, "{mixed:?}");
    assert_eq!(mixed.filed[0].client_token, "refund-2");
    assert_ne!(mixed.filed[0].adjustment_id, first.filed[0].adjustment_id);
    let codes: Vec<(&str, &str)> = mixed
        .refused
        .iter()
        .map(|r| (r.client_token.as_str(), r.code.as_str()))
        .collect();
    assert_eq!(
        codes,
        vec![
            ("refund-1", "CONFLICT_EXCEPTION"),
            ("refund-3", "RESOURCE_NOT_FOUND_EXCEPTION"),
        ]
    );
    assert!(mixed.refused.iter().all(|r| !r.message.is_empty()));
    // 7.50 less refund-1's 2 and refund-2's 1: the conflict took nothing.
    assert_eq!(left(b, "agmt-adj-2", id).await, dec("4.5"));

    // An agreement the API does not know: every entry refused on its own.
    let unknown = b
        .api()
        .request_adjustments(&[refund("agmt-unknown", id, "1", "refund-4")])
        .await
        .unwrap();
    assert_eq!(unknown.filed, vec![]);
    assert_eq!(unknown.refused.len(), 1);
    assert_eq!(unknown.refused[0].client_token, "refund-4");
    assert_eq!(unknown.refused[0].code, "RESOURCE_NOT_FOUND_EXCEPTION");
}

pub async fn an_amount_above_what_the_invoice_has_left_refuses_the_whole_call(
    b: &impl AgreementBackend,
) {
    let invoice = billed_invoice(b, "agmt-adj-3").await;
    let id = &invoice.invoice_id;
    // 1 + 7 is above the 7.50 left: neither entry is made.
    let err = b
        .api()
        .request_adjustments(&[
            refund("agmt-adj-3", id, "1", "over-1"),
            refund("agmt-adj-3", id, "7", "over-2"),
        ])
        .await
        .unwrap_err();
    assert_eq!(
        refused_for(&err),
        Some("EXCEEDED_MAXIMUM_ADJUSTMENT_AMOUNT"),
        "{err:?}"
    );
    assert!(
        matches!(&err, AgreementError::Refused { code, message, .. }
            if code == "ValidationException" && !message.is_empty()),
        "{err:?}"
    );
    assert!(!err.is_transient());
    let err = b
        .api()
        .request_adjustments(&[refund("agmt-adj-3", id, "7.51", "over-3")])
        .await
        .unwrap_err();
    assert_eq!(
        refused_for(&err),
        Some("EXCEEDED_MAXIMUM_ADJUSTMENT_AMOUNT"),
        "{err:?}"
    );
    // Another currency, and more than five entries: refused whole too.
    let mut euros = refund("agmt-adj-3", id, "1", "euros-1");
    euros.currency = "EUR".to_string();
    let err = b.api().request_adjustments(&[euros]).await.unwrap_err();
    assert_eq!(refused_for(&err), Some("INVALID_CURRENCY_CODE"), "{err:?}");
    let six: Vec<AdjustmentRequest> = (0..6)
        .map(|i| refund("agmt-adj-3", id, "0.01", &format!("many-{i}")))
        .collect();
    let err = b.api().request_adjustments(&six).await.unwrap_err();
    assert_eq!(
        refused_for(&err),
        Some("BILLING_ADJUSTMENTS_LIMIT_EXCEEDED"),
        "{err:?}"
    );
    // A broken entry: a signed amount, more than 8 decimals, a token off its pattern.
    for (entry, reason) in [
        (
            refund("agmt-adj-3", id, "-1", "signed-1"),
            "INVALID_ADJUSTMENT_AMOUNT",
        ),
        (
            refund("agmt-adj-3", id, "0.000000001", "tiny-1"),
            "INVALID_ADJUSTMENT_AMOUNT",
        ),
        (
            refund("agmt-adj-3", id, "1", "not a token"),
            "INVALID_CLIENT_TOKEN",
        ),
    ] {
        let err = b.api().request_adjustments(&[entry]).await.unwrap_err();
        assert_eq!(refused_for(&err), Some(reason), "{err:?}");
    }
    assert_eq!(left(b, "agmt-adj-3", id).await, dec("7.5"), "nothing made");

    // Nothing was made under those tokens: over-1 is new, and all that is left fits.
    let made = b
        .api()
        .request_adjustments(&[
            refund("agmt-adj-3", id, "1", "over-1"),
            refund("agmt-adj-3", id, "6.5", "rest-1"),
        ])
        .await
        .unwrap();
    assert_eq!(made.filed.len(), 2, "{made:?}");
    assert_eq!(made.refused, vec![]);
    assert_eq!(left(b, "agmt-adj-3", id).await, Decimal::ZERO);
}

pub async fn an_adjustment_is_pending_then_completed_with_its_credit_memo(
    b: &impl AgreementBackend,
) {
    let invoice = billed_invoice(b, "agmt-adj-4").await;
    let filed = b
        .api()
        .request_adjustments(&[refund("agmt-adj-4", &invoice.invoice_id, "2.5", "refund-1")])
        .await
        .unwrap();
    let id = filed.filed[0].adjustment_id.clone();
    let pending = b
        .api()
        .adjustment("agmt-adj-4", &id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(pending.status, AdjustmentStatus::Pending);

    b.settle().await;
    let completed = b
        .api()
        .adjustment("agmt-adj-4", &id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        completed,
        AdjustmentState {
            status: AdjustmentStatus::Completed,
            ..pending
        }
    );
    let invoices = b.api().invoices("agmt-adj-4", None).await.unwrap();
    assert_eq!(invoices.len(), 2, "{invoices:?}");
    assert_eq!(invoices[0].invoice_id, invoice.invoice_id);
    assert_eq!(invoices[0].max_adjustment, dec("5"));
    let memo = &invoices[1];
    assert_eq!(memo.invoice_type, "CREDIT_MEMO");
    assert!(!memo.is_invoice());
    assert_eq!(memo.agreement_id, "agmt-adj-4");
    assert_eq!(memo.amount, dec("2.5"));
    assert_eq!(memo.max_adjustment, Decimal::ZERO);
    assert_eq!(memo.currency, "USD");
    assert_eq!(memo.period, Some(NOVEMBER), "the month it refunds");
    assert!(memo.issued > invoice.issued, "{memo:?}");
    // A credit memo is nothing to refund against.
    let batch = b
        .api()
        .request_adjustments(&[refund("agmt-adj-4", &memo.invoice_id, "1", "refund-2")])
        .await
        .unwrap();
    assert_eq!(batch.refused.len(), 1, "{batch:?}");
    assert_eq!(batch.refused[0].code, "RESOURCE_NOT_FOUND_EXCEPTION");

    assert_eq!(
        b.api()
            .adjustment("agmt-adj-4", "ba-unknown")
            .await
            .unwrap(),
        None
    );
    assert_eq!(b.api().adjustment("agmt-unknown", &id).await.unwrap(), None);
}

#[cfg(test)]
mod tests {
    crate::agreement_contract_tests!(
        crate::memory::agreement_contract::MemoryAgreementBackend::new()
    );
}

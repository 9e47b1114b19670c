//! Money's figures (docs/performance.md, "Money"): the Agreement API calls the
//! estimates make per billed license (`rate_cards`, as `awsmp report`, `status` and
//! `failures` read them), before and after the agreement reconciliation keeps the
//! cards on the rows (and the calls that costs it), what a license's activation costs
//! (its License Updated read the card; the reconciliation after it), and how fast the estimate prices records once the rate cards
//! are read (`charges`), over 2,000 licenses, each on its own agreement, with 24 billed
//! hours of two dimensions each (96,000 records). The rate cards are read from the
//! in-memory Agreement API, which counts its calls; nothing here is on the submitter's
//! path (it prices nothing).
//!
//! Run: `cargo bench -p awsmp-operate --bench charges_figures`.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::hint::black_box;
use std::time::Instant as Clock;

use awsmp_core::clock::ManualClock;
use awsmp_core::lifecycle::reconcile::{Product, ReconcilePorts, ReconcileSettings, reconcile};
use awsmp_core::memory::agreement_contract::{PRODUCT, record, seed};
use awsmp_core::memory::fixtures::operator_record;
use awsmp_core::memory::{AgreementOp, MemoryAgreementApi, MemorySubscriberStore};
use awsmp_core::model::{AggregatedRecord, AggregatedStatus, Subscriber};
use awsmp_core::ports::AgreementStatus;
use awsmp_core::time::{HourBucket, parse_usage_timestamp};
use awsmp_operate::report::{charges, rate_cards};

const LICENSES: usize = 2_000;
const HOURS: i64 = 24;
const RUNS: usize = 5;

fn license(n: usize) -> String {
    format!("arn:aws:license-manager::123456789012:license:l-{n:032x}")
}

fn main() {
    let now = parse_usage_timestamp("2026-11-30T23:30:00Z").unwrap();
    let first: HourBucket = "2026-11-30T00".parse().unwrap();
    let subscribers = MemorySubscriberStore::new();
    let api = MemoryAgreementApi::new();
    let mut records: Vec<AggregatedRecord> = Vec::new();
    for n in 0..LICENSES {
        let lic = license(n);
        let agreement = format!("agmt-{n:08}");
        let mut row = Subscriber::new(&lic, "111122223333");
        row.agreement_id = Some(agreement.clone());
        subscribers.insert(row, now);
        let mut agreement_seed = seed(&agreement);
        agreement_seed.license_arn = lic.clone();
        api.seed(record(&agreement_seed, AgreementStatus::Active, now));
        for h in 0..HOURS {
            for dimension in ["requests", "storage_gb"] {
                let hour = first.plus_hours(h).to_string();
                let mut r = operator_record(
                    dimension,
                    &hour,
                    AggregatedStatus::Success,
                    1 + (n as i64 % 97),
                    None,
                );
                r.key.license_arn = lic.clone();
                records.push(r);
            }
        }
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let started = Clock::now();
    let (cards, unavailable) = runtime.block_on(rate_cards(&records, first, &subscribers, &api));
    let read_ms = started.elapsed().as_secs_f64() * 1000.0;
    assert!(unavailable.is_none(), "{unavailable:?}");
    assert_eq!(cards.len(), LICENSES);
    let describe = api.calls(AgreementOp::Describe);
    let terms = api.calls(AgreementOp::Terms);
    println!(
        "rate cards: {LICENSES} billed licenses read with {describe} DescribeAgreement + {terms} GetAgreementTerms calls ({:.1} per license per report, status or failures run; {read_ms:.0} ms in memory)",
        (describe + terms) as f64 / LICENSES as f64
    );
    // At the documented quotas (DescribeAgreement 5/s, GetAgreementTerms 10/s per
    // account), the reads of one run take at least this long.
    println!(
        "rate cards at AWS's quotas: at least {:.0} s per run for {LICENSES} licenses (DescribeAgreement 5/s bounds it)",
        describe as f64 / 5.0
    );
    // The agreement reconciliation keeps each license's card on its row: its first run
    // reads every agreement's terms once, later runs only an agreement that changed;
    // the estimates then read none.
    let clock = ManualClock::new(now);
    let ports = ReconcilePorts {
        agreements: &api,
        subscribers: &subscribers,
        clock: &clock,
    };
    let settings = live_settings();
    let mut terms_per_run = Vec::new();
    for _ in 0..2 {
        let before = api.calls(AgreementOp::Terms);
        let report = runtime.block_on(reconcile(ports, &settings)).unwrap();
        assert!(
            report.rate_cards.failed.is_empty(),
            "{:?}",
            report.rate_cards
        );
        terms_per_run.push(api.calls(AgreementOp::Terms) - before);
    }
    println!(
        "agreement reconciliation: its first run reads {} GetAgreementTerms for {LICENSES} licenses (at least {:.0} s at 10/s, inside its 900 s timeout), the next {} (a card is read again only when its agreement changes)",
        terms_per_run[0],
        terms_per_run[0] as f64 / 10.0,
        terms_per_run[1]
    );
    let before = api.calls(AgreementOp::Describe) + api.calls(AgreementOp::Terms);
    let (kept, _) = runtime.block_on(rate_cards(&records, first, &subscribers, &api));
    assert_eq!(kept, cards, "the kept cards are the ones the API answers");
    println!(
        "rate cards kept on the rows: {} Agreement API calls per report, status or failures run for {LICENSES} licenses",
        api.calls(AgreementOp::Describe) + api.calls(AgreementOp::Terms) - before
    );
    activation_figures(&runtime, now);
    let mut best = f64::MAX;
    for _ in 0..RUNS {
        let started = Clock::now();
        let priced = charges(&records, first, &cards, None);
        black_box(&priced);
        best = best.min(started.elapsed().as_secs_f64());
    }
    let priced = charges(&records, first, &cards, None);
    println!(
        "estimate: {} records priced in {:.1} ms ({:.0} records/s, best of {RUNS}); total {} USD",
        records.len(),
        best * 1000.0,
        records.len() as f64 / best,
        priced.total["USD"]
    );
    println!(
        "submitter's path: 0 Agreement API calls and 0 estimates (it prices nothing; the estimate runs in the operator tool only)"
    );
}

/// What keeping the cards at activation costs: each license's License Updated (handled
/// as the subscription function does, card included), once and redelivered, then the
/// two reconciliation runs after it.
fn activation_figures(runtime: &tokio::runtime::Runtime, now: awsmp_core::time::Instant) {
    use awsmp_core::lifecycle::MarketplaceEvent;
    use awsmp_core::lifecycle::reconcile::rate_cards::keep_after_event;
    use awsmp_core::lifecycle::subscription::apply_event;
    let subscribers = MemorySubscriberStore::new();
    let api = MemoryAgreementApi::new();
    let clock = ManualClock::new(now);
    let ports = ReconcilePorts {
        agreements: &api,
        subscribers: &subscribers,
        clock: &clock,
    };
    let events: Vec<String> = (0..LICENSES)
        .map(|n| {
            let lic = license(n);
            let agreement = format!("agmt-{n:08}");
            let mut agreement_seed = seed(&agreement);
            agreement_seed.license_arn = lic.clone();
            api.seed(record(&agreement_seed, AgreementStatus::Active, now));
            serde_json::json!({
                "source": "aws.agreement-marketplace",
                "detail-type": "License Updated - Manufacturer",
                "time": "2026-11-30T23:00:00Z",
                "detail": {
                    "license": {"arn": lic},
                    "acceptor": {"accountId": "111122223333"},
                    "agreement": {"id": agreement},
                    "product": {"code": "code"},
                }
            })
            .to_string()
        })
        .collect();
    let calls = || api.calls(AgreementOp::Describe) + api.calls(AgreementOp::Terms);
    let mut per_delivery = Vec::new();
    for _ in 0..2 {
        let before = calls();
        runtime.block_on(async {
            for (i, body) in events.iter().enumerate() {
                apply_event(&subscribers, &clock, &format!("m-{i}"), Some(body))
                    .await
                    .unwrap();
                let event = MarketplaceEvent::from_json_str(body).unwrap();
                let kept = keep_after_event(ports, &event).await;
                assert!(kept.failed.is_empty());
            }
        });
        per_delivery.push(calls() - before);
    }
    let settings = live_settings();
    let mut per_run = Vec::new();
    for _ in 0..2 {
        let before = api.calls(AgreementOp::Terms);
        runtime.block_on(reconcile(ports, &settings)).unwrap();
        per_run.push(api.calls(AgreementOp::Terms) - before);
    }
    println!(
        "activation: {LICENSES} License Updated read {} Agreement API calls ({:.1} per license: DescribeAgreement + GetAgreementTerms), redelivered {}; the reconciliation after them {} GetAgreementTerms (each card once more, learning lastUpdateTime), the next {}",
        per_delivery[0],
        per_delivery[0] as f64 / LICENSES as f64,
        per_delivery[1],
        per_run[0],
        per_run[1]
    );
}

/// A live reconciliation of the seeded product.
fn live_settings() -> ReconcileSettings {
    ReconcileSettings {
        products: vec![Product {
            product_id: PRODUCT.to_string(),
            product_code: "code".to_string(),
        }],
        dry_run: false,
    }
}

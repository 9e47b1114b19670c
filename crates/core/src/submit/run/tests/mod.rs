//! The submitter's run on the in-memory ports: claims, sends, bisection, outcomes, write-backs and age-out.
//! By topic: billing, failures, pipelining, age-out and the run's modes; the shared
//! fixtures are here.

use std::sync::Mutex;

use async_trait::async_trait;

use super::*;
use crate::aggregate::ZeroQuantityPolicy;
use crate::memory::{MemoryMeteringApi, claim_read};
use crate::model::{Allocation, SubscriptionStatus, Tag};
use crate::pipeline::testkit::*;
use crate::ports::{MeteringError, OperatorStore, PortError, UnclearAnswer};
use crate::submit::DeploymentMode;
use crate::submit::batch::BatchLimits;
use crate::submit::pacing::MIN_CALL_INTERVAL;
use crate::submit::{REASON_INTERRUPTED_SUBMISSION, REASON_ZERO_QUANTITY_SKIPPED};

const NOW: &str = "2026-11-30T10:30:00Z";

fn pending(key: &GroupKey, quantity: i64) -> AggregatedRecord {
    crate::memory::fixtures::pending_record(key.clone(), PRODUCT, quantity, 1)
}

/// Stores `n` pending records (dimension `d0..`) for license 1 in `hour`, entitled.
fn seed(world: &World, n: usize, hour: &str, quantity: i64) -> Vec<GroupKey> {
    let l = license(1);
    world.api.entitle(&l, ACCOUNT_A);
    (0..n)
        .map(|i| {
            let key = group(&l, ACCOUNT_A, &format!("d{i:03}"), hour);
            world
                .tables
                .insert_aggregated(pending(&key, quantity), world.clock.now());
            key
        })
        .collect()
}

fn status(world: &World, key: &GroupKey) -> AggregatedStatus {
    world.record(key).unwrap().status
}

/// One run at `now` with `settings` and the world's ports, no deadline; the clock is
/// left as it is.
async fn run(
    world: &World,
    now: Instant,
    settings: &SubmitSettings,
) -> Result<SubmitReport, PipelineError> {
    submit(now, settings, &world.submit_ports(), Budget::UNLIMITED).await
}

/// One run at `now` with the world's settings and ports but `api` as Marketplace.
async fn run_via(world: &World, now: Instant, api: Arc<dyn MeteringApi>) -> SubmitReport {
    let ports = SubmitPorts {
        metering: api,
        ..world.submit_ports()
    };
    submit(now, &world.submit_settings(), &ports, Budget::UNLIMITED)
        .await
        .unwrap()
}

mod age_out;
mod billing;
mod failures;
mod modes;
mod pipelining;

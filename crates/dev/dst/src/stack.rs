//! One main stack as the schedule deploys it: its faulty tables, queues, Marketplace,
//! metrics and the events stack's handlers, which every actor ([`crate::actors`]) runs
//! against; how Lambda hands a function an SQS batch and settles it after; and the
//! fault-free settling pass that runs every stage until the queues are empty.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent};
use awsmp_core::memory::{
    ManualClock, MemoryProfileStore, MemorySubscriberStore, MemoryTables, RecordingMetrics,
};
use awsmp_core::ports::Clock;
use awsmp_core::submit::{DeploymentMode, MeteringMode};
use awsmp_core::time::{Instant, MeteringLockHours};
use lambda_runtime::{Context, LambdaEvent};

use crate::actors::register;
use crate::executor::{self, Task};
use crate::options::{self, Deployment, Settings};
use crate::ports::{FaultyAggregated, FaultyMetering, FaultySubscribers, FaultyUsage, SkewedClock};
use crate::queue::{QueueSettings, SimQueue};
use crate::scenario::{ACCOUNT, MAX_STEPS, REGION, license};
use crate::sim::{FaultKind, Sim};
use crate::world::Event;

/// The work and flush queues' visibility timeout and redrive policy.
const WORK_QUEUE: QueueSettings = QueueSettings {
    visibility: Duration::from_secs(720),
    max_receives: 10,
};
/// The cleanup queue's.
const CLEANUP_QUEUE: QueueSettings = QueueSettings {
    visibility: Duration::from_secs(360),
    max_receives: 5,
};

/// One Region's main stack and the events stack's handlers beside it.
pub struct Stack {
    /// The metering Region.
    pub region: &'static str,
    /// The product it meters.
    pub product: &'static str,
    /// The simulation.
    pub sim: Sim,
    /// Time.
    pub clock: ManualClock,
    /// The usage table.
    pub usage: Arc<FaultyUsage>,
    /// The aggregated table.
    pub aggregated: Arc<FaultyAggregated>,
    /// The subscribers table (the events stack's, shared by every Region).
    pub subscribers: Arc<FaultySubscribers>,
    /// Marketplace.
    pub metering: Arc<FaultyMetering>,
    /// Every metric the stages emit.
    pub metrics: RecordingMetrics,
    /// The work queue.
    pub work: SimQueue,
    /// The flush queue (a deprovisioned license's final hours).
    pub deprovision: SimQueue,
    /// The cleanup queue.
    pub cleanup_queue: SimQueue,
    /// The Region's customer-profile table (the register function writes it, the
    /// discoverer sets a deprovisioned buyer's expiry).
    pub profiles: MemoryProfileStore,
    /// `METERING_LOCK_HOURS`.
    pub lock: MeteringLockHours,
    /// `DEPLOYMENT_MODE` is `direct-submit`.
    pub direct: bool,
    /// `ZERO_QUANTITY_POLICY`, the same for the aggregator and the submitter.
    pub zero_policy: awsmp_core::aggregate::ZeroQuantityPolicy,
    /// `METERING_MODE` with its test-account allowlist.
    pub metering_mode: MeteringMode,
    /// The subscription function.
    pub subscription: awsmp_subscription::State,
    /// The Agreement API the events stack's functions read (the subscription function's
    /// rate cards, the reconciliation: [`crate::actors::reconcile`] seeds it).
    pub agreements: awsmp_core::memory::MemoryAgreementApi,
    /// The deprovision-cleanup function.
    pub deprovision_cleanup: awsmp_deprovision_cleanup::State,
    /// The register function.
    pub register: awsmp_register::State,
    /// Each registration and the last status the page got.
    pub registrations: Mutex<Vec<(String, u16)>>,
    /// Each usage event the seller's service recorded, and its answer.
    pub ingested: Mutex<Vec<Event>>,
    /// The License Deprovisioned event of the run (redelivered while settling, as SQS
    /// redelivers a message whose handler died).
    pub deprovisioned: Mutex<Option<(String, Instant)>>,
    /// Each discoverer run's report (a run that failed has none).
    pub discoveries: Mutex<Vec<awsmp_core::discover::DiscoverReport>>,
    /// The events stack's functions (subscription, deprovision-cleanup) run beside this
    /// Region's pipeline (only one Region's: there is one events stack).
    pub events_stack: bool,
}

/// A function's clock for the whole schedule, `skew_ms` off the simulation's.
fn skewed_by(clock: &ManualClock, skew_ms: i64) -> Arc<dyn Clock> {
    Arc::new(SkewedClock::new(
        clock.clone(),
        chrono::Duration::milliseconds(skew_ms),
    ))
}

/// Locks `mutex`, whatever a panicking holder left.
pub fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Stack {
    /// The main stack `(region, product)` over its `tables` and `metering`, with the
    /// events stack's subscribers table (shared by every Region) and handlers.
    #[allow(clippy::too_many_arguments)]
    pub fn build(
        (region, product): (&'static str, &'static str),
        sim: &Sim,
        clock: &ManualClock,
        tables: &MemoryTables,
        subscribers: &MemorySubscriberStore,
        metering: Arc<FaultyMetering>,
        profiles: &MemoryProfileStore,
        (settings, deployment): (Settings, &Deployment),
    ) -> Stack {
        let licenses = [license(1), license(2), license(3)];
        let agreements = awsmp_core::memory::MemoryAgreementApi::new();
        let subscription_store: Arc<FaultySubscribers> =
            Arc::new(FaultySubscribers::new(subscribers.clone(), sim.clone()));
        let register = register::state(
            &licenses.iter().collect::<Vec<_>>(),
            subscription_store.clone(),
            profiles,
            clock,
        );
        let (metering_mode, allowlist) = match settings.dry_run {
            None => ("live", ""),
            Some(true) => ("dry-run", ACCOUNT),
            Some(false) => ("dry-run", "444455556666"),
        };
        Stack {
            region,
            product,
            sim: sim.clone(),
            clock: clock.clone(),
            usage: Arc::new(FaultyUsage::new(tables.usage_store(), sim.clone())),
            aggregated: Arc::new(
                FaultyAggregated::new(tables.aggregated_store(), sim.clone())
                    .watching_claims(tables.clone(), metering.lapses()),
            ),
            subscribers: subscription_store.clone(),
            metering,
            metrics: RecordingMetrics::new(),
            work: SimQueue::new("work", sim.clone(), clock.clone(), WORK_QUEUE),
            deprovision: SimQueue::new("deprovision", sim.clone(), clock.clone(), WORK_QUEUE),
            cleanup_queue: SimQueue::new("cleanup", sim.clone(), clock.clone(), CLEANUP_QUEUE),
            profiles: profiles.clone(),
            lock: settings.lock,
            direct: settings.direct,
            zero_policy: settings.zero_policy,
            // The same pair the submitter's config validates (a dry run needs an allowlist).
            metering_mode: MeteringMode::from_parts(
                metering_mode,
                &[allowlist]
                    .into_iter()
                    .filter(|a| !a.is_empty())
                    .map(str::to_string)
                    .collect::<Vec<_>>(),
            )
            .unwrap_or_else(|e| panic!("metering mode: {e}")),
            subscription: awsmp_subscription::State {
                config: Arc::new(awsmp_subscription::Config {
                    subscribers_table: "subscribers".into(),
                    rate_cards: true,
                }),
                subscribers: subscription_store.clone(),
                clock: skewed_by(clock, deployment.subscription_skew_ms),
                agreements: Some(Arc::new(agreements.clone())),
            },
            agreements,
            deprovision_cleanup: awsmp_deprovision_cleanup::State {
                config: Arc::new(awsmp_deprovision_cleanup::Config {
                    subscribers_table: "subscribers".into(),
                }),
                subscribers: subscription_store,
                clock: skewed_by(clock, deployment.deprovision_cleanup_skew_ms),
            },
            register,
            registrations: Mutex::new(Vec::new()),
            ingested: Mutex::new(Vec::new()),
            deprovisioned: Mutex::new(None),
            discoveries: Mutex::new(Vec::new()),
            events_stack: region == REGION,
        }
    }

    /// Its three queues.
    pub fn queues(&self) -> [&SimQueue; 3] {
        [&self.work, &self.deprovision, &self.cleanup_queue]
    }

    /// The bodies left in the queues.
    pub fn queued(&self) -> Vec<String> {
        self.queues().iter().flat_map(|q| q.bodies()).collect()
    }

    /// The bodies in the dead-letter queues.
    pub fn dead_letters(&self) -> Vec<String> {
        self.queues()
            .iter()
            .flat_map(|q| q.dead_letters())
            .collect()
    }

    /// `DEPLOYMENT_MODE`.
    pub fn mode(&self) -> DeploymentMode {
        if self.direct {
            DeploymentMode::DirectSubmit
        } else {
            DeploymentMode::Full
        }
    }

    /// The clock of the execution environment an invocation lands on: up to
    /// [`crate::scenario::MAX_CLOCK_SKEW_MS`] off the simulation's, either way.
    pub fn lambda_clock(&self) -> Arc<dyn Clock> {
        skewed_by(&self.clock, options::skew_ms(&self.sim))
    }

    /// The event time of a scheduled run: now, or (a retried schedule) minutes ago.
    pub fn invocation_time(&self, name: &str) -> Instant {
        let now = self.clock.now();
        if self.sim.fault(FaultKind::StaleInvocation, name) {
            // EventBridge retries a failed delivery for hours; a retry's event time may
            // be in an hour that has since ended.
            now - chrono::Duration::minutes(1 + i64::try_from(self.sim.below(60)).unwrap_or(0))
        } else {
            now
        }
    }

    /// The event an SQS event source mapping hands a function for `batch` (each body as
    /// the SQS adapter writes it), with the function's deadline `timeout_seconds` away.
    pub fn invocation(
        &self,
        batch: &[(u64, String)],
        queue: &SimQueue,
        timeout_seconds: i64,
    ) -> LambdaEvent<SqsEvent> {
        let records: Vec<awsmp_local_aws::SqsRecord> = batch
            .iter()
            .map(|(id, body)| awsmp_local_aws::SqsRecord {
                message_id: id.to_string(),
                receipt_handle: format!("r-{id}"),
                body: body.clone(),
                ..Default::default()
            })
            .collect();
        let arn = format!("arn:aws:sqs:{}:123456789012:{}", self.region, queue.name());
        let event =
            serde_json::from_value(awsmp_local_aws::sqs_event(&arn, &records)).unwrap_or_default();
        let mut context = Context::default();
        let deadline = self.clock.now() + chrono::Duration::seconds(timeout_seconds);
        context.deadline = u64::try_from(deadline.timestamp_millis()).unwrap_or(0);
        LambdaEvent::new(event, context)
    }

    /// One fault-free pass of every stage, serially, until the queues are empty.
    pub fn settle(&self) {
        let sim = &self.sim;
        let redelivery = lock(&self.deprovisioned).clone();
        let tasks = vec![Task::new("settle", async move {
            // At least once: the lifecycle message comes again (its first handler may
            // have died); applying it twice must change nothing.
            if let Some((license, at)) = &redelivery {
                self.lifecycle("License Deprovisioned - Manufacturer", license, *at)
                    .await;
            }
            if self.events_stack {
                self.deprovision_cleanup_once().await;
            }
            // Now and then a scheduled event EventBridge retried late arrives first: its
            // event time is up to an hour old (no fault: deliveries are like that).
            let stale = (sim.below(4) == 0)
                .then(|| self.clock.now() - chrono::Duration::minutes(1 + sim.below(60) as i64));
            if !self.direct {
                if let Some(at) = stale {
                    self.discover_at(at).await;
                }
                self.discover_once("settle").await;
            }
            // Bounded: a message that keeps failing is left for the next pass.
            for _ in 0..20 {
                for _ in 0..500 {
                    if !self.aggregate_one().await {
                        break;
                    }
                }
                for _ in 0..500 {
                    if !self.cleanup_one().await {
                        break;
                    }
                }
                if self.work.visible() + self.deprovision.visible() + self.cleanup_queue.visible()
                    == 0
                {
                    break;
                }
            }
            if let Some(at) = stale {
                self.submit_at(at).await;
            }
            self.submit_once("settle").await;
        })];
        executor::run(sim, tasks, false, MAX_STEPS, &|_| {});
    }
}

/// What SQS does with a batch after its invocation answered: deletes the messages not
/// reported failed; a reported one, or every one when the invocation failed, becomes
/// visible again after its visibility timeout.
pub fn settle_batch<E>(
    queue: &SimQueue,
    batch: &[(u64, String)],
    answer: Result<SqsBatchResponse, E>,
) {
    let failed: Vec<String> = match answer {
        Ok(response) => response
            .batch_item_failures
            .into_iter()
            .map(|f| f.item_identifier)
            .collect(),
        Err(_) => batch.iter().map(|(id, _)| id.to_string()).collect(),
    };
    for (id, _) in batch {
        if failed.contains(&id.to_string()) {
            queue.nack(*id);
        } else {
            queue.ack(*id);
        }
    }
}

//! One schedule: a seller's usage (one group of more than 99 rows, a poison dimension,
//! late rows arriving while the pipeline runs, a license deprovisioned mid-run), the
//! real use cases running concurrently as their Lambdas would (two discoverer runs, two
//! aggregator and one cleanup consumer, two submitter invocations that may overlap with
//! stale times, the subscription handler, deprovision-cleanup, and buyers registering
//! through the register handler while their lifecycle events land, the seller's service
//! recording events through `awsmp_usage::Meter`, the operator importing usage files),
//! now and then a second main stack (the product's second metering Region, or another
//! product in the same Region) with its own pipeline and Marketplace over the same
//! subscribers table, then a fault-free settling phase that runs the pipeline past
//! the 24-hour window.

use std::sync::Arc;
use std::time::Duration;

use std::sync::Mutex;

use aws_lambda_events::apigw::ApiGatewayProxyRequest;
use aws_lambda_events::eventbridge::EventBridgeEvent;
use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent};
use awsmp_core::aggregate::ZeroQuantityPolicy;
use awsmp_core::aggregate::run::{AggregatePorts, AggregateSettings};
use awsmp_core::cleanup::CleanupPorts;
use awsmp_core::discover::{DiscoverPorts, DiscoverSettings, discover};
use awsmp_core::guardrails::GuardrailContext;
use awsmp_core::guardrails::write::{accepts_raw_usage, check_row};
use awsmp_core::memory::{
    ManualClock, MemoryCustomerResolver, MemoryProfileStore, MemorySubscriberStore, MemoryTables,
    RecordingMetrics, reference_row,
};
use awsmp_core::pipeline::budget::Budget;
use awsmp_core::ports::{Clock, MeteringRecord, NewUsageRow, ResolvedCustomer, UsageStore};
use awsmp_core::retention::Retention;
use awsmp_core::submit::{
    DeploymentMode, MeteringMode, SubmitPorts, SubmitSettings, schedule, submit,
};
use awsmp_core::time::{self, HourBucket, Instant, MeteringLockHours, format_instant};
use awsmp_marketplace_sim::IdenticalRetryStatus;
use awsmp_operate::import::{ImportTarget, Progress, ProgressKeeper, one_deployment, write_lines};
use awsmp_operate::replay;
use awsmp_usage::{Meter, Recorded, Usage, UsageError};
use lambda_runtime::{Context, LambdaEvent};
use serde_json::json;

use crate::executor::{self, Task};
use crate::marketplace::{INVALID_DIMENSION, SimMarketplace};
use crate::ports::{FaultyAggregated, FaultyMetering, FaultySubscribers, FaultyUsage, SkewedClock};
use crate::queue::{QueueSettings, SimQueue};
use crate::sim::{FaultKind, Sim, yield_now};

/// The stack's product.
pub const PRODUCT: &str = "prod-sim";
/// Another product of the same seller, with its own main stack in the same Region and
/// the same events stack (subscribers table).
pub const SECOND_PRODUCT: &str = "prod-two";
/// The buyer account.
pub const ACCOUNT: &str = "111122223333";
/// The dimension Marketplace rejects (`InvalidUsageDimensionException`).
pub const POISON: &str = "poison";
/// The Region of the main stack (recorded in `registeredRegions` by the register function).
pub const REGION: &str = "us-west-2";
/// A second metering Region some schedules deploy: its own usage and aggregated
/// tables, queues and Marketplace (which deduplicates per Region), the same
/// subscribers table.
pub const SECOND_REGION: &str = "eu-west-1";
/// A body on the work queue that is no work message (sent by hand, or by another
/// version): reported failed by every receive, never deleted, dead-lettered after the
/// redrive policy's receives.
pub const GARBAGE: &str = r#"{"kind":"Rollup","version":2}"#;
/// The dimension the operator imports usage files for.
pub const IMPORTED: &str = "imported";
/// The registration page's origin.
const PAGE_ORIGIN: &str = "https://register.example.com";
/// Most an execution environment's clock is off the simulation's, in milliseconds.
pub const MAX_CLOCK_SKEW_MS: i64 = 2000;
/// The aggregator's Lambda timeout.
const AGGREGATOR_TIMEOUT_SECONDS: i64 = 120;
/// The cleanup function's Lambda timeout.
const CLEANUP_TIMEOUT_SECONDS: i64 = 60;
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
/// Most polls of one concurrent phase (a guard; reported when hit).
const MAX_STEPS: u64 = 200_000;

/// A license ARN that passes the guardrails.
pub fn license(n: u32) -> String {
    format!("arn:aws:license-manager::123456789012:license:l-{n:016}")
}

/// Everything one schedule built, for the invariant check.
pub struct World {
    /// The simulation context.
    pub sim: Sim,
    /// Usage + aggregated tables.
    pub tables: MemoryTables,
    /// Subscribers.
    pub subscribers: MemorySubscriberStore,
    /// Marketplace (its ledger).
    pub metering: Arc<FaultyMetering>,
    /// Time.
    pub clock: ManualClock,
    /// Polls, crashes and unfinished tasks of the concurrent phase.
    pub stats: executor::RunStats,
    /// Sort keys of the rows written before the pipeline ran: every fold of their group
    /// includes them, so none may ever be late usage (`HourAlreadySubmitted`).
    pub initial_rows: Vec<(String, String)>,
    /// Customer profiles the register function wrote.
    pub profiles: MemoryProfileStore,
    /// Each buyer's registration: license and the last HTTP status the page got.
    pub registrations: Vec<(String, u16)>,
    /// Licenses deprovisioned during the run (the others stay active).
    pub deprovisioned: Vec<String>,
    /// Every metric the pipeline's stages emitted.
    pub metrics: RecordingMetrics,
    /// A direct-submit stack: the seller wrote the aggregated records (no raw rows).
    pub direct: bool,
    /// A dry run (`METERING_MODE=dry-run`): whether the buyer's account is on its
    /// allowlist. `None`: live.
    pub dry_run: Option<bool>,
    /// When the last fault could happen (settling began): an hour whose window closes
    /// before the first fault-free run after it may age out without a violation.
    pub faults_end: Instant,
    /// What the seller's service was answered for each usage event it recorded
    /// through the ingestion port: (license, event id, quantity, answer).
    pub ingested: Vec<Event>,
    /// This world's metering Region.
    pub region: &'static str,
    /// This world's product.
    pub product: &'static str,
    /// The second metering Region's world, when the schedule deploys one.
    pub second: Option<Box<World>>,
    /// The usage files the operator imported.
    pub imports: Vec<Import>,
    /// The bodies left in this Region's queues.
    pub queued: Vec<String>,
    /// The bodies in this Region's dead-letter queues.
    pub dead_letters: Vec<String>,
    /// [`GARBAGE`] was sent to the work queue.
    pub garbage_sent: bool,
    /// The outcome-events function over this world's tables' streams, if it ran.
    pub outcomes: Option<crate::outcome_events::OutcomeEvents>,
    /// What the usage API answered the seller posting across the edges of time.
    pub edges: crate::api_edges::EdgeLog,
}

/// One usage file the operator imported with `usage import`.
#[derive(Debug, Clone)]
pub struct Import {
    /// The Region of the one deployment it was imported into.
    pub region: &'static str,
    /// That deployment's product.
    pub product: &'static str,
    /// Its lines: license, event id, quantity.
    pub lines: Vec<(String, String, i64)>,
    /// An import of it reported done (every line written or already written).
    pub done: bool,
    /// The deployment refused raw usage (direct-submit): nothing may be written.
    pub refused: bool,
}

/// The CloudEvents `source` of the seller's service posting to the usage API.
const SELLER_SOURCE: &str = "/seller/usage";

/// The `team` tags the seller's service allocates usage to.
const TEAMS: [&str; 2] = ["search", "ads"];

/// One usage event the seller's service recorded, and the answer it got.
#[derive(Debug, Clone)]
pub struct Event {
    /// License.
    pub license: String,
    /// Its event id as stored: the id sent, or a CloudEvent's key (its source and id).
    pub event_id: String,
    /// Quantity.
    pub quantity: i64,
    /// The `team` tag its whole quantity is allocated to, if any.
    pub team: Option<&'static str>,
    /// The answer.
    pub answer: Ingested,
}

/// The answer an ingestion write got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ingested {
    /// Written now.
    Created,
    /// The same event was written before: nothing changed.
    Duplicate,
    /// The event id holds other usage: nothing changed.
    Conflict,
    /// The stack takes no raw usage (direct-submit): nothing written.
    Refused,
    /// Every attempt failed (the table's errors, lost answers): written or not, the
    /// client cannot tell.
    Unanswered,
}

struct Stack {
    /// The metering Region.
    region: &'static str,
    /// The product it meters.
    product: &'static str,
    sim: Sim,
    clock: ManualClock,
    usage: Arc<FaultyUsage>,
    aggregated: Arc<FaultyAggregated>,
    subscribers: Arc<FaultySubscribers>,
    metering: Arc<FaultyMetering>,
    metrics: RecordingMetrics,
    work: SimQueue,
    deprovision: SimQueue,
    cleanup_queue: SimQueue,
    /// The Region's customer-profile table (the register function writes it, the
    /// discoverer sets a deprovisioned buyer's expiry).
    profiles: MemoryProfileStore,
    lock: MeteringLockHours,
    /// `DEPLOYMENT_MODE` is `direct-submit`.
    direct: bool,
    /// `ZERO_QUANTITY_POLICY`, the same for the aggregator and the submitter.
    zero_policy: ZeroQuantityPolicy,
    /// `METERING_MODE` with its test-account allowlist.
    metering_mode: MeteringMode,
    subscription: awsmp_subscription::State,
    deprovision_cleanup: awsmp_deprovision_cleanup::State,
    register: awsmp_register::State,
    registrations: Mutex<Vec<(String, u16)>>,
    ingested: Mutex<Vec<Event>>,
    /// The License Deprovisioned event of the run (redelivered while settling, as SQS
    /// redelivers a message whose handler died).
    deprovisioned: Mutex<Option<(String, Instant)>>,
    /// The events stack's functions (subscription, deprovision-cleanup) run beside this
    /// Region's pipeline (only one Region's: there is one events stack).
    events_stack: bool,
}

/// Every stage's `DATA_RETENTION_DAYS` in the simulation: the floor, so every final
/// write under faults must carry its `expiresAt` and no pending one ever may
/// ([`crate::invariant`]).
pub const RETENTION: Retention = Retention::MIN;

/// Every stack's `PROFILE_RETENTION_DAYS` in the simulation.
pub const PROFILE_RETENTION_DAYS: i64 = 30;

fn at(text: &str) -> Instant {
    time::parse_usage_timestamp(text).unwrap_or_default()
}

impl Stack {
    fn discover_settings(&self) -> DiscoverSettings {
        DiscoverSettings {
            retention: RETENTION,
            profile_retention: Some(chrono::Duration::days(PROFILE_RETENTION_DAYS)),
            ..DiscoverSettings::new(self.product, self.lock)
        }
    }

    fn aggregate_settings(&self) -> AggregateSettings {
        AggregateSettings {
            product_code: self.product.to_string(),
            lock: self.lock,
            zero_policy: self.zero_policy,
            retention: RETENTION,
        }
    }

    fn queues(&self) -> [&SimQueue; 3] {
        [&self.work, &self.deprovision, &self.cleanup_queue]
    }

    /// The bodies left in the queues.
    fn queued(&self) -> Vec<String> {
        self.queues().iter().flat_map(|q| q.bodies()).collect()
    }

    /// The bodies in the dead-letter queues.
    fn dead_letters(&self) -> Vec<String> {
        self.queues()
            .iter()
            .flat_map(|q| q.dead_letters())
            .collect()
    }

    fn mode(&self) -> DeploymentMode {
        if self.direct {
            DeploymentMode::DirectSubmit
        } else {
            DeploymentMode::Full
        }
    }

    fn submit_settings(&self) -> SubmitSettings {
        SubmitSettings {
            retention: RETENTION,
            ..SubmitSettings::new(
                self.product,
                self.metering_mode.clone(),
                self.zero_policy,
                self.mode(),
            )
        }
    }

    /// The clock of the execution environment an invocation lands on: up to
    /// [`MAX_CLOCK_SKEW_MS`] off the simulation's, either way.
    fn lambda_clock(&self) -> Arc<dyn Clock> {
        skewed(&self.sim, &self.clock)
    }

    /// The event time of a scheduled run: now, or (a retried schedule) minutes ago.
    fn invocation_time(&self, name: &str) -> Instant {
        let now = self.clock.now();
        if self.sim.fault(FaultKind::StaleInvocation, name) {
            // EventBridge retries a failed delivery for hours; a retry's event time may
            // be in an hour that has since ended.
            now - chrono::Duration::minutes(1 + i64::try_from(self.sim.below(60)).unwrap_or(0))
        } else {
            now
        }
    }

    async fn discover_once(&self, name: &str) {
        self.discover_at(self.invocation_time(name)).await;
    }

    /// A discoverer invocation whose scheduled event says `now`.
    async fn discover_at(&self, now: Instant) {
        let ports = DiscoverPorts {
            usage: self.usage.clone(),
            subscribers: self.subscribers.clone(),
            work_queue: Arc::new(self.work.clone()),
            deprovision_queue: Arc::new(self.deprovision.clone()),
            profiles: Some(Arc::new(self.profiles.clone())),
            metrics: Arc::new(self.metrics.clone()),
            clock: self.lambda_clock(),
        };
        let _ = discover(now, &self.discover_settings(), &ports, Budget::UNLIMITED).await;
    }

    /// One submitter invocation under the Lambda timeout the template gives it (the
    /// deadline is wall-clock, whatever the event time says).
    async fn submit_once(&self, name: &str) {
        self.submit_at(self.invocation_time(name)).await;
    }

    /// A submitter invocation whose scheduled event says `now`.
    async fn submit_at(&self, now: Instant) {
        let ports = SubmitPorts {
            aggregated: self.aggregated.clone(),
            subscribers: self.subscribers.clone(),
            metering: self.metering.clone(),
            metrics: Arc::new(self.metrics.clone()),
            clock: self.lambda_clock(),
        };
        // The handler's budget: the template's timeout, stopping before the next tick.
        let started = self.clock.now();
        let deadline = started + chrono::Duration::seconds(schedule::TIMEOUT_SECONDS);
        self.sim.set_deadline(deadline);
        let budget = schedule::run_budget(
            now,
            started,
            Budget::before(
                deadline,
                chrono::Duration::seconds(schedule::DEADLINE_MARGIN_SECONDS),
            ),
        );
        let _ = submit(now, &self.submit_settings(), &ports, budget).await;
        self.sim.clear_deadline();
    }

    /// One aggregator invocation: a batch from the flush queue, else from the work
    /// queue, through the Lambda's handler under its timeout; `false` when none was
    /// visible.
    async fn aggregate_one(&self) -> bool {
        let mut queue = &self.deprovision;
        let mut batch = queue.receive_batch().await;
        if batch.is_empty() {
            queue = &self.work;
            batch = queue.receive_batch().await;
        }
        if batch.is_empty() {
            return false;
        }
        let state = awsmp_aggregator::State {
            settings: Arc::new(self.aggregate_settings()),
            ports: AggregatePorts {
                usage: self.usage.clone(),
                aggregated: self.aggregated.clone(),
                cleanup_queue: Arc::new(self.cleanup_queue.clone()),
                clock: self.lambda_clock(),
            },
        };
        let event = self.invocation(&batch, queue, AGGREGATOR_TIMEOUT_SECONDS);
        let answer = awsmp_aggregator::handler(&state, event).await;
        settle_batch(queue, &batch, answer);
        true
    }

    /// One cleanup invocation over a batch of the cleanup queue; `false` when none was
    /// visible.
    async fn cleanup_one(&self) -> bool {
        let batch = self.cleanup_queue.receive_batch().await;
        if batch.is_empty() {
            return false;
        }
        let state = awsmp_cleanup::State {
            retention: RETENTION,
            ports: CleanupPorts {
                usage: self.usage.clone(),
                metrics: Arc::new(self.metrics.clone()),
                clock: self.lambda_clock(),
            },
        };
        let event = self.invocation(&batch, &self.cleanup_queue, CLEANUP_TIMEOUT_SECONDS);
        let answer = awsmp_cleanup::handler(&state, event).await;
        settle_batch(&self.cleanup_queue, &batch, answer);
        true
    }

    /// The event an SQS event source mapping hands a function for `batch` (each body as
    /// the SQS adapter writes it), with the function's deadline `timeout_seconds` away.
    fn invocation(
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

    /// A consumer: handles messages until it finds the queues empty a few times.
    async fn consume(&self, aggregator: bool) {
        let mut idle = 0;
        while idle < 6 {
            let handled = if aggregator {
                self.aggregate_one().await
            } else {
                self.cleanup_one().await
            };
            if handled {
                idle = 0;
            } else {
                idle += 1;
                yield_now().await;
            }
        }
    }

    async fn lifecycle(&self, detail_type: &str, license_arn: &str, time: Instant) {
        let _ = awsmp_subscription::handler(
            &self.subscription,
            LambdaEvent::new(
                lifecycle_event(self.product, detail_type, license_arn, time),
                Context::default(),
            ),
        )
        .await;
    }

    /// A buyer posting the registration page for `license_arn`, as the page does: once,
    /// and again (up to three times) while the answer is a server error.
    async fn register_buyer(&self, license_arn: &str) {
        let mut status = 0;
        for _ in 0..3 {
            let response =
                awsmp_register::handle(&self.register, register_request(license_arn)).await;
            status = u16::try_from(response.status_code).unwrap_or(0);
            if status < 500 {
                break;
            }
            yield_now().await;
        }
        self.registrations
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push((license_arn.to_string(), status));
    }

    /// The seller's service recording usage events through the ingestion port, as
    /// `awsmp usage put` and `awsmp_usage::Meter` do: each event stamped "now" by
    /// default, retried with the same id (and a later "now") when the answer is lost;
    /// now and then a buggy client reuses an id for other usage, which must be refused.
    async fn record_events(&self, license_arn: &str) {
        let events = 1 + self.sim.below(4);
        // Vendor-metered tagging, or none: a seller tags every event or none (a group
        // mixing both is refused, `MixedAllocatedAndUnallocated`).
        let tagged = self.sim.below(2) == 0;
        for n in 0..events {
            let quantity = 1 + i64::try_from(self.sim.below(5)).unwrap_or(0);
            let team = tagged.then(|| TEAMS[self.sim.below(TEAMS.len())]);
            let event = Event {
                license: license_arn.to_string(),
                event_id: format!("evt-{n}"),
                quantity,
                team,
                answer: Ingested::Created,
            };
            self.ingest(event.clone()).await;
            if self.sim.below(3) == 0 {
                self.ingest(Event {
                    quantity: quantity + 1,
                    ..event
                })
                .await;
            }
            for _ in 0..self.sim.below(10) {
                yield_now().await;
            }
        }
    }

    /// One event through the seller's library ([`Meter`], told the stack's mode) or, half
    /// the time, posted to the usage API (its real handler on the same store), retried
    /// (up to three times) while the answer is an error.
    async fn ingest(&self, event: Event) {
        if self.sim.below(2) == 0 {
            self.ingest_through_api(event).await;
        } else {
            self.ingest_through_meter(event).await;
        }
    }

    /// One event as a service in another language sends it, in the native format or
    /// (one time in three) as a CloudEvent of the seller's service: a batch holding it
    /// twice now and then (the second occurrence is judged against the first), retried
    /// whole after a 5xx (the table's error), as the API's clients do.
    async fn ingest_through_api(&self, event: Event) {
        let state = awsmp_usage_api::State {
            config: Arc::new(awsmp_usage_api::Config {
                usage_table: "usage".into(),
                aggregated_table: "aggregated".into(),
                product_code: self.product.into(),
                deployment_mode: self.mode(),
                read_scope: None,
                subscribers_table: "subscribers".into(),
                subscribers_table_region: "us-east-1".into(),
            }),
            usage: self.usage.clone(),
            aggregated: self.aggregated.clone(),
            subscribers: self.subscribers.clone(),
            clock: Arc::new(self.clock.clone()),
        };
        let mut posted = serde_json::json!({
            "licenseArn": event.license,
            "customerAWSAccountId": ACCOUNT,
            "dimension": "events",
            "quantity": event.quantity,
        });
        if let Some(team) = event.team {
            posted["tags"] = serde_json::json!({ "team": team });
        }
        let source = (self.sim.below(3) == 0).then_some(SELLER_SOURCE);
        let (content_type, posted) = match source {
            None => {
                posted["id"] = serde_json::json!(event.event_id);
                ("application/json", posted)
            }
            Some(source) => (
                "application/cloudevents-batch+json",
                serde_json::json!({"specversion": "1.0", "id": event.event_id,
                    "source": source, "type": "com.example.usage", "data": posted}),
            ),
        };
        let copies = if self.sim.below(4) == 0 { 2 } else { 1 };
        let body = match source {
            None => serde_json::json!({ "events": vec![posted; copies] }),
            Some(_) => serde_json::json!(vec![posted; copies]),
        }
        .to_string();
        // Held to what is stored under the event's key.
        let event = Event {
            event_id: awsmp_core::usage_api::event_key(source, &event.event_id),
            ..event
        };
        let slots = self.sending(&event, copies);
        for _ in 0..3 {
            let mut request = ApiGatewayProxyRequest::default();
            request.http_method = aws_lambda_events::http::Method::POST;
            request.path = Some("/usage/events".into());
            request.headers.insert(
                "content-type",
                aws_lambda_events::http::HeaderValue::from_static(content_type),
            );
            request.body = Some(body.clone());
            let response = awsmp_usage_api::handle(&state, request).await;
            let answer: serde_json::Value = match &response.body {
                Some(aws_lambda_events::encodings::Body::Text(text)) => {
                    serde_json::from_str(text).unwrap_or_default()
                }
                _ => serde_json::Value::Null,
            };
            let verdict = |i: usize| match (
                response.status_code,
                answer["results"][i]["status"].as_str(),
            ) {
                (200, Some("accepted")) => Some(Ingested::Created),
                (200, Some("duplicate")) => Some(Ingested::Duplicate),
                (200, Some("conflict")) => Some(Ingested::Conflict),
                (409, _) => Some(Ingested::Refused),
                _ => None,
            };
            // Each copy's own verdict: the invariant holds every one to what is stored
            // (an identical second copy is a duplicate, never a conflict or a row).
            let verdicts: Option<Vec<Ingested>> = (0..copies).map(verdict).collect();
            let Some(verdicts) = verdicts else { continue };
            for (slot, answer) in slots.iter().zip(verdicts) {
                self.answered(*slot, answer);
            }
            return;
        }
    }

    /// Notes `copies` sends of `event` as [`Ingested::Unanswered`] before they are sent
    /// (a crash or a lost answer leaves them so); their slots, for [`Self::answered`].
    fn sending(&self, event: &Event, copies: usize) -> Vec<usize> {
        let mut ingested = self
            .ingested
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        (0..copies)
            .map(|_| {
                ingested.push(Event {
                    answer: Ingested::Unanswered,
                    ..event.clone()
                });
                ingested.len() - 1
            })
            .collect()
    }

    /// The answer the send in `slot` got.
    fn answered(&self, slot: usize, answer: Ingested) {
        if let Some(event) = self
            .ingested
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get_mut(slot)
        {
            event.answer = answer;
        }
    }

    async fn ingest_through_meter(&self, event: Event) {
        let slot = self.sending(&event, 1)[0];
        let store: Arc<dyn UsageStore> = self.usage.clone();
        let meter = Meter::with_store(store, self.product).in_mode(self.mode());
        let mut usage = Usage::new(
            &event.license,
            ACCOUNT,
            "events",
            event.quantity,
            &event.event_id,
        );
        if let Some(team) = event.team {
            usage = usage.tag("team", team);
        }
        for _ in 0..3 {
            let answer = match meter.record_at(&usage, self.clock.now()).await {
                Ok(Recorded::Written) => Ingested::Created,
                Ok(Recorded::AlreadyWritten) => Ingested::Duplicate,
                Err(UsageError::Conflict(_)) => Ingested::Conflict,
                Err(UsageError::DirectSubmit(_)) => Ingested::Refused,
                Err(_) => continue,
            };
            self.answered(slot, answer);
            return;
        }
    }

    async fn deprovision_cleanup_once(&self) {
        let event = scheduled_event(self.clock.now());
        let _ = awsmp_deprovision_cleanup::handler(
            &self.deprovision_cleanup,
            LambdaEvent::new(event, Context::default()),
        )
        .await;
    }
}

/// Progress of an import kept beside its file (one path: both files are exported to it
/// in turn).
struct BesideTheFile<'a>(&'a mut Progress);

impl ProgressKeeper for BesideTheFile<'_> {
    fn keep(&mut self, progress: &Progress) -> Result<(), String> {
        *self.0 = progress.clone();
        Ok(())
    }
}

/// The operator's `awsmp usage import`, as the command runs it: two usage files exported
/// to the same path in turn (the second with the same number of lines and the same
/// length, other events), each imported into one deployment. Now and then the operator
/// names both Regions and is refused (a write goes into one deployment); an import
/// whose table answers fail is rerun, resuming from the progress kept beside the file.
async fn operator_imports(stacks: &[&Stack], hour: HourBucket) -> Vec<Import> {
    let Some(first) = stacks.first() else {
        return Vec::new();
    };
    let sim = &first.sim;
    let lines = 1 + sim.below(4);
    let mut beside = Progress::default();
    let mut imports = Vec::new();
    for file in 1..=2 {
        for _ in 0..sim.below(30) {
            yield_now().await;
        }
        let rows: Vec<(usize, NewUsageRow)> = (0..lines)
            .map(|n| {
                let quantity = 1 + i64::try_from(sim.below(9)).unwrap_or(0);
                let at = hour.start() + chrono::Duration::seconds(1200 + n as i64);
                let id = format!("imp{file}-{n}");
                let row = awsmp_core::memory::fixtures::usage_row(
                    &license(1),
                    ACCOUNT,
                    IMPORTED,
                    at,
                    quantity,
                    &id,
                );
                (n + 1, row)
            })
            .collect();
        let content: String = rows
            .iter()
            .map(|(_, r)| {
                format!(
                    "{},{},{},{},{},{}\n",
                    r.license_arn,
                    r.customer_aws_account_id,
                    r.dimension,
                    format_instant(r.timestamp),
                    r.quantity,
                    r.event_id
                )
            })
            .collect();
        let target = stacks[sim.below(stacks.len())];
        let named: Vec<&str> = if stacks.len() > 1 && sim.below(3) == 0 {
            stacks.iter().map(|s| s.region).collect()
        } else {
            vec![target.region]
        };
        // Refused: the operator reads the message and names the one Region.
        let region = one_deployment("usage import", named)
            .ok()
            .flatten()
            .unwrap_or(target.region);
        let Some(stack) = stacks.iter().find(|s| s.region == region) else {
            continue;
        };
        let mut import = Import {
            region,
            product: stack.product,
            lines: rows
                .iter()
                .map(|(_, r)| (r.license_arn.clone(), r.event_id.clone(), r.quantity))
                .collect(),
            done: false,
            refused: accepts_raw_usage(stack.mode()).is_err(),
        };
        if !import.refused {
            let target = ImportTarget::new(region, "usage", content.as_bytes());
            for _ in 0..4 {
                let now = stack.clock.now();
                let ctx = GuardrailContext::new(now, stack.product.to_string());
                if rows.iter().any(|(_, r)| check_row(r, &ctx, now).is_err()) {
                    break;
                }
                let mut progress = beside.clone();
                let written = write_lines(
                    stack.usage.as_ref(),
                    &rows,
                    &target,
                    false,
                    &mut progress,
                    &mut BesideTheFile(&mut beside),
                    now,
                )
                .await;
                if written.is_ok_and(|w| w.conflicts.is_empty()) {
                    import.done = true;
                    break;
                }
                yield_now().await;
            }
        }
        imports.push(import);
    }
    imports
}

/// What SQS does with a batch after its invocation answered: deletes the messages not
/// reported failed; a reported one, or every one when the invocation failed, becomes
/// visible again after its visibility timeout.
fn settle_batch<E>(queue: &SimQueue, batch: &[(u64, String)], answer: Result<SqsBatchResponse, E>) {
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

/// An SQS batch holding one Marketplace lifecycle event.
fn lifecycle_event(product: &str, detail_type: &str, license_arn: &str, time: Instant) -> SqsEvent {
    let event = json!({
        "version": "0",
        "id": format!("{detail_type}-{license_arn}-{}", time.timestamp()),
        "detail-type": detail_type,
        "source": "aws.agreement-marketplace",
        "account": "123456789012",
        "time": format_instant(time),
        "region": "us-east-1",
        "resources": [],
        "detail": {
            "agreement": {"id": format!("agmt-{}", &license_arn[license_arn.len() - 4..])},
            "product": {"code": product},
            "license": {"arn": license_arn},
            "acceptor": {"accountId": ACCOUNT}
        }
    });
    let record = awsmp_local_aws::SqsRecord {
        message_id: format!("m-{}", time.timestamp()),
        receipt_handle: "r".into(),
        body: event.to_string(),
        ..Default::default()
    };
    let batch = awsmp_local_aws::sqs_event(
        "arn:aws:sqs:us-east-1:123456789012:awsmp-subscription-events",
        &[record],
    );
    serde_json::from_value(batch).unwrap_or_default()
}

/// The registration token the page carries for `license_arn`.
fn token_of(license_arn: &str) -> String {
    format!("tok-{}", &license_arn[license_arn.len() - 4..])
}

/// The page's form post for the buyer of `license_arn`.
fn register_request(license_arn: &str) -> ApiGatewayProxyRequest {
    let request = json!({
        "resource": "/register",
        "path": "/register",
        "httpMethod": "POST",
        "headers": {
            "content-type": "application/x-www-form-urlencoded",
            "origin": PAGE_ORIGIN
        },
        "multiValueHeaders": {},
        "requestContext": {"httpMethod": "POST", "resourcePath": "/register"},
        "body": format!(
            "x-amzn-marketplace-token={}&companyName=Example+Corp",
            token_of(license_arn)
        ),
        "isBase64Encoded": false
    });
    serde_json::from_value(request).unwrap_or_default()
}

/// The register function's state: `ResolveCustomer` knows every buyer's token; the
/// subscribers table is the faulty one the lifecycle handlers share.
fn register_state(
    licenses: &[&String],
    subscribers: Arc<FaultySubscribers>,
    profiles: &MemoryProfileStore,
    clock: &ManualClock,
) -> awsmp_register::State {
    let resolver = MemoryCustomerResolver::new();
    for license in licenses {
        resolver.insert(
            &token_of(license),
            Ok(ResolvedCustomer {
                license_arn: (*license).clone(),
                customer_aws_account_id: ACCOUNT.to_string(),
                product_code: PRODUCT.to_string(),
            }),
        );
    }
    let vars = [
        ("PRODUCT_CODE", PRODUCT),
        ("SUBSCRIBERS_TABLE", "subscribers"),
        ("SUBSCRIBERS_TABLE_REGION", "us-east-1"),
        ("CUSTOMER_PROFILE_TABLE", "profiles"),
        ("ALLOWED_REGISTRATION_FIELDS", "companyName"),
        ("RESOLVE_CUSTOMER_REGION", "us-east-1"),
        (
            "REGISTRATION_PAGE_URL",
            "https://register.example.com/index.html",
        ),
        ("ALLOWED_ORIGIN", PAGE_ORIGIN),
        ("AWS_REGION", REGION),
        ("STAGE", "dst"),
    ];
    let config = awsmp_register::Config::from_lookup(&|name| {
        vars.iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| (*v).to_string())
    });
    awsmp_register::State {
        // The settings above are valid; a change that breaks them fails every schedule.
        config: Arc::new(config.unwrap_or_else(|e| panic!("register config: {e}"))),
        resolver: Arc::new(resolver),
        subscribers,
        profiles: Some(Arc::new(profiles.clone())),
        clock: Arc::new(clock.clone()),
        metrics: std::sync::Arc::new(awsmp_core::memory::RecordingMetrics::new()),
    }
}

fn scheduled_event(time: Instant) -> EventBridgeEvent {
    let event = awsmp_local_aws::scheduled_event("123456789012", "us-east-1", "schedule", time);
    serde_json::from_value(event).unwrap_or_default()
}

/// A usage row the scenario writes.
struct Row {
    license: String,
    dimension: &'static str,
    timestamp: Instant,
    quantity: i64,
}

fn row_at(sim: &Sim, license: &str, dimension: &'static str, hour: HourBucket, n: usize) -> Row {
    // Distinct seconds within the hour's first 20 minutes (every schedule starts 20 or
    // more minutes into its hour, so no row of the open hour is in the future) keep
    // reference-shaped sort keys unique.
    let second = i64::try_from(n).unwrap_or(0) % 1200;
    Row {
        license: license.to_string(),
        dimension,
        timestamp: hour.start() + chrono::Duration::seconds(second),
        // Zero now and then: a group may total zero (each zero policy handles it).
        quantity: i64::try_from(sim.below(6)).unwrap_or(0),
    }
}

/// Writes the seller's usage: a raw row; or, in direct-submit mode, the hour's total in
/// the aggregated table, created or updated in place (quantity only, while pending) as
/// a seller's `PutItem` / `UpdateItem` would.
fn write(tables: &MemoryTables, product: &str, row: &Row, direct: bool) {
    if !direct {
        tables.insert_raw_row(reference_row(
            &row.license,
            ACCOUNT,
            row.dimension,
            &format_instant(row.timestamp),
            row.quantity,
        ));
        return;
    }
    let key = awsmp_core::model::GroupKey {
        license_arn: row.license.clone(),
        customer_aws_account_id: ACCOUNT.to_string(),
        dimension: row.dimension.to_string(),
        hour: HourBucket::containing(row.timestamp),
    };
    match tables
        .aggregated_records()
        .into_iter()
        .find(|r| r.key == key)
    {
        Some(stored) => {
            tables.update_aggregated_quantity(&key, stored.quantity + row.quantity);
        }
        None => tables.insert_aggregated(
            awsmp_core::memory::fixtures::pending_record(key, product, row.quantity, 0),
            row.timestamp,
        ),
    }
}

/// Whether a task runs a stage that a direct-submit stack does not deploy.
fn raw_usage_stage(name: &str) -> bool {
    ["discoverer", "aggregator", "cleanup"]
        .iter()
        .any(|stage| name.starts_with(stage))
}

/// A function's clock for the whole schedule: up to [`MAX_CLOCK_SKEW_MS`] off.
fn skewed(sim: &Sim, clock: &ManualClock) -> Arc<dyn Clock> {
    let spread = 2 * MAX_CLOCK_SKEW_MS as usize + 1;
    let skew = sim.below(spread) as i64 - MAX_CLOCK_SKEW_MS;
    Arc::new(SkewedClock::new(
        clock.clone(),
        chrono::Duration::milliseconds(skew),
    ))
}

/// The settings sellers deploy, the same in every Region of a schedule.
#[derive(Clone, Copy)]
struct Settings {
    lock: MeteringLockHours,
    direct: bool,
    zero_policy: ZeroQuantityPolicy,
    metering_mode: &'static str,
    allowlist: &'static str,
}

/// One Region's main stack over its `tables` and `metering`, with the events stack's
/// subscribers table (shared by every Region) and handlers.
#[allow(clippy::too_many_arguments)]
fn region_stack(
    (region, product): (&'static str, &'static str),
    sim: &Sim,
    clock: &ManualClock,
    tables: &MemoryTables,
    subscribers: &MemorySubscriberStore,
    metering: Arc<FaultyMetering>,
    profiles: &MemoryProfileStore,
    settings: Settings,
) -> Stack {
    let licenses = [license(1), license(2), license(3)];
    let subscription_store: Arc<FaultySubscribers> =
        Arc::new(FaultySubscribers::new(subscribers.clone(), sim.clone()));
    let register = register_state(
        &licenses.iter().collect::<Vec<_>>(),
        subscription_store.clone(),
        profiles,
        clock,
    );
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
            settings.metering_mode,
            &[settings.allowlist]
                .into_iter()
                .filter(|a| !a.is_empty())
                .map(str::to_string)
                .collect::<Vec<_>>(),
        )
        .unwrap_or_else(|e| panic!("metering mode: {e}")),
        subscription: awsmp_subscription::State {
            config: Arc::new(awsmp_subscription::Config {
                subscribers_table: "subscribers".into(),
            }),
            subscribers: subscription_store.clone(),
            clock: skewed(sim, clock),
        },
        deprovision_cleanup: awsmp_deprovision_cleanup::State {
            config: Arc::new(awsmp_deprovision_cleanup::Config {
                subscribers_table: "subscribers".into(),
            }),
            subscribers: subscription_store,
            clock: skewed(sim, clock),
        },
        register,
        registrations: Mutex::new(Vec::new()),
        ingested: Mutex::new(Vec::new()),
        deprovisioned: Mutex::new(None),
        events_stack: region == REGION,
    }
}

/// Marketplace: the simulator's engine at the schedule's clock, selling [`PRODUCT`]
/// with the dimensions the seller writes except [`POISON`] (refused until the operator
/// defines it), every buyer of `licenses` entitled. A resend of a billed record with
/// the same quantity is answered `Success` or `DuplicateRecord` (AWS documents both
/// readings; the pipeline must handle either).
fn marketplace(
    sim: &Sim,
    clock: &ManualClock,
    product: &str,
    licenses: &[&String],
) -> SimMarketplace {
    let identical_retry = [
        IdenticalRetryStatus::DuplicateRecord,
        IdenticalRetryStatus::Success,
    ][sim.below(2)];
    let seed = sim.below(usize::MAX) as u64;
    // The settings below are valid; a change that breaks them fails every schedule.
    let api = SimMarketplace::new(
        product,
        &[
            "storage",
            "requests",
            "events",
            IMPORTED,
            POISON,
            crate::api_edges::DIMENSION,
        ],
        clock.clone(),
        seed,
        identical_retry,
    )
    .unwrap_or_else(|e| panic!("marketplace: {e}"));
    for license in licenses {
        api.entitle(license, ACCOUNT)
            .unwrap_or_else(|e| panic!("entitle {license}: {e}"));
    }
    api.reject_dimension(POISON, INVALID_DIMENSION)
        .unwrap_or_else(|e| panic!("refuse {POISON}: {e}"));
    api
}

/// One schedule in four, Marketplace revokes one buyer's entitlement while the
/// pipeline runs (their agreement ended and no lifecycle event has told the stack):
/// that buyer's records sent from then on are answered `CustomerNotSubscribed`.
fn revocation<'a>(stack: &'a Stack, licenses: [&'a String; 2]) -> Option<Task<'a>> {
    if stack.sim.below(4) != 0 {
        return None;
    }
    let license = licenses[stack.sim.below(2)];
    Some(Task::new("revoke-entitlement", async move {
        for _ in 0..stack.sim.below(120) {
            yield_now().await;
        }
        stack
            .metering
            .inner
            .revoke(license, ACCOUNT)
            .unwrap_or_else(|e| panic!("revoke {license}: {e}"));
    }))
}

/// Runs one schedule for `sim` and returns what it built.
pub fn run(sim: Sim) -> World {
    // Mid-month, an hour before midnight on the last day of the month (the pending
    // hours become last month's), or the morning of the 1st (last month's hours age out
    // at 06:00 while they are pending); 20 to 59 minutes into the hour.
    let base = [
        "2026-11-30T10:00:00Z",
        "2026-11-30T23:00:00Z",
        "2026-12-01T05:00:00Z",
    ][sim.below(3)];
    let start = at(base) + chrono::Duration::seconds(1200 + sim.below(2400) as i64);
    let clock = ManualClock::new(start);
    // One schedule in four is a direct-submit stack: the seller writes hourly totals
    // into the aggregated table and updates them in place; only the submitter runs.
    let direct = sim.below(4) == 0;
    // Small pages exercise pagination; large ones keep the schedule quick.
    let tables = MemoryTables::with_page_size([2, 10, 100][sim.below(3)]);
    let subscribers = MemorySubscriberStore::new();
    let (l1, l2, l3) = (license(1), license(2), license(3));
    let api = marketplace(&sim, &clock, PRODUCT, &[&l1, &l2, &l3]);
    let metering =
        Arc::new(FaultyMetering::new(api, sim.clone(), clock.clone()).watching(tables.clone()));
    // The settings sellers deploy: a lock of one to three hours, each zero policy.
    let lock =
        MeteringLockHours::new(1 + sim.below(3) as i64).unwrap_or(MeteringLockHours::DEFAULT);
    let zero_policy = [
        ZeroQuantityPolicy::Defer,
        ZeroQuantityPolicy::Submit,
        ZeroQuantityPolicy::Skip,
    ][sim.below(3)];
    let completed = time::completed_buckets(start, lock);
    let current = HourBucket::containing(start);
    let (h_old, h_new) = match completed.as_slice() {
        [.., a, b] => (*a, *b),
        _ => (current.plus_hours(-3), current.plus_hours(-2)),
    };
    let previous = current.plus_hours(-1);

    let profiles = MemoryProfileStore::new();
    // One schedule in six is a dry run: nothing may be billed; the buyer's account is
    // on the test allowlist (its records end DryRunSubmitted), or another one is.
    let dry_run = (sim.below(6) == 0).then(|| sim.below(3) != 0);
    let settings = Settings {
        lock,
        direct,
        zero_policy,
        metering_mode: if dry_run.is_some() { "dry-run" } else { "live" },
        allowlist: match dry_run {
            Some(true) => ACCOUNT,
            Some(false) => "444455556666",
            None => "",
        },
    };
    let stack = region_stack(
        (REGION, PRODUCT),
        &sim,
        &clock,
        &tables,
        &subscribers,
        metering.clone(),
        &profiles,
        settings,
    );
    // The seller posting to the usage API across the edges, while settling moves on.
    let edge_seller = (!direct).then(|| {
        let tables = (stack.usage.clone() as _, stack.aggregated.clone() as _);
        crate::api_edges::EdgeSeller::new(&sim, &clock, tables, (PRODUCT, lock), license(1))
    });
    // One schedule in three also deploys a second metering Region: its own pipeline and
    // Marketplace, the same subscribers table.
    // Or, as often, a second product's main stack in the same Region, over the same
    // events stack: its own buyer (l4), tables, pipeline and Marketplace records.
    let l4 = license(4);
    let second_region = (sim.below(3) == 0).then(|| {
        let (deployment, buyers) = if sim.below(2) == 0 {
            ((SECOND_REGION, PRODUCT), vec![&l1, &l2, &l3])
        } else {
            ((REGION, SECOND_PRODUCT), vec![&l4])
        };
        let tables = MemoryTables::with_page_size([2, 10, 100][sim.below(3)]);
        let metering = Arc::new(
            FaultyMetering::new(
                marketplace(&sim, &clock, deployment.1, &buyers),
                sim.clone(),
                clock.clone(),
            )
            .watching(tables.clone()),
        );
        let stack = region_stack(
            deployment,
            &sim,
            &clock,
            &tables,
            &subscribers,
            metering,
            &MemoryProfileStore::new(),
            settings,
        );
        (stack, tables)
    });
    // The seller's usage before the run: a group of more than 99 rows, small groups, a
    // poison dimension, and the open hour of the license about to be deprovisioned.
    let big = 100 + sim.below(40);
    let mut rows = Vec::new();
    for n in 0..big {
        rows.push(row_at(&sim, &l1, "storage", h_old, n));
    }
    for n in 0..(2 + sim.below(5)) {
        rows.push(row_at(&sim, &l1, "requests", h_new, n));
    }
    for n in 0..(1 + sim.below(3)) {
        rows.push(row_at(&sim, &l2, "requests", h_new, n));
        rows.push(row_at(&sim, &l2, POISON, h_new, n));
    }
    for n in 0..(1 + sim.below(3)) {
        rows.push(row_at(&sim, &l3, "requests", previous, n));
        rows.push(row_at(&sim, &l3, "requests", current, n));
    }
    // Usage of the oldest hour still in the window: it closes while the pipeline runs,
    // so a run (a stale or a slow one) may cross its edge with its records pending.
    for n in 0..(1 + sim.below(3)) {
        rows.push(row_at(&sim, &l1, "events", current.plus_hours(-23), n));
    }
    for row in &rows {
        write(&tables, PRODUCT, row, direct);
    }
    if direct {
        crate::outcome_events::seller_odd_items(&sim, &tables, (&l1, PRODUCT), h_new);
    }
    let outcomes = crate::outcome_events::OutcomeEvents::new(&sim, &tables);
    // The second Region meters some of the first buyer's usage too (its own groups:
    // Marketplace deduplicates per Region).
    if let Some((other, tables)) = &second_region {
        let buyer = if other.product == PRODUCT { &l1 } else { &l4 };
        for n in 0..(1 + sim.below(3)) {
            write(
                tables,
                other.product,
                &row_at(&sim, buyer, "requests", h_new, n),
                direct,
            );
        }
    }
    let second_stack = second_region.as_ref().map(|(stack, _)| stack);
    let imports = Mutex::new(Vec::new());
    let initial_rows: Vec<(String, String)> = tables
        .raw_rows()
        .into_iter()
        .map(|r| (r.license_arn, r.sort_key))
        .collect();
    // Late rows, written while the pipeline runs.
    let late: Vec<Row> = (0..(2 + sim.below(6)))
        .map(|n| {
            let (license, dimension, hour) = match sim.below(4) {
                0 => (&l1, "storage", h_old),
                1 => (&l1, "requests", h_new),
                2 => (&l3, "requests", current),
                _ => (&l2, "requests", h_new),
            };
            row_at(&sim, license, dimension, hour, 800 + n)
        })
        .collect();

    // Now and then a message that is no work message sits on the work queue.
    let garbage_sent = !direct && sim.below(4) == 0;
    if garbage_sent {
        stack.work.send_garbage(GARBAGE);
    }
    // License Updated for every buyer, applied before the run.
    let activated = start - chrono::Duration::hours(5);
    let mut setup: Vec<Task<'_>> = [&l1, &l2, &l3]
        .into_iter()
        .map(|l| {
            let stack = &stack;
            Task::new(
                "license-updated",
                stack.lifecycle("License Updated - Manufacturer", l, activated),
            )
        })
        .collect();
    // The other product's buyer, through the same events stack.
    if let Some(other) = second_region
        .as_ref()
        .map(|(other, _)| other)
        .filter(|other| other.product != PRODUCT)
    {
        setup.push(Task::new(
            "license-updated",
            other.lifecycle("License Updated - Manufacturer", &l4, activated),
        ));
    }
    sim.faults_off();
    executor::run(&sim, setup, false, MAX_STEPS, &|_| {});
    sim.faults_on();

    // The concurrent phase, with faults.
    // Deprovisioned up to an hour ago (its event delivered late) or just now: its
    // final-hour flush and the end of its hour may fall while the faults still run.
    let deprovisioned_at = start - chrono::Duration::minutes(sim.below(60) as i64)
        + chrono::Duration::minutes(sim.below(10) as i64);
    *stack
        .deprovisioned
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some((l3.clone(), deprovisioned_at));
    let tasks: Vec<Task<'_>> = {
        let stack = &stack;
        let tables = &tables;
        let late = &late;
        let l3 = &l3;
        let imports = &imports;
        let mut regional: Vec<Task<'_>> = Vec::new();
        if let Some(other) = second_stack {
            regional.extend([
                Task::new("discoverer@2", async move {
                    other.discover_once("discoverer@2").await
                }),
                Task::new("aggregator@2", async move { other.consume(true).await }),
                Task::new("cleanup@2", async move { other.consume(false).await }),
                Task::new("submitter@2", async move {
                    for _ in 0..other.sim.below(60) {
                        yield_now().await;
                    }
                    other.submit_once("submitter@2").await;
                }),
            ]);
        }
        vec![
            Task::new("importer", async move {
                // The operator's deployments of this product: one or two Regions.
                let stacks: Vec<&Stack> = std::iter::once(stack)
                    .chain(second_stack.filter(|other| other.product == PRODUCT))
                    .collect();
                let done = operator_imports(&stacks, h_new).await;
                imports
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .extend(done);
            }),
            Task::new("writer", async move {
                for row in late {
                    yield_now().await;
                    stack
                        .clock
                        .advance(Duration::from_secs(stack.sim.below(90) as u64));
                    write(tables, PRODUCT, row, stack.direct);
                }
            }),
            Task::new("seller-api", async move {
                for _ in 0..stack.sim.below(40) {
                    yield_now().await;
                }
                stack.record_events(&license(1)).await;
            }),
            Task::new("discoverer#1", async move {
                stack.discover_once("discoverer#1").await
            }),
            Task::new("discoverer#2", async move {
                for _ in 0..stack.sim.below(40) {
                    yield_now().await;
                }
                stack.discover_once("discoverer#2").await;
            }),
            Task::new("aggregator#1", async move { stack.consume(true).await }),
            Task::new("aggregator#2", async move { stack.consume(true).await }),
            Task::new("cleanup#1", async move { stack.consume(false).await }),
            Task::new("submitter#1", async move {
                // One to three scheduled runs, the later ones while others still work.
                for run in 0..(1 + stack.sim.below(3)) {
                    for _ in 0..stack.sim.below(30) {
                        yield_now().await;
                    }
                    stack.clock.advance(Duration::from_secs(30 * run as u64));
                    stack.submit_once("submitter#1").await;
                }
            }),
            Task::new("submitter#2", async move {
                // One to three scheduled runs, the later ones while others still work.
                for run in 0..(1 + stack.sim.below(3)) {
                    for _ in 0..stack.sim.below(80) {
                        yield_now().await;
                    }
                    stack.clock.advance(Duration::from_secs(30 * run as u64));
                    stack.submit_once("submitter#2").await;
                }
            }),
            Task::new("license-deprovisioned", async move {
                for _ in 0..stack.sim.below(60) {
                    yield_now().await;
                }
                stack
                    .lifecycle("License Deprovisioned - Manufacturer", l3, deprovisioned_at)
                    .await;
            }),
            Task::new("deprovision-cleanup", async move {
                for _ in 0..stack.sim.below(100) {
                    yield_now().await;
                }
                stack.deprovision_cleanup_once().await;
            }),
        ]
        .into_iter()
        // Buyers registering while usage flows and l3's deprovisioning lands.
        .chain([&l1, &l2, l3].into_iter().enumerate().map(|(n, license)| {
            Task::new(format!("register#{}", n + 1), async move {
                for _ in 0..stack.sim.below(80) {
                    yield_now().await;
                }
                stack.register_buyer(license).await;
            })
        }))
        .chain(regional)
        .chain([outcomes.task()])
        .chain(revocation(stack, [&l1, &l2]))
        .filter(|task| !(direct && raw_usage_stage(&task.name)))
        .collect()
    };
    let queues: Vec<SimQueue> = std::iter::once(&stack)
        .chain(second_stack)
        .flat_map(|s| {
            [
                s.work.clone(),
                s.deprovision.clone(),
                s.cleanup_queue.clone(),
            ]
        })
        .collect();
    let release = |task: usize| {
        for queue in &queues {
            queue.release_task(task);
        }
    };
    let mut stats = executor::run(&sim, tasks, true, MAX_STEPS, &release);

    // The next scheduled runs, minutes later, still under faults: records aggregated in
    // the first phase are sent now, while more late usage arrives.
    clock.advance(Duration::from_secs(60 * (6 + sim.below(15) as u64)));
    let later_rows: Vec<Row> = (0..(1 + sim.below(4)))
        .map(|n| {
            let (license, dimension, hour) = match sim.below(3) {
                0 => (&l1, "storage", h_old),
                1 => (&l1, "requests", h_new),
                _ => (&l3, "requests", current),
            };
            row_at(&sim, license, dimension, hour, 1100 + n)
        })
        .collect();
    let operator = tables.operator_store();
    let later: Vec<Task<'_>> = {
        let stack = &stack;
        let tables = &tables;
        let operator = &operator;
        let later_rows = &later_rows;
        let mut tasks = vec![
            Task::new("writer#2", async move {
                for row in later_rows {
                    for _ in 0..stack.sim.below(20) {
                        yield_now().await;
                    }
                    write(tables, PRODUCT, row, stack.direct);
                }
            }),
            Task::new("discoverer#3", async move {
                stack.discover_once("discoverer#3").await
            }),
            Task::new("aggregator#3", async move { stack.consume(true).await }),
            Task::new("aggregator#4", async move { stack.consume(true).await }),
            Task::new("cleanup#2", async move { stack.consume(false).await }),
            // The seller reads `awsmp failures`, maybe defines the refused dimension in
            // the catalog, and replays the Error records while the pipeline runs.
            Task::new("operator", async move {
                for _ in 0..stack.sim.below(60) {
                    yield_now().await;
                }
                // The dead-letter alarm: `awsmp dlq redrive` moves the messages back.
                if stack.sim.below(2) == 0 {
                    for queue in stack.queues() {
                        queue.redrive();
                    }
                }
                if stack.sim.below(2) == 0 {
                    stack
                        .metering
                        .inner
                        .accept_dimension(POISON)
                        .unwrap_or_else(|e| panic!("define {POISON}: {e}"));
                    // Now and then something else (a second stack, a script) bills the
                    // refused hour first, before the replay re-sends it.
                    if stack.sim.below(2) == 0 {
                        stack
                            .metering
                            .bill_as_rival(MeteringRecord {
                                key: awsmp_core::model::GroupKey {
                                    license_arn: license(2),
                                    customer_aws_account_id: ACCOUNT.to_string(),
                                    dimension: POISON.to_string(),
                                    hour: h_new,
                                },
                                product_code: PRODUCT.to_string(),
                                quantity: 999,
                                allocations: None,
                            })
                            .await;
                    }
                }
                let selection = replay::Selection::FailedSince(h_old);
                let now = stack.clock.now();
                // Its answer may be lost; the operator then runs it again.
                for _ in 0..(1 + stack.sim.below(2)) {
                    let _ =
                        replay::replay(stack.aggregated.as_ref(), operator, &selection, now, false)
                            .await;
                }
            }),
        ];
        for name in ["submitter#3", "submitter#4"] {
            tasks.push(Task::new(name, async move {
                for run in 0..(1 + stack.sim.below(3)) {
                    for _ in 0..stack.sim.below(60) {
                        yield_now().await;
                    }
                    stack.clock.advance(Duration::from_secs(20 * run as u64));
                    stack.submit_once(name).await;
                }
            }));
        }
        tasks.retain(|task| !(direct && raw_usage_stage(&task.name)));
        tasks.push(outcomes.task());
        tasks
    };
    let second = executor::run(&sim, later, true, MAX_STEPS, &release);
    stats.steps += second.steps;
    stats.crashed += second.crashed;
    stats.unfinished += second.unfinished;

    // Settling, fault-free: the hours complete, leases lapse, the pipeline runs until
    // every queue is empty, then again past the 24-hour window.
    sim.faults_off();
    let faults_end = clock.now();
    let settle_all = || {
        edge_seller
            .iter()
            .for_each(crate::api_edges::EdgeSeller::step);
        for stack in std::iter::once(&stack).chain(second_stack) {
            settle(&sim, stack);
        }
    };
    for advance in [
        chrono::Duration::minutes(20),
        chrono::Duration::hours(2),
        chrono::Duration::minutes(30),
    ] {
        clock.set(clock.now() + advance);
        settle_all();
    }
    // Through each written hour's last hour in the window and the 1st's 03:00-06:00 (a
    // deferred zero hour goes out only there), then past every window.
    let mut edges = vec![at("2026-12-01T03:30:00Z")];
    let mut edge = h_old.min(previous).start() + chrono::Duration::minutes(23 * 60 + 30);
    while edge <= current.start() + chrono::Duration::minutes(23 * 60 + 30) {
        edges.push(edge);
        edge += chrono::Duration::hours(1);
    }
    edges.sort();
    for edge in edges {
        if edge > clock.now() {
            clock.set(edge);
            settle_all();
        }
    }
    clock.set(clock.now() + chrono::Duration::hours(26));
    settle_all();
    clock.set(clock.now() + chrono::Duration::minutes(30));
    settle_all();
    outcomes.drain();

    let registrations = stack
        .registrations
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    let second = second_region.map(|(other, tables)| {
        Box::new(World {
            sim: sim.clone(),
            initial_rows: tables
                .raw_rows()
                .into_iter()
                .filter(|r| !r.sort_key.starts_with("event#"))
                .filter(|r| !r.sort_key.contains("#imp"))
                .map(|r| (r.license_arn, r.sort_key))
                .collect(),
            tables,
            subscribers: subscribers.clone(),
            metering: other.metering.clone(),
            clock: clock.clone(),
            stats: executor::RunStats::default(),
            profiles: MemoryProfileStore::new(),
            registrations: Vec::new(),
            deprovisioned: vec![l3.clone()],
            metrics: other.metrics.clone(),
            direct,
            dry_run,
            faults_end,
            ingested: Vec::new(),
            region: other.region,
            product: other.product,
            second: None,
            imports: Vec::new(),
            queued: other.queued(),
            dead_letters: other.dead_letters(),
            garbage_sent: false,
            outcomes: None,
            edges: Default::default(),
        })
    });
    World {
        sim: sim.clone(),
        tables,
        subscribers,
        metering,
        clock,
        stats,
        initial_rows,
        profiles,
        registrations,
        deprovisioned: vec![l3.clone()],
        metrics: stack.metrics.clone(),
        direct,
        dry_run,
        faults_end,
        ingested: stack
            .ingested
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone(),
        region: REGION,
        product: PRODUCT,
        queued: stack.queued(),
        dead_letters: stack.dead_letters(),
        garbage_sent,
        outcomes: Some(outcomes),
        edges: edge_seller.map(|e| e.log()).unwrap_or_default(),
        second,
        imports: imports
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    }
}

/// One fault-free pass of every stage, serially, until the queues are empty.
fn settle(sim: &Sim, stack: &Stack) {
    let redelivery = stack
        .deprovisioned
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    let tasks = vec![Task::new("settle", async move {
        // At least once: the lifecycle message comes again (its first handler may have
        // died); applying it twice must change nothing.
        if let Some((license, at)) = &redelivery {
            stack
                .lifecycle("License Deprovisioned - Manufacturer", license, *at)
                .await;
        }
        if stack.events_stack {
            stack.deprovision_cleanup_once().await;
        }
        // Now and then a scheduled event EventBridge retried late arrives first: its
        // event time is up to an hour old (no fault: deliveries are like that).
        let stale = (sim.below(4) == 0)
            .then(|| stack.clock.now() - chrono::Duration::minutes(1 + sim.below(60) as i64));
        if !stack.direct {
            if let Some(at) = stale {
                stack.discover_at(at).await;
            }
            stack.discover_once("settle").await;
        }
        // Bounded: a message that keeps failing is left for the next pass.
        for _ in 0..20 {
            for _ in 0..500 {
                if !stack.aggregate_one().await {
                    break;
                }
            }
            for _ in 0..500 {
                if !stack.cleanup_one().await {
                    break;
                }
            }
            if stack.work.visible() + stack.deprovision.visible() + stack.cleanup_queue.visible()
                == 0
            {
                break;
            }
        }
        if let Some(at) = stale {
            stack.submit_at(at).await;
        }
        stack.submit_once("settle").await;
    })];
    executor::run(sim, tasks, false, MAX_STEPS, &|_| {});
}

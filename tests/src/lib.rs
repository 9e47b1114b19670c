//! awsmp-e2e: the end-to-end harness. One [`Stack`] is both stacks on one machine, as
//! `awsmp local up` deploys them (`awsmp_local_stack`): moto (DynamoDB + SQS) with the
//! tables and queues the templates declare, the Marketplace simulator, and the four
//! metering handlers (discoverer, aggregator, cleanup, submitter), each with the
//! `Config` its template environment gives it and the `State` its `State::connect`
//! builds, called as libraries with real event JSON. The options the templates take as
//! parameters (lock hours, zero policy, metering mode, retention, product) are passed
//! as parameters. Time is driven explicitly: scheduled runs carry the scenario's "now"
//! in their event, the SQS stages read it from a manual clock, and the simulator's
//! clock is pinned to it. Each handler's SDK config carries an HTTP client that records
//! every AWS call it makes in [`Stack::calls`] ([`calls::CallLog::sdk_config`]), and
//! its stores count their calls ([`Stack::counts`]); the harness's own reads and writes
//! are not recorded.

pub mod calls;
pub mod common;
pub mod counting;
pub mod events;
pub mod invariant;
pub mod views;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::types::AttributeValue;
use aws_types::SdkConfig;
use awsmp_core::aggregate::ZeroQuantityPolicy;
use awsmp_core::clock::ManualClock;
use awsmp_core::discover::DiscoverReport;
use awsmp_core::metrics::RecordingMetrics;
use awsmp_core::model::{AgreementStatus, Subscriber, SubscriptionStatus, attr};
use awsmp_core::ports::{AggregatedStore, SubscriberStore, UsageStore};
use awsmp_core::retention::MIN_RETENTION_DAYS;
use awsmp_core::submit::{MeteringMode, SubmitReport};
use awsmp_core::time::{HourBucket, Instant, MeteringLockHours, parse_usage_timestamp};
use awsmp_lambda::ConfigError;
use awsmp_local_aws::{MotoServer, TEST_REGION, workspace_root};
use awsmp_local_stack::LocalError;
use awsmp_local_stack::resources::LocalStack;
use awsmp_marketplace_sim::{
    ClockSetting, EntitlementKey, EntitlementSeed, LedgerSnapshot, ProductSeed, RunningSim,
    SimConfig, Simulator, ThrottleConfig, TokenSeed,
};

use crate::calls::CallLog;

use crate::counting::{CountingAggregated, CountingSubscribers, CountingUsage, OpCounts};
use crate::events::{Delivered, queue_arn, scheduled_event, sqs_event};
use crate::views::{AggregatedView, RawRowView};

/// The stage both test stacks are deployed with.
pub const STAGE: &str = "test";
/// The events stack's `ReconcileProducts`: the Agreement API's product id of the
/// harness's product (`prod-e2e`).
pub const RECONCILE_PRODUCTS: &str = "prod-e2eagreements=prod-e2e";
/// The Region of the subscribers table (the events stack's Region).
pub const SUBSCRIBERS_REGION: &str = "us-east-1";
/// The discoverer's `FlushMarginMinutes`: the deprovisioning flush runs in the last
/// discoverer run at least 10 minutes before a window closes.
const FLUSH_MARGIN_MINUTES: &str = "10";

/// Table and queue names of the test stack, as the templates name them for product
/// `prod-e2e` ([`StackOptions::at`]) and stage [`STAGE`].
pub const USAGE_TABLE: &str = "awsmp-prod-e2e-usage-test";
/// Aggregated-usage table.
pub const AGGREGATED_TABLE: &str = "awsmp-prod-e2e-aggregated-usage-test";
/// Subscribers table.
pub const SUBSCRIBERS_TABLE: &str = "awsmp-subscribers-test";
/// Normal work queue.
pub const WORK_QUEUE: &str = "awsmp-prod-e2e-work-test";
/// Deprovisioning-flush queue.
pub const DEPROVISION_QUEUE: &str = "awsmp-prod-e2e-deprovision-work-test";
/// Cleanup queue.
pub const CLEANUP_QUEUE: &str = "awsmp-prod-e2e-cleanup-test";

/// Why the harness failed (a test failure, never a pipeline outcome).
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// moto.
    #[error("test support: {0}")]
    Support(#[from] awsmp_local_aws::LocalAwsError),
    /// The templates' tables, queues or function environments (the local stack's code).
    #[error("local stack: {0}")]
    Local(#[from] LocalError),
    /// The simulator.
    #[error("simulator: {0}")]
    Sim(String),
    /// A direct AWS call of the harness.
    #[error("aws: {0}")]
    Aws(String),
    /// An event fixture.
    #[error("event: {0}")]
    Event(String),
    /// A handler returned an error.
    #[error("{handler} failed: {message}")]
    Handler {
        /// Which handler.
        handler: &'static str,
        /// Its error.
        message: String,
    },
}

/// How to build a stack.
#[derive(Debug, Clone)]
pub struct StackOptions {
    /// The scenario's starting "now".
    pub now: Instant,
    /// The stack's product.
    pub product_code: String,
    /// Dimensions the simulator's catalog defines for it.
    pub dimensions: Vec<String>,
    /// `METERING_LOCK_HOURS`.
    pub lock: MeteringLockHours,
    /// `ZERO_QUANTITY_POLICY`.
    pub zero_policy: ZeroQuantityPolicy,
    /// `METERING_MODE` + allowlist.
    pub mode: MeteringMode,
    /// Simulator latency per call, milliseconds.
    pub sim_latency_ms: u64,
    /// Whether the simulator enforces the 10/s quota.
    pub quota: bool,
    /// The main stack's Region (tables, queues, Marketplace calls); the subscribers
    /// table is always in [`SUBSCRIBERS_REGION`].
    pub region: String,
}

impl StackOptions {
    /// Defaults: product `prod-e2e`, dimensions `requests`, `storage`, `users`, lock 1,
    /// `defer`, live, no latency, quota on, Region us-east-1.
    pub fn at(now: Instant) -> Self {
        StackOptions {
            now,
            product_code: "prod-e2e".to_string(),
            dimensions: vec!["requests".into(), "storage".into(), "users".into()],
            lock: MeteringLockHours::DEFAULT,
            zero_policy: ZeroQuantityPolicy::Defer,
            mode: MeteringMode::Live,
            sim_latency_ms: 0,
            quota: true,
            region: TEST_REGION.to_string(),
        }
    }
}

/// Which queue a message came from (for redelivery).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QueueKind {
    /// Normal work.
    Work,
    /// Deprovisioning flush.
    Deprovision,
    /// Cleanup.
    Cleanup,
}

/// What a drain did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DrainReport {
    /// Messages handled successfully (and deleted).
    pub succeeded: usize,
    /// Messages reported as failures (left for redelivery).
    pub failed: usize,
}

/// The main stack on one machine.
pub struct Stack {
    /// The DynamoDB + SQS emulator.
    pub moto: MotoServer,
    /// The Marketplace simulator.
    pub sim: RunningSim,
    /// Options it was built with.
    pub options: StackOptions,
    /// DynamoDB client (the harness's own reads and seller writes).
    pub dynamodb: aws_sdk_dynamodb::Client,
    /// SQS client.
    pub sqs: aws_sdk_sqs::Client,
    /// Queue URLs.
    pub queues: HashMap<QueueKind, String>,
    /// The events stack as deployed (the subscribers table, the events queues).
    pub events: LocalStack,
    /// The main stack as deployed (tables, queues, each function's environment).
    pub main: LocalStack,
    /// "Now" of the SQS-driven stages.
    pub clock: ManualClock,
    /// Every metric the handlers emitted.
    pub metrics: RecordingMetrics,
    /// DynamoDB calls made through the ports.
    pub counts: Arc<OpCounts>,
    /// The discoverer.
    pub discoverer: awsmp_discoverer::State,
    /// The aggregator.
    pub aggregator: awsmp_aggregator::State,
    /// Cleanup.
    pub cleanup: awsmp_cleanup::State,
    /// The submitter.
    pub submitter: awsmp_submitter::State,
    /// The subscribers store (to play the subscription Lambda's part; not recorded).
    pub subscribers: Arc<dyn SubscriberStore>,
    /// Every AWS call the handlers made, by function.
    pub calls: CallLog,
    queue_names: HashMap<QueueKind, String>,
    now: Mutex<Instant>,
    delivered: Mutex<Vec<(QueueKind, String)>>,
    failed_receipts: Mutex<Vec<(String, String)>>,
}

impl Stack {
    /// Starts moto and the simulator, deploys both templates' tables and queues as
    /// `awsmp local up` does (the options as template parameters), builds each
    /// handler's `Config` from its template environment and its `State` with
    /// `State::connect` on an SDK config that records its calls, as its `main.rs` does
    /// ([`LocalStack::connect`]), then swaps in what the tests observe: counting stores
    /// around the connected ones, the recording metrics, the manual clock of the SQS
    /// stages.
    pub async fn start(options: StackOptions) -> Result<Stack, HarnessError> {
        let moto = MotoServer::start().await?;
        let dynamodb = aws_sdk_dynamodb::Client::new(&moto.sdk_config_in(&options.region));
        let sqs = aws_sdk_sqs::Client::new(&moto.sdk_config_in(&options.region));
        let subscribers_dynamodb =
            aws_sdk_dynamodb::Client::new(&moto.sdk_config_in(SUBSCRIBERS_REGION));
        let root = workspace_root();
        let events = LocalStack::deploy_in(
            &root.join("template-events.yaml"),
            &format!("awsmp-events-{STAGE}"),
            SUBSCRIBERS_REGION,
            // The subscribers table's stream on, and the buyer-events function wired.
            &[
                ("StageName", STAGE),
                ("BuyerEvents", "enabled"),
                ("ReconcileProducts", RECONCILE_PRODUCTS),
            ],
            &subscribers_dynamodb,
            &aws_sdk_sqs::Client::new(&moto.sdk_config_in(SUBSCRIBERS_REGION)),
        )
        .await?;
        let subscribers_table = deployed(&events.tables, "SubscribersTable")?;
        let (mode, allowlist) = match &options.mode {
            MeteringMode::Live => ("live", String::new()),
            MeteringMode::DryRun { allowlist } => (
                "dry-run",
                allowlist.iter().cloned().collect::<Vec<_>>().join(","),
            ),
        };
        let lock = options.lock.hours().to_string();
        let retention = MIN_RETENTION_DAYS.to_string();
        let parameters = [
            ("ProductCode", options.product_code.as_str()),
            ("StageName", STAGE),
            ("SubscribersTableName", subscribers_table.as_str()),
            ("SubscribersTableRegion", SUBSCRIBERS_REGION),
            ("MeteringLockHours", lock.as_str()),
            ("ZeroQuantityPolicy", options.zero_policy.as_str()),
            ("MeteringMode", mode),
            ("TestAccountAllowlist", allowlist.as_str()),
            // Every final write on DynamoDB carries expiresAt; pending ones never do.
            ("DataRetentionDays", retention.as_str()),
            ("FlushMarginMinutes", FLUSH_MARGIN_MINUTES),
            // The tables' streams on, and the outcome-events function wired.
            ("OutcomeEvents", "enabled"),
            // The discoverer sets a deprovisioned buyer's profile expiry.
            ("ProfileRetentionDays", "30"),
        ];
        let main = LocalStack::deploy_in(
            &root.join("template-main.yaml"),
            &format!("awsmp-main-{}-{STAGE}", options.product_code),
            &options.region,
            &parameters,
            &dynamodb,
            &sqs,
        )
        .await?;
        let mut queues = HashMap::new();
        let mut queue_names = HashMap::new();
        for (kind, logical_id) in [
            (QueueKind::Work, "WorkQueue"),
            (QueueKind::Deprovision, "DeprovisionWorkQueue"),
            (QueueKind::Cleanup, "CleanupQueue"),
        ] {
            let (name, url) = main.queues.get(logical_id).cloned().ok_or_else(|| {
                LocalError::Template(format!("template-main.yaml has no queue {logical_id}"))
            })?;
            queues.insert(kind, url);
            queue_names.insert(kind, name);
        }

        let sim = Simulator::start(SimConfig {
            clock: ClockSetting::Fixed { at: options.now },
            products: vec![ProductSeed {
                product_code: options.product_code.clone(),
                dimensions: options.dimensions.clone(),
            }],
            latency_ms: options.sim_latency_ms,
            throttle: ThrottleConfig {
                enabled: options.quota,
                ..ThrottleConfig::default()
            },
            ..SimConfig::default()
        })
        .await
        .map_err(|e| HarnessError::Sim(e.to_string()))?;

        // Every function as `awsmp local up` builds it (`LocalStack::connect`), its
        // calls recorded under its name.
        let calls = CallLog::new();
        let sdk = local_sdk_config(&moto, &sim, &options.region);
        let no_overrides = BTreeMap::new();
        macro_rules! connect {
            ($krate:ident, $binary:literal) => {
                main.connect(
                    $binary,
                    &no_overrides,
                    &calls.sdk_config(&sdk, $binary),
                    $krate::Config::from_lookup,
                    $krate::State::connect,
                )?
                .0
            };
        }
        let mut discoverer = connect!(awsmp_discoverer, "discoverer");
        let mut aggregator = connect!(awsmp_aggregator, "aggregator");
        let mut cleanup = connect!(awsmp_cleanup, "cleanup");
        let mut submitter = connect!(awsmp_submitter, "submitter");

        // What else the tests observe: each handler's stores counted, the recording
        // metrics, the manual clock of the SQS stages.
        let counts = OpCounts::new();
        let usage = |inner: Arc<dyn UsageStore>| -> Arc<dyn UsageStore> {
            Arc::new(CountingUsage {
                inner,
                counts: counts.clone(),
            })
        };
        let aggregated = |inner: Arc<dyn AggregatedStore>| -> Arc<dyn AggregatedStore> {
            Arc::new(CountingAggregated {
                inner,
                counts: counts.clone(),
            })
        };
        let subscribers = |inner: Arc<dyn SubscriberStore>| -> Arc<dyn SubscriberStore> {
            Arc::new(CountingSubscribers {
                inner,
                counts: counts.clone(),
            })
        };
        let harness_subscribers = subscribers(Arc::new(awsmp_aws::DynamoSubscriberStore::new(
            subscribers_dynamodb,
            &subscribers_table,
        )));
        let clock = ManualClock::new(options.now);
        let metrics = RecordingMetrics::new();

        discoverer.ports.usage = usage(discoverer.ports.usage.clone());
        discoverer.ports.subscribers = subscribers(discoverer.ports.subscribers.clone());
        discoverer.ports.metrics = Arc::new(metrics.clone());
        aggregator.ports.usage = usage(aggregator.ports.usage.clone());
        aggregator.ports.aggregated = aggregated(aggregator.ports.aggregated.clone());
        aggregator.ports.clock = Arc::new(clock.clone());
        cleanup.ports.usage = usage(cleanup.ports.usage.clone());
        cleanup.ports.metrics = Arc::new(metrics.clone());
        cleanup.ports.clock = Arc::new(clock.clone());
        submitter.ports.aggregated = aggregated(submitter.ports.aggregated.clone());
        submitter.ports.subscribers = subscribers(submitter.ports.subscribers.clone());
        submitter.ports.metrics = Arc::new(metrics.clone());
        // The submitter keeps its real clock at millisecond resolution: pacing must hold
        // against the simulator's real-time quota.
        Ok(Stack {
            now: Mutex::new(options.now),
            moto,
            sim,
            options,
            dynamodb,
            sqs,
            queues,
            queue_names,
            events,
            main,
            clock,
            metrics,
            counts,
            discoverer,
            aggregator,
            cleanup,
            submitter,
            subscribers: harness_subscribers,
            calls,
            delivered: Mutex::new(Vec::new()),
            failed_receipts: Mutex::new(Vec::new()),
        })
    }

    /// Another function of `deployed` (subscription, register, deprovision-cleanup) as
    /// `awsmp local up` builds it ([`LocalStack::connect`]: its `Config` from its
    /// template environment, `overrides` applied, then `State::connect` in `deployed`'s
    /// Region), its calls recorded under its name in [`Stack::calls`].
    pub fn connect<C, S>(
        &self,
        deployed: &LocalStack,
        binary: &str,
        overrides: &BTreeMap<String, String>,
        read_config: impl FnOnce(&dyn Fn(&str) -> Option<String>) -> Result<C, ConfigError>,
        connect: impl FnOnce(&SdkConfig, &C) -> S,
    ) -> Result<S, HarnessError> {
        let sdk = local_sdk_config(&self.moto, &self.sim, &self.options.region);
        let (state, _) = deployed.connect(
            binary,
            overrides,
            &self.calls.sdk_config(&sdk, binary),
            read_config,
            connect,
        )?;
        Ok(state)
    }

    /// The usage API function as `LocalStack::connect` builds it (its calls recorded),
    /// its "when received" the harness's clock.
    pub fn usage_api(&self) -> Result<awsmp_usage_api::State, HarnessError> {
        let mut state = self.connect(
            &self.main,
            "usage-api",
            &BTreeMap::new(),
            awsmp_usage_api::Config::from_lookup,
            awsmp_usage_api::State::connect,
        )?;
        state.clock = Arc::new(self.clock.clone());
        Ok(state)
    }

    /// The outcome-events function as `LocalStack::connect` builds it (its calls
    /// recorded).
    pub fn outcome_events(&self) -> Result<awsmp_outcome_events::State, HarnessError> {
        self.connect(
            &self.main,
            "outcome-events",
            &BTreeMap::new(),
            awsmp_outcome_events::Config::from_lookup,
            awsmp_outcome_events::State::connect,
        )
    }

    /// The buyer-events function (events stack) as `LocalStack::connect` builds it (its
    /// calls recorded).
    pub fn buyer_events(&self) -> Result<awsmp_buyer_events::State, HarnessError> {
        self.connect(
            &self.events,
            "buyer-events",
            &BTreeMap::new(),
            awsmp_buyer_events::Config::from_lookup,
            awsmp_buyer_events::State::connect,
        )
    }

    // ----------------------------------------------------------------- time

    /// The scenario's "now".
    pub fn now(&self) -> Instant {
        *self
            .now
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Moves the scenario to `now` (handlers' events, the SQS stages' clock, the simulator).
    pub fn set_now(&self, now: Instant) {
        *self
            .now
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = now;
        self.clock.set(now);
        self.sim.handle().set_clock(ClockSetting::Fixed { at: now });
    }

    /// Moves the scenario forward.
    pub fn advance(&self, by: chrono::Duration) {
        self.set_now(self.now() + by);
    }

    // ------------------------------------------------------------ the seller

    /// A pending usage item in the reference writer's shape (sort key
    /// `<account>#<dimension>#<timestamp>`, `meteringPending` = its hour), to write
    /// as is or to spoil first.
    pub fn usage_item(
        license_arn: &str,
        account: &str,
        dimension: &str,
        timestamp: &str,
        quantity: i64,
    ) -> HashMap<String, AttributeValue> {
        let pending = parse_usage_timestamp(timestamp)
            .map(|t| HourBucket::containing(t).to_string())
            .unwrap_or_else(|_| timestamp.chars().take(13).collect());
        HashMap::from([
            (
                attr::LICENSE_ARN.to_string(),
                AttributeValue::S(license_arn.to_string()),
            ),
            (
                attr::USAGE_SORT_KEY.to_string(),
                AttributeValue::S(format!("{account}#{dimension}#{timestamp}")),
            ),
            (
                attr::CUSTOMER_ACCOUNT.to_string(),
                AttributeValue::S(account.to_string()),
            ),
            (
                attr::DIMENSION.to_string(),
                AttributeValue::S(dimension.to_string()),
            ),
            (
                attr::TIMESTAMP.to_string(),
                AttributeValue::S(timestamp.to_string()),
            ),
            (
                attr::QUANTITY.to_string(),
                AttributeValue::N(quantity.to_string()),
            ),
            (
                attr::METERING_PENDING.to_string(),
                AttributeValue::S(pending),
            ),
        ])
    }

    /// Writes an item into the usage table as the seller's writer would.
    pub async fn put_item(
        &self,
        item: HashMap<String, AttributeValue>,
    ) -> Result<String, HarnessError> {
        let sort_key = item
            .get(attr::USAGE_SORT_KEY)
            .and_then(|v| v.as_s().ok())
            .cloned()
            .unwrap_or_default();
        self.dynamodb
            .put_item()
            .table_name(self.table("UsageTable"))
            .set_item(Some(item))
            .send()
            .await
            .map_err(|e| HarnessError::Aws(format!("PutItem: {e:?}")))?;
        Ok(sort_key)
    }

    /// Writes one well-formed usage row; returns its sort key.
    pub async fn put_usage(
        &self,
        license_arn: &str,
        account: &str,
        dimension: &str,
        timestamp: &str,
        quantity: i64,
    ) -> Result<String, HarnessError> {
        self.put_item(Self::usage_item(
            license_arn,
            account,
            dimension,
            timestamp,
            quantity,
        ))
        .await
    }

    // -------------------------------------------------------- subscriptions

    /// Plays `License Updated`: the subscriber row becomes active (as the subscription
    /// Lambda writes it) and Marketplace entitles the buyer.
    pub async fn license_updated(
        &self,
        license_arn: &str,
        account: &str,
    ) -> Result<(), HarnessError> {
        self.put_subscriber(license_arn, account, SubscriptionStatus::Active, None)
            .await?;
        self.sim
            .handle()
            .entitle(EntitlementSeed {
                license_arn: license_arn.to_string(),
                customer_aws_account_id: account.to_string(),
                product_code: self.options.product_code.clone(),
            })
            .map_err(|e| HarnessError::Sim(e.to_string()))?;
        Ok(())
    }

    /// The buyer subscribed and registered (Marketplace knows the license, issued a
    /// registration token) but `License Updated` has not arrived: nothing entitles
    /// the buyer yet and the subscribers table has no row.
    pub fn registered_only(&self, license_arn: &str, account: &str) -> Result<(), HarnessError> {
        self.sim
            .handle()
            .seed_token(TokenSeed {
                token: format!("token-{license_arn}-{account}"),
                license_arn: license_arn.to_string(),
                customer_aws_account_id: account.to_string(),
                product_code: self.options.product_code.clone(),
                issued_at: None,
            })
            .map_err(|e| HarnessError::Sim(e.to_string()))
    }

    /// Marketplace stops accepting the buyer's usage (agreement ended).
    pub fn revoke(&self, license_arn: &str, account: &str) -> Result<(), HarnessError> {
        self.sim
            .handle()
            .revoke(&EntitlementKey {
                license_arn: license_arn.to_string(),
                customer_aws_account_id: account.to_string(),
            })
            .map(|_| ())
            .map_err(|e| HarnessError::Sim(e.to_string()))
    }

    /// Writes a subscriber row's lifecycle (creating or replacing it).
    pub async fn put_subscriber(
        &self,
        license_arn: &str,
        account: &str,
        status: SubscriptionStatus,
        deprovisioning_expiry: Option<Instant>,
    ) -> Result<(), HarnessError> {
        let existing = self
            .subscribers
            .get(license_arn, account)
            .await
            .map_err(|e| HarnessError::Aws(e.to_string()))?;
        let mut row = existing.unwrap_or_else(|| Subscriber::new(license_arn, account));
        row.product_code = Some(self.options.product_code.clone());
        row.agreement_id = Some(format!("agmt-{}", account));
        row.agreement_status = Some(AgreementStatus::Active);
        row.subscription_status = Some(status);
        row.deprovisioning_expiry = deprovisioning_expiry;
        row.subscription_event_at = Some(self.now());
        let written = self
            .subscribers
            .put_lifecycle(&row, self.now())
            .await
            .map_err(|e| HarnessError::Aws(e.to_string()))?;
        if written {
            Ok(())
        } else {
            Err(HarnessError::Aws(format!(
                "subscriber {license_arn} changed meanwhile"
            )))
        }
    }

    // ------------------------------------------------------------ handlers

    /// One discoverer run at "now".
    pub async fn run_discoverer(&self) -> Result<DiscoverReport, HarnessError> {
        let event = scheduled_event("awsmp-discoverer", self.now())?;
        let result = awsmp_discoverer::handler(&self.discoverer, event).await;
        result.map_err(|e| handler_error("discoverer", e))
    }

    /// One submitter run at "now".
    pub async fn run_submitter(&self) -> Result<SubmitReport, HarnessError> {
        let event = scheduled_event("awsmp-submitter", self.now())?;
        let result = awsmp_submitter::handler(&self.submitter, event).await;
        result.map_err(|e| handler_error("submitter", e))
    }

    /// Delivers the aggregation queues (deprovisioning first) to the aggregator until
    /// they are empty. Failed messages stay invisible until the next drain (as after a
    /// visibility timeout) so a drain always ends.
    pub async fn drain_aggregator(&self) -> Result<DrainReport, HarnessError> {
        self.release_failed().await?;
        let mut report = DrainReport::default();
        loop {
            let mut batch = self.receive(QueueKind::Deprovision).await?;
            let mut kind = QueueKind::Deprovision;
            if batch.is_empty() {
                batch = self.receive(QueueKind::Work).await?;
                kind = QueueKind::Work;
            }
            if batch.is_empty() {
                return Ok(report);
            }
            let event = sqs_event(&queue_arn(&self.main.region, self.queue_name(kind)), &batch)?;
            let response = awsmp_aggregator::handler(&self.aggregator, event)
                .await
                .map_err(|e| handler_error("aggregator", e))?;
            let failed: Vec<String> = response
                .batch_item_failures
                .iter()
                .map(|f| f.item_identifier.clone())
                .collect();
            self.settle(kind, &batch, &failed, &mut report).await?;
        }
    }

    /// Delivers the cleanup queue to cleanup until it is empty.
    pub async fn drain_cleanup(&self) -> Result<DrainReport, HarnessError> {
        self.release_failed().await?;
        let mut report = DrainReport::default();
        loop {
            let batch = self.receive(QueueKind::Cleanup).await?;
            if batch.is_empty() {
                return Ok(report);
            }
            let event = sqs_event(
                &queue_arn(&self.main.region, self.queue_name(QueueKind::Cleanup)),
                &batch,
            )?;
            let response = awsmp_cleanup::handler(&self.cleanup, event)
                .await
                .map_err(|e| handler_error("cleanup", e))?;
            let failed: Vec<String> = response
                .batch_item_failures
                .iter()
                .map(|f| f.item_identifier.clone())
                .collect();
            self.settle(QueueKind::Cleanup, &batch, &failed, &mut report)
                .await?;
        }
    }

    /// Discoverer, aggregator, cleanup, submitter, once each, at "now".
    pub async fn run_pipeline(&self) -> Result<SubmitReport, HarnessError> {
        self.run_discoverer().await?;
        self.drain_aggregator().await?;
        self.drain_cleanup().await?;
        self.run_submitter().await
    }

    /// Sends every distinct message delivered so far again (SQS at-least-once redelivery).
    pub async fn redeliver_everything(&self) -> Result<usize, HarnessError> {
        let delivered = self
            .delivered
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        for (kind, body) in &delivered {
            self.send_raw(*kind, body).await?;
        }
        Ok(delivered.len())
    }

    /// Puts a raw body on a queue (a duplicate, or a malformed message).
    pub async fn send_raw(&self, kind: QueueKind, body: &str) -> Result<(), HarnessError> {
        self.sqs
            .send_message()
            .queue_url(self.queue_url(kind))
            .message_body(body)
            .send()
            .await
            .map_err(|e| HarnessError::Aws(format!("SendMessage: {e:?}")))?;
        Ok(())
    }

    /// Messages currently visible on a queue (received and made visible again).
    pub async fn peek(&self, kind: QueueKind) -> Result<Vec<String>, HarnessError> {
        let batch = self.receive(kind).await?;
        for message in &batch {
            self.set_visibility(kind, &message.receipt_handle, 0)
                .await?;
        }
        Ok(batch.into_iter().map(|m| m.body).collect())
    }

    fn queue_url(&self, kind: QueueKind) -> String {
        self.queues.get(&kind).cloned().unwrap_or_default()
    }

    fn queue_name(&self, kind: QueueKind) -> &str {
        self.queue_names.get(&kind).map_or("", String::as_str)
    }

    /// The name the main stack gave a table.
    fn table(&self, logical_id: &str) -> &str {
        self.main.tables.get(logical_id).map_or("", String::as_str)
    }

    async fn receive(&self, kind: QueueKind) -> Result<Vec<Delivered>, HarnessError> {
        let out = self
            .sqs
            .receive_message()
            .queue_url(self.queue_url(kind))
            .max_number_of_messages(10)
            .visibility_timeout(3600)
            .send()
            .await
            .map_err(|e| HarnessError::Aws(format!("ReceiveMessage: {e:?}")))?;
        Ok(out
            .messages()
            .iter()
            .map(|m| Delivered {
                message_id: m.message_id().unwrap_or_default().to_string(),
                receipt_handle: m.receipt_handle().unwrap_or_default().to_string(),
                body: m.body().unwrap_or_default().to_string(),
            })
            .collect())
    }

    async fn set_visibility(
        &self,
        kind: QueueKind,
        receipt: &str,
        seconds: i32,
    ) -> Result<(), HarnessError> {
        self.sqs
            .change_message_visibility()
            .queue_url(self.queue_url(kind))
            .receipt_handle(receipt)
            .visibility_timeout(seconds)
            .send()
            .await
            .map_err(|e| HarnessError::Aws(format!("ChangeMessageVisibility: {e:?}")))?;
        Ok(())
    }

    /// Deletes handled messages, keeps failed ones for the next drain.
    async fn settle(
        &self,
        kind: QueueKind,
        batch: &[Delivered],
        failed: &[String],
        report: &mut DrainReport,
    ) -> Result<(), HarnessError> {
        for message in batch {
            if failed.contains(&message.message_id) {
                report.failed += 1;
                self.failed_receipts
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push((self.queue_url(kind), message.receipt_handle.clone()));
                continue;
            }
            report.succeeded += 1;
            self.remember(kind, &message.body);
            self.sqs
                .delete_message()
                .queue_url(self.queue_url(kind))
                .receipt_handle(&message.receipt_handle)
                .send()
                .await
                .map_err(|e| HarnessError::Aws(format!("DeleteMessage: {e:?}")))?;
        }
        Ok(())
    }

    /// Logs a delivered message once: redeliveries are not themselves redelivered.
    fn remember(&self, kind: QueueKind, body: &str) {
        let mut delivered = self
            .delivered
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !delivered.iter().any(|(k, b)| *k == kind && b == body) {
            delivered.push((kind, body.to_string()));
        }
    }

    /// Makes the messages that failed earlier visible again (their timeout passed).
    async fn release_failed(&self) -> Result<(), HarnessError> {
        let failed: Vec<(String, String)> = std::mem::take(
            &mut *self
                .failed_receipts
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        for (url, receipt) in failed {
            self.sqs
                .change_message_visibility()
                .queue_url(url)
                .receipt_handle(receipt)
                .visibility_timeout(0)
                .send()
                .await
                .map_err(|e| HarnessError::Aws(format!("ChangeMessageVisibility: {e:?}")))?;
        }
        Ok(())
    }

    // ------------------------------------------------------------ inspection

    /// Every raw usage row.
    pub async fn raw_rows(&self) -> Result<Vec<RawRowView>, HarnessError> {
        views::raw_rows(&self.dynamodb, self.table("UsageTable")).await
    }

    /// Every aggregated record.
    pub async fn aggregated_rows(&self) -> Result<Vec<AggregatedView>, HarnessError> {
        views::aggregated_rows(&self.dynamodb, self.table("AggregatedUsageTable")).await
    }

    /// The raw row with this sort key.
    pub async fn raw_row(&self, sort_key: &str) -> Result<RawRowView, HarnessError> {
        self.raw_rows()
            .await?
            .into_iter()
            .find(|r| r.sort_key == sort_key)
            .ok_or_else(|| HarnessError::Aws(format!("no raw row {sort_key}")))
    }

    /// What the simulator billed and refused.
    pub fn ledger(&self) -> LedgerSnapshot {
        self.sim.handle().ledger()
    }

    /// Billed quantity per `(license, account, dimension, hour)`.
    pub fn billed(&self) -> HashMap<(String, String, String, String), i64> {
        self.ledger()
            .records
            .iter()
            .map(|r| {
                (
                    (
                        r.license_arn.clone(),
                        r.customer_aws_account_id.clone(),
                        r.dimension.clone(),
                        r.hour.format("%Y-%m-%dT%H").to_string(),
                    ),
                    i64::from(r.quantity),
                )
            })
            .collect()
    }

    /// Violations of the conservation invariant (empty when it holds).
    pub async fn conservation(&self, settled: bool) -> Result<Vec<String>, HarnessError> {
        Ok(invariant::conservation(
            &self.raw_rows().await?,
            &self.aggregated_rows().await?,
            &self.ledger(),
            settled,
        ))
    }
}

/// The name a deployed stack gave its resource `logical_id`.
fn deployed(
    resources: &BTreeMap<String, String>,
    logical_id: &str,
) -> Result<String, HarnessError> {
    resources.get(logical_id).cloned().ok_or_else(|| {
        HarnessError::Local(LocalError::Template(format!(
            "the templates deploy no {logical_id}"
        )))
    })
}

/// An active pay-as-you-go agreement to seed the simulator with: `agreement_id` on
/// `license_arn` of `account`, for `product_code` (the Agreement API's `product_id`),
/// from `start`, offered by the seller of record, with no rate card (set `rate_card`).
pub fn agreement_seed(
    agreement_id: &str,
    license_arn: &str,
    account: &str,
    product: (&str, &str),
    start: Instant,
) -> awsmp_marketplace_sim::AgreementSeed {
    awsmp_marketplace_sim::AgreementSeed::active(
        agreement_id,
        license_arn,
        account,
        product,
        start,
        "offer-e2e",
    )
}

impl Stack {
    /// Seeds the simulator with `account`'s active agreement on `license_arn`, id
    /// `agmt-<account>` (the one `license_updated` puts on the row), started 60 days
    /// before the stack's now, pricing each dimension at its decimal price.
    pub fn seed_priced_agreement(
        &self,
        license_arn: &str,
        account: &str,
        prices: &[(&str, &str)],
    ) -> Result<(), HarnessError> {
        let seed = agreement_seed(
            &format!("agmt-{account}"),
            license_arn,
            account,
            (&self.options.product_code, "prod-e2eagreements"),
            self.now() - chrono::Duration::days(60),
        )
        .priced(prices)
        .map_err(|e| HarnessError::Sim(e.to_string()))?;
        self.sim
            .handle()
            .seed_agreement(seed)
            .map(|_| ())
            .map_err(|e| HarnessError::Sim(e.to_string()))
    }

    /// The Agreement API on the simulator (us-east-1), as the operator tool reaches it.
    pub fn agreement_api(&self) -> awsmp_aws::SdkAgreementApi {
        let sdk = local_sdk_config(&self.moto, &self.sim, &self.options.region);
        awsmp_aws::SdkAgreementApi::new(awsmp_aws::agreement_client(&sdk))
    }
}

/// The local stack's SDK config: DynamoDB and SQS on moto, Marketplace Metering on the
/// simulator, in `region`.
fn local_sdk_config(moto: &MotoServer, sim: &RunningSim, region: &str) -> SdkConfig {
    awsmp_aws::LocalEndpoints {
        aws: moto.endpoint().to_string(),
        metering: sim.endpoint_url(),
    }
    .sdk_config(region)
}

/// A handler's error, naming the handler.
fn handler_error(handler: &'static str, e: impl std::fmt::Display) -> HarnessError {
    HarnessError::Handler {
        handler,
        message: e.to_string(),
    }
}

/// Whether a benchmark figure labelled `label` is wanted: the words after `--` on the
/// bench's command line pick figures whose label contains one (none: every figure).
pub fn wanted(label: &str) -> bool {
    let words: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    words.is_empty() || words.iter().any(|w| label.contains(w.as_str()))
}

/// A license ARN of the License Manager shape, numbered.
pub fn license(n: u32) -> String {
    format!("arn:aws:license-manager::123456789012:license:l-{n:016x}")
}

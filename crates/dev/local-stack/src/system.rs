//! The running local system: emulator, simulator, both stacks' resources, every
//! function wired from its template, the register endpoint and the page, and the
//! virtual clock that fires schedules and drains the event-source mappings.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use awsmp_apigw_local::{
    LOOPBACK_ANY_PORT, LocalServer, Sigv4Verifier, lambda_router, page_origin, require_sigv4,
    serve, serve_on,
};
use awsmp_core::ports::Clock;
use awsmp_core::time::Instant;
use awsmp_local_aws::MotoServer;
use awsmp_marketplace_sim::{ClockSetting, RunningSim, SimConfig, Simulator};
use lambda_runtime::LambdaEvent;

use crate::LocalError;
use crate::clock::LocalClock;
use crate::resources::{LOCAL_REGION, LocalStack};
use crate::runtime::{SqsMapping, context, queue_depth, scheduled_event};
use crate::streams::StreamMapping;
use crate::wiring::{WiredFunction, wire_functions};
use awsmp_local_aws::EventSource;

/// Product code of the local main stack.
pub const LOCAL_PRODUCT_CODE: &str = "awsmplocaldemo";
/// Product id of the local product (what the Agreement API names it by).
pub const LOCAL_PRODUCT_ID: &str = "prod-localdemo";
/// Stage name of the local stacks.
pub const LOCAL_STAGE: &str = "local";

/// Everything `awsmp local up` started. Dropping it stops all of it.
pub struct LocalSystem {
    /// moto (DynamoDB + SQS).
    pub moto: MotoServer,
    /// The Marketplace Metering simulator.
    pub sim: RunningSim,
    /// The events stack.
    pub events: LocalStack,
    /// The main stack.
    pub main: LocalStack,
    /// Every function, wired.
    pub functions: Vec<WiredFunction>,
    /// DynamoDB client on the emulator.
    pub dynamodb: aws_sdk_dynamodb::Client,
    /// SQS client on the emulator.
    pub sqs: aws_sdk_sqs::Client,
    /// The register API (`/register`, `/fulfillment`) on its own address, as execute-api
    /// serves it; the page's origin serves the same two routes.
    pub api: LocalServer,
    /// The usage API (`/usage/events`), when the main stack deploys it.
    pub usage_api: Option<LocalServer>,
    /// The stack's one clock: every handler, the usage API's "when received", the
    /// deadlines and the schedules read it (`now` is where the system last stepped).
    pub clock: LocalClock,
    /// The workspace root (templates, `web/`, `examples/`).
    pub root: PathBuf,
    /// The registration page, with `/register` and `/fulfillment` on its own origin (as
    /// the page's distribution routes them to the API in AWS).
    pub page: LocalServer,
    /// Virtual now.
    pub now: Instant,
    /// The EMF metric lines the functions wrote.
    pub metrics_log: PathBuf,
    /// The tables' stream mappings (outcome events, buyer events).
    pub streams: Vec<StreamMapping>,
    /// Serving: the stack's time, the wall instant it was read and the speed.
    pace: Option<(Instant, std::time::Instant, u32)>,
    /// The queue a rule on the default bus fills with every `awsmp.metering` event, as
    /// a seller's own rule would (when the main stack has outcome events).
    pub outcome_queue: Option<String>,
    /// The queue a rule on the default bus fills with every `awsmp.buyers` event (when
    /// the events stack has buyer events).
    pub buyer_queue: Option<String>,
    last_run: BTreeMap<String, Instant>,
}

/// The local rule on the default bus that catches the outcome events.
pub const LOCAL_OUTCOME_RULE: &str = "awsmp-local-outcome-events";
/// The local rule on the default bus that catches the buyer lifecycle events.
pub const LOCAL_BUYER_RULE: &str = "awsmp-local-buyer-events";

/// Where the templates and the page live.
#[derive(Debug, Clone)]
pub struct LocalPaths {
    /// Workspace root holding `template-*.yaml` and `web/`.
    pub root: PathBuf,
}

impl LocalPaths {
    fn template(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }
}

impl LocalSystem {
    /// Starts everything with the virtual clock at `start`.
    pub async fn start(paths: &LocalPaths, start: Instant) -> Result<Self, LocalError> {
        let moto = MotoServer::start().await?;
        let sim = Simulator::start(SimConfig {
            clock: ClockSetting::Fixed { at: start },
            ..SimConfig::default()
        })
        .await
        .map_err(|e| LocalError::Setup(format!("Marketplace simulator: {e}")))?;
        let dynamodb = moto.dynamodb();
        let sqs = moto.sqs();

        let events = LocalStack::deploy(
            &paths.template("template-events.yaml"),
            &format!("awsmp-events-{LOCAL_STAGE}"),
            &[
                ("StageName", LOCAL_STAGE),
                ("BuyerEvents", "enabled"),
                (
                    "ReconcileProducts",
                    &format!("{LOCAL_PRODUCT_ID}={LOCAL_PRODUCT_CODE}"),
                ),
            ],
            &dynamodb,
            &sqs,
        )
        .await?;
        let subscribers_table =
            events.tables.values().next().cloned().ok_or_else(|| {
                LocalError::Template("events stack has no subscribers table".into())
            })?;

        // The page's address comes first: the register function's page URL and allowed
        // origin are this local address instead of CloudFront's. As the distribution
        // does in AWS, the page's origin also serves /register and /fulfillment (see
        // below), so config.json (what deploy.sh writes next to the page in S3) names
        // the register URL on the page's own origin.
        let page_listener = tokio::net::TcpListener::bind(LOOPBACK_ANY_PORT)
            .await
            .map_err(|e| LocalError::Setup(format!("page port: {e}")))?;
        let page_addr = page_listener
            .local_addr()
            .map_err(|e| LocalError::Setup(format!("page port: {e}")))?;
        let page_url = format!("http://{page_addr}");

        let main_params = [
            ("ProductCode", LOCAL_PRODUCT_CODE),
            ("StageName", LOCAL_STAGE),
            ("SubscribersTableName", subscribers_table.as_str()),
            ("SubscribersTableRegion", LOCAL_REGION),
            ("ResolveCustomerRegion", LOCAL_REGION),
            ("OutcomeEvents", "enabled"),
        ];
        let main = LocalStack::deploy(
            &paths.template("template-main.yaml"),
            &format!("awsmp-main-{LOCAL_PRODUCT_CODE}-{LOCAL_STAGE}"),
            &main_params,
            &dynamodb,
            &sqs,
        )
        .await?;

        // `awsmp --stage local --product-code awsmplocaldemo ...` finds these as it finds
        // a real deployment: through the stacks' outputs.
        let cloudformation = aws_sdk_cloudformation::Client::new(&moto.sdk_config());
        events.register_outputs(&cloudformation).await?;
        main.register_outputs(&cloudformation).await?;

        let mut overrides = BTreeMap::new();
        overrides.insert("REGISTRATION_PAGE_URL".to_string(), format!("{page_url}/"));
        overrides.insert("ALLOWED_ORIGIN".to_string(), page_url.clone());
        let metrics_log =
            std::env::temp_dir().join(format!("awsmp-local-metrics-{}.jsonl", std::process::id()));
        let _ = std::fs::remove_file(&metrics_log);
        // Every function's clients on the emulator and the simulator, as a Lambda's on
        // the config its `main.rs` loads.
        let sdk = awsmp_aws::LocalEndpoints {
            aws: moto.endpoint().to_string(),
            metering: sim.endpoint_url(),
        }
        .sdk_config(LOCAL_REGION);
        let clock = LocalClock::new(start);
        let functions = wire_functions(&[&events, &main], &overrides, &sdk, &metrics_log, &clock)?;

        let register = functions
            .iter()
            .find(|f| f.name == "register")
            .map(|f| f.function.clone())
            .ok_or_else(|| {
                LocalError::Wiring("template-main.yaml has no register function".into())
            })?;
        let register_api = lambda_router(move |request| {
            let register = register.clone();
            async move { register.api(request).await }
        });
        // The API on its own address, as execute-api serves it (a Fulfillment URL entered
        // before the page's origin served it).
        let api = serve(register_api.clone(), LOOPBACK_ANY_PORT)
            .await
            .map_err(|e| LocalError::Setup(format!("register API server: {e}")))?;
        let deployed_config = serde_json::json!({
            "registerUrl": format!("{page_url}/register"),
            "fulfillmentUrl": format!("{page_url}/fulfillment"),
            "productCode": LOCAL_PRODUCT_CODE,
            "stage": LOCAL_STAGE,
            "region": LOCAL_REGION,
        });
        // The page's origin: its files, its config.json, and the two API routes the
        // distribution sends to RegisterApi.
        let page_router = page_origin(paths.root.join("web"), register_api).route(
            "/config.json",
            axum::routing::get(move || {
                let body = deployed_config.clone();
                async move { axum::Json(body) }
            }),
        );
        let page = serve_on(page_listener, page_router)
            .map_err(|e| LocalError::Setup(format!("page server: {e}")))?;
        let usage_api = match functions.iter().find(|f| f.name == "usage-api") {
            None => None,
            Some(function) => {
                let function = function.function.clone();
                // SigV4 required, as the template's IAM authorization does in AWS.
                let (key, secret) = crate::resources::LOCAL_API_CREDENTIALS;
                let router = require_sigv4(
                    lambda_router(move |request| {
                        let function = function.clone();
                        async move { function.api(request).await }
                    }),
                    Sigv4Verifier::new(key, secret, LOCAL_REGION),
                );
                Some(
                    serve(router, LOOPBACK_ANY_PORT)
                        .await
                        .map_err(|e| LocalError::Setup(format!("usage API server: {e}")))?,
                )
            }
        };

        let mut streams = Vec::new();
        for (i, f) in functions.iter().enumerate() {
            for ev in &f.events {
                if let EventSource::DynamoDbStream {
                    table,
                    batch_size,
                    report_batch_item_failures,
                    filters,
                } = ev
                {
                    let stack = if f.stack == 0 { &events } else { &main };
                    let stream_arn = stack.attribute(table, "StreamArn").ok_or_else(|| {
                        LocalError::Wiring(format!(
                            "{} reads the stream of {table}, which has none",
                            f.name
                        ))
                    })?;
                    streams.push(StreamMapping::new(
                        moto.endpoint(),
                        &clock,
                        i,
                        stream_arn,
                        *batch_size,
                        *report_batch_item_failures,
                        filters.clone(),
                        f.timeout,
                    ));
                }
            }
        }
        // A rule per source, as a seller's own rules would route them.
        let streamed = |stack: usize| streams.iter().any(|s| functions[s.function].stack == stack);
        let outcome_queue = if streamed(1) {
            Some(
                catch_events(
                    &moto,
                    &sqs,
                    LOCAL_OUTCOME_RULE,
                    awsmp_core::outcomes::SOURCE,
                )
                .await?,
            )
        } else {
            None
        };
        let buyer_queue = if streamed(0) {
            Some(
                catch_events(
                    &moto,
                    &sqs,
                    LOCAL_BUYER_RULE,
                    awsmp_core::lifecycle::buyer_events::SOURCE,
                )
                .await?,
            )
        } else {
            None
        };

        Ok(LocalSystem {
            moto,
            sim,
            events,
            main,
            functions,
            dynamodb,
            sqs,
            api,
            usage_api,
            clock,
            root: paths.root.clone(),
            page,
            now: start,
            last_run: BTreeMap::new(),
            metrics_log,
            streams,
            outcome_queue,
            buyer_queue,
            pace: None,
        })
    }

    /// The stack a function belongs to.
    fn stack_of(&self, function: &WiredFunction) -> &LocalStack {
        if function.stack == 0 {
            &self.events
        } else {
            &self.main
        }
    }

    /// Every SQS mapping: (function index, mapping).
    fn mappings(&self) -> Result<Vec<(usize, SqsMapping<'_>)>, LocalError> {
        let mut out = Vec::new();
        for (i, f) in self.functions.iter().enumerate() {
            for ev in &f.events {
                if let EventSource::Sqs {
                    queue,
                    batch_size,
                    report_batch_item_failures,
                } = ev
                {
                    let stack = self.stack_of(f);
                    out.push((
                        i,
                        SqsMapping {
                            sqs: &self.sqs,
                            queue_url: stack.queue_url(queue)?.to_string(),
                            queue_arn: stack.attribute(queue, "Arn").unwrap_or_default(),
                            batch_size: *batch_size,
                            report_batch_item_failures: *report_batch_item_failures,
                            timeout: f.timeout,
                            clock: &self.clock,
                        },
                    ));
                }
            }
        }
        Ok(out)
    }

    /// Polls every mapping until all queues are empty (failed messages come back
    /// after the local visibility timeout), at most `max_rounds` rounds.
    pub async fn drain(&self, max_rounds: usize) -> Result<(), LocalError> {
        let mappings = self.mappings()?;
        for _ in 0..max_rounds {
            let mut busy = false;
            for (i, mapping) in &mappings {
                let stats = mapping
                    .poll_once(self.functions[*i].function.as_ref())
                    .await?;
                busy |= stats.received > 0;
            }
            for stream in &self.streams {
                let stats = stream
                    .poll_once(self.functions[stream.function].function.as_ref())
                    .await?;
                busy |= stats.received > 0;
            }
            if !busy {
                let mut depth = 0;
                for (_, mapping) in &mappings {
                    depth += queue_depth(&self.sqs, &mapping.queue_url).await?;
                }
                if depth == 0 {
                    return Ok(());
                }
                // Only failed messages waiting out their visibility timeout remain.
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        }
        Ok(())
    }

    /// Moves the virtual clock to `to` in `step` increments: at each step the
    /// simulator's clock follows, due schedules fire, and the queues drain.
    pub async fn advance(&mut self, to: Instant, step: chrono::Duration) -> Result<(), LocalError> {
        while self.now < to {
            self.now = (self.now + step).min(to);
            self.clock.advance_to(self.now);
            self.sim
                .handle()
                .set_clock(ClockSetting::Fixed { at: self.now });
            self.run_due_schedules().await?;
            self.drain(200).await?;
        }
        Ok(())
    }

    /// Serving: moves the clock up to the wall clock's time in 5-minute steps (the
    /// schedules fire and the queues drain on the way); from then on
    /// [`LocalSystem::step_to_clock`] keeps it with the wall clock, `speed` times as
    /// fast. At speed 1 the stack's time is the wall's, so usage stamped "now" anywhere
    /// (`awsmp usage put`'s default, a seller's app) is now in the stack too.
    pub async fn catch_up_and_run(&mut self, speed: u32) -> Result<(), LocalError> {
        while self.now < chrono::Utc::now() - chrono::Duration::seconds(1) {
            let wall = chrono::Utc::now();
            self.advance(wall, chrono::Duration::minutes(5)).await?;
        }
        self.pace = Some((self.now, std::time::Instant::now(), speed.max(1)));
        Ok(())
    }

    /// Serving: steps the system to where the paced clock should be (the wall's time at
    /// speed 1), at most five minutes a step: the simulator follows, due schedules
    /// fire, the queues drain.
    pub async fn step_to_clock(&mut self) -> Result<(), LocalError> {
        let Some((from, since, speed)) = self.pace else {
            return Ok(());
        };
        let target = from + chrono::Duration::from_std(since.elapsed() * speed).unwrap_or_default();
        self.advance(target, chrono::Duration::minutes(5)).await
    }

    async fn run_due_schedules(&mut self) -> Result<(), LocalError> {
        for f in &self.functions {
            for ev in &f.events {
                let EventSource::Schedule { every_minutes } = ev else {
                    continue;
                };
                let due = match self.last_run.get(&f.name) {
                    None => true,
                    Some(last) => {
                        self.now - *last >= chrono::Duration::minutes(i64::from(*every_minutes))
                    }
                };
                if due {
                    let event = scheduled_event(&f.name, self.now);
                    f.function
                        .scheduled(LambdaEvent::new(
                            event,
                            context(&f.name, f.timeout, self.clock.now()),
                        ))
                        .await?;
                    self.last_run.insert(f.name.clone(), self.now);
                }
            }
        }
        Ok(())
    }

    /// Sends an EventBridge event to the events stack's queue, as the rule would: the
    /// queue an events-stack function reads (the subscription function's).
    pub async fn put_marketplace_event(&self, event: &serde_json::Value) -> Result<(), LocalError> {
        let url = self
            .functions
            .iter()
            .filter(|f| f.stack == 0)
            .flat_map(|f| &f.events)
            .find_map(|source| match source {
                EventSource::Sqs { queue, .. } => self.events.queue_url(queue).ok(),
                _ => None,
            })
            .ok_or_else(|| LocalError::Template("events stack has no event queue".into()))?;
        self.sqs
            .send_message()
            .queue_url(url)
            .message_body(event.to_string())
            .send()
            .await
            .map_err(|e| LocalError::Aws(format!("SendMessage: {e}")))?;
        Ok(())
    }

    /// Every event the local rule caught on the default bus since the last call (the
    /// outcome events), as EventBridge delivered them; empty without outcome events.
    pub async fn take_outcome_events(&self) -> Result<Vec<serde_json::Value>, LocalError> {
        self.take_caught(self.outcome_queue.as_deref()).await
    }

    /// Every event the local rule for `awsmp.buyers` caught on the default bus since
    /// the last call (the buyer lifecycle events), as EventBridge delivered them; empty
    /// without buyer events.
    pub async fn take_buyer_events(&self) -> Result<Vec<serde_json::Value>, LocalError> {
        self.take_caught(self.buyer_queue.as_deref()).await
    }

    /// Every message of a local rule's queue, read and deleted.
    async fn take_caught(&self, queue: Option<&str>) -> Result<Vec<serde_json::Value>, LocalError> {
        let Some(url) = queue else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        loop {
            let received = self
                .sqs
                .receive_message()
                .queue_url(url)
                .max_number_of_messages(10)
                .send()
                .await
                .map_err(|e| LocalError::Aws(format!("ReceiveMessage {url}: {e}")))?;
            let messages = received.messages.unwrap_or_default();
            if messages.is_empty() {
                return Ok(out);
            }
            for m in messages {
                let body = m.body.unwrap_or_default();
                out.push(serde_json::from_str(&body).map_err(|e| {
                    LocalError::Check(format!("a caught event is not JSON ({e}): {body}"))
                })?);
                if let Some(handle) = m.receipt_handle {
                    self.sqs
                        .delete_message()
                        .queue_url(url)
                        .receipt_handle(handle)
                        .send()
                        .await
                        .map_err(|e| LocalError::Aws(format!("DeleteMessage: {e}")))?;
                }
            }
        }
    }

    /// The usage table name.
    pub fn table(&self, logical_id: &str) -> Result<&str, LocalError> {
        self.main
            .tables
            .get(logical_id)
            .or_else(|| self.events.tables.get(logical_id))
            .map(String::as_str)
            .ok_or_else(|| LocalError::Template(format!("no table {logical_id}")))
    }
}

/// A queue and a rule (both named `rule`) on the emulator's default bus sending it every
/// event of `source`: what a seller's rule routing outcome or buyer events to their own
/// queue does.
async fn catch_events(
    moto: &MotoServer,
    sqs: &aws_sdk_sqs::Client,
    rule: &str,
    source: &str,
) -> Result<String, LocalError> {
    let url = awsmp_local_aws::create_queue(sqs, rule).await?;
    let arn = format!(
        "arn:aws:sqs:{LOCAL_REGION}:{}:{rule}",
        crate::resources::LOCAL_ACCOUNT
    );
    let events = aws_sdk_eventbridge::Client::new(&moto.sdk_config());
    events
        .put_rule()
        .name(rule)
        .event_bus_name("default")
        .event_pattern(serde_json::json!({ "source": [source] }).to_string())
        .send()
        .await
        .map_err(|e| LocalError::Aws(format!("PutRule: {e}")))?;
    events
        .put_targets()
        .rule(rule)
        .event_bus_name("default")
        .targets(
            aws_sdk_eventbridge::types::Target::builder()
                .id("caught-queue")
                .arn(arn)
                .build()
                .map_err(|e| LocalError::Aws(format!("Target: {e}")))?,
        )
        .send()
        .await
        .map_err(|e| LocalError::Aws(format!("PutTargets: {e}")))?;
    Ok(url)
}

/// The workspace root: `--root`, else the current directory if it holds the templates.
pub fn find_root(given: Option<&Path>) -> Result<PathBuf, LocalError> {
    let root = match given {
        Some(p) => p.to_path_buf(),
        None => std::env::current_dir().map_err(|e| LocalError::Setup(e.to_string()))?,
    };
    if root.join("template-main.yaml").is_file() && root.join("template-events.yaml").is_file() {
        Ok(root)
    } else {
        Err(LocalError::Setup(format!(
            "{} does not hold template-main.yaml and template-events.yaml: run from the repository root or pass --root",
            root.display()
        )))
    }
}

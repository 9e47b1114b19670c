//! The running local system: emulator, simulator, both stacks' resources, every
//! function wired from its template, the register endpoint and the page, and the
//! virtual clock that fires schedules and drains the event-source mappings.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use awsmp_apigw_local::{
    LOOPBACK_ANY_PORT, LocalServer, Sigv4Verifier, lambda_router, require_sigv4, serve,
    serve_static,
};
use awsmp_core::clock::ManualClock;
use awsmp_core::time::Instant;
use awsmp_local_aws::MotoServer;
use awsmp_marketplace_sim::{ClockSetting, RunningSim, SimConfig, Simulator};
use lambda_runtime::LambdaEvent;

use crate::LocalError;
use crate::functions::{WiredFunction, wire_functions};
use crate::resources::{LOCAL_REGION, LocalStack};
use crate::runtime::{SqsMapping, context, queue_depth, scheduled_event};
use awsmp_local_aws::EventSource;

/// Product code of the local main stack.
pub const LOCAL_PRODUCT_CODE: &str = "awsmplocaldemo";
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
    /// The register API (`/register`, `/fulfillment`).
    pub api: LocalServer,
    /// The usage API (`/usage/events`), when the main stack deploys it.
    pub usage_api: Option<LocalServer>,
    /// The virtual clock the usage API reads "when received" from (`now`).
    pub clock: ManualClock,
    /// The workspace root (templates, `web/`, `examples/`).
    pub root: PathBuf,
    /// The registration page.
    pub page: LocalServer,
    /// Virtual now.
    pub now: Instant,
    /// The EMF metric lines the functions wrote.
    pub metrics_log: PathBuf,
    last_run: BTreeMap<String, Instant>,
}

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
            &[("StageName", LOCAL_STAGE)],
            &dynamodb,
            &sqs,
        )
        .await?;
        let subscribers_table =
            events.tables.values().next().cloned().ok_or_else(|| {
                LocalError::Template("events stack has no subscribers table".into())
            })?;

        // The page and API servers come first: the register function's page URL and
        // CORS origin are these local addresses instead of CloudFront's.
        // The API's port is chosen first so the page's config.json (what deploy.sh
        // writes next to the page in S3) can name the local register URL.
        let api_listener = std::net::TcpListener::bind(LOOPBACK_ANY_PORT)
            .map_err(|e| LocalError::Setup(format!("register API port: {e}")))?;
        let api_addr = api_listener
            .local_addr()
            .map_err(|e| LocalError::Setup(format!("register API port: {e}")))?;
        drop(api_listener);
        let deployed_config = serde_json::json!({
            "registerUrl": format!("http://{api_addr}/register"),
            "fulfillmentUrl": format!("http://{api_addr}/fulfillment"),
            "productCode": LOCAL_PRODUCT_CODE,
            "stage": LOCAL_STAGE,
            "region": LOCAL_REGION,
        });
        let page_router = axum::Router::new()
            .route(
                "/config.json",
                axum::routing::get(move || {
                    let body = deployed_config.clone();
                    async move { axum::Json(body) }
                }),
            )
            .merge(serve_static(paths.root.join("web")));
        let page = serve(page_router, LOOPBACK_ANY_PORT)
            .await
            .map_err(|e| LocalError::Setup(format!("page server: {e}")))?;

        let main_params = [
            ("ProductCode", LOCAL_PRODUCT_CODE),
            ("StageName", LOCAL_STAGE),
            ("SubscribersTableName", subscribers_table.as_str()),
            ("SubscribersTableRegion", LOCAL_REGION),
            ("ResolveCustomerRegion", LOCAL_REGION),
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
        overrides.insert(
            "REGISTRATION_PAGE_URL".to_string(),
            format!("{}/", page.url()),
        );
        overrides.insert("ALLOWED_ORIGIN".to_string(), page.url());
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
        let clock = ManualClock::new(start);
        let functions = wire_functions(&[&events, &main], &overrides, &sdk, &metrics_log, &clock)?;

        let register = functions
            .iter()
            .find(|f| f.name == "register")
            .map(|f| f.function.clone())
            .ok_or_else(|| {
                LocalError::Wiring("template-main.yaml has no register function".into())
            })?;
        let api = serve(
            lambda_router(move |request| {
                let register = register.clone();
                async move { register.api(request).await }
            }),
            api_addr,
        )
        .await
        .map_err(|e| LocalError::Setup(format!("register API server: {e}")))?;
        let usage_api = match functions.iter().find(|f| f.name == "usage-api") {
            None => None,
            Some(function) => {
                let function = function.function.clone();
                // SigV4 required, as the template's IAM authorization does in AWS.
                let (key, secret) = crate::usage_api::LOCAL_API_CREDENTIALS;
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
            self.clock.set(self.now);
            self.sim
                .handle()
                .set_clock(ClockSetting::Fixed { at: self.now });
            self.run_due_schedules().await?;
            self.drain(200).await?;
        }
        Ok(())
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
                        .scheduled(LambdaEvent::new(event, context(&f.name, f.timeout)))
                        .await?;
                    self.last_run.insert(f.name.clone(), self.now);
                }
            }
        }
        Ok(())
    }

    /// Sends an EventBridge event to the events stack's queue, as the rule would.
    pub async fn put_marketplace_event(&self, event: &serde_json::Value) -> Result<(), LocalError> {
        let (_, url) = self
            .events
            .queues
            .iter()
            .find(|(id, _)| !id.to_ascii_lowercase().contains("dlq"))
            .map(|(_, q)| q)
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

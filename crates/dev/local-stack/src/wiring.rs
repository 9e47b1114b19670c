//! Wires each template function to its handler crate: the environment the template
//! sets (resolved against the local resources) becomes the handler's config, and
//! the handler's own `State::connect` builds its clients on the local stack's SDK
//! config, as its `main.rs` does in Lambda on the one it loads. Metrics go to the local
//! stack's metrics log instead of stdout.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use aws_config::SdkConfig;
use aws_lambda_events::event::apigw::{ApiGatewayProxyRequest, ApiGatewayProxyResponse};
use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use aws_lambda_events::eventbridge::EventBridgeEvent;
use lambda_runtime::LambdaEvent;

use crate::LocalError;
use crate::clock::LocalClock;
use crate::resources::LocalStack;
use crate::runtime::LocalFunction;
use awsmp_local_aws::EventSource;

/// A function of one of the stacks, ready to invoke.
pub struct WiredFunction {
    /// Binary (function) name.
    pub name: String,
    /// Index of its stack (0 = events, 1 = main).
    pub stack: usize,
    /// Its template timeout.
    pub timeout: Duration,
    /// Its event sources.
    pub events: Vec<EventSource>,
    /// The handler.
    pub function: Arc<dyn LocalFunction>,
}

/// The handler state of each function.
enum Handler {
    Subscription(awsmp_subscription::State),
    DeprovisionCleanup(awsmp_deprovision_cleanup::State),
    AgreementReconcile(awsmp_agreement_reconcile::State),
    Register(awsmp_register::State),
    Discoverer(awsmp_discoverer::State),
    Aggregator(awsmp_aggregator::State),
    Cleanup(awsmp_cleanup::State),
    Submitter(awsmp_submitter::State),
    UsageApi(awsmp_usage_api::State),
    OutcomeEvents(awsmp_outcome_events::State),
    BuyerEvents(awsmp_buyer_events::State),
}

struct Local {
    name: String,
    handler: Handler,
}

/// EMF metrics appended to the local stack's metrics log, one JSON line each.
fn metrics_to(
    log: &Path,
    product_code: &str,
    stage: &str,
) -> Result<Arc<awsmp_aws::EmfMetrics>, LocalError> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(|e| LocalError::Setup(format!("metrics log {}: {e}", log.display())))?;
    Ok(Arc::new(awsmp_aws::EmfMetrics::to_writer(
        file,
        product_code,
        stage,
    )))
}

fn failed(name: &str, e: impl std::fmt::Display) -> LocalError {
    LocalError::Wiring(format!("{name} failed: {e}"))
}

fn scheduled(
    name: &str,
    event: LambdaEvent<serde_json::Value>,
) -> Result<LambdaEvent<EventBridgeEvent>, LocalError> {
    let payload: EventBridgeEvent = serde_json::from_value(event.payload)
        .map_err(|e| LocalError::Wiring(format!("{name}: scheduled event: {e}")))?;
    Ok(LambdaEvent::new(payload, event.context))
}

#[async_trait]
impl LocalFunction for Local {
    fn name(&self) -> &str {
        &self.name
    }

    async fn sqs(&self, event: LambdaEvent<SqsEvent>) -> Result<SqsBatchResponse, LocalError> {
        let n = &self.name;
        match &self.handler {
            Handler::Subscription(s) => awsmp_subscription::handler(s, event)
                .await
                .map_err(|e| failed(n, e)),
            Handler::Aggregator(s) => awsmp_aggregator::handler(s, event)
                .await
                .map_err(|e| failed(n, e)),
            Handler::Cleanup(s) => awsmp_cleanup::handler(s, event)
                .await
                .map_err(|e| failed(n, e)),
            _ => Err(LocalError::Wiring(format!("{n} takes no SQS events"))),
        }
    }

    async fn api(
        &self,
        request: ApiGatewayProxyRequest,
    ) -> Result<ApiGatewayProxyResponse, LocalError> {
        match &self.handler {
            Handler::Register(s) => Ok(awsmp_register::handle(s, request).await),
            Handler::UsageApi(s) => Ok(awsmp_usage_api::handle(s, request).await),
            _ => Err(LocalError::Wiring(format!(
                "{} takes no API requests",
                self.name
            ))),
        }
    }

    async fn stream(
        &self,
        event: LambdaEvent<serde_json::Value>,
    ) -> Result<serde_json::Value, LocalError> {
        let n = &self.name;
        let payload: awsmp_lambda::stream::StreamEvent = serde_json::from_value(event.payload)
            .map_err(|e| LocalError::Wiring(format!("{n}: stream event: {e}")))?;
        let event = LambdaEvent::new(payload, event.context);
        let response = match &self.handler {
            Handler::OutcomeEvents(s) => awsmp_outcome_events::handler(s, event).await,
            Handler::BuyerEvents(s) => awsmp_buyer_events::handler(s, event).await,
            _ => return Err(LocalError::Wiring(format!("{n} takes no stream records"))),
        }
        .map_err(|e| failed(n, e))?;
        serde_json::to_value(response).map_err(|e| failed(n, e))
    }

    async fn scheduled(&self, event: LambdaEvent<serde_json::Value>) -> Result<(), LocalError> {
        let n = &self.name;
        let event = scheduled(n, event)?;
        match &self.handler {
            Handler::Discoverer(s) => awsmp_discoverer::handler(s, event)
                .await
                .map(|r| {
                    tracing::info!(function = %n, report = ?r, "run finished");
                })
                .map_err(|e| failed(n, e)),
            Handler::Submitter(s) => awsmp_submitter::handler(s, event)
                .await
                .map(|r| {
                    tracing::info!(function = %n, report = ?r, "run finished");
                })
                .map_err(|e| failed(n, e)),
            Handler::DeprovisionCleanup(s) => awsmp_deprovision_cleanup::handler(s, event)
                .await
                .map(|r| {
                    tracing::info!(function = %n, report = ?r, "run finished");
                })
                .map_err(|e| failed(n, e)),
            Handler::AgreementReconcile(s) => awsmp_agreement_reconcile::handler(s, event)
                .await
                .map(|r| {
                    tracing::info!(function = %n, report = ?r, "run finished");
                })
                .map_err(|e| failed(n, e)),
            _ => Err(LocalError::Wiring(format!("{n} takes no scheduled events"))),
        }
    }
}

/// Builds every function of `stacks` whose condition holds, its clients on `sdk`, its
/// metrics appended to `metrics_log`. `overrides` replace template values that only
/// make sense in AWS (the page URL and its origin). `clock` is the stack's one clock:
/// every handler reads it (their `SystemClock` replaced), as the deadlines do.
pub fn wire_functions(
    stacks: &[&LocalStack],
    overrides: &BTreeMap<String, String>,
    sdk: &SdkConfig,
    metrics_log: &Path,
    clock: &LocalClock,
) -> Result<Vec<WiredFunction>, LocalError> {
    let mut out = Vec::new();
    for (index, stack) in stacks.iter().enumerate() {
        for spec in stack.template.functions().map_err(super::template_error)? {
            if !stack.exists(spec.condition.as_deref()) {
                continue;
            }
            // A handler's config from the template's environment and its state on `sdk`,
            // with its metrics (for those that emit them) in the metrics log.
            macro_rules! connect {
                ($krate:ident) => {
                    stack.connect(
                        &spec.binary,
                        overrides,
                        sdk,
                        $krate::Config::from_lookup,
                        $krate::State::connect,
                    )?
                };
                ($krate:ident, metrics in $($field:ident).+) => {{
                    let (mut state, config) = connect!($krate);
                    state.$($field).+ =
                        metrics_to(metrics_log, &config.product_code, &config.stage)?;
                    state
                }};
            }
            // The stack's one clock instead of each handler's `SystemClock`.
            let one: Arc<dyn awsmp_core::ports::Clock> = Arc::new(clock.clone());
            let handler = match spec.binary.as_str() {
                "subscription" => {
                    let mut state = connect!(awsmp_subscription).0;
                    state.clock = one;
                    Handler::Subscription(state)
                }
                "deprovision-cleanup" => {
                    let mut state = connect!(awsmp_deprovision_cleanup).0;
                    state.clock = one;
                    Handler::DeprovisionCleanup(state)
                }
                "agreement-reconcile" => {
                    let mut state = connect!(awsmp_agreement_reconcile).0;
                    state.clock = one;
                    Handler::AgreementReconcile(state)
                }
                "register" => {
                    let mut state = connect!(awsmp_register, metrics in metrics);
                    state.clock = one;
                    Handler::Register(state)
                }
                "discoverer" => {
                    let mut state = connect!(awsmp_discoverer, metrics in ports.metrics);
                    state.ports.clock = one;
                    Handler::Discoverer(state)
                }
                "aggregator" => {
                    let mut state = connect!(awsmp_aggregator).0;
                    state.ports.clock = one;
                    Handler::Aggregator(state)
                }
                "usage-api" => {
                    let mut state = connect!(awsmp_usage_api).0;
                    state.clock = one;
                    Handler::UsageApi(state)
                }
                "outcome-events" => Handler::OutcomeEvents(connect!(awsmp_outcome_events).0),
                "buyer-events" => Handler::BuyerEvents(connect!(awsmp_buyer_events).0),
                "cleanup" => {
                    let mut state = connect!(awsmp_cleanup, metrics in ports.metrics);
                    state.ports.clock = one;
                    Handler::Cleanup(state)
                }
                "submitter" => {
                    let mut state = connect!(awsmp_submitter, metrics in ports.metrics);
                    state.ports.clock = one;
                    Handler::Submitter(state)
                }
                other => {
                    return Err(LocalError::Wiring(format!(
                        "{} declares binary {other:?}, which no crate provides",
                        spec.logical_id
                    )));
                }
            };
            out.push(WiredFunction {
                name: spec.binary.clone(),
                stack: index,
                timeout: Duration::from_secs(spec.timeout_secs.unwrap_or(60)),
                events: spec.events.clone(),
                function: Arc::new(Local {
                    name: spec.binary.clone(),
                    handler,
                }),
            });
        }
    }
    Ok(out)
}

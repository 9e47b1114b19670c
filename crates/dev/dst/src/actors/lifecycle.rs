//! The events stack's lifecycle functions: Marketplace's agreement events as the
//! subscription handler receives them (an SQS batch of one EventBridge event), and the
//! deprovision-cleanup function's scheduled runs.

use aws_lambda_events::eventbridge::EventBridgeEvent;
use aws_lambda_events::sqs::SqsEvent;
use awsmp_core::ports::Clock;
use awsmp_core::time::{Instant, format_instant};
use lambda_runtime::{Context, LambdaEvent};
use serde_json::json;

use crate::executor::Task;
use crate::scenario::ACCOUNT;
use crate::sim::yield_now;
use crate::stack::Stack;

/// The event of a license becoming active.
pub const UPDATED: &str = "License Updated - Manufacturer";
/// The event of a license ending.
pub const DEPROVISIONED: &str = "License Deprovisioned - Manufacturer";
/// The event of an agreement's terms changing.
pub const AMENDED: &str = "Purchase Agreement Amended - Manufacturer";

impl Stack {
    /// The subscription handler given `detail_type` for `license_arn` at `time`.
    pub async fn lifecycle(&self, detail_type: &str, license_arn: &str, time: Instant) {
        let _ = awsmp_subscription::handler(
            &self.subscription,
            LambdaEvent::new(
                lifecycle_event(self.product, detail_type, license_arn, time),
                Context::default(),
            ),
        )
        .await;
    }

    /// One scheduled run of the deprovision-cleanup function.
    pub async fn deprovision_cleanup_once(&self) {
        let event = scheduled_event(self.clock.now());
        let _ = awsmp_deprovision_cleanup::handler(
            &self.deprovision_cleanup,
            LambdaEvent::new(event, Context::default()),
        )
        .await;
    }
}

/// License Updated for `license_arn` at `at` (applied before the run).
pub fn updated<'a>(stack: &'a Stack, license_arn: &'a str, at: Instant) -> Task<'a> {
    Task::new("license-updated", stack.lifecycle(UPDATED, license_arn, at))
}

/// License Deprovisioned for `license_arn` at `at`, delivered while the pipeline runs.
pub fn deprovisioned<'a>(stack: &'a Stack, license_arn: &'a str, at: Instant) -> Task<'a> {
    Task::new("license-deprovisioned", async move {
        for _ in 0..stack.sim.below(60) {
            yield_now().await;
        }
        stack.lifecycle(DEPROVISIONED, license_arn, at).await;
    })
}

/// A run of the deprovision-cleanup function while the pipeline runs.
pub fn deprovision_cleanup(stack: &Stack) -> Task<'_> {
    Task::new("deprovision-cleanup", async move {
        for _ in 0..stack.sim.below(100) {
            yield_now().await;
        }
        stack.deprovision_cleanup_once().await;
    })
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

fn scheduled_event(time: Instant) -> EventBridgeEvent {
    let event = awsmp_local_aws::scheduled_event("123456789012", "us-east-1", "schedule", time);
    serde_json::from_value(event).unwrap_or_default()
}

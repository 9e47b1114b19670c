//! The IAM contract: moto checks no permissions, so this test records every AWS call
//! each function really makes while the real handlers run end to end (subscription
//! events, a registration, a full metering run with a deprovisioning flush, late usage,
//! a not-yet-subscribed buyer, age-out, deprovision-cleanup), turns each call into the
//! IAM requests AWS authorizes (`awsmp_e2e::calls`: index ARNs, each item of a
//! transaction, queue ARNs, the Region the call went to), adds what each function's
//! SQS event source mappings and Lambda logging need, and evaluates all of it against
//! the function's role in the templates (`awsmp_local_aws::iam`). It fails on any
//! request the role does not allow, and on any grant no request uses (least privilege),
//! naming the function, action, resource and role, and what to change.
//!
//! The main stack runs in eu-west-1 here, so a grant built with the wrong Region (the
//! subscribers table is always in us-east-1) is caught.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod drive;
use drive::drive_every_function;
mod resource_policies;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use aws_lambda_events::apigw::ApiGatewayProxyRequest;
use aws_lambda_events::encodings::Body;
use awsmp_core::memory::{Decorator, SubscriberDecorator};
use awsmp_core::model::{Subscriber, SubscriptionStatus};
use awsmp_core::ports::{PortError, SubscriberStore};
use awsmp_core::time::Instant;
use awsmp_e2e::calls::Authorization;
use awsmp_e2e::common::*;
use awsmp_e2e::events::{Delivered, queue_arn, scheduled_event, sqs_event};
use awsmp_e2e::{QueueKind, SUBSCRIBERS_REGION, Stack, StackOptions, license};
use awsmp_local_aws::cfn::DEFAULT_ACCOUNT;
use awsmp_local_aws::{
    Context, Decision, ResourcePolicy, StackTemplate, function_wiring, key_decision,
    resource_policies, workspace_root,
};
use awsmp_marketplace_sim::EntitlementSeed;

/// The main stack's Region in this test (not the subscribers table's).
const MAIN_REGION: &str = "eu-west-1";
/// The subscription events queue, as the events template names it for stage `test`.
const SUBSCRIPTION_QUEUE: &str = "awsmp-subscription-events-test";
/// The stage and product the harness's table and queue names are built from.
const STAGE: &str = "test";
const PRODUCT: &str = "prod-e2e";
/// The seller's key for the events stack's table and queues (`DataKmsKeyArn`), given
/// to the main stack too (`SubscribersKmsKeyArn`).
const EVENTS_KEY: &str = "arn:aws:kms:us-east-1:123456789012:key/events-data";

/// Grants kept although no recorded run uses them, each with the reason, as
/// (role, statement sid, action, reason). Empty: every grant is used by a recorded
/// call, an event source mapping or the function's log writes. A grant here that a
/// run starts using is reported, so the entry can go.
const KEPT_WITHOUT_A_RECORDED_CALL: &[(&str, &str, &str, &str)] = &[
    (
        "AggregatorRole",
        "UsageReadAndClaim",
        "dynamodb:GetItem",
        "a final write (a zero row under skip) whose condition fails reads the row back \
         to tell its own lost answer from another writer's; no recorded run loses one",
    ),
    (
        "SubmitterRole",
        "AggregatedClaimAndRecord",
        "dynamodb:GetItem",
        "an age-out whose condition fails reads the record back to tell its own lost \
         answer from another writer's; no recorded run loses one",
    ),
];

/// Every function (its binary) and the template that deploys it.
const FUNCTIONS: &[(&str, &str)] = &[
    ("subscription", "template-events.yaml"),
    ("deprovision-cleanup", "template-events.yaml"),
    ("agreement-reconcile", "template-events.yaml"),
    ("buyer-events", "template-events.yaml"),
    ("register", "template-main.yaml"),
    ("usage-api", "template-main.yaml"),
    ("outcome-events", "template-main.yaml"),
    ("discoverer", "template-main.yaml"),
    ("aggregator", "template-main.yaml"),
    ("cleanup", "template-main.yaml"),
    ("submitter", "template-main.yaml"),
];

/// One thing a function needs IAM to allow, and why.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Need {
    request: Authorization,
    because: String,
}

/// The request context AWS gives a function's request: who calls (its role), over TLS,
/// the condition keys the call itself carries, and for a KMS call made through
/// DynamoDB the service and account.
fn context(principal: &str, request: &Authorization) -> Context {
    let mut context = Context::new()
        .with("aws:PrincipalArn", [principal])
        .with("aws:SecureTransport", ["true"]);
    if !request.attributes.is_empty() {
        context = context.with("dynamodb:Attributes", request.attributes.iter().cloned());
    }
    if let Some(values) = &request.return_values {
        context = context.with("dynamodb:ReturnValues", [values.clone()]);
    }
    if let Some(service) = &request.via_service {
        let region = request.resource.split(':').nth(3).unwrap_or_default();
        context = context
            .with(
                "kms:ViaService",
                [format!("{service}.{region}.amazonaws.com")],
            )
            .with("kms:CallerAccount", [DEFAULT_ACCOUNT]);
    }
    context
}

/// IAM's decision for `principal` (with `identity`) making `request`: the role's
/// policy and the policy of the resource it names (a table's resource policy: a
/// deny in either wins, an allow in either allows); for a key of the template its key
/// policy (which may delegate to the role's policy by naming the account), and for a
/// key the seller brings (`DataKmsKeyArn`, ...) the role's policy, as the documented
/// key policy delegates to IAM.
fn decide(
    identity: &awsmp_local_aws::Policy,
    policies: &[ResourcePolicy],
    principal: &str,
    request: &Authorization,
) -> Decision {
    let context = context(principal, request);
    let (action, resource) = (request.action.as_str(), request.resource.as_str());
    let governing = policies.iter().filter(|p| p.governs(resource));
    if action.starts_with("kms:") {
        return governing
            .map(|p| key_decision(&p.policy, identity, principal, action, resource, &context))
            .next()
            .unwrap_or_else(|| identity.evaluate_in(action, resource, &context));
    }
    governing.fold(
        identity.evaluate_in(action, resource, &context),
        |decision, p| {
            decision
                .with_resource_policy(p.policy.evaluate_for(principal, action, resource, &context))
        },
    )
}

/// Each table and queue of `template` encrypted with a customer-managed KMS key (the
/// template's own or one its parameters name), as (resource ARN, key ARN, the service
/// that uses the key on a caller's behalf).
fn encrypted(template: &StackTemplate) -> Vec<(String, String, &'static str)> {
    let mut out = Vec::new();
    for (kind, path, service) in [
        (
            "AWS::DynamoDB::Table",
            &["SSESpecification", "KMSMasterKeyId"][..],
            "dynamodb",
        ),
        ("AWS::SQS::Queue", &["KmsMasterKeyId"][..], "sqs"),
    ] {
        for (id, resource) in template.resources_of_type(kind) {
            if !template.is_deployed(&id).unwrap() {
                continue;
            }
            let mut value = resource.get("Properties");
            for key in path {
                value = value.and_then(|v| v.get(*key));
            }
            let key = value
                .and_then(|k| template.resolve(k).unwrap())
                .and_then(|k| k.as_str().map(str::to_string))
                .filter(|k| k.starts_with("arn:"));
            if let Some(key) = key {
                out.push((template.attribute(&id, "Arn").unwrap(), key, service));
            }
        }
    }
    out
}

/// What using a resource encrypted with a KMS key asks of the caller: DynamoDB
/// decrypts the table key as the caller; SQS decrypts a message's data key for a
/// receiver and makes one for a sender (as the caller, through the service).
fn key_needs(
    request: &Authorization,
    keys: &[(String, String, &'static str)],
) -> Vec<Authorization> {
    let Some((_, key, service)) = keys.iter().find(|(arn, _, _)| {
        request.resource == *arn || request.resource.starts_with(&format!("{arn}/"))
    }) else {
        return Vec::new();
    };
    let actions: &[&str] = match (request.action.as_str(), *service) {
        (action, "dynamodb") if action.starts_with("dynamodb:") => &["kms:Decrypt"],
        ("sqs:ReceiveMessage", "sqs") => &["kms:Decrypt"],
        ("sqs:SendMessage", "sqs") => &["kms:GenerateDataKey", "kms:Decrypt"],
        _ => &[],
    };
    actions
        .iter()
        .map(|action| Authorization::via(action, key, service))
        .collect()
}

#[tokio::test]
async fn every_recorded_call_is_allowed_by_the_functions_role_and_every_grant_is_used() {
    let stack = drive_every_function().await;
    let main = StackTemplate::load(
        &workspace_root().join("template-main.yaml"),
        &[
            ("ProductCode", PRODUCT),
            ("StageName", STAGE),
            ("AWS::Region", MAIN_REGION),
            ("OutcomeEvents", "enabled"),
            ("ProfileRetentionDays", "30"),
            ("SubscribersKmsKeyArn", EVENTS_KEY),
        ],
    )
    .unwrap();
    let events = StackTemplate::load(
        &workspace_root().join("template-events.yaml"),
        &[
            ("StageName", STAGE),
            ("AWS::Region", SUBSCRIBERS_REGION),
            ("DataKmsKeyArn", EVENTS_KEY),
            ("ReconcileProducts", awsmp_e2e::RECONCILE_PRODUCTS),
            ("BuyerEvents", "enabled"),
        ],
    )
    .unwrap();

    let mut policies = resource_policies(&main).unwrap();
    policies.extend(resource_policies(&events).unwrap());
    let mut keys = encrypted(&main);
    keys.extend(encrypted(&events));
    for (resource, key) in [
        (
            "table/awsmp-prod-e2e-customer-profile",
            "key/CustomerProfileKey",
        ),
        ("table/awsmp-subscribers-test", EVENTS_KEY),
        ("awsmp-subscription-events-test", EVENTS_KEY),
    ] {
        assert!(
            keys.iter()
                .any(|(arn, k, _)| arn.ends_with(resource) && k.ends_with(key)),
            "{resource} is encrypted with {key} under these parameters: {keys:?}"
        );
    }

    let mut denied = Vec::new();
    let mut unused = Vec::new();
    let mut kept_but_used = Vec::new();
    let mut summary = String::new();
    for (function, template_name) in FUNCTIONS {
        let template = if *template_name == "template-main.yaml" {
            &main
        } else {
            &events
        };
        let wiring = function_wiring(template, function).unwrap();
        let role = format!("{} ({})", wiring.role, wiring.template);

        // What the function needs: its recorded calls, its event sources, its logs.
        let calls = stack.calls.calls_of(function);
        assert!(
            !calls.is_empty(),
            "{function}: no AWS call was recorded; is its State built with Stack::connect (a recording SDK config)?"
        );
        let mut needs: BTreeSet<Need> = BTreeSet::new();
        for call in &calls {
            for request in call.authorizations(DEFAULT_ACCOUNT).unwrap() {
                needs.insert(Need {
                    request,
                    because: format!("recorded {}", call.target),
                });
            }
        }
        for queue in &wiring.sqs_sources {
            for action in [
                "sqs:ReceiveMessage",
                "sqs:DeleteMessage",
                "sqs:GetQueueAttributes",
            ] {
                needs.insert(Need {
                    request: Authorization::new(action.to_string(), queue.clone()),
                    because: "its SQS event source mapping".to_string(),
                });
            }
        }
        for stream in &wiring.stream_sources {
            for action in [
                "dynamodb:DescribeStream",
                "dynamodb:GetRecords",
                "dynamodb:GetShardIterator",
                "dynamodb:ListStreams",
            ] {
                needs.insert(Need {
                    request: Authorization::new(action.to_string(), stream.clone()),
                    because: "its DynamoDB stream event source mapping".to_string(),
                });
            }
        }
        for queue in &wiring.failure_destinations {
            needs.insert(Need {
                request: Authorization::new("sqs:SendMessage".to_string(), queue.clone()),
                because: "its mapping's on-failure destination".to_string(),
            });
        }
        if let Some(group) = &wiring.log_group_arn {
            for action in ["logs:CreateLogStream", "logs:PutLogEvents"] {
                needs.insert(Need {
                    request: Authorization::new(
                        action.to_string(),
                        format!("{group}:log-stream:2026/11/30/[$LATEST]0123abcd"),
                    ),
                    because: "Lambda writing its LoggingConfig.LogGroup".to_string(),
                });
            }
        }

        // Using a table or queue under a customer-managed key asks KMS too, as the
        // caller, through the service: the key policy (or, for the seller's key, the
        // role) must allow it.
        for need in needs.clone() {
            for request in key_needs(&need.request, &keys) {
                needs.insert(Need {
                    request,
                    because: format!(
                        "{} on {}, encrypted with it",
                        need.request.action, need.request.resource
                    ),
                });
            }
        }

        // Every need is allowed.
        let principal = template.attribute(&wiring.role, "Arn").unwrap();
        let mut requests: BTreeMap<&Authorization, Vec<&str>> = BTreeMap::new();
        for need in &needs {
            requests
                .entry(&need.request)
                .or_default()
                .push(&need.because);
        }
        for (request, because) in &requests {
            let decision = decide(&wiring.policy, &policies, &principal, request);
            summary.push_str(&format!(
                "  {function:<20} {:<34} {:<100} {}\n",
                request.action,
                request.resource,
                match &decision {
                    Decision::Allowed { by } => format!("allowed by {}", by.join(", ")),
                    Decision::ImplicitDeny { .. } => "DENIED".to_string(),
                    Decision::ExplicitDeny { by } => format!("DENIED by {by}"),
                }
            ));
            let resource = template
                .arn_expression(&request.resource)
                .unwrap_or_else(|| format!("\"{}\"", request.resource));
            let fix = match &decision {
                Decision::ExplicitDeny { by } => format!(
                    "Let statement {by} spare {} (a table's ResourcePolicy or a key's KeyPolicy \
                     names the roles it spares)",
                    wiring.role
                ),
                Decision::ImplicitDeny { .. } if request.action.starts_with("kms:") => format!(
                    "Name {} in the key policy's statement for its users",
                    wiring.role
                ),
                _ => format!(
                    "Add to {}: Action {}, Resource {resource}",
                    wiring.role, request.action
                ),
            };
            let why = match decision {
                Decision::Allowed { .. } => continue,
                Decision::ExplicitDeny { by } => {
                    format!("statement {by} (of the role or the resource's policy) denies it")
                }
                Decision::ImplicitDeny { conditional } if !conditional.is_empty() => format!(
                    "only conditional statements ({}) cover it",
                    conditional.join(", ")
                ),
                Decision::ImplicitDeny { .. } => "no statement allows it".to_string(),
            };
            denied.push(format!(
                "{function}: {} on {} ({}) is not allowed by {role}: {why}. {fix}",
                request.action,
                request.resource,
                because.join("; "),
            ));
        }

        // Every grant is used by some need (or kept on purpose).
        for grant in wiring.policy.grants() {
            let used = needs.iter().any(|n| {
                wiring
                    .policy
                    .grant_covers(&grant, &n.request.action, &n.request.resource)
            });
            let kept = KEPT_WITHOUT_A_RECORDED_CALL.iter().find(|(r, sid, a, _)| {
                *r == wiring.role && *sid == grant.sid && *a == grant.action
            });
            match (used, kept) {
                (true, Some(_)) => kept_but_used.push(format!(
                    "{role} {} {} on {} is used now: drop it from KEPT_WITHOUT_A_RECORDED_CALL",
                    grant.sid, grant.action, grant.resource
                )),
                (false, None) => unused.push(format!(
                    "{function}: {role} statement {} grants {} on {} but no recorded call, \
                     event source mapping or log write of {function} uses it: remove it (or, \
                     if a path these runs cannot reach needs it, add it to \
                     KEPT_WITHOUT_A_RECORDED_CALL with the reason and say why in the template)",
                    grant.sid, grant.action, grant.resource
                )),
                _ => {}
            }
        }
    }
    eprintln!("IAM requests per function:\n{summary}");
    for note in &kept_but_used {
        eprintln!("note: {note}");
    }
    assert!(
        denied.is_empty() && unused.is_empty(),
        "IAM contract broken:\n\nDENIED ({}):\n{}\n\nUNUSED GRANTS ({}):\n{}\n",
        denied.len(),
        denied.join("\n"),
        unused.len(),
        unused.join("\n")
    );
}

//! The usage API's function as the seller's service in another language calls it:
//! each event posted in the native format or (one time in three) as a CloudEvent, a
//! batch holding it twice now and then (the second occurrence is judged against the
//! first), retried whole after a 5xx (the table's error), as the API's clients do. Its
//! real handler runs on the stack's usage table. The edge seller
//! ([`crate::actors::edge_seller`]) posts to it across the edges of time.

use std::sync::Arc;

use aws_lambda_events::apigw::ApiGatewayProxyRequest;

use crate::scenario::ACCOUNT;
use crate::stack::Stack;
use crate::world::{Event, Ingested};

/// The CloudEvents `source` of the seller's service posting to the usage API.
const SELLER_SOURCE: &str = "/seller/usage";

impl Stack {
    /// The usage API's function over this stack's tables.
    pub(crate) fn usage_api(&self) -> awsmp_usage_api::State {
        awsmp_usage_api::State {
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
        }
    }

    /// One event posted to the usage API, each copy's verdict noted.
    pub(crate) async fn ingest_through_api(&self, event: Event) {
        let state = self.usage_api();
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
            let (status, answer) = post_events(&state, content_type, body.clone()).await;
            let verdict = |i: usize| match (status, answer["results"][i]["status"].as_str()) {
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
}

/// `GET /usage/events/{id}?licenseArn=[&source=]` on the handler: its status and body.
pub(crate) async fn get_event(
    state: &awsmp_usage_api::State,
    id: &str,
    license_arn: &str,
    source: Option<&str>,
) -> (i64, serde_json::Value) {
    let mut query = vec![("licenseArn", license_arn)];
    query.extend(source.map(|source| ("source", source)));
    get(state, format!("/usage/events/{id}"), &query).await
}

/// `GET path?query` on the handler: its status and body.
pub(crate) async fn get(
    state: &awsmp_usage_api::State,
    path: String,
    query: &[(&str, &str)],
) -> (i64, serde_json::Value) {
    let mut request = ApiGatewayProxyRequest::default();
    request.http_method = aws_lambda_events::http::Method::GET;
    request.path = Some(path);
    request.query_string_parameters = query
        .iter()
        .map(|(name, value)| (name.to_string(), vec![value.to_string()]))
        .collect::<std::collections::HashMap<_, _>>()
        .into();
    answered(awsmp_usage_api::handle(state, request).await)
}

fn answered(
    response: aws_lambda_events::apigw::ApiGatewayProxyResponse,
) -> (i64, serde_json::Value) {
    let answer = match &response.body {
        Some(aws_lambda_events::encodings::Body::Text(text)) => {
            serde_json::from_str(text).unwrap_or_default()
        }
        _ => serde_json::Value::Null,
    };
    (response.status_code, answer)
}

/// `POST /usage/events` with `body` of `content_type` through the function's real
/// handler: the status and the JSON answer (`null` when it is not JSON).
pub(crate) async fn post_events(
    state: &awsmp_usage_api::State,
    content_type: &'static str,
    body: String,
) -> (i64, serde_json::Value) {
    let mut request = ApiGatewayProxyRequest::default();
    request.http_method = aws_lambda_events::http::Method::POST;
    request.path = Some("/usage/events".into());
    request.headers.insert(
        "content-type",
        aws_lambda_events::http::HeaderValue::from_static(content_type),
    );
    request.body = Some(body);
    answered(awsmp_usage_api::handle(state, request).await)
}

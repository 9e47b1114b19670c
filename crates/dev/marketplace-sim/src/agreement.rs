//! The AWS Marketplace Agreement API (`AWSMPCommerceService_v20200301`, us-east-1)
//! on both protocols its clients speak: Smithy RPC v2 CBOR (`POST
//! /service/AWSMPCommerceService_v20200301/operation/<Op>`, the Rust SDK) and awsJson
//! 1.0 (`POST /` with `X-Amz-Target: AWSMPCommerceService_v20200301.<Op>`, boto3 and
//! the CLI). The operations read agreements seeded through the admin API and the
//! billed ledger; the per-operation rate quotas apply while the simulator's quota
//! is on.

pub mod adjustments;
pub mod doc;
pub mod error;
pub mod events;
pub mod invoices;
pub mod model;
pub mod ops;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, Instant};

use axum::http::StatusCode;

use crate::ids::RecordIdGenerator;
use crate::throttle::{ThrottleConfig, TokenBucket};
use doc::{Obj, Value};
use error::AgreementError;
use model::{Agreement, BillingAdjustment};

/// The service's Smithy shape name, in both protocols' routing.
pub const SERVICE: &str = "AWSMPCommerceService_v20200301";
/// The awsJson 1.0 `X-Amz-Target` prefix.
pub const TARGET_PREFIX: &str = "AWSMPCommerceService_v20200301.";
/// The RPC v2 CBOR path prefix (the operation name follows).
pub const CBOR_PATH_PREFIX: &str = "/service/AWSMPCommerceService_v20200301/operation/";
/// awsJson 1.0's content type.
pub const JSON_CONTENT_TYPE: &str = "application/x-amz-json-1.0";
/// RPC v2 CBOR's content type.
pub const CBOR_CONTENT_TYPE: &str = "application/cbor";
/// The emitted-events outbox keeps this many (oldest dropped first).
pub const EVENT_OUTBOX_CAPACITY: usize = 10_000;

/// The wire protocol of one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// Smithy RPC v2 CBOR (the Rust SDK).
    RpcV2Cbor,
    /// awsJson 1.0 (boto3, the AWS CLI).
    AwsJson10,
}

/// The Agreement operations the simulator serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AgreementOp {
    /// `DescribeAgreement`.
    DescribeAgreement,
    /// `GetAgreementTerms`.
    GetAgreementTerms,
    /// `SearchAgreements`.
    SearchAgreements,
    /// `GetAgreementEntitlements`.
    GetAgreementEntitlements,
    /// `ListAgreementInvoiceLineItems`.
    ListAgreementInvoiceLineItems,
    /// `BatchCreateBillingAdjustmentRequest`.
    BatchCreateBillingAdjustmentRequest,
    /// `GetBillingAdjustmentRequest`.
    GetBillingAdjustmentRequest,
    /// `ListBillingAdjustmentRequests`.
    ListBillingAdjustmentRequests,
}

impl AgreementOp {
    /// Every served operation.
    pub const ALL: [Self; 8] = [
        Self::DescribeAgreement,
        Self::GetAgreementTerms,
        Self::SearchAgreements,
        Self::GetAgreementEntitlements,
        Self::ListAgreementInvoiceLineItems,
        Self::BatchCreateBillingAdjustmentRequest,
        Self::GetBillingAdjustmentRequest,
        Self::ListBillingAdjustmentRequests,
    ];

    /// The operation's name.
    pub fn name(self) -> &'static str {
        match self {
            Self::DescribeAgreement => "DescribeAgreement",
            Self::GetAgreementTerms => "GetAgreementTerms",
            Self::SearchAgreements => "SearchAgreements",
            Self::GetAgreementEntitlements => "GetAgreementEntitlements",
            Self::ListAgreementInvoiceLineItems => "ListAgreementInvoiceLineItems",
            Self::BatchCreateBillingAdjustmentRequest => "BatchCreateBillingAdjustmentRequest",
            Self::GetBillingAdjustmentRequest => "GetBillingAdjustmentRequest",
            Self::ListBillingAdjustmentRequests => "ListBillingAdjustmentRequests",
        }
    }

    /// The operation `name` names.
    pub fn parse(name: &str) -> Result<Self, AgreementError> {
        Self::ALL
            .into_iter()
            .find(|op| op.name() == name)
            .ok_or_else(|| {
                AgreementError::unknown_operation(format!(
                    "{SERVICE}.{name} is not served by the simulator"
                ))
            })
    }

    /// Calls per second per account (the service quotas; burst the same).
    pub fn rate_per_second(self) -> u32 {
        match self {
            Self::DescribeAgreement
            | Self::SearchAgreements
            | Self::GetBillingAdjustmentRequest
            | Self::ListBillingAdjustmentRequests => 5,
            Self::GetAgreementTerms
            | Self::GetAgreementEntitlements
            | Self::ListAgreementInvoiceLineItems => 10,
            Self::BatchCreateBillingAdjustmentRequest => 2,
        }
    }
}

/// The Agreement side's state: agreements, billing adjustments, the quotas'
/// buckets and the emitted events.
#[derive(Debug)]
pub struct AgreementBook {
    pub(crate) agreements: BTreeMap<String, Agreement>,
    pub(crate) adjustments: Vec<BillingAdjustment>,
    pub(crate) events: VecDeque<serde_json::Value>,
    pub(crate) ids: RecordIdGenerator,
    buckets: HashMap<AgreementOp, TokenBucket>,
}

impl Default for AgreementBook {
    fn default() -> Self {
        Self {
            agreements: BTreeMap::new(),
            adjustments: Vec::new(),
            events: VecDeque::new(),
            ids: RecordIdGenerator::new(),
            buckets: HashMap::new(),
        }
    }
}

impl AgreementBook {
    /// Takes one call of `op` from its quota at real time `now`.
    pub fn try_take(&mut self, op: AgreementOp, now: Instant) -> bool {
        let rate = op.rate_per_second();
        self.buckets
            .entry(op)
            .or_insert_with(|| {
                TokenBucket::new(
                    ThrottleConfig {
                        enabled: true,
                        rate_per_second: f64::from(rate),
                        burst: rate,
                    },
                    now,
                )
            })
            .try_take(now)
    }

    /// Keeps an emitted event.
    pub fn emit(&mut self, event: serde_json::Value) {
        if self.events.len() == EVENT_OUTBOX_CAPACITY {
            self.events.pop_front();
        }
        self.events.push_back(event);
    }
}

/// One call's answer, encoded for its protocol.
#[derive(Debug, Clone)]
pub struct AgreementReply {
    /// HTTP status.
    pub status: StatusCode,
    /// `Content-Type`.
    pub content_type: &'static str,
    /// The exception's name, for `x-amzn-errortype` (awsJson).
    pub error_type: Option<&'static str>,
    /// The body.
    pub body: Vec<u8>,
    /// Real-time delay to add before answering.
    pub latency: Duration,
}

/// Reads a request body of `protocol`.
pub fn decode(protocol: Protocol, bytes: &[u8]) -> Result<Value, AgreementError> {
    match protocol {
        Protocol::RpcV2Cbor => doc::decode_cbor(bytes),
        Protocol::AwsJson10 => doc::decode_json(bytes),
    }
}

fn encode(protocol: Protocol, value: &Value) -> Result<(&'static str, Vec<u8>), AgreementError> {
    match protocol {
        Protocol::RpcV2Cbor => Ok((CBOR_CONTENT_TYPE, doc::encode_cbor(value)?)),
        Protocol::AwsJson10 => Ok((
            JSON_CONTENT_TYPE,
            serde_json::to_vec(&doc::to_json(value))
                .map_err(|e| AgreementError::internal(format!("response not encodable: {e}")))?,
        )),
    }
}

/// The exception as its protocol sends it: `{"__type", "message", ...shape members}`.
pub fn error_body(err: &AgreementError) -> Value {
    let mut body = Obj::new()
        .s("__type", err.kind.wire_name())
        .s("message", &err.message)
        .opt("reason", err.reason.map(doc::text));
    if !err.fields.is_empty() {
        body = body.v(
            "fields",
            Value::Array(
                err.fields
                    .iter()
                    .map(|f| {
                        Obj::new()
                            .s("name", &f.name)
                            .s("message", &f.message)
                            .done()
                    })
                    .collect(),
            ),
        );
    }
    if let Some((id, kind)) = &err.resource {
        body = body.s("resourceId", id).s("resourceType", *kind);
    }
    body.done()
}

/// Encodes a call's result for `protocol`.
pub fn reply(
    protocol: Protocol,
    result: Result<Value, AgreementError>,
    latency: Duration,
) -> AgreementReply {
    let (status, error_type, value) = match result {
        Ok(value) => (StatusCode::OK, None, value),
        Err(err) => (
            err.kind.http_status(),
            Some(err.kind.wire_name()),
            error_body(&err),
        ),
    };
    let (content_type, body) = encode(protocol, &value).unwrap_or_else(|err| {
        let fallback = error_body(&err);
        encode(Protocol::AwsJson10, &fallback).unwrap_or((JSON_CONTENT_TYPE, Vec::new()))
    });
    AgreementReply {
        status,
        content_type,
        error_type,
        body,
        latency,
    }
}

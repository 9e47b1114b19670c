//! The Agreement API corrections meet: the agreements' facts and terms from the
//! in-memory API, the money (invoices built from the simulation's Marketplace ledger,
//! billing adjustments with their client-token idempotency and refusals) from the
//! Marketplace simulator's engine, called on the awsJson 1.0 wire. Each call yields to
//! the scheduler before and after, may fail before it takes effect
//! ([`FaultKind::AgreementTransient`]) and, for an adjustment request, may take effect
//! and lose its answer ([`FaultKind::AgreementLostResponse`]).

use async_trait::async_trait;
use awsmp_core::memory::MemoryAgreementApi;
use awsmp_core::ports::{
    AdjustmentBatch, AdjustmentFiled, AdjustmentRefused, AdjustmentRequest, AdjustmentState,
    AdjustmentStatus, AgreementApi, AgreementEntitlement, AgreementError, AgreementFacts,
    AgreementSearch, AgreementSummary, AgreementTerms, BATCH_CREATE_BILLING_ADJUSTMENT_REQUEST,
    BillingPeriod, GET_BILLING_ADJUSTMENT_REQUEST, InvoiceSummary,
    LIST_AGREEMENT_INVOICE_LINE_ITEMS, PortError,
};
use rust_decimal::Decimal;
use serde_json::{Value, json};

use crate::marketplace::SimMarketplace;
use crate::sim::{FaultKind, Sim, yield_now};

/// The corrections' Agreement API (see the module docs).
pub struct EngineAgreements {
    /// Facts and terms.
    pub facts: MemoryAgreementApi,
    /// Invoices and adjustments.
    pub market: SimMarketplace,
    sim: Sim,
}

fn transient(operation: &'static str, message: &str) -> AgreementError {
    AgreementError::Port(PortError::Transient {
        operation,
        message: message.to_string(),
    })
}

fn text<'a>(value: &'a Value, key: &str) -> &'a str {
    value.get(key).and_then(Value::as_str).unwrap_or_default()
}

fn decimal(operation: &'static str, value: &Value, key: &str) -> Result<Decimal, AgreementError> {
    let raw = text(value, key);
    raw.parse().map_err(|e| AgreementError::Malformed {
        operation,
        message: format!("{key} {raw:?}: {e}"),
    })
}

impl EngineAgreements {
    /// Over `facts` and `market`, faulting as `sim` draws.
    pub fn new(facts: MemoryAgreementApi, market: SimMarketplace, sim: Sim) -> Self {
        EngineAgreements { facts, market, sim }
    }

    /// One call: a yield, maybe a failure before it, the call, maybe a lost answer
    /// (`lossy` calls only), a yield. A non-200 answer is the port's error.
    async fn call(
        &self,
        operation: &'static str,
        request: Value,
        lossy: bool,
    ) -> Result<Value, AgreementError> {
        yield_now().await;
        if self.sim.fault(FaultKind::AgreementTransient, operation) {
            return Err(transient(operation, "ThrottlingException: Rate exceeded"));
        }
        let (status, answer) = self.market.agreement_call(operation, &request);
        let lost = lossy && self.sim.fault(FaultKind::AgreementLostResponse, operation);
        yield_now().await;
        if lost {
            return Err(transient(
                operation,
                "connection reset after the request was sent",
            ));
        }
        if status == 200 {
            return Ok(answer);
        }
        let code = text(&answer, "__type").to_string();
        let message = text(&answer, "message").to_string();
        Err(match code.as_str() {
            "ResourceNotFoundException" => AgreementError::NotFound {
                operation,
                agreement_id: text(&request, "agreementId").to_string(),
            },
            "ValidationException" | "ConflictException" => AgreementError::Refused {
                operation,
                code,
                reason: answer
                    .get("reason")
                    .and_then(Value::as_str)
                    .map(str::to_string),
                message,
            },
            "ThrottlingException" | "InternalServerException" => {
                transient(operation, &format!("{code}: {message}"))
            }
            _ => AgreementError::Port(PortError::Failed {
                operation,
                message: format!("{code}: {message}"),
            }),
        })
    }
}

#[async_trait]
impl AgreementApi for EngineAgreements {
    async fn describe(&self, agreement_id: &str) -> Result<Option<AgreementFacts>, AgreementError> {
        self.facts.describe(agreement_id).await
    }

    async fn terms(&self, agreement_id: &str) -> Result<AgreementTerms, AgreementError> {
        self.facts.terms(agreement_id).await
    }

    async fn entitlements(
        &self,
        agreement_id: &str,
    ) -> Result<Vec<AgreementEntitlement>, AgreementError> {
        self.facts.entitlements(agreement_id).await
    }

    async fn search(
        &self,
        filter: &AgreementSearch,
    ) -> Result<Vec<AgreementSummary>, AgreementError> {
        self.facts.search(filter).await
    }

    async fn invoices(
        &self,
        agreement_id: &str,
        period: Option<BillingPeriod>,
    ) -> Result<Vec<InvoiceSummary>, AgreementError> {
        let op = LIST_AGREEMENT_INVOICE_LINE_ITEMS;
        let mut found = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut request = json!({"agreementId": agreement_id, "groupBy": "INVOICE_ID"});
            if let Some(p) = period {
                request["invoiceBillingPeriod"] = json!({"year": p.year, "month": p.month});
            }
            if let Some(t) = &token {
                request["nextToken"] = json!(t);
            }
            let answer = self.call(op, request, false).await?;
            let items = answer
                .get("agreementInvoiceLineItemGroupSummaries")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            for item in items {
                let money = item
                    .get("pricingCurrencyAmount")
                    .cloned()
                    .unwrap_or_default();
                let period = item.get("invoiceBillingPeriod").and_then(|p| {
                    Some(BillingPeriod {
                        year: i32::try_from(p.get("year")?.as_i64()?).ok()?,
                        month: u32::try_from(p.get("month")?.as_i64()?).ok()?,
                    })
                });
                found.push(InvoiceSummary {
                    agreement_id: text(&item, "agreementId").to_string(),
                    invoice_id: text(&item, "invoiceId").to_string(),
                    invoice_type: text(&item, "invoiceType").to_string(),
                    amount: decimal(op, &money, "amount")?,
                    max_adjustment: decimal(op, &money, "maxAdjustmentAmount")?,
                    currency: text(&money, "currencyCode").to_string(),
                    period,
                    issued: None,
                });
            }
            token = answer
                .get("nextToken")
                .and_then(Value::as_str)
                .map(str::to_string);
            if token.is_none() {
                return Ok(found);
            }
        }
    }

    async fn request_adjustments(
        &self,
        entries: &[AdjustmentRequest],
    ) -> Result<AdjustmentBatch, AgreementError> {
        let op = BATCH_CREATE_BILLING_ADJUSTMENT_REQUEST;
        let wire: Vec<Value> = entries
            .iter()
            .map(|e| {
                json!({
                    "agreementId": e.agreement_id,
                    "originalInvoiceId": e.original_invoice_id,
                    "adjustmentAmount": e.amount.normalize().to_string(),
                    "currencyCode": e.currency,
                    "adjustmentReasonCode": e.reason_code,
                    "description": e.description,
                    "clientToken": e.client_token,
                })
            })
            .collect();
        let answer = self
            .call(op, json!({"billingAdjustmentRequestEntries": wire}), true)
            .await?;
        let list = |key: &str| {
            answer
                .get(key)
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        };
        Ok(AdjustmentBatch {
            filed: list("items")
                .iter()
                .map(|i| AdjustmentFiled {
                    client_token: text(i, "clientToken").to_string(),
                    adjustment_id: text(i, "billingAdjustmentRequestId").to_string(),
                })
                .collect(),
            refused: list("errors")
                .iter()
                .map(|e| AdjustmentRefused {
                    client_token: text(e, "clientToken").to_string(),
                    code: text(e, "code").to_string(),
                    message: text(e, "message").to_string(),
                })
                .collect(),
        })
    }

    async fn adjustment(
        &self,
        agreement_id: &str,
        adjustment_id: &str,
    ) -> Result<Option<AdjustmentState>, AgreementError> {
        let op = GET_BILLING_ADJUSTMENT_REQUEST;
        let request =
            json!({"agreementId": agreement_id, "billingAdjustmentRequestId": adjustment_id});
        let answer = match self.call(op, request, false).await {
            Ok(answer) => answer,
            Err(AgreementError::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        Ok(Some(AdjustmentState {
            adjustment_id: text(&answer, "billingAdjustmentRequestId").to_string(),
            agreement_id: text(&answer, "agreementId").to_string(),
            original_invoice_id: text(&answer, "originalInvoiceId").to_string(),
            amount: decimal(op, &answer, "adjustmentAmount")?,
            currency: text(&answer, "currencyCode").to_string(),
            client_token: None,
            status: AdjustmentStatus::parse(text(&answer, "status")),
            status_message: answer
                .get("statusMessage")
                .and_then(Value::as_str)
                .map(str::to_string),
        }))
    }
}

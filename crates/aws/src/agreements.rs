//! [`AgreementApi`] on the Marketplace Agreement SDK (`aws-sdk-marketplaceagreement`,
//! Smithy RPC v2 CBOR), as the seller: `DescribeAgreement`, `GetAgreementTerms`,
//! `GetAgreementEntitlements` and `SearchAgreements` (always `AgreementType =
//! PurchaseAgreement`, `PartyType = Proposer`, catalog `AWSMarketplace`),
//! `ListAgreementInvoiceLineItems` (grouped by invoice), and the billing adjustments
//! (`BatchCreateBillingAdjustmentRequest`, `GetBillingAdjustmentRequest`), each list
//! paged to its end.
//!
//! A write refused as a whole (`ValidationException` with its reason,
//! `ConflictException`) is [`AgreementError::Refused`]: nothing was created.
//! Errors: `ResourceNotFoundException` is the port's "not found"
//! (`describe` answers `Ok(None)`); `AccessDeniedException` names the IAM action the
//! role lacks (`aws-marketplace:<Operation>`); throttling, service faults and lost
//! connections are [`PortError::Transient`], after the SDK's standard retries (three
//! attempts with backoff) have failed; anything else is [`PortError::Failed`]. The
//! API is in us-east-1 only: build the client from a us-east-1 config
//! ([`crate::in_region`]).

use async_trait::async_trait;
use aws_config::SdkConfig;
use aws_sdk_marketplaceagreement::Client;
use aws_sdk_marketplaceagreement::config::http::HttpResponse;
use aws_sdk_marketplaceagreement::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_marketplaceagreement::operation::batch_create_billing_adjustment_request::BatchCreateBillingAdjustmentRequestError;
use aws_sdk_marketplaceagreement::primitives::DateTime;
use aws_sdk_marketplaceagreement::types::{
    AcceptedTerm, AgreementInvoiceLineItemGroupSummary, AgreementViewSummary,
    BatchCreateBillingAdjustmentRequestEntry, BillingAdjustmentReasonCode, Filter,
    FreeTrialPricingTerm, InvoiceBillingPeriod, LineItemGroupBy, UsageBasedPricingTerm,
};
use aws_smithy_types::retry::ProvideErrorKind;
use awsmp_core::ports::{
    AdjustmentBatch, AdjustmentFiled, AdjustmentRefused, AdjustmentRequest, AdjustmentState,
    AdjustmentStatus, AgreementApi, AgreementEntitlement, AgreementError, AgreementFacts,
    AgreementSearch, AgreementStatus, AgreementSummary, AgreementTerms,
    BATCH_CREATE_BILLING_ADJUSTMENT_REQUEST, BillingPeriod, DESCRIBE_AGREEMENT, EndTimeBehavior,
    EntitlementStatus, FreeTrial, GET_AGREEMENT_ENTITLEMENTS, GET_AGREEMENT_TERMS,
    GET_BILLING_ADJUSTMENT_REQUEST, InvoiceSummary, LIST_AGREEMENT_INVOICE_LINE_ITEMS,
    SEARCH_AGREEMENTS, TrialGrant, add_rate, parse_price, trial_days,
};
use awsmp_core::time::Instant;
use rust_decimal::Decimal;
use tracing::instrument;

use crate::error::{describe, error_code, port_error};

/// The Agreement API's only Region.
pub const AGREEMENT_REGION: &str = "us-east-1";
/// The catalog every search names.
pub const CATALOG: &str = "AWSMarketplace";
/// The largest `maxResults` the API takes.
pub const MAX_PAGE_SIZE: i32 = 50;

/// An Agreement API client on `config` moved to us-east-1, with the SDK's standard
/// retries (see the module docs).
pub fn agreement_client(config: &SdkConfig) -> Client {
    Client::new(&crate::in_region(config, AGREEMENT_REGION))
}

/// [`AgreementApi`] through the SDK.
#[derive(Debug, Clone)]
pub struct SdkAgreementApi {
    client: Client,
    page_size: i32,
}

impl SdkAgreementApi {
    /// Wraps `client` (its retry configuration is kept), asking for pages of
    /// [`MAX_PAGE_SIZE`].
    pub fn new(client: Client) -> Self {
        SdkAgreementApi {
            client,
            page_size: MAX_PAGE_SIZE,
        }
    }

    /// Asks for pages of `size` (clamped to 1..=50): for tests that page over a few
    /// items.
    pub fn with_page_size(mut self, size: i32) -> Self {
        self.page_size = size.clamp(1, MAX_PAGE_SIZE);
        self
    }
}

/// Maps a failed call: not found (of a call naming `agreement_id`), access denied,
/// else a transient or failed [`PortError`] as every adapter classifies them.
fn agreement_error<E>(
    operation: &'static str,
    agreement_id: Option<&str>,
    err: SdkError<E, HttpResponse>,
) -> AgreementError
where
    E: ProvideErrorMetadata + ProvideErrorKind + std::error::Error + 'static,
{
    match (error_code(&err), agreement_id) {
        (Some("ResourceNotFoundException"), Some(agreement_id)) => AgreementError::NotFound {
            operation,
            agreement_id: agreement_id.to_string(),
        },
        (Some("AccessDeniedException"), _) => AgreementError::AccessDenied {
            operation,
            message: describe(&err),
        },
        // An answer that is no Agreement API answer at all (an HTML 404 from an
        // endpoint that is something else): said in one line, not as the decoder's dump.
        (None, _)
            if err.as_service_error().is_some()
                && err
                    .raw_response()
                    .is_some_and(|r| (400..500).contains(&r.status().as_u16())) =>
        {
            let status = err.raw_response().map_or(0, |r| r.status().as_u16());
            AgreementError::Port(awsmp_core::ports::PortError::Failed {
                operation,
                message: format!(
                    "HTTP {status} that is no Agreement API answer: is the endpoint the Agreement API's (AWS_ENDPOINT_URL_MARKETPLACE_AGREEMENT, or AWS_ENDPOINT_URL)?"
                ),
            })
        }
        _ => AgreementError::Port(port_error(operation, err)),
    }
}

/// The answer of a read naming `agreement_id`: `Ok(None)` when the API does not know
/// what it names (`ResourceNotFoundException`).
fn found<T, E>(
    operation: &'static str,
    agreement_id: &str,
    answer: Result<T, SdkError<E, HttpResponse>>,
) -> Result<Option<T>, AgreementError>
where
    E: ProvideErrorMetadata + ProvideErrorKind + std::error::Error + 'static,
{
    match answer {
        Ok(out) => Ok(Some(out)),
        Err(err) => match agreement_error(operation, Some(agreement_id), err) {
            AgreementError::NotFound { .. } => Ok(None),
            other => Err(other),
        },
    }
}

/// A write refused as a whole: its validation reason, else the plain mapping.
fn write_error<E>(
    operation: &'static str,
    reason: Option<&str>,
    err: SdkError<E, HttpResponse>,
) -> AgreementError
where
    E: ProvideErrorMetadata + ProvideErrorKind + std::error::Error + 'static,
{
    match error_code(&err) {
        Some(code @ ("ValidationException" | "ConflictException")) => AgreementError::Refused {
            operation,
            code: code.to_string(),
            reason: reason.map(str::to_string),
            message: err
                .as_service_error()
                .and_then(|e| e.message())
                .unwrap_or("no message")
                .to_string(),
        },
        _ => agreement_error(operation, None, err),
    }
}

/// A decimal amount of an answer, exactly.
fn amount(
    operation: &'static str,
    agreement_id: &str,
    what: &str,
    value: Option<&str>,
) -> Result<Decimal, AgreementError> {
    let text = required(operation, agreement_id, what, value)?;
    text.trim().parse::<Decimal>().map_err(|e| {
        malformed(
            operation,
            format!("agreement {agreement_id}: {what} {text:?} is not a decimal ({e})"),
        )
    })
}

fn invoice(
    agreement_id: &str,
    item: &AgreementInvoiceLineItemGroupSummary,
) -> Result<InvoiceSummary, AgreementError> {
    let op = LIST_AGREEMENT_INVOICE_LINE_ITEMS;
    let money = item.pricing_currency_amount();
    Ok(InvoiceSummary {
        agreement_id: item.agreement_id().unwrap_or(agreement_id).to_string(),
        invoice_id: required(op, agreement_id, "invoiceId", item.invoice_id())?.to_string(),
        invoice_type: required(
            op,
            agreement_id,
            "invoiceType",
            item.invoice_type().map(|t| t.as_str()),
        )?
        .to_string(),
        amount: amount(op, agreement_id, "amount", money.and_then(|m| m.amount()))?,
        max_adjustment: amount(
            op,
            agreement_id,
            "maxAdjustmentAmount",
            money.and_then(|m| m.max_adjustment_amount()),
        )?,
        currency: required(
            op,
            agreement_id,
            "currencyCode",
            money.and_then(|m| m.currency_code()),
        )?
        .to_string(),
        period: item.invoice_billing_period().and_then(|p| {
            Some(BillingPeriod {
                year: p.year(),
                month: u32::try_from(p.month())
                    .ok()
                    .filter(|m| (1..=12).contains(m))?,
            })
        }),
        issued: optional_time(op, agreement_id, "issuedTime", item.issued_time())?,
    })
}

fn malformed(operation: &'static str, message: impl Into<String>) -> AgreementError {
    AgreementError::Malformed {
        operation,
        message: message.into(),
    }
}

fn instant(t: &DateTime) -> Option<Instant> {
    Instant::from_timestamp(t.secs(), t.subsec_nanos())
}

/// A required timestamp: missing or out of range is malformed.
fn required_time(
    operation: &'static str,
    agreement_id: &str,
    what: &str,
    t: Option<&DateTime>,
) -> Result<Instant, AgreementError> {
    t.and_then(instant)
        .ok_or_else(|| malformed(operation, format!("agreement {agreement_id}: no {what}")))
}

fn optional_time(
    operation: &'static str,
    agreement_id: &str,
    what: &str,
    t: Option<&DateTime>,
) -> Result<Option<Instant>, AgreementError> {
    t.map(|t| required_time(operation, agreement_id, what, Some(t)))
        .transpose()
}

fn required<'a>(
    operation: &'static str,
    agreement_id: &str,
    what: &str,
    value: Option<&'a str>,
) -> Result<&'a str, AgreementError> {
    value
        .filter(|v| !v.is_empty())
        .ok_or_else(|| malformed(operation, format!("agreement {agreement_id}: no {what}")))
}

/// What the terms of one agreement add up to, term by term.
#[derive(Default)]
struct TermsReader {
    terms: AgreementTerms,
}

impl TermsReader {
    fn currency(&mut self, agreement_id: &str, currency: Option<&str>) -> Result<(), String> {
        let Some(currency) = currency.filter(|c| !c.is_empty()) else {
            return Ok(());
        };
        match &self.terms.currency {
            Some(known) if known != currency => Err(format!(
                "agreement {agreement_id}: priced in both {known} and {currency}"
            )),
            _ => {
                self.terms.currency = Some(currency.to_string());
                Ok(())
            }
        }
    }

    fn usage(&mut self, agreement_id: &str, term: &UsageBasedPricingTerm) -> Result<(), String> {
        self.currency(agreement_id, term.currency_code())?;
        for card in term.rate_cards() {
            for item in card.rate_card() {
                let dimension =
                    item.dimension_key()
                        .filter(|d| !d.is_empty())
                        .ok_or_else(|| {
                            format!("agreement {agreement_id}: a rate without a dimension")
                        })?;
                let price = item.price().ok_or_else(|| {
                    format!("agreement {agreement_id}: dimension {dimension} has no price")
                })?;
                let price = parse_price(agreement_id, dimension, price)?;
                add_rate(agreement_id, &mut self.terms.rate_card, dimension, price)?;
            }
        }
        Ok(())
    }

    fn free_trial(
        &mut self,
        agreement_id: &str,
        term: &FreeTrialPricingTerm,
    ) -> Result<(), String> {
        let duration = term.duration().unwrap_or_default();
        let duration_days = trial_days(duration).ok_or_else(|| {
            format!("agreement {agreement_id}: free trial duration {duration:?} is not P<n>D")
        })?;
        let grants = term
            .grants()
            .iter()
            .map(|grant| {
                let dimension = grant.dimension_key().unwrap_or_default().to_string();
                // The SDK reads an absent maxQuantity as 1: "unlimited" cannot be told
                // apart here.
                let max_quantity = u32::try_from(grant.max_quantity()).map_err(|_| {
                    format!(
                        "agreement {agreement_id}: free trial grant of {dimension} has max quantity {}",
                        grant.max_quantity()
                    )
                })?;
                Ok(TrialGrant {
                    dimension,
                    max_quantity: Some(max_quantity),
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        if self.terms.free_trial.is_some() {
            return Err(format!("agreement {agreement_id}: two free trial terms"));
        }
        self.terms.free_trial = Some(FreeTrial {
            duration_days,
            grants,
        });
        Ok(())
    }

    fn read(&mut self, agreement_id: &str, term: &AcceptedTerm) -> Result<(), String> {
        match term {
            AcceptedTerm::UsageBasedPricingTerm(usage) => self.usage(agreement_id, usage),
            AcceptedTerm::FreeTrialPricingTerm(trial) => self.free_trial(agreement_id, trial),
            AcceptedTerm::FixedUpfrontPricingTerm(upfront) => {
                self.terms.has_upfront = true;
                self.currency(agreement_id, upfront.currency_code())
            }
            AcceptedTerm::ConfigurableUpfrontPricingTerm(upfront) => {
                self.terms.has_upfront = true;
                self.currency(agreement_id, upfront.currency_code())
            }
            // Legal, support, renewal, validity, payment and unknown terms say nothing
            // about usage prices.
            _ => Ok(()),
        }
    }
}

fn summary(view: &AgreementViewSummary) -> Result<AgreementSummary, AgreementError> {
    let op = SEARCH_AGREEMENTS;
    let agreement_id = required(op, "?", "agreementId", view.agreement_id())?.to_string();
    let id = agreement_id.as_str();
    Ok(AgreementSummary {
        status: AgreementStatus::parse(required(
            op,
            id,
            "status",
            view.status().map(|s| s.as_str()),
        )?),
        acceptor_account_id: required(
            op,
            id,
            "acceptor",
            view.acceptor().and_then(|a| a.account_id()),
        )?
        .to_string(),
        start: required_time(op, id, "startTime", view.start_time())?,
        end: optional_time(op, id, "endTime", view.end_time())?,
        license_arns: view
            .entitlements()
            .iter()
            .filter_map(|e| e.license_arn().map(str::to_string))
            .collect(),
        last_update_time: optional_time(op, id, "lastUpdateTime", view.last_update_time())?,
        initial_agreement_id: view.initial_agreement_id().map(str::to_string),
        agreement_id,
    })
}

fn filter(name: &str, value: impl Into<String>) -> Filter {
    Filter::builder().name(name).values(value).build()
}

/// The filters of a seller's search: the three fixed ones, then one per field set.
pub fn search_filters(search: &AgreementSearch) -> Vec<Filter> {
    let mut filters = vec![
        filter("AgreementType", "PurchaseAgreement"),
        filter("PartyType", "Proposer"),
    ];
    if let Some(arn) = &search.license_arn {
        filters.push(filter("LicenseArn", arn));
    }
    if let Some(status) = &search.status {
        filters.push(filter("Status", status.as_str()));
    }
    if let Some(after) = &search.updated_after {
        filters.push(filter(
            "AfterLastUpdateTime",
            after.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        ));
    }
    if let Some(product) = &search.product_id {
        filters.push(filter("ResourceIdentifier", product));
    }
    filters
}

#[async_trait]
impl AgreementApi for SdkAgreementApi {
    #[instrument(skip(self), err(Debug))]
    async fn describe(&self, agreement_id: &str) -> Result<Option<AgreementFacts>, AgreementError> {
        let op = DESCRIBE_AGREEMENT;
        let answer = self
            .client
            .describe_agreement()
            .agreement_id(agreement_id)
            .send()
            .await;
        let Some(out) = found(op, agreement_id, answer)? else {
            return Ok(None);
        };
        let id = agreement_id;
        let proposal = out.proposal_summary();
        Ok(Some(AgreementFacts {
            agreement_id: out.agreement_id().unwrap_or(agreement_id).to_string(),
            status: AgreementStatus::parse(required(
                op,
                id,
                "status",
                out.status().map(|s| s.as_str()),
            )?),
            acceptor_account_id: required(
                op,
                id,
                "acceptor",
                out.acceptor().and_then(|a| a.account_id()),
            )?
            .to_string(),
            proposer_account_id: required(
                op,
                id,
                "proposer",
                out.proposer().and_then(|p| p.account_id()),
            )?
            .to_string(),
            offer_id: required(op, id, "offerId", proposal.and_then(|p| p.offer_id()))?.to_string(),
            offer_set_id: proposal.and_then(|p| p.offer_set_id()).map(str::to_string),
            product_id: proposal
                .and_then(|p| p.resources().first())
                .and_then(|r| r.id())
                .map(str::to_string),
            start: required_time(op, id, "startTime", out.start_time())?,
            end: optional_time(op, id, "endTime", out.end_time())?,
            acceptance_time: required_time(op, id, "acceptanceTime", out.acceptance_time())?,
            initial_agreement_id: out.initial_agreement_id().map(str::to_string),
            end_time_behavior: out.end_time_behavior().map(|b| EndTimeBehavior {
                kind: b.r#type().as_str().to_string(),
                reason_code: b.reason_code().map(|r| r.as_str().to_string()),
            }),
        }))
    }

    #[instrument(skip(self), err(Debug))]
    async fn terms(&self, agreement_id: &str) -> Result<AgreementTerms, AgreementError> {
        let op = GET_AGREEMENT_TERMS;
        let mut reader = TermsReader::default();
        let mut pages = self
            .client
            .get_agreement_terms()
            .agreement_id(agreement_id)
            .max_results(self.page_size)
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let out = page.map_err(|e| agreement_error(op, Some(agreement_id), e))?;
            for term in out.accepted_terms() {
                reader
                    .read(agreement_id, term)
                    .map_err(|message| malformed(op, message))?;
            }
        }
        Ok(reader.terms)
    }

    #[instrument(skip(self), err(Debug))]
    async fn entitlements(
        &self,
        agreement_id: &str,
    ) -> Result<Vec<AgreementEntitlement>, AgreementError> {
        let op = GET_AGREEMENT_ENTITLEMENTS;
        let mut entitlements = Vec::new();
        let mut pages = self
            .client
            .get_agreement_entitlements()
            .agreement_id(agreement_id)
            .max_results(self.page_size)
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let out = page.map_err(|e| agreement_error(op, Some(agreement_id), e))?;
            for e in out.agreement_entitlements() {
                entitlements.push(AgreementEntitlement {
                    license_arn: e.license_arn().map(str::to_string),
                    status: EntitlementStatus::parse(required(
                        op,
                        agreement_id,
                        "entitlement status",
                        e.status().map(|s| s.as_str()),
                    )?),
                    status_reason: e.status_reason_code().map(|r| r.as_str().to_string()),
                });
            }
        }
        Ok(entitlements)
    }

    #[instrument(skip(self), err(Debug))]
    async fn search(
        &self,
        search: &AgreementSearch,
    ) -> Result<Vec<AgreementSummary>, AgreementError> {
        let op = SEARCH_AGREEMENTS;
        let filters = search_filters(search);
        let mut found = Vec::new();
        let mut pages = self
            .client
            .search_agreements()
            .catalog(CATALOG)
            .set_filters(Some(filters))
            .max_results(self.page_size)
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let out = page.map_err(|e| agreement_error(op, None, e))?;
            for view in out.agreement_view_summaries() {
                found.push(summary(view)?);
            }
        }
        found.sort_by(|a, b| a.agreement_id.cmp(&b.agreement_id));
        Ok(found)
    }

    #[instrument(skip(self), err(Debug))]
    async fn invoices(
        &self,
        agreement_id: &str,
        period: Option<BillingPeriod>,
    ) -> Result<Vec<InvoiceSummary>, AgreementError> {
        let op = LIST_AGREEMENT_INVOICE_LINE_ITEMS;
        let period = period
            .map(|p| {
                InvoiceBillingPeriod::builder()
                    .year(p.year)
                    .month(i32::try_from(p.month).unwrap_or(1))
                    .build()
                    .map_err(|e| malformed(op, e.to_string()))
            })
            .transpose()?;
        let mut found = Vec::new();
        let mut pages = self
            .client
            .list_agreement_invoice_line_items()
            .agreement_id(agreement_id)
            .group_by(LineItemGroupBy::InvoiceId)
            .set_invoice_billing_period(period)
            .max_results(self.page_size)
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let out = page.map_err(|e| agreement_error(op, Some(agreement_id), e))?;
            for item in out.agreement_invoice_line_item_group_summaries() {
                found.push(invoice(agreement_id, item)?);
            }
        }
        Ok(found)
    }

    #[instrument(skip(self), err(Debug))]
    async fn request_adjustments(
        &self,
        entries: &[AdjustmentRequest],
    ) -> Result<AdjustmentBatch, AgreementError> {
        let op = BATCH_CREATE_BILLING_ADJUSTMENT_REQUEST;
        let built = entries
            .iter()
            .map(|e| {
                BatchCreateBillingAdjustmentRequestEntry::builder()
                    .agreement_id(&e.agreement_id)
                    .original_invoice_id(&e.original_invoice_id)
                    .adjustment_amount(e.amount.normalize().to_string())
                    .currency_code(&e.currency)
                    .adjustment_reason_code(BillingAdjustmentReasonCode::from(
                        e.reason_code.as_str(),
                    ))
                    .set_description(e.description.clone())
                    .client_token(&e.client_token)
                    .build()
                    .map_err(|err| malformed(op, err.to_string()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let out = match self
            .client
            .batch_create_billing_adjustment_request()
            .set_billing_adjustment_request_entries(Some(built))
            .send()
            .await
        {
            Ok(out) => out,
            Err(err) => {
                let reason = match err.as_service_error() {
                    Some(BatchCreateBillingAdjustmentRequestError::ValidationException(v)) => {
                        v.reason().map(|r| r.as_str().to_string())
                    }
                    _ => None,
                };
                return Err(write_error(op, reason.as_deref(), err));
            }
        };
        Ok(AdjustmentBatch {
            filed: out
                .items()
                .iter()
                .map(|i| AdjustmentFiled {
                    client_token: i.client_token().to_string(),
                    adjustment_id: i.billing_adjustment_request_id().to_string(),
                })
                .collect(),
            refused: out
                .errors()
                .iter()
                .map(|e| AdjustmentRefused {
                    client_token: e.client_token().to_string(),
                    code: e.code().as_str().to_string(),
                    message: e.message().to_string(),
                })
                .collect(),
        })
    }

    #[instrument(skip(self), err(Debug))]
    async fn adjustment(
        &self,
        agreement_id: &str,
        adjustment_id: &str,
    ) -> Result<Option<AdjustmentState>, AgreementError> {
        let op = GET_BILLING_ADJUSTMENT_REQUEST;
        let answer = self
            .client
            .get_billing_adjustment_request()
            .agreement_id(agreement_id)
            .billing_adjustment_request_id(adjustment_id)
            .send()
            .await;
        let Some(out) = found(op, agreement_id, answer)? else {
            return Ok(None);
        };
        Ok(Some(AdjustmentState {
            adjustment_id: out.billing_adjustment_request_id().to_string(),
            agreement_id: out.agreement_id().to_string(),
            original_invoice_id: out.original_invoice_id().to_string(),
            amount: amount(
                op,
                agreement_id,
                "adjustmentAmount",
                Some(out.adjustment_amount()),
            )?,
            currency: out.currency_code().to_string(),
            client_token: None,
            status: AdjustmentStatus::parse(out.status().as_str()),
            status_message: out.status_message().map(str::to_string),
        }))
    }
}

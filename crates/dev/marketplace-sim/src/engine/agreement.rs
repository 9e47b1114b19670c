//! The Agreement API on the [`Engine`]: serving a call (quota, decoding, the
//! operation, encoding) and the admin side (seeding and ending agreements, which
//! entitle and deprovision their licenses for metering and emit EventBridge events;
//! failing adjustments; the event outbox).

use std::time::Instant;

use chrono::{DateTime, Utc};
use tracing::info;

use super::{Engine, MAX_BODY_BYTES, RequestBody};
use crate::agreement::doc::{Value, valid_agreement_id};
use crate::agreement::error::AgreementError;
use crate::agreement::events::{Change, adjustment_event, agreement_events};
use crate::agreement::model::{
    AdjustmentFailure, AdjustmentStatus, Agreement, AgreementEnd, AgreementSeed, AgreementStatus,
    BillingAdjustment,
};
use crate::agreement::{
    AgreementOp, AgreementReply, Protocol, adjustments, decode, invoices, ops, reply,
};
use crate::error::AdminError;
use crate::model::{EntitlementSeed, FaultTarget, TokenSeed};

impl Engine {
    /// Serves one Agreement API call of `operation` (the path's or `X-Amz-Target`'s
    /// operation name) on `protocol`; `real_now` is for the quota.
    pub fn agreement_call(
        &mut self,
        protocol: Protocol,
        operation: &str,
        body: RequestBody<'_>,
        real_now: Instant,
    ) -> AgreementReply {
        let mut result = self.agreement_result(protocol, operation, body, real_now);
        if result.is_ok()
            && operation == AgreementOp::BatchCreateBillingAdjustmentRequest.name()
            && self.take_adjustment_loss()
        {
            result = Err(AgreementError::internal(
                "injected lose_response fault: the adjustments were made, their answer lost",
            ));
        }
        match &result {
            Ok(_) => info!(operation, "Agreement call served"),
            Err(err) => {
                info!(operation, error = err.kind.wire_name(), message = %err.message, "Agreement call refused")
            }
        }
        reply(protocol, result, self.latency)
    }

    fn agreement_result(
        &mut self,
        protocol: Protocol,
        operation: &str,
        body: RequestBody<'_>,
        real_now: Instant,
    ) -> Result<Value, AgreementError> {
        let op = AgreementOp::parse(operation)?;
        if self.bucket.config().enabled && !self.agreements.try_take(op, real_now) {
            return Err(AgreementError::throttling(format!(
                "Rate exceeded: {} allows {} requests/second",
                op.name(),
                op.rate_per_second()
            )));
        }
        let bytes = match body {
            RequestBody::Complete(bytes) if bytes.len() <= MAX_BODY_BYTES => bytes,
            _ => {
                return Err(AgreementError::validation(
                    "OTHER",
                    "body",
                    "The request must be less than 1 MB in size",
                ));
            }
        };
        let request = decode(protocol, bytes)?;
        let now = self.clock.now();
        self.settle_adjustments(now);
        let book = &mut self.agreements;
        match op {
            AgreementOp::DescribeAgreement => ops::describe(book, &request),
            AgreementOp::GetAgreementTerms => ops::terms(book, &request),
            AgreementOp::SearchAgreements => ops::search(book, &request),
            AgreementOp::GetAgreementEntitlements => {
                let mut issued = Vec::new();
                let mut ids = book.ids.clone();
                let result = ops::entitlements(book, &request, now, &mut |a: &Agreement| {
                    let token = format!("regtok-{}", ids.next_id());
                    issued.push(TokenSeed {
                        token: token.clone(),
                        license_arn: a.seed.license_arn.clone(),
                        customer_aws_account_id: a.seed.customer_aws_account_id.clone(),
                        product_code: a.seed.product_code.clone(),
                        issued_at: Some(now),
                    });
                    token
                });
                self.agreements.ids = ids;
                for token in issued {
                    self.seed_token(token)
                        .map_err(|e| AgreementError::internal(e.to_string()))?;
                }
                result
            }
            AgreementOp::ListAgreementInvoiceLineItems => {
                invoices::list_invoice_line_items(book, &request, &self.billed, now)
            }
            AgreementOp::BatchCreateBillingAdjustmentRequest => {
                adjustments::batch_create(book, &request, &self.billed, now)
            }
            AgreementOp::GetBillingAdjustmentRequest => adjustments::get_adjustment(book, &request),
            AgreementOp::ListBillingAdjustmentRequests => {
                adjustments::list_adjustments(book, &request)
            }
        }
    }

    /// Takes one use of a pending `lose_response` fault on billing adjustments.
    fn take_adjustment_loss(&mut self) -> bool {
        let Some(position) = self
            .faults
            .iter()
            .position(|f| f.operation == FaultTarget::BillingAdjustments)
        else {
            return false;
        };
        if let Some(fault) = self.faults.get_mut(position) {
            fault.remaining = fault.remaining.saturating_sub(1);
            if fault.remaining == 0 {
                self.faults.remove(position);
            }
        }
        true
    }

    /// Completes the adjustments whose processing time has passed, emitting their
    /// Completed events.
    fn settle_adjustments(&mut self, now: DateTime<Utc>) {
        for b in adjustments::settle(&mut self.agreements, now) {
            self.emit_adjustment_event(&b, true);
        }
    }

    fn emit_adjustment_event(&mut self, b: &BillingAdjustment, completed: bool) {
        let Some(a) = self.agreements.agreements.get(&b.agreement_id).cloned() else {
            return;
        };
        let mut ids = self.agreements.ids.clone();
        let event = adjustment_event(&a, b, completed, &mut || ids.next_id());
        self.agreements.ids = ids;
        self.agreements.emit(event);
    }

    fn emit_agreement_events(&mut self, a: &Agreement, change: Change) {
        let now = self.clock.now();
        let mut ids = self.agreements.ids.clone();
        let events = agreement_events(a, change, now, &mut || ids.next_id());
        self.agreements.ids = ids;
        for event in events {
            self.agreements.emit(event);
        }
    }

    // ---- admin ------------------------------------------------------------------

    /// Seeds an agreement (a known id: amends it). An `ACTIVE` agreement with
    /// `entitle` entitles its license for metering. Emits Purchase Agreement
    /// Created (or Amended) and License Updated.
    pub fn seed_agreement(&mut self, seed: AgreementSeed) -> Result<Agreement, AdminError> {
        if !valid_agreement_id(&seed.agreement_id) {
            return Err(AdminError::Invalid(format!(
                "agreement_id {:?} must be 1 to 64 characters of [A-Za-z0-9_/-]",
                seed.agreement_id
            )));
        }
        for (value, field) in [
            (&seed.license_arn, "license_arn"),
            (&seed.product_code, "product_code"),
            (&seed.customer_aws_account_id, "customer_aws_account_id"),
            (&seed.proposer_account_id, "proposer_account_id"),
            (&seed.offer_id, "offer_id"),
        ] {
            if value.is_empty() {
                return Err(AdminError::Invalid(format!("{field} must not be empty")));
            }
        }
        if seed.currency_code.len() != 3
            || !seed.currency_code.bytes().all(|b| b.is_ascii_uppercase())
        {
            return Err(AdminError::Invalid(format!(
                "currency_code {:?} is not an ISO 4217 code",
                seed.currency_code
            )));
        }
        if let Some(trial) = &seed.free_trial
            && !(5..=31).contains(&trial.duration_days)
        {
            return Err(AdminError::Invalid(
                "free_trial.duration_days must be 5 to 31".to_owned(),
            ));
        }
        if let Some(empty) = seed
            .rate_card
            .iter()
            .position(|r| r.dimension_key.is_empty())
        {
            return Err(AdminError::Invalid(format!(
                "rate_card[{empty}].dimension_key is empty"
            )));
        }
        let now = self.clock.now();
        let mut seed = seed;
        seed.start_time = Some(seed.start_time.unwrap_or(now));
        if seed.entitle && seed.status == AgreementStatus::Active {
            self.entitle(EntitlementSeed {
                license_arn: seed.license_arn.clone(),
                customer_aws_account_id: seed.customer_aws_account_id.clone(),
                product_code: seed.product_code.clone(),
            })?;
        }
        let agreement = Agreement {
            seed,
            last_update_time: now,
        };
        let change = if self
            .agreements
            .agreements
            .contains_key(&agreement.seed.agreement_id)
        {
            Change::Amended
        } else {
            Change::Created
        };
        info!(agreement = %agreement.seed.agreement_id, ?change, "agreement seeded");
        self.agreements
            .agreements
            .insert(agreement.seed.agreement_id.clone(), agreement.clone());
        self.emit_agreement_events(&agreement, change);
        Ok(agreement)
    }

    /// Ends an agreement: its new status, Purchase Agreement Ended and License
    /// Deprovisioned events, and (with `entitle`) the license's final metering hour.
    pub fn end_agreement(&mut self, end: &AgreementEnd) -> Result<Agreement, AdminError> {
        if end.status == AgreementStatus::Active {
            return Err(AdminError::Invalid(
                "an agreement ends with any status but ACTIVE".to_owned(),
            ));
        }
        let now = self.clock.now();
        let agreement = self
            .agreements
            .agreements
            .get_mut(&end.agreement_id)
            .ok_or_else(|| AdminError::NotFound(format!("no agreement {}", end.agreement_id)))?;
        let was_active = agreement.seed.status == AgreementStatus::Active;
        agreement.seed.status = end.status;
        agreement.last_update_time = now;
        let agreement = agreement.clone();
        if was_active {
            if agreement.seed.entitle {
                self.deprovision(
                    agreement.seed.license_arn.clone(),
                    agreement.seed.customer_aws_account_id.clone(),
                    Some(agreement.seed.product_code.clone()),
                )?;
            }
            self.emit_agreement_events(&agreement, Change::Ended);
        }
        info!(agreement = %end.agreement_id, status = end.status.as_str(), "agreement ended");
        Ok(agreement)
    }

    /// Every agreement, by id.
    pub fn agreements(&self) -> Vec<Agreement> {
        self.agreements.agreements.values().cloned().collect()
    }

    /// Every billing adjustment request, oldest first (pending ones settled first).
    pub fn billing_adjustments(&mut self) -> Vec<BillingAdjustment> {
        self.settle_adjustments(self.clock.now());
        self.agreements.adjustments.clone()
    }

    /// Fails a PENDING adjustment (VALIDATION_FAILED with `status_message`; its
    /// amount is refundable again) and emits its Failed event.
    pub fn fail_billing_adjustment(
        &mut self,
        failure: AdjustmentFailure,
    ) -> Result<BillingAdjustment, AdminError> {
        let now = self.clock.now();
        self.settle_adjustments(now);
        let b = self
            .agreements
            .adjustments
            .iter_mut()
            .find(|b| b.billing_adjustment_request_id == failure.billing_adjustment_request_id)
            .ok_or_else(|| {
                AdminError::NotFound(format!(
                    "no billing adjustment request {}",
                    failure.billing_adjustment_request_id
                ))
            })?;
        if b.status != AdjustmentStatus::Pending {
            return Err(AdminError::Invalid(format!(
                "billing adjustment request {} is {}, not PENDING",
                b.billing_adjustment_request_id,
                b.status.as_str()
            )));
        }
        b.status = AdjustmentStatus::ValidationFailed;
        b.status_message = Some(failure.status_message);
        b.updated_at = now;
        let b = b.clone();
        self.emit_adjustment_event(&b, false);
        Ok(b)
    }

    /// The events emitted so far, oldest first.
    pub fn agreement_events(&mut self) -> Vec<serde_json::Value> {
        self.settle_adjustments(self.clock.now());
        self.agreements.events.iter().cloned().collect()
    }

    /// Empties the event outbox.
    pub fn clear_agreement_events(&mut self) {
        self.agreements.events.clear();
    }
}

//! The Metering operations of the [`Engine`]: `BatchMeterUsage` (validation, first
//! write wins per account, license, dimension and hour, the garbling faults) and
//! `ResolveCustomer`.

use chrono::{DateTime, Utc};
use tracing::{info, warn};

use super::{DedupKey, Engine, Operation, TOKEN_LIFETIME, UNPROCESSED_STATUS};
use crate::config::IdenticalRetryStatus;
use crate::error::{ApiError, ApiErrorKind};
use crate::model::{BilledRecord, Conflict, FaultKind, FaultPhase};
use crate::validate::{Catalog, MeteredRecord, validate_batch};
use crate::wire::{
    BatchMeterUsageRequest, BatchMeterUsageResponse, RecordStatus, ResolveCustomerRequest,
    ResolveCustomerResponse, WireUsageRecordResult,
};

impl Engine {
    fn parse<T: serde::de::DeserializeOwned>(
        &mut self,
        operation: Operation,
        bytes: &[u8],
    ) -> Result<T, ApiError> {
        serde_json::from_slice(bytes).map_err(|e| {
            let err = ApiError::new(
                ApiErrorKind::Serialization,
                format!(
                    "request body is not a valid {} request: {e}",
                    operation.name()
                ),
            );
            self.reject(operation.name(), err, 0)
        })
    }

    pub(super) fn batch_meter_usage(
        &mut self,
        bytes: &[u8],
    ) -> Result<serde_json::Value, ApiError> {
        let operation = Operation::BatchMeterUsage;
        let request: BatchMeterUsageRequest = self.parse(operation, bytes)?;
        let record_count = request.usage_records.as_ref().map_or(0, Vec::len);
        let sends_product_code = request
            .product_code
            .as_deref()
            .is_some_and(|p| !p.is_empty());
        let sends_license = request
            .usage_records
            .iter()
            .flatten()
            .any(|r| r.license_arn.as_deref().is_some_and(|l| !l.is_empty()));
        if sends_product_code && sends_license {
            self.stats.product_code_with_license_arn += 1;
            warn!(
                "BatchMeterUsage request sends ProductCode with LicenseArn records: AWS would double-bill"
            );
        }
        let now = self.clock.now();
        let catalog = Catalog {
            license_products: &self.license_products,
            product_dimensions: &self.product_dimensions,
        };
        let records = match validate_batch(&request, now, &self.patterns, catalog) {
            Ok(records) => records,
            Err(err) => return Err(self.reject(operation.name(), err, record_count)),
        };

        let unprocessed_count = match self.take_fault(operation, FaultPhase::Unprocess) {
            Some(FaultKind::Unprocessed { records: k }) => k.min(records.len()),
            _ => 0,
        };
        let processed_count = records.len() - unprocessed_count;
        let mut response = BatchMeterUsageResponse::default();
        for (i, record) in records.into_iter().enumerate() {
            if i >= processed_count {
                *self
                    .stats
                    .records_by_status
                    .entry(UNPROCESSED_STATUS.to_owned())
                    .or_default() += 1;
                response.unprocessed_records.push(record.echo);
                continue;
            }
            let result = self.meter_record(record, now);
            *self
                .stats
                .records_by_status
                .entry(result.status.as_str().to_owned())
                .or_default() += 1;
            response.results.push(result);
        }
        if let Some(kind) = self.take_fault(operation, FaultPhase::Garble) {
            self.garble(&mut response, kind);
        }
        info!(
            records = record_count,
            unprocessed = unprocessed_count,
            "BatchMeterUsage served"
        );
        serde_json::to_value(response).map_err(|e| {
            ApiError::new(
                ApiErrorKind::InternalServiceError,
                format!("response could not be encoded: {e}"),
            )
        })
    }

    /// Applies an injected `omit_results`, `unknown_status` or `wrong_echo` fault to the
    /// last results of a processed call (whatever they billed stays billed).
    fn garble(&mut self, response: &mut BatchMeterUsageResponse, kind: FaultKind) {
        let Some((name, records)) = kind.per_record() else {
            return;
        };
        let from = response.results.len().saturating_sub(records);
        let affected = response.results.len() - from;
        match kind {
            FaultKind::OmitResults { .. } => response.results.truncate(from),
            FaultKind::UnknownStatus { .. } => {
                for result in response.results.iter_mut().skip(from) {
                    result.status = RecordStatus::Unknown;
                }
            }
            FaultKind::WrongEcho { .. } => {
                for result in response.results.iter_mut().skip(from) {
                    let sent = result
                        .usage_record
                        .quantity
                        .as_ref()
                        .and_then(serde_json::Number::as_u64)
                        .unwrap_or(0);
                    result.usage_record.quantity = Some(serde_json::Number::from(sent + 1));
                }
            }
            _ => {}
        }
        self.stats.garbled_results += u64::try_from(affected).unwrap_or(u64::MAX);
        warn!(
            fault = name,
            results = affected,
            "call processed; some of its results are left out or garbled (injected fault)"
        );
    }

    /// Bills one validated record, first write wins per (account, license,
    /// dimension, hour).
    fn meter_record(&mut self, record: MeteredRecord, now: DateTime<Utc>) -> WireUsageRecordResult {
        let entitlement = self.entitlements.get(&(
            record.license_arn.clone(),
            record.customer_aws_account_id.clone(),
        ));
        let Some(entitlement) = entitlement.filter(|e| e.state.is_active(now)) else {
            return WireUsageRecordResult {
                usage_record: record.echo,
                metering_record_id: None,
                status: RecordStatus::CustomerNotSubscribed,
            };
        };
        let product_code = entitlement.product_code.clone();
        let key = DedupKey {
            account: record.customer_aws_account_id.clone(),
            license: record.license_arn.clone(),
            dimension: record.dimension.clone(),
            hour: record.hour,
        };
        if let Some(&index) = self.billed_index.get(&key) {
            let billed = &self.billed[index];
            let identical =
                billed.quantity == record.quantity && billed.allocations == record.allocations;
            let original_id = billed.metering_record_id.clone();
            let status = if identical {
                match self.identical_retry_status {
                    IdenticalRetryStatus::DuplicateRecord => RecordStatus::DuplicateRecord,
                    IdenticalRetryStatus::Success => RecordStatus::Success,
                }
            } else {
                warn!(
                    license = %record.license_arn,
                    dimension = %record.dimension,
                    hour = %record.hour,
                    billed = billed.quantity,
                    attempted = record.quantity,
                    "conflicting duplicate refused; first write stays billed"
                );
                self.conflicts.push(Conflict {
                    customer_aws_account_id: billed.customer_aws_account_id.clone(),
                    license_arn: billed.license_arn.clone(),
                    dimension: billed.dimension.clone(),
                    hour: billed.hour,
                    billed_quantity: billed.quantity,
                    attempted_quantity: record.quantity,
                    billed_allocations: billed.allocations.clone(),
                    attempted_allocations: record.allocations.clone(),
                    original_metering_record_id: original_id.clone(),
                    attempted_at: now,
                });
                self.stats.conflicts += 1;
                RecordStatus::DuplicateRecord
            };
            return WireUsageRecordResult {
                usage_record: record.echo,
                metering_record_id: Some(original_id),
                status,
            };
        }
        let metering_record_id = self.ids.next_id();
        self.billed_index.insert(key, self.billed.len());
        self.billed.push(BilledRecord {
            customer_aws_account_id: record.customer_aws_account_id,
            license_arn: record.license_arn,
            product_code,
            dimension: record.dimension,
            hour: record.hour,
            timestamp: record.timestamp,
            quantity: record.quantity,
            allocations: record.allocations,
            metering_record_id: metering_record_id.clone(),
            billed_at: now,
        });
        WireUsageRecordResult {
            usage_record: record.echo,
            metering_record_id: Some(metering_record_id),
            status: RecordStatus::Success,
        }
    }

    pub(super) fn resolve_customer(&mut self, bytes: &[u8]) -> Result<serde_json::Value, ApiError> {
        let operation = Operation::ResolveCustomer;
        let request: ResolveCustomerRequest = self.parse(operation, bytes)?;
        let Some(token) = request.registration_token.filter(|t| !t.is_empty()) else {
            let err = ApiError::new(
                ApiErrorKind::InvalidToken,
                "RegistrationToken is required and must not be empty",
            );
            return Err(self.reject(operation.name(), err, 0));
        };
        let now = self.clock.now();
        let Some(issued) = self.tokens.get(&token).cloned() else {
            let err = ApiError::new(ApiErrorKind::InvalidToken, "Registration token is invalid.");
            return Err(self.reject(operation.name(), err, 0));
        };
        if now - issued.issued_at >= TOKEN_LIFETIME {
            let err = ApiError::new(
                ApiErrorKind::ExpiredToken,
                format!(
                    "The submitted registration token has expired (issued {}, valid for 4 hours, service time {now})",
                    issued.issued_at
                ),
            );
            return Err(self.reject(operation.name(), err, 0));
        }
        info!(license = %issued.license_arn, "ResolveCustomer served");
        serde_json::to_value(ResolveCustomerResponse {
            customer_aws_account_id: issued.customer_aws_account_id,
            product_code: issued.product_code,
            license_arn: issued.license_arn,
        })
        .map_err(|e| {
            ApiError::new(
                ApiErrorKind::InternalServiceError,
                format!("response could not be encoded: {e}"),
            )
        })
    }
}

//! [`MeteringApi`] and [`CustomerResolver`] on the Marketplace Metering SDK.
//!
//! `BatchMeterUsage` is sent Concurrent-Agreements style: every record carries
//! `CustomerAWSAccountId` + `LicenseArn`, its timestamp is the hour's start, and the
//! request never carries `ProductCode` (AWS bills twice when both are used). The
//! client makes exactly one attempt per call: the submitter owns backoff, pacing and
//! bisection, and SDK retries would hide throttling from it and spend its quota.

use async_trait::async_trait;
use aws_config::SdkConfig;
use aws_sdk_marketplacemetering::Client;
use aws_sdk_marketplacemetering::config::retry::RetryConfig;
use aws_sdk_marketplacemetering::error::{
    ConnectorError, DisplayErrorContext, ProvideErrorMetadata, SdkError,
};
use aws_sdk_marketplacemetering::primitives::DateTime;
use aws_sdk_marketplacemetering::types::{Tag, UsageAllocation, UsageRecord};
use awsmp_core::model::Allocation;
use awsmp_core::ports::{
    CustomerResolver, MeteringApi, MeteringError, MeteringRecord, RecordVerdict, ResolveError,
    ResolvedCustomer,
};
use awsmp_core::submit::answer::{self, Answer, AnsweredResult, Dispatch, EchoedRecord};
use tracing::instrument;

/// A Marketplace Metering client for [`SdkMeteringApi`]: one attempt per call.
pub fn metering_client(config: &SdkConfig) -> Client {
    let conf = aws_sdk_marketplacemetering::config::Builder::from(config)
        .retry_config(RetryConfig::standard().with_max_attempts(1))
        .build();
    Client::from_conf(conf)
}

/// `BatchMeterUsage` through the SDK.
#[derive(Debug, Clone)]
pub struct SdkMeteringApi {
    client: Client,
}

impl SdkMeteringApi {
    /// Wraps `client`, rebuilt to make one attempt per call whatever it was built with
    /// (see the module docs).
    pub fn new(client: Client) -> Self {
        let conf = client
            .config()
            .to_builder()
            .retry_config(RetryConfig::standard().with_max_attempts(1))
            .build();
        SdkMeteringApi {
            client: Client::from_conf(conf),
        }
    }
}

fn validation(message: impl Into<String>) -> MeteringError {
    MeteringError::Validation {
        name: "ValidationException".to_string(),
        message: message.into(),
    }
}

fn quantity_i32(what: &str, value: i64) -> Result<i32, MeteringError> {
    i32::try_from(value)
        .ok()
        .filter(|v| *v >= 0)
        .ok_or_else(|| validation(format!("{what} {value} is outside 0..=2147483647")))
}

fn usage_allocation(allocation: &Allocation) -> Result<UsageAllocation, MeteringError> {
    let tags = allocation
        .tags
        .iter()
        .map(|tag| {
            Tag::builder()
                .key(&tag.key)
                .value(&tag.value)
                .build()
                .map_err(|e| validation(format!("tag: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    UsageAllocation::builder()
        .allocated_usage_quantity(quantity_i32("allocated quantity", allocation.quantity)?)
        // The untagged bucket leaves Tags out (the model's list has at least one tag).
        .set_tags((!tags.is_empty()).then_some(tags))
        .build()
        .map_err(|e| validation(format!("allocation: {e}")))
}

/// The wire record: account + license, hour start, quantity, allocations.
pub fn usage_record(record: &MeteringRecord) -> Result<UsageRecord, MeteringError> {
    let allocations = record
        .allocations
        .as_deref()
        .map(|list| {
            list.iter()
                .map(usage_allocation)
                .collect::<Result<Vec<_>, _>>()
        })
        .transpose()?;
    UsageRecord::builder()
        .timestamp(DateTime::from_secs(record.key.hour.start().timestamp()))
        .customer_aws_account_id(&record.key.customer_aws_account_id)
        .license_arn(&record.key.license_arn)
        .dimension(&record.key.dimension)
        .quantity(quantity_i32("quantity", record.quantity)?)
        .set_usage_allocations(allocations)
        .build()
        .map_err(|e| validation(format!("usage record: {e}")))
}

/// A record as the answer echoes it (an absent quantity is 0, as on the wire).
fn echoed(record: &UsageRecord) -> EchoedRecord {
    EchoedRecord {
        account: record
            .customer_aws_account_id()
            .unwrap_or_default()
            .to_string(),
        license_arn: record.license_arn().unwrap_or_default().to_string(),
        dimension: record.dimension().to_string(),
        timestamp: record.timestamp().secs(),
        quantity: i64::from(record.quantity().unwrap_or(0)),
    }
}

fn metering_error<E>(
    err: SdkError<E, aws_sdk_marketplacemetering::config::http::HttpResponse>,
) -> MeteringError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    let message = || DisplayErrorContext(&err).to_string();
    let service = match &err {
        SdkError::ServiceError(service) => service,
        // Never built or signed (no credentials, say): it never left this host.
        SdkError::ConstructionFailure(_) => {
            return answer::transport_failure(Dispatch::NotWritten, &message());
        }
        SdkError::DispatchFailure(failure) => {
            let written = if failure.as_connector_error().is_some_and(connect_failed) {
                Dispatch::NotWritten
            } else {
                Dispatch::MayHaveBeenWritten
            };
            return answer::transport_failure(written, &message());
        }
        // An answer that cannot be read: its status alone may say it was refused
        // (401/403); otherwise it may have been processed.
        SdkError::ResponseError(response) => {
            return answer::unnamed_refusal(response.raw().status().as_u16(), &message());
        }
        // A timeout: the call may have been processed.
        _ => return answer::transport_failure(Dispatch::MayHaveBeenWritten, &message()),
    };
    let status = service.raw().status().as_u16();
    let error = service.err();
    match error.code() {
        None | Some("") => answer::unnamed_refusal(status, &message()),
        Some(code) => answer::refusal(code, error.message().unwrap_or_default()),
    }
}

/// Whether the connection failed before the request was written: the HTTP client's
/// connector failed (a refused connection, a name that does not resolve, a failed TLS
/// handshake, a connect timeout). A timeout or broken connection after that may have
/// delivered the request.
fn connect_failed(error: &ConnectorError) -> bool {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(source) = next {
        if source
            .downcast_ref::<hyper_util::client::legacy::Error>()
            .is_some_and(hyper_util::client::legacy::Error::is_connect)
        {
            return true;
        }
        next = source.source();
    }
    false
}

#[async_trait]
impl MeteringApi for SdkMeteringApi {
    #[instrument(skip(self, records), fields(records = records.len()))]
    async fn batch_meter_usage(
        &self,
        records: &[MeteringRecord],
    ) -> Result<Vec<RecordVerdict>, MeteringError> {
        let wire = records
            .iter()
            .map(usage_record)
            .collect::<Result<Vec<_>, _>>()?;
        let out = self
            .client
            .batch_meter_usage()
            .set_usage_records(Some(wire))
            .send()
            .await
            .map_err(metering_error)?;
        let answer = Answer {
            results: out
                .results()
                .iter()
                .map(|result| AnsweredResult {
                    record: result.usage_record().map(echoed),
                    status: result.status().map(|s| s.as_str().to_string()),
                    metering_record_id: result.metering_record_id().map(str::to_string),
                })
                .collect(),
            unprocessed: out.unprocessed_records().iter().map(echoed).collect(),
        };
        Ok(answer::verdicts(records, &answer))
    }
}

/// `ResolveCustomer` through the SDK. The token is never logged.
#[derive(Debug, Clone)]
pub struct SdkCustomerResolver {
    client: Client,
}

impl SdkCustomerResolver {
    /// Wraps `client` (the SDK's standard retries apply).
    pub fn new(client: Client) -> Self {
        SdkCustomerResolver { client }
    }
}

#[async_trait]
impl CustomerResolver for SdkCustomerResolver {
    #[instrument(skip(self, token))]
    async fn resolve(&self, token: &str) -> Result<ResolvedCustomer, ResolveError> {
        let out = match self
            .client
            .resolve_customer()
            .registration_token(token)
            .send()
            .await
        {
            Ok(out) => out,
            Err(err) => {
                let code = err.as_service_error().and_then(|e| e.code());
                return Err(match code {
                    Some("InvalidTokenException") => ResolveError::InvalidToken,
                    Some("ExpiredTokenException") => ResolveError::ExpiredToken,
                    Some(code) => ResolveError::Unavailable(format!(
                        "{code}: {}",
                        err.as_service_error()
                            .and_then(|e| e.message())
                            .unwrap_or_default()
                    )),
                    None => ResolveError::Unavailable(DisplayErrorContext(&err).to_string()),
                });
            }
        };
        match (
            out.license_arn(),
            out.customer_aws_account_id(),
            out.product_code(),
        ) {
            (Some(license), Some(account), Some(product))
                if !license.is_empty() && !account.is_empty() && !product.is_empty() =>
            {
                Ok(ResolvedCustomer {
                    license_arn: license.to_string(),
                    customer_aws_account_id: account.to_string(),
                    product_code: product.to_string(),
                })
            }
            _ => Err(ResolveError::Incomplete),
        }
    }
}

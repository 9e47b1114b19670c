//! One module per `awsmp` command: its arguments (clap) and its `run`, which reads
//! through the ports, computes with `awsmp_operate`, and renders a table or JSON.
//! What several commands share is here: the context of a run, each deployment's stores,
//! reading whole tables, and the time arguments.

pub mod adjust;
pub mod dlq;
pub mod failures;
pub mod inspect;
pub mod local;
pub mod profile;
pub mod queues;
pub mod reconcile;
pub mod replay;
pub mod report;
pub mod status;
pub mod subscribers;
pub mod trail;
pub mod usage;

use awsmp_aws::{DynamoOperatorStore, DynamoSubscriberStore};
use awsmp_core::model::{AggregatedRecord, RawUsageRow};
use awsmp_core::ports::{MalformedItem, OperatorStore};
use awsmp_core::time::{HourBucket, Instant};

use crate::deployment::{Deployment, DeploymentArgs};
use crate::error::CommandError;
use crate::output::{Format, spinner};

/// What every command runs with: the deployment it names, the output format, and the
/// instant the run started.
#[derive(Debug, Clone, Copy)]
pub struct Ctx<'a> {
    /// `--stage`, `--product-code`, `--stack`, `--region`.
    pub deployment: &'a DeploymentArgs,
    /// Tables or `--json`.
    pub format: Format,
    /// Now.
    pub now: Instant,
}

/// One deployment's stores.
pub struct Stores {
    /// The deployment, from its stacks' outputs.
    pub deployment: Deployment,
    /// DynamoDB in its Region.
    pub client: aws_sdk_dynamodb::Client,
    /// SQS in its Region.
    pub sqs: aws_sdk_sqs::Client,
    /// Its usage and aggregated tables, read for the operator.
    pub operator: DynamoOperatorStore,
    /// The subscribers table, when the events stack was found.
    pub subscribers: Option<DynamoSubscriberStore>,
}

/// The stores of every deployment `args` names.
pub async fn stores(args: &DeploymentArgs) -> Result<Vec<Stores>, CommandError> {
    let mut out = Vec::new();
    for deployment in args.resolve().await? {
        out.push(stores_of(args, deployment).await);
    }
    Ok(out)
}

/// The Agreement API (us-east-1) with the deployment's credentials, unless the command
/// was told to leave the estimated charges out (`--no-charges`).
pub async fn charges_api(ctx: &Ctx<'_>, no_charges: bool) -> Option<awsmp_aws::SdkAgreementApi> {
    if no_charges {
        return None;
    }
    let config = ctx
        .deployment
        .sdk_config(Some(crate::deployment::EVENTS_REGION))
        .await;
    Some(awsmp_aws::SdkAgreementApi::new(
        awsmp_aws::agreement_client(&config),
    ))
}

/// What prices one deployment's usage: its subscribers table and the Agreement API,
/// when both are there.
pub fn pricing<'a>(
    s: &'a Stores,
    api: Option<&'a awsmp_aws::SdkAgreementApi>,
) -> Option<(
    &'a dyn awsmp_core::ports::SubscriberStore,
    &'a dyn awsmp_core::ports::AgreementApi,
)> {
    match (&s.subscribers, api) {
        (Some(subscribers), Some(api)) => Some((subscribers, api)),
        _ => None,
    }
}

/// The stores of the one deployment a write command (`command`) goes to
/// ([`DeploymentArgs::resolve_one_for_writes`]).
pub async fn write_target(args: &DeploymentArgs, command: &str) -> Result<Stores, CommandError> {
    let deployment = args.resolve_one_for_writes(command).await?;
    Ok(stores_of(args, deployment).await)
}

async fn stores_of(args: &DeploymentArgs, deployment: Deployment) -> Stores {
    let config = args.sdk_config(Some(&deployment.region)).await;
    let client = aws_sdk_dynamodb::Client::new(&config);
    let subscribers = match &deployment.subscribers {
        Some((table, region)) => {
            let config = args.sdk_config(Some(region)).await;
            Some(DynamoSubscriberStore::new(
                aws_sdk_dynamodb::Client::new(&config),
                table.clone(),
            ))
        }
        None => None,
    };
    Stores {
        operator: DynamoOperatorStore::new(
            client.clone(),
            deployment.usage_table.clone(),
            deployment.aggregated_table.clone(),
        ),
        sqs: aws_sdk_sqs::Client::new(&config),
        client,
        subscribers,
        deployment,
    }
}

/// An instant argument (`trail --since`, `--until`): `YYYY-MM-DDTHH:MM:SS[Z]`, or an
/// hour `YYYY-MM-DDTHH` for its first instant, so every `--since` takes both forms.
pub fn instant_arg(flag: &str, text: &str) -> Result<Instant, CommandError> {
    if let Ok(hour) = text.parse::<HourBucket>() {
        return Ok(hour.start());
    }
    awsmp_core::time::parse_usage_timestamp(text).map_err(|e| {
        CommandError::Usage(format!(
            "{flag}: {e} (write it as YYYY-MM-DDTHH:MM:SSZ, or an hour YYYY-MM-DDTHH, UTC)"
        ))
    })
}

/// The first hour of a range (`failures --since`, `replay --failed-since`): an hour
/// `YYYY-MM-DDTHH`, or an instant `YYYY-MM-DDTHH:MM:SS[Z]` for the hour it falls in.
pub fn since_hour_arg(flag: &str, text: &str) -> Result<HourBucket, CommandError> {
    match awsmp_core::time::parse_usage_timestamp(text) {
        Ok(instant) => Ok(HourBucket::containing(instant)),
        Err(_) => text.parse().map_err(|e| {
            CommandError::Usage(format!(
                "{flag}: {e} (write the hour as YYYY-MM-DDTHH, or an instant YYYY-MM-DDTHH:MM:SSZ, UTC)"
            ))
        }),
    }
}

/// An hour argument (`--since`, `--hour`, `--failed-since`).
pub fn hour_arg(flag: &str, text: &str) -> Result<HourBucket, CommandError> {
    text.parse().map_err(|e| {
        CommandError::Usage(format!(
            "{flag}: {e} (write the hour as YYYY-MM-DDTHH, UTC)"
        ))
    })
}

/// Every raw usage item (of one license when given), following pages to the end.
pub async fn all_rows(
    store: &dyn OperatorStore,
    license_arn: Option<&str>,
) -> Result<Vec<RawUsageRow>, CommandError> {
    let bar = spinner("reading the usage table");
    let mut rows = Vec::new();
    let mut cursor = None;
    loop {
        let page = store.raw_rows_page(license_arn, cursor).await?;
        rows.extend(page.items);
        bar.set_message(format!("reading the usage table: {} items", rows.len()));
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    bar.finish_and_clear();
    Ok(rows)
}

/// Every aggregated record (of one license when given) and the items that cannot be
/// read as records.
pub async fn all_records(
    store: &dyn OperatorStore,
    license_arn: Option<&str>,
) -> Result<(Vec<AggregatedRecord>, Vec<MalformedItem>), CommandError> {
    let bar = spinner("reading the aggregated table");
    let (mut records, mut malformed) = (Vec::new(), Vec::new());
    let mut cursor = None;
    loop {
        let page = store.records_page(license_arn, cursor).await?;
        records.extend(page.items);
        malformed.extend(page.malformed);
        bar.set_message(format!(
            "reading the aggregated table: {} records",
            records.len()
        ));
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    bar.finish_and_clear();
    Ok((records, malformed))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// Every `--since` takes an hour or an instant: the hour's start, or the instant's hour.
    #[test]
    fn a_since_takes_an_hour_or_an_instant() {
        let at = |t: &str| awsmp_core::time::parse_usage_timestamp(t).unwrap();
        assert_eq!(
            instant_arg("--since", "2026-11-30T10").unwrap(),
            at("2026-11-30T10:00:00Z")
        );
        assert_eq!(
            instant_arg("--since", "2026-11-30T10:15:00Z").unwrap(),
            at("2026-11-30T10:15:00Z")
        );
        let hour: HourBucket = "2026-11-30T10".parse().unwrap();
        assert_eq!(since_hour_arg("--since", "2026-11-30T10").unwrap(), hour);
        assert_eq!(
            since_hour_arg("--since", "2026-11-30T10:59:59Z").unwrap(),
            hour
        );
        for bad in ["yesterday", "2026-11-30", "2026-11-30 10:15"] {
            let e = since_hour_arg("--since", bad).unwrap_err().to_string();
            assert!(e.contains("YYYY-MM-DDTHH"), "{e}");
            let e = instant_arg("--since", bad).unwrap_err().to_string();
            assert!(e.contains("YYYY-MM-DDTHH:MM:SSZ"), "{e}");
        }
    }
}

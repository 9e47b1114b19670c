//! The operator commands (`awsmp status`, `failures`, `inspect license`, `replay`,
//! `usage import`, `dlq redrive`, finding a deployment) against what the real pipeline
//! wrote on moto and the Marketplace simulator: the command code the binary runs, with
//! the real SDK clients.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use aws_sdk_dynamodb::types::AttributeValue;
use awsmp_aws::{DynamoAggregatedStore, DynamoOperatorStore, DynamoUsageStore};
use awsmp_cli::commands;
use awsmp_cli::deployment::DeploymentArgs;
use awsmp_cli::output::Format;
use awsmp_core::model::{AggregatedStatus, attr};
use awsmp_core::ports::AggregatedStore;
use awsmp_e2e::common::*;
use awsmp_e2e::{AGGREGATED_TABLE, USAGE_TABLE, license};
use awsmp_marketplace_sim::ProductSeed;
use awsmp_operate::license::ChainFilter;

const NOW: &str = "2026-11-30T10:30:00Z";

fn operator(stack: &awsmp_e2e::Stack) -> DynamoOperatorStore {
    DynamoOperatorStore::new(stack.dynamodb.clone(), USAGE_TABLE, AGGREGATED_TABLE)
}

/// GIVEN billed usage, a row with six tags and an hour of a dimension the catalog
/// lacks, WHEN the pipeline ran, THEN status counts each hour, failures name both codes
/// and the remedy, inspect shows the chain, and once the dimension is in the catalog a
/// replay bills the stored quantity exactly once.
#[tokio::test]
async fn an_operator_sees_what_happened_and_replays_the_fixed_error_once() {
    let stack = stack(NOW).await;
    let l1 = license(1);
    stack.license_updated(&l1, ACCOUNT_A).await.unwrap();
    stack
        .put_usage(&l1, ACCOUNT_A, "requests", "2026-11-30T08:10:00Z", 4)
        .await
        .unwrap();
    stack
        .put_usage(&l1, ACCOUNT_A, "requests", "2026-11-30T08:20:00Z", 6)
        .await
        .unwrap();
    stack
        .put_usage(&l1, ACCOUNT_A, "Seats", "2026-11-30T08:30:00Z", 3)
        .await
        .unwrap();
    let mut tagged =
        awsmp_e2e::Stack::usage_item(&l1, ACCOUNT_A, "storage", "2026-11-30T08:40:00Z", 2);
    let tags: Vec<AttributeValue> = (0..6)
        .map(|i| {
            AttributeValue::M(
                [
                    ("key".to_string(), AttributeValue::S(format!("k{i}"))),
                    ("value".to_string(), AttributeValue::S("v".into())),
                ]
                .into(),
            )
        })
        .collect();
    tagged.insert(
        attr::USAGE_ALLOCATIONS.into(),
        AttributeValue::L(vec![AttributeValue::M(
            [
                (
                    "allocatedUsageQuantity".to_string(),
                    AttributeValue::N("2".into()),
                ),
                ("tags".to_string(), AttributeValue::L(tags)),
            ]
            .into(),
        )]),
    );
    stack.put_item(tagged).await.unwrap();
    stack
        .put_usage(&l1, ACCOUNT_A, "requests", "2026-11-30T10:05:00Z", 1)
        .await
        .unwrap();
    stack.run_pipeline().await.unwrap();
    let now = stack.now();
    let store = operator(&stack);

    // status: the 08 hour billed 10, one error, one rejection; 10 still open.
    let report = commands::status::read(&store, &[], 0, None, now, 6, None)
        .await
        .unwrap();
    let eight = &report.hours[&"2026-11-30T08".parse().unwrap()];
    assert_eq!(
        (
            eight.rows_counted,
            eight.rows_rejected,
            eight.records_billed,
            eight.quantity_billed,
            eight.records_error
        ),
        (3, 1, 1, 10, 1),
        "{report:?}"
    );
    let ten = &report.hours[&"2026-11-30T10".parse().unwrap()];
    assert_eq!(ten.rows_pending, 1);
    let place = commands::status::Place {
        region: "us-east-1".into(),
        stack: Some("awsmp-main-prod-e2e-test".into()),
    };
    let shown = commands::status::render(&place, &report, Format::Human);
    assert!(shown.attention, "an Error record needs attention");
    let table_lines: Vec<&str> = shown
        .text
        .lines()
        .filter(|l| l.starts_with("| 2026"))
        .collect();
    assert_eq!(
        table_lines,
        vec![
            "| 2026-11-30T08 | 0            | 3       | 1        | 0       | 0               | 1      | 10              | 1     | 0              | 0              |",
            "| 2026-11-30T10 | 1            | 0       | 0        | 0       | 0               | 0      | 0               | 0     | 0              | 0              |",
        ],
        "{}",
        shown.text
    );
    assert!(
        shown
            .text
            .contains("limits: busiest hour 2026-11-30T08: 2 records, 0.0% of the 870000 per hour"),
        "{}",
        shown.text
    );
    let json: serde_json::Value =
        serde_json::from_str(&commands::status::render(&place, &report, Format::Json).text)
            .unwrap();
    assert_eq!(json["region"], "us-east-1");
    assert_eq!(json["hours"]["2026-11-30T08"]["quantity_billed"], 10);
    assert!(
        json["attention"]
            .as_array()
            .unwrap()
            .iter()
            .all(|a| a["urgency"].is_string())
    );

    // failures: both codes, the remedy, and what the unbilled record is worth under
    // the buyer's agreement (Seats at 2.50 USD: 3 of them, 7.5 USD).
    stack
        .seed_priced_agreement(&l1, ACCOUNT_A, &[("Seats", "2.50")])
        .unwrap();
    let agreements = stack.agreement_api();
    let (found, unpriced) = commands::failures::read(
        &store,
        "2026-11-30T00".parse().unwrap(),
        now,
        Some((stack.subscribers.as_ref(), &agreements)),
    )
    .await
    .unwrap();
    assert_eq!(unpriced, None);
    assert_eq!(found.len(), 2, "{found:?}");
    let error = found.iter().find(|f| f.status == "Error").unwrap();
    let worth = error.worth.clone().unwrap();
    assert_eq!(
        (
            worth.amount.as_deref(),
            worth.currency.as_deref(),
            worth.basis
        ),
        (Some("7.5"), Some("USD"), "priced")
    );
    assert_eq!(
        error.reason.as_deref(),
        Some("InvalidUsageDimensionException")
    );
    assert!(error.replayable);
    assert!(error.remedy.contains("catalog"));
    let rejected = found
        .iter()
        .find(|f| f.status == "RejectedClientSide")
        .unwrap();
    assert_eq!(
        (rejected.reason.as_deref(), rejected.server_side.as_deref()),
        (Some("TooManyTags"), Some("InvalidTagException"))
    );
    assert_eq!(rejected.worth, None, "a raw row is not priced");
    // status with the rate card: the 10 billed requests are priced by no term of the
    // agreement (it prices Seats only): given away, so it needs attention.
    let priced = commands::status::read(
        &store,
        &[],
        0,
        None,
        now,
        6,
        Some((stack.subscribers.as_ref(), &agreements)),
    )
    .await
    .unwrap();
    let charges = priced.charges.as_ref().unwrap();
    assert_eq!(charges.unpriced.len(), 1, "{charges:?}");
    assert_eq!(
        (
            charges.unpriced[0].dimension.as_str(),
            charges.unpriced[0].quantity
        ),
        ("requests", 10)
    );
    assert!(
        priced
            .attention
            .iter()
            .any(|a| a.message.contains("given away") && a.message.contains("requests")),
        "{:?}",
        priced.attention
    );
    let listed = commands::failures::render(&found, Format::Human);
    assert!(listed.attention);
    assert!(listed.text.contains("what to do:"), "{}", listed.text);
    assert!(
        listed
            .text
            .contains("unbilled, estimated: 7.5 USD (estimated from"),
        "{}",
        listed.text
    );

    // inspect license: the chain with Marketplace's record id, and what each record is
    // worth under the buyer's agreement (Seats priced, requests not).
    let view = commands::inspect::license(
        &store,
        Some(stack.subscribers.as_ref()),
        Some(&agreements),
        &l1,
        &ChainFilter::default(),
    )
    .await
    .unwrap();
    assert_eq!(view.subscribers.len(), 1);
    assert_eq!(view.subscribers[0].subscription_status, "active");
    assert_eq!(
        view.subscribers[0].agreement_id.as_deref(),
        Some(format!("agmt-{ACCOUNT_A}").as_str())
    );
    assert_eq!(view.charges_unavailable, None);
    let billed = view
        .groups
        .iter()
        .find(|g| g.dimension == "requests" && g.hour == Some("2026-11-30T08".parse().unwrap()))
        .unwrap();
    assert_eq!(billed.record_status.as_deref(), Some("Success"));
    assert!(billed.metering_record_id.is_some());
    assert_eq!(billed.quantity_counted, 10);
    assert_eq!(billed.worth.as_ref().map(|w| w.basis), Some("unpriced"));
    let seats = view.groups.iter().find(|g| g.dimension == "Seats").unwrap();
    assert_eq!(
        seats.worth.as_ref().and_then(|w| w.amount.as_deref()),
        Some("7.5")
    );

    // replay: refused while billed, done for the error once the catalog has the dimension.
    let aggregated = DynamoAggregatedStore::new(stack.dynamodb.clone(), AGGREGATED_TABLE);
    let billed_group =
        commands::replay::parse_group(&format!("{l1}|{ACCOUNT_A}|requests|2026-11-30T08")).unwrap();
    let failed_group =
        commands::replay::parse_group(&format!("{l1}|{ACCOUNT_A}|Seats|2026-11-30T08")).unwrap();
    let selection = commands::replay::Selection::Groups(vec![billed_group, failed_group.clone()]);
    let dry = commands::replay::replay(&aggregated, &store, &selection, now, true)
        .await
        .unwrap();
    assert_eq!(
        dry.iter().map(|l| l.result).collect::<Vec<_>>(),
        vec!["refused", "would replay"]
    );
    assert!(dry[0].why.as_deref().unwrap().contains("billed"));
    stack
        .sim
        .handle()
        .seed_product(ProductSeed {
            product_code: stack.options.product_code.clone(),
            dimensions: vec![
                "requests".into(),
                "storage".into(),
                "users".into(),
                "Seats".into(),
            ],
        })
        .unwrap();
    let done = commands::replay::replay(&aggregated, &store, &selection, now, false)
        .await
        .unwrap();
    assert_eq!(done[1].result, "replayed");
    assert_eq!(done[1].quantity, Some(3));
    stack.run_submitter().await.unwrap();
    let record = aggregated.get(&failed_group).await.unwrap().unwrap();
    assert_eq!(record.status, AggregatedStatus::Success);
    let billed_seats: i64 = stack
        .billed()
        .iter()
        .filter(|(k, _)| k.2 == "Seats")
        .map(|(_, q)| *q)
        .sum();
    assert_eq!(billed_seats, 3, "billed once with the stored quantity");
    let again = commands::replay::replay(&aggregated, &store, &selection, now, false)
        .await
        .unwrap();
    assert!(again.iter().all(|l| l.result == "refused"));
    assert_conserved(&stack, false).await;
}

/// `usage import` writes through the real table: bad lines keep the whole file out,
/// `--write-valid` writes the rest, and the pipeline counts exactly what was written.
#[tokio::test]
async fn an_import_is_checked_first_and_counted_once() {
    let stack = stack(NOW).await;
    let l1 = license(1);
    stack.license_updated(&l1, ACCOUNT_A).await.unwrap();
    let dir = std::env::temp_dir().join(format!("awsmp-e2e-import-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("usage.jsonl");
    let line = |event: &str, ts: &str, q: &str| {
        format!(
            "{{\"licenseArn\":\"{l1}\",\"customerAWSAccountId\":\"{ACCOUNT_A}\",\"dimension\":\"requests\",\"timestamp\":\"{ts}\",\"quantity\":{q},\"eventId\":\"{event}\"}}\n"
        )
    };
    let text = [
        line("e-1", "2026-11-30T08:00:00Z", "5"),
        line("e-2", "2026-11-30T08:05:00Z", "-1"),
        line("e-3", "2026-11-29T08:05:00Z", "1"),
        line("e-4", "2026-11-30T08:10:00Z", "7"),
    ]
    .concat();
    std::fs::write(&file, text).unwrap();
    let usage = DynamoUsageStore::new(stack.dynamodb.clone(), USAGE_TABLE);
    let mut options = commands::usage::import::ImportOptions {
        format: commands::usage::import::FileFormat::Jsonl,
        product_code: stack.options.product_code.clone(),
        write_valid: false,
        restart: false,
        region: "us-east-1".into(),
        usage_table: USAGE_TABLE.into(),
    };
    let report = commands::usage::import::import(&usage, &file, &options, stack.now())
        .await
        .unwrap();
    let bad: Vec<_> = report
        .bad
        .iter()
        .map(|b| (b.line, b.reason.clone().unwrap()))
        .collect();
    assert_eq!(
        bad,
        vec![
            (2, "NegativeQuantity".into()),
            (3, "TimestampOutOfWindow".into())
        ]
    );
    assert!(
        stack.raw_rows().await.unwrap().is_empty(),
        "nothing written"
    );
    let shown = commands::usage::import::render(&report, false, Format::Human);
    assert!(
        shown
            .text
            .contains("line 2: NegativeQuantity (server-side ValidationException)"),
        "{}",
        shown.text
    );
    assert!(shown.text.contains("nothing was written"));

    options.write_valid = true;
    let written = commands::usage::import::import(&usage, &file, &options, stack.now())
        .await
        .unwrap();
    assert_eq!(written.written, 2);
    options.restart = true;
    let rerun = commands::usage::import::import(&usage, &file, &options, stack.now())
        .await
        .unwrap();
    assert_eq!((rerun.written, rerun.already_written), (0, 2));
    stack.run_pipeline().await.unwrap();
    let billed: i64 = stack.billed().values().sum();
    assert_eq!(billed, 12);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The deployment is found from its stack outputs (as deploy.sh deploys it), flags
/// win over outputs, a missing stack says what to do, and a DLQ is redriven without
/// losing a message.
#[tokio::test]
async fn finds_the_deployment_from_its_outputs_and_redrives_a_dlq() {
    let stack = stack(NOW).await;
    let config = stack.moto.sdk_config();
    let cfn = aws_sdk_cloudformation::Client::new(&config);
    let sqs = stack.sqs.clone();
    let dlq = sqs
        .create_queue()
        .queue_name("work-dlq")
        .send()
        .await
        .unwrap();
    let dlq_url = dlq.queue_url().unwrap().to_string();
    let dlq_arn = "arn:aws:sqs:us-east-1:123456789012:work-dlq";
    let work = sqs
        .create_queue()
        .queue_name("work")
        .attributes(
            aws_sdk_sqs::types::QueueAttributeName::RedrivePolicy,
            serde_json::json!({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": "3"}).to_string(),
        )
        .send()
        .await
        .unwrap();
    let work_url = work.queue_url().unwrap().to_string();
    let outputs = serde_json::json!({
        "UsageTableName": {"Value": USAGE_TABLE},
        "AggregatedUsageTableName": {"Value": AGGREGATED_TABLE},
        "SubscribersTableName": {"Value": awsmp_e2e::SUBSCRIBERS_TABLE},
        "SubscribersTableRegion": {"Value": "us-east-1"},
        "WorkQueueUrl": {"Value": work_url},
    });
    let body = serde_json::json!({
        "Resources": {"Marker": {"Type": "AWS::CloudFormation::WaitConditionHandle"}},
        "Outputs": outputs,
    });
    cfn.create_stack()
        .stack_name("awsmp-main-prod-e2e-test")
        .template_body(body.to_string())
        .send()
        .await
        .unwrap();

    let args = DeploymentArgs {
        stage: Some("test".into()),
        product_code: Some("prod-e2e".into()),
        ..DeploymentArgs::default()
    };
    let found = args.resolve_in(&config, "us-east-1", None).await.unwrap();
    assert_eq!(found.usage_table, USAGE_TABLE);
    assert_eq!(found.aggregated_table, AGGREGATED_TABLE);
    assert_eq!(
        found.subscribers,
        Some((
            awsmp_e2e::SUBSCRIBERS_TABLE.to_string(),
            "us-east-1".to_string()
        ))
    );
    assert_eq!(
        found.queues,
        BTreeMap::from([("work".to_string(), work_url.clone())])
    );
    let overridden = DeploymentArgs {
        usage_table: Some("mine".into()),
        ..args.clone()
    };
    assert_eq!(
        overridden
            .resolve_in(&config, "us-east-1", None)
            .await
            .unwrap()
            .usage_table,
        "mine"
    );
    let missing = DeploymentArgs {
        stage: Some("prod".into()),
        ..args.clone()
    };
    let error = missing
        .resolve_in(&config, "us-east-1", None)
        .await
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("no stack awsmp-main-prod-e2e-prod"),
        "{error}"
    );
    assert!(matches!(error, awsmp_cli::error::CommandError::NotFound(_)));

    // Two messages in the DLQ: status counts them, the redrive moves both back.
    for body in ["{\"a\":1}", "{\"a\":2}"] {
        sqs.send_message()
            .queue_url(&dlq_url)
            .message_body(body)
            .send()
            .await
            .unwrap();
    }
    let depths = commands::queues::depths(&sqs, &found.queues).await.unwrap();
    assert_eq!(depths[0].dead_letters, Some(2));
    let dry = commands::dlq::redrive(&sqs, &work_url, 10, true)
        .await
        .unwrap();
    assert_eq!((dry.found, dry.moved, dry.samples.len()), (2, 0, 2));
    let moved = commands::dlq::redrive(&sqs, &work_url, 10, false)
        .await
        .unwrap();
    assert_eq!(moved.moved, 2);
    let after = commands::queues::depths(&sqs, &found.queues).await.unwrap();
    assert_eq!((after[0].depth, after[0].dead_letters), (2, Some(0)));
}

/// `--all-regions`: the main stack is looked for in every metering Region at once
/// (moto's CloudFormation is regional, as AWS's is), found where it exists, and
/// finding it nowhere says what to do.
#[tokio::test]
async fn all_regions_finds_every_region_with_the_main_stack() {
    let stack = stack(NOW).await;
    let body = serde_json::json!({
        "Resources": {"Marker": {"Type": "AWS::CloudFormation::WaitConditionHandle"}},
        "Outputs": {
            "UsageTableName": {"Value": USAGE_TABLE},
            "AggregatedUsageTableName": {"Value": AGGREGATED_TABLE},
        },
    });
    for region in ["eu-west-1", "us-east-1"] {
        aws_sdk_cloudformation::Client::new(&stack.moto.sdk_config_in(region))
            .create_stack()
            .stack_name("awsmp-main-prod-e2e-test")
            .template_body(body.to_string())
            .send()
            .await
            .unwrap();
    }
    let configs = || {
        awsmp_cli::deployment::METERING_REGIONS
            .iter()
            .map(|r| (r.to_string(), stack.moto.sdk_config_in(r)))
            .collect::<Vec<_>>()
    };
    let args = DeploymentArgs {
        stage: Some("test".into()),
        product_code: Some("prod-e2e".into()),
        all_regions: true,
        ..DeploymentArgs::default()
    };
    // Listed in METERING_REGIONS' order, whichever answered first.
    assert_eq!(
        args.find_regions_with(configs()).await.unwrap(),
        ["us-east-1", "eu-west-1"]
    );
    let found = args
        .resolve_in(&stack.moto.sdk_config_in("eu-west-1"), "eu-west-1", None)
        .await
        .unwrap();
    assert_eq!(found.usage_table, USAGE_TABLE);

    let elsewhere = DeploymentArgs {
        stage: Some("nowhere".into()),
        ..args.clone()
    };
    let error = elsewhere.find_regions_with(configs()).await.unwrap_err();
    assert!(matches!(error, awsmp_cli::error::CommandError::NotFound(_)));
    assert!(
        error.to_string().contains(&format!(
            "no stack awsmp-main-prod-e2e-nowhere in any of the {} Regions probed",
            awsmp_cli::deployment::METERING_REGIONS.len()
        )),
        "{error}"
    );
    let unnamed = DeploymentArgs {
        all_regions: true,
        ..DeploymentArgs::default()
    };
    let error = unnamed.find_regions_with(configs()).await.unwrap_err();
    assert!(
        error.to_string().contains("--stage S --product-code P"),
        "{error}"
    );
}

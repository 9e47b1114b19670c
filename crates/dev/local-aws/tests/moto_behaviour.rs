//! Checks that moto behaves like DynamoDB and SQS on every feature our adapters rely
//! on (results are noted in this crate's README), and that the tooling itself works:
//! start/stop, the missing-venv message, tables from docs/design.md and templates.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;

use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem, Update};
use awsmp_local_aws::*;

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_string())
}

const LICENSE: &str = "arn:aws:license-manager::123456789012:license:l-0123456789abcdef";

fn usage_item(sort_key: &str, pending: Option<&str>) -> HashMap<String, AttributeValue> {
    let mut item = HashMap::from([
        ("licenseArn".to_string(), s(LICENSE)),
        (
            "customerAWSAccountId_dimension_timestamp".to_string(),
            s(sort_key),
        ),
        ("customerAWSAccountId".to_string(), s("111122223333")),
        ("dimension".to_string(), s("requests")),
        ("quantity".to_string(), AttributeValue::N("1".into())),
    ]);
    if let Some(hour) = pending {
        item.insert("meteringPending".to_string(), s(hour));
    }
    item
}

#[tokio::test]
async fn server_starts_answers_and_dies_with_its_handle() {
    let moto = MotoServer::start().await.expect("moto starts");
    assert!(moto.endpoint().starts_with("http://127.0.0.1:"));
    let tables = moto
        .dynamodb()
        .list_tables()
        .send()
        .await
        .expect("ListTables");
    assert!(tables.table_names().is_empty());
    let pid = moto.pid();
    drop(moto);
    // Reaped in Drop, so the pid no longer names a process of ours.
    let alive = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), None).is_ok();
    assert!(!alive, "moto (pid {pid}) still running after drop");
}

#[tokio::test]
async fn missing_venv_fails_naming_make_venv() {
    let err = MotoServer::start_from(std::path::Path::new("/nonexistent/venv"))
        .await
        .expect_err("no venv there");
    let text = err.to_string();
    assert!(text.contains("make venv"), "{text}");
    assert!(text.contains("/nonexistent/venv"), "{text}");
}

#[tokio::test]
async fn fixed_tables_match_architecture_and_describe_back() {
    let moto = MotoServer::start().await.unwrap();
    let db = moto.dynamodb();
    create_usage_table(&db, "usage").await.unwrap();
    create_aggregated_table(&db, "aggregated").await.unwrap();
    create_subscribers_table(&db, "subscribers").await.unwrap();
    create_profile_table(&db, "profile").await.unwrap();
    assert_eq!(
        describe_table_spec(&db, "usage").await.unwrap(),
        usage_table_spec("usage").unwrap()
    );
    assert_eq!(
        describe_table_spec(&db, "aggregated").await.unwrap(),
        aggregated_table_spec("aggregated").unwrap()
    );
    assert_eq!(
        describe_table_spec(&db, "subscribers").await.unwrap(),
        subscribers_table_spec("subscribers").unwrap()
    );
    assert_eq!(
        describe_table_spec(&db, "profile").await.unwrap(),
        profile_table_spec("profile").unwrap()
    );
}

/// Each table a template defines has the shape of one of our four tables (the specs
/// the tests build tables with, read from the templates): a fifth table, or one the
/// spec readers do not know, fails here.
#[tokio::test]
async fn template_tables_match_the_fixed_definitions_and_create_on_moto() {
    let templates = workspace_templates();
    let fixed = [
        ("subscribers", subscribers_table_spec("x").unwrap()),
        ("usage", usage_table_spec("x").unwrap()),
        ("aggregated-usage", aggregated_table_spec("x").unwrap()),
        ("customer-profile", profile_table_spec("x").unwrap()),
    ];
    let moto = MotoServer::start().await.unwrap();
    let db = moto.dynamodb();
    let mut checked = 0;
    for path in &templates {
        let options = TemplateOptions::new()
            .parameter("StageName", "test")
            .parameter("Stage", "test")
            .parameter("ProductCode", "prodcode");
        let tables = tables_in_template(path, &options).unwrap();
        for table in &tables {
            let shape = table.spec.renamed("x");
            assert!(
                fixed.iter().any(|(_, spec)| *spec == shape),
                "{} {}: {:?} matches none of docs/design.md's tables",
                path.display(),
                table.logical_id,
                table.spec
            );
            checked += 1;
        }
        let created = create_tables_from_template(&db, path, &options)
            .await
            .unwrap();
        for table in &tables {
            assert_eq!(created[&table.logical_id], table.spec.name);
            assert_eq!(
                describe_table_spec(&db, &table.spec.name).await.unwrap(),
                table.spec
            );
        }
    }
    println!(
        "checked {checked} table(s) in {} template(s)",
        templates.len()
    );
}

#[test]
fn template_reader_resolves_sub_ref_and_overrides() {
    let dir = std::env::temp_dir().join(format!("awsmp-template-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("template-test.yaml");
    std::fs::write(
        &path,
        r#"
Parameters:
  StageName: { Type: String, Default: dev }
  ProductCode: { Type: String }
Resources:
  UsageTable:
    Type: AWS::DynamoDB::Table
    Properties:
      TableName: !Sub "awsmp-${ProductCode}-usage-${StageName}"
      AttributeDefinitions:
        - { AttributeName: licenseArn, AttributeType: S }
        - { AttributeName: customerAWSAccountId_dimension_timestamp, AttributeType: S }
        - { AttributeName: meteringPending, AttributeType: S }
      KeySchema:
        - { AttributeName: licenseArn, KeyType: HASH }
        - { AttributeName: customerAWSAccountId_dimension_timestamp, KeyType: RANGE }
      GlobalSecondaryIndexes:
        - IndexName: metering_pending
          KeySchema:
            - { AttributeName: meteringPending, KeyType: HASH }
            - { AttributeName: licenseArn, KeyType: RANGE }
          Projection:
            ProjectionType: INCLUDE
            NonKeyAttributes: [dimension, customerAWSAccountId]
  Profile:
    Type: AWS::DynamoDB::Table
    Properties:
      TableName: { "Fn::Sub": ["awsmp-${Code}-customer-profile", { Code: !Ref ProductCode }] }
      AttributeDefinitions:
        - { AttributeName: licenseArn, AttributeType: S }
        - { AttributeName: customerAWSAccountId, AttributeType: S }
      KeySchema:
        - { AttributeName: licenseArn, KeyType: HASH }
        - { AttributeName: customerAWSAccountId, KeyType: RANGE }
  Queue:
    Type: AWS::SQS::Queue
"#,
    )
    .unwrap();
    // ProductCode has no default: a clear error naming it.
    let err = tables_in_template(&path, &TemplateOptions::new()).unwrap_err();
    assert!(err.to_string().contains("${ProductCode}"), "{err}");

    let tables = tables_in_template(
        &path,
        &TemplateOptions::new().parameter("ProductCode", "p1"),
    )
    .unwrap();
    let by_id: HashMap<_, _> = tables
        .iter()
        .map(|t| (t.logical_id.as_str(), &t.spec))
        .collect();
    assert_eq!(
        *by_id["UsageTable"],
        usage_table_spec("awsmp-p1-usage-dev").unwrap()
    );
    assert_eq!(
        *by_id["Profile"],
        profile_table_spec("awsmp-p1-customer-profile").unwrap()
    );

    let renamed = tables_in_template(
        &path,
        &TemplateOptions::new()
            .parameter("ProductCode", "p1")
            .name("UsageTable", "my-usage"),
    )
    .unwrap();
    assert_eq!(renamed[0].spec.name, "my-usage");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn gsi_query_paginates_with_limit_and_last_evaluated_key() {
    let moto = MotoServer::start().await.unwrap();
    let db = moto.dynamodb();
    create_usage_table(&db, "usage").await.unwrap();
    for i in 0..25 {
        db.put_item()
            .table_name("usage")
            .set_item(Some(usage_item(
                &format!("111122223333#requests#2026-11-30T10:00:{i:02}Z#e{i}"),
                Some("2026-11-30T10"),
            )))
            .send()
            .await
            .unwrap();
    }
    let mut seen = 0;
    let mut pages = 0;
    let mut start = None;
    loop {
        let out = db
            .query()
            .table_name("usage")
            .index_name("metering_pending")
            .key_condition_expression("meteringPending = :h")
            .expression_attribute_values(":h", s("2026-11-30T10"))
            .limit(10)
            .set_exclusive_start_key(start)
            .send()
            .await
            .unwrap();
        pages += 1;
        assert!(out.items().len() <= 10);
        // INCLUDE projection: keys plus the two projected attributes, nothing else.
        for item in out.items() {
            assert!(item.contains_key("dimension") && item.contains_key("customerAWSAccountId"));
            assert!(!item.contains_key("quantity"), "quantity is not projected");
        }
        seen += out.items().len();
        start = out.last_evaluated_key;
        if start.is_none() {
            break;
        }
    }
    assert_eq!(seen, 25);
    assert!(pages >= 3, "{pages} pages");
}

#[tokio::test]
async fn conditional_put_and_update_fail_with_conditional_check_failed() {
    let moto = MotoServer::start().await.unwrap();
    let db = moto.dynamodb();
    create_usage_table(&db, "usage").await.unwrap();
    let item = usage_item(
        "111122223333#requests#2026-11-30T10:00:00Z#e1",
        Some("2026-11-30T10"),
    );
    let put = || {
        db.put_item()
            .table_name("usage")
            .set_item(Some(item.clone()))
            .condition_expression("attribute_not_exists(customerAWSAccountId_dimension_timestamp)")
    };
    put().send().await.unwrap();
    let err = put().send().await.unwrap_err();
    assert!(
        err.into_service_error()
            .is_conditional_check_failed_exception()
    );

    let err = db
        .update_item()
        .table_name("usage")
        .key("licenseArn", s(LICENSE))
        .key(
            "customerAWSAccountId_dimension_timestamp",
            s("111122223333#requests#2026-11-30T10:00:00Z#e1"),
        )
        .update_expression("SET version = :v")
        .condition_expression("version = :expected")
        .expression_attribute_values(":v", AttributeValue::N("2".into()))
        .expression_attribute_values(":expected", AttributeValue::N("1".into()))
        .send()
        .await
        .unwrap_err();
    assert!(
        err.into_service_error()
            .is_conditional_check_failed_exception()
    );
}

#[tokio::test]
async fn add_on_a_string_set_is_idempotent() {
    let moto = MotoServer::start().await.unwrap();
    let db = moto.dynamodb();
    create_subscribers_table(&db, "subscribers").await.unwrap();
    for region in ["us-east-1", "us-east-1", "eu-west-1"] {
        db.update_item()
            .table_name("subscribers")
            .key("licenseArn", s(LICENSE))
            .key("customerAWSAccountId", s("111122223333"))
            .update_expression(
                "SET productCode = if_not_exists(productCode, :p) ADD registeredRegions :r",
            )
            .expression_attribute_values(":p", s("prod"))
            .expression_attribute_values(":r", AttributeValue::Ss(vec![region.to_string()]))
            .send()
            .await
            .unwrap();
    }
    let item = db
        .get_item()
        .table_name("subscribers")
        .key("licenseArn", s(LICENSE))
        .key("customerAWSAccountId", s("111122223333"))
        .send()
        .await
        .unwrap()
        .item
        .unwrap();
    let mut regions = item["registeredRegions"].as_ss().unwrap().clone();
    regions.sort();
    assert_eq!(regions, vec!["eu-west-1", "us-east-1"]);
}

#[tokio::test]
async fn remove_drops_an_item_from_a_sparse_index() {
    let moto = MotoServer::start().await.unwrap();
    let db = moto.dynamodb();
    create_usage_table(&db, "usage").await.unwrap();
    let sk = "111122223333#requests#2026-11-30T10:00:00Z#e1";
    db.put_item()
        .table_name("usage")
        .set_item(Some(usage_item(sk, Some("2026-11-30T10"))))
        .send()
        .await
        .unwrap();
    let count = || async {
        db.query()
            .table_name("usage")
            .index_name("metering_pending")
            .key_condition_expression("meteringPending = :h")
            .expression_attribute_values(":h", s("2026-11-30T10"))
            .send()
            .await
            .unwrap()
            .count
    };
    assert_eq!(count().await, 1);
    db.update_item()
        .table_name("usage")
        .key("licenseArn", s(LICENSE))
        .key("customerAWSAccountId_dimension_timestamp", s(sk))
        .update_expression("SET meteringStatus = :s REMOVE meteringPending")
        .expression_attribute_values(":s", s("Aggregated"))
        .send()
        .await
        .unwrap();
    assert_eq!(count().await, 0);
}

#[tokio::test]
async fn transaction_cancellation_reports_reasons_per_item_and_applies_nothing() {
    let moto = MotoServer::start().await.unwrap();
    let db = moto.dynamodb();
    create_usage_table(&db, "usage").await.unwrap();
    create_aggregated_table(&db, "aggregated").await.unwrap();
    let claimed = "111122223333#requests#2026-11-30T10:00:00Z#e1";
    let mut row = usage_item(claimed, Some("2026-11-30T10"));
    row.insert("aggregatedInto".into(), s("earlier"));
    db.put_item()
        .table_name("usage")
        .set_item(Some(row))
        .send()
        .await
        .unwrap();

    let put = Put::builder()
        .table_name("aggregated")
        .item("licenseArn", s(LICENSE))
        .item(
            "account_dimension_hour",
            s("111122223333#requests#2026-11-30T10"),
        )
        .condition_expression("attribute_not_exists(account_dimension_hour)")
        .build()
        .unwrap();
    let claim = Update::builder()
        .table_name("usage")
        .key("licenseArn", s(LICENSE))
        .key("customerAWSAccountId_dimension_timestamp", s(claimed))
        .update_expression("SET aggregatedInto = :a")
        .condition_expression(
            "attribute_exists(meteringPending) AND attribute_not_exists(aggregatedInto)",
        )
        .expression_attribute_values(":a", s("111122223333#requests#2026-11-30T10"))
        .build()
        .unwrap();
    let err = db
        .transact_write_items()
        .transact_items(TransactWriteItem::builder().put(put).build())
        .transact_items(TransactWriteItem::builder().update(claim).build())
        .send()
        .await
        .unwrap_err();
    let err = err.into_service_error();
    let aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError::TransactionCanceledException(canceled) = err else {
        panic!("expected TransactionCanceledException, got {err:?}");
    };
    let codes: Vec<Option<&str>> = canceled
        .cancellation_reasons()
        .iter()
        .map(|r| r.code())
        .collect();
    assert_eq!(codes.len(), 2, "{codes:?}");
    assert_eq!(codes[1], Some("ConditionalCheckFailed"));
    assert!(matches!(codes[0], None | Some("None")), "{codes:?}");
    // All or nothing: the aggregated row was not created.
    let scan = db.scan().table_name("aggregated").send().await.unwrap();
    assert_eq!(scan.count, 0);
}

#[tokio::test]
async fn queue_with_dlq_redrives_after_max_receives() {
    let moto = MotoServer::start().await.unwrap();
    let sqs = moto.sqs();
    let queue = create_queue_with_dlq(&sqs, "work", 1).await.unwrap();
    let dlq = queue.dlq_url.clone().unwrap();
    sqs.send_message()
        .queue_url(&queue.url)
        .message_body("m1")
        .send()
        .await
        .unwrap();
    // Visibility 0: the message is visible again at once, so the next receive is its second.
    let first = sqs
        .receive_message()
        .queue_url(&queue.url)
        .visibility_timeout(0)
        .send()
        .await
        .unwrap();
    assert_eq!(first.messages().len(), 1);
    let second = sqs
        .receive_message()
        .queue_url(&queue.url)
        .send()
        .await
        .unwrap();
    assert!(
        second.messages().is_empty(),
        "moved to the DLQ after 1 receive"
    );
    let dead = sqs.receive_message().queue_url(&dlq).send().await.unwrap();
    assert_eq!(dead.messages().len(), 1);
    assert_eq!(dead.messages()[0].body(), Some("m1"));
    assert!(
        create_queue(&sqs, "plain")
            .await
            .unwrap()
            .ends_with("/plain")
    );
}

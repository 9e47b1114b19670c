//! What the resource policies refuse whatever else IAM grants: the buyer profiles, the
//! subscription and pipeline queues, the default bus, what keeps the profiles closed, and
//! the page bucket.

use super::*;

/// A developer's or CI's role with every permission IAM can give.
fn allow_everything() -> awsmp_local_aws::Policy {
    awsmp_local_aws::Policy::from_yaml(
        "Statement: [{Effect: Allow, Action: \"*\", Resource: \"*\"}]",
    )
    .unwrap()
}

/// What the register role and the profile table's own policies refuse, whatever else
/// IAM grants: the buyer rows to any role but the register function's and
/// `ProfileAccessRoleArn`, every request without TLS, a profile write naming an
/// attribute outside the allowlist, and reading a subscriber row back.
#[test]
fn buyer_profiles_are_closed_to_every_other_principal_and_the_register_role_reads_nothing_back() {
    const ACCESS_ROLE: &str = "arn:aws:iam::123456789012:role/pii-reader";
    const DEPLOYER_ROLE: &str = "arn:aws:iam::123456789012:role/awsmp-cfn";
    let main = StackTemplate::load(
        &workspace_root().join("template-main.yaml"),
        &[
            ("ProductCode", PRODUCT),
            ("StageName", STAGE),
            ("AWS::Region", MAIN_REGION),
            ("ProfileAccessRoleArn", ACCESS_ROLE),
            ("DeployerRoleArn", DEPLOYER_ROLE),
        ],
    )
    .unwrap();
    let policies = resource_policies(&main).unwrap();
    let table = main.attribute("CustomerProfileTable", "Arn").unwrap();
    let key = main.attribute("CustomerProfileKey", "Arn").unwrap();
    let register_role = main.attribute("RegisterRole", "Arn").unwrap();
    let register = function_wiring(&main, "register").unwrap().policy;
    // A developer or CI role with every permission IAM can give.
    let everything = allow_everything();
    let developer = "arn:aws:iam::123456789012:role/developer";
    let request = |action: &str, resource: &str| Authorization::new(action, resource);

    for action in [
        "dynamodb:GetItem",
        "dynamodb:Scan",
        "dynamodb:ExportTableToPointInTime",
    ] {
        assert!(
            matches!(
                decide(&everything, &policies, developer, &request(action, &table)),
                Decision::ExplicitDeny { .. }
            ),
            "{action} by a role with AdministratorAccess must be denied by the table's policy"
        );
        assert!(
            decide(
                &everything,
                &policies,
                ACCESS_ROLE,
                &request(action, &table)
            )
            .is_allowed(),
            "{action} by ProfileAccessRoleArn (with IAM permissions) must be allowed"
        );
    }
    assert!(
        !decide(
            &everything,
            &policies,
            developer,
            &Authorization::via("kms:Decrypt", &key, "dynamodb")
        )
        .is_allowed(),
        "the profile key must not let a role with AdministratorAccess decrypt"
    );
    assert!(
        decide(
            &everything,
            &policies,
            ACCESS_ROLE,
            &Authorization::via("kms:Decrypt", &key, "dynamodb")
        )
        .is_allowed()
    );
    // The deployer selects the key for the table, through DynamoDB only.
    assert!(
        decide(
            &everything,
            &policies,
            DEPLOYER_ROLE,
            &Authorization::via("kms:CreateGrant", &key, "dynamodb")
        )
        .is_allowed()
    );
    let direct = Context::new()
        .with("aws:PrincipalArn", [DEPLOYER_ROLE])
        .with("kms:CallerAccount", ["123456789012"]);
    let key_policy = &policies.iter().find(|p| p.arn == key).unwrap().policy;
    assert!(
        !key_decision(
            key_policy,
            &everything,
            DEPLOYER_ROLE,
            "kms:Decrypt",
            &key,
            &direct
        )
        .is_allowed(),
        "the deployer may not decrypt with the profile key outside DynamoDB"
    );
    // Table management stays with IAM.
    assert!(
        decide(
            &everything,
            &policies,
            developer,
            &request("dynamodb:DescribeTable", &table)
        )
        .is_allowed()
    );
    // Without TLS even the register function is refused.
    let mut write = request("dynamodb:UpdateItem", &table);
    write.attributes = [
        "licenseArn",
        "customerAWSAccountId",
        "productCode",
        "createdAt",
        "updatedAt",
    ]
    .map(str::to_string)
    .to_vec();
    assert!(decide(&register, &policies, &register_role, &write).is_allowed());
    let plain = Context::new()
        .with("aws:SecureTransport", ["false"])
        .with("aws:PrincipalArn", [register_role.clone()]);
    let table_policy = policies.iter().find(|p| p.governs(&table)).unwrap();
    assert!(matches!(
        table_policy
            .policy
            .evaluate_for(&register_role, "dynamodb:UpdateItem", &table, &plain),
        Decision::ExplicitDeny { .. }
    ));
    // An attribute outside the allowlist, or the old row back: refused by the role.
    let mut extra = write.clone();
    extra.attributes.push("isAdmin".to_string());
    assert!(!decide(&register, &policies, &register_role, &extra).is_allowed());
    let mut read_back = write.clone();
    read_back.return_values = Some("ALL_OLD".to_string());
    assert!(!decide(&register, &policies, &register_role, &read_back).is_allowed());
    let subscribers = format!(
        "arn:aws:dynamodb:{SUBSCRIBERS_REGION}:123456789012:table/awsmp-subscribers-{STAGE}"
    );
    let mut add_region = request("dynamodb:UpdateItem", &subscribers);
    add_region.attributes = [
        "licenseArn",
        "customerAWSAccountId",
        "registeredRegions",
        "updatedAt",
    ]
    .map(str::to_string)
    .to_vec();
    assert!(decide(&register, &policies, &register_role, &add_region).is_allowed());
    for returned in ["ALL_NEW", "ALL_OLD", "UPDATED_OLD", "UPDATED_NEW"] {
        let mut read_back = add_region.clone();
        read_back.return_values = Some(returned.to_string());
        assert!(
            !decide(&register, &policies, &register_role, &read_back).is_allowed(),
            "the register role must not read a subscriber row back (ReturnValues {returned})"
        );
    }
}

/// Only the Marketplace events rule (and `EventsQueueAdminRoleArn`) may put a message
/// on the subscription queue, and only the rule (its dead-letter deliveries) on its DLQ,
/// whose depth alarm says redrive: a role with every SQS permission cannot forge a
/// lifecycle event in either, nor can another rule, and nothing reaches them without TLS.
#[test]
fn only_the_marketplace_rule_can_put_a_lifecycle_event_on_the_subscription_queue() {
    const ADMIN: &str = "arn:aws:iam::123456789012:role/queue-admin";
    let everything = allow_everything();
    for admin in [None, Some(ADMIN)] {
        let mut parameters = vec![("StageName", STAGE), ("AWS::Region", SUBSCRIBERS_REGION)];
        parameters.extend(admin.map(|a| ("EventsQueueAdminRoleArn", a)));
        let events =
            StackTemplate::load(&workspace_root().join("template-events.yaml"), &parameters)
                .unwrap();
        let policies = resource_policies(&events).unwrap();
        let rule = events.attribute("MarketplaceEventsRule", "Arn").unwrap();
        for (logical, admin_sends) in [
            ("SubscriptionEventsQueue", admin.is_some()),
            ("SubscriptionEventsDlq", false),
        ] {
            let queue = events.attribute(logical, "Arn").unwrap();
            let queue_policy = policies
                .iter()
                .find(|p| p.governs(&queue))
                .unwrap_or_else(|| panic!("{logical} has a queue policy"));
            let send = |who: &str, identity: &awsmp_local_aws::Policy, context: Context| {
                identity
                    .evaluate_in("sqs:SendMessage", &queue, &context)
                    .with_resource_policy(queue_policy.policy.evaluate_for(
                        who,
                        "sqs:SendMessage",
                        &queue,
                        &context,
                    ))
            };
            let tls = |who: &str| {
                Context::new()
                    .with("aws:SecureTransport", ["true"])
                    .with("aws:PrincipalArn", [who])
            };
            let none = awsmp_local_aws::Policy::default();
            // The rule, through EventBridge (a delivery, or a dead-letter one).
            let from_rule = tls("events.amazonaws.com").with("aws:SourceArn", [rule.clone()]);
            assert!(
                send("events.amazonaws.com", &none, from_rule).is_allowed(),
                "{logical}: the rule's delivery"
            );
            // Another rule of the account, or a role with every permission.
            let other_rule = tls("events.amazonaws.com").with(
                "aws:SourceArn",
                ["arn:aws:events:us-east-1:123456789012:rule/forged"],
            );
            assert!(
                !send("events.amazonaws.com", &none, other_rule).is_allowed(),
                "{logical}: another rule"
            );
            let developer = "arn:aws:iam::123456789012:role/developer";
            assert!(
                matches!(
                    send(developer, &everything, tls(developer)),
                    Decision::ExplicitDeny { .. }
                ),
                "{logical}: a role with every permission must be denied"
            );
            // The admin role, when named, sends to the queue (to redrive), over TLS
            // only; never to the DLQ.
            assert_eq!(
                send(ADMIN, &everything, tls(ADMIN)).is_allowed(),
                admin_sends,
                "{logical}: EventsQueueAdminRoleArn {admin:?}"
            );
            let plain = Context::new()
                .with("aws:SecureTransport", ["false"])
                .with("aws:PrincipalArn", [ADMIN]);
            assert!(!send(ADMIN, &everything, plain).is_allowed());
        }
    }
}

/// The main stack's work queues: only the discoverer sends work (a forged `flush`
/// would fold a locked hour early), only the aggregator sends cleanup, the optional
/// `WorkQueueAdminRoleArn` redrives; nobody sends to a DLQ.
#[test]
fn only_the_pipeline_roles_can_put_work_on_the_pipeline_queues() {
    const ADMIN: &str = "arn:aws:iam::123456789012:role/work-admin";
    let everything = allow_everything();
    for admin in [None, Some(ADMIN)] {
        let mut parameters = vec![
            ("ProductCode", PRODUCT),
            ("StageName", STAGE),
            ("AWS::Region", MAIN_REGION),
        ];
        parameters.extend(admin.map(|a| ("WorkQueueAdminRoleArn", a)));
        let main =
            StackTemplate::load(&workspace_root().join("template-main.yaml"), &parameters).unwrap();
        let policies = resource_policies(&main).unwrap();
        let discoverer = main.attribute("DiscovererRole", "Arn").unwrap();
        let aggregator = main.attribute("AggregatorRole", "Arn").unwrap();
        let developer = "arn:aws:iam::123456789012:role/developer";
        for (queue, sender) in [
            ("WorkQueue", Some(&discoverer)),
            ("DeprovisionWorkQueue", Some(&discoverer)),
            ("CleanupQueue", Some(&aggregator)),
            ("WorkDlq", None),
            ("DeprovisionWorkDlq", None),
            ("CleanupDlq", None),
        ] {
            let arn = main.attribute(queue, "Arn").unwrap();
            let sends = |who: &str| {
                decide(
                    &everything,
                    &policies,
                    who,
                    &Authorization::new("sqs:SendMessage", &arn),
                )
                .is_allowed()
            };
            for who in [&discoverer, &aggregator] {
                assert_eq!(
                    sends(who),
                    sender == Some(who),
                    "{queue}: SendMessage by {who}"
                );
            }
            assert!(
                !sends(developer),
                "{queue}: a role with every permission must not send"
            );
            assert_eq!(
                sends(ADMIN),
                admin.is_some() && sender.is_some(),
                "{queue}: SendMessage by WorkQueueAdminRoleArn {admin:?}"
            );
        }
    }
}

/// What keeps the buyer rows closed can itself be changed only by the deployer: the
/// table's resource policy (put or deleted), a backup (which restores without that
/// policy and the key), the key's policy. A role with every permission IAM can give
/// is refused all of them; `DeployerRoleArn` is not. Without a deployer role (only
/// with ProfileKey=shared: the created key requires one) only CloudFormation, calling
/// with the deployer's credentials, may change the table's policy.
#[test]
fn only_the_deployer_can_change_what_keeps_buyer_profiles_closed() {
    const DEPLOYER_ROLE: &str = "arn:aws:iam::123456789012:role/awsmp-cfn";
    let developer = "arn:aws:iam::123456789012:role/developer";
    let everything = allow_everything();
    let guarded = [
        "dynamodb:PutResourcePolicy",
        "dynamodb:DeleteResourcePolicy",
        "dynamodb:CreateBackup",
        "dynamodb:StartAwsBackupJob",
    ];
    for (profile_key, deployer) in [("create", Some(DEPLOYER_ROLE)), ("shared", None)] {
        let mut parameters = vec![
            ("ProductCode", PRODUCT),
            ("StageName", STAGE),
            ("AWS::Region", MAIN_REGION),
            ("ProfileKey", profile_key),
        ];
        parameters.extend(deployer.map(|d| ("DeployerRoleArn", d)));
        let main =
            StackTemplate::load(&workspace_root().join("template-main.yaml"), &parameters).unwrap();
        let policies = resource_policies(&main).unwrap();
        let table = main.attribute("CustomerProfileTable", "Arn").unwrap();
        let table_policy = &policies.iter().find(|p| p.governs(&table)).unwrap().policy;
        let decide_table = |who: &str, action: &str, context: Context| {
            everything
                .evaluate_in(action, &table, &context)
                .with_resource_policy(table_policy.evaluate_for(who, action, &table, &context))
        };
        let direct = |who: &str| {
            Context::new()
                .with("aws:PrincipalArn", [who])
                .with("aws:SecureTransport", ["true"])
        };
        for action in guarded {
            assert!(
                matches!(
                    decide_table(developer, action, direct(developer)),
                    Decision::ExplicitDeny { .. }
                ),
                "ProfileKey={profile_key}: {action} by a role with AdministratorAccess must be denied"
            );
            let via_cloudformation =
                direct(developer).with("aws:CalledVia", ["cloudformation.amazonaws.com"]);
            assert_eq!(
                decide_table(developer, action, via_cloudformation).is_allowed(),
                deployer.is_none(),
                "ProfileKey={profile_key}: {action} through CloudFormation by another role \
                 (allowed only without DeployerRoleArn)"
            );
            if let Some(deployer) = deployer {
                assert!(
                    decide_table(deployer, action, direct(deployer)).is_allowed(),
                    "{action} by DeployerRoleArn"
                );
            }
        }
        if let Some(deployer) = deployer {
            let key = main.attribute("CustomerProfileKey", "Arn").unwrap();
            let key_policy = &policies.iter().find(|p| p.arn == key).unwrap().policy;
            let put = |who: &str| {
                key_decision(
                    key_policy,
                    &everything,
                    who,
                    "kms:PutKeyPolicy",
                    &key,
                    &direct(who),
                )
                .is_allowed()
            };
            assert!(
                !put(developer),
                "kms:PutKeyPolicy on the profile key by a role with AdministratorAccess"
            );
            assert!(put(deployer), "kms:PutKeyPolicy by DeployerRoleArn");
        }
    }
}

/// Only the role of `function` may put `source` on the default bus (the bus policy
/// statement the stack adds): a role with every permission cannot forge an event a
/// consumer would act on, and may still put its own sources.
fn only_its_role_puts(template: &StackTemplate, region: &str, role: &str, source: &str) {
    let everything = allow_everything();
    let policies = resource_policies(template).unwrap();
    let bus = format!("arn:aws:events:{region}:{DEFAULT_ACCOUNT}:event-bus/default");
    let bus_policy = &policies
        .iter()
        .find(|p| p.governs(&bus))
        .expect("the stack adds a statement to the default bus's policy")
        .policy;
    let its_role = template.attribute(role, "Arn").unwrap();
    let put = |who: &str, source: &str| {
        let context = Context::new()
            .with("aws:PrincipalArn", [who])
            .with("events:source", [source]);
        everything
            .evaluate_in("events:PutEvents", &bus, &context)
            .with_resource_policy(bus_policy.evaluate_for(who, "events:PutEvents", &bus, &context))
    };
    let developer = "arn:aws:iam::123456789012:role/developer";
    assert!(matches!(
        put(developer, source),
        Decision::ExplicitDeny { .. }
    ));
    assert!(put(developer, "my.app").is_allowed());
    assert!(
        put(&its_role, source).is_allowed(),
        "{its_role} must put {source}"
    );
}

/// Only an outcome-events role may put `source: awsmp.metering` on the default bus:
/// nobody forges an outcome a consumer would move money on.
#[test]
fn only_the_outcome_events_role_can_put_the_products_source_on_the_default_bus() {
    let main = StackTemplate::load(
        &workspace_root().join("template-main.yaml"),
        &[
            ("ProductCode", PRODUCT),
            ("StageName", STAGE),
            ("AWS::Region", MAIN_REGION),
            ("OutcomeEvents", "enabled"),
        ],
    )
    .unwrap();
    only_its_role_puts(&main, MAIN_REGION, "OutcomeEventsRole", "awsmp.metering");
}

/// Only the buyer-events role may put `source: awsmp.buyers` on us-east-1's default
/// bus: nobody forges a registration a seller's provisioning would act on.
#[test]
fn only_the_buyer_events_role_can_put_the_buyers_source_on_the_default_bus() {
    let events = StackTemplate::load(
        &workspace_root().join("template-events.yaml"),
        &[
            ("StageName", STAGE),
            ("AWS::Region", SUBSCRIBERS_REGION),
            ("BuyerEvents", "enabled"),
        ],
    )
    .unwrap();
    only_its_role_puts(
        &events,
        SUBSCRIBERS_REGION,
        "BuyerEventsRole",
        "awsmp.buyers",
    );
}

/// The registration page's files are code every buyer's browser runs: the page bucket
/// takes object writes and deletes only from `PagePublisherArn` (what deploy.sh runs
/// as) and `DeployerRoleArn`, whatever else a principal of the account may do; and
/// nothing at all over plain HTTP. Without either ARN, IAM alone decides.
#[test]
fn only_the_pages_publisher_and_the_deployer_write_the_page_bucket() {
    const PUBLISHER: &str = "arn:aws:iam::123456789012:user/alice";
    const DEPLOYER: &str = "arn:aws:iam::123456789012:role/awsmp-cfn";
    let developer = "arn:aws:iam::123456789012:role/developer";
    let everything = allow_everything();
    for (publisher, deployer) in [
        (Some(PUBLISHER), None),
        (None, Some(DEPLOYER)),
        (Some(PUBLISHER), Some(DEPLOYER)),
        (None, None),
    ] {
        let mut parameters = vec![
            ("ProductCode", PRODUCT),
            ("StageName", STAGE),
            ("AWS::Region", MAIN_REGION),
            // ProfileKey=create needs a deployer role; shared leaves it optional.
            ("ProfileKey", "shared"),
        ];
        parameters.extend(publisher.map(|p| ("PagePublisherArn", p)));
        parameters.extend(deployer.map(|d| ("DeployerRoleArn", d)));
        let main =
            StackTemplate::load(&workspace_root().join("template-main.yaml"), &parameters).unwrap();
        let policies = resource_policies(&main).unwrap();
        let bucket = main.attribute("PageBucket", "Arn").unwrap();
        let object = format!("{bucket}/app.js");
        let tls = |who: &str| {
            Context::new()
                .with("aws:SecureTransport", ["true"])
                .with("aws:PrincipalArn", [who])
        };
        let page_policy = policies
            .iter()
            .find(|p| p.logical_id == "PageBucketPolicy" && p.governs(&object))
            .expect("the page bucket's policy governs its objects");
        let decide_in = |who: &str, action: &str, context: Context| {
            everything
                .evaluate_in(action, &object, &context)
                .with_resource_policy(
                    page_policy
                        .policy
                        .evaluate_for(who, action, &object, &context),
                )
                .is_allowed()
        };
        let may = |who: &str, action: &str| decide_in(who, action, tls(who));
        let guarded = publisher.is_some() || deployer.is_some();
        for action in [
            "s3:PutObject",
            "s3:DeleteObject",
            "s3:PutObjectAcl",
            "s3:DeleteObjectVersion",
        ] {
            assert_eq!(
                may(developer, action),
                !guarded,
                "{action} by a role with every permission ({publisher:?}, {deployer:?})"
            );
            for (named, who) in [(publisher, PUBLISHER), (deployer, DEPLOYER)] {
                if named.is_some() {
                    assert!(may(who, action), "{action} by {who}");
                }
            }
        }
        // Reading stays IAM's (CloudFront reads through its own statement).
        assert!(may(developer, "s3:GetObject"));
        // Plain HTTP: refused to everyone, the publisher too.
        let plain = Context::new()
            .with("aws:SecureTransport", ["false"])
            .with("aws:PrincipalArn", [PUBLISHER]);
        assert!(!decide_in(PUBLISHER, "s3:PutObject", plain));
    }
}

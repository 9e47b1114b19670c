//! `GET /subscriptions/{licenseArn}`: every answer the entitlement route gives (each
//! `usage`, each refusal, the store's failures), for the document to be held against.

use super::*;

fn get_subscription(license: &str, account: Option<&str>) -> ApiGatewayProxyRequest {
    let mut request = request(
        Method::GET,
        &format!(
            "/subscriptions/{}",
            license.replace(':', "%3A").replace('/', "%2F")
        ),
        None,
        "",
    );
    if let Some(account) = account {
        request.query_string_parameters = QueryMap::from(HashMap::from([(
            "customerAWSAccountId".to_string(),
            account.to_string(),
        )]));
    }
    request
}

/// Runs every entitlement case into `cases`, on its own subscribers store beside `tables`.
pub(super) async fn answer_every_entitlement(cases: &mut Cases, tables: &MemoryTables) {
    let subscribers = Arc::new(MemorySubscriberStore::new());
    let entitled = state_with(tables, DeploymentMode::Full, subscribers.clone());
    let now = parse_usage_timestamp(NOW).unwrap();
    for (license, status, expiry) in [
        (LICENSE, Some(SubscriptionStatus::Active), None),
        (
            "arn:aws:license-manager::123456789012:license:l-deprovisioning",
            Some(SubscriptionStatus::Deprovisioning),
            parse_usage_timestamp("2026-12-03T11:20:00Z").ok(),
        ),
        (
            "arn:aws:license-manager::123456789012:license:l-late",
            Some(SubscriptionStatus::Deprovisioning),
            parse_usage_timestamp("2026-12-03T10:35:00Z").ok(),
        ),
        (
            "arn:aws:license-manager::123456789012:license:l-inactive",
            Some(SubscriptionStatus::Inactive),
            None,
        ),
        (
            "arn:aws:license-manager::123456789012:license:l-pending",
            None,
            None,
        ),
    ] {
        let mut row = Subscriber::new(license, ACCOUNT);
        row.subscription_status = status;
        row.deprovisioning_expiry = expiry;
        row.agreement_id = Some("agmt-1".into());
        row.agreement_status = Some(AgreementStatus::Active);
        row.product_code = Some(PRODUCT.into());
        row.registered_regions = vec!["us-east-1".into()];
        subscribers.insert(row, now);
        let body = cases
            .run(
                &entitled,
                &format!("GET subscription {status:?}"),
                SUBSCRIPTION,
                get_subscription(license, Some(ACCOUNT)),
                None,
            )
            .await;
        assert_eq!(body["licenseArn"], license, "{body}");
    }
    let mut second = Subscriber::new(LICENSE, "444455556666");
    second.subscription_status = Some(SubscriptionStatus::Active);
    subscribers.insert(second, now);
    let body = cases
        .run(
            &entitled,
            "GET subscription ambiguous",
            SUBSCRIPTION,
            get_subscription(LICENSE, None),
            None,
        )
        .await;
    assert_eq!(body["code"], "AmbiguousLicense", "{body}");
    cases
        .run(
            &entitled,
            "GET subscription bad account",
            SUBSCRIPTION,
            get_subscription(LICENSE, Some("1234")),
            None,
        )
        .await;
    cases
        .run(
            &entitled,
            "GET /subscriptions/ (no license: not routed)",
            None,
            request(Method::GET, "/subscriptions/", None, ""),
            None,
        )
        .await;
    cases
        .run(
            &entitled,
            "GET subscription unknown",
            SUBSCRIPTION,
            get_subscription(LICENSE, Some("999999999999")),
            None,
        )
        .await;
    subscribers.fail_next(StoreOp::SubscriberGet, failed());
    cases
        .run(
            &entitled,
            "GET subscription store failed",
            SUBSCRIPTION,
            get_subscription(LICENSE, Some(ACCOUNT)),
            None,
        )
        .await;
    subscribers.fail_next(StoreOp::SubscriberGet, transient());
    cases
        .run(
            &entitled,
            "GET subscription throttled",
            SUBSCRIPTION,
            get_subscription(LICENSE, Some(ACCOUNT)),
            None,
        )
        .await;
}

//! Reading Marketplace's EventBridge events: every documented shape and every malformed one.

use super::*;
use crate::lifecycle::fixtures::*;
use serde_json::json;

/// An EventBridge event shaped exactly like AWS's examples.
fn envelope(detail_type: &str, time: &str, detail: Value) -> Value {
    json!({
        "version": "0",
        "id": "12345678-1234-1234-1234-123456789012",
        "detail-type": detail_type,
        "source": "aws.agreement-marketplace",
        "account": "123456789012",
        "time": time,
        "region": "us-east-1",
        "resources": ["arn:aws:aws-marketplace::aws:agreement:agmt-4mwg1nevbokzw95eca5797ixs"],
        "detail": detail,
    })
}

fn license_detail(arn: &str) -> Value {
    json!({
        "requestId": "3d4c9f9b-b809-4f5e-9fac-a9ae98b05cbb",
        "catalog": "AWSMarketplace",
        "agreement": {"id": AGREEMENT},
        "product": {"code": PRODUCT, "id": "prod-qtwveEXAMPLE"},
        "license": {"arn": arn},
        "acceptor": {"accountId": ACCOUNT},
        "proposer": {"accountId": "123456512334"},
        "offer": {"id": "8kkr91jo647j3qxlcjhlqce7y"}
    })
}

fn ended_detail() -> Value {
    json!({
        "requestId": "3d4c9f9b-b809-4f5e-9fac-a9ae98b05cbb",
        "catalog": "AWSMarketplace",
        "agreement": {"id": AGREEMENT, "status": "CANCELLED"},
        "resaleAuthorization": {"id": "resaleauthz-yaxjqxiskysxa"},
        "acceptor": {"accountId": ACCOUNT},
        "proposer": {"accountId": "123456512334"},
        "offer": {"id": "offer-1234567890123"}
    })
}

#[test]
fn parses_every_aws_example_shape() {
    let aws_arn = "aws:license-manager:us-east-1:123456789012:l-e52ca6f38bf84d0fafb8802ca15ac11x";
    let normalised = format!("arn:{aws_arn}");
    let cases: Vec<(Value, MarketplaceEvent)> = vec![
        (
            envelope(
                "License Updated - Manufacturer",
                "2024-08-30T21:36:03Z",
                license_detail(aws_arn),
            ),
            MarketplaceEvent::LicenseUpdated {
                license_arn: normalised.clone(),
                account: ACCOUNT.into(),
                product_code: Some(PRODUCT.into()),
                agreement_id: AGREEMENT.into(),
                time: t("2024-08-30T21:36:03Z"),
            },
        ),
        (
            envelope(
                "License Deprovisioned - Manufacturer",
                "2024-08-30T21:36:03Z",
                license_detail(LICENSE),
            ),
            MarketplaceEvent::LicenseDeprovisioned {
                license_arn: LICENSE.into(),
                account: ACCOUNT.into(),
                product_code: Some(PRODUCT.into()),
                agreement_id: AGREEMENT.into(),
                time: t("2024-08-30T21:36:03Z"),
            },
        ),
        (
            // Not documented by AWS and not matched by the events rule: ignored.
            envelope(
                "License Updated - Proposer",
                "2024-08-30T21:36:03Z",
                license_detail(LICENSE),
            ),
            MarketplaceEvent::Ignored {
                detail_type: "License Updated - Proposer".into(),
            },
        ),
        (
            envelope(
                "License Deprovisioned - Proposer",
                "2024-08-30T21:36:03Z",
                license_detail(LICENSE),
            ),
            MarketplaceEvent::Ignored {
                detail_type: "License Deprovisioned - Proposer".into(),
            },
        ),
        (
            envelope(
                "Purchase Agreement Ended - Manufacturer",
                "2024-08-30T21:36:03Z",
                ended_detail(),
            ),
            ended("2024-08-30T21:36:03Z"),
        ),
        (
            envelope(
                "Purchase Agreement Ended - Proposer",
                "2024-08-30T21:36:03Z",
                ended_detail(),
            ),
            ended("2024-08-30T21:36:03Z"),
        ),
        (
            envelope(
                "Purchase Agreement Amended - Manufacturer",
                "2024-08-30T21:36:03Z",
                ended_detail(),
            ),
            amended("2024-08-30T21:36:03Z"),
        ),
        (
            envelope(
                "Purchase Agreement Amended - Proposer",
                "2024-08-30T21:36:03Z",
                ended_detail(),
            ),
            amended("2024-08-30T21:36:03Z"),
        ),
        (
            envelope(
                "Purchase Agreement Created - Proposer",
                "2024-08-30T21:36:03Z",
                ended_detail(),
            ),
            MarketplaceEvent::Ignored {
                detail_type: "Purchase Agreement Created - Proposer".into(),
            },
        ),
        (
            // Ignored events are not validated further: no detail at all is fine.
            json!({"source": "aws.agreement-marketplace", "detail-type": "Purchase Agreement Created - Manufacturer"}),
            MarketplaceEvent::Ignored {
                detail_type: "Purchase Agreement Created - Manufacturer".into(),
            },
        ),
        (
            json!({"source": "aws.agreement-marketplace", "detail-type": "Something New - Manufacturer"}),
            MarketplaceEvent::Ignored {
                detail_type: "Something New - Manufacturer".into(),
            },
        ),
    ];
    for (json, expected) in cases {
        assert_eq!(
            MarketplaceEvent::from_json(&json).unwrap(),
            expected,
            "{json}"
        );
    }
}

#[test]
fn exactly_the_consumed_detail_types_are_not_ignored() {
    let candidates = [
        "License Updated - Manufacturer",
        "License Updated - Proposer",
        "License Deprovisioned - Manufacturer",
        "License Deprovisioned - Proposer",
        "Purchase Agreement Created - Manufacturer",
        "Purchase Agreement Created - Proposer",
        "Purchase Agreement Amended - Manufacturer",
        "Purchase Agreement Amended - Proposer",
        "Purchase Agreement Ended - Manufacturer",
        "Purchase Agreement Ended - Proposer",
    ];
    let mut detail = license_detail(LICENSE);
    detail["agreement"]["status"] = json!("CANCELLED");
    let consumed: Vec<&str> = candidates
        .into_iter()
        .filter(|detail_type| {
            let event = envelope(detail_type, "2024-08-30T21:36:03Z", detail.clone());
            !matches!(
                MarketplaceEvent::from_json(&event).unwrap(),
                MarketplaceEvent::Ignored { .. }
            )
        })
        .collect();
    assert_eq!(consumed, sorted_like(&CONSUMED_DETAIL_TYPES, &candidates));
}

/// `set` in the order of `order`.
fn sorted_like<'a>(set: &[&'a str], order: &[&str]) -> Vec<&'a str> {
    let mut out: Vec<&str> = set.to_vec();
    out.sort_by_key(|d| order.iter().position(|o| o == d));
    out
}

#[test]
fn parses_from_text_and_truncates_fractional_time() {
    let mut event = envelope(
        "License Updated - Manufacturer",
        "2024-08-30T21:36:03.789Z",
        license_detail(LICENSE),
    );
    let parsed = MarketplaceEvent::from_json_str(&event.to_string()).unwrap();
    assert_eq!(parsed, updated("2024-08-30T21:36:03Z"));
    event["time"] = json!("2024-08-30T23:36:03+02:00");
    assert_eq!(
        MarketplaceEvent::from_json(&event).unwrap(),
        updated("2024-08-30T21:36:03Z")
    );
    // A license event without a product code still parses.
    event["detail"]["product"] = Value::Null;
    let MarketplaceEvent::LicenseUpdated { product_code, .. } =
        MarketplaceEvent::from_json(&event).unwrap()
    else {
        panic!("not License Updated");
    };
    assert_eq!(product_code, None);
}

#[test]
fn rejects_bad_events_with_specific_errors() {
    let good = envelope(
        "License Updated - Manufacturer",
        "2024-08-30T21:36:03Z",
        license_detail(LICENSE),
    );
    let with = |pointer: &str, value: Value| {
        let mut event = good.clone();
        *event.pointer_mut(pointer).unwrap() = value;
        event
    };
    let ended_event = envelope(
        "Purchase Agreement Ended - Proposer",
        "2024-08-30T21:36:03Z",
        ended_detail(),
    );
    let lu = "License Updated - Manufacturer".to_string();
    let cases: Vec<(Value, EventParseError)> = vec![
        (json!([1, 2]), EventParseError::NotAnObject),
        (
            with("/source", json!("aws.marketplace")),
            EventParseError::WrongSource {
                found: Some("aws.marketplace".into()),
            },
        ),
        (
            with("/source", Value::Null),
            EventParseError::WrongSource { found: None },
        ),
        (
            with("/detail-type", json!("")),
            EventParseError::MissingDetailType,
        ),
        (
            with("/detail-type", json!(7)),
            EventParseError::MissingDetailType,
        ),
        (
            with("/detail/license", json!({})),
            EventParseError::MissingLicenseArn {
                detail_type: lu.clone(),
            },
        ),
        (
            with("/detail/license/arn", json!("  ")),
            EventParseError::MissingLicenseArn {
                detail_type: lu.clone(),
            },
        ),
        (
            with("/detail/acceptor", Value::Null),
            EventParseError::MissingAcceptorAccount {
                detail_type: lu.clone(),
            },
        ),
        (
            with("/detail/acceptor/accountId", json!("84573528413")),
            EventParseError::InvalidAcceptorAccount {
                detail_type: lu.clone(),
                value: "84573528413".into(),
            },
        ),
        (
            with("/detail/agreement", json!({})),
            EventParseError::MissingAgreementId {
                detail_type: lu.clone(),
            },
        ),
        (
            with("/time", Value::Null),
            EventParseError::MissingTime {
                detail_type: lu.clone(),
            },
        ),
        (
            with("/time", json!("2024-08-30 21:36:03")),
            EventParseError::BadTime {
                detail_type: lu.clone(),
                value: "2024-08-30 21:36:03".into(),
            },
        ),
        (
            {
                let mut e = ended_event.clone();
                e["detail"]["agreement"] = json!({"status": "CANCELLED"});
                e
            },
            EventParseError::MissingAgreementId {
                detail_type: "Purchase Agreement Ended - Proposer".into(),
            },
        ),
    ];
    for (json, expected) in cases {
        assert_eq!(
            MarketplaceEvent::from_json(&json).unwrap_err(),
            expected,
            "{json}"
        );
    }
    assert!(matches!(
        MarketplaceEvent::from_json_str("{"),
        Err(EventParseError::NotJson(_))
    ));
    let message = EventParseError::MissingLicenseArn { detail_type: lu }.to_string();
    assert_eq!(
        message,
        "License Updated - Manufacturer event has no detail.license.arn"
    );
}

#[test]
fn license_arns_without_the_arn_prefix_are_normalised() {
    let cases = [
        (
            "aws:license-manager:us-east-1:123456789012:l-abc",
            "arn:aws:license-manager:us-east-1:123456789012:l-abc",
        ),
        (
            "arn:aws:license-manager::123456789012:license:l-abc",
            "arn:aws:license-manager::123456789012:license:l-abc",
        ),
        (
            "aws-us-gov:license-manager::123456789012:license:l-abc",
            "arn:aws-us-gov:license-manager::123456789012:license:l-abc",
        ),
        (" arn:aws:x ", "arn:aws:x"),
    ];
    for (input, expected) in cases {
        assert_eq!(normalize_license_arn(input), expected);
    }
}

#[test]
fn targets_name_the_rows_to_load() {
    assert_eq!(
        updated("2026-11-30T10:00:00Z").target(),
        EventTarget::Row {
            license_arn: LICENSE,
            account: ACCOUNT
        }
    );
    assert_eq!(
        ended("2026-11-30T10:00:00Z").target(),
        EventTarget::Agreement {
            agreement_id: AGREEMENT
        }
    );
    assert_eq!(
        MarketplaceEvent::Ignored {
            detail_type: "x".into()
        }
        .target(),
        EventTarget::Nothing
    );
    assert_eq!(
        deprovisioned("2026-11-30T10:00:00Z").name(),
        "License Deprovisioned"
    );
}

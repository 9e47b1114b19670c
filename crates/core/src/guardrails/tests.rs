//! Every guardrail check, each with the rows it accepts and the reason code of each it rejects.

use super::fixtures::*;
use super::*;

fn map(fields: &[(&str, Attr)]) -> Attr {
    Attr::M(
        fields
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect(),
    )
}

fn tag_attr(key: &str, value: &str) -> Attr {
    map(&[("key", s(key)), ("value", s(value))])
}

fn alloc_attr(quantity: &str, tags: Vec<Attr>) -> Attr {
    map(&[
        ("allocatedUsageQuantity", n(quantity)),
        ("tags", Attr::L(tags)),
    ])
}

fn good() -> RawUsageRow {
    row_at("requests", TS, "10")
}

fn with(mut row: RawUsageRow, name: &str, value: Option<Attr>) -> RawUsageRow {
    match value {
        Some(v) => row.attrs.insert(name.to_string(), v),
        None => row.attrs.remove(name),
    };
    row
}

fn with_allocs(row: RawUsageRow, allocations: Vec<Attr>) -> RawUsageRow {
    with(row, attr::USAGE_ALLOCATIONS, Some(Attr::L(allocations)))
}

fn with_key(mut row: RawUsageRow, sort_key: &str) -> RawUsageRow {
    row.sort_key = sort_key.to_string();
    row
}

fn with_license(mut row: RawUsageRow, license: &str) -> RawUsageRow {
    row.license_arn = license.to_string();
    row
}

/// Six tags `k0..k5`.
fn six_tags() -> Vec<Attr> {
    (0..6).map(|i| tag_attr(&format!("k{i}"), "v")).collect()
}

#[test]
fn license_arn_pattern_compiles() {
    assert!(Regex::new(LICENSE_ARN_PATTERN).is_ok());
    assert!(LICENSE_ARN.is_match(LICENSE));
}

#[test]
fn good_row_is_typed_exactly() {
    let row = with_allocs(
        good(),
        vec![
            alloc_attr("7", vec![tag_attr("team", "a"), tag_attr("env", "prod")]),
            alloc_attr("3", vec![]),
        ],
    );
    let row = with(row, attr::PRODUCT_CODE, Some(s(PRODUCT)));
    let valid = validate_row(&row, &ctx()).unwrap();
    assert_eq!(valid.license_arn, LICENSE);
    assert_eq!(valid.sort_key, format!("{ACCOUNT}#requests#{TS}"));
    assert_eq!(valid.customer_aws_account_id, ACCOUNT);
    assert_eq!(valid.dimension, "requests");
    assert_eq!(valid.timestamp, instant(TS));
    assert_eq!(valid.quantity, 10);
    assert_eq!(valid.product_code.as_deref(), Some(PRODUCT));
    let allocations = valid.allocations.unwrap();
    assert_eq!(allocations[0].quantity, 7);
    assert_eq!(
        allocations[0].tags[0].key, "team",
        "tags keep the seller's order"
    );
    assert_eq!(allocations[1].tags, vec![]);
}

/// Every reason code: at least one failing input, and a passing neighbour that
/// differs only in the checked field. Each check's cases vary one input of
/// [`good`], so they are listed as that input and built by one function.
#[test]
fn every_reason_code_passes_and_fails() {
    use ReasonCode as R;
    type Want = Result<(), ReasonCode>;
    let too_long_key = "k".repeat(MAX_TAG_KEY_LEN + 1);
    let too_long_value = "v".repeat(MAX_TAG_VALUE_LEN + 1);
    let longest_key = "k".repeat(MAX_TAG_KEY_LEN);
    let longest_value = "v".repeat(MAX_TAG_VALUE_LEN);
    let mut cases: Vec<(&str, RawUsageRow, Want)> = Vec::new();
    fn vary<'a>(
        cases: &mut Vec<(&'a str, RawUsageRow, Want)>,
        built: impl Fn(&str) -> RawUsageRow,
        varied: &[(&'a str, &str, Want)],
    ) {
        for (name, input, want) in varied {
            cases.push((name, built(input), *want));
        }
    }
    // 1 InvalidLicenseArn
    vary(
        &mut cases,
        |arn| with_license(good(), arn),
        &[
            ("license arn ok", LICENSE, Ok(())),
            (
                "license arn in another partition",
                "arn:aws-us-gov:license-manager:us-gov-west-1:123456789012:license:l-1",
                Ok(()),
            ),
            (
                "license arn not license manager",
                "arn:aws:s3:::123456789012:license:l-1",
                Err(R::InvalidLicenseArn),
            ),
            (
                "license arn without arn: prefix",
                "aws:license-manager:us-east-1:123456789012:l-e52c",
                Err(R::InvalidLicenseArn),
            ),
            (
                "license arn short account",
                "arn:aws:license-manager::12345678901:license:l-1",
                Err(R::InvalidLicenseArn),
            ),
            (
                "license arn empty id",
                "arn:aws:license-manager::123456789012:license:",
                Err(R::InvalidLicenseArn),
            ),
            ("license arn empty", "", Err(R::InvalidLicenseArn)),
        ],
    );
    // 2 MalformedSortKey; 6 SortKeyMismatch
    let key_with_suffix = format!("{ACCOUNT}#requests#{TS}#evt-1");
    let two_parts = format!("{ACCOUNT}#{TS}");
    let empty_account = format!("#requests#{TS}");
    let empty_suffix = format!("{ACCOUNT}#requests#{TS}#");
    let other_account = format!("999988887777#requests#{TS}");
    let other_dimension = format!("{ACCOUNT}#storage#{TS}");
    let other_second = format!("{ACCOUNT}#requests#2026-11-30T09:15:43Z");
    let garbage_timestamp = format!("{ACCOUNT}#requests#later");
    vary(
        &mut cases,
        |key| with_key(good(), key),
        &[
            ("sort key with event id suffix", &key_with_suffix, Ok(())),
            (
                "sort key no separators",
                "111122223333",
                Err(R::MalformedSortKey),
            ),
            ("sort key two parts", &two_parts, Err(R::MalformedSortKey)),
            (
                "sort key empty account",
                &empty_account,
                Err(R::MalformedSortKey),
            ),
            (
                "sort key empty suffix",
                &empty_suffix,
                Err(R::MalformedSortKey),
            ),
            ("sort key empty", "", Err(R::MalformedSortKey)),
            (
                "key of another account",
                &other_account,
                Err(R::SortKeyMismatch),
            ),
            (
                "key of another dimension",
                &other_dimension,
                Err(R::SortKeyMismatch),
            ),
            (
                "key of another second",
                &other_second,
                Err(R::SortKeyMismatch),
            ),
            (
                "key with garbage timestamp",
                &garbage_timestamp,
                Err(R::SortKeyMismatch),
            ),
        ],
    );
    // 3 MissingCustomerAWSAccountId: an account the key agrees with
    vary(
        &mut cases,
        |account| {
            with_key(
                with(good(), attr::CUSTOMER_ACCOUNT, Some(s(account))),
                &format!("{account}#requests#{TS}"),
            )
        },
        &[
            (
                "account 11 digits",
                "11112222333",
                Err(R::MissingCustomerAWSAccountId),
            ),
            (
                "account with letters",
                "11112222333a",
                Err(R::MissingCustomerAWSAccountId),
            ),
        ],
    );
    // 4 MissingDimension, 5 MalformedTimestamp, 6 SortKeyMismatch: a row's own
    // dimension and timestamp
    vary(
        &mut cases,
        |dimension| row_at(dimension, TS, "1"),
        &[("dimension containing #", "tier#gold", Ok(()))],
    );
    vary(
        &mut cases,
        |timestamp| row_at("requests", timestamp, "1"),
        &[
            ("timestamp without Z", "2026-11-30T09:15:42", Ok(())),
            (
                "timestamp with fraction",
                "2026-11-30T09:15:42.5Z",
                Err(R::MalformedTimestamp),
            ),
            (
                "timestamp with offset",
                "2026-11-30T09:15:42+00:00",
                Err(R::MalformedTimestamp),
            ),
            (
                "timestamp not a date",
                "2026-02-30T09:15:42Z",
                Err(R::MalformedTimestamp),
            ),
            // 11 TimestampInFuture
            ("timestamp exactly now", NOW, Ok(())),
            (
                "timestamp a second ahead",
                "2026-11-30T10:30:01Z",
                Err(R::TimestampInFuture),
            ),
            // 12 TimestampOutOfWindow
            ("timestamp 24h minus 1s ago", "2026-11-29T10:30:01Z", Ok(())),
            (
                "timestamp exactly 24h ago",
                "2026-11-29T10:30:00Z",
                Err(R::TimestampOutOfWindow),
            ),
            (
                "timestamp 30h ago",
                "2026-11-29T04:30:00Z",
                Err(R::TimestampOutOfWindow),
            ),
        ],
    );
    // 7 NonNumericQuantity .. 10 QuantityTooLarge: the quantity's number text
    vary(
        &mut cases,
        |quantity| row_at("requests", TS, quantity),
        &[
            ("quantity zero", "0", Ok(())),
            (
                "quantity text not a number",
                "ten",
                Err(R::NonNumericQuantity),
            ),
            ("quantity with spaces", " 10", Err(R::NonNumericQuantity)),
            ("quantity NaN", "NaN", Err(R::NonNumericQuantity)),
            ("quantity lone dot", ".", Err(R::NonNumericQuantity)),
            ("quantity bad exponent", "1e", Err(R::NonNumericQuantity)),
            // 8 NonIntegerQuantity
            ("quantity 2.0 is an integer", "2.0", Ok(())),
            ("quantity 1.5e1 is an integer", "1.5e1", Ok(())),
            ("quantity 1.5", "1.5", Err(R::NonIntegerQuantity)),
            (
                "quantity 2147483647.5 (float would round)",
                "2147483647.5",
                Err(R::NonIntegerQuantity),
            ),
            ("quantity 15e-1", "15e-1", Err(R::NonIntegerQuantity)),
            (
                "quantity -0.5 (fraction checked first)",
                "-0.5",
                Err(R::NonIntegerQuantity),
            ),
            // 9 NegativeQuantity
            ("quantity -0", "-0", Ok(())),
            ("quantity -1", "-1", Err(R::NegativeQuantity)),
            ("quantity -1e20", "-1e20", Err(R::NegativeQuantity)),
            // 10 QuantityTooLarge
            ("quantity at the cap", "2147483647", Ok(())),
            (
                "quantity over the cap",
                "2147483648",
                Err(R::QuantityTooLarge),
            ),
            (
                "quantity huge exponent",
                "1e999999999999",
                Err(R::QuantityTooLarge),
            ),
            (
                "quantity 38 digits",
                "12345678901234567890123456789012345678",
                Err(R::QuantityTooLarge),
            ),
        ],
    );
    // Attributes of other types than the check reads, or none at all
    let attribute_cases: Vec<(&str, &str, Option<Attr>, Want)> = vec![
        // 3 MissingCustomerAWSAccountId
        (
            "account missing",
            attr::CUSTOMER_ACCOUNT,
            None,
            Err(R::MissingCustomerAWSAccountId),
        ),
        (
            "account as number",
            attr::CUSTOMER_ACCOUNT,
            Some(n(ACCOUNT)),
            Err(R::MissingCustomerAWSAccountId),
        ),
        // 4 MissingDimension
        (
            "dimension missing",
            attr::DIMENSION,
            None,
            Err(R::MissingDimension),
        ),
        (
            "dimension empty",
            attr::DIMENSION,
            Some(s("")),
            Err(R::MissingDimension),
        ),
        (
            "dimension as list",
            attr::DIMENSION,
            Some(Attr::L(vec![])),
            Err(R::MissingDimension),
        ),
        // 5 MalformedTimestamp
        (
            "timestamp missing",
            attr::TIMESTAMP,
            None,
            Err(R::MalformedTimestamp),
        ),
        (
            "timestamp as epoch number",
            attr::TIMESTAMP,
            Some(n("1764494142")),
            Err(R::MalformedTimestamp),
        ),
        // 7 NonNumericQuantity
        (
            "quantity missing",
            attr::QUANTITY,
            None,
            Err(R::NonNumericQuantity),
        ),
        (
            "quantity as string",
            attr::QUANTITY,
            Some(s("10")),
            Err(R::NonNumericQuantity),
        ),
        // 13 ProductCodeMismatch
        (
            "product code NULL",
            attr::PRODUCT_CODE,
            Some(Attr::Null),
            Ok(()),
        ),
        (
            "product code of another product",
            attr::PRODUCT_CODE,
            Some(s("prod-other")),
            Err(R::ProductCodeMismatch),
        ),
        (
            "product code empty",
            attr::PRODUCT_CODE,
            Some(s("")),
            Err(R::ProductCodeMismatch),
        ),
        (
            "product code as number",
            attr::PRODUCT_CODE,
            Some(n("1")),
            Err(R::ProductCodeMismatch),
        ),
        // 14 MalformedAllocations
        (
            "allocations NULL",
            attr::USAGE_ALLOCATIONS,
            Some(Attr::Null),
            Ok(()),
        ),
        (
            "allocations a map",
            attr::USAGE_ALLOCATIONS,
            Some(map(&[])),
            Err(R::MalformedAllocations),
        ),
        // 20 ReservedAttribute: whatever its type, the seller's TTL could delete it
        (
            "expiresAt set by the writer",
            attr::EXPIRES_AT,
            Some(Attr::N("1893456000".into())),
            Err(R::ReservedAttribute),
        ),
        (
            "expiresAt of another type",
            attr::EXPIRES_AT,
            Some(Attr::S("soon".into())),
            Err(R::ReservedAttribute),
        ),
    ];
    for (name, field, value, want) in attribute_cases {
        cases.push((name, with(good(), field, value), want));
    }
    // 6 SortKeyMismatch between a key and attributes that are each well formed
    cases.push((
        "key Z differs from attribute",
        with_key(
            row_at("requests", "2026-11-30T09:15:42", "1"),
            &format!("{ACCOUNT}#requests#{TS}"),
        ),
        Ok(()),
    ));
    cases.push((
        "dimension attribute a prefix of the key's",
        with(
            row_at("tier#gold", TS, "1"),
            attr::DIMENSION,
            Some(s("tier")),
        ),
        Err(R::SortKeyMismatch),
    ));
    // 14..19: the row's `usageAllocations` list
    let quantity = |q: &str| map(&[("allocatedUsageQuantity", n(q))]);
    let tags_field = |tags: Attr| map(&[("allocatedUsageQuantity", n("10")), ("tags", tags)]);
    let team = |value: &str| tag_attr("team", value);
    let allocation_cases: Vec<(&str, Vec<Attr>, Want)> = vec![
        // 14 MalformedAllocations
        (
            "allocation without tags field",
            vec![quantity("10")],
            Ok(()),
        ),
        (
            "allocations empty list",
            vec![],
            Err(R::MalformedAllocations),
        ),
        (
            "allocation not a map",
            vec![n("10")],
            Err(R::MalformedAllocations),
        ),
        (
            "allocation quantity missing",
            vec![map(&[("tags", Attr::L(vec![]))])],
            Err(R::MalformedAllocations),
        ),
        (
            "allocation quantity a string",
            vec![map(&[("allocatedUsageQuantity", s("10"))])],
            Err(R::MalformedAllocations),
        ),
        (
            "allocation quantity not numeric",
            vec![alloc_attr("x", vec![])],
            Err(R::MalformedAllocations),
        ),
        (
            "allocation with misspelt tags field",
            vec![map(&[
                ("allocatedUsageQuantity", n("10")),
                ("tag", Attr::L(vec![team("a")])),
            ])],
            Err(R::MalformedAllocations),
        ),
        (
            "tags a map",
            vec![tags_field(team("a"))],
            Err(R::MalformedAllocations),
        ),
        (
            "tag not a map",
            vec![alloc_attr("10", vec![s("team=a")])],
            Err(R::MalformedAllocations),
        ),
        (
            "tag value a number",
            vec![alloc_attr(
                "10",
                vec![map(&[("key", s("team")), ("value", n("1"))])],
            )],
            Err(R::MalformedAllocations),
        ),
        (
            "tag with extra field",
            vec![alloc_attr(
                "10",
                vec![map(&[
                    ("key", s("team")),
                    ("value", s("a")),
                    ("note", s("x")),
                ])],
            )],
            Err(R::MalformedAllocations),
        ),
        // 15 NegativeOrNonIntegerAllocation
        (
            "allocation zero",
            vec![
                alloc_attr("0", vec![tag_attr("t", "a")]),
                alloc_attr("10", vec![]),
            ],
            Ok(()),
        ),
        (
            "allocation negative",
            vec![
                alloc_attr("-1", vec![]),
                alloc_attr("11", vec![tag_attr("t", "a")]),
            ],
            Err(R::NegativeOrNonIntegerAllocation),
        ),
        (
            "allocation fractional",
            vec![
                alloc_attr("9.5", vec![]),
                alloc_attr("0.5", vec![tag_attr("t", "a")]),
            ],
            Err(R::NegativeOrNonIntegerAllocation),
        ),
        (
            "allocation over the cap",
            vec![alloc_attr("2147483648", vec![])],
            Err(R::NegativeOrNonIntegerAllocation),
        ),
        // 16 MissingTagKeyOrValue
        ("tags empty list", vec![alloc_attr("10", vec![])], Ok(())),
        (
            "tag key missing",
            vec![alloc_attr("10", vec![map(&[("value", s("a"))])])],
            Err(R::MissingTagKeyOrValue),
        ),
        (
            "tag value NULL",
            vec![alloc_attr(
                "10",
                vec![map(&[("key", s("team")), ("value", Attr::Null)])],
            )],
            Err(R::MissingTagKeyOrValue),
        ),
        (
            "tag key empty",
            vec![alloc_attr("10", vec![tag_attr("", "a")])],
            Err(R::MissingTagKeyOrValue),
        ),
        (
            "tag value empty",
            vec![alloc_attr("10", vec![team("")])],
            Err(R::MissingTagKeyOrValue),
        ),
        // 17 InvalidTag
        (
            "tag of the widest allowed characters",
            vec![alloc_attr(
                "10",
                vec![tag_attr("a-Z 0+._:/@", "!\"#$%&'()*,;<=")],
            )],
            Ok(()),
        ),
        (
            "tag key of the longest length",
            vec![alloc_attr(
                "10",
                vec![tag_attr(&longest_key, &longest_value)],
            )],
            Ok(()),
        ),
        (
            "tag key too long",
            vec![alloc_attr("10", vec![tag_attr(&too_long_key, "a")])],
            Err(R::InvalidTag),
        ),
        (
            "tag value too long",
            vec![alloc_attr("10", vec![team(&too_long_value)])],
            Err(R::InvalidTag),
        ),
        (
            "tag key with >",
            vec![alloc_attr("10", vec![tag_attr("a>b", "a")])],
            Err(R::InvalidTag),
        ),
        (
            "tag value with non-ascii",
            vec![alloc_attr("10", vec![team("é")])],
            Err(R::InvalidTag),
        ),
        (
            "tag value with newline",
            vec![alloc_attr("10", vec![team("a\nb")])],
            Err(R::InvalidTag),
        ),
        (
            "tag key twice",
            vec![alloc_attr("10", vec![team("a"), team("b")])],
            Err(R::InvalidTag),
        ),
        // 18 TooManyTags
        (
            "five tags",
            vec![alloc_attr("10", six_tags()[..5].to_vec())],
            Ok(()),
        ),
        (
            "six tags",
            vec![alloc_attr("10", six_tags())],
            Err(R::TooManyTags),
        ),
        // 19 AllocationSumMismatch
        (
            "allocations sum to quantity",
            vec![
                alloc_attr("4", vec![tag_attr("t", "a")]),
                alloc_attr("6", vec![tag_attr("t", "b")]),
            ],
            Ok(()),
        ),
        (
            "allocations short",
            vec![alloc_attr("4", vec![tag_attr("t", "a")])],
            Err(R::AllocationSumMismatch),
        ),
        (
            "allocations over",
            vec![alloc_attr("4", vec![]), alloc_attr("7", vec![])],
            Err(R::AllocationSumMismatch),
        ),
    ];
    for (name, allocations, want) in allocation_cases {
        cases.push((name, with_allocs(good(), allocations), want));
    }
    let zero_row = |allocations| with_allocs(row_at("requests", TS, "0"), allocations);
    cases.push((
        "zero row with zero allocations",
        zero_row(vec![alloc_attr("0", vec![tag_attr("t", "a")])]),
        Ok(()),
    ));
    cases.push((
        "zero row with non-zero allocations",
        zero_row(vec![alloc_attr("1", vec![])]),
        Err(R::AllocationSumMismatch),
    ));
    let mut failing_codes = std::collections::BTreeSet::new();
    for (name, row, want) in cases {
        let got = validate_row(&row, &ctx()).map(|_| ());
        assert_eq!(got, want, "{name}");
        if let Err(code) = want {
            failing_codes.insert(code);
        }
    }
    // Every per-row code has a failing case above (the group codes and
    // HourAlreadySubmitted are tested with validate_group).
    let group_level = [
        ReasonCode::TooManyAllocations,
        ReasonCode::MixedAllocatedAndUnallocated,
        ReasonCode::HourAlreadySubmitted,
        ReasonCode::RecordTooLarge,
        // The discoverer's verdict on an index marker, not a row check.
        ReasonCode::MalformedMeteringPending,
    ];
    for code in ReasonCode::ALL.iter().filter(|c| !group_level.contains(c)) {
        assert!(failing_codes.contains(code), "no failing case for {code}");
    }
}

#[test]
fn timestamp_out_of_window_at_the_month_boundary() {
    let last_hour = "2026-11-30T23:10:00Z";
    let in_grace = GuardrailContext::new(instant("2026-12-01T05:59:59Z"), PRODUCT);
    let after_grace = GuardrailContext::new(instant("2026-12-01T06:00:00Z"), PRODUCT);
    let row = row_at("requests", last_hour, "1");
    assert!(validate_row(&row, &in_grace).is_ok());
    assert_eq!(
        validate_row(&row, &after_grace),
        Err(ReasonCode::TimestampOutOfWindow)
    );
    // The new month's first hour still follows the 24 h rule at 06:00.
    let new_month = row_at("requests", "2026-12-01T00:10:00Z", "1");
    assert!(validate_row(&new_month, &after_grace).is_ok());
}

/// Rows that fail several checks report the first in table order.
#[test]
fn first_failing_check_wins() {
    let bad_arn = "arn:aws:s3:::bucket";
    let cases: Vec<(&str, RawUsageRow, ReasonCode)> = vec![
        (
            "license before sort key",
            with_key(with_license(good(), bad_arn), "nohash"),
            ReasonCode::InvalidLicenseArn,
        ),
        (
            "sort key before account",
            with_key(with(good(), attr::CUSTOMER_ACCOUNT, None), "nohash"),
            ReasonCode::MalformedSortKey,
        ),
        (
            "account before dimension",
            with(
                with(good(), attr::CUSTOMER_ACCOUNT, None),
                attr::DIMENSION,
                None,
            ),
            ReasonCode::MissingCustomerAWSAccountId,
        ),
        (
            "dimension before timestamp",
            with(with(good(), attr::DIMENSION, None), attr::TIMESTAMP, None),
            ReasonCode::MissingDimension,
        ),
        (
            "timestamp before mismatch",
            with_key(
                with(good(), attr::TIMESTAMP, Some(s("yesterday"))),
                &format!("{ACCOUNT}#requests#{TS}"),
            ),
            ReasonCode::MalformedTimestamp,
        ),
        (
            "mismatch before quantity",
            with_key(
                with(good(), attr::QUANTITY, None),
                &format!("{ACCOUNT}#other#{TS}"),
            ),
            ReasonCode::SortKeyMismatch,
        ),
        (
            "non-numeric before window",
            with(
                row_at("requests", "2026-11-28T00:00:00Z", "1"),
                attr::QUANTITY,
                Some(s("1")),
            ),
            ReasonCode::NonNumericQuantity,
        ),
        (
            "non-integer before negative",
            row_at("requests", TS, "-1.5"),
            ReasonCode::NonIntegerQuantity,
        ),
        (
            "negative before too large",
            row_at("requests", TS, "-99999999999"),
            ReasonCode::NegativeQuantity,
        ),
        (
            "too large before future",
            row_at("requests", "2026-12-25T00:00:00Z", "9999999999"),
            ReasonCode::QuantityTooLarge,
        ),
        (
            "future before product",
            with(
                row_at("requests", "2026-12-25T00:00:00Z", "1"),
                attr::PRODUCT_CODE,
                Some(s("x")),
            ),
            ReasonCode::TimestampInFuture,
        ),
        (
            "window before product",
            with(
                row_at("requests", "2026-11-28T00:00:00Z", "1"),
                attr::PRODUCT_CODE,
                Some(s("x")),
            ),
            ReasonCode::TimestampOutOfWindow,
        ),
        (
            "product before allocations",
            with(
                with_allocs(good(), vec![]),
                attr::PRODUCT_CODE,
                Some(s("x")),
            ),
            ReasonCode::ProductCodeMismatch,
        ),
        // Across allocations: the earliest check in the table wins, even when a later
        // allocation fails it and an earlier one fails a later check.
        (
            "malformed anywhere before a negative quantity",
            with_allocs(good(), vec![alloc_attr("-1", vec![]), n("3")]),
            ReasonCode::MalformedAllocations,
        ),
        (
            "negative before missing tag",
            with_allocs(
                good(),
                vec![
                    alloc_attr("5", vec![tag_attr("", "a")]),
                    alloc_attr("-5", vec![]),
                ],
            ),
            ReasonCode::NegativeOrNonIntegerAllocation,
        ),
        (
            "missing tag before invalid tag",
            with_allocs(
                good(),
                vec![
                    alloc_attr("5", vec![tag_attr("a>", "a")]),
                    alloc_attr("5", vec![tag_attr("b", "")]),
                ],
            ),
            ReasonCode::MissingTagKeyOrValue,
        ),
        (
            "invalid tag before too many tags",
            with_allocs(
                good(),
                vec![
                    alloc_attr("5", six_tags()),
                    alloc_attr("5", vec![tag_attr("a>", "a")]),
                ],
            ),
            ReasonCode::InvalidTag,
        ),
        (
            "too many tags before sum",
            with_allocs(good(), vec![alloc_attr("1", six_tags())]),
            ReasonCode::TooManyTags,
        ),
    ];
    for (name, row, want) in cases {
        assert_eq!(validate_row(&row, &ctx()), Err(want), "{name}");
    }
}

#[test]
fn sort_key_shape_allows_hash_in_dimension_and_suffix() {
    for key in ["a#d#t", "a#d#t#s", "a#d#e#t", "a#d##t", "a#d#t#s#more"] {
        assert!(sort_key_well_formed(key), "{key}");
    }
    for key in ["", "a", "a#", "a#d", "#d#t", "a#d#t#", "a##", "a#d#"] {
        assert!(!sort_key_well_formed(key), "{key}");
    }
}

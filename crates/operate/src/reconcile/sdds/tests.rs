//! Reading the Seller Delivery Data Feeds: their bi-temporal rows, joins and malformed lines.

use super::*;

const USAGE: &str = include_str!("../../../tests/fixtures/sdds/daily_usage.csv");
const ACCOUNTS: &str = include_str!("../../../tests/fixtures/sdds/account.csv");
const PRODUCTS: &str = include_str!("../../../tests/fixtures/sdds/product.csv");
const MALFORMED: &str = include_str!("../../../tests/fixtures/sdds/daily_usage_malformed.csv");

fn date(s: &str) -> NaiveDate {
    NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap()
}

#[test]
fn resolves_bi_temporal_rows_as_the_facts_say() {
    let usage = parse_usage_feed(USAGE);
    assert!(usage.problems.is_empty(), "{:#?}", usage.problems);
    let current = resolve(&usage.rows);
    let quantity = |id: &str| current.get(id).map(|r| r.value.usage_quantity.to_string());
    // (id, expected current quantity, why)
    let cases: &[(&str, Option<&str>, &str)] = &[
        ("uf-plain", Some("42"), "one version"),
        (
            "uf-corrected",
            Some("45.5"),
            "a later update_date within the same valid_from wins",
        ),
        (
            "uf-revised",
            Some("12"),
            "the newest valid_from wins over an older one updated later",
        ),
        (
            "uf-deleted",
            None,
            "the latest row of its only valid_from is soft-deleted",
        ),
        (
            "uf-undeleted",
            Some("9"),
            "deleted, then re-inserted with a later update_date",
        ),
        (
            "uf-revision-deleted",
            Some("5"),
            "the newest valid_from is deleted: the older valid version stands",
        ),
        (
            "uf-tie",
            Some("8"),
            "same valid_from and update_date: the later line wins",
        ),
        ("uf-other-day", Some("3.25"), "another day, 2 decimals"),
        ("uf-orphan-account", Some("1"), "resolves; fails the join"),
    ];
    for (id, expected, why) in cases {
        assert_eq!(quantity(id).as_deref(), *expected, "{id}: {why}");
    }
    assert_eq!(
        current.len(),
        cases.iter().filter(|c| c.1.is_some()).count()
    );
}

#[test]
fn joins_usage_to_accounts_and_products() {
    let joined = join_feeds(
        &parse_usage_feed(USAGE),
        &parse_account_feed(ACCOUNTS),
        &parse_product_feed(PRODUCTS),
    );
    let feed_row = |id: &str| joined.usage.iter().find(|u| u.usage_feed_id == id).unwrap();
    let plain = feed_row("uf-plain");
    // The account was revised: its newest valid version.
    assert_eq!(plain.aws_account_id, "111122223333");
    let other = feed_row("uf-other-day");
    // Its aws_account_id lost the leading zero (loaded as a number): left-padded.
    assert_eq!(other.aws_account_id, "044455556666");
    assert_eq!(plain.product_code, "prodsim1234567890abcdef");
    assert_eq!(plain.dimension, "requests");
    assert_eq!(plain.usage_date, date("2026-03-15"));
    assert_eq!(
        plain.agreement_id.as_deref(),
        Some("agmt-1111111111111111111111111")
    );
    assert_eq!(joined.problems.len(), 1, "{:#?}", joined.problems);
    assert_eq!(joined.problems[0].feed, USAGE_FEED);
    assert!(joined.problems[0].problem.contains("acct-unknown"));
}

#[test]
fn every_malformed_line_is_reported_with_its_number() {
    let parsed = parse_usage_feed(MALFORMED);
    assert_eq!(
        parsed.rows.len(),
        2,
        "the two good lines: {:#?}",
        parsed.rows
    );
    let got: Vec<(u64, &str)> = parsed
        .problems
        .iter()
        .map(|p| (p.line, p.problem.as_str()))
        .collect();
    let expected: &[(u64, &str)] = &[
        (3, "usage_quantity"),
        (4, "usage_date"),
        (5, "fields where the header has"),
        (6, "valid_from"),
        (7, "dimension_key is empty"),
        (8, "usage_quantity"),
        (10, "update_date"),
    ];
    assert_eq!(got.len(), expected.len(), "{got:#?}");
    for ((line, problem), (want_line, needle)) in got.iter().zip(expected) {
        assert_eq!(line, want_line, "{problem}");
        assert!(
            problem.contains(needle),
            "line {line}: {problem:?} lacks {needle:?}"
        );
    }
}

#[test]
fn a_quoted_field_may_span_lines_and_line_numbers_stay_right() {
    let text = "valid_from,update_date,delete_date,usage_feed_id,usage_date,product_id,end_user_account_id,dimension_key,usage_quantity,charge_item_description\n\
                2026-03-16T00:00:00Z,2026-03-16T00:00:00Z,,uf-1,2026-03-15,prod-1,acct-1,requests,1,\"two\nlines\"\n\
                2026-03-16T00:00:00Z,2026-03-16T00:00:00Z,,uf-2,2026-03-15,prod-1,acct-1,requests,x,plain\n";
    let parsed = parse_usage_feed(text);
    assert_eq!(parsed.rows.len(), 1);
    assert_eq!(parsed.problems.len(), 1);
    assert_eq!(parsed.problems[0].line, 4, "{:?}", parsed.problems);
}

#[test]
fn a_wrong_file_is_one_problem_naming_the_missing_columns() {
    let parsed = parse_usage_feed(ACCOUNTS);
    assert!(parsed.rows.is_empty());
    assert_eq!(parsed.problems.len(), 1);
    assert_eq!(parsed.problems[0].line, 1);
    assert!(parsed.problems[0].problem.contains("usage_feed_id"));
    assert_eq!(
        parse_usage_feed("").problems[0].problem,
        "empty file: no header row"
    );
}

#[test]
fn several_files_of_a_feed_are_read_in_order_and_problems_name_their_file() {
    let header = "valid_from,update_date,delete_date,usage_feed_id,usage_date,product_id,end_user_account_id,dimension_key,usage_quantity\n";
    let row = |q: &str| {
        format!(
            "2026-03-16T00:00:00Z,2026-03-16T00:00:00Z,,uf-1,2026-03-15,prod-1,acct-1,requests,{q}\n"
        )
    };
    let files = [
        FeedFile {
            name: "DailyUsageFeed_V1/year=2026/month=03/data.csv".into(),
            text: format!("{header}{}{}", row("1"), row("x")),
        },
        FeedFile {
            name: "DailyUsageFeed_V1/year=2026/month=04/data.csv".into(),
            text: format!("{header}{}", row("2")),
        },
    ];
    let parsed = ParsedFeed::from_files(&files, parse_usage_feed);
    // Same key, valid_from and update_date: the later file wins, as a later line would.
    let current = resolve(&parsed.rows);
    assert_eq!(current["uf-1"].value.usage_quantity.to_string(), "2");
    assert_eq!(current["uf-1"].file, 1);
    assert_eq!(parsed.problems.len(), 1);
    assert_eq!(
        parsed.problems[0].to_string().split(':').next().unwrap(),
        "daily usage feed DailyUsageFeed_V1/year=2026/month=03/data.csv line 3"
    );
    let joined = join_feeds(
        &parsed,
        &parse_account_feed(ACCOUNTS),
        &ParsedFeed::<ProductRow> {
            rows: Vec::new(),
            problems: Vec::new(),
            files: Vec::new(),
        },
    );
    let unjoined = joined
        .problems
        .iter()
        .find(|p| p.problem.contains("product_id"))
        .unwrap();
    assert_eq!(unjoined.file.as_deref(), Some(files[1].name.as_str()));
}

#[test]
fn account_ids_are_left_padded_and_checked() {
    let cases: &[(&str, Option<&str>)] = &[
        ("123456789012", Some("123456789012")),
        ("11122223333", Some("011122223333")),
        ("1", Some("000000000001")),
        ("1234567890123", None),
        ("1.11122223333e10", None),
        ("", None),
    ];
    for (raw, expected) in cases {
        assert_eq!(normalize_account_id(raw).as_deref(), *expected, "{raw}");
    }
}

proptest::proptest! {
    #[test]
    fn no_file_makes_the_parsers_panic(text in "(?s).{0,400}") {
        let _ = parse_usage_feed(&text);
        let _ = parse_account_feed(&text);
        let _ = parse_product_feed(&text);
    }

    #[test]
    fn resolution_does_not_depend_on_line_order_when_versions_differ(
        versions in proptest::collection::vec((0i64..4, 0i64..4, proptest::bool::ANY, 0i64..100), 1..12),
        seed in proptest::num::u64::ANY,
    ) {
        // Distinct (valid_from, update_date) pairs: no ties, so order must not matter.
        let mut seen = std::collections::BTreeSet::new();
        let rows: Vec<Versioned<i64>> = versions
            .into_iter()
            .filter(|(v, u, _, _)| seen.insert((*v, *u)))
            .enumerate()
            .map(|(i, (v, u, deleted, value))| Versioned {
                key: "k".into(),
                valid_from: chrono::DateTime::from_timestamp(v * 86_400, 0).unwrap(),
                update_date: chrono::DateTime::from_timestamp(u * 86_400, 0).unwrap(),
                deleted,
                file: 0,
                line: i as u64 + 2,
                value,
            })
            .collect();
        let mut shuffled = rows.clone();
        let n = shuffled.len();
        for i in 0..n {
            let j = ((seed.rotate_left(i as u32) ^ i as u64) % n as u64) as usize;
            shuffled.swap(i, j);
        }
        let a = resolve(&rows).get("k").map(|r| r.value);
        let b = resolve(&shuffled).get("k").map(|r| r.value);
        proptest::prop_assert_eq!(a, b);
    }
}

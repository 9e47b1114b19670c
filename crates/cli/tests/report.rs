//! `awsmp report --html` against what the real pipeline wrote on moto and the
//! Marketplace simulator: the page's tables carry exactly what Marketplace billed, the
//! stored texts stay text, and headless Chromium renders it (no policy violation) into
//! a screenshot kept in `test-artifacts/report/`.
//!
//! The Chromium half needs `/usr/bin/chromium` (or `AWSMP_CHROMIUM`); `make test`
//! installs it first (scripts/ensure-chromium.sh) and sets `AWSMP_REQUIRE_CHROMIUM=1`,
//! so there it cannot be skipped. Run alone without Chromium, it says so and skips.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use awsmp_aws::DynamoOperatorStore;
use awsmp_cli::commands;
use awsmp_cli::output::Format;
use awsmp_e2e::common::*;
use awsmp_e2e::{AGGREGATED_TABLE, USAGE_TABLE, license};
use awsmp_operate::report::{RegionReport, ReportPage};

const NOW: &str = "2026-11-30T10:30:00Z";
/// A dimension that is markup: defined in the catalog and billed like any other.
const SCRIPT_DIMENSION: &str = "<script>alert(1)</script>";

fn artifacts() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join("test-artifacts")
        .join("report");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::canonicalize(dir).unwrap()
}

/// The cells of every row (header, body, footer) of the table with `id`, as text.
fn table_rows(html: &str, id: &str) -> Vec<Vec<String>> {
    let start = html
        .find(&format!("<table id=\"{id}\">"))
        .unwrap_or_else(|| panic!("no table {id}"));
    let end = start + html[start..].find("</table>").unwrap();
    html[start..end]
        .split("<tr>")
        .skip(1)
        .map(|row| {
            let mut cells = Vec::new();
            let mut rest = &row[..row.find("</tr>").unwrap()];
            // Only <td> and <th> inside a row.
            while let Some(i) = rest.find("<t") {
                let open = i + rest[i..].find('>').unwrap();
                let close = open + rest[open..].find("</t").unwrap();
                cells.push(unescape(&rest[open + 1..close]));
                rest = &rest[close + 3..];
            }
            cells
        })
        .collect()
}

fn unescape(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}

/// Every element closed in order (void HTML elements and `/>` excepted): the page
/// parses into the tree it was written as.
fn assert_balanced(html: &str) {
    const VOID: [&str; 3] = ["meta", "br", "hr"];
    let mut open: Vec<String> = Vec::new();
    let mut rest = html;
    while let Some(i) = rest.find('<') {
        let j = i + rest[i..].find('>').expect("a tag is closed");
        let tag = &rest[i + 1..j];
        rest = &rest[j + 1..];
        if tag.starts_with('!') || tag.ends_with('/') {
            continue;
        }
        let name: String = tag
            .trim_start_matches('/')
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric())
            .collect();
        if VOID.contains(&name.as_str()) {
            continue;
        }
        if tag.starts_with('/') {
            assert_eq!(
                open.pop().as_deref(),
                Some(name.as_str()),
                "misnested </{name}>"
            );
        } else {
            open.push(name);
        }
    }
    assert!(open.is_empty(), "unclosed: {open:?}");
}

/// The Chromium to run (`AWSMP_CHROMIUM`, else `/usr/bin/chromium`), or the path that
/// is missing.
fn chromium() -> Result<PathBuf, PathBuf> {
    let path = std::env::var_os("AWSMP_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    if path.exists() { Ok(path) } else { Err(path) }
}

/// Runs headless Chromium on `page` with `action` flags; returns (stdout, stderr).
fn headless(chromium: &Path, action: &[&str], page: &Path) -> (String, String) {
    let profile = std::env::temp_dir().join(format!(
        "awsmp-report-chromium-{}-{}",
        std::process::id(),
        action[0]
            .trim_start_matches("--")
            .split('=')
            .next()
            .unwrap()
    ));
    let _ = std::fs::remove_dir_all(&profile);
    let output = Command::new("timeout")
        .arg("120")
        .arg(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(action)
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("run chromium");
    let _ = std::fs::remove_dir_all(&profile);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        output.status.success(),
        "chromium {action:?} failed:\n{stderr}"
    );
    (String::from_utf8_lossy(&output.stdout).into_owned(), stderr)
}

/// GIVEN two hours of billed usage over three dimensions (one of them markup), a
/// dimension the catalog lacks and a rejected row, WHEN the pipeline ran and the report
/// was written, THEN its tables hold what Marketplace billed and what failed, it has four
/// labelled charts, the markup stayed text, and Chromium renders it under its policy.
#[tokio::test]
async fn the_html_report_shows_what_was_billed_and_renders_in_chromium() {
    let stack = stack_with(NOW, |o| o.dimensions.push(SCRIPT_DIMENSION.into())).await;
    let (l1, l2) = (license(1), license(2));
    stack.license_updated(&l1, ACCOUNT_A).await.unwrap();
    stack.license_updated(&l2, ACCOUNT_B).await.unwrap();
    for (lic, account, dimension, ts, q) in [
        (&l1, ACCOUNT_A, "requests", "2026-11-30T07:10:00Z", 4),
        (&l1, ACCOUNT_A, "requests", "2026-11-30T07:20:00Z", 6),
        (&l2, ACCOUNT_B, "requests", "2026-11-30T07:25:00Z", 5),
        (&l1, ACCOUNT_A, "storage", "2026-11-30T08:05:00Z", 2),
        (&l2, ACCOUNT_B, SCRIPT_DIMENSION, "2026-11-30T08:15:00Z", 9),
        (&l1, ACCOUNT_A, "requests", "2026-11-30T08:40:00Z", 1),
        // Not in the catalog: the record ends Error (InvalidUsageDimensionException).
        (&l1, ACCOUNT_A, "Seats", "2026-11-30T08:30:00Z", 3),
        // Rejected client-side: NegativeQuantity.
        (&l2, ACCOUNT_B, "requests", "2026-11-30T08:35:00Z", -1),
        // The open hour: still pending.
        (&l1, ACCOUNT_A, "requests", "2026-11-30T10:05:00Z", 7),
    ] {
        stack
            .put_usage(lic, account, dimension, ts, q)
            .await
            .unwrap();
    }
    stack.run_pipeline().await.unwrap();
    let now = stack.now();
    let store = DynamoOperatorStore::new(stack.dynamodb.clone(), USAGE_TABLE, AGGREGATED_TABLE);

    // The first buyer's agreement prices requests at 0.0025 USD and not storage; the
    // second's cannot be read (Marketplace has no agreement of that id).
    stack
        .seed_priced_agreement(&l1, ACCOUNT_A, &[("requests", "0.0025")])
        .unwrap();
    let agreements = stack.agreement_api();

    // WHEN `awsmp report --html` runs (the code the binary runs)
    let series = commands::report::read(
        &store,
        now,
        6,
        Some((stack.subscribers.as_ref(), &agreements)),
    )
    .await
    .unwrap();

    // THEN the estimate is the simulator's billed requests of the first buyer at its
    // price, exactly; its storage is named unpriced; the second buyer is in no amount.
    let charges = series.charges.clone().unwrap();
    let ledger = stack.billed();
    let requests: i64 = ledger
        .iter()
        .filter(|((l, _, d, _), _)| *l == l1 && d == "requests")
        .map(|(_, q)| *q)
        .sum();
    assert!(requests > 0, "{ledger:?}");
    let expected =
        "0.0025".parse::<rust_decimal::Decimal>().unwrap() * rust_decimal::Decimal::from(requests);
    assert_eq!(
        charges.total["USD"],
        expected.normalize().to_string(),
        "{charges:?}"
    );
    assert!(charges.label.contains("estimate"));
    assert_eq!(charges.by_buyer.len(), 1);
    assert_eq!(
        charges.by_buyer[0].agreement_id,
        Some(format!("agmt-{ACCOUNT_A}"))
    );
    assert_eq!(
        charges
            .unpriced
            .iter()
            .map(|u| u.dimension.as_str())
            .collect::<Vec<_>>(),
        vec!["storage"]
    );
    assert_eq!(charges.without_rate_card, vec![l2.clone()]);
    assert_eq!(charges.unavailable, None);
    let page = ReportPage {
        product_code: Some(stack.options.product_code.clone()),
        stage: Some("test".into()),
        generated: now,
        hours: 6,
        regions: vec![RegionReport {
            region: stack.options.region.clone(),
            stack: Some("awsmp-main-prod-e2e-test".into()),
            series,
        }],
    };
    let dir = artifacts();
    let path = commands::report::write_html(&page, &dir.join("report.html")).unwrap();
    let shown = commands::report::render(&page, Some(&path), Format::Human);
    assert!(
        shown.text.starts_with(&format!("wrote {}", path.display())),
        "{}",
        shown.text
    );
    let html = std::fs::read_to_string(&path).unwrap();

    // THEN the page parses as written: five charts (the estimated charges in USD
    // beside the four of quantities and statuses), each titled, with its table.
    assert_balanced(&html);
    assert_eq!(html.matches("<svg").count(), 5);
    assert_eq!(html.matches("</svg>").count(), 5);
    assert_eq!(html.matches("<table id=").count(), 5);
    // The charges chart's table: each priced hour's estimate as computed, and the
    // total, exactly.
    let shown = table_rows(&html, "r0-charges-usd-table");
    assert_eq!(
        shown[0],
        vec!["hour (UTC)".to_string(), "estimated USD".into()]
    );
    let hours: Vec<Vec<String>> = charges
        .by_hour
        .iter()
        .map(|(hour, amounts)| vec![hour.to_string(), amounts["USD"].clone()])
        .collect();
    assert_eq!(&shown[1..shown.len() - 1], hours.as_slice());
    assert_eq!(
        shown.last().unwrap(),
        &vec!["total".to_string(), charges.total["USD"].clone()]
    );
    assert!(html.contains(
        "<title>awsmp report: product prod-e2e, stage test, us-east-1: 2026-11-30T05:00 to 2026-11-30T10:30 UTC</title>"
    ));
    // The markup dimension is text, never a tag.
    assert!(!html.contains("<script"));
    assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));

    // The billed table holds exactly what the simulator billed, per hour and dimension.
    let mut billed: BTreeMap<(String, String), i64> = BTreeMap::new();
    for ((_, _, dimension, hour), q) in stack.billed() {
        *billed.entry((hour, dimension)).or_default() += q;
    }
    assert_eq!(billed.values().sum::<i64>(), 27, "{billed:?}");
    let rows = table_rows(&html, "r0-billed-table");
    let header = &rows[0];
    assert_eq!(header[0], "hour (UTC)");
    assert_eq!(header.last().unwrap(), "total");
    let mut shown_billed: BTreeMap<(String, String), i64> = BTreeMap::new();
    for row in &rows[1..rows.len() - 1] {
        for (dimension, cell) in header[1..header.len() - 1].iter().zip(&row[1..]) {
            let q: i64 = cell.parse().unwrap();
            if q != 0 {
                shown_billed.insert((row[0].clone(), dimension.clone()), q);
            }
        }
        let total: i64 = row.last().unwrap().parse().unwrap();
        let sum: i64 = row[1..row.len() - 1]
            .iter()
            .map(|c| c.parse::<i64>().unwrap())
            .sum();
        assert_eq!(total, sum);
    }
    assert_eq!(shown_billed, billed);
    let footer = rows.last().unwrap();
    assert_eq!(
        (footer[0].as_str(), footer.last().unwrap().as_str()),
        ("total", "27")
    );

    // The status table agrees with `awsmp status`, hour by hour.
    let status = commands::status::read(&store, &[], 0, None, now, 6, None)
        .await
        .unwrap();
    let records = table_rows(&html, "r0-records-table");
    assert_eq!(
        records[0][1..3],
        ["billed".to_string(), "pending".to_string()]
    );
    for row in &records[1..] {
        let counts = &status.hours[&row[0].parse().unwrap()];
        assert_eq!(row[1], counts.records_billed.to_string(), "{row:?}");
        assert_eq!(row[3], counts.records_error.to_string(), "{row:?}");
    }
    assert_eq!(records.len() - 1, 2, "07 and 08 have records: {records:?}");

    // Failures by reason: the undefined dimension and the negative quantity.
    let rejections = table_rows(&html, "r0-rejections-table");
    let kinds: Vec<Vec<&str>> = rejections[1..]
        .iter()
        .map(|r| r.iter().map(String::as_str).collect())
        .collect();
    assert!(
        kinds.contains(&vec![
            "Error",
            "InvalidUsageDimensionException",
            "InvalidUsageDimensionException",
            "1",
            "3"
        ]),
        "{kinds:?}"
    );
    assert!(
        kinds
            .iter()
            .any(|k| k[0] == "RejectedClientSide" && k[1] == "NegativeQuantity" && k[3] == "1"),
        "{kinds:?}"
    );

    // The series as `--json` prints it.
    let json: serde_json::Value =
        serde_json::from_str(&commands::report::render(&page, Some(&path), Format::Json).text)
            .unwrap();
    assert_eq!(
        json["regions"][0]["billed"]["2026-11-30T07"]["requests"],
        15
    );
    assert_eq!(
        json["regions"][0]["billed"]["2026-11-30T08"][SCRIPT_DIMENSION],
        9
    );

    // AND headless Chromium renders it with nothing refused by the page's policy.
    let chromium = match chromium() {
        Ok(path) => path,
        Err(missing) => {
            assert!(
                std::env::var_os("AWSMP_REQUIRE_CHROMIUM").is_none(),
                "AWSMP_REQUIRE_CHROMIUM is set but {} is missing: run scripts/ensure-chromium.sh",
                missing.display()
            );
            eprintln!(
                "report: SKIPPED the Chromium screenshot: {} is missing (set AWSMP_CHROMIUM, or run `make report-test`, which installs Chromium); the page is at {}",
                missing.display(),
                path.display()
            );
            return;
        }
    };
    let (dom, log) = headless(&chromium, &["--dump-dom"], &path);
    assert_eq!(
        dom.matches("<svg").count(),
        5,
        "the browser's tree has five charts"
    );
    assert_eq!(dom.matches("<table id=").count(), 5);
    assert!(!dom.contains("<script"));
    assert!(
        !log.contains("Content Security Policy"),
        "the page's policy refused something:\n{log}"
    );
    let png = dir.join("report.png");
    let _ = std::fs::remove_file(&png);
    let (_, log) = headless(
        &chromium,
        &[
            &format!("--screenshot={}", png.display()),
            "--window-size=1200,2400",
        ],
        &path,
    );
    assert!(!log.contains("Content Security Policy"), "{log}");
    let bytes = std::fs::read(&png).expect("chromium wrote the screenshot");
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    assert!(bytes.len() > 20_000, "a page with charts, not a blank one");
    println!("report: screenshot {}", png.display());
}

//! `awsmp report`: the billed quantity, status mix and failures of each Region as one
//! self-contained HTML page (`--html FILE`), or their series as JSON (`--json`).

pub mod html;

use std::path::{Path, PathBuf};

use awsmp_core::ports::{AgreementApi, OperatorStore, SubscriberStore};
use awsmp_core::time::Instant;
use awsmp_operate::report::{RegionReport, ReportPage, Series, charges, rate_cards, series};
use serde::Serialize;

use super::{Ctx, all_records, all_rows, stores};
use crate::error::CommandError;
use crate::output::{Format, Outcome, json, spinner};

/// Where the rate cards come from: the subscribers table (each license's agreement)
/// and the Agreement API.
pub type Pricing<'a> = (&'a dyn SubscriberStore, &'a dyn AgreementApi);

/// Reads both tables (as `status` and `failures` read them) and computes one Region's
/// series at `now` over the last `hours` hours; with `pricing`, its estimated charges.
pub async fn read(
    store: &dyn OperatorStore,
    now: Instant,
    hours: u32,
    pricing: Option<Pricing<'_>>,
) -> Result<Series, CommandError> {
    let rows = all_rows(store, None).await?;
    let (records, malformed) = all_records(store, None).await?;
    let mut series = series(&rows, &records, &malformed, now, hours);
    if let Some((subscribers, agreements)) = pricing {
        let bar = spinner("reading each buyer's rate card (GetAgreementTerms)");
        let (cards, unavailable) = rate_cards(&records, series.from, subscribers, agreements).await;
        bar.finish_and_clear();
        series.charges = Some(charges(&records, series.from, &cards, unavailable));
    }
    Ok(series)
}

/// Writes the page to `path` (replacing it whole: a reader never sees half a page) and
/// returns the path as it can be opened. The page is written to a new file beside it
/// first, created exclusively under a name no one can guess (so a file or link planted
/// there is never written through), then renamed over `path`.
pub fn write_html(page: &ReportPage, path: &Path) -> Result<PathBuf, CommandError> {
    use std::io::Write as _;
    let failed = |e: std::io::Error| {
        CommandError::Io(format!(
            "cannot write the report to {}: {e} (does its directory exist and is it writable?)",
            path.display()
        ))
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "report.html".into());
    let (partial, mut file) = (0..16)
        .find_map(|_| {
            let partial = path.with_file_name(format!(
                ".{name}.{:016x}.partial",
                awsmp_core::random::random_u64()
            ));
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&partial)
            {
                Ok(file) => Some(Ok((partial, file))),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => None,
                Err(e) => Some(Err(e)),
            }
        })
        .unwrap_or_else(|| {
            Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "no unused temporary name beside it",
            ))
        })
        .map_err(failed)?;
    let written = file
        .write_all(html::render(page).as_bytes())
        .and_then(|()| file.sync_all())
        .and_then(|()| std::fs::rename(&partial, path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&partial);
        return Err(failed(e));
    }
    Ok(std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()))
}

#[derive(Serialize, schemars::JsonSchema)]
pub(crate) struct Written<'a> {
    /// Where the page was written, when it was.
    html: Option<String>,
    #[serde(flatten)]
    page: &'a ReportPage,
}

/// What `awsmp report` prints: where the page went (human), or the series (JSON).
/// Rejected or failed usage in the window needs attention (exit code 3), as it does
/// for `awsmp failures`: the page is written either way.
pub fn render(page: &ReportPage, written: Option<&Path>, format: Format) -> Outcome {
    let failed: u64 = page
        .regions
        .iter()
        .flat_map(|r| r.series.rejections.iter())
        .map(|r| r.count)
        .sum();
    // A billed dimension no rate card prices: on a private offer, usage given away.
    let unpriced = page
        .regions
        .iter()
        .filter_map(|r| r.series.charges.as_ref())
        .any(|c| !c.unpriced.is_empty());
    let text = match format {
        Format::Json => json(&Written {
            html: written.map(|p| p.display().to_string()),
            page,
        }),
        Format::Human => {
            let mut out = String::new();
            if let Some(path) = written {
                out.push_str(&format!("wrote {}\n", path.display()));
                out.push_str(&format!("  {}\n", html::title(page)));
            }
            for region in &page.regions {
                let s = &region.series;
                let failed: u64 = s.rejections.iter().map(|r| r.count).sum();
                out.push_str(&format!(
                    "  {}: quantity billed {} in {} hour(s) over {} dimension(s); {} rejected or failed\n",
                    region.region,
                    s.quantity_billed(),
                    s.billed.len(),
                    s.dimensions.len(),
                    failed
                ));
            }
            for region in &page.regions {
                if let Some(c) = &region.series.charges {
                    let total: Vec<String> = c
                        .total
                        .iter()
                        .map(|(cur, amount)| format!("{cur} {amount}"))
                        .collect();
                    out.push_str(&format!(
                        "  {}: estimated charges {} ({}){}{}{}\n",
                        region.region,
                        if total.is_empty() {
                            "none".to_string()
                        } else {
                            total.join(", ")
                        },
                        c.label,
                        if c.unpriced.is_empty() {
                            String::new()
                        } else {
                            format!(
                                "; {} billed dimension(s) no rate card prices",
                                c.unpriced.len()
                            )
                        },
                        if c.without_rate_card.is_empty() {
                            String::new()
                        } else {
                            format!(
                                "; {} billed license(s) without a rate card",
                                c.without_rate_card.len()
                            )
                        },
                        c.unavailable
                            .as_ref()
                            .map(|why| format!("; some rate cards unread: {why}"))
                            .unwrap_or_default()
                    ));
                }
            }
            if let Some(path) = written {
                out.push_str(&format!("open it: file://{}\n", path.display()));
            }
            if failed > 0 {
                out.push_str("needs attention: `awsmp failures` lists each with what to do\n");
            }
            if unpriced {
                out.push_str("needs attention: a billed dimension the buyer's rate card does not price (on a private offer Marketplace billed nothing for it): add it to the offer, or stop metering it\n");
            }
            out
        }
    };
    Outcome::flagged(text, failed > 0 || unpriced)
}

/// One self-contained HTML page with charts: billed quantity per hour and dimension,
/// status mix per hour, rejections and failures by reason (--json: the series).
///
/// The page loads nothing and runs no script (open it from disk, mail it, archive it);
/// each chart has its numbers in a table beneath it.
///
/// Example: awsmp report --stage prod --product-code abc123 --region us-east-1 --html billing.html --hours 48
#[derive(Debug, clap::Args)]
pub struct Command {
    /// Write the page here (replaced whole). With --json the series is printed too.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// Hours to chart (1 to 744), ending with the current one (pending usage older than
    /// that is shown too).
    #[arg(long, default_value_t = 24, value_parser = clap::value_parser!(u32).range(1..=744))]
    hours: u32,
    /// Leave out the estimated charges (they read each billed buyer's rate card from
    /// the Agreement API: aws-marketplace:DescribeAgreement and GetAgreementTerms).
    #[arg(long)]
    no_charges: bool,
}

impl Command {
    /// Reads each deployment named and writes the one page of them all.
    pub async fn run(self, ctx: &Ctx<'_>) -> Result<Vec<Outcome>, CommandError> {
        if self.html.is_none() && ctx.format != Format::Json {
            return Err(CommandError::Usage(
                "name the page to write with --html FILE (or pass --json for the series)".into(),
            ));
        }
        let mut regions = Vec::new();
        let agreements = super::charges_api(ctx, self.no_charges).await;
        for s in stores(ctx.deployment).await? {
            let pricing = super::pricing(&s, agreements.as_ref());
            regions.push(RegionReport {
                series: read(&s.operator, ctx.now, self.hours, pricing).await?,
                region: s.deployment.region,
                stack: s.deployment.stack,
            });
        }
        let page = ReportPage {
            product_code: ctx.deployment.product_code.clone(),
            stage: ctx.deployment.stage.clone(),
            generated: ctx.now,
            hours: self.hours,
            regions,
        };
        let written = self.html.map(|path| write_html(&page, &path)).transpose()?;
        Ok(vec![render(&page, written.as_deref(), ctx.format)])
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use awsmp_core::memory::MemoryTables;
    use awsmp_core::time::parse_usage_timestamp;
    use awsmp_operate::report::RegionReport;

    #[tokio::test]
    async fn writes_the_page_and_says_where() {
        let now = parse_usage_timestamp("2026-11-30T12:30:00Z").unwrap();
        let tables = MemoryTables::default();
        let s = read(&tables.operator_store(), now, 24, None).await.unwrap();
        let page = ReportPage {
            product_code: Some("abc123".into()),
            stage: Some("prod".into()),
            generated: now,
            hours: 24,
            regions: vec![RegionReport {
                region: "us-east-1".into(),
                stack: None,
                series: s,
            }],
        };
        let dir = std::env::temp_dir().join(format!("awsmp-report-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = write_html(&page, &dir.join("r.html")).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("<!DOCTYPE html>"));
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            1,
            "no partial file left"
        );
        // A link planted at the name the partial file once had is never written through.
        #[cfg(unix)]
        {
            let target = dir.join("victim.txt");
            std::fs::write(&target, "untouched").unwrap();
            std::os::unix::fs::symlink(&target, dir.join(".r.html.partial")).unwrap();
            write_html(&page, &dir.join("r.html")).unwrap();
            assert_eq!(std::fs::read_to_string(&target).unwrap(), "untouched");
            std::fs::remove_file(dir.join(".r.html.partial")).unwrap();
            std::fs::remove_file(&target).unwrap();
        }
        let shown = render(&page, Some(&path), Format::Human);
        assert!(
            shown
                .text
                .starts_with(&format!("wrote {}\n", path.display()))
        );
        assert!(shown.text.contains("us-east-1: quantity billed 0"));
        assert!(!shown.attention, "nothing failed: exit code 0");
        let mut failing = page.clone();
        failing.regions[0]
            .series
            .rejections
            .push(awsmp_operate::report::Rejection {
                status: "RejectedClientSide",
                reason: Some("NegativeQuantity".into()),
                server_side: Some("ValidationException".into()),
                count: 2,
                quantity: -6,
            });
        for format in [Format::Human, Format::Json] {
            let shown = render(&failing, Some(&path), format);
            assert!(shown.attention, "a failure in the window: exit code 3");
        }
        assert!(
            render(&failing, Some(&path), Format::Human)
                .text
                .contains("needs attention: `awsmp failures`")
        );
        let json: serde_json::Value =
            serde_json::from_str(&render(&page, None, Format::Json).text).unwrap();
        assert_eq!(json["html"], serde_json::Value::Null);
        assert_eq!(json["regions"][0]["region"], "us-east-1");
        assert_eq!(json["regions"][0]["from"], "2026-11-29T13");
        let missing = write_html(&page, &dir.join("no/such/dir/r.html")).unwrap_err();
        assert!(
            missing.to_string().contains("does its directory exist"),
            "{missing}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

//! The report as one self-contained HTML page: an inline stylesheet that a strict
//! Content-Security-Policy allows by its hash, inline SVG charts drawn here, no script,
//! nothing fetched. Every stored text (license ARNs, dimensions, reasons, Region and
//! stack names) is escaped; each chart has an SVG title and description and is followed
//! by its numbers as a table.

use awsmp_core::time::HourBucket;
use awsmp_operate::report::{MAX_AXIS_HOURS, Rejection, ReportPage, Series};
use awsmp_operate::status::HourCounts;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use sha2::{Digest, Sha256};

/// The CSP source that allows exactly the inline text `text`: `'sha256-<base64>'`.
fn csp_source(text: &str) -> String {
    format!(
        "'sha256-{}'",
        BASE64.encode(Sha256::digest(text.as_bytes()))
    )
}

/// Okabe–Ito colours (distinguishable with the common colour-vision deficiencies);
/// `k<n>` in the stylesheet. Dimensions cycle through them.
const PALETTE: [&str; 8] = [
    "#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#8C8C8C",
];
/// One meaning per colour across the status charts.
const BLUE_SKY: usize = 4;
const GREEN: usize = 2;
const VERMILLION: usize = 5;
const PURPLE: usize = 3;
const ORANGE: usize = 1;
const GREY: usize = 7;

/// The SVG canvas (scaled to the page width).
const WIDTH: f64 = 960.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 20.0;
const PLOT_HEIGHT: f64 = 220.0;
const BOTTOM: f64 = 44.0;
/// Longest label drawn in the SVG; the table carries the whole text.
const LABEL_CHARS: usize = 120;

/// `text` safe inside HTML text and quoted attribute values (SVG included): the five
/// markup characters become references and control characters (other than tab and
/// newline) become U+FFFD.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            '\t' | '\n' => out.push(c),
            c if c.is_control() => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

fn stylesheet() -> String {
    let mut css = String::from(concat!(
        ":root{color-scheme:light}",
        "*{box-sizing:border-box}",
        "body{margin:0;font:14px/1.45 system-ui,-apple-system,\"Segoe UI\",Roboto,\"Liberation Sans\",Arial,sans-serif;color:#1b1f24;background:#f6f7f9}",
        "header,main,footer{max-width:1100px;margin:0 auto;padding:12px 24px}",
        "header{padding-top:24px}",
        "h1{font-size:24px;margin:0 0 4px}",
        "h2{font-size:19px;margin:24px 0 8px;border-bottom:1px solid #d0d7de;padding-bottom:4px}",
        ".sub{margin:2px 0;color:#424a53}",
        "figure{margin:16px 0;padding:12px 16px;background:#fff;border:1px solid #d0d7de;border-radius:6px}",
        "figcaption{font-weight:600;font-size:16px;margin-bottom:6px}",
        "svg{display:block;width:100%;height:auto}",
        "svg text{font-size:12px;fill:#424a53;font-family:inherit}",
        "svg .grid{stroke:#e6e9ed}",
        "svg .axis{stroke:#8c959f}",
        "svg rect.bar{stroke:#fff;stroke-width:.5}",
        "svg .empty{font-size:15px;fill:#6e7781}",
        ".legend{list-style:none;padding:0;margin:8px 0;display:flex;flex-wrap:wrap;gap:4px 16px}",
        ".sw{display:inline-block;width:12px;height:12px;border-radius:2px;margin-right:6px;vertical-align:-1px}",
        ".scroll{overflow-x:auto}",
        "table{border-collapse:collapse;margin-top:8px;font-size:13px}",
        "caption{text-align:left;font-weight:600;padding:4px 0;color:#424a53}",
        "th,td{border:1px solid #d0d7de;padding:3px 8px;text-align:left;overflow-wrap:anywhere}",
        "thead th{background:#f0f2f4}",
        ".n{text-align:right;font-variant-numeric:tabular-nums}",
        "tfoot td{font-weight:600}",
        "dl.totals{display:grid;grid-template-columns:repeat(auto-fit,minmax(150px,1fr));gap:8px;margin:8px 0}",
        "dl.totals div{background:#fff;border:1px solid #d0d7de;border-radius:6px;padding:8px 12px}",
        "dt{color:#424a53;font-size:12px}",
        "dd{margin:0;font-size:20px;font-weight:600}",
        ".note{color:#6e7781;font-size:12px}",
    ));
    for (i, colour) in PALETTE.iter().enumerate() {
        css.push_str(&format!(".k{i}{{fill:{colour};background:{colour}}}"));
    }
    css
}

/// "product P, stage S" (or the stacks, when the deployment was named otherwise).
fn deployment(page: &ReportPage) -> String {
    match (&page.product_code, &page.stage) {
        (Some(p), Some(s)) => format!("product {p}, stage {s}"),
        (Some(p), None) => format!("product {p}"),
        (None, Some(s)) => format!("stage {s}"),
        (None, None) => {
            let stacks: Vec<&str> = page
                .regions
                .iter()
                .filter_map(|r| r.stack.as_deref())
                .collect();
            if stacks.is_empty() {
                "tables named on the command line".to_string()
            } else {
                format!("stack {}", stacks.join(", "))
            }
        }
    }
}

fn range(page: &ReportPage) -> (String, String) {
    let from = page
        .regions
        .iter()
        .map(|r| r.series.from)
        .min()
        .unwrap_or_else(|| HourBucket::containing(page.generated));
    (
        from.start().format("%Y-%m-%dT%H:%M").to_string(),
        page.generated.format("%Y-%m-%dT%H:%M").to_string(),
    )
}

/// The page's title (unescaped): product, stage, Regions and time range.
pub fn title(page: &ReportPage) -> String {
    let regions: Vec<&str> = page.regions.iter().map(|r| r.region.as_str()).collect();
    let (from, to) = range(page);
    format!(
        "awsmp report: {}, {}: {from} to {to} UTC",
        deployment(page),
        regions.join(", ")
    )
}

/// The whole page.
pub fn render(page: &ReportPage) -> String {
    let css = stylesheet();
    // Nothing may load or run: the one inline stylesheet applies by its hash.
    let csp = format!(
        "default-src 'none'; style-src {}; img-src 'none'; base-uri 'none'; form-action 'none'",
        csp_source(&css)
    );
    let (from, to) = range(page);
    let mut out = String::new();
    out.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    out.push_str(&format!(
        "<meta http-equiv=\"Content-Security-Policy\" content=\"{}\">\n",
        escape(&csp)
    ));
    out.push_str("<meta name=\"referrer\" content=\"no-referrer\">\n");
    out.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
    out.push_str(&format!("<title>{}</title>\n", escape(&title(page))));
    out.push_str(&format!("<style>{css}</style>\n</head>\n<body>\n"));
    out.push_str("<header>\n<h1>Metering report</h1>\n");
    out.push_str(&format!(
        "<p class=\"sub\">{}; Region{} {}</p>\n",
        escape(&deployment(page)),
        if page.regions.len() == 1 { "" } else { "s" },
        escape(
            &page
                .regions
                .iter()
                .map(|r| r.region.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )
    ));
    out.push_str(&format!(
        "<p class=\"sub\">Usage hours from {from} to {to} UTC (the last {} hour{}), read from the usage and aggregated-usage tables at {} UTC.</p>\n</header>\n<main>\n",
        page.hours,
        if page.hours == 1 { "" } else { "s" },
        page.generated.format("%Y-%m-%dT%H:%M:%S")
    ));
    for (i, region) in page.regions.iter().enumerate() {
        out.push_str(&section(
            &format!("r{i}"),
            &region.region,
            region.stack.as_deref(),
            &region.series,
        ));
    }
    out.push_str("</main>\n<footer>\n<p class=\"note\">Billed means Success or DuplicateRecord (billed by an earlier attempt), as <code>awsmp status</code> counts it; failures are those <code>awsmp failures</code> lists, with the remedy there. What AWS itself recorded: <code>awsmp trail</code> and <code>awsmp reconcile</code>. Written by <code>awsmp report</code>; this page loads nothing and runs no script.</p>\n</footer>\n</body>\n</html>\n");
    out
}

fn section(id: &str, region: &str, stack: Option<&str>, series: &Series) -> String {
    let mut out = format!(
        "<section aria-labelledby=\"{id}\">\n<h2 id=\"{id}\">Region {}",
        escape(region)
    );
    if let Some(stack) = stack {
        out.push_str(&format!(
            " <span class=\"note\">(stack {})</span>",
            escape(stack)
        ));
    }
    out.push_str("</h2>\n");
    out.push_str(&totals(series));
    let axis = series.axis();
    if let Some(charges) = &series.charges {
        out.push_str(&charges_table(charges));
        for currency in charges.total.keys() {
            out.push_str(&revenue_figure(
                &format!("{id}-charges-{}", currency.to_ascii_lowercase()),
                region,
                charges,
                currency,
                &axis,
            ));
        }
    }
    out.push_str(&billed_figure(
        &format!("{id}-billed"),
        region,
        series,
        &axis,
    ));
    out.push_str(&records_figure(
        &format!("{id}-records"),
        region,
        series,
        &axis,
    ));
    out.push_str(&rows_figure(&format!("{id}-rows"), region, series, &axis));
    out.push_str(&rejections_figure(
        &format!("{id}-rejections"),
        region,
        &series.rejections,
    ));
    out.push_str("</section>\n");
    out
}

/// The estimated charges: per currency, per buyer, and what no rate card prices.
fn charges_table(c: &awsmp_operate::report::Charges) -> String {
    let money = |amounts: &std::collections::BTreeMap<String, String>| {
        if amounts.is_empty() {
            "none".to_string()
        } else {
            amounts
                .iter()
                .map(|(currency, amount)| format!("{} {}", escape(currency), escape(amount)))
                .collect::<Vec<_>>()
                .join(", ")
        }
    };
    let mut out = format!(
        "<h3>Estimated charges: {}</h3>\n<p class=\"note\">{}</p>\n",
        money(&c.total),
        escape(c.label)
    );
    if let Some(why) = &c.unavailable {
        out.push_str(&format!(
            "<p class=\"note\">Some rate cards could not be read: {}</p>\n",
            escape(why)
        ));
    }
    if !c.by_buyer.is_empty() {
        out.push_str("<table>\n<caption>Estimated charges per buyer</caption>\n<thead><tr><th scope=\"col\">license</th><th scope=\"col\">account</th><th scope=\"col\">agreement</th><th scope=\"col\">estimated</th><th scope=\"col\">free-trial quantity</th></tr></thead>\n<tbody>\n");
        for b in &c.by_buyer {
            out.push_str(&format!(
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"num\">{}</td></tr>\n",
                escape(&b.license_arn),
                escape(&b.customer_aws_account_id),
                escape(b.agreement_id.as_deref().unwrap_or("")),
                money(&b.amounts),
                b.free_trial_quantity
            ));
        }
        out.push_str("</tbody>\n</table>\n");
    }
    if !c.unpriced.is_empty() {
        out.push_str("<table>\n<caption>Billed dimensions the buyer's rate card does not price (on a private offer, billed at nothing)</caption>\n<thead><tr><th scope=\"col\">license</th><th scope=\"col\">account</th><th scope=\"col\">dimension</th><th scope=\"col\">quantity</th></tr></thead>\n<tbody>\n");
        for u in &c.unpriced {
            out.push_str(&format!(
                "<tr><td>{}</td><td>{}</td><td>{}</td><td class=\"num\">{}</td></tr>\n",
                escape(&u.license_arn),
                escape(&u.customer_aws_account_id),
                escape(&u.dimension),
                u.quantity
            ));
        }
        out.push_str("</tbody>\n</table>\n");
    }
    if !c.without_rate_card.is_empty() {
        out.push_str(&format!(
            "<p class=\"note\">No rate card for {} license(s): their usage is in no amount.</p>\n",
            c.without_rate_card.len()
        ));
    }
    out
}

fn totals(series: &Series) -> String {
    let sum = |f: fn(&HourCounts) -> u64| series.status.values().map(f).sum::<u64>();
    let items = [
        ("quantity billed", series.quantity_billed().to_string()),
        ("records billed", sum(|c| c.records_billed).to_string()),
        ("records pending", sum(|c| c.records_pending).to_string()),
        (
            "records failed or expired",
            sum(|c| c.records_error + c.records_not_subscribed + c.records_expired).to_string(),
        ),
        ("rows rejected", sum(|c| c.rows_rejected).to_string()),
        ("rows pending", sum(|c| c.rows_pending).to_string()),
    ];
    let mut out = String::from("<dl class=\"totals\">\n");
    for (label, value) in items {
        out.push_str(&format!("<div><dt>{label}</dt><dd>{value}</dd></div>\n"));
    }
    out.push_str("</dl>\n");
    let mut notes = Vec::new();
    if series.rows_unplaced > 0 {
        notes.push(format!(
            "{} raw row(s) have an unreadable timestamp and are on no hour",
            series.rows_unplaced
        ));
    }
    if series.records_unreadable > 0 {
        notes.push(format!(
            "{} aggregated item(s) cannot be read as records (listed under failures)",
            series.records_unreadable
        ));
    }
    if series.hours_off_axis > 0 {
        notes.push(format!(
            "{} hour(s) with data fall outside the charts' {}-hour axis; the tables list them",
            series.hours_off_axis, MAX_AXIS_HOURS
        ));
    }
    if series.axis_from < series.from {
        notes.push(format!(
            "the charts start at {}: usage that old is still pending",
            series.axis_from
        ));
    }
    for note in notes {
        out.push_str(&format!("<p class=\"note\">{}.</p>\n", escape(&note)));
    }
    out
}

/// One stacked layer of a chart: its name and colour.
struct Layer {
    name: String,
    colour: usize,
}

fn legend(layers: &[Layer]) -> String {
    let mut out = String::from("<ul class=\"legend\">");
    for layer in layers {
        out.push_str(&format!(
            "<li><span class=\"sw k{}\"></span>{}</li>",
            layer.colour,
            escape(&layer.name)
        ));
    }
    out.push_str("</ul>\n");
    out
}

/// The smallest 1, 2 or 5 × 10^k step that draws `max` in at most five steps.
fn nice_step(max: i64) -> i64 {
    let raw = (max.max(1) + 4) / 5;
    let mut magnitude = 1i64;
    while magnitude.saturating_mul(10) <= raw {
        magnitude *= 10;
    }
    [1, 2, 5, 10]
        .iter()
        .map(|m| m * magnitude)
        .find(|s| *s >= raw)
        .unwrap_or(10 * magnitude)
}

/// Hours between x labels: the first of 1, 2, 3, 4, 6, 12 h or 1, 2, 3, 7, 14 days that
/// leaves at most 12 labels (whole steps of UTC, so a day step lands on midnight).
fn label_step(hours: usize) -> i64 {
    [1, 2, 3, 4, 6, 12, 24, 48, 72, 168, 336]
        .into_iter()
        .find(|s| hours as i64 <= 12 * s)
        .unwrap_or(744)
}

fn svg_open(id: &str, height: f64, title: &str, desc: &str) -> String {
    format!(
        "<svg role=\"img\" aria-labelledby=\"{id}-t {id}-d\" viewBox=\"0 0 {WIDTH} {height}\" width=\"{WIDTH}\" height=\"{height}\">\n<title id=\"{id}-t\">{}</title>\n<desc id=\"{id}-d\">{}</desc>\n",
        escape(title),
        escape(desc)
    )
}

/// A value of a chart whose values count units of 10^-`scale` (money in its smallest
/// shown unit), as its labels write it: exact, without trailing zeros.
fn scaled(value: i64, scale: u32) -> String {
    rust_decimal::Decimal::new(value, scale)
        .normalize()
        .to_string()
}

/// Stacked bars, one per hour of `axis`; `values[hour][layer]`, each counting units of
/// 10^-`scale` (0 for quantities and counts).
fn stacked_svg(
    id: &str,
    title: &str,
    unit: &str,
    axis: &[HourBucket],
    layers: &[Layer],
    values: &[Vec<i64>],
    scale: u32,
) -> String {
    let height = TOP + PLOT_HEIGHT + BOTTOM;
    let plot_width = WIDTH - LEFT - RIGHT;
    let base = TOP + PLOT_HEIGHT;
    let max = values
        .iter()
        .map(|v| v.iter().sum::<i64>())
        .max()
        .unwrap_or(0);
    let (first, last) = match (axis.first(), axis.last()) {
        (Some(f), Some(l)) => (f.to_string(), l.to_string()),
        _ => (String::new(), String::new()),
    };
    let desc = format!(
        "Stacked bars, one per hour from {first} to {last} UTC, of {unit} by {}; the highest hour has {}. The table below has every number.",
        layers
            .iter()
            .map(|l| l.name.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        scaled(max, scale)
    );
    let mut out = svg_open(id, height, title, &desc);
    let step = nice_step(max);
    let top_value = if max == 0 {
        1
    } else {
        step * ((max + step - 1) / step)
    };
    let y = |v: i64| base - v as f64 / top_value as f64 * PLOT_HEIGHT;
    out.push_str(&format!(
        "<text x=\"{LEFT}\" y=\"12\">{}</text>\n",
        escape(unit)
    ));
    if max > 0 {
        let mut tick = 0;
        while tick <= top_value {
            let ty = y(tick);
            out.push_str(&format!(
                "<line class=\"grid\" x1=\"{LEFT}\" x2=\"{:.1}\" y1=\"{ty:.1}\" y2=\"{ty:.1}\"/>\n<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>\n",
                WIDTH - RIGHT,
                LEFT - 6.0,
                ty + 4.0,
                scaled(tick, scale)
            ));
            tick += step;
        }
    } else {
        out.push_str(&format!(
            "<text class=\"empty\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">nothing in this range</text>\n",
            LEFT + plot_width / 2.0,
            TOP + PLOT_HEIGHT / 2.0
        ));
    }
    let n = axis.len().max(1) as f64;
    let slot = plot_width / n;
    let gap = if slot > 4.0 { slot * 0.15 } else { 0.0 };
    for (i, (hour, row)) in axis.iter().zip(values).enumerate() {
        let x = LEFT + i as f64 * slot + gap;
        let mut below = 0;
        for (layer, value) in layers.iter().zip(row) {
            if *value <= 0 {
                continue;
            }
            let top = y(below + value);
            out.push_str(&format!(
                "<rect class=\"bar k{}\" x=\"{x:.1}\" y=\"{top:.1}\" width=\"{:.1}\" height=\"{:.1}\"><title>{hour} {}: {}</title></rect>\n",
                layer.colour,
                (slot - 2.0 * gap).max(0.5),
                y(below) - top,
                escape(&layer.name),
                scaled(*value, scale)
            ));
            below += value;
        }
    }
    out.push_str(&format!(
        "<line class=\"axis\" x1=\"{LEFT}\" x2=\"{:.1}\" y1=\"{base:.1}\" y2=\"{base:.1}\"/>\n",
        WIDTH - RIGHT
    ));
    let every = label_step(axis.len());
    let mut last_date = None;
    for (i, hour) in axis.iter().enumerate() {
        if hour.start().timestamp().div_euclid(3600) % every != 0 {
            continue;
        }
        let cx = LEFT + (i as f64 + 0.5) * slot;
        out.push_str(&format!(
            "<line class=\"axis\" x1=\"{cx:.1}\" x2=\"{cx:.1}\" y1=\"{base:.1}\" y2=\"{:.1}\"/>\n<text x=\"{cx:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\n",
            base + 4.0,
            base + 17.0,
            hour.start().format("%H:00")
        ));
        let date = hour.start().format("%m-%d").to_string();
        if last_date.as_ref() != Some(&date) {
            out.push_str(&format!(
                "<text x=\"{cx:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{date}</text>\n",
                base + 32.0
            ));
            last_date = Some(date);
        }
    }
    out.push_str("</svg>\n");
    out
}

fn number_cell(value: impl std::fmt::Display) -> String {
    format!("<td class=\"n\">{value}</td>")
}

/// A table of `headers` (the first `text_columns` left-aligned, the rest numbers) and
/// rows.
fn table(
    id: &str,
    caption: &str,
    headers: &[String],
    text_columns: usize,
    rows: &[String],
    foot: Option<String>,
) -> String {
    let mut out = format!(
        "<div class=\"scroll\"><table id=\"{id}\">\n<caption>{}</caption>\n<thead><tr>",
        escape(caption)
    );
    for (i, h) in headers.iter().enumerate() {
        let class = if i < text_columns { "" } else { " class=\"n\"" };
        out.push_str(&format!("<th scope=\"col\"{class}>{}</th>", escape(h)));
    }
    out.push_str("</tr></thead>\n<tbody>\n");
    if rows.is_empty() {
        out.push_str(&format!(
            "<tr><td colspan=\"{}\">none in this range</td></tr>\n",
            headers.len()
        ));
    }
    for row in rows {
        out.push_str(row);
        out.push('\n');
    }
    out.push_str("</tbody>\n");
    if let Some(foot) = foot {
        out.push_str(&format!("<tfoot>{foot}</tfoot>\n"));
    }
    out.push_str("</table></div>\n");
    out
}

fn figure(id: &str, caption: &str, svg: String, legend: String, table: String) -> String {
    format!(
        "<figure aria-labelledby=\"{id}-c\">\n<figcaption id=\"{id}-c\">{}</figcaption>\n{svg}{legend}{table}</figure>\n",
        escape(caption)
    )
}

fn billed_figure(id: &str, region: &str, series: &Series, axis: &[HourBucket]) -> String {
    let layers: Vec<Layer> = series
        .dimensions
        .iter()
        .enumerate()
        .map(|(i, d)| Layer {
            name: d.clone(),
            colour: i % PALETTE.len(),
        })
        .collect();
    let values: Vec<Vec<i64>> = axis
        .iter()
        .map(|h| {
            let billed = series.billed.get(h);
            series
                .dimensions
                .iter()
                .map(|d| billed.and_then(|b| b.get(d)).copied().unwrap_or(0))
                .collect()
        })
        .collect();
    let caption = "Billed quantity per hour and dimension";
    let svg = stacked_svg(
        id,
        &format!("{caption}, {region}"),
        "quantity",
        axis,
        &layers,
        &values,
        0,
    );
    let mut headers = vec!["hour (UTC)".to_string()];
    headers.extend(series.dimensions.iter().cloned());
    headers.push("total".into());
    let rows: Vec<String> = series
        .billed
        .iter()
        .map(|(hour, dims)| {
            let mut row = format!("<tr><th scope=\"row\">{hour}</th>");
            for d in &series.dimensions {
                row.push_str(&number_cell(dims.get(d).copied().unwrap_or(0)));
            }
            row.push_str(&number_cell(dims.values().sum::<i64>()));
            row.push_str("</tr>");
            row
        })
        .collect();
    let foot = (!rows.is_empty()).then(|| {
        let mut foot = String::from("<tr><th scope=\"row\">total</th>");
        for d in &series.dimensions {
            let sum: i64 = series.billed.values().filter_map(|b| b.get(d)).sum();
            foot.push_str(&number_cell(sum));
        }
        foot.push_str(&number_cell(series.quantity_billed()));
        foot.push_str("</tr>");
        foot
    });
    let table = table(
        &format!("{id}-table"),
        "Billed quantity per hour and dimension (numbers)",
        &headers,
        1,
        &rows,
        foot,
    );
    figure(id, caption, svg, legend(&layers), table)
}

/// The estimated charges of each hour in `currency` (one chart per currency: amounts
/// are never added across currencies), beside the billed quantities; drawn in the
/// smallest unit any hour's amount needs, so every bar is exact.
fn revenue_figure(
    id: &str,
    region: &str,
    charges: &awsmp_operate::report::Charges,
    currency: &str,
    axis: &[HourBucket],
) -> String {
    /// The most decimal places a chart is drawn in (a bar below this is drawn as 0;
    /// its table cell still shows it).
    const MAX_SCALE: u32 = 8;
    let amount = |hour: &HourBucket| -> Option<rust_decimal::Decimal> {
        charges.by_hour.get(hour)?.get(currency)?.parse().ok()
    };
    let scale = charges
        .by_hour
        .keys()
        .filter_map(amount)
        .map(|a| a.normalize().scale())
        .max()
        .unwrap_or(0)
        .min(MAX_SCALE);
    let values: Vec<Vec<i64>> = axis
        .iter()
        .map(|h| {
            let units = amount(h).map_or(0, |mut a| {
                a.rescale(scale);
                i64::try_from(a.mantissa()).unwrap_or(i64::MAX)
            });
            vec![units]
        })
        .collect();
    let layers = [Layer {
        name: currency.to_string(),
        colour: GREEN,
    }];
    let caption =
        format!("Estimated charges per hour ({currency}), from the buyers' agreement terms");
    let svg = stacked_svg(
        id,
        &format!("{caption}, {region}"),
        currency,
        axis,
        &layers,
        &values,
        scale,
    );
    let rows: Vec<String> = charges
        .by_hour
        .iter()
        .filter_map(|(hour, amounts)| {
            let amount = amounts.get(currency)?;
            Some(format!(
                "<tr><th scope=\"row\">{hour}</th><td class=\"n\">{}</td></tr>",
                escape(amount)
            ))
        })
        .collect();
    let foot = charges.total.get(currency).map(|total| {
        format!(
            "<tr><th scope=\"row\">total</th><td class=\"n\">{}</td></tr>",
            escape(total)
        )
    });
    let table = table(
        &format!("{id}-table"),
        &format!("{caption} (numbers; an estimate, before tax and credits)"),
        &["hour (UTC)".to_string(), format!("estimated {currency}")],
        1,
        &rows,
        foot,
    );
    figure(id, &caption, svg, legend(&layers), table)
}

/// A column of a status-mix chart and table: its name, colour and count.
type Column = (&'static str, usize, fn(&HourCounts) -> u64);

/// Status columns of the records chart and table.
const RECORD_STATUSES: [Column; 6] = [
    ("billed", GREEN, |c| c.records_billed),
    ("pending", BLUE_SKY, |c| c.records_pending),
    ("Error", VERMILLION, |c| c.records_error),
    ("CustomerNotSubscribed", PURPLE, |c| {
        c.records_not_subscribed
    }),
    ("SubmissionExpired", ORANGE, |c| c.records_expired),
    ("DryRunSubmitted", GREY, |c| c.records_dry_run),
];

/// State columns of the raw rows chart and table.
const ROW_STATES: [Column; 4] = [
    ("counted", GREEN, |c| c.rows_counted),
    ("pending", BLUE_SKY, |c| c.rows_pending),
    ("RejectedClientSide", VERMILLION, |c| c.rows_rejected),
    ("AggregationExpired", ORANGE, |c| c.rows_expired),
];

fn mix_figure(
    id: &str,
    caption: &str,
    region: &str,
    unit: &str,
    columns: &[Column],
    series: &Series,
    axis: &[HourBucket],
) -> String {
    let layers: Vec<Layer> = columns
        .iter()
        .map(|(name, colour, _)| Layer {
            name: (*name).to_string(),
            colour: *colour,
        })
        .collect();
    let values: Vec<Vec<i64>> = axis
        .iter()
        .map(|h| {
            let counts = series.status.get(h);
            columns
                .iter()
                .map(|(_, _, f)| counts.map_or(0, |c| i64::try_from(f(c)).unwrap_or(i64::MAX)))
                .collect()
        })
        .collect();
    let svg = stacked_svg(
        id,
        &format!("{caption}, {region}"),
        unit,
        axis,
        &layers,
        &values,
        0,
    );
    let mut headers = vec!["hour (UTC)".to_string()];
    headers.extend(columns.iter().map(|(name, _, _)| (*name).to_string()));
    let rows: Vec<String> = series
        .status
        .iter()
        .filter(|(_, c)| columns.iter().any(|(_, _, f)| f(c) > 0))
        .map(|(hour, c)| {
            let mut row = format!("<tr><th scope=\"row\">{hour}</th>");
            for (_, _, f) in columns {
                row.push_str(&number_cell(f(c)));
            }
            row.push_str("</tr>");
            row
        })
        .collect();
    let table = table(
        &format!("{id}-table"),
        &format!("{caption} (numbers)"),
        &headers,
        1,
        &rows,
        None,
    );
    figure(id, caption, svg, legend(&layers), table)
}

fn records_figure(id: &str, region: &str, series: &Series, axis: &[HourBucket]) -> String {
    mix_figure(
        id,
        "Aggregated records per hour by status",
        region,
        "records",
        &RECORD_STATUSES,
        series,
        axis,
    )
}

fn rows_figure(id: &str, region: &str, series: &Series, axis: &[HourBucket]) -> String {
    mix_figure(
        id,
        "Usage rows per hour by state",
        region,
        "rows",
        &ROW_STATES,
        series,
        axis,
    )
}

fn status_colour(status: &str) -> usize {
    match status {
        "CustomerNotSubscribed" => PURPLE,
        "AggregationExpired" | "SubmissionExpired" => ORANGE,
        _ => VERMILLION,
    }
}

fn short(text: &str) -> String {
    if text.chars().count() <= LABEL_CHARS {
        text.to_string()
    } else {
        let mut cut: String = text.chars().take(LABEL_CHARS - 1).collect();
        cut.push('…');
        cut
    }
}

fn rejections_figure(id: &str, region: &str, rejections: &[Rejection]) -> String {
    let caption = "Rejections and failures by reason";
    const ROW: f64 = 40.0;
    let height = if rejections.is_empty() {
        60.0
    } else {
        TOP + ROW * rejections.len() as f64
    };
    let max = rejections.iter().map(|r| r.count).max().unwrap_or(0);
    let desc = format!(
        "Horizontal bars, one per status and reason, of how many rows or records ended that way in the range: {} kind(s), {} in all. The table below has every number.",
        rejections.len(),
        rejections.iter().map(|r| r.count).sum::<u64>()
    );
    let mut svg = svg_open(id, height, &format!("{caption}, {region}"), &desc);
    if rejections.is_empty() {
        svg.push_str(&format!(
            "<text class=\"empty\" x=\"{:.1}\" y=\"34\" text-anchor=\"middle\">no rejections or failures in this range</text>\n",
            WIDTH / 2.0
        ));
    }
    let bar_room = WIDTH - 80.0;
    for (i, r) in rejections.iter().enumerate() {
        let top = 8.0 + ROW * i as f64;
        let label = format!(
            "{}: {}",
            r.status,
            r.reason.as_deref().unwrap_or("(no reason stored)")
        );
        let width = (r.count as f64 / max.max(1) as f64 * bar_room).max(2.0);
        svg.push_str(&format!(
            "<text x=\"0\" y=\"{:.1}\">{}</text>\n<rect class=\"bar k{}\" x=\"0\" y=\"{:.1}\" width=\"{width:.1}\" height=\"14\"><title>{}: {}</title></rect>\n<text x=\"{:.1}\" y=\"{:.1}\">{}</text>\n",
            top + 12.0,
            escape(&short(&label)),
            status_colour(r.status),
            top + 18.0,
            escape(&label),
            r.count,
            width + 6.0,
            top + 30.0,
            r.count
        ));
    }
    svg.push_str("</svg>\n");
    let present: Vec<Layer> = [
        ("rejected or Error", VERMILLION),
        ("CustomerNotSubscribed", PURPLE),
        ("expired", ORANGE),
    ]
    .into_iter()
    .filter(|(_, colour)| {
        rejections
            .iter()
            .any(|r| status_colour(r.status) == *colour)
    })
    .map(|(name, colour)| Layer {
        name: name.to_string(),
        colour,
    })
    .collect();
    let headers: Vec<String> = [
        "status",
        "reason",
        "server-side exception",
        "count",
        "quantity",
    ]
    .iter()
    .map(|h| h.to_string())
    .collect();
    let rows: Vec<String> = rejections
        .iter()
        .map(|r| {
            format!(
                "<tr><td>{}</td><td>{}</td><td>{}</td>{}{}</tr>",
                r.status,
                escape(r.reason.as_deref().unwrap_or("-")),
                escape(r.server_side.as_deref().unwrap_or("-")),
                number_cell(r.count),
                number_cell(r.quantity)
            )
        })
        .collect();
    let table = table(
        &format!("{id}-table"),
        "Rejections and failures by reason (numbers; awsmp failures lists each with its remedy)",
        &headers,
        3,
        &rows,
        None,
    );
    let legend = if present.is_empty() {
        String::new()
    } else {
        legend(&present)
    };
    figure(id, caption, svg, legend, table)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use awsmp_core::memory::fixtures::operator_record;
    use awsmp_core::model::AggregatedStatus;
    use awsmp_core::time::parse_usage_timestamp;
    use awsmp_operate::report::{RegionReport, series};

    fn page(dimension: &str, reason: &str, region: &str) -> ReportPage {
        let now = parse_usage_timestamp("2026-11-30T12:30:00Z").unwrap();
        let mut billed = operator_record(
            dimension,
            "2026-11-30T10",
            AggregatedStatus::Success,
            3,
            None,
        );
        billed.key.license_arn = "arn:aws:license-manager::1:license:l-\"><b>x</b>".into();
        let records = [
            billed,
            operator_record(
                "api",
                "2026-11-30T11",
                AggregatedStatus::Error,
                2,
                Some(reason),
            ),
        ];
        ReportPage {
            product_code: Some("prod&co".into()),
            stage: Some("test".into()),
            generated: now,
            hours: 6,
            regions: vec![RegionReport {
                region: region.into(),
                stack: Some("awsmp-main-prod-test".into()),
                series: series(&[], &records, &[], now, 6),
            }],
        }
    }

    #[test]
    fn escapes_markup_quotes_and_control_characters() {
        assert_eq!(
            escape("<script>alert('x')</script> & \"y\"\u{0}"),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;y&quot;\u{FFFD}"
        );
        assert_eq!(escape("Seats\tA"), "Seats\tA");
    }

    #[test]
    fn stored_text_never_becomes_markup() {
        // GIVEN a dimension, a reason and a Region that are markup
        let html = render(&page(
            "<script>alert(1)</script>",
            "<img src=x onerror=alert(2)>",
            "us-east-1\"><svg onload=alert(3)>",
        ));
        // THEN none of it reaches the page as a tag or an attribute
        assert!(!html.contains("<script"), "{html}");
        assert!(!html.contains("<img"));
        assert!(!html.contains("<svg onload"));
        assert!(!html.contains("<b>x</b>"));
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(html.contains("&lt;img src=x onerror=alert(2)&gt;"));
        assert!(html.contains("us-east-1&quot;&gt;&lt;svg onload=alert(3)&gt;"));
        // and the page's only markup is its own: four charts, no script at all.
        assert_eq!(html.matches("<svg").count(), 4);
        assert!(!html.to_lowercase().contains("javascript:"));
    }

    #[test]
    fn the_policy_allows_exactly_the_inline_stylesheet_and_nothing_else() {
        let html = render(&page("api", "X", "us-east-1"));
        let css = stylesheet();
        assert!(html.contains(&format!("<style>{css}</style>")));
        let policy = format!(
            "default-src &#39;none&#39;; style-src &#39;sha256-{}&#39;;",
            BASE64.encode(Sha256::digest(css.as_bytes()))
        );
        assert!(html.contains(&policy), "{html}");
        assert!(!html.contains("unsafe-inline"));
        // No style attribute (the hash does not cover them), nothing fetched.
        assert!(!html.contains(" style=\""));
        assert!(!html.contains("http://") && !html.contains("https://"));
    }

    #[test]
    fn writes_the_source_chromium_asks_for() {
        // Chromium's own console message for `<style>body{background:#fc0}</style>`
        // under a wrong hash names this source.
        assert_eq!(
            csp_source("body{background:#fc0}"),
            "'sha256-ZXvBwLRXbqnIHHj2uyK58i1jutKEPHVRb7VwacY2IoA='"
        );
    }

    #[test]
    fn names_the_deployment_and_range_and_labels_every_chart() {
        let p = page("api", "InvalidUsageDimensionException", "us-east-1");
        assert_eq!(
            title(&p),
            "awsmp report: product prod&co, stage test, us-east-1: 2026-11-30T07:00 to 2026-11-30T12:30 UTC"
        );
        let html = render(&p);
        assert!(html.contains(
            "<title>awsmp report: product prod&amp;co, stage test, us-east-1: 2026-11-30T07:00 to 2026-11-30T12:30 UTC</title>"
        ));
        for chart in ["billed", "records", "rows", "rejections"] {
            assert!(html.contains(&format!("aria-labelledby=\"r0-{chart}-t r0-{chart}-d\"")));
            assert!(html.contains(&format!("<title id=\"r0-{chart}-t\">")));
            assert!(html.contains(&format!("<table id=\"r0-{chart}-table\">")));
        }
        // The billed table: the hour, its dimension's quantity and the total.
        assert!(html.contains(
            "<tr><th scope=\"row\">2026-11-30T10</th><td class=\"n\">3</td><td class=\"n\">3</td></tr>"
        ));
        assert!(html.contains(
            "<tr><td>Error</td><td>InvalidUsageDimensionException</td><td>InvalidUsageDimensionException</td><td class=\"n\">1</td><td class=\"n\">2</td></tr>"
        ));
    }

    #[test]
    fn the_estimated_charges_are_charted_per_currency_exactly_beside_the_quantities() {
        let mut p = page("api", "InvalidUsageDimensionException", "us-east-1");
        let hour = |h: &str| h.parse::<HourBucket>().unwrap();
        let amounts = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(c, a)| (c.to_string(), a.to_string()))
                .collect::<std::collections::BTreeMap<_, _>>()
        };
        p.regions[0].series.charges = Some(awsmp_operate::report::Charges {
            label: awsmp_core::charges::ESTIMATE_LABEL,
            unavailable: None,
            total: amounts(&[("EUR", "2"), ("USD", "0.105")]),
            by_hour: [
                (hour("2026-11-30T10"), amounts(&[("USD", "0.0075")])),
                (
                    hour("2026-11-30T11"),
                    amounts(&[("EUR", "2"), ("USD", "0.0975")]),
                ),
            ]
            .into_iter()
            .collect(),
            by_day: Default::default(),
            by_dimension: Default::default(),
            by_buyer: Vec::new(),
            unpriced: Vec::new(),
            without_rate_card: Vec::new(),
        });
        let html = render(&p);
        // One chart per currency, never one sum across them.
        assert_eq!(html.matches("<svg").count(), 6);
        for currency in ["usd", "eur"] {
            assert!(html.contains(&format!("<table id=\"r0-charges-{currency}-table\">")));
        }
        // Each hour's bar and row say its amount exactly, and the foot the total.
        assert!(
            html.contains("<title>2026-11-30T11 USD: 0.0975</title>"),
            "{html}"
        );
        assert!(html.contains("<title>2026-11-30T10 USD: 0.0075</title>"));
        assert!(
            html.contains(
                "<tr><th scope=\"row\">2026-11-30T11</th><td class=\"n\">0.0975</td></tr>"
            )
        );
        assert!(html.contains("<tr><th scope=\"row\">total</th><td class=\"n\">0.105</td></tr>"));
        assert!(
            html.contains("Estimated charges per hour (USD), from the buyers&#39; agreement terms")
        );
        assert!(html.contains("an estimate, before tax and credits"));
        // The EUR chart has no USD in it.
        let eur = &html[html.find("r0-charges-eur-t").unwrap()..];
        let eur = &eur[..eur.find("</figure>").unwrap()];
        assert!(eur.contains("<title>2026-11-30T11 EUR: 2</title>"));
        assert!(!eur.contains("USD"));
    }

    #[test]
    fn an_empty_range_still_draws_four_labelled_charts() {
        let now = parse_usage_timestamp("2026-11-30T12:30:00Z").unwrap();
        let p = ReportPage {
            product_code: None,
            stage: None,
            generated: now,
            hours: 24,
            regions: vec![RegionReport {
                region: "eu-west-1".into(),
                stack: None,
                series: series(&[], &[], &[], now, 24),
            }],
        };
        let html = render(&p);
        assert_eq!(html.matches("<svg").count(), 4);
        assert_eq!(html.matches("nothing in this range").count(), 3);
        assert!(html.contains("no rejections or failures in this range"));
        assert!(title(&p).starts_with("awsmp report: tables named on the command line, eu-west-1"));
    }

    #[test]
    fn steps_are_round_and_labels_few() {
        assert_eq!(
            [1, 4, 5, 6, 10, 11, 23, 99, 101, 4999].map(nice_step),
            [1, 1, 1, 2, 2, 5, 5, 20, 50, 1000]
        );
        assert_eq!(
            [1, 12, 13, 24, 25, 168, 744].map(label_step),
            [1, 1, 2, 2, 3, 24, 72]
        );
    }
}

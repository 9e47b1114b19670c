//! The shipped `awsmp` binary, run as a seller runs it, against the local stack
//! (moto + the Marketplace simulator, both stacks from the templates, after the demo's
//! lifecycle): every command's output and exit code against a golden file in
//! `tests/golden/` (times shown relative to the demo's first hour, ids, ports and
//! temporary paths masked), and every `--json` output against its JSON Schema in
//! `docs/schemas/` (checked by `scripts/check_json_schema.py` in the project's venv).
//!
//! After a deliberate change of output: `AWSMP_BLESS=1 cargo test -p awsmp-cli --test
//! binary`, then review the golden files' diff like code.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use awsmp_core::time::{HourBucket, Instant};
use awsmp_local_stack::system::{LOCAL_PRODUCT_CODE, LOCAL_STAGE, LocalPaths, LocalSystem};
use awsmp_local_stack::{demo, demo_start};
use chrono::{Duration, Timelike};
use regex::{Captures, Regex};

/// The demo's first license (billed usage in two hours) and its buyer.
const LICENSE: &str =
    "arn:aws:license-manager::123456789012:license:l-0a1b2c3d4e5f60718293a4b5c6d7e8f9";
/// The demo's other license, still active at its end.
const ACTIVE_LICENSE: &str =
    "arn:aws:license-manager::123456789012:license:l-1f2e3d4c5b6a79807162534a5b6c7d8e";
const ACCOUNT: &str = "111122223333";
/// The license's requests from that account, as `usage put` and `inspect group` name them.
const REQUESTS: [&str; 6] = [
    "--license",
    LICENSE,
    "--account",
    ACCOUNT,
    "--dimension",
    "requests",
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// One run of the binary: its arguments, and the schema its stdout must match (for
/// `--json` runs).
struct Case {
    name: &'static str,
    args: Vec<String>,
    schema: Option<&'static str>,
    /// Environment to drop for this run (e.g. the CloudTrail endpoint).
    without: &'static [&'static str],
}

fn case(name: &'static str, args: &[&str]) -> Case {
    Case {
        name,
        args: args.iter().map(|a| a.to_string()).collect(),
        schema: None,
        without: &[],
    }
}

fn json(name: &'static str, schema: &'static str, args: &[&str]) -> Case {
    let mut args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    args.insert(0, "--json".into());
    Case {
        name,
        args,
        schema: Some(schema),
        without: &[],
    }
}

struct Ran {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Runs the binary off the async runtime: the simulator serves CloudTrail from this
/// process, so a blocking wait on the runtime's thread would starve it.
async fn run(env: &[(String, String)], case: &Case, home: &Path) -> Ran {
    let mut command = Command::new(env!("CARGO_BIN_EXE_awsmp"));
    command
        .args(&case.args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("NO_COLOR", "1");
    for (k, v) in env {
        if !case.without.contains(&k.as_str()) {
            command.env(k, v);
        }
    }
    let out = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .expect("the awsmp binary runs");
    Ran {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Masks what differs between runs: ports, ids, temporary paths, and times. A time or
/// hour within the demo's virtual span is shown relative to its first hour (`<h0>`,
/// `<h2+00:45:00>`), so the golden files still say which hour a row belongs to; times
/// that follow the real clock are `<time>`, `<minute>`, `<hour>`, `<month>`.
struct Mask {
    base: HourBucket,
    tmp: String,
    rules: Vec<(Regex, &'static str)>,
    time: Regex,
    minute: Regex,
    hour: Regex,
}

impl Mask {
    fn new(base: HourBucket, tmp: &Path) -> Self {
        let r = |p: &str| Regex::new(p).unwrap();
        Mask {
            base,
            tmp: tmp.display().to_string(),
            rules: vec![
                (r(r"https?://127\.0\.0\.1:\d+"), "<endpoint>"),
                (
                    r(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"),
                    "<uuid>",
                ),
                // The estimated charges per UTC day: the demo's hours fall on one day or,
                // run near midnight, on two (`awsmp-operate`'s tests hold the sums).
                (
                    r(r#""by_day": \{(?:[^{}]|\{[^{}]*\})*\}"#),
                    r#""by_day": "<days>""#,
                ),
                // Event History's horizon is the real clock minus 15 minutes: inside the
                // demo's span before a quarter past the hour, after it otherwise.
                (
                    r(
                        r#"(Calls after |"visible_until": ")\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z"#,
                    ),
                    "${1}<time>",
                ),
            ],
            time: r(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z"),
            minute: r(r"\b\d{4}-\d{2}-\d{2}T\d{2}:\d{2}\b"),
            hour: r(r"\b\d{4}-\d{2}-\d{2}T\d{2}\b"),
        }
    }

    /// The demo's span: its first hour to three hours later.
    fn relative(&self, at: Instant) -> Option<(i64, Duration)> {
        let into = at - self.base.start();
        let hours = into.num_hours();
        (into >= Duration::zero() && hours <= 3).then(|| (hours, into - Duration::hours(hours)))
    }

    /// Rewrites each match of `re` that `at` reads as an instant within the demo's span
    /// as `shown` writes it (whole hours after the first hour, and the rest), and any
    /// other match as `outside`.
    fn relative_matches(
        &self,
        text: &str,
        re: &Regex,
        at: impl Fn(&Captures) -> Option<Instant>,
        shown: impl Fn(i64, Duration) -> String,
        outside: &str,
    ) -> String {
        re.replace_all(text, |c: &Captures| {
            match at(c).and_then(|at| self.relative(at)) {
                Some((h, rest)) => shown(h, rest),
                None => outside.to_string(),
            }
        })
        .into_owned()
    }

    fn apply(&self, text: &str) -> String {
        let mut out = text.replace(&self.tmp, "<tmp>");
        for (re, with) in &self.rules {
            out = re.replace_all(&out, *with).into_owned();
        }
        out = self.relative_matches(
            &out,
            &self.time,
            // A time with fractions of a second follows the real clock.
            |c| {
                let at: Instant = c[0].parse().unwrap();
                c.get(1).is_none().then_some(at)
            },
            |h, rest| {
                format!(
                    "<h{h}+{:02}:{:02}:{:02}>",
                    rest.num_hours(),
                    rest.num_minutes() % 60,
                    rest.num_seconds() % 60
                )
            },
            "<time>",
        );
        out = self.relative_matches(
            &out,
            &self.minute,
            |c| Some(format!("{}:00Z", &c[0]).parse().unwrap()),
            |h, rest| {
                format!(
                    "<h{h}+{:02}:{:02}>",
                    rest.num_hours(),
                    rest.num_minutes() % 60
                )
            },
            "<minute>",
        );
        out = self.relative_matches(
            &out,
            &self.hour,
            |c| Some(format!("{}:00:00Z", &c[0]).parse().unwrap()),
            |h, _| format!("<h{h}>"),
            "<hour>",
        );
        out = Regex::new(r"\b\d{4}-\d{2}\b")
            .unwrap()
            .replace_all(&out, "<month>")
            .into_owned();
        // Cell widths follow the masked values' real lengths: compare tables by their
        // cells, not their padding.
        out.lines()
            .map(|line| {
                if line.starts_with('|') {
                    let line = Regex::new(r" {2,}").unwrap().replace_all(line, " ");
                    Regex::new(r"-{3,}")
                        .unwrap()
                        .replace_all(&line, "--")
                        .into_owned()
                } else {
                    line.trim_end().to_string()
                }
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

fn golden_text(mask: &Mask, case: &Case, ran: &Ran) -> String {
    format!(
        "$ awsmp {}\nexit {}\n--- stdout\n{}\n--- stderr\n{}\n",
        mask.apply(&case.args.join(" ")),
        ran.code,
        mask.apply(&ran.stdout),
        mask.apply(&ran.stderr)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_command_of_the_binary_prints_what_its_golden_file_and_schema_say() {
    let root = root();
    let now = chrono::Utc::now();
    // The demo's hours in one month (its first four hours on the 1st would straddle
    // two, and `reconcile --month` would compare another set): start further back.
    let mut start = demo_start(now);
    if (start + Duration::hours(4)).format("%Y-%m").to_string() != start.format("%Y-%m").to_string()
    {
        start -= Duration::hours(5);
    }
    let base = HourBucket::containing(start);
    let mut system = LocalSystem::start(&LocalPaths { root: root.clone() }, start)
        .await
        .expect("the local stack starts (moto from the project's venv: make venv)");
    demo::run(&mut system).await.expect("the demo bills usage");

    let tmp = std::env::temp_dir().join(format!("awsmp-binary-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let env: Vec<(String, String)> = [
        ("AWS_ENDPOINT_URL", system.moto.endpoint().to_string()),
        ("AWS_ENDPOINT_URL_CLOUDTRAIL", system.sim.endpoint_url()),
        // The report's estimated charges read the buyers' agreements there too.
        (
            "AWS_ENDPOINT_URL_MARKETPLACE_AGREEMENT",
            system.sim.endpoint_url(),
        ),
        ("AWS_REGION", "us-east-1".to_string()),
        ("AWS_ACCESS_KEY_ID", "test".to_string()),
        ("AWS_SECRET_ACCESS_KEY", "test".to_string()),
        ("AWSMP_STAGE", LOCAL_STAGE.to_string()),
        ("AWSMP_PRODUCT_CODE", LOCAL_PRODUCT_CODE.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();

    let h0 = base.to_string();
    let month = h0[..7].to_string();
    let since = awsmp_core::time::format_instant(base.start());
    let group = format!("{LICENSE}|{ACCOUNT}|requests|{h0}");
    let report = tmp.join("report.html");
    let report = report.to_str().unwrap();
    // A usage instant the pipeline accepts now: this minute, on the real clock.
    let put_at =
        awsmp_core::time::format_instant(now.with_second(0).unwrap().with_nanosecond(0).unwrap());
    let import = tmp.join("usage.csv");
    std::fs::write(
        &import,
        format!(
            "licenseArn,customerAWSAccountId,dimension,timestamp,quantity,eventId\n\
             {LICENSE},{ACCOUNT},requests,{put_at},2,golden-import-1\n\
             {LICENSE},{ACCOUNT},requests,{put_at},-4,golden-import-2\n\
             {LICENSE},{ACCOUNT},requests,not-a-time,1,golden-import-3\n"
        ),
    )
    .unwrap();
    let import = import.to_str().unwrap();
    // A file whose first line is data, and an empty one: both refused whole.
    let no_header = tmp.join("no-header.csv");
    std::fs::write(
        &no_header,
        format!("{LICENSE},{ACCOUNT},requests,{put_at},2,golden-import-9\n"),
    )
    .unwrap();
    let no_header = no_header.to_str().unwrap();
    let empty = tmp.join("empty.jsonl");
    std::fs::write(&empty, "").unwrap();
    let empty = empty.to_str().unwrap();
    let inspect_other_case = [
        &[
            "inspect",
            "group",
            "--license",
            LICENSE,
            "--account",
            ACCOUNT,
        ][..],
        &["--dimension", "Requests", "--hour", &h0],
    ]
    .concat();
    let bare_license = LICENSE.rsplit(':').next().unwrap();
    // `usage put` writes for the license that stays active (the demo deprovisions
    // LICENSE, and a put for an inactive license is refused: its own case below).
    let put = |event: &str, quantity: &str| -> Vec<String> {
        [
            &["usage", "put"][..],
            &[
                "--license",
                ACTIVE_LICENSE,
                "--account",
                ACCOUNT,
                "--dimension",
                "requests",
            ],
            &[
                "--quantity",
                quantity,
                "--timestamp",
                &put_at,
                "--event-id",
                event,
            ],
        ]
        .concat()
        .iter()
        .map(|s| s.to_string())
        .collect()
    };

    let inspect_group = [&["inspect", "group"][..], &REQUESTS, &["--hour", &h0]].concat();
    // A correction of a record billed this month: refused, its month not invoiced yet.
    let correction = format!("{ACTIVE_LICENSE}|{ACCOUNT}|requests|{h0}=1");
    let mut cases = vec![
        case("status", &["status"]),
        json("status-json", "status", &["status"]),
        case("failures", &["failures"]),
        json("failures-json", "failures", &["failures"]),
        case("inspect-license", &["inspect", "license", LICENSE]),
        json(
            "inspect-license-json",
            "inspect-license",
            &["inspect", "license", LICENSE],
        ),
        case("inspect-group", &inspect_group),
        json("inspect-group-json", "inspect-group", &inspect_group),
        case("trail", &["trail", "--since", &since]),
        json("trail-json", "trail", &["trail", "--since", &since]),
        case("reconcile", &["reconcile", "--month", &month]),
        json(
            "reconcile-json",
            "reconcile",
            &["reconcile", "--month", &month],
        ),
        case(
            "replay-dry-run",
            &["replay", "--failed-since", &h0, "--dry-run"],
        ),
        json(
            "replay-dry-run-json",
            "replay",
            &["replay", "--failed-since", &h0, "--dry-run"],
        ),
        case("replay-refused", &["replay", &group]),
        json("replay-refused-json", "replay", &["replay", &group]),
        case(
            "dlq-redrive-dry-run",
            &["dlq", "redrive", "work", "--dry-run"],
        ),
        json(
            "dlq-redrive-dry-run-json",
            "dlq-redrive",
            &["dlq", "redrive", "work", "--dry-run"],
        ),
        case("report", &["report", "--html", report]),
        json("report-json", "report", &["report"]),
        case("usage-import-bad-lines", &["usage", "import", import]),
        json(
            "usage-import-bad-lines-json",
            "usage-import",
            &["usage", "import", import],
        ),
        case("usage-import-no-header", &["usage", "import", no_header]),
        case("usage-import-empty", &["usage", "import", empty]),
        case(
            "inspect-license-bare-id",
            &["inspect", "license", bare_license],
        ),
        case("inspect-group-other-case", &inspect_other_case),
        case(
            "dlq-redrive-unknown-queue",
            &["dlq", "redrive", "nosuchqueue", "--dry-run"],
        ),
        case("status-no-hours", &["status", "--hours", "0"]),
        case("not-found", &["--stage", "nosuchstage", "status"]),
        case("bad-arguments", &["replay"]),
        case("bad-hour", &["replay", "--failed-since", "yesterday"]),
        case("adjust-not-invoiced", &["adjust", &correction, "--dry-run"]),
        json(
            "adjust-not-invoiced-json",
            "adjust",
            &["adjust", &correction, "--dry-run"],
        ),
        case("adjust-unconfirmed", &["adjust", &correction]),
        case("adjustments-none", &["adjustments"]),
        json("adjustments-none-json", "adjust", &["adjustments"]),
    ];
    // In the first hours of a month the demo's hours may fall in the month before, whose
    // invoice the simulator has issued: the correction would then be planned, not
    // refused. Those three goldens hold only when the hour is in this month.
    let this_month = chrono::Utc::now().format("%Y-%m").to_string();
    let month_ended = month != this_month;
    if month_ended {
        eprintln!(
            "the demo's hour {h0} is in {month}, not {this_month}: the adjust goldens are skipped this run"
        );
        cases.retain(|c| {
            !matches!(
                c.name,
                "adjust-not-invoiced" | "adjust-not-invoiced-json" | "adjust-unconfirmed"
            )
        });
    }
    cases.push(Case {
        args: put("golden-put-1", "3"),
        ..case("usage-put", &[])
    });
    let mut again = Case {
        args: put("golden-put-1", "3"),
        ..json("usage-put-again-json", "usage-put", &[])
    };
    again.args.insert(0, "--json".into());
    cases.push(again);
    cases.push(Case {
        args: put("golden-put-2", "-1"),
        ..case("usage-put-refused", &[])
    });
    // The license the demo deprovisioned (inactive by its end): refused, nothing written.
    cases.push(Case {
        args: [
            &["usage", "put"][..],
            &REQUESTS,
            &[
                "--quantity",
                "1",
                "--timestamp",
                &put_at,
                "--event-id",
                "golden-put-4",
            ],
        ]
        .concat()
        .iter()
        .map(|s| s.to_string())
        .collect(),
        ..case("usage-put-inactive-license", &[])
    });
    // A license the subscribers table does not know: written, with a warning.
    let unknown =
        "arn:aws:license-manager::123456789012:license:l-00000000000000000000000000000000";
    cases.push(Case {
        args: [
            "usage",
            "put",
            "--license",
            unknown,
            "--account",
            ACCOUNT,
            "--dimension",
            "requests",
            "--quantity",
            "1",
            "--timestamp",
            &put_at,
            "--event-id",
            "golden-put-3",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
        ..case("usage-put-unknown-license", &[])
    });
    cases.push(Case {
        without: &["AWS_ENDPOINT_URL_CLOUDTRAIL"],
        ..case("trail-wrong-endpoint", &["trail", "--since", &since])
    });
    // Two Regions named, the stack in one: that one is answered, the other said.
    cases.push(case(
        "status-one-region-missing",
        &["status", "--region", "us-east-1", "--region", "eu-west-1"],
    ));
    // A Region name Marketplace Metering does not serve (a typo): said first.
    cases.push(case(
        "status-region-typo",
        &["status", "--region", "us-east-11"],
    ));
    // No Region anywhere: the message, and none of the SDK's metadata-service warnings.
    cases.push(Case {
        without: &["AWS_REGION"],
        ..case("no-region", &["status"])
    });
    // The buyer the demo registered: shown, then erased (refused without --yes, since
    // the binary's stdin is no terminal; a dry run; for real, with its audit line on
    // stderr), and erased again: nothing there.
    let buyer = ["--license", LICENSE, "--account", ACCOUNT];
    let profile =
        |command: &[&'static str]| -> Vec<&str> { [&["profile"][..], command, &buyer].concat() };
    cases.extend([
        case("profile-show", &profile(&["show"])),
        json("profile-show-json", "profile-show", &profile(&["show"])),
        case("profile-erase-unconfirmed", &profile(&["erase"])),
        case("profile-erase-dry-run", &profile(&["erase", "--dry-run"])),
        json(
            "profile-erase-json",
            "profile-erase",
            &profile(&["erase", "--yes"]),
        ),
        case("profile-erase-absent", &profile(&["erase", "--yes"])),
    ]);

    let mask = Mask::new(base, &tmp);
    let golden = root.join("crates/cli/tests/golden");
    let bless = std::env::var_os("AWSMP_BLESS").is_some();
    let mut mismatches = Vec::new();
    let mut schema_pairs: Vec<(PathBuf, PathBuf)> = Vec::new();
    for case in &cases {
        let ran = run(&env, case, &tmp).await;
        let text = golden_text(&mask, case, &ran);
        let path = golden.join(format!("{}.txt", case.name));
        if bless {
            std::fs::create_dir_all(&golden).unwrap();
            std::fs::write(&path, &text).unwrap();
        } else {
            let want = std::fs::read_to_string(&path).unwrap_or_else(|_| {
                panic!(
                    "{} has no golden file; write it with AWSMP_BLESS=1 and review it",
                    path.display()
                )
            });
            if want != text {
                mismatches.push(format!(
                    "{}:\n--- golden\n{want}\n--- now\n{text}",
                    path.display()
                ));
            }
        }
        if let Some(schema) = case.schema
            && (ran.code == 0 || ran.code == 3)
        {
            let doc = tmp.join(format!("{}.json", case.name));
            std::fs::write(&doc, &ran.stdout).unwrap();
            schema_pairs.push((root.join(format!("docs/schemas/{schema}.schema.json")), doc));
        }
    }
    assert!(
        mismatches.is_empty(),
        "output differs from the golden files (AWSMP_BLESS=1 rewrites them after a deliberate change):\n{}",
        mismatches.join("\n")
    );

    let venv = std::env::var_os("AWSMP_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join(".venv"));
    let checked = Command::new(venv.join("bin/python"))
        .arg(root.join("scripts/check_json_schema.py"))
        .args(
            schema_pairs
                .iter()
                .flat_map(|(s, d)| [s.clone(), d.clone()]),
        )
        .output()
        .expect("the venv's python runs (make venv)");
    assert!(
        checked.status.success(),
        "--json output breaks its schema:\n{}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
    let json_cases = if month_ended { 15 } else { 16 };
    assert_eq!(
        schema_pairs.len(),
        json_cases,
        "every --json case was checked"
    );
    // The checker itself refuses a document that breaks its schema.
    let (schema, doc) = &schema_pairs[0];
    let mut broken: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(doc).unwrap()).unwrap();
    broken["hours"] = serde_json::json!([]);
    let broken_path = tmp.join("broken.json");
    std::fs::write(&broken_path, broken.to_string()).unwrap();
    let refused = Command::new(venv.join("bin/python"))
        .arg(root.join("scripts/check_json_schema.py"))
        .args([schema, &broken_path])
        .output()
        .unwrap();
    assert_eq!(
        refused.status.code(),
        Some(1),
        "a broken document is refused"
    );
    assert!(String::from_utf8_lossy(&refused.stdout).contains("hours"));
    std::fs::remove_dir_all(&tmp).unwrap();
}

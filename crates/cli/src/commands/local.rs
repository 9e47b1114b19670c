//! `awsmp local up`: starts the local stack (`awsmp-local-stack`), runs its scripted
//! lifecycle, shows what the operator sees, and with `--serve` keeps it running. Only in
//! a binary built with the `local` feature (`./deploy.sh --local` builds one), so the
//! operator tool a seller installs links no Lambda, emulator or simulator.

#[cfg(feature = "local")]
use std::path::Path;

#[cfg(feature = "local")]
use awsmp_local_stack::{LocalError, demo, demo_start, ensure_venv, resources, system};

use crate::error::CommandError;
use crate::output::Outcome;

/// The local stack: both stacks on this machine, no AWS account needed.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Start everything, run the scripted buyer lifecycle, print what was billed.
    ///
    /// Example: awsmp local up --serve --speed 60 (./deploy.sh --local passes its options here)
    Up {
        /// Keep running after the demo and print the endpoints; Ctrl-C stops it all.
        #[arg(long)]
        serve: bool,
        /// In --serve mode, the stack's seconds per real second once it has caught up
        /// with the real clock (1: the stack's time is the real time).
        #[arg(long, default_value_t = 1)]
        speed: u32,
        /// Repository root holding the templates and web/ (default: current directory).
        #[arg(long)]
        root: Option<std::path::PathBuf>,
    },
}

impl Command {
    /// Runs `awsmp local up` (it prints as it goes: nothing is left to print after).
    #[cfg(feature = "local")]
    pub async fn run(self) -> Result<Vec<Outcome>, CommandError> {
        let Command::Up { serve, speed, root } = self;
        up(root.as_deref(), serve, speed)
            .await
            .map(|()| Vec::new())
            .map_err(|e| CommandError::Io(e.to_string()))
    }

    /// Without the `local` feature: says how to get a binary that runs the local stack.
    #[cfg(not(feature = "local"))]
    #[allow(clippy::unused_async)]
    pub async fn run(self) -> Result<Vec<Outcome>, CommandError> {
        Err(CommandError::Usage(NOT_BUILT_IN.into()))
    }
}

/// What `awsmp local` answers in an operator build, which leaves the local stack out.
pub const NOT_BUILT_IN: &str = "this awsmp was built without the local stack: run ./deploy.sh --local from the repository, or install a binary that has it with `cargo install --path crates/cli --features local`";

#[cfg(feature = "local")]
/// `awsmp local up`: starts everything, runs the scripted lifecycle, prints the
/// summary; with `serve`, keeps running on a virtual clock at `speed` until Ctrl-C.
pub async fn up(root: Option<&Path>, serve: bool, speed: u32) -> Result<(), LocalError> {
    let root = system::find_root(root)?;
    ensure_venv(&root)?;
    let start = demo_start(chrono::Utc::now());
    println!(
        "starting the local stack (moto, Marketplace simulator, both stacks from the templates)..."
    );
    let mut system = system::LocalSystem::start(&system::LocalPaths { root }, start).await?;
    print_endpoints(&system);
    let summary = demo::run(&mut system).await?;
    println!("{summary}");
    println!("{}", operator_status(&system).await?);
    println!("{}", operator_correction(&system, start).await?);
    if serve {
        print_commands(&system);
        system.catch_up_and_run(speed).await?;
        println!("{}", clock_note(system.now, speed));
        println!("serving; Ctrl-C stops everything");
        let tick = std::time::Duration::from_secs(1);
        // One listener for the whole loop, so a Ctrl-C during a tick is not lost.
        let ctrl_c = tokio::signal::ctrl_c();
        tokio::pin!(ctrl_c);
        loop {
            tokio::select! {
                _ = &mut ctrl_c => break,
                _ = tokio::time::sleep(tick) => system.step_to_clock().await?,
            }
        }
        println!("stopped");
    }
    Ok(())
}

/// What the stack's clock reads once serving, and what that means for usage written
/// from outside it.
pub fn clock_note(now: awsmp_core::time::Instant, speed: u32) -> String {
    let now = awsmp_core::time::format_instant(now);
    if speed <= 1 {
        format!(
            "the stack's clock caught up with yours ({now}) and runs with it: usage stamped now (awsmp usage put's default, the usage API without a timestamp, your app) bills once its hour has ended and the metering lock (1 h by default) has passed"
        )
    } else {
        format!(
            "the stack's clock caught up with yours ({now}) and runs {speed}x faster from there, so it gets ahead of yours: stamp usage with the stack's time (post it to the usage API without a timestamp: it stamps the stack's now) rather than your clock's, or run at --speed 1; it bills once its hour has ended and the metering lock has passed on the stack's clock"
        )
    }
}

#[cfg(feature = "local")]
fn print_endpoints(system: &system::LocalSystem) {
    let usage = system.table("UsageTable").unwrap_or("-");
    println!("register URL:     {}/register", system.page.url());
    println!("fulfillment URL:  {}/fulfillment", system.page.url());
    println!("page URL:         {}/", system.page.url());
    if let Some(api) = &system.usage_api {
        println!("usage API:        {}/usage/events", api.url());
    }
    println!("emulator:         {}", system.moto.endpoint());
    println!(
        "simulator ledger: {}/admin/ledger",
        system.sim.endpoint_url()
    );
    println!("usage table:      {usage}");
    println!(
        "point your app at it: AWS_ENDPOINT_URL={} AWS_REGION=us-east-1 AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test",
        system.moto.endpoint()
    );
}

#[cfg(feature = "local")]
/// `awsmp status` as it sees the local stack: found through the stacks' outputs, as a
/// real deployment is.
async fn operator_status(system: &system::LocalSystem) -> Result<String, LocalError> {
    let config = system.moto.sdk_config();
    let args = crate::deployment::DeploymentArgs {
        stage: Some(system::LOCAL_STAGE.into()),
        product_code: Some(system::LOCAL_PRODUCT_CODE.into()),
        regions: vec![resources::LOCAL_REGION.into()],
        ..crate::deployment::DeploymentArgs::default()
    };
    let failed = |e: crate::error::CommandError| LocalError::Check(format!("awsmp status: {e}"));
    let events = crate::deployment::stack_outputs(&config, &system.events.stack_name)
        .await
        .map_err(failed)?;
    let deployment = args
        .resolve_in(&config, resources::LOCAL_REGION, events.as_ref())
        .await
        .map_err(failed)?;
    let client = aws_sdk_dynamodb::Client::new(&config);
    let store = awsmp_aws::DynamoOperatorStore::new(
        client,
        &deployment.usage_table,
        &deployment.aggregated_table,
    );
    let queues = crate::commands::queues::depths(&system.sqs, &deployment.queues)
        .await
        .map_err(failed)?;
    let report = crate::commands::status::read(
        &store,
        &queues,
        0,
        deployment.requests_per_second,
        system.now,
        6,
        None,
    )
    .await
    .map_err(failed)?;
    let place = crate::commands::status::Place {
        region: deployment.region,
        stack: deployment.stack,
    };
    let shown = crate::commands::status::render(&place, &report, crate::output::Format::Human);
    Ok(format!(
        "awsmp {} status, as the operator sees the local stack:\n{}",
        "--stage local --product-code awsmplocaldemo", shown.text
    ))
}

#[cfg(feature = "local")]
/// A month later, the operator refunds an over-bill (`awsmp adjust`, the code the
/// command runs): license B's requests of the demo's first hour billed 15, the seller
/// says 10. The simulator's clock moves past the month's end (its invoice is issued),
/// the adjustment's answer is lost twice on the way (the SDK retries with the same
/// client token), and `awsmp adjustments` follows it to completed. The simulator's
/// clock goes back to the stack's after.
async fn operator_correction(
    system: &system::LocalSystem,
    start: awsmp_core::time::Instant,
) -> Result<String, LocalError> {
    use awsmp_core::corrections::{CorrectionPorts, CorrectionRequest};
    use awsmp_marketplace_sim::{ClockSetting, FaultKind, FaultSpec, FaultTarget};
    let failed = |what: &str| LocalError::Check(format!("awsmp adjust: {what}"));
    let config = awsmp_aws::LocalEndpoints {
        aws: system.moto.endpoint().to_string(),
        metering: system.sim.endpoint_url(),
    }
    .sdk_config(resources::LOCAL_REGION);
    let dynamodb = aws_sdk_dynamodb::Client::new(&config);
    let records = awsmp_aws::DynamoOperatorStore::new(
        dynamodb.clone(),
        system.table("UsageTable")?,
        system.table("AggregatedUsageTable")?,
    );
    let subscribers =
        awsmp_aws::DynamoSubscriberStore::new(dynamodb, system.table("SubscribersTable")?);
    let agreements = awsmp_aws::SdkAgreementApi::new(awsmp_aws::agreement_client(&config));
    let ports = CorrectionPorts {
        records: &records,
        subscribers: &subscribers,
        agreements: &agreements,
        clock: &awsmp_aws::SystemClock,
    };
    let hour = awsmp_core::time::HourBucket::containing(start);
    let key = awsmp_core::model::GroupKey {
        license_arn: demo::LICENSE_B.into(),
        customer_aws_account_id: demo::BUYER_ACCOUNT.into(),
        dimension: "requests".into(),
        hour,
    };
    let request = CorrectionRequest {
        key: key.clone(),
        correct_quantity: 10,
        agreement_id: None,
    };
    let sim = system.sim.handle();
    let invoiced =
        awsmp_core::corrections::invoiced_from(awsmp_core::corrections::period_of(hour.start()))
            + chrono::Duration::hours(1);
    sim.set_clock(ClockSetting::Fixed { at: invoiced });
    sim.inject_fault(FaultSpec {
        kind: FaultKind::LoseResponse {
            mode: Default::default(),
        },
        count: 2,
        operation: FaultTarget::BillingAdjustments,
    })
    .map_err(|e| failed(&e.to_string()))?;
    let filed = awsmp_operate::corrections::adjust(
        ports,
        std::slice::from_ref(&request),
        true,
        crate::commands::adjust::RETRIES,
    )
    .await;
    let made = sim.billing_adjustments();
    if filed.first().map(|l| l.result.as_str()) != Some("filed") || made.len() != 1 {
        return Err(failed(&format!(
            "expected one adjustment filed through two lost answers, got {filed:?} and {} made",
            made.len()
        )));
    }
    sim.advance_clock(120);
    let followed = awsmp_operate::corrections::adjustments(ports, true)
        .await
        .map_err(|e| failed(&e.to_string()))?;
    sim.set_clock(ClockSetting::Fixed { at: system.now });
    let shown = crate::commands::adjust::render(&followed, crate::output::Format::Human, None).text;
    if !shown.contains("USD: refunded 0.0125, pending 0") {
        return Err(failed(&format!("expected 0.0125 USD refunded:\n{shown}")));
    }
    Ok(format!(
        "a month later, an over-bill refunded: awsmp adjust '{key}=10' --yes (two answers lost on the way, one adjustment made), then awsmp adjustments:\n{shown}"
    ))
}

#[cfg(feature = "local")]
/// The operator commands to try against the running local stack.
fn print_commands(system: &system::LocalSystem) {
    // The Agreement API (the report's estimated charges, `subscribers reconcile`) is
    // served by the simulator.
    let env = format!(
        "AWS_ENDPOINT_URL={} AWS_ENDPOINT_URL_MARKETPLACE_AGREEMENT={} AWS_REGION={} AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test",
        system.moto.endpoint(),
        system.sim.endpoint_url(),
        resources::LOCAL_REGION
    );
    let target = format!(
        "--stage {} --product-code {}",
        system::LOCAL_STAGE,
        system::LOCAL_PRODUCT_CODE
    );
    println!("try the operator commands against it (in another terminal):");
    for command in [
        "status",
        "failures",
        "inspect license <licenseArn from the status or failures output>",
        "replay --failed-since <YYYY-MM-DDTHH> --dry-run",
        "dlq redrive work --dry-run",
        "report --html report.html",
    ] {
        println!("  {env} awsmp {target} {command}");
    }
    // CloudTrail Event History of the simulated calls is served by the simulator.
    let trail_env = format!(
        "{env} AWS_ENDPOINT_URL_CLOUDTRAIL={}",
        system.sim.endpoint_url()
    );
    for command in ["trail", "reconcile"] {
        println!("  {trail_env} awsmp {target} {command}");
    }
    if let Some(api) = &system.usage_api {
        println!("record usage through the usage API (signed with SigV4, as in AWS):");
        println!(
            "  {}",
            curl_command(&api.url(), resources::LOCAL_REGION, system.now)
        );
    }
}

#[cfg(feature = "local")]
/// A `curl` line that posts one usage event to the usage API at `url`, signed with the
/// local stack's credentials (`test`/`test`).
pub fn curl_command(url: &str, region: &str, now: awsmp_core::time::Instant) -> String {
    let event = serde_json::json!({"events": [{
        "id": format!("curl-{}", now.timestamp()),
        "licenseArn": awsmp_local_stack::demo::LICENSE_B,
        "customerAWSAccountId": awsmp_local_stack::demo::BUYER_ACCOUNT,
        "dimension": "requests",
        "quantity": 1,
    }]});
    format!(
        "curl -sS --aws-sigv4 'aws:amz:{region}:execute-api' --user test:test -H 'content-type: application/json' --data '{event}' {url}/usage/events"
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn serving_says_which_clock_usage_must_carry() {
        let now = awsmp_core::time::parse_usage_timestamp("2026-12-03T18:00:00Z").unwrap();
        let real_time = clock_note(now, 1);
        assert!(
            real_time.contains("caught up with yours (2026-12-03T18:00:00Z) and runs with it")
                && real_time.contains("awsmp usage put's default")
                && real_time.contains("metering lock"),
            "{real_time}"
        );
        let fast = clock_note(now, 60);
        assert!(
            fast.contains("runs 60x faster")
                && fast.contains("usage API without a timestamp")
                && fast.contains("--speed 1"),
            "{fast}"
        );
    }
}

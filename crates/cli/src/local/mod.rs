//! The local stack (`awsmp local up`): both stacks on one machine. moto serves
//! DynamoDB and SQS, our simulator serves Marketplace Metering, the tables and queues
//! come from the SAM templates, and every handler runs wired as its template wires
//! it, on a virtual clock so a day of metering takes seconds.

pub mod demo;
pub mod functions;
pub mod resources;
pub mod runtime;
pub mod system;

/// A local-stack failure, with what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    /// A template could not be read or wired.
    #[error("template: {0}")]
    Template(String),
    /// The emulator or simulator could not be started or answered badly.
    #[error("{0}")]
    Setup(String),
    /// An AWS call to the emulator failed.
    #[error("local AWS call failed: {0}")]
    Aws(String),
    /// A function could not be wired or failed as a whole.
    #[error("function: {0}")]
    Wiring(String),
    /// The demo's own check failed: what was billed differs from what was expected.
    #[error("demo check failed: {0}")]
    Check(String),
}

/// A template that cannot be read or wired (the workspace's one template reader,
/// `awsmp_local_aws::cfn::StackTemplate`), as the local stack reports it.
pub(crate) fn template_error(e: awsmp_local_aws::TestSupportError) -> LocalError {
    LocalError::Template(e.to_string())
}

impl From<awsmp_local_aws::TestSupportError> for LocalError {
    fn from(e: awsmp_local_aws::TestSupportError) -> Self {
        LocalError::Setup(e.to_string())
    }
}

use std::path::Path;

use awsmp_core::time::HourBucket;

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
    if serve {
        print_commands(&system);
        println!("serving; Ctrl-C stops everything (virtual clock x{speed})");
        let tick = std::time::Duration::from_secs(1);
        let step = chrono::Duration::seconds(i64::from(speed.max(1)));
        // One listener for the whole loop, so a Ctrl-C during a tick is not lost.
        let ctrl_c = tokio::signal::ctrl_c();
        tokio::pin!(ctrl_c);
        loop {
            tokio::select! {
                _ = &mut ctrl_c => break,
                _ = tokio::time::sleep(tick) => {
                    let to = system.now + step;
                    system.advance(to, step).await?;
                }
            }
        }
        println!("stopped");
    }
    Ok(())
}

/// Where the demo's virtual clock starts when the real clock reads `now`. The story
/// spans about three virtual hours and must stay behind the real clock (handlers
/// without a triggering event time, like the SQS ones, read the real clock), so it
/// starts four hours before `now`'s hour, five minutes into that hour.
pub fn demo_start(now: awsmp_core::time::Instant) -> awsmp_core::time::Instant {
    HourBucket::containing(now).start() - chrono::Duration::hours(4) + chrono::Duration::minutes(5)
}

fn print_endpoints(system: &system::LocalSystem) {
    let usage = system.table("UsageTable").unwrap_or("-");
    println!("register URL:     {}/register", system.api.url());
    println!("fulfillment URL:  {}/fulfillment", system.api.url());
    println!("page URL:         {}/", system.page.url());
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
    let failed = |e: crate::commands::CommandError| LocalError::Check(format!("awsmp status: {e}"));
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
    let queues = crate::ops::queues::depths(&system.sqs, &deployment.queues)
        .await
        .map_err(failed)?;
    let report = crate::ops::status::read(&store, &queues, 0, system.now, 6)
        .await
        .map_err(failed)?;
    let place = crate::ops::status::Place {
        region: deployment.region,
        stack: deployment.stack,
    };
    let shown = crate::ops::status::render(&place, &report, crate::output::Format::Human);
    Ok(format!(
        "awsmp {} status, as the operator sees the local stack:\n{}",
        "--stage local --product-code awsmplocaldemo", shown.text
    ))
}

/// The operator commands to try against the running local stack.
fn print_commands(system: &system::LocalSystem) {
    let env = format!(
        "AWS_ENDPOINT_URL={} AWS_REGION={} AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test",
        system.moto.endpoint(),
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
}

/// Creates the project's Python venv (moto) on first use, so a fresh machine needs no
/// manual step; fast when it is already there.
fn ensure_venv(root: &Path) -> Result<(), LocalError> {
    let status = std::process::Command::new("bash")
        .arg(root.join("scripts/ensure-venv.sh"))
        .arg(root.join(".venv"))
        .arg(root.join("requirements-dev.txt"))
        .status()
        .map_err(|e| LocalError::Setup(format!("could not run scripts/ensure-venv.sh: {e}")))?;
    if status.success() {
        Ok(())
    } else {
        Err(LocalError::Setup(
            "could not create the Python venv the local emulator needs (.venv, from requirements-dev.txt); the lines above say why".into(),
        ))
    }
}

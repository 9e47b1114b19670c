//! The `awsmp-marketplace-sim` command line: arguments, logging, serve until stopped.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::{SimConfig, SimError, Simulator};
use clap::Parser;

/// A local AWS Marketplace Metering service (BatchMeterUsage, ResolveCustomer) with
/// an admin API under /admin.
#[derive(Debug, Parser)]
#[command(name = "awsmp-marketplace-sim", version)]
struct Args {
    /// Port on 127.0.0.1 (0: any free port; default: the config file's, else 0).
    #[arg(long)]
    port: Option<u16>,
    /// JSON configuration file (SimConfig: throttle, latency_ms, clock, seeds).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Turn the 10 requests/second BatchMeterUsage quota off.
    #[arg(long)]
    no_throttle: bool,
    /// Real-time delay added before every wire answer, in milliseconds.
    #[arg(long)]
    latency_ms: Option<u64>,
}

/// Parses the arguments, serves until Ctrl-C or SIGTERM, and says why it stopped.
pub async fn run_from_args() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    match run(Args::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("awsmp-marketplace-sim: {err}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), SimError> {
    let mut config = match &args.config {
        Some(path) => SimConfig::from_json_file(path)?,
        None => SimConfig::default(),
    };
    config.port = args.port.unwrap_or(config.port);
    config.throttle.enabled &= !args.no_throttle;
    config.latency_ms = args.latency_ms.unwrap_or(config.latency_ms);
    let sim = Simulator::start(config).await?;
    // Scripts wait for this exact line on stdout to learn the address.
    println!("awsmp-marketplace-sim listening on {}", sim.endpoint_url());
    wait_for_stop_signal().await;
    sim.shutdown().await
}

async fn wait_for_stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

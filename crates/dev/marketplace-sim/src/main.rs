//! `awsmp-marketplace-sim`: serves the Marketplace Metering simulator on
//! 127.0.0.1 until interrupted (Ctrl-C or SIGTERM); see `awsmp_marketplace_sim::cli`.

#[tokio::main]
async fn main() -> std::process::ExitCode {
    awsmp_marketplace_sim::cli::run_from_args().await
}

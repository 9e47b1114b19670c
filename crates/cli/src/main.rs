//! `awsmp`: the operator CLI for awsmp-metering (entry point only; see `awsmp_cli::cli`).

#[tokio::main]
async fn main() -> std::process::ExitCode {
    awsmp_cli::cli::run().await
}

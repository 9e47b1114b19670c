//! The `awsmp` command line: its arguments and the one dispatch to each command's
//! module (`crate::commands`), then the output and the exit code.

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

use crate::commands::{
    Ctx, adjust, dlq, failures, inspect, local, profile, reconcile, replay, report, status,
    subscribers, trail, usage,
};
use crate::deployment::DeploymentArgs;
use crate::error::CommandError;
use crate::output::{EXIT_ATTENTION, EXIT_CONFLICT, Format, Outcome};

/// awsmp: operate an awsmp-metering deployment, or run the whole system locally.
///
/// Name the deployment once (--stage and --product-code, or --stack; --region per
/// metering Region) and every command finds its tables and queues in the stacks'
/// outputs. Exit codes: 0 done, 1 could not run, 2 bad arguments, 3 something needs
/// attention, 4 deployment not found, 5 an event id reused with other usage.
#[derive(Debug, Parser)]
#[command(name = "awsmp", version, about, long_about)]
struct Args {
    /// Print JSON for scripts instead of tables.
    #[arg(long, global = true)]
    json: bool,
    #[command(flatten)]
    deployment: DeploymentArgs,
    #[command(subcommand)]
    command: Command,
}

// One variant per command; each command's help, arguments and run are in its module
// of `crate::commands`.
#[derive(Debug, Subcommand)]
enum Command {
    #[command(subcommand)]
    Local(local::Command),
    #[command(subcommand)]
    Usage(usage::Command),
    Status(status::Command),
    Report(report::Command),
    Failures(failures::Command),
    #[command(subcommand)]
    Inspect(inspect::Command),
    Replay(replay::Command),
    Trail(trail::Command),
    Reconcile(reconcile::Command),
    Adjust(adjust::Adjust),
    Adjustments(adjust::Adjustments),
    #[command(subcommand)]
    Dlq(dlq::Command),
    #[command(subcommand)]
    Profile(profile::Command),
    /// The subscribers table (us-east-1): `reconcile` holds it to the Agreement API.
    Subscribers(subscribers::Command),
    /// Shell completions on stdout.
    ///
    /// Example: awsmp completions bash > /etc/bash_completion.d/awsmp
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

/// Parses arguments and runs the command; errors print one line that says what to do.
pub async fn run() -> ExitCode {
    let args = Args::parse();
    init_logs();
    let format = if args.json {
        Format::Json
    } else {
        Format::Human
    };
    match dispatch(args, format).await {
        Ok(outcomes) => {
            let mut attention = false;
            let mut conflict = false;
            let mut failed = false;
            for outcome in outcomes {
                print!("{}", outcome.text);
                if !outcome.text.ends_with('\n') {
                    println!();
                }
                attention |= outcome.attention;
                conflict |= outcome.conflict;
                failed |= outcome.failed;
            }
            if failed {
                ExitCode::FAILURE
            } else if conflict {
                ExitCode::from(EXIT_CONFLICT)
            } else if attention {
                ExitCode::from(EXIT_ATTENTION)
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(error) => {
            eprintln!("awsmp: {error}");
            error.exit_code()
        }
    }
}

async fn dispatch(args: Args, format: Format) -> Result<Vec<Outcome>, CommandError> {
    let ctx = Ctx {
        deployment: &args.deployment,
        format,
        now: chrono::Utc::now(),
    };
    match args.command {
        Command::Local(command) => command.run().await,
        Command::Usage(command) => command.run(&ctx).await,
        Command::Status(command) => command.run(&ctx).await,
        Command::Report(command) => command.run(&ctx).await,
        Command::Failures(command) => command.run(&ctx).await,
        Command::Inspect(command) => command.run(&ctx).await,
        Command::Replay(command) => command.run(&ctx).await,
        Command::Trail(command) => command.run(&ctx).await,
        Command::Reconcile(command) => command.run(&ctx).await,
        Command::Adjust(command) => command.run(&ctx).await,
        Command::Adjustments(command) => command.run(&ctx).await,
        Command::Dlq(command) => command.run(&ctx).await,
        Command::Profile(command) => command.run(&ctx).await,
        Command::Subscribers(command) => command.run(&ctx).await,
        Command::Completions { shell } => {
            let mut text = Vec::new();
            clap_complete::generate(shell, &mut Args::command(), "awsmp", &mut text);
            Ok(vec![Outcome::ok(
                String::from_utf8_lossy(&text).into_owned(),
            )])
        }
    }
}

/// Human-readable logs on stderr; `RUST_LOG` filters (default: warnings only, so the
/// local demo's story stays readable).
fn init_logs() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .compact()
        .try_init();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_argument_tree_is_consistent() {
        Args::command().debug_assert();
    }
}

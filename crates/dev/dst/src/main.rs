//! `awsmp-dst`: runs simulation schedules until the count or the time budget is
//! reached and prints `simulation: N schedules, M faults injected, V violations`; a
//! failing seed is shrunk and printed with the command that replays it.

fn main() -> std::process::ExitCode {
    awsmp_dst::cli::main()
}

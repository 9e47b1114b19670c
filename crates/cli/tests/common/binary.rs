//! The shipped `awsmp` binary run as an operator would, with nothing of this machine's
//! AWS configuration: every call to one endpoint (moto, or a front on it).

use std::path::Path;

/// What a run printed and its exit code.
pub struct Ran {
    /// The exit code (-1 when killed).
    pub code: i32,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

/// `awsmp ARGS` with every AWS call sent to `endpoint`, in us-east-1 unless the
/// arguments name a Region, under `home` (an empty one: no AWS config or credentials
/// file is read). Its stdin is not a terminal.
pub async fn awsmp_at(endpoint: &str, home: &Path, args: &[&str]) -> Ran {
    awsmp_env(endpoint, home, args, &[]).await
}

/// [`awsmp_at`] with more environment variables (a service's own endpoint, such as
/// `AWS_ENDPOINT_URL_MARKETPLACE_AGREEMENT`).
pub async fn awsmp_env(endpoint: &str, home: &Path, args: &[&str], env: &[(&str, &str)]) -> Ran {
    std::fs::create_dir_all(home).unwrap();
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_awsmp"));
    command
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("NO_COLOR", "1")
        .env("AWS_ENDPOINT_URL", endpoint)
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .envs(env.iter().copied());
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

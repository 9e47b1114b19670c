//! A moto server (DynamoDB + SQS over HTTP) on a free loopback port, owned by one
//! test: started from the project venv, ready when it says it is listening, killed
//! (its whole process group) when the handle drops.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_dynamodb::config::Credentials;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::sync::oneshot;

use crate::error::LocalAwsError;

/// Region every test client uses.
pub const TEST_REGION: &str = "us-east-1";
/// Access key of the static test credentials (moto accepts any).
pub const TEST_ACCESS_KEY: &str = "testing";
/// Secret key of the static test credentials.
pub const TEST_SECRET_KEY: &str = "testing";

/// How long moto may take to start listening (a cold Python import is ~2 s; CI is slow).
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);
/// Port collisions between picking a free port and moto binding it are retried.
const START_ATTEMPTS: usize = 3;
/// Lines of moto's output kept for error messages.
const OUTPUT_TAIL_LINES: usize = 40;

/// Runs moto's server with a watchdog (moto exits when the test process dies, however
/// it dies) and with transactions whose cost depends on their items, not on the table
/// (see the script's header).
const LAUNCHER: &str = include_str!("moto_launcher.py");

/// A running moto server. Dropping it kills the server's process group.
#[derive(Debug)]
pub struct MotoServer {
    child: Child,
    /// Held open so the watchdog in [`LAUNCHER`] keeps the server alive.
    _stdin: Option<ChildStdin>,
    endpoint: String,
    port: u16,
}

impl MotoServer {
    /// Starts moto on a free 127.0.0.1 port and waits until it listens.
    ///
    /// The venv is `$AWSMP_VENV` if set, else `<workspace>/.venv`. A missing venv is an
    /// error that names `make venv`, never a skip.
    pub async fn start() -> Result<MotoServer, LocalAwsError> {
        let venv = venv_dir();
        Self::start_from(&venv).await
    }

    /// Starts moto from the given venv (see [`MotoServer::start`]).
    pub async fn start_from(venv: &Path) -> Result<MotoServer, LocalAwsError> {
        let moto_server = venv.join("bin").join("moto_server");
        let python = venv.join("bin").join("python");
        if !moto_server.exists() || !python.exists() {
            return Err(LocalAwsError::VenvMissing {
                venv: venv.to_path_buf(),
            });
        }
        let mut last_error = None;
        for _ in 0..START_ATTEMPTS {
            match Self::start_once(&python).await {
                Ok(server) => return Ok(server),
                // Another process took the port between our probe and moto's bind.
                Err(e @ LocalAwsError::ServerExited { .. }) => last_error = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last_error.unwrap_or(LocalAwsError::NotReady {
            what: "moto".into(),
            output: String::new(),
        }))
    }

    async fn start_once(python: &Path) -> Result<MotoServer, LocalAwsError> {
        let port = free_port()?;
        let mut command = Command::new(python);
        command
            .arg("-c")
            .arg(LAUNCHER)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            // Its own process group, so Drop can kill everything it started.
            .process_group(0)
            .env("PYTHONUNBUFFERED", "1");
        let mut child = command.spawn().map_err(|source| LocalAwsError::Spawn {
            program: python.display().to_string(),
            source,
        })?;
        let stdin = child.stdin.take();
        let tail = Arc::new(Mutex::new(VecDeque::with_capacity(OUTPUT_TAIL_LINES)));
        let (ready_tx, ready_rx) = oneshot::channel::<bool>();
        if let Some(stderr) = child.stderr.take() {
            let tail = Arc::clone(&tail);
            let marker = format!("Running on http://127.0.0.1:{port}");
            // werkzeug logs one line per request to stderr: keep draining it so the
            // pipe never fills and blocks the server.
            std::thread::spawn(move || {
                let mut ready_tx = Some(ready_tx);
                for line in BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    if line.contains(&marker)
                        && let Some(tx) = ready_tx.take()
                    {
                        let _ = tx.send(true);
                    }
                    if let Ok(mut tail) = tail.lock() {
                        if tail.len() == OUTPUT_TAIL_LINES {
                            tail.pop_front();
                        }
                        tail.push_back(line);
                    }
                }
                if let Some(tx) = ready_tx.take() {
                    let _ = tx.send(false);
                }
            });
        }
        let mut server = MotoServer {
            child,
            _stdin: stdin,
            endpoint: format!("http://127.0.0.1:{port}"),
            port,
        };
        let output = || {
            tail.lock()
                .map(|t| t.iter().cloned().collect::<Vec<_>>().join("\n"))
                .unwrap_or_default()
        };
        match tokio::time::timeout(STARTUP_TIMEOUT, ready_rx).await {
            Ok(Ok(true)) => {
                tracing::debug!(endpoint = %server.endpoint, "moto ready");
                Ok(server)
            }
            Ok(_) => {
                let status = server.child.wait().ok();
                Err(LocalAwsError::ServerExited {
                    what: "moto".into(),
                    status: status.map(|s| s.to_string()).unwrap_or_default(),
                    output: output(),
                })
            }
            Err(_) => Err(LocalAwsError::NotReady {
                what: format!("moto on port {port} within {STARTUP_TIMEOUT:?}"),
                output: output(),
            }),
        }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The port moto listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's process id (also its process group id).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// An SDK config for us-east-1 pointing every service at this server, with static
    /// test credentials.
    pub fn sdk_config(&self) -> SdkConfig {
        self.sdk_config_in(TEST_REGION)
    }

    /// Like [`MotoServer::sdk_config`] in another Region (moto serves every Region on
    /// one endpoint, so cross-Region clients work as on AWS).
    pub fn sdk_config_in(&self, region: &str) -> SdkConfig {
        test_sdk_config(&self.endpoint, region)
    }

    /// A DynamoDB client on this server (us-east-1).
    pub fn dynamodb(&self) -> aws_sdk_dynamodb::Client {
        aws_sdk_dynamodb::Client::new(&self.sdk_config())
    }

    /// An SQS client on this server (us-east-1).
    pub fn sqs(&self) -> aws_sdk_sqs::Client {
        aws_sdk_sqs::Client::new(&self.sdk_config())
    }

    /// Environment for a process that should talk to this server through the SDK's
    /// own variables (handlers never read endpoints themselves).
    pub fn env_vars(&self) -> Vec<(String, String)> {
        vec![
            ("AWS_ENDPOINT_URL_DYNAMODB".into(), self.endpoint.clone()),
            ("AWS_ENDPOINT_URL_SQS".into(), self.endpoint.clone()),
            ("AWS_REGION".into(), TEST_REGION.into()),
            ("AWS_ACCESS_KEY_ID".into(), TEST_ACCESS_KEY.into()),
            ("AWS_SECRET_ACCESS_KEY".into(), TEST_SECRET_KEY.into()),
        ]
    }
}

impl Drop for MotoServer {
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            // The group id equals the pid (process_group(0)); ESRCH means it already exited.
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An SDK config with static test credentials, `region`, and every service's endpoint
/// set to `endpoint`.
pub fn test_sdk_config(endpoint: &str, region: &str) -> SdkConfig {
    SdkConfig::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(region.to_string()))
        .endpoint_url(endpoint)
        .credentials_provider(aws_sdk_dynamodb::config::SharedCredentialsProvider::new(
            Credentials::new(
                TEST_ACCESS_KEY,
                TEST_SECRET_KEY,
                None,
                None,
                "awsmp-local-aws",
            ),
        ))
        .build()
}

/// The Python venv holding moto: `$AWSMP_VENV`, else `<workspace root>/.venv`.
pub fn venv_dir() -> PathBuf {
    match std::env::var_os("AWSMP_VENV") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => workspace_root().join(".venv"),
    }
}

/// The workspace root (three levels above this crate's manifest, `crates/dev/local-aws`).
pub fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest
        .parent()
        .and_then(Path::parent)
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| manifest.to_path_buf())
}

/// A port that was free on 127.0.0.1 a moment ago.
pub fn free_port() -> Result<u16, LocalAwsError> {
    let listener = TcpListener::bind(("127.0.0.1", 0)).map_err(LocalAwsError::FreePort)?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(LocalAwsError::FreePort)
}

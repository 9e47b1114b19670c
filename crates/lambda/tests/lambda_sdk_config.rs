//! The config every Lambda's `main.rs` loads (`awsmp_lambda::sdk::load_sdk_config`)
//! makes real calls: over HTTP to moto, and over HTTPS to moto behind a certificate
//! from a throwaway CA, so that the Lambdas' own client (rustls on ring; a root build
//! has no SDK default client) completes a TLS handshake and verifies the server's
//! chain against the trust roots it loads, as it does against AWS's endpoints.
//!
//! `load_sdk_config` reads a Lambda's environment (Region, credentials, endpoint), and
//! a test may not set its own process's environment, so each case runs the ignored
//! `child_lists_tables_through_load_sdk_config` in a child process of this test binary
//! with that environment. `SSL_CERT_FILE` stands in for the system's trust roots (the
//! client loads them with rustls-native-certs, which reads it first).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use awsmp_local_aws::{MotoServer, create_usage_table, venv_dir};

const CHILD: &str = "child_lists_tables_through_load_sdk_config";
const CHILD_MARKER: &str = "AWSMP_LAMBDA_SDK_CONFIG_CHILD";
const TABLE: &str = "lambda-sdk-config";

/// Run by [`run_child`] only: what a Lambda's `main.rs` does, then one call.
#[tokio::test]
#[ignore = "run in a child process, with a Lambda's environment, by the tests below"]
async fn child_lists_tables_through_load_sdk_config() {
    if std::env::var_os(CHILD_MARKER).is_none() {
        return;
    }
    let sdk = awsmp_lambda::sdk::load_sdk_config().await;
    assert!(
        sdk.http_client().is_some(),
        "no HTTP client in the Lambdas' config"
    );
    let db = aws_sdk_dynamodb::Client::new(&sdk);
    let tables = db.list_tables().send().await.expect("ListTables");
    println!("tables: {:?}", tables.table_names());
}

/// The child test against `endpoint`, in a Lambda's environment: Region and
/// credentials in variables, nothing from this machine's own AWS set-up, no instance
/// metadata, one attempt per call; `trust` (a PEM file) as the trust roots if given.
fn run_child(endpoint: &str, trust: Option<&Path>) -> Output {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([
            "--exact",
            CHILD,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_MARKER, "1")
        .env("AWS_ENDPOINT_URL", endpoint)
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "local")
        .env("AWS_SECRET_ACCESS_KEY", "local")
        .env("AWS_CONFIG_FILE", "/nonexistent/awsmp/config")
        .env(
            "AWS_SHARED_CREDENTIALS_FILE",
            "/nonexistent/awsmp/credentials",
        )
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("AWS_MAX_ATTEMPTS", "1")
        .env_remove("AWS_PROFILE")
        .env_remove("AWS_SESSION_TOKEN");
    if let Some(trust) = trust {
        command
            .env("SSL_CERT_FILE", trust)
            .env_remove("SSL_CERT_DIR");
    }
    command.output().unwrap()
}

/// The child's stdout, after checking that its call succeeded.
fn succeeded(output: Output) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success() && stdout.contains("1 passed"),
        "child failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

#[tokio::test]
async fn the_lambdas_config_calls_moto_over_http() {
    let moto = MotoServer::start().await.unwrap();
    create_usage_table(&moto.dynamodb(), TABLE).await.unwrap();
    let out = succeeded(run_child(moto.endpoint(), None));
    assert!(out.contains(TABLE), "{out}");
}

#[test]
fn the_lambdas_config_completes_a_tls_handshake_with_ring() {
    let dir = TempDir::new("lambda-sdk-config-tls");
    let ca = issue_certificates(dir.path());
    let moto = HttpsMoto::start(dir.path());
    // A fresh moto: an empty account's answer is call enough.
    let out = succeeded(run_child(
        &format!("https://localhost:{}", moto.port),
        Some(&ca),
    ));
    assert!(out.contains("tables: []"), "{out}");
}

#[test]
fn the_lambdas_config_refuses_a_server_it_does_not_trust() {
    // The same server, trusting only another CA: the call must fail, so the test above
    // passed because the server's chain verified, not because nothing was checked.
    let dir = TempDir::new("lambda-sdk-config-untrusted");
    issue_certificates(dir.path());
    let moto = HttpsMoto::start(dir.path());
    let other = dir.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    let other_ca = issue_certificates(&other);
    let output = run_child(&format!("https://localhost:{}", moto.port), Some(&other_ca));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success(),
        "trusted a server of another CA:\n{stderr}"
    );
    assert!(stderr.contains("InvalidCertificate("), "{stderr}");
}

/// A throwaway CA (`ca.pem`) and a server certificate it signed for localhost and
/// 127.0.0.1 (`server.pem`, `server.key`), made with the openssl command; returns the
/// CA's path.
fn issue_certificates(dir: &Path) -> PathBuf {
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("the openssl command is needed for the TLS test");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    openssl(
        &[
            &["req", "-x509"][..],
            &ec,
            &["-keyout", "ca.key", "-out", "ca.pem", "-days", "2"],
            &["-subj", "/CN=awsmp test CA"],
            &["-addext", "basicConstraints=critical,CA:TRUE"],
            &["-addext", "keyUsage=critical,keyCertSign,cRLSign"],
        ]
        .concat(),
    );
    openssl(
        &[
            &["req"][..],
            &ec,
            &[
                "-keyout",
                "server.key",
                "-out",
                "server.csr",
                "-subj",
                "/CN=localhost",
            ],
        ]
        .concat(),
    );
    std::fs::write(
        dir.join("server.ext"),
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n\
         extendedKeyUsage=serverAuth\nsubjectAltName=DNS:localhost,IP:127.0.0.1\n",
    )
    .unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "2",
        "-extfile",
        "server.ext",
    ]);
    dir.join("ca.pem")
}

/// moto serving HTTPS with `dir`'s server certificate; killed on drop.
struct HttpsMoto {
    child: Child,
    port: u16,
}

impl HttpsMoto {
    fn start(dir: &Path) -> HttpsMoto {
        let moto_server = venv_dir().join("bin").join("moto_server");
        assert!(
            moto_server.exists(),
            "no {} (make venv)",
            moto_server.display()
        );
        let port = std::net::TcpListener::bind(("127.0.0.1", 0))
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(&moto_server)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .arg("-c")
            .arg(dir.join("server.pem"))
            .arg("-k")
            .arg(dir.join("server.key"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut moto = HttpsMoto { child, port };
        let deadline = Instant::now() + Duration::from_secs(60);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(status)) = moto.child.try_wait() {
                panic!("moto_server exited: {status}");
            }
            assert!(
                Instant::now() < deadline,
                "moto_server (HTTPS) not listening"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        moto
    }
}

impl Drop for HttpsMoto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A fresh folder under the system's temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("awsmp-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

//! Errors of the local AWS (moto, the simulator, the templates): each names what failed
//! and what to do about it.

use std::path::PathBuf;

/// A local-AWS failure: moto, the simulator or a template.
#[derive(Debug, thiserror::Error)]
pub enum LocalAwsError {
    /// The Python venv with moto is not there.
    #[error(
        "moto is not installed: {venv}/bin/moto_server is missing. Run `make venv` at the \
         workspace root (or set AWSMP_VENV to a venv that has moto[server])"
    )]
    VenvMissing {
        /// The venv that was looked in.
        venv: PathBuf,
    },
    /// No free loopback port could be found.
    #[error("could not find a free port on 127.0.0.1: {0}")]
    FreePort(#[source] std::io::Error),
    /// A process could not be started.
    #[error("could not start {program}: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The server exited before it was ready.
    #[error("{what} exited before it was ready ({status}); its last output:\n{output}")]
    ServerExited {
        /// Which server.
        what: String,
        /// Exit status.
        status: String,
        /// Its last lines of output.
        output: String,
    },
    /// The server did not become ready in time.
    #[error("{what} did not become ready; its last output:\n{output}")]
    NotReady {
        /// Which server, and the deadline.
        what: String,
        /// Its last lines of output.
        output: String,
    },
    /// An AWS call made by the tooling failed.
    #[error("{operation} failed: {message}")]
    Aws {
        /// The operation.
        operation: String,
        /// The SDK's error, with its source chain.
        message: String,
    },
    /// A CloudFormation template could not be read as the tooling needs.
    #[error("template {path}: {message}")]
    Template {
        /// The template file.
        path: PathBuf,
        /// What is wrong, naming the resource and property.
        message: String,
    },
    /// The embedded Marketplace simulator failed.
    #[error("marketplace simulator: {0}")]
    Simulator(String),
}

impl LocalAwsError {
    /// Wraps an SDK error with its whole source chain (the SDK's `Display` alone often
    /// says only "service error").
    pub fn aws(operation: impl Into<String>, error: &(dyn std::error::Error + 'static)) -> Self {
        let mut message = error.to_string();
        let mut source = error.source();
        while let Some(inner) = source {
            message.push_str(": ");
            message.push_str(&inner.to_string());
            source = inner.source();
        }
        LocalAwsError::Aws {
            operation: operation.into(),
            message,
        }
    }
}

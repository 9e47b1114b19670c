//! A command's failure, worded for the operator, and its exit code.

use std::process::ExitCode;

use awsmp_core::ports::PortError;

/// A command failure, worded for the operator.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// A bad argument.
    #[error("{0}")]
    Usage(String),
    /// A store call failed.
    #[error(transparent)]
    Store(#[from] PortError),
    /// An AWS call outside the stores failed (CloudFormation, SQS).
    #[error("{0}")]
    Aws(String),
    /// The deployment, a table or a queue was not found.
    #[error("{0}")]
    NotFound(String),
    /// A file could not be read or written.
    #[error("{0}")]
    Io(String),
    /// An event id was already written with other usage; nothing was written.
    #[error("{0}")]
    Conflict(String),
}

impl CommandError {
    /// The process exit code of this failure: 2 a bad argument, 4 not found, 5 an
    /// event id reused with other usage, 1 a failed call or file (3, [`crate::output::EXIT_ATTENTION`], is a run that
    /// succeeded with something to look at).
    pub fn exit_code(&self) -> ExitCode {
        ExitCode::from(match self {
            CommandError::Usage(_) => 2,
            CommandError::NotFound(_) => 4,
            CommandError::Conflict(_) => crate::output::EXIT_CONFLICT,
            CommandError::Store(_) | CommandError::Aws(_) | CommandError::Io(_) => 1,
        })
    }
}

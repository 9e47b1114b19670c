//! What a function's configuration reports when it is wrong: every problem at once, so
//! a bad deploy fails at init with one clear list. Reading the environment is I/O, so
//! it lives beside the adapters (`awsmp_lambda::EnvReader`).

use std::fmt;

/// Every configuration problem found in one pass.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    /// One line per problem, naming the variable and what to set.
    pub problems: Vec<String>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid configuration: {}", self.problems.join("; "))
    }
}

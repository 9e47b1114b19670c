//! Reading a function's configuration: one pass over its variables that collects every
//! problem, so a bad deploy fails at init with one clear list. The lookup is a
//! parameter, so configs are tested without touching the process environment; only
//! [`process_env`] reads it.

use std::fmt;
use std::str::FromStr;

use awsmp_core::config::ConfigError;

/// The process environment as a lookup: what [`init()`](super::init()) hands each
/// function's `Config::from_lookup`.
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// Reads variables through a lookup and remembers every problem.
pub struct EnvReader<'a> {
    lookup: &'a dyn Fn(&str) -> Option<String>,
    problems: Vec<String>,
    names: Vec<&'static str>,
}

impl<'a> EnvReader<'a> {
    /// A reader over `lookup` (in production [`process_env`]).
    pub fn new(lookup: &'a dyn Fn(&str) -> Option<String>) -> Self {
        EnvReader {
            lookup,
            problems: Vec::new(),
            names: Vec::new(),
        }
    }

    fn raw(&mut self, name: &'static str) -> Option<String> {
        self.names.push(name);
        (self.lookup)(name)
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    }

    /// A required, non-empty string.
    pub fn required(&mut self, name: &'static str) -> String {
        match self.raw(name) {
            Some(v) => v,
            None => {
                self.problems
                    .push(format!("{name} is not set (the template sets it)"));
                String::new()
            }
        }
    }

    /// An optional string (`None` when unset or empty).
    pub fn optional(&mut self, name: &'static str) -> Option<String> {
        self.raw(name)
    }

    /// A value parsed with `FromStr`, or `default` when unset.
    pub fn parsed_or<T>(&mut self, name: &'static str, default: T) -> T
    where
        T: FromStr,
        T::Err: fmt::Display,
    {
        match self.raw(name) {
            None => default,
            Some(v) => match v.parse::<T>() {
                Ok(parsed) => parsed,
                Err(e) => {
                    self.problems.push(format!("{name}={v:?}: {e}"));
                    default
                }
            },
        }
    }

    /// A comma-separated list (empty when unset); items trimmed, empties dropped.
    pub fn list(&mut self, name: &'static str) -> Vec<String> {
        self.raw(name)
            .map(|v| {
                v.split(',')
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Records a problem found by the caller's own cross-field checks.
    pub fn problem(&mut self, message: impl Into<String>) {
        self.problems.push(message.into());
    }

    /// Every variable name this reader was asked for (the handler's env contract).
    pub fn names(&self) -> &[&'static str] {
        &self.names
    }

    /// `Ok(value)` if no problem was found, else every problem at once.
    pub fn finish<T>(self, value: T) -> Result<T, ConfigError> {
        if self.problems.is_empty() {
            Ok(value)
        } else {
            Err(ConfigError {
                problems: self.problems,
            })
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use awsmp_core::time::MeteringLockHours;

    #[test]
    fn collects_every_problem_at_once() {
        let lookup = |k: &str| match k {
            "METERING_LOCK_HOURS" => Some("42".to_string()),
            "EMPTY" => Some("  ".to_string()),
            _ => None,
        };
        let mut env = EnvReader::new(&lookup);
        let _ = env.required("USAGE_TABLE");
        let _ = env.required("EMPTY");
        let _ = env.parsed_or("METERING_LOCK_HOURS", MeteringLockHours::DEFAULT);
        let err = env.finish(()).unwrap_err();
        assert_eq!(err.problems.len(), 3);
        assert!(err.to_string().contains("USAGE_TABLE is not set"));
        assert!(err.to_string().contains("1 to 20"));
    }

    #[test]
    fn lists_and_defaults() {
        let lookup = |k: &str| (k == "L").then(|| " a, b ,,c ".to_string());
        let mut env = EnvReader::new(&lookup);
        assert_eq!(env.list("L"), vec!["a", "b", "c"]);
        assert_eq!(env.parsed_or("N", 7u32), 7);
        assert_eq!(env.names(), &["L", "N"]);
        assert!(env.finish(()).is_ok());
    }
}

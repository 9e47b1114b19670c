//! awsmp-cli: the operator CLI's commands and the local stack, as a library so the
//! binary stays a thin entry point and tests call the same code.

pub mod cli;
pub mod cloudtrail;
pub mod commands;
pub mod deployment;
pub mod local;
pub mod ops;
pub mod output;
pub mod reconcile;
pub mod trail;

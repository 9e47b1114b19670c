//! awsmp-cli: the operator CLI, as a library so the binary stays a thin entry point
//! and tests call the same code. `cli` is the argument surface and the dispatch;
//! `commands` holds one module per command; `deployment` finds a deployment's tables
//! and queues in its stacks' outputs; `cloudtrail` is the CloudTrail adapter.

pub mod cli;
pub mod cloudtrail;
pub mod commands;
pub mod deployment;
pub mod error;
pub mod output;
pub mod schemas;

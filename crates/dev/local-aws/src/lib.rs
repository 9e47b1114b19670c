//! awsmp-local-aws: the local AWS our tests and `awsmp local up` run against.
//! Starts moto (DynamoDB + SQS) from the project venv on a free loopback port,
//! creates the project's tables from the templates (the one place: [`tables`]) and
//! queues, and hands out SDK configs pointing at it; embeds the Marketplace Metering
//! simulator ([`SimServer`]); reads the SAM templates ([`StackTemplate`]), their
//! functions as SAM wires them ([`function_specs`]), and builds the events AWS sends. See this crate's README for
//! moto's behaviour on the features we rely on.

pub mod cfn;
pub mod error;
pub mod events;
pub mod function_specs;
pub mod iam;
pub mod moto;
pub mod pattern;
pub mod queues;
pub mod sim;
pub mod tables;

pub use cfn::{StackTemplate, event_rule_detail_types, workspace_templates};
pub use error::LocalAwsError;
pub use events::{SqsRecord, scheduled_event, sqs_event};
pub use function_specs::{EventSource, FunctionSpec, parse_rate};
pub use iam::{
    Context, Decision, FunctionWiring, Grant, Policy, ResourcePolicy, function_wiring,
    key_decision, resource_policies,
};
pub use moto::{MotoServer, TEST_REGION, test_sdk_config, venv_dir, workspace_root};
pub use queues::{
    CreatedQueue, QueueOptions, create_queue, create_queue_with, create_queue_with_dlq,
};
pub use sim::SimServer;
pub use tables::{
    IndexProjection, IndexSpec, KeyAttr, TableSpec, TemplateOptions, TemplateTable,
    aggregated_table_spec, create_aggregated_table, create_profile_table, create_subscribers_table,
    create_table, create_tables, create_tables_from_template, create_usage_table,
    describe_table_spec, profile_table_spec, subscribers_table_spec, tables_in_template,
    usage_table_spec,
};

/// The simulator crate, re-exported so tests configure it without another dependency.
pub use awsmp_marketplace_sim as marketplace_sim;

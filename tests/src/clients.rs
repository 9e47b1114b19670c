//! Each function's own SDK clients, as its `connect()` builds them (DynamoDB in the
//! stack's Region, DynamoDB in the subscribers table's Region, SQS, Marketplace
//! Metering), on moto and the simulator, each carrying a [`CallRecorder`] tagged with
//! the function's name, so every AWS call a handler really makes is filed under it in
//! the stack's [`CallLog`] (the IAM contract test evaluates them against the roles).

use awsmp_aws::{CallLog, CallRecorder};
use awsmp_local_aws::{MotoServer, test_sdk_config};

/// The Region of the subscribers table (the events stack's Region).
pub const SUBSCRIBERS_REGION: &str = "us-east-1";

/// One function's clients.
#[derive(Debug, Clone)]
pub struct FunctionClients {
    /// DynamoDB in the stack's Region.
    pub dynamodb: aws_sdk_dynamodb::Client,
    /// DynamoDB in [`SUBSCRIBERS_REGION`].
    pub subscribers_dynamodb: aws_sdk_dynamodb::Client,
    /// SQS in the stack's Region.
    pub sqs: aws_sdk_sqs::Client,
    /// Marketplace Metering (the simulator) in the stack's Region.
    pub metering: aws_sdk_marketplacemetering::Client,
}

impl FunctionClients {
    /// Clients for `function` whose calls are filed in `log`.
    pub fn new(
        moto: &MotoServer,
        sim_endpoint: &str,
        region: &str,
        log: &CallLog,
        function: &str,
    ) -> FunctionClients {
        let recorder = log.recorder(function);
        let dynamodb_in = |region: &str, recorder: CallRecorder| {
            aws_sdk_dynamodb::Client::from_conf(
                aws_sdk_dynamodb::config::Builder::from(&moto.sdk_config_in(region))
                    .interceptor(recorder)
                    .build(),
            )
        };
        FunctionClients {
            dynamodb: dynamodb_in(region, recorder.clone()),
            subscribers_dynamodb: dynamodb_in(SUBSCRIBERS_REGION, recorder.clone()),
            sqs: aws_sdk_sqs::Client::from_conf(
                aws_sdk_sqs::config::Builder::from(&moto.sdk_config_in(region))
                    .interceptor(recorder.clone())
                    .build(),
            ),
            metering: aws_sdk_marketplacemetering::Client::from_conf(
                aws_sdk_marketplacemetering::config::Builder::from(&test_sdk_config(
                    sim_endpoint,
                    region,
                ))
                .interceptor(recorder)
                .build(),
            ),
        }
    }
}

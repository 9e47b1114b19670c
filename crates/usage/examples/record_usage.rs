//! Records one event's usage into a deployment's usage table, as a seller's service
//! would: `cargo run -p awsmp-usage --example record_usage -- TABLE PRODUCT_CODE
//! LICENSE_ARN ACCOUNT DIMENSION QUANTITY EVENT_ID` (standard AWS credentials and
//! Region; the table is the main stack's `UsageTableName` output).

use std::process::ExitCode;

use awsmp_usage::{Meter, Recorded, Usage};

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [
        table,
        product,
        license,
        account,
        dimension,
        quantity,
        event_id,
    ] = args.as_slice()
    else {
        eprintln!(
            "usage: record_usage TABLE PRODUCT_CODE LICENSE_ARN ACCOUNT DIMENSION QUANTITY EVENT_ID"
        );
        return ExitCode::from(2);
    };
    let Ok(quantity) = quantity.parse::<i64>() else {
        eprintln!("QUANTITY must be a whole number, got {quantity:?}");
        return ExitCode::from(2);
    };
    let config = aws_config::load_defaults(awsmp_usage::behavior_version()).await;
    let meter = Meter::new(&config, table, product);
    let usage = Usage::new(license, account, dimension, quantity, event_id);
    match meter.record(&usage).await {
        Ok(Recorded::Written) => println!("written"),
        Ok(Recorded::AlreadyWritten) => println!("already written (a retry): nothing changed"),
        Err(err) => {
            eprintln!("{err}");
            return ExitCode::from(if err.is_retryable() { 75 } else { 1 });
        }
    }
    ExitCode::SUCCESS
}

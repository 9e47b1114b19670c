//! The customer-profile table as the operator reads and erases it (`awsmp profile`):
//! one buyer's row by its keys, a strongly consistent `GetItem`, or a `DeleteItem` that
//! applies only while the row exists and returns nothing. Never a `Scan` or `Query`: the
//! table holds buyer PII, and the operator asks for one buyer at a time.
//! (`DynamoProfileStore` in `profiles.rs` is the pipeline's writes to the same table.)

use std::collections::BTreeMap;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::types::ReturnValue;
use awsmp_core::model::{Attr, attr};
use tracing::instrument;

use crate::error::describe;
use crate::item::{attr_from_dynamo, s};

/// A failed call on the customer-profile table. Never carries item data: only the
/// operation, the table and what DynamoDB said.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PiiTableError {
    /// `AccessDeniedException` (or a KMS access denial): IAM, the table's resource
    /// policy or its key refused these credentials.
    #[error("{operation} on {table} was refused: {message}")]
    Denied {
        /// `GetItem` or `DeleteItem`.
        operation: &'static str,
        /// The table.
        table: String,
        /// What DynamoDB said.
        message: String,
    },
    /// `ResourceNotFoundException`: no such table in the Region.
    #[error("{operation}: there is no table {table} ({message})")]
    NoTable {
        /// `GetItem` or `DeleteItem`.
        operation: &'static str,
        /// The table.
        table: String,
        /// What DynamoDB said.
        message: String,
    },
    /// Anything else (throttled past the SDK's retries, the network, ...).
    #[error("{operation} on {table} failed: {message}")]
    Failed {
        /// `GetItem` or `DeleteItem`.
        operation: &'static str,
        /// The table.
        table: String,
        /// What DynamoDB or the network said.
        message: String,
    },
}

/// The operator's handle on one Region's customer-profile table
/// (`awsmp-<productCode>-customer-profile`).
#[derive(Debug, Clone)]
pub struct DynamoPiiTable {
    client: Client,
    table: String,
}

impl DynamoPiiTable {
    /// The table `table`, through `client` (built for the table's Region).
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        DynamoPiiTable {
            client,
            table: table.into(),
        }
    }

    /// The table name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The row of (`license_arn`, `account`), every attribute as stored (keys
    /// included), read strongly consistent; `None` when there is none.
    // The row is buyer data: only its keys are logged.
    #[instrument(skip(self), fields(table = %self.table))]
    pub async fn get(
        &self,
        license_arn: &str,
        account: &str,
    ) -> Result<Option<BTreeMap<String, Attr>>, PiiTableError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .consistent_read(true)
            .key(attr::LICENSE_ARN, s(license_arn))
            .key(attr::CUSTOMER_ACCOUNT, s(account))
            .send()
            .await
            .map_err(|e| self.error("GetItem", &e))?;
        Ok(out.item.map(|item| {
            item.iter()
                .map(|(name, value)| (name.clone(), attr_from_dynamo(value)))
                .collect()
        }))
    }

    /// Deletes the row of (`license_arn`, `account`) if it exists (`DeleteItem`,
    /// condition `attribute_exists(licenseArn)`, `ReturnValues` `NONE`, so the deleted
    /// data never comes back over the wire): `true` deleted, `false` there was none and
    /// nothing was deleted.
    #[instrument(skip(self), fields(table = %self.table))]
    pub async fn delete_existing(
        &self,
        license_arn: &str,
        account: &str,
    ) -> Result<bool, PiiTableError> {
        let result = self
            .client
            .delete_item()
            .table_name(&self.table)
            .key(attr::LICENSE_ARN, s(license_arn))
            .key(attr::CUSTOMER_ACCOUNT, s(account))
            .condition_expression("attribute_exists(#l)")
            .expression_attribute_names("#l", attr::LICENSE_ARN)
            .return_values(ReturnValue::None)
            .send()
            .await;
        match result {
            Ok(_) => Ok(true),
            Err(e) if e.code() == Some("ConditionalCheckFailedException") => Ok(false),
            Err(e) => Err(self.error("DeleteItem", &e)),
        }
    }

    fn error<E>(&self, operation: &'static str, error: &SdkError<E, HttpResponse>) -> PiiTableError
    where
        E: ProvideErrorMetadata + std::error::Error + 'static,
    {
        classify(operation, &self.table, error.code(), describe(error))
    }
}

/// What a failure with the service's error `code` means (`message` is what it said).
fn classify(
    operation: &'static str,
    table: &str,
    code: Option<&str>,
    message: String,
) -> PiiTableError {
    let table = table.to_string();
    match code.unwrap_or_default() {
        // `AccessDeniedException`, and KMS's denials of the table's key.
        c if c.contains("AccessDenied") => PiiTableError::Denied {
            operation,
            table,
            message,
        },
        "ResourceNotFoundException" => PiiTableError::NoTable {
            operation,
            table,
            message,
        },
        _ => PiiTableError::Failed {
            operation,
            table,
            message,
        },
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use aws_sdk_dynamodb::error::ErrorMetadata;
    use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
    use aws_smithy_types::body::SdkBody;

    fn refused(code: &str) -> SdkError<DeleteItemError, HttpResponse> {
        let meta = ErrorMetadata::builder()
            .code(code)
            .message("User: arn:aws:iam::123456789012:role/ops is not authorized to perform: dynamodb:DeleteItem with an explicit deny in a resource-based policy")
            .build();
        SdkError::service_error(
            DeleteItemError::generic(meta),
            HttpResponse::new(400.try_into().unwrap(), SdkBody::empty()),
        )
    }

    #[test]
    fn a_denial_is_told_apart_from_a_missing_table_and_other_failures() {
        let table = DynamoPiiTable::new(
            Client::from_conf(
                aws_sdk_dynamodb::Config::builder()
                    .behavior_version(crate::behavior_version())
                    .build(),
            ),
            "awsmp-p-customer-profile",
        );
        for code in ["AccessDeniedException", "KMSAccessDeniedException"] {
            let error = table.error("DeleteItem", &refused(code));
            assert!(
                matches!(&error, PiiTableError::Denied { operation: "DeleteItem", table, .. } if table == "awsmp-p-customer-profile"),
                "{code}: {error:?}"
            );
            assert!(error.to_string().contains("explicit deny"), "{error}");
        }
        assert!(matches!(
            table.error("DeleteItem", &refused("ResourceNotFoundException")),
            PiiTableError::NoTable { .. }
        ));
        assert!(matches!(
            table.error("DeleteItem", &refused("ValidationException")),
            PiiTableError::Failed { .. }
        ));
    }
}

//! Paging DynamoDB queries and scans, the one place that follows `LastEvaluatedKey`:
//! one page from an opaque cursor, or every page of a request.

use std::future::Future;

use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::query::QueryOutput;
use aws_sdk_dynamodb::operation::scan::ScanOutput;
use aws_smithy_types::retry::ProvideErrorKind;
use awsmp_core::ports::{Cursor, PortError};

use super::{DynamoItem, decode_cursor, encode_cursor};
use crate::error::port_error;

/// What one `Query` or `Scan` answered: its items and where the next page starts.
#[derive(Debug)]
pub struct Items {
    /// The page's items.
    pub items: Vec<DynamoItem>,
    /// `LastEvaluatedKey`: `None` on the last page.
    pub last_key: Option<DynamoItem>,
}

impl From<QueryOutput> for Items {
    fn from(out: QueryOutput) -> Self {
        Items {
            items: out.items.unwrap_or_default(),
            last_key: out.last_evaluated_key,
        }
    }
}

impl From<ScanOutput> for Items {
    fn from(out: ScanOutput) -> Self {
        Items {
            items: out.items.unwrap_or_default(),
            last_key: out.last_evaluated_key,
        }
    }
}

/// One page, from `cursor` (a malformed one fails as `cursor_operation`): `send` sends
/// the request from the given `ExclusiveStartKey` (its failure is `operation`'s).
/// Returns the page's items and the cursor of the next page (`None` after the last).
pub async fn one_page<O, E, Fut>(
    cursor_operation: &'static str,
    operation: &'static str,
    cursor: Option<Cursor>,
    send: impl FnOnce(Option<DynamoItem>) -> Fut,
) -> Result<(Vec<DynamoItem>, Option<Cursor>), PortError>
where
    Fut: Future<Output = Result<O, SdkError<E, HttpResponse>>>,
    O: Into<Items>,
    E: ProvideErrorMetadata + ProvideErrorKind + std::error::Error + 'static,
{
    let start = cursor
        .as_deref()
        .map(|c| decode_cursor(cursor_operation, c))
        .transpose()?;
    let page: Items = send(start)
        .await
        .map_err(|e| port_error(operation, e))?
        .into();
    let next = page.last_key.as_ref().map(encode_cursor).transpose()?;
    Ok((page.items, next))
}

/// Every item of a request, page after page until DynamoDB returns no
/// `LastEvaluatedKey`: `send` sends it from the given `ExclusiveStartKey` (its failure
/// is `operation`'s).
pub async fn all_pages<O, E, Fut>(
    operation: &'static str,
    mut send: impl FnMut(Option<DynamoItem>) -> Fut,
) -> Result<Vec<DynamoItem>, PortError>
where
    Fut: Future<Output = Result<O, SdkError<E, HttpResponse>>>,
    O: Into<Items>,
    E: ProvideErrorMetadata + ProvideErrorKind + std::error::Error + 'static,
{
    let mut items = Vec::new();
    let mut start = None;
    loop {
        let page: Items = send(start)
            .await
            .map_err(|e| port_error(operation, e))?
            .into();
        items.extend(page.items);
        start = page.last_key;
        if start.is_none() {
            return Ok(items);
        }
    }
}

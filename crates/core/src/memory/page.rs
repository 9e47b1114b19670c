//! The one pagination helper of the in-memory stores: a page of key-ordered items
//! after a cursor, as a DynamoDB `Query` with `Limit` pages.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::ports::{Cursor, Page, PortError};

/// One page out of `items` (sorted by key) after `cursor`, as a DynamoDB `Query` with
/// `Limit` pages: a full page always carries a cursor, even when nothing follows (the
/// next page is then empty), because DynamoDB cannot know either.
pub(crate) fn paginate<K, T>(
    items: Vec<(K, T)>,
    cursor: Option<Cursor>,
    page_size: usize,
    operation: &'static str,
) -> Result<Page<T>, PortError>
where
    K: Ord + Serialize + DeserializeOwned,
{
    let after: Option<K> = match &cursor {
        None => None,
        Some(text) => Some(serde_json::from_str(text).map_err(|e| PortError::Failed {
            operation,
            message: format!("malformed pagination cursor {text:?}: {e}"),
        })?),
    };
    let mut page: Vec<(K, T)> = items
        .into_iter()
        .filter(|(key, _)| after.as_ref().is_none_or(|a| key > a))
        .take(page_size.max(1))
        .collect();
    let next = if page.len() == page_size.max(1) {
        match page.last() {
            Some((key, _)) => Some(serde_json::to_string(key).map_err(|e| PortError::Failed {
                operation,
                message: format!("cannot encode pagination cursor: {e}"),
            })?),
            None => None,
        }
    } else {
        None
    };
    Ok(Page {
        items: page.drain(..).map(|(_, item)| item).collect(),
        malformed: Vec::new(),
        next,
    })
}

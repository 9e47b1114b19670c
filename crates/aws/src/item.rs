//! DynamoDB item plumbing shared by the stores: `AttributeValue` <-> domain
//! conversions, typed reads that fail as [`PortError::Corrupt`] naming the attribute,
//! update-expression building with placeholders, reads and updates of one item by its
//! keys ([`ItemKey`]), and pagination cursors.

use std::collections::HashMap;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use awsmp_core::items::expiry_attr;
use awsmp_core::model::{Allocation, Attr, RawUsageRow, Tag, attr};
use awsmp_core::ports::{Cursor, PortError};
use awsmp_core::stamp::AuditStamp;
use awsmp_core::time::{Instant, format_instant, parse_instant};

use crate::error::{applied, corrupt, failed, port_error};

pub mod page;

/// A DynamoDB item as the SDK returns it.
pub type DynamoItem = HashMap<String, AttributeValue>;

/// A string attribute value.
pub fn s(value: impl Into<String>) -> AttributeValue {
    AttributeValue::S(value.into())
}

/// A number attribute value.
pub fn n(value: impl ToString) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

/// An instant as stored: ISO-8601 whole seconds with `Z`.
pub fn instant(value: Instant) -> AttributeValue {
    AttributeValue::S(format_instant(value))
}

/// `expiresAt` (the tables' TTL attribute) as the domain shapes it
/// ([`awsmp_core::items::expiry_attr`]: epoch seconds, a number).
pub fn expiry(at: Instant) -> AttributeValue {
    match expiry_attr(at) {
        Attr::N(text) => AttributeValue::N(text),
        other => attr_to_dynamo(&other).unwrap_or_else(|_| n(at.timestamp())),
    }
}

impl Update {
    /// The final write's `expiresAt`: set to `expires_at`, or removed when `None` (a
    /// write that leaves or puts an item pending passes `None`).
    pub fn expiry(&mut self, expires_at: Option<Instant>) -> &mut Self {
        self.set_or_remove(attr::EXPIRES_AT, expires_at.map(expiry))
    }
}

/// One attribute, loosely typed, as the domain's [`Attr`].
pub fn attr_from_dynamo(value: &AttributeValue) -> Attr {
    match value {
        AttributeValue::S(v) => Attr::S(v.clone()),
        AttributeValue::N(v) => Attr::N(v.clone()),
        AttributeValue::Bool(v) => Attr::Bool(*v),
        AttributeValue::Null(_) => Attr::Null,
        AttributeValue::L(items) => Attr::L(items.iter().map(attr_from_dynamo).collect()),
        AttributeValue::M(map) => Attr::M(
            map.iter()
                .map(|(k, v)| (k.clone(), attr_from_dynamo(v)))
                .collect(),
        ),
        AttributeValue::Ss(values) => Attr::Ss(values.clone()),
        AttributeValue::Ns(_) => Attr::Other("NS".to_string()),
        AttributeValue::B(_) => Attr::Other("B".to_string()),
        AttributeValue::Bs(_) => Attr::Other("BS".to_string()),
        _ => Attr::Other("unknown".to_string()),
    }
}

/// A domain [`Attr`] as a DynamoDB value; `Other` (a type the domain only names) has
/// no value to write and is refused.
pub fn attr_to_dynamo(value: &Attr) -> Result<AttributeValue, PortError> {
    Ok(match value {
        Attr::S(v) => AttributeValue::S(v.clone()),
        Attr::N(v) => AttributeValue::N(v.clone()),
        Attr::Bool(v) => AttributeValue::Bool(*v),
        Attr::Null => AttributeValue::Null(true),
        Attr::L(items) => {
            AttributeValue::L(items.iter().map(attr_to_dynamo).collect::<Result<_, _>>()?)
        }
        Attr::M(map) => AttributeValue::M(
            map.iter()
                .map(|(k, v)| Ok((k.clone(), attr_to_dynamo(v)?)))
                .collect::<Result<_, PortError>>()?,
        ),
        Attr::Ss(values) => AttributeValue::Ss(values.clone()),
        Attr::Other(kind) => {
            return Err(failed(
                "attr_to_dynamo",
                format!("an attribute of type {kind} cannot be written back"),
            ));
        }
    })
}

/// A domain item (its attributes, keys included) as a DynamoDB item.
pub fn to_dynamo_item<'a>(
    attrs: impl IntoIterator<Item = (&'a String, &'a Attr)>,
) -> Result<DynamoItem, PortError> {
    attrs
        .into_iter()
        .map(|(name, value)| Ok((name.clone(), attr_to_dynamo(value)?)))
        .collect()
}

/// A usage-table item (keys and attributes) as DynamoDB stores it.
pub fn raw_row_item(row: &RawUsageRow) -> Result<DynamoItem, PortError> {
    let mut item = to_dynamo_item(&row.attrs)?;
    item.insert(attr::LICENSE_ARN.to_string(), s(&row.license_arn));
    item.insert(attr::USAGE_SORT_KEY.to_string(), s(&row.sort_key));
    Ok(item)
}

/// Typed reads of one item; every failure names the table, the item and the attribute.
pub struct Reader<'a> {
    table: &'a str,
    item: &'a DynamoItem,
    key_text: String,
}

impl<'a> Reader<'a> {
    /// A reader over `item` of `table`; `key_attrs` name the item in error messages.
    pub fn new(table: &'a str, item: &'a DynamoItem, key_attrs: &[&str]) -> Self {
        let key_text = key_attrs
            .iter()
            .map(|k| match item.get(*k) {
                Some(AttributeValue::S(v)) => format!("{k}={v}"),
                _ => format!("{k}=?"),
            })
            .collect::<Vec<_>>()
            .join(", ");
        Reader {
            table,
            item,
            key_text,
        }
    }

    /// A corrupt-item error for this item.
    pub fn corrupt(&self, message: impl std::fmt::Display) -> PortError {
        corrupt(self.table, format!("item ({}): {message}", self.key_text))
    }

    /// An optional string attribute (absent -> `None`; another type -> corrupt).
    pub fn opt_s(&self, name: &str) -> Result<Option<String>, PortError> {
        match self.item.get(name) {
            None | Some(AttributeValue::Null(_)) => Ok(None),
            Some(AttributeValue::S(v)) => Ok(Some(v.clone())),
            Some(other) => Err(self.corrupt(format!("{name} is not a string: {other:?}"))),
        }
    }

    /// An optional boolean attribute (absent -> `None`; another type -> corrupt).
    pub fn opt_bool(&self, name: &str) -> Result<Option<bool>, PortError> {
        match self.item.get(name) {
            None | Some(AttributeValue::Null(_)) => Ok(None),
            Some(AttributeValue::Bool(v)) => Ok(Some(*v)),
            Some(other) => Err(self.corrupt(format!("{name} is not a boolean: {other:?}"))),
        }
    }

    /// A required string attribute.
    pub fn s(&self, name: &str) -> Result<String, PortError> {
        self.opt_s(name)?
            .ok_or_else(|| self.corrupt(format!("{name} is missing")))
    }

    /// An optional integer attribute.
    pub fn opt_i64(&self, name: &str) -> Result<Option<i64>, PortError> {
        match self.item.get(name) {
            None | Some(AttributeValue::Null(_)) => Ok(None),
            Some(AttributeValue::N(v)) => v
                .parse::<i64>()
                .map(Some)
                .map_err(|_| self.corrupt(format!("{name} is not an integer: {v}"))),
            Some(other) => Err(self.corrupt(format!("{name} is not a number: {other:?}"))),
        }
    }

    /// A required integer attribute.
    pub fn i64(&self, name: &str) -> Result<i64, PortError> {
        self.opt_i64(name)?
            .ok_or_else(|| self.corrupt(format!("{name} is missing")))
    }

    /// An optional non-negative integer attribute.
    pub fn opt_u64(&self, name: &str) -> Result<Option<u64>, PortError> {
        match self.opt_i64(name)? {
            None => Ok(None),
            Some(v) => u64::try_from(v)
                .map(Some)
                .map_err(|_| self.corrupt(format!("{name} is negative: {v}"))),
        }
    }

    /// An optional instant (`YYYY-MM-DDTHH:MM:SSZ`).
    pub fn opt_instant(&self, name: &str) -> Result<Option<Instant>, PortError> {
        match self.opt_s(name)? {
            None => Ok(None),
            Some(text) => parse_instant(&text).map(Some).ok_or_else(|| {
                self.corrupt(format!("{name} is not YYYY-MM-DDTHH:MM:SSZ: {text:?}"))
            }),
        }
    }

    /// An optional value parsed with `FromStr`.
    pub fn opt_parsed<T>(&self, name: &str) -> Result<Option<T>, PortError>
    where
        T: std::str::FromStr,
        T::Err: std::fmt::Display,
    {
        match self.opt_s(name)? {
            None => Ok(None),
            Some(text) => text
                .parse::<T>()
                .map(Some)
                .map_err(|e| self.corrupt(format!("{name}: {e}"))),
        }
    }

    /// A string set (absent -> empty), sorted.
    pub fn string_set(&self, name: &str) -> Result<Vec<String>, PortError> {
        match self.item.get(name) {
            None | Some(AttributeValue::Null(_)) => Ok(Vec::new()),
            Some(AttributeValue::Ss(values)) => {
                let mut values = values.clone();
                values.sort();
                Ok(values)
            }
            Some(other) => Err(self.corrupt(format!("{name} is not a string set: {other:?}"))),
        }
    }

    /// Optional allocations in the stored shape (see [`awsmp_core::items::allocations_attr`]).
    pub fn opt_allocations(&self, name: &str) -> Result<Option<Vec<Allocation>>, PortError> {
        let list = match self.item.get(name) {
            None | Some(AttributeValue::Null(_)) => return Ok(None),
            Some(AttributeValue::L(list)) => list,
            Some(other) => return Err(self.corrupt(format!("{name} is not a list: {other:?}"))),
        };
        let mut allocations = Vec::with_capacity(list.len());
        for (i, entry) in list.iter().enumerate() {
            let AttributeValue::M(map) = entry else {
                return Err(self.corrupt(format!("{name}[{i}] is not a map")));
            };
            let quantity = match map.get(attr::ALLOCATED_USAGE_QUANTITY) {
                Some(AttributeValue::N(v)) => v.parse::<i64>().map_err(|_| {
                    self.corrupt(format!(
                        "{name}[{i}].allocatedUsageQuantity is not an integer: {v}"
                    ))
                })?,
                _ => {
                    return Err(self.corrupt(format!(
                        "{name}[{i}].allocatedUsageQuantity is missing or not a number"
                    )));
                }
            };
            let tags = match map.get(attr::TAGS) {
                None => Vec::new(),
                Some(AttributeValue::L(tags)) => tags
                    .iter()
                    .enumerate()
                    .map(|(j, tag)| {
                        let text = |key: &str| match tag {
                            AttributeValue::M(m) => match m.get(key) {
                                Some(AttributeValue::S(v)) => Some(v.clone()),
                                _ => None,
                            },
                            _ => None,
                        };
                        match (text(attr::TAG_KEY), text(attr::TAG_VALUE)) {
                            (Some(key), Some(value)) => Ok(Tag { key, value }),
                            _ => Err(self.corrupt(format!(
                                "{name}[{i}].tags[{j}] is not a {{key: S, value: S}} map"
                            ))),
                        }
                    })
                    .collect::<Result<Vec<_>, _>>()?,
                Some(_) => return Err(self.corrupt(format!("{name}[{i}].tags is not a list"))),
            };
            allocations.push(Allocation { quantity, tags });
        }
        Ok(Some(allocations))
    }
}

/// Builds an update expression with `#n`/`:v` placeholders for every name and value,
/// so no attribute name ever collides with a DynamoDB reserved word.
#[derive(Debug, Default)]
pub struct Update {
    names: HashMap<String, String>,
    values: HashMap<String, AttributeValue>,
    set: Vec<String>,
    remove: Vec<String>,
    add: Vec<String>,
}

impl Update {
    /// An empty update.
    pub fn new() -> Self {
        Self::default()
    }

    /// The placeholder for attribute `attr` (stable per attribute).
    pub fn name(&mut self, attr: &str) -> String {
        if let Some((placeholder, _)) = self.names.iter().find(|(_, a)| a.as_str() == attr) {
            return placeholder.clone();
        }
        let placeholder = format!("#a{}", self.names.len());
        self.names.insert(placeholder.clone(), attr.to_string());
        placeholder
    }

    /// A new placeholder bound to `value`.
    pub fn value(&mut self, value: AttributeValue) -> String {
        let placeholder = format!(":v{}", self.values.len());
        self.values.insert(placeholder.clone(), value);
        placeholder
    }

    /// `SET attr = value`.
    pub fn set(&mut self, attr: &str, value: AttributeValue) -> &mut Self {
        let name = self.name(attr);
        let value = self.value(value);
        self.set.push(format!("{name} = {value}"));
        self
    }

    /// `SET attr = if_not_exists(attr, value)`.
    pub fn set_if_absent(&mut self, attr: &str, value: AttributeValue) -> &mut Self {
        let name = self.name(attr);
        let value = self.value(value);
        self.set
            .push(format!("{name} = if_not_exists({name}, {value})"));
        self
    }

    /// `SET attr = value` when `Some`, `REMOVE attr` when `None`.
    pub fn set_or_remove(&mut self, attr: &str, value: Option<AttributeValue>) -> &mut Self {
        match value {
            Some(value) => self.set(attr, value),
            None => self.remove(attr),
        }
    }

    /// A raw `SET` clause written with placeholders from [`Update::name`]/[`Update::value`].
    pub fn set_clause(&mut self, clause: String) -> &mut Self {
        self.set.push(clause);
        self
    }

    /// `REMOVE attr`.
    pub fn remove(&mut self, attr: &str) -> &mut Self {
        let name = self.name(attr);
        self.remove.push(name);
        self
    }

    /// `ADD attr value` (numbers and sets).
    pub fn add(&mut self, attr: &str, value: AttributeValue) -> &mut Self {
        let name = self.name(attr);
        let value = self.value(value);
        self.add.push(format!("{name} {value}"));
        self
    }

    /// The shared audit stamp: `createdAt` written once, `updatedAt` every time
    pub fn stamp(&mut self, now: Instant) -> &mut Self {
        let stamp = AuditStamp::at(now);
        self.set_if_absent(attr::CREATED_AT, s(stamp.created_at));
        self.set(attr::UPDATED_AT, s(stamp.updated_at))
    }

    /// The `UpdateExpression`.
    pub fn expression(&self) -> String {
        let mut parts = Vec::new();
        if !self.set.is_empty() {
            parts.push(format!("SET {}", self.set.join(", ")));
        }
        if !self.remove.is_empty() {
            parts.push(format!("REMOVE {}", self.remove.join(", ")));
        }
        if !self.add.is_empty() {
            parts.push(format!("ADD {}", self.add.join(", ")));
        }
        parts.join(" ")
    }

    /// `ExpressionAttributeNames` (`None` when empty: DynamoDB refuses an empty map).
    pub fn names(&self) -> Option<HashMap<String, String>> {
        (!self.names.is_empty()).then(|| self.names.clone())
    }

    /// `ExpressionAttributeValues` (`None` when empty).
    pub fn values(&self) -> Option<HashMap<String, AttributeValue>> {
        (!self.values.is_empty()).then(|| self.values.clone())
    }
}

/// One item's primary key: `licenseArn` and the table's sort key. The one place an
/// item is read or updated by its keys.
#[derive(Debug, Clone, Copy)]
pub struct ItemKey<'a> {
    /// The table.
    pub table: &'a str,
    /// The table's sort-key attribute.
    pub sort_attr: &'static str,
    /// Partition key.
    pub license_arn: &'a str,
    /// Sort key.
    pub sort_key: &'a str,
}

impl ItemKey<'_> {
    /// The item, read strongly consistent (`GetItem`); `None` when absent.
    pub async fn get(
        &self,
        client: &Client,
        operation: &'static str,
    ) -> Result<Option<DynamoItem>, PortError> {
        let out = client
            .get_item()
            .table_name(self.table)
            .consistent_read(true)
            .key(attr::LICENSE_ARN, s(self.license_arn))
            .key(self.sort_attr, s(self.sort_key))
            .send()
            .await
            .map_err(|e| port_error(operation, e))?;
        Ok(out.item)
    }

    /// Applies `update` (`UpdateItem`), only where `condition` holds when one is given:
    /// `Ok(false)` when it does not.
    pub async fn update(
        &self,
        client: &Client,
        update: &Update,
        condition: Option<String>,
        operation: &'static str,
    ) -> Result<bool, PortError> {
        let result = client
            .update_item()
            .table_name(self.table)
            .key(attr::LICENSE_ARN, s(self.license_arn))
            .key(self.sort_attr, s(self.sort_key))
            .update_expression(update.expression())
            .set_condition_expression(condition)
            .set_expression_attribute_names(update.names())
            .set_expression_attribute_values(update.values())
            .send()
            .await;
        applied(operation, result)
    }
}

/// The audit stamp attributes of a new item written at `now`.
pub fn stamp_attrs(item: &mut DynamoItem, now: Instant) {
    let stamp = AuditStamp::at(now);
    item.insert(attr::CREATED_AT.to_string(), s(stamp.created_at));
    item.insert(attr::UPDATED_AT.to_string(), s(stamp.updated_at));
}

/// A `LastEvaluatedKey` as an opaque cursor: JSON `{"attr": {"S": "..."}}`, sorted.
pub fn encode_cursor(key: &DynamoItem) -> Result<Cursor, PortError> {
    let mut map = serde_json::Map::new();
    let mut names: Vec<&String> = key.keys().collect();
    names.sort();
    for name in names {
        let value = match &key[name] {
            AttributeValue::S(v) => serde_json::json!({ "S": v }),
            AttributeValue::N(v) => serde_json::json!({ "N": v }),
            other => {
                return Err(failed(
                    "encode_cursor",
                    format!("key attribute {name} has a type a cursor cannot hold: {other:?}"),
                ));
            }
        };
        map.insert(name.clone(), value);
    }
    Ok(serde_json::Value::Object(map).to_string())
}

/// A cursor from [`encode_cursor`] back as an `ExclusiveStartKey`.
pub fn decode_cursor(operation: &'static str, cursor: &str) -> Result<DynamoItem, PortError> {
    let bad = |why: &str| {
        failed(
            operation,
            format!("malformed pagination cursor {cursor:?}: {why}"),
        )
    };
    let value: serde_json::Value = serde_json::from_str(cursor).map_err(|e| bad(&e.to_string()))?;
    let serde_json::Value::Object(map) = value else {
        return Err(bad("not a JSON object"));
    };
    let mut key = DynamoItem::new();
    for (name, typed) in map {
        let entry = match typed.as_object().and_then(|o| o.iter().next()) {
            Some((t, serde_json::Value::String(v))) if t == "S" => AttributeValue::S(v.clone()),
            Some((t, serde_json::Value::String(v))) if t == "N" => AttributeValue::N(v.clone()),
            _ => {
                return Err(bad(&format!(
                    "attribute {name} is not {{\"S\"|\"N\": string}}"
                )));
            }
        };
        key.insert(name, entry);
    }
    if key.is_empty() {
        return Err(bad("empty key"));
    }
    Ok(key)
}

/// The query of a table's sparse `metering_pending` index for one hour bucket (what
/// both index readers page through), capped at `limit` items a page.
pub fn pending_hour_query(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    hour: awsmp_core::time::HourBucket,
    limit: Option<i32>,
) -> aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder {
    client
        .query()
        .table_name(table)
        .index_name(attr::METERING_PENDING_INDEX)
        .key_condition_expression("#p = :hour")
        .expression_attribute_names("#p", attr::METERING_PENDING)
        .expression_attribute_values(":hour", s(hour.to_string()))
        .set_limit(limit)
}

/// One page of the sweep of a table's sparse `metering_pending` index: a `Scan` of the
/// index (it holds only pending items, so this never reads the table's history), keys
/// and `meteringPending` projected, filtered to values other than the `live` buckets.
/// Used by the discoverer and the submitter to find what the per-hour queries cannot:
/// rows pending under a non-bucket value or an hour older than the look-back.
pub async fn stray_pending_page(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    sort_key_attr: &str,
    live: &[awsmp_core::time::HourBucket],
    cursor: Option<Cursor>,
    limit: Option<i32>,
) -> Result<awsmp_core::ports::Page<awsmp_core::ports::StrayPending>, PortError> {
    let mut request = client
        .scan()
        .table_name(table)
        .index_name(attr::METERING_PENDING_INDEX)
        .projection_expression("#pk, #sk, #p")
        .expression_attribute_names("#pk", attr::LICENSE_ARN)
        .expression_attribute_names("#sk", sort_key_attr)
        .expression_attribute_names("#p", attr::METERING_PENDING)
        .set_limit(limit);
    if let Some((filter, _, values)) = not_live_filter(live) {
        request = request
            .filter_expression(filter)
            .set_expression_attribute_values(Some(values));
    }
    let (items, next) = page::one_page(
        "stray_pending_page",
        "Scan metering_pending",
        cursor,
        |start| request.set_exclusive_start_key(start).send(),
    )
    .await?;
    let text = |item: &DynamoItem, name: &str| item.get(name).and_then(|v| v.as_s().ok()).cloned();
    let items = items
        .iter()
        .filter_map(|item| {
            Some(awsmp_core::ports::StrayPending {
                license_arn: text(item, attr::LICENSE_ARN)?,
                sort_key: text(item, sort_key_attr)?,
                metering_pending: text(item, attr::METERING_PENDING)?,
            })
        })
        .collect();
    Ok(awsmp_core::ports::Page {
        items,
        malformed: Vec::new(),
        next,
    })
}

/// A filter expression with its attribute names and values.
pub type ExpressionParts = (
    String,
    HashMap<String, String>,
    HashMap<String, AttributeValue>,
);

/// The filter "`meteringPending` is none of `live`" (placeholder `#p`), with its names
/// and values; `None` when `live` is empty. DynamoDB's `IN` takes at most 100 operands;
/// the live window is about 26 buckets.
pub fn not_live_filter(live: &[awsmp_core::time::HourBucket]) -> Option<ExpressionParts> {
    if live.is_empty() {
        return None;
    }
    let values: HashMap<String, AttributeValue> = live
        .iter()
        .take(100)
        .enumerate()
        .map(|(i, bucket)| (format!(":b{i}"), s(bucket.to_string())))
        .collect();
    let mut placeholders: Vec<&String> = values.keys().collect();
    placeholders.sort();
    let list: Vec<&str> = placeholders.iter().map(|p| p.as_str()).collect();
    let filter = format!("NOT (#p IN ({}))", list.join(", "));
    let names = HashMap::from([("#p".to_string(), attr::METERING_PENDING.to_string())]);
    Some((filter, names, values))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use awsmp_core::items::allocations_attr;
    use std::collections::BTreeMap;

    #[test]
    fn cursor_round_trips_and_rejects_garbage() {
        let key = DynamoItem::from([
            ("licenseArn".to_string(), s("arn:x")),
            ("meteringPending".to_string(), s("2026-11-30T10")),
            ("n".to_string(), n(5)),
        ]);
        let cursor = encode_cursor(&key).unwrap();
        assert_eq!(decode_cursor("t", &cursor).unwrap(), key);
        for bad in ["", "[]", "{}", r#"{"a": 1}"#, r#"{"a": {"B": "x"}}"#] {
            let err = decode_cursor("t", bad).unwrap_err();
            assert!(
                err.to_string().contains("malformed pagination cursor"),
                "{err}"
            );
        }
    }

    #[test]
    fn attrs_round_trip_and_other_is_refused() {
        let attr = Attr::M(BTreeMap::from([
            (
                "a".to_string(),
                Attr::L(vec![Attr::N("1".into()), Attr::Null]),
            ),
            ("b".to_string(), Attr::Ss(vec!["x".into()])),
            ("c".to_string(), Attr::Bool(true)),
        ]));
        assert_eq!(attr_from_dynamo(&attr_to_dynamo(&attr).unwrap()), attr);
        assert!(attr_to_dynamo(&Attr::Other("B".into())).is_err());
    }

    #[test]
    fn allocations_round_trip_through_the_stored_shape() {
        let allocations = vec![
            Allocation {
                quantity: 3,
                tags: vec![Tag {
                    key: "team".into(),
                    value: "a".into(),
                }],
            },
            Allocation {
                quantity: 2,
                tags: vec![],
            },
        ];
        let item = DynamoItem::from([(
            "u".to_string(),
            attr_to_dynamo(&allocations_attr(&allocations)).unwrap(),
        )]);
        let reader = Reader::new("t", &item, &[]);
        assert_eq!(reader.opt_allocations("u").unwrap(), Some(allocations));
        let bad = DynamoItem::from([("u".to_string(), AttributeValue::L(vec![s("x")]))]);
        let err = Reader::new("t", &bad, &[])
            .opt_allocations("u")
            .unwrap_err();
        assert!(err.to_string().contains("u[0] is not a map"), "{err}");
    }

    #[test]
    fn update_expression_uses_placeholders_throughout() {
        let mut update = Update::new();
        update.set("version", n(2)).remove("meteringPending").add(
            "registeredRegions",
            AttributeValue::Ss(vec!["us-east-1".into()]),
        );
        update.stamp(parse_instant("2026-11-30T10:00:00Z").unwrap());
        let expression = update.expression();
        assert_eq!(
            expression,
            "SET #a0 = :v0, #a3 = if_not_exists(#a3, :v2), #a4 = :v3 REMOVE #a1 ADD #a2 :v1"
        );
        assert_eq!(update.names().unwrap()["#a0"], "version");
    }
}

//! Tables straight from a CloudFormation template: reads every `AWS::DynamoDB::Table`
//! resource (keys, attribute types, GSIs and projections) so tests run on exactly the
//! definitions that get deployed. Values resolve through the one template reader
//! ([`StackTemplate`]): the template's own defaults, AWS pseudo parameters, then the
//! caller's values; a per-logical-id name override wins over all.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use aws_sdk_dynamodb::Client;
use serde_norway::Value;

use crate::cfn::StackTemplate;
use crate::error::LocalAwsError;
use crate::tables::{IndexProjection, IndexSpec, KeyAttr, TableSpec, create_table};

/// Names and parameters for reading a template's tables.
#[derive(Debug, Clone, Default)]
pub struct TemplateOptions {
    names: BTreeMap<String, String>,
    parameters: BTreeMap<String, String>,
}

impl TemplateOptions {
    /// No overrides: names come from the template with its parameter defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Uses `table_name` for the resource `logical_id`, whatever its `TableName` says.
    pub fn name(mut self, logical_id: &str, table_name: &str) -> Self {
        self.names
            .insert(logical_id.to_string(), table_name.to_string());
        self
    }

    /// Sets a template parameter for `!Sub` / `!Ref` resolution.
    pub fn parameter(mut self, name: &str, value: &str) -> Self {
        self.parameters.insert(name.to_string(), value.to_string());
        self
    }
}

/// One table resource of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateTable {
    /// The resource's logical id.
    pub logical_id: String,
    /// Its resolved name, keys and indexes.
    pub spec: TableSpec,
}

impl StackTemplate {
    /// Every `AWS::DynamoDB::Table` resource (whatever its `Condition`), its name
    /// resolved, or `names`' override for its logical id.
    pub fn tables(
        &self,
        names: &BTreeMap<String, String>,
    ) -> Result<Vec<TemplateTable>, LocalAwsError> {
        if self.section("Resources").is_none() {
            return Err(self.error("no Resources section"));
        }
        let mut tables = Vec::new();
        for (logical_id, resource) in self.resources_of_type("AWS::DynamoDB::Table") {
            let what = format!("resource {logical_id}");
            let props = self.field(resource, "Properties", &what)?;
            let name = match names.get(&logical_id) {
                Some(name) => name.clone(),
                None => match props.get("TableName") {
                    Some(value) => self.string(value, &format!("{what} TableName"))?,
                    None => {
                        return Err(self.error(format!(
                            "{what} has no TableName: pass TemplateOptions::name(\"{logical_id}\", ..)"
                        )));
                    }
                },
            };
            let mut kinds = BTreeMap::new();
            for def in self.list(props.get("AttributeDefinitions"), &what)? {
                let attr = self.string(self.field(def, "AttributeName", &what)?, &what)?;
                let kind = self.string(self.field(def, "AttributeType", &what)?, &what)?;
                kinds.insert(attr, kind);
            }
            let (hash, range) = self.keys(props.get("KeySchema"), &kinds, &what)?;
            if props.get("LocalSecondaryIndexes").is_some() {
                return Err(self.error(format!("{what}: LocalSecondaryIndexes are not supported")));
            }
            let mut indexes = Vec::new();
            for gsi in self.list(props.get("GlobalSecondaryIndexes"), &what)? {
                indexes.push(self.index(gsi, &kinds, &what)?);
            }
            tables.push(TemplateTable {
                logical_id,
                spec: TableSpec {
                    name,
                    hash,
                    range,
                    indexes,
                }
                .normalized(),
            });
        }
        Ok(tables)
    }

    fn index(
        &self,
        gsi: &Value,
        kinds: &BTreeMap<String, String>,
        what: &str,
    ) -> Result<IndexSpec, LocalAwsError> {
        let index_name = self.string(self.field(gsi, "IndexName", what)?, what)?;
        let index_what = format!("{what} index {index_name}");
        let (hash, range) = self.keys(gsi.get("KeySchema"), kinds, &index_what)?;
        let projection = self.field(gsi, "Projection", &index_what)?;
        let non_key = self
            .list(projection.get("NonKeyAttributes"), &index_what)?
            .iter()
            .map(|v| self.string(v, &index_what))
            .collect::<Result<Vec<_>, _>>()?;
        let projection_type = match projection.get("ProjectionType") {
            Some(v) => self.string(v, &index_what)?,
            None if non_key.is_empty() => "KEYS_ONLY".to_string(),
            None => "INCLUDE".to_string(),
        };
        let projection = match projection_type.as_str() {
            "ALL" => IndexProjection::All,
            "KEYS_ONLY" => IndexProjection::KeysOnly,
            "INCLUDE" => IndexProjection::Include(non_key),
            other => {
                return Err(self.error(format!("{index_what}: ProjectionType {other:?}")));
            }
        };
        Ok(IndexSpec {
            name: index_name,
            hash,
            range,
            projection,
        })
    }

    fn list<'v>(&self, value: Option<&'v Value>, what: &str) -> Result<&'v [Value], LocalAwsError> {
        match value {
            Some(Value::Sequence(items)) => Ok(items),
            None => Ok(&[]),
            Some(other) => Err(self.error(format!(
                "{what}: expected a plain list, found {other:?} (conditional lists are not supported)"
            ))),
        }
    }

    fn field<'v>(&self, map: &'v Value, key: &str, what: &str) -> Result<&'v Value, LocalAwsError> {
        map.get(key)
            .ok_or_else(|| self.error(format!("{what}: missing {key}")))
    }

    fn keys(
        &self,
        schema: Option<&Value>,
        kinds: &BTreeMap<String, String>,
        what: &str,
    ) -> Result<(KeyAttr, Option<KeyAttr>), LocalAwsError> {
        let mut hash = None;
        let mut range = None;
        for element in self.list(schema, &format!("{what} KeySchema"))? {
            let name = self.string(self.field(element, "AttributeName", what)?, what)?;
            let key_type = self.string(self.field(element, "KeyType", what)?, what)?;
            let kind = kinds.get(&name).cloned().ok_or_else(|| {
                self.error(format!("{what}: key {name} is not in AttributeDefinitions"))
            })?;
            let attr = KeyAttr { name, kind };
            match key_type.as_str() {
                "HASH" => hash = Some(attr),
                "RANGE" => range = Some(attr),
                other => return Err(self.error(format!("{what}: KeyType {other:?}"))),
            }
        }
        let hash = hash.ok_or_else(|| self.error(format!("{what}: no HASH key")))?;
        Ok((hash, range))
    }
}

/// Every `AWS::DynamoDB::Table` in the template, with names resolved.
pub fn tables_in_template(
    path: &Path,
    options: &TemplateOptions,
) -> Result<Vec<TemplateTable>, LocalAwsError> {
    StackTemplate::load_with(path, options.parameters.clone())?.tables(&options.names)
}

/// Creates `tables` on `client`; returns logical id -> table name.
pub async fn create_tables(
    client: &Client,
    tables: &[TemplateTable],
) -> Result<BTreeMap<String, String>, LocalAwsError> {
    let mut created = BTreeMap::new();
    for table in tables {
        create_table(client, &table.spec).await?;
        created.insert(table.logical_id.clone(), table.spec.name.clone());
    }
    Ok(created)
}

/// Creates every table of the template on `client`; returns logical id -> table name.
pub async fn create_tables_from_template(
    client: &Client,
    path: &Path,
    options: &TemplateOptions,
) -> Result<BTreeMap<String, String>, LocalAwsError> {
    create_tables(client, &tables_in_template(path, options)?).await
}

/// The `detail-type` list of the `EventPattern` of the `AWS::Events::Rule` resource
/// `logical_id`, sorted (an error if the resource, its pattern or the list is missing).
pub fn event_rule_detail_types(
    path: &Path,
    logical_id: &str,
) -> Result<Vec<String>, LocalAwsError> {
    let template = StackTemplate::load(path, &[])?;
    let error = |message: String| template.error(message);
    let resource = template.resource(logical_id)?;
    if resource.get("Type").and_then(Value::as_str) != Some("AWS::Events::Rule") {
        return Err(error(format!("{logical_id} is not an AWS::Events::Rule")));
    }
    let list = resource
        .get("Properties")
        .and_then(|p| p.get("EventPattern"))
        .and_then(|p| p.get("detail-type"))
        .and_then(Value::as_sequence)
        .ok_or_else(|| error(format!("{logical_id} has no EventPattern detail-type list")))?;
    let mut detail_types = list
        .iter()
        .map(|v| {
            v.as_str().map(str::to_string).ok_or_else(|| {
                error(format!(
                    "{logical_id}: detail-type entry {v:?} is not a string"
                ))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    detail_types.sort();
    Ok(detail_types)
}

/// The stack templates at the workspace root (`template-*.yaml`), sorted.
pub fn workspace_templates() -> Vec<PathBuf> {
    let root = crate::moto::workspace_root();
    let mut found: Vec<PathBuf> = std::fs::read_dir(&root)
        .map(|dir| {
            dir.filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("template-") && n.ends_with(".yaml"))
                })
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found
}

//! Tables straight from a CloudFormation template: reads every `AWS::DynamoDB::Table`
//! resource (keys, attribute types, GSIs and projections) so tests run on exactly the
//! definitions that get deployed. Short-form tags (`!Sub`, `!Ref`) and their long
//! forms resolve against parameters: the template's own defaults, AWS pseudo
//! parameters, then the caller's values; a per-logical-id name override wins over all.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use aws_sdk_dynamodb::Client;
use serde_norway::Value;

use crate::error::TestSupportError;
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

struct Reader<'a> {
    path: &'a Path,
    parameters: BTreeMap<String, String>,
}

impl Reader<'_> {
    fn error(&self, message: impl Into<String>) -> TestSupportError {
        TestSupportError::Template {
            path: self.path.to_path_buf(),
            message: message.into(),
        }
    }

    /// A string property: literal, `!Ref`, `!Sub` (string or `[string, vars]`), or the
    /// long forms `{Ref: ..}` / `{Fn::Sub: ..}`.
    fn string(&self, value: &Value, what: &str) -> Result<String, TestSupportError> {
        match value {
            Value::String(s) => Ok(s.clone()),
            Value::Number(n) => Ok(n.to_string()),
            Value::Tagged(tagged) if tagged.tag == "Ref" => self.reference(&tagged.value, what),
            Value::Tagged(tagged) if tagged.tag == "Sub" => self.sub(&tagged.value, what),
            Value::Mapping(map) if map.len() == 1 => {
                if let Some(inner) = map.get("Ref") {
                    self.reference(inner, what)
                } else if let Some(inner) = map.get("Fn::Sub") {
                    self.sub(inner, what)
                } else {
                    Err(self.error(format!("{what}: unsupported intrinsic {map:?}")))
                }
            }
            other => Err(self.error(format!("{what}: unsupported value {other:?}"))),
        }
    }

    fn reference(&self, value: &Value, what: &str) -> Result<String, TestSupportError> {
        let Value::String(name) = value else {
            return Err(self.error(format!("{what}: !Ref of a non-string {value:?}")));
        };
        self.parameters.get(name).cloned().ok_or_else(|| {
            self.error(format!(
                "{what}: !Ref {name} has no value (give it a Default, or pass it with \
                 TemplateOptions::parameter)"
            ))
        })
    }

    fn sub(&self, value: &Value, what: &str) -> Result<String, TestSupportError> {
        let (text, vars) = match value {
            Value::String(s) => (s.as_str(), BTreeMap::new()),
            Value::Sequence(items) if items.len() == 2 => {
                let Value::String(s) = &items[0] else {
                    return Err(self.error(format!("{what}: !Sub list needs a string first")));
                };
                let Value::Mapping(map) = &items[1] else {
                    return Err(self.error(format!("{what}: !Sub list needs a map second")));
                };
                let mut vars = BTreeMap::new();
                for (k, v) in map {
                    let Value::String(k) = k else {
                        return Err(self.error(format!("{what}: !Sub variable name {k:?}")));
                    };
                    vars.insert(k.clone(), self.string(v, what)?);
                }
                (s.as_str(), vars)
            }
            other => return Err(self.error(format!("{what}: unsupported !Sub {other:?}"))),
        };
        let mut out = String::new();
        let mut rest = text;
        while let Some(start) = rest.find("${") {
            out.push_str(&rest[..start]);
            let after = &rest[start + 2..];
            let Some(end) = after.find('}') else {
                return Err(self.error(format!("{what}: unclosed ${{ in {text:?}")));
            };
            let name = &after[..end];
            if let Some(literal) = name.strip_prefix('!') {
                // `${!Name}` is CloudFormation's escape for a literal `${Name}`.
                out.push_str("${");
                out.push_str(literal);
                out.push('}');
            } else if let Some(v) = vars.get(name).or_else(|| self.parameters.get(name)) {
                out.push_str(v);
            } else {
                return Err(self.error(format!(
                    "{what}: ${{{name}}} in {text:?} has no value (give the parameter a \
                     Default, pass it with TemplateOptions::parameter, or override the name)"
                )));
            }
            rest = &after[end + 1..];
        }
        out.push_str(rest);
        Ok(out)
    }

    fn list<'v>(
        &self,
        value: Option<&'v Value>,
        what: &str,
    ) -> Result<&'v [Value], TestSupportError> {
        match value {
            Some(Value::Sequence(items)) => Ok(items),
            None => Ok(&[]),
            Some(other) => Err(self.error(format!(
                "{what}: expected a plain list, found {other:?} (conditional lists are not supported)"
            ))),
        }
    }

    fn field<'v>(
        &self,
        map: &'v Value,
        key: &str,
        what: &str,
    ) -> Result<&'v Value, TestSupportError> {
        map.get(key)
            .ok_or_else(|| self.error(format!("{what}: missing {key}")))
    }

    fn keys(
        &self,
        schema: Option<&Value>,
        kinds: &BTreeMap<String, String>,
        what: &str,
    ) -> Result<(KeyAttr, Option<KeyAttr>), TestSupportError> {
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
) -> Result<Vec<TemplateTable>, TestSupportError> {
    let text = std::fs::read_to_string(path).map_err(|e| TestSupportError::Template {
        path: path.to_path_buf(),
        message: format!("cannot read: {e}"),
    })?;
    let doc: Value = serde_norway::from_str(&text).map_err(|e| TestSupportError::Template {
        path: path.to_path_buf(),
        message: format!("not valid YAML: {e}"),
    })?;

    let mut parameters: BTreeMap<String, String> = [
        ("AWS::Region", "us-east-1"),
        ("AWS::AccountId", "123456789012"),
        ("AWS::StackName", "awsmp-test"),
        ("AWS::Partition", "aws"),
        ("AWS::URLSuffix", "amazonaws.com"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    if let Some(Value::Mapping(params)) = doc.get("Parameters") {
        for (name, param) in params {
            let (Value::String(name), Some(default)) = (name, param.get("Default")) else {
                continue;
            };
            let default = match default {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                Value::Bool(b) => b.to_string(),
                _ => continue,
            };
            parameters.insert(name.clone(), default);
        }
    }
    parameters.extend(options.parameters.clone());
    let reader = Reader { path, parameters };

    let Some(Value::Mapping(resources)) = doc.get("Resources") else {
        return Err(reader.error("no Resources section"));
    };
    let mut tables = Vec::new();
    for (logical_id, resource) in resources {
        let Value::String(logical_id) = logical_id else {
            continue;
        };
        if resource.get("Type").and_then(Value::as_str) != Some("AWS::DynamoDB::Table") {
            continue;
        }
        let what = format!("resource {logical_id}");
        let props = reader.field(resource, "Properties", &what)?;
        let name = match options.names.get(logical_id) {
            Some(name) => name.clone(),
            None => match props.get("TableName") {
                Some(value) => reader.string(value, &format!("{what} TableName"))?,
                None => {
                    return Err(reader.error(format!(
                        "{what} has no TableName: pass TemplateOptions::name(\"{logical_id}\", ..)"
                    )));
                }
            },
        };
        let mut kinds = BTreeMap::new();
        for def in reader.list(props.get("AttributeDefinitions"), &what)? {
            let attr = reader.string(reader.field(def, "AttributeName", &what)?, &what)?;
            let kind = reader.string(reader.field(def, "AttributeType", &what)?, &what)?;
            kinds.insert(attr, kind);
        }
        let (hash, range) = reader.keys(props.get("KeySchema"), &kinds, &what)?;
        if props.get("LocalSecondaryIndexes").is_some() {
            return Err(reader.error(format!("{what}: LocalSecondaryIndexes are not supported")));
        }
        let mut indexes = Vec::new();
        for gsi in reader.list(props.get("GlobalSecondaryIndexes"), &what)? {
            let index_name = reader.string(reader.field(gsi, "IndexName", &what)?, &what)?;
            let index_what = format!("{what} index {index_name}");
            let (index_hash, index_range) =
                reader.keys(gsi.get("KeySchema"), &kinds, &index_what)?;
            let projection = reader.field(gsi, "Projection", &index_what)?;
            let non_key = reader
                .list(projection.get("NonKeyAttributes"), &index_what)?
                .iter()
                .map(|v| reader.string(v, &index_what))
                .collect::<Result<Vec<_>, _>>()?;
            let projection_type = match projection.get("ProjectionType") {
                Some(v) => reader.string(v, &index_what)?,
                None if non_key.is_empty() => "KEYS_ONLY".to_string(),
                None => "INCLUDE".to_string(),
            };
            let projection = match projection_type.as_str() {
                "ALL" => IndexProjection::All,
                "KEYS_ONLY" => IndexProjection::KeysOnly,
                "INCLUDE" => IndexProjection::Include(non_key),
                other => {
                    return Err(reader.error(format!("{index_what}: ProjectionType {other:?}")));
                }
            };
            indexes.push(IndexSpec {
                name: index_name,
                hash: index_hash,
                range: index_range,
                projection,
            });
        }
        tables.push(TemplateTable {
            logical_id: logical_id.clone(),
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

/// Creates every table of the template on `client`; returns logical id -> table name.
pub async fn create_tables_from_template(
    client: &Client,
    path: &Path,
    options: &TemplateOptions,
) -> Result<BTreeMap<String, String>, TestSupportError> {
    let mut created = BTreeMap::new();
    for table in tables_in_template(path, options)? {
        create_table(client, &table.spec).await?;
        created.insert(table.logical_id, table.spec.name);
    }
    Ok(created)
}

/// The `detail-type` list of the `EventPattern` of the `AWS::Events::Rule` resource
/// `logical_id`, sorted (an error if the resource, its pattern or the list is missing).
pub fn event_rule_detail_types(
    path: &Path,
    logical_id: &str,
) -> Result<Vec<String>, TestSupportError> {
    let error = |message: String| TestSupportError::Template {
        path: path.to_path_buf(),
        message,
    };
    let text = std::fs::read_to_string(path).map_err(|e| error(format!("cannot read: {e}")))?;
    let doc: Value =
        serde_norway::from_str(&text).map_err(|e| error(format!("not valid YAML: {e}")))?;
    let resource = doc
        .get("Resources")
        .and_then(|r| r.get(logical_id))
        .ok_or_else(|| error(format!("no resource {logical_id}")))?;
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

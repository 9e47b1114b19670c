//! The project's DynamoDB tables, the one place they are read and created: as data
//! ([`TableSpec`]), each read from the template that deploys it (compiled in, so there
//! is one source); every `AWS::DynamoDB::Table` of a template (keys, attribute types,
//! GSIs and projections, [`StackTemplate::tables`], [`tables_in_template`]), so tests
//! and the local stack run on exactly the definitions that get deployed; and creating
//! any of them on an emulator ([`create_table`], [`create_tables`]). Template values
//! resolve through the one template reader ([`StackTemplate`]): the template's own
//! defaults, AWS pseudo parameters, then the caller's values; a per-logical-id name
//! override wins over all.

use std::collections::BTreeMap;
use std::path::Path;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, Projection,
    ProjectionType, ScalarAttributeType,
};
use serde_norway::Value;

use crate::cfn::StackTemplate;
use crate::error::LocalAwsError;

/// A key attribute: name and scalar type (`S`, `N` or `B`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct KeyAttr {
    /// Attribute name.
    pub name: String,
    /// `S`, `N` or `B`.
    pub kind: String,
}

impl KeyAttr {
    /// A string key attribute.
    pub fn s(name: &str) -> Self {
        KeyAttr {
            name: name.to_string(),
            kind: "S".to_string(),
        }
    }
}

/// What a GSI projects.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum IndexProjection {
    /// Keys only.
    KeysOnly,
    /// Keys plus these attributes (compared sorted).
    Include(Vec<String>),
    /// Every attribute.
    All,
}

/// One global secondary index.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct IndexSpec {
    /// Index name.
    pub name: String,
    /// Hash key.
    pub hash: KeyAttr,
    /// Range key, if any.
    pub range: Option<KeyAttr>,
    /// Projection.
    pub projection: IndexProjection,
}

/// A table's name, keys and GSIs: everything that decides how items are stored and
/// found (billing and encryption settings do not matter to tests).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableSpec {
    /// Table name.
    pub name: String,
    /// Partition key.
    pub hash: KeyAttr,
    /// Sort key, if any.
    pub range: Option<KeyAttr>,
    /// GSIs, sorted by name.
    pub indexes: Vec<IndexSpec>,
}

impl TableSpec {
    /// The same spec under another name (to compare shapes regardless of naming).
    pub fn renamed(&self, name: &str) -> TableSpec {
        TableSpec {
            name: name.to_string(),
            ..self.clone()
        }
    }

    /// Sorts indexes and INCLUDE lists so two specs of the same shape compare equal.
    pub fn normalized(mut self) -> TableSpec {
        for index in &mut self.indexes {
            if let IndexProjection::Include(attrs) = &mut index.projection {
                attrs.sort();
            }
        }
        self.indexes.sort();
        self
    }
}

/// The templates, compiled in: the one source of every table's keys and indexes.
const MAIN_TEMPLATE: (&str, &str) = (
    "template-main.yaml",
    include_str!("../../../../template-main.yaml"),
);
const EVENTS_TEMPLATE: (&str, &str) = (
    "template-events.yaml",
    include_str!("../../../../template-events.yaml"),
);

/// The shape of the table resource `logical_id` in `template`, named `name`.
fn template_table(
    (file, text): (&str, &str),
    logical_id: &str,
    name: &str,
) -> Result<TableSpec, LocalAwsError> {
    // Every table's name is resolved on the way; only `logical_id`'s is used.
    let placeholders = [("ProductCode", "spec"), ("StageName", "spec")]
        .map(|(k, v)| (k.to_string(), v.to_string()));
    let template = StackTemplate::parse(Path::new(file), text, placeholders)?;
    let names = BTreeMap::from([(logical_id.to_string(), name.to_string())]);
    template
        .tables(&names)?
        .into_iter()
        .find(|t| t.logical_id == logical_id)
        .map(|t| t.spec)
        .ok_or_else(|| template.error(format!("no table resource {logical_id}")))
}

/// The subscribers table (`SubscribersTable` in template-events.yaml): PK
/// `licenseArn`, SK `customerAWSAccountId`; GSIs `agreement`
/// (agreementId/licenseArn, KEYS_ONLY) and the sparse `deprovisioning`
/// (deprovisioningIndex/deprovisioningExpiry, ALL).
pub fn subscribers_table_spec(name: &str) -> Result<TableSpec, LocalAwsError> {
    template_table(EVENTS_TEMPLATE, "SubscribersTable", name)
}

/// The raw usage table (`UsageTable` in template-main.yaml): PK `licenseArn`, SK
/// `customerAWSAccountId_dimension_timestamp`; sparse GSI `metering_pending`
/// (meteringPending/licenseArn, INCLUDE customerAWSAccountId, dimension).
pub fn usage_table_spec(name: &str) -> Result<TableSpec, LocalAwsError> {
    template_table(MAIN_TEMPLATE, "UsageTable", name)
}

/// The aggregated-usage table (`AggregatedUsageTable`): PK `licenseArn`, SK
/// `account_dimension_hour`; sparse GSI `metering_pending` (meteringPending/licenseArn,
/// ALL).
pub fn aggregated_table_spec(name: &str) -> Result<TableSpec, LocalAwsError> {
    template_table(MAIN_TEMPLATE, "AggregatedUsageTable", name)
}

/// The customer-profile table (`CustomerProfileTable`): PK `licenseArn`, SK
/// `customerAWSAccountId`, no GSI.
pub fn profile_table_spec(name: &str) -> Result<TableSpec, LocalAwsError> {
    template_table(MAIN_TEMPLATE, "CustomerProfileTable", name)
}

/// Creates the usage table named `name` (see [`usage_table_spec`]).
pub async fn create_usage_table(client: &Client, name: &str) -> Result<(), LocalAwsError> {
    create_table(client, &usage_table_spec(name)?).await
}

/// Creates the aggregated-usage table named `name` (see [`aggregated_table_spec`]).
pub async fn create_aggregated_table(client: &Client, name: &str) -> Result<(), LocalAwsError> {
    create_table(client, &aggregated_table_spec(name)?).await
}

/// Creates the subscribers table named `name` (see [`subscribers_table_spec`]).
pub async fn create_subscribers_table(client: &Client, name: &str) -> Result<(), LocalAwsError> {
    create_table(client, &subscribers_table_spec(name)?).await
}

/// Creates the customer-profile table named `name` (see [`profile_table_spec`]).
pub async fn create_profile_table(client: &Client, name: &str) -> Result<(), LocalAwsError> {
    create_table(client, &profile_table_spec(name)?).await
}

fn key_element(attr: &KeyAttr, key_type: KeyType) -> Result<KeySchemaElement, LocalAwsError> {
    KeySchemaElement::builder()
        .attribute_name(&attr.name)
        .key_type(key_type)
        .build()
        .map_err(|e| LocalAwsError::aws("build KeySchemaElement", &e))
}

fn key_schema(
    hash: &KeyAttr,
    range: &Option<KeyAttr>,
) -> Result<Vec<KeySchemaElement>, LocalAwsError> {
    let mut schema = vec![key_element(hash, KeyType::Hash)?];
    if let Some(range) = range {
        schema.push(key_element(range, KeyType::Range)?);
    }
    Ok(schema)
}

/// Creates a table (pay-per-request) from a spec. moto creates tables ACTIVE at once.
pub async fn create_table(client: &Client, spec: &TableSpec) -> Result<(), LocalAwsError> {
    // Every key attribute of the table and its indexes, once each.
    let mut attrs: Vec<&KeyAttr> = vec![&spec.hash];
    attrs.extend(spec.range.iter());
    for index in &spec.indexes {
        attrs.push(&index.hash);
        attrs.extend(index.range.iter());
    }
    let mut definitions = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for attr in attrs {
        if seen.insert(attr.name.clone()) {
            definitions.push(
                AttributeDefinition::builder()
                    .attribute_name(&attr.name)
                    .attribute_type(ScalarAttributeType::from(attr.kind.as_str()))
                    .build()
                    .map_err(|e| LocalAwsError::aws("build AttributeDefinition", &e))?,
            );
        }
    }
    let mut request = client
        .create_table()
        .table_name(&spec.name)
        .billing_mode(BillingMode::PayPerRequest)
        .set_attribute_definitions(Some(definitions))
        .set_key_schema(Some(key_schema(&spec.hash, &spec.range)?));
    for index in &spec.indexes {
        let projection = match &index.projection {
            IndexProjection::KeysOnly => Projection::builder()
                .projection_type(ProjectionType::KeysOnly)
                .build(),
            IndexProjection::All => Projection::builder()
                .projection_type(ProjectionType::All)
                .build(),
            IndexProjection::Include(attrs) => Projection::builder()
                .projection_type(ProjectionType::Include)
                .set_non_key_attributes(Some(attrs.clone()))
                .build(),
        };
        request = request.global_secondary_indexes(
            GlobalSecondaryIndex::builder()
                .index_name(&index.name)
                .set_key_schema(Some(key_schema(&index.hash, &index.range)?))
                .projection(projection)
                .build()
                .map_err(|e| LocalAwsError::aws("build GlobalSecondaryIndex", &e))?,
        );
    }
    request
        .send()
        .await
        .map_err(|e| LocalAwsError::aws(format!("CreateTable {}", spec.name), &e))?;
    Ok(())
}

/// Reads a live table's keys and GSIs back as a [`TableSpec`] (to check what was made).
pub async fn describe_table_spec(client: &Client, name: &str) -> Result<TableSpec, LocalAwsError> {
    let out = client
        .describe_table()
        .table_name(name)
        .send()
        .await
        .map_err(|e| LocalAwsError::aws(format!("DescribeTable {name}"), &e))?;
    let bad = |message: String| LocalAwsError::Aws {
        operation: format!("DescribeTable {name}"),
        message,
    };
    let table = out
        .table
        .ok_or_else(|| bad("no Table in response".into()))?;
    let kinds: std::collections::BTreeMap<String, String> = table
        .attribute_definitions()
        .iter()
        .map(|d| {
            (
                d.attribute_name().to_string(),
                d.attribute_type().as_str().to_string(),
            )
        })
        .collect();
    let keys = |schema: &[KeySchemaElement]| -> (Option<KeyAttr>, Option<KeyAttr>) {
        let find = |t: KeyType| {
            schema.iter().find(|k| *k.key_type() == t).map(|k| KeyAttr {
                name: k.attribute_name().to_string(),
                kind: kinds.get(k.attribute_name()).cloned().unwrap_or_default(),
            })
        };
        (find(KeyType::Hash), find(KeyType::Range))
    };
    let (hash, range) = keys(table.key_schema());
    let hash = hash.ok_or_else(|| bad("table has no HASH key".into()))?;
    let mut indexes = Vec::new();
    for gsi in table.global_secondary_indexes() {
        let (index_hash, index_range) = keys(gsi.key_schema());
        let projection = gsi.projection();
        let projection = match projection.and_then(|p| p.projection_type()) {
            Some(ProjectionType::KeysOnly) => IndexProjection::KeysOnly,
            Some(ProjectionType::Include) => IndexProjection::Include(
                projection
                    .map(|p| p.non_key_attributes().to_vec())
                    .unwrap_or_default(),
            ),
            _ => IndexProjection::All,
        };
        indexes.push(IndexSpec {
            name: gsi.index_name().unwrap_or_default().to_string(),
            hash: index_hash.ok_or_else(|| bad("index has no HASH key".into()))?,
            range: index_range,
            projection,
        });
    }
    Ok(TableSpec {
        name: name.to_string(),
        hash,
        range,
        indexes,
    }
    .normalized())
}

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

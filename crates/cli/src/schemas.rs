//! The JSON Schemas of `awsmp --json` (`docs/schemas/`), derived from the types each
//! command prints, so a field added to an output is in its schema the moment it
//! compiles. The test below holds the committed files to them; run it with
//! `AWSMP_WRITE_SCHEMAS=1` to write them anew after changing an output type.

use schemars::{JsonSchema, Schema, SchemaGenerator};

use crate::commands::{adjust, dlq, inspect, profile, reconcile, report, status, trail, usage};
use awsmp_core::lifecycle::reconcile::ReconcileReport;

/// Where the schemas are published.
const ID_BASE: &str = "https://github.com/awsmp-metering/awsmp-metering/docs/schemas";

/// One command's schema: its file name (`<name>.schema.json`), title, and schema.
pub struct CommandSchema {
    /// `status`, `usage-put`, ...
    pub name: &'static str,
    /// The schema's title.
    pub title: &'static str,
    /// The schema.
    pub schema: Schema,
}

fn schema<T: JsonSchema>(name: &'static str, title: &'static str) -> CommandSchema {
    let mut schema = SchemaGenerator::default().into_root_schema_for::<T>();
    schema.insert("$id".into(), format!("{ID_BASE}/{name}.schema.json").into());
    schema.insert("title".into(), title.into());
    CommandSchema {
        name,
        title,
        schema,
    }
}

/// Every command's `--json` schema.
pub fn all() -> Vec<CommandSchema> {
    vec![
        schema::<adjust::CorrectionsJson>(
            "adjust",
            "awsmp --json adjust and adjustments: each record's correction (a billing adjustment) and the refunds per currency",
        ),
        schema::<ReconcileReport>(
            "subscribers-reconcile",
            "awsmp --json subscribers reconcile: the subscribers table held to the Agreement API",
        ),
        schema::<dlq::Redrive>(
            "dlq-redrive",
            "awsmp --json dlq redrive: messages found in the DLQ and moved back",
        ),
        schema::<Vec<awsmp_operate::failures::Failure>>(
            "failures",
            "awsmp --json failures: every row and record that ended unbilled",
        ),
        schema::<inspect::GroupView>(
            "inspect-group",
            "awsmp --json inspect group: one group's raw rows and aggregated record",
        ),
        schema::<inspect::LicenseView>(
            "inspect-license",
            "awsmp --json inspect license: a subscriber and every group's chain",
        ),
        schema::<profile::ProfileErasure>(
            "profile-erase",
            "awsmp --json profile erase: what was erased in each Region, with each erasure's audit record (never the data)",
        ),
        schema::<profile::ProfileShown>(
            "profile-show",
            "awsmp --json profile show: one buyer's customer-profile row in each Region",
        ),
        schema::<reconcile::ReconcileJson<'static>>(
            "reconcile",
            "awsmp --json reconcile: what we billed against AWS's records",
        ),
        schema::<Vec<awsmp_operate::replay::ReplayLine>>(
            "replay",
            "awsmp --json replay: what was (or would be) sent again, and what was refused",
        ),
        schema::<report::Written<'static>>(
            "report",
            "awsmp --json report: the series the HTML report draws",
        ),
        schema::<status::RegionStatus<'static>>(
            "status",
            "awsmp --json status: one Region's billing at a glance",
        ),
        schema::<trail::TrailJson<'static>>(
            "trail",
            "awsmp --json trail: CloudTrail's BatchMeterUsage records joined to ours",
        ),
        schema::<usage::import::ImportReport>(
            "usage-import",
            "awsmp --json usage import: what an import wrote and every line it did not",
        ),
        schema::<usage::put::PutResult>(
            "usage-put",
            "awsmp --json usage put: the row written, or that its event id was written before",
        ),
    ]
}

/// The file's text: pretty JSON with every object's keys sorted, and a final newline.
/// Sorted here, not by the map: whether serde_json keeps insertion order depends on the
/// features the build unifies (`preserve_order`), and the file must not.
pub fn text(schema: &CommandSchema) -> String {
    let value = sorted(schema.schema.as_value().clone());
    let mut text = serde_json::to_string_pretty(&value).unwrap_or_default();
    text.push('\n');
    text
}

/// `value` with the keys of every object in sorted order.
fn sorted(value: serde_json::Value) -> serde_json::Value {
    match value {
        serde_json::Value::Object(map) => {
            let mut entries: Vec<(String, serde_json::Value)> = map.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            serde_json::Value::Object(entries.into_iter().map(|(k, v)| (k, sorted(v))).collect())
        }
        serde_json::Value::Array(items) => {
            serde_json::Value::Array(items.into_iter().map(sorted).collect())
        }
        other => other,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn the_committed_schemas_are_the_ones_the_output_types_derive() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/schemas");
        let write = std::env::var_os("AWSMP_WRITE_SCHEMAS").is_some();
        let mut stale = Vec::new();
        let schemas = all();
        for schema in &schemas {
            let path = dir.join(format!("{}.schema.json", schema.name));
            let derived = text(schema);
            if write {
                std::fs::write(&path, &derived).unwrap();
            } else if std::fs::read_to_string(&path).unwrap_or_default() != derived {
                stale.push(path.display().to_string());
            }
        }
        assert!(
            stale.is_empty(),
            "these schemas differ from what the output types derive; run \
             `AWSMP_WRITE_SCHEMAS=1 cargo test -p awsmp-cli --lib schemas` and commit them: {stale:?}"
        );
        // Every file in docs/schemas is one of them.
        let committed = std::fs::read_dir(&dir).unwrap().count();
        assert_eq!(
            committed,
            schemas.len(),
            "a schema in docs/schemas no command prints"
        );
    }
}

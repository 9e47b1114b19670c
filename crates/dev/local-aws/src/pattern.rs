//! EventBridge event patterns, as Lambda's event filtering applies a mapping's
//! `FilterCriteria` to each record before delivery: the subset the templates use
//! (literal values, `anything-but`, `exists`, `prefix`), so the local stack delivers
//! exactly what AWS would and a wrong filter shows up in tests.

use serde_json::Value;

/// Whether `event` matches `pattern` (a JSON object). Every field of the pattern must
/// match; a leaf is a list of alternatives; an array in the event matches when any of
/// its elements does.
pub fn matches(pattern: &Value, event: &Value) -> bool {
    let Some(fields) = pattern.as_object() else {
        return false;
    };
    fields
        .iter()
        .all(|(name, wanted)| field_matches(wanted, event.get(name)))
}

/// Whether any of `filters` (JSON pattern texts) matches `event`; true when there are
/// none. A pattern that is not JSON matches nothing.
pub fn any_matches(filters: &[String], event: &Value) -> bool {
    filters.is_empty()
        || filters
            .iter()
            .any(|f| serde_json::from_str::<Value>(f).is_ok_and(|pattern| matches(&pattern, event)))
}

fn field_matches(wanted: &Value, actual: Option<&Value>) -> bool {
    match wanted {
        Value::Object(_) => actual.is_some_and(|a| a.is_object() && matches(wanted, a)),
        Value::Array(alternatives) => alternatives
            .iter()
            .any(|alt| alternative_matches(alt, actual)),
        _ => false,
    }
}

fn alternative_matches(alternative: &Value, actual: Option<&Value>) -> bool {
    if let Some(rule) = alternative.as_object() {
        if let Some(exists) = rule.get("exists").and_then(Value::as_bool) {
            return actual.is_some() == exists;
        }
        let Some(actual) = actual else {
            return false;
        };
        let values: Vec<&Value> = match actual {
            Value::Array(items) => items.iter().collect(),
            other => vec![other],
        };
        if let Some(excluded) = rule.get("anything-but") {
            let excluded: Vec<&Value> = match excluded {
                Value::Array(items) => items.iter().collect(),
                other => vec![other],
            };
            return values.iter().any(|v| !excluded.contains(v));
        }
        if let Some(prefix) = rule.get("prefix").and_then(Value::as_str) {
            return values
                .iter()
                .any(|v| v.as_str().is_some_and(|s| s.starts_with(prefix)));
        }
        return false;
    }
    match actual {
        Some(Value::Array(items)) => items.contains(alternative),
        Some(value) => value == alternative,
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn literal_nested_and_operator_patterns() {
        let record = json!({"eventName": "MODIFY", "dynamodb": {"NewImage": {"meteringStatus": {"S": "Success"}}}});
        let pattern = json!({"eventName": ["INSERT", "MODIFY"], "dynamodb": {"NewImage": {"meteringStatus": {"S": ["Success", "Error"]}}}});
        assert!(matches(&pattern, &record));
        let pending = json!({"eventName": "MODIFY", "dynamodb": {"NewImage": {"meteringStatus": {"S": "Pending"}}}});
        assert!(!matches(&pattern, &pending));
        let removed = json!({"eventName": "REMOVE", "dynamodb": {"OldImage": {"meteringStatus": {"S": "Success"}}}});
        assert!(!matches(&pattern, &removed));
        assert!(matches(
            &json!({"a": [{"exists": false}]}),
            &json!({"b": 1})
        ));
        assert!(!matches(
            &json!({"a": [{"exists": true}]}),
            &json!({"b": 1})
        ));
        assert!(matches(
            &json!({"a": [{"anything-but": ["x"]}]}),
            &json!({"a": "y"})
        ));
        assert!(!matches(
            &json!({"a": [{"anything-but": ["x"]}]}),
            &json!({"a": "x"})
        ));
        assert!(matches(
            &json!({"a": [{"prefix": "arn:"}]}),
            &json!({"a": "arn:aws"})
        ));
        assert!(matches(&json!({"a": ["x"]}), &json!({"a": ["y", "x"]})));
        assert!(any_matches(&[], &record));
        assert!(!any_matches(&["not json".into()], &record));
    }
}

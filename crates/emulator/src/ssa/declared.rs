//! An applied configuration may name only fields its schema declares: kube-apiserver turns
//! the configuration into a typed object first, and a field the CRD's structural schema does
//! not declare fails that (HTTP 500, "field not declared in schema"), where a merge patch
//! would have had the field pruned. Built-in kinds have no schema here: the `patch` module
//! checks them against their Go types' schemas (the `openapi` module).

use serde_json::Value;

/// The first field of `config` the schema does not declare, as the server names it
/// (`.status.newField`), if any. `apiVersion`, `kind` and `metadata` are the object's own.
pub(crate) fn undeclared(config: &Value, schema: &Value) -> Option<String> {
    let Value::Object(fields) = config else {
        return None;
    };
    fields
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "apiVersion" | "kind" | "metadata"))
        .find_map(|(k, v)| field(v, schema, k, &format!(".{k}")))
}

fn field(value: &Value, parent: &Value, name: &str, path: &str) -> Option<String> {
    if preserves_unknown(parent) {
        return None;
    }
    let declared = parent
        .get("properties")
        .and_then(|p| p.get(name))
        .or_else(|| additional(parent));
    match declared {
        None => Some(path.to_string()),
        Some(schema) => walk(value, schema, path),
    }
}

fn walk(value: &Value, schema: &Value, path: &str) -> Option<String> {
    match value {
        Value::Object(map) if !preserves_unknown(schema) => map
            .iter()
            .find_map(|(k, v)| field(v, schema, k, &format!("{path}.{k}"))),
        Value::Array(items) => {
            let item_schema = schema.get("items")?;
            items
                .iter()
                .enumerate()
                .find_map(|(i, v)| walk(v, item_schema, &format!("{path}[{i}]")))
        }
        _ => None,
    }
}

fn preserves_unknown(schema: &Value) -> bool {
    schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true))
}

/// The schema of a map's values (`additionalProperties`), when it has one.
fn additional(schema: &Value) -> Option<&Value> {
    schema.get("additionalProperties").filter(|a| a.is_object())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "status": {"type": "object", "properties": {
                "phase": {"type": "string"},
                "groups": {"type": "array", "items": {"type": "object",
                    "properties": {"name": {"type": "string"}}}},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
            }}
        }})
    }

    #[test]
    fn a_field_the_schema_does_not_declare_is_named_by_its_path() {
        let ok = json!({"apiVersion": "x/v1", "kind": "X", "metadata": {"name": "a"},
                        "status": {"phase": "Running", "groups": [{"name": "w"}],
                                   "labels": {"any": "x"}, "free": {"any": {"thing": 1}}}});
        assert_eq!(undeclared(&ok, &schema()), None);
        let new_field = json!({"status": {"phase": "Running", "newField": 1}});
        assert_eq!(
            undeclared(&new_field, &schema()).as_deref(),
            Some(".status.newField")
        );
        let in_item = json!({"status": {"groups": [{"name": "w"}, {"epoch": 2}]}});
        assert_eq!(
            undeclared(&in_item, &schema()).as_deref(),
            Some(".status.groups[1].epoch")
        );
    }
}

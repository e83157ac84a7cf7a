//! `metadata.managedFields` entries: decoding, identity, encoding in the server's order.

use serde_json::{Value, json};

use super::fieldset::FieldSet;

/// One manager's fields.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub manager: String,
    /// `Apply` or `Update`.
    pub operation: String,
    pub api_version: String,
    pub time: Option<String>,
    pub subresource: Option<String>,
    pub fields: FieldSet,
}

impl Entry {
    /// Whether `self` is the entry of this manager, operation and subresource (appliers are
    /// one manager whatever version they apply; updaters one per version).
    pub fn is(&self, manager: &str, operation: &str, api_version: &str, sub: Option<&str>) -> bool {
        self.manager == manager
            && self.operation == operation
            && self.subresource.as_deref() == sub
            && (operation == "Apply" || self.api_version == api_version)
    }

    /// How a conflict names this manager (`"m"`, `"m" with subresource "status"`,
    /// `"m" using v1` for updaters).
    pub fn describe(&self) -> String {
        let mut s = format!("{:?}", self.manager);
        if let Some(sub) = &self.subresource {
            s.push_str(&format!(" with subresource {sub:?}"));
        }
        if self.operation == "Update" {
            s.push_str(&format!(" using {}", self.api_version));
        }
        s
    }
}

/// The entries stored in an object (malformed ones are dropped).
pub(crate) fn decode(obj: &Value) -> Vec<Entry> {
    let Some(list) = obj
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
    else {
        return Vec::new();
    };
    list.iter()
        .filter_map(|e| {
            let s = |k: &str| e.get(k).and_then(Value::as_str).map(str::to_string);
            Some(Entry {
                manager: s("manager").unwrap_or_default(),
                operation: s("operation")?,
                api_version: s("apiVersion").unwrap_or_default(),
                time: s("time"),
                subresource: s("subresource").filter(|x| !x.is_empty()),
                fields: FieldSet::from_fields_v1(e.get("fieldsV1")?),
            })
        })
        .collect()
}

/// Stores `entries` in `obj`, without empty ones, sorted as the server sorts them
/// (operation, time, manager, apiVersion, subresource).
pub(crate) fn encode(obj: &mut Value, mut entries: Vec<Entry>) {
    entries.retain(|e| !e.fields.is_empty());
    entries.sort_by(|a, b| {
        (
            &a.operation,
            &a.time,
            &a.manager,
            &a.api_version,
            &a.subresource,
        )
            .cmp(&(
                &b.operation,
                &b.time,
                &b.manager,
                &b.api_version,
                &b.subresource,
            ))
    });
    let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    if entries.is_empty() {
        meta.remove("managedFields");
        return;
    }
    let list: Vec<Value> = entries
        .iter()
        .map(|e| {
            let mut v = json!({
                "manager": e.manager,
                "operation": e.operation,
                "apiVersion": e.api_version,
                "fieldsType": "FieldsV1",
                "fieldsV1": e.fields.to_fields_v1(),
            });
            if let Some(t) = &e.time {
                v["time"] = json!(t);
            }
            if let Some(s) = &e.subresource {
                v["subresource"] = json!(s);
            }
            v
        })
        .collect();
    meta.insert("managedFields".into(), Value::Array(list));
}

//! Helpers for reading and writing object metadata, and timestamps in the API's format.

use serde_json::{Map, Value, json};

pub(crate) fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

pub(super) fn in_seconds_rfc3339(secs: i64) -> String {
    let ts = jiff::Timestamp::now()
        .checked_add(jiff::SignedDuration::from_secs(secs))
        .unwrap_or_else(|_| jiff::Timestamp::now());
    format_rfc3339(ts)
}

/// A timestamp in the API's format (RFC 3339, whole seconds, UTC).
pub(super) fn format_rfc3339(ts: jiff::Timestamp) -> String {
    ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

pub(super) fn meta(obj: &Value) -> &Value {
    obj.get("metadata").unwrap_or(&Value::Null)
}

pub(super) fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.get("metadata").is_some_and(Value::is_object) {
        obj["metadata"] = json!({});
    }
    obj["metadata"]
        .as_object_mut()
        .expect("metadata is an object")
}

pub(super) fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    meta(obj).get(field).and_then(Value::as_str)
}

pub(super) fn owner_uids(obj: &Value) -> Vec<String> {
    meta(obj)
        .get("ownerReferences")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|r| r.get("uid").and_then(Value::as_str).map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

pub(super) fn has_finalizers(obj: &Value) -> bool {
    meta(obj)
        .get("finalizers")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty())
}

pub(super) fn spec_differs(a: &Value, b: &Value) -> bool {
    let strip = |v: &Value| -> Map<String, Value> {
        v.as_object()
            .map(|m| {
                m.iter()
                    .filter(|(k, _)| {
                        !matches!(k.as_str(), "metadata" | "status" | "apiVersion" | "kind")
                    })
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            })
            .unwrap_or_default()
    };
    strip(a) != strip(b)
}

pub(super) fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
}

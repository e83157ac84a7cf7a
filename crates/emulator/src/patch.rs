//! Patch application.
//!
//! * `application/merge-patch+json`: RFC 7386 JSON merge patch.
//! * `application/json-patch+json`: RFC 6902 JSON patch.
//! * `application/strategic-merge-patch+json`: **approximated** as a JSON merge patch
//!   (lists are replaced wholesale instead of merged by their patch merge key; `$patch`,
//!   `$setElementOrder`, `$retainKeys` and other directives are stripped and ignored).
//! * `application/apply-patch+yaml` (server-side apply): see the `ssa` module; a missing
//!   object is created.
//!
//! Every patch but apply records an `Update` entry in `managedFields` for its field
//! manager (`fieldManager`, else the User-Agent up to its first `/`).

use std::collections::HashMap;
use std::sync::Arc;

use axum::http::{HeaderMap, header};
use serde_json::{Value, json};

use super::errors::ApiError;
use super::field_validation::Directive;
use super::openapi::unknown_fields;
use super::ssa::{Ownership, apply, check_config, not_declared};
use super::store::{Obj, ResourceInfo, SharedStore, WriteMode};

/// The kind of patch, from the request Content-Type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchKind {
    /// JSON merge patch.
    Merge,
    /// JSON patch.
    Json,
    /// Strategic merge patch (approximated).
    Strategic,
    /// Server-side apply.
    Apply,
}

impl PatchKind {
    /// Map a Content-Type to a patch kind.
    pub fn from_content_type(ct: &str) -> Option<Self> {
        let ct = ct.split(';').next().unwrap_or("").trim();
        match ct {
            "application/merge-patch+json" => Some(Self::Merge),
            "application/json-patch+json" => Some(Self::Json),
            "application/strategic-merge-patch+json" => Some(Self::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+json" => Some(Self::Apply),
            _ => None,
        }
    }
}

fn strip_directives(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|k, _| !k.starts_with('$'));
            m.values_mut().for_each(strip_directives);
        }
        Value::Array(a) => a.iter_mut().for_each(strip_directives),
        _ => {}
    }
}

/// Parse the body of an apply patch (YAML or JSON).
pub fn parse_apply_body(body: &[u8]) -> Result<Value, ApiError> {
    if let Ok(v) = serde_json::from_slice::<Value>(body) {
        return Ok(v);
    }
    serde_yaml::from_slice::<Value>(body)
        .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))
}

/// Apply a patch body to `current`, returning the patched document.
pub fn apply_patch(kind: PatchKind, current: &Value, body: &[u8]) -> Result<Value, ApiError> {
    let mut doc = current.clone();
    match kind {
        PatchKind::Merge | PatchKind::Strategic => {
            let mut p: Value = serde_json::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
            if kind == PatchKind::Strategic {
                strip_directives(&mut p);
            }
            json_patch::merge(&mut doc, &p);
        }
        PatchKind::Json => {
            let p: json_patch::Patch = serde_json::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
            json_patch::patch(&mut doc, &p).map_err(|e| {
                ApiError::new(
                    422,
                    "Invalid",
                    format!("the server rejected our request due to an error in our request: {e}"),
                )
            })?;
        }
        PatchKind::Apply => {
            return Err(ApiError::bad_request(
                "server-side apply is not a patch of the current object",
            ));
        }
    }
    Ok(doc)
}

/// The field manager of a write: the `fieldManager` parameter, else what the real server
/// derives from the User-Agent (up to its first `/`, at most 128 characters).
pub(crate) fn field_manager(q: &HashMap<String, String>, headers: &HeaderMap) -> String {
    if let Some(m) = q.get("fieldManager").filter(|m| !m.is_empty()) {
        return m.clone();
    }
    let ua = headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    ua.split('/')
        .next()
        .unwrap_or("")
        .chars()
        .take(128)
        .collect()
}

fn patch_options_invalid(field: &str, message: &str) -> ApiError {
    ApiError::invalid(
        "PatchOptions",
        "meta.k8s.io",
        "",
        vec![(field.into(), format!("{field}: {message}"))],
    )
}

/// PATCH of one object through the main or status endpoint: (HTTP code, object, the
/// `fieldValidation` warnings to send).
#[allow(clippy::too_many_arguments)]
pub(crate) fn patch_object(
    store: &SharedStore,
    info: &Arc<ResourceInfo>,
    ns: Option<&str>,
    name: &str,
    mode: WriteMode,
    q: &HashMap<String, String>,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(u16, Obj, Vec<String>), ApiError> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let kind = PatchKind::from_content_type(ct).ok_or_else(|| {
        ApiError::new(415, "UnsupportedMediaType", format!("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml (got {ct})"))
    })?;
    let dry_run = q.contains_key("dryRun");
    if kind != PatchKind::Apply && q.contains_key("force") {
        return Err(patch_options_invalid(
            "force",
            "Forbidden: may not be specified for non-apply patch",
        ));
    }
    let validation = Directive::from_query(q)?;
    if kind == PatchKind::Apply {
        let (code, o) = apply_object(store, info, ns, name, mode, q, body)?;
        return Ok((code, o, vec![]));
    }
    let manager = field_manager(q, headers);
    let mut store = store.lock();
    let current = store.get(info, ns, name)?;
    let mut patched = apply_patch(kind, &current, body)?;
    let warnings = validation.check_patched(info, &mut patched)?;
    let owner = Ownership::Update(&manager);
    let o = store.update(info, ns, name, patched, mode, dry_run, owner)?;
    Ok((200, o, warnings))
}

/// Server-side apply; a missing object is created (through the main endpoint only).
fn apply_object(
    store: &SharedStore,
    info: &Arc<ResourceInfo>,
    ns: Option<&str>,
    name: &str,
    mode: WriteMode,
    q: &HashMap<String, String>,
    body: &[u8],
) -> Result<(u16, Obj), ApiError> {
    let Some(manager) = q.get("fieldManager").filter(|f| !f.is_empty()) else {
        return Err(patch_options_invalid(
            "fieldManager",
            "Required value: is required for apply patch",
        ));
    };
    let force = q.get("force").is_some_and(|f| f == "true" || f == "1");
    let dry_run = q.contains_key("dryRun");
    let config = parse_apply_body(body)?;
    let target = info.target((mode == WriteMode::Status).then_some("status"));
    check_config(&target, &config, ns.unwrap_or(""), name)?;
    // A built-in kind's configuration is typed by its Go type's schema, which has no place
    // for an unknown field either (the path is named by index where the server names a
    // list item by its key).
    if info.schema.is_none()
        && let Some(field) = unknown_fields(info, &config).first()
    {
        return Err(not_declared(
            &config,
            ns.unwrap_or(""),
            name,
            &format!(".{field}"),
        ));
    }
    let mut store = store.lock();
    let live = match store.get(info, ns, name) {
        Ok(live) => live,
        Err(_) if mode == WriteMode::Main => {
            let mut v = apply(&target, None, config, manager, force)?;
            v["metadata"]["name"] = json!(name);
            let o = store.create(info, ns, v, dry_run, Ownership::Applied)?;
            return Ok((201, o));
        }
        Err(e) => return Err(e),
    };
    // A resourceVersion in the configuration is a precondition, as for any update: the
    // real server's merge keeps it in the object it then updates with optimistic locking.
    if let Some(version) = config
        .pointer("/metadata/resourceVersion")
        .and_then(|v| v.as_str())
        .filter(|v| !v.is_empty())
        && live
            .pointer("/metadata/resourceVersion")
            .and_then(|v| v.as_str())
            != Some(version)
    {
        return Err(ApiError::stale(&info.plural, &info.group, name));
    }
    let v = apply(&target, Some(&live), config, manager, force)?;
    let o = store.update(info, ns, name, v, mode, dry_run, Ownership::Applied)?;
    Ok((200, o))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_and_json_patch() {
        let cur = json!({"a": 1, "b": {"c": 2}});
        let m = apply_patch(PatchKind::Merge, &cur, br#"{"b":{"c":null,"d":3}}"#).unwrap();
        assert_eq!(m, json!({"a": 1, "b": {"d": 3}}));
        let j = apply_patch(
            PatchKind::Json,
            &cur,
            br#"[{"op":"replace","path":"/a","value":5}]"#,
        )
        .unwrap();
        assert_eq!(j["a"], 5);
        let s = apply_patch(
            PatchKind::Strategic,
            &cur,
            br#"{"$setElementOrder/x":[],"a":2}"#,
        )
        .unwrap();
        assert_eq!(s, json!({"a": 2, "b": {"c": 2}}));
        assert_eq!(parse_apply_body(b"a: 7\n").unwrap(), json!({"a": 7}));
        assert!(apply_patch(PatchKind::Json, &cur, br#"[{"op":"remove","path":"/zz"}]"#).is_err());
    }
}

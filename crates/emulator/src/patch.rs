//! Patch application.
//!
//! * `application/merge-patch+json`: RFC 7386 JSON merge patch.
//! * `application/json-patch+json`: RFC 6902 JSON patch.
//! * `application/strategic-merge-patch+json`: **approximated** as a JSON merge patch
//!   (lists are replaced wholesale instead of merged by their patch merge key; `$patch`,
//!   `$setElementOrder`, `$retainKeys` and other directives are stripped and ignored).
//! * `application/apply-patch+yaml` (server-side apply): **approximated** as
//!   create-or-merge-patch. There is no managed-fields tracking, no conflict detection
//!   between field managers (`force` is ignored), and fields a manager stops applying are
//!   not removed.

use serde_json::Value;

use super::errors::ApiError;

/// The kind of patch, from the request Content-Type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchKind {
    /// JSON merge patch.
    Merge,
    /// JSON patch.
    Json,
    /// Strategic merge patch (approximated).
    Strategic,
    /// Server-side apply (approximated).
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
            let p = parse_apply_body(body)?;
            json_patch::merge(&mut doc, &p);
        }
    }
    Ok(doc)
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
        let a = apply_patch(PatchKind::Apply, &cur, b"a: 7\n").unwrap();
        assert_eq!(a["a"], 7);
        assert!(apply_patch(PatchKind::Json, &cur, br#"[{"op":"remove","path":"/zz"}]"#).is_err());
    }
}

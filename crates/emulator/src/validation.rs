//! Custom resource validation: pruning of unknown fields (and of nulls in non-nullable
//! fields), defaulting from the CRD's
//! openAPIV3Schema `default`s, structural checks (type, nullable, required, enum, pattern,
//! minimum/maximum, minLength/maxLength, minItems/maxItems) and CEL
//! `x-kubernetes-validations` rules evaluated with kube's client-side evaluator
//! (`kube::core::cel::Validator`). Error messages follow the real API server's format.
//!
//! Not implemented: `format` checks, `minProperties`/`maxProperties`, `uniqueItems`,
//! `x-kubernetes-list-type` uniqueness, `oneOf`/`anyOf`/`allOf`/`not`, validation
//! ratcheting, and metadata validation beyond the object name.

use serde_json::Value;

use super::errors::ApiError;
use super::store::ResourceInfo;

type Errs = Vec<(String, String)>;

fn join(path: &str, k: &str) -> String {
    if path.is_empty() {
        k.to_string()
    } else {
        format!("{path}.{k}")
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn flag(s: &Value, k: &str) -> bool {
    s.get(k).and_then(Value::as_bool).unwrap_or(false)
}

/// Remove fields not described by the schema (like the API server's pruning).
fn prune(s: &Value, v: &mut Value, keep_meta: bool) {
    let preserve = flag(s, "x-kubernetes-preserve-unknown-fields");
    let keep_meta = keep_meta || flag(s, "x-kubernetes-embedded-resource");
    match v {
        Value::Object(m) => {
            let props = s.get("properties").and_then(Value::as_object);
            let addl = s.get("additionalProperties");
            let addl_schema = addl.filter(|a| a.is_object());
            if !preserve && addl.is_none_or(|a| a == &Value::Bool(false)) {
                m.retain(|k, _| {
                    props.is_some_and(|p| p.contains_key(k))
                        || (keep_meta && matches!(k.as_str(), "apiVersion" | "kind" | "metadata"))
                });
            }
            // Like the real server: nulls for non-nullable fields are dropped before defaulting.
            m.retain(|k, v| {
                let sub = props.and_then(|p| p.get(k)).or(addl_schema);
                !(v.is_null() && sub.is_some_and(|s| !flag(s, "nullable")))
            });
            for (k, child) in m.iter_mut() {
                if keep_meta && k == "metadata" {
                    continue;
                }
                if let Some(ps) = props.and_then(|p| p.get(k)) {
                    prune(ps, child, false);
                } else if let Some(a) = addl_schema {
                    prune(a, child, false);
                }
            }
        }
        Value::Array(a) => {
            if let Some(items) = s.get("items") {
                a.iter_mut().for_each(|x| prune(items, x, false));
            }
        }
        _ => {}
    }
}

fn check(s: &Value, v: &Value, path: &str, errs: &mut Errs, root: bool) {
    let p = if path.is_empty() { "<root>" } else { path };
    if v.is_null() {
        if !flag(s, "nullable") && s.get("type").is_some() {
            errs.push((
                p.into(),
                format!(
                    "{p}: Invalid value: \"null\": {p} in body must be of type {}: \"null\"",
                    s["type"].as_str().unwrap_or("object")
                ),
            ));
        }
        return;
    }
    let int_or_string = flag(s, "x-kubernetes-int-or-string");
    if let Some(t) = s.get("type").and_then(Value::as_str)
        && !int_or_string
    {
        let actual = type_name(v);
        let ok = actual == t || (t == "number" && actual == "integer");
        if !ok {
            errs.push((
                p.into(),
                format!("{p}: Invalid value: \"{actual}\": {p} in body must be of type {t}: \"{actual}\""),
            ));
            return;
        }
    }
    if let Some(e) = s.get("enum").and_then(Value::as_array)
        && !e.contains(v)
    {
        let supported: Vec<String> = e.iter().map(Value::to_string).collect();
        errs.push((
            p.into(),
            format!(
                "{p}: Unsupported value: {v}: supported values: {}",
                supported.join(", ")
            ),
        ));
    }
    match v {
        Value::String(st) => {
            let len = st.chars().count() as u64;
            if let Some(max) = s.get("maxLength").and_then(Value::as_u64)
                && len > max
            {
                errs.push((
                    p.into(),
                    format!("{p}: Too long: may not be longer than {max}"),
                ));
            }
            if let Some(min) = s.get("minLength").and_then(Value::as_u64)
                && len < min
            {
                errs.push((
                    p.into(),
                    format!(
                        "{p}: Invalid value: {v}: {p} in body should be at least {min} chars long"
                    ),
                ));
            }
            if let Some(pat) = s.get("pattern").and_then(Value::as_str)
                && let Ok(re) = regex::Regex::new(pat)
                && !re.is_match(st)
            {
                errs.push((
                    p.into(),
                    format!("{p}: Invalid value: {v}: {p} in body should match '{pat}'"),
                ));
            }
        }
        Value::Number(n) => {
            let x = n.as_f64().unwrap_or(0.0);
            if let Some(min) = s.get("minimum").and_then(Value::as_f64) {
                let excl = flag(s, "exclusiveMinimum");
                if (excl && x <= min) || (!excl && x < min) {
                    let rel = if excl {
                        "greater than"
                    } else {
                        "greater than or equal to"
                    };
                    errs.push((
                        p.into(),
                        format!(
                            "{p}: Invalid value: {v}: {p} in body should be {rel} {}",
                            s["minimum"]
                        ),
                    ));
                }
            }
            if let Some(max) = s.get("maximum").and_then(Value::as_f64) {
                let excl = flag(s, "exclusiveMaximum");
                if (excl && x >= max) || (!excl && x > max) {
                    let rel = if excl {
                        "less than"
                    } else {
                        "less than or equal to"
                    };
                    errs.push((
                        p.into(),
                        format!(
                            "{p}: Invalid value: {v}: {p} in body should be {rel} {}",
                            s["maximum"]
                        ),
                    ));
                }
            }
        }
        Value::Array(a) => {
            let n = a.len() as u64;
            if let Some(max) = s.get("maxItems").and_then(Value::as_u64)
                && n > max
            {
                errs.push((
                    p.into(),
                    format!("{p}: Too many: {n}: must have at most {max} items"),
                ));
            }
            if let Some(min) = s.get("minItems").and_then(Value::as_u64)
                && n < min
            {
                errs.push((
                    p.into(),
                    format!(
                        "{p}: Invalid value: {n}: {p} in body should have at least {min} items"
                    ),
                ));
            }
            if let Some(items) = s.get("items") {
                for (i, x) in a.iter().enumerate() {
                    check(items, x, &format!("{path}[{i}]"), errs, false);
                }
            }
        }
        Value::Object(m) => {
            if let Some(req) = s.get("required").and_then(Value::as_array) {
                for r in req.iter().filter_map(Value::as_str) {
                    if !m.contains_key(r) {
                        let f = join(path, r);
                        errs.push((f.clone(), format!("{f}: Required value")));
                    }
                }
            }
            let props = s.get("properties").and_then(Value::as_object);
            let addl = s.get("additionalProperties").filter(|a| a.is_object());
            for (k, child) in m {
                if root && k == "metadata" {
                    // A CRD may constrain exactly metadata.name and generateName; the rest
                    // of metadata is the API server's own.
                    check_metadata(props.and_then(|p| p.get("metadata")), child, errs);
                    continue;
                }
                if let Some(ps) = props.and_then(|p| p.get(k)) {
                    check(ps, child, &join(path, k), errs, false);
                } else if let Some(a) = addl {
                    check(a, child, &join(path, k), errs, false);
                }
            }
        }
        _ => {}
    }
}

fn value_at<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    let mut cur = obj;
    for seg in path.split('.').filter(|s| !s.is_empty()) {
        let (name, idx) = match seg.find('[') {
            Some(i) => (
                &seg[..i],
                seg[i + 1..].trim_end_matches(']').parse::<usize>().ok(),
            ),
            None => (seg, None),
        };
        cur = cur.get(name)?;
        if let Some(i) = idx {
            cur = cur.get(i)?;
        }
    }
    Some(cur)
}

/// The schema's constraints on `metadata.name` and `metadata.generateName`, if it has any.
fn check_metadata(schema: Option<&Value>, metadata: &Value, errs: &mut Vec<(String, String)>) {
    let Some(props) = schema.and_then(|s| s.get("properties")) else {
        return;
    };
    for key in ["name", "generateName"] {
        if let (Some(s), Some(v)) = (props.get(key), metadata.get(key)) {
            check(s, v, &format!("metadata.{key}"), errs, false);
        }
    }
}

/// Prune, default and validate a custom resource in place. `old` is the previous object on
/// update (for CEL transition rules).
pub(crate) fn validate_custom(
    info: &ResourceInfo,
    obj: &mut Value,
    old: Option<&Value>,
) -> Result<(), ApiError> {
    let Some(schema) = info.schema.as_deref() else {
        return Ok(());
    };
    prune(schema, obj, true);
    *obj = kube::core::cel::apply_defaults(schema, obj);
    let mut errs = Vec::new();
    check(schema, obj, "", &mut errs, true);
    if errs.is_empty()
        && let Err(e) = kube::core::cel::Validator::new().validate(schema, obj, old)
    {
        for ve in e.into_vec() {
            // A rule's fieldPath is a JSON path (`.spec.x`); the server prints `spec.x`.
            let field = ve.field_path.trim_start_matches('.').to_string();
            let ty = value_at(obj, &field).map(type_name).unwrap_or("object");
            // kube-apiserver prints a rule's missing field path as `<nil>`.
            let msg = if field.is_empty() {
                format!("<nil>: Invalid value: \"{ty}\": {}", ve.message)
            } else {
                format!("{field}: Invalid value: \"{ty}\": {}", ve.message)
            };
            errs.push((field, msg));
        }
    }
    if errs.is_empty() {
        return Ok(());
    }
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    Err(ApiError::invalid(&info.kind, &info.group, name, errs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Arc;

    fn info(schema: Value) -> ResourceInfo {
        let mut i = ResourceInfo::builtin("example.com", "v1", "things", "Thing", true, true);
        i.schema = Some(Arc::new(schema));
        i
    }

    #[test]
    fn structural_defaults_pruning_and_cel() {
        let i = info(json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "required": ["size"],
                    "x-kubernetes-validations": [{"rule": "self.size <= 10", "message": "size too big"}],
                    "properties": {
                        "size": {"type": "integer", "minimum": 1},
                        "mode": {"type": "string", "enum": ["a", "b"], "default": "a"},
                        "name": {"type": "string", "maxLength": 3, "pattern": "^[a-z]+$"},
                        "tags": {"type": "array", "maxItems": 1, "items": {"type": "string"}}
                    }
                }
            }
        }));
        let mut ok = json!({"apiVersion": "example.com/v1", "kind": "Thing", "metadata": {"name": "x"}, "spec": {"size": 2, "junk": 1, "mode": null}});
        validate_custom(&i, &mut ok, None).unwrap();
        assert_eq!(ok["spec"]["mode"], "a");
        assert!(ok["spec"].get("junk").is_none());
        assert_eq!(ok["metadata"]["name"], "x");

        let mut bad = json!({"metadata": {"name": "x"}, "spec": {"size": 20}});
        let e = validate_custom(&i, &mut bad, None).unwrap_err();
        assert_eq!(e.code, 422);
        assert!(e.message.contains("size too big"), "{}", e.message);
        assert!(
            e.message
                .starts_with("Thing.example.com \"x\" is invalid: spec"),
            "{}",
            e.message
        );

        let mut bad = json!({"metadata": {"name": "x"}, "spec": {"size": "s", "mode": "c", "name": "ABCD", "tags": ["a", "b"]}});
        let e = validate_custom(&i, &mut bad, None).unwrap_err();
        for frag in [
            "spec.size in body must be of type integer",
            "spec.mode: Unsupported value",
            "spec.name: Too long",
            "should match",
            "spec.tags: Too many",
        ] {
            assert!(e.message.contains(frag), "{frag} not in {}", e.message);
        }
        let mut bad = json!({"metadata": {"name": "x"}, "spec": {"size": 0}});
        let e = validate_custom(&i, &mut bad, None).unwrap_err();
        assert!(
            e.message.contains("greater than or equal to 1"),
            "{}",
            e.message
        );
        let mut bad = json!({"metadata": {"name": "x"}, "spec": {}});
        let e = validate_custom(&i, &mut bad, None).unwrap_err();
        assert!(
            e.message.contains("spec.size: Required value"),
            "{}",
            e.message
        );
    }

    #[test]
    fn metadata_name_follows_the_schema_and_a_root_rule_without_a_field_is_nil() {
        let schema = json!({
            "type": "object",
            "properties": {
                "metadata": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 3}}},
                "spec": {"type": "object", "properties": {"size": {"type": "integer"}}}
            },
            "x-kubernetes-validations": [{"rule": "self.spec.size < 5", "message": "too big"}]
        });
        let mut errs = Vec::new();
        let long = json!({"metadata": {"name": "long", "uid": "u"}, "spec": {"size": 1}});
        check(&schema, &long, "", &mut errs, true);
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(errs[0].1.starts_with("metadata.name: Too long"), "{errs:?}");

        let i = info(schema);
        let mut big = json!({"metadata": {"name": "ok"}, "spec": {"size": 9}});
        let e = validate_custom(&i, &mut big, None).unwrap_err();
        assert!(
            e.message
                .contains("<nil>: Invalid value: \"object\": too big"),
            "{}",
            e.message
        );
    }
}

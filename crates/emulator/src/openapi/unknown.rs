//! Fields a schema does not declare, found as the server's strict decoding finds them
//! (`unknown field "spec.foo"`): by property name only, following `$ref`s. An object that
//! declares no properties takes no key (as pruning and the server's structural schemas
//! have it), unless it is a map (`additionalProperties`), says
//! `x-kubernetes-preserve-unknown-fields`, or is one of the few built-in Go types that hold
//! raw JSON. A custom resource's `metadata` is ObjectMeta, whatever its CRD's schema says;
//! `apiVersion` and `kind` are always known.

use serde_json::{Map, Value};

use super::builtin::{OBJECT_META, builtins};
use crate::store::ResourceInfo;

/// The paths of the fields in `obj` that the resource's schema does not declare.
pub(crate) fn unknown_fields(info: &ResourceInfo, obj: &Value) -> Vec<String> {
    find(info, obj).iter().map(|p| name(p)).collect()
}

/// Removes the fields of a built-in kind's object that its schema does not declare, as
/// the server does by decoding the object into its Go type (which has nowhere to keep
/// them) when `fieldValidation` lets them through. Custom resources are pruned instead.
pub(crate) fn drop_unknown_fields(info: &ResourceInfo, obj: &mut Value) {
    for path in find(info, obj) {
        remove(obj, &path);
    }
}

/// One step of a field's path.
#[derive(Debug, Clone)]
enum Step {
    Key(String),
    Index(usize),
}

/// `spec.containers[0].extra`, as strict decoding names a field.
fn name(path: &[Step]) -> String {
    let mut out = String::new();
    for step in path {
        match step {
            Step::Key(k) if out.is_empty() => out.push_str(k),
            Step::Key(k) => {
                out.push('.');
                out.push_str(k);
            }
            Step::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

fn remove(obj: &mut Value, path: &[Step]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut at = obj;
    for step in parents {
        let next = match step {
            Step::Key(k) => at.get_mut(k.as_str()),
            Step::Index(i) => at.get_mut(*i),
        };
        match next {
            Some(v) => at = v,
            None => return,
        }
    }
    if let (Step::Key(k), Some(fields)) = (last, at.as_object_mut()) {
        fields.remove(k);
    }
}

fn find(info: &ResourceInfo, obj: &Value) -> Vec<Vec<Step>> {
    let defs = &builtins().definitions;
    let schema = match &info.schema {
        Some(s) => s.as_ref(),
        None => match builtins().schema_name(&info.group, &info.version, &info.kind) {
            Some(name) => &defs[name],
            None => return vec![],
        },
    };
    let mut out = Vec::new();
    let Some(fields) = obj.as_object() else {
        return out;
    };
    let mut path = Vec::new();
    for (k, v) in fields {
        path.push(Step::Key(k.clone()));
        match k.as_str() {
            "apiVersion" | "kind" => {}
            "metadata" => walk(v, &defs[OBJECT_META], defs, &mut path, &mut out),
            _ => match properties(schema, defs).and_then(|p| p.get(k)) {
                Some(s) => walk(v, s, defs, &mut path, &mut out),
                None if open(schema, defs) => {}
                None => out.push(path.clone()),
            },
        }
        path.pop();
    }
    out
}

/// The schema a `$ref` (or a lone `allOf` around one) names.
fn resolve<'a>(s: &'a Value, defs: &'a Map<String, Value>) -> &'a Value {
    let target = s.get("$ref").or_else(|| s.pointer("/allOf/0/$ref"));
    match target
        .and_then(Value::as_str)
        .and_then(|r| r.strip_prefix("#/components/schemas/"))
    {
        Some(name) => defs.get(name).map_or(s, |d| resolve(d, defs)),
        None => s,
    }
}

fn properties<'a>(s: &'a Value, defs: &'a Map<String, Value>) -> Option<&'a Map<String, Value>> {
    resolve(s, defs)
        .get("properties")
        .and_then(Value::as_object)
}

/// Built-in types whose Go decoding takes any key: they hold raw JSON.
const RAW_JSON: [&str; 3] = [
    "io.k8s.apimachinery.pkg.apis.meta.v1.FieldsV1",
    "io.k8s.apimachinery.pkg.runtime.RawExtension",
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSON",
];

/// Does the schema take keys it does not declare?
fn open(s: &Value, defs: &Map<String, Value>) -> bool {
    if refers_to(s, defs).any(|name| RAW_JSON.contains(&name)) {
        return true;
    }
    let s = resolve(s, defs);
    s["x-kubernetes-preserve-unknown-fields"] == true
        || s.get("additionalProperties").is_some_and(|a| a != false)
        // JSONSchemaPropsOr*: decoded by their own (lenient) unmarshalers.
        || s.get("oneOf").is_some()
        // An object where a string or number belongs is a type error, not unknown fields.
        || s.get("type").and_then(Value::as_str).is_some_and(|t| t != "object")
}

/// The names of the definitions `s` refers to, through `$ref`s (and lone `allOf`s).
fn refers_to<'a>(s: &'a Value, defs: &'a Map<String, Value>) -> impl Iterator<Item = &'a str> + 'a {
    std::iter::successors(ref_name(s), move |name| defs.get(*name).and_then(ref_name)).take(8)
}

fn ref_name(s: &Value) -> Option<&str> {
    s.get("$ref")
        .or_else(|| s.pointer("/allOf/0/$ref"))
        .and_then(Value::as_str)
        .and_then(|r| r.strip_prefix("#/components/schemas/"))
}

fn walk(
    v: &Value,
    s: &Value,
    defs: &Map<String, Value>,
    path: &mut Vec<Step>,
    out: &mut Vec<Vec<Step>>,
) {
    // Before resolving: whether `s` is open can depend on the definition it names.
    let is_open = open(s, defs);
    let s = resolve(s, defs);
    match v {
        Value::Object(fields) => {
            let props = s.get("properties").and_then(Value::as_object);
            let extra = s.get("additionalProperties").filter(|a| a.is_object());
            for (k, child) in fields {
                path.push(Step::Key(k.clone()));
                match props.and_then(|p| p.get(k)).or(extra) {
                    Some(cs) => walk(child, cs, defs, path, out),
                    None if is_open || embedded_meta(s, k) => {}
                    None => out.push(path.clone()),
                }
                path.pop();
            }
        }
        Value::Array(items) => {
            if let Some(is) = s.get("items") {
                for (i, item) in items.iter().enumerate() {
                    path.push(Step::Index(i));
                    walk(item, is, defs, path, out);
                    path.pop();
                }
            }
        }
        _ => {}
    }
}

/// An embedded resource always has apiVersion, kind and metadata.
fn embedded_meta(s: &Value, key: &str) -> bool {
    s["x-kubernetes-embedded-resource"] == true && matches!(key, "apiVersion" | "kind" | "metadata")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Arc;

    #[test]
    fn built_in_kinds_by_their_schema() {
        let pods = ResourceInfo::builtin("", "v1", "pods", "Pod", true, true);
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "labels": {"any": "key"}, "bogus": 1},
            "spec": {"containers": [{"name": "c", "image": "i", "resources": {"limits": {"google.com/tpu": 4}}, "extra": true}],
                     "foo": 1}});
        assert_eq!(
            unknown_fields(&pods, &pod),
            vec!["metadata.bogus", "spec.containers[0].extra", "spec.foo"]
        );
    }

    #[test]
    fn built_in_kinds_lose_unknown_fields_as_their_go_types_would() {
        let pods = ResourceInfo::builtin("", "v1", "pods", "Pod", true, true);
        let mut pod = json!({"metadata": {"name": "p", "bogus": 1},
            "spec": {"containers": [{"name": "c", "extra": true}], "foo": 1}});
        drop_unknown_fields(&pods, &mut pod);
        assert_eq!(
            pod,
            json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}})
        );
    }

    #[test]
    fn custom_resources_by_their_crd_schema() {
        let mut info = ResourceInfo::builtin("x.dev", "v1", "widgets", "Widget", true, false);
        info.schema = Some(Arc::new(json!({"type": "object", "properties": {
            "metadata": {"type": "object", "properties": {"name": {"type": "string"}}},
            "spec": {"type": "object", "properties": {
                "size": {"type": "integer"},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "tags": {"type": "object", "additionalProperties": {"type": "string"}}}}}})));
        let w = json!({"metadata": {"name": "w", "namespace": "default"},
            "spec": {"size": 1, "free": {"a": 1}, "tags": {"b": "c"}, "foo": 2}, "top": 1});
        assert_eq!(unknown_fields(&info, &w), vec!["spec.foo", "top"]);
    }

    #[test]
    fn an_object_without_properties_takes_no_key_unless_it_holds_raw_json() {
        let mut info = ResourceInfo::builtin("x.dev", "v1", "widgets", "Widget", true, false);
        info.schema = Some(Arc::new(json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {
                "closed": {"type": "object"},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}})));
        let w = json!({"spec": {"closed": {"foo": 1}, "free": {"bar": 2}}});
        assert_eq!(unknown_fields(&info, &w), vec!["spec.closed.foo"]);

        // managedFields' fieldsV1 is raw JSON (FieldsV1); an empty Go struct (the CRD's
        // status subresource) takes no key.
        let pods = ResourceInfo::builtin("", "v1", "pods", "Pod", true, true);
        let pod = json!({"metadata": {"name": "p", "managedFields": [
            {"manager": "m", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {".": {}}}}]}});
        assert!(unknown_fields(&pods, &pod).is_empty());
        let crds = ResourceInfo::builtin(
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            false,
            true,
        );
        let crd = json!({"spec": {"versions": [{"name": "v1", "subresources": {"status": {"foo": 1}},
            "schema": {"openAPIV3Schema": {"type": "object", "default": {"any": 1}}}}]}});
        assert_eq!(
            unknown_fields(&crds, &crd),
            vec!["spec.versions[0].subresources.status.foo"]
        );
    }
}

//! OpenAPI v3, as kube-apiserver serves it to clients: `/openapi/v3` lists one document
//! per served group version (`api/v1`, `apis/slices.dev/v1alpha1`, ...) with a hash of its
//! content, and each document holds the paths and schemas of that group version's
//! resources. kubectl reads them to learn that the server validates fields
//! (`fieldValidation` on PATCH) before `apply` and `create`, and to `explain` a kind.
//!
//! * `builtin`: the built-in kinds' schemas (from k8s-openapi's).
//! * `paths`: one resource's paths and operations.
//! * `unknown`: the fields of an object its schema does not declare (strict decoding).

mod builtin;
mod paths;
mod unknown;

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::store::{ResourceInfo, Store};
use builtin::{OBJECT_META, builtins};
use paths::resource_paths;

pub(crate) use unknown::{drop_unknown_fields, unknown_fields};

/// `group/version` as the document's path names it: `api/v1`, `apis/<group>/<version>`.
fn doc_path(info: &ResourceInfo) -> String {
    match info.group.as_str() {
        "" => format!("api/{}", info.version),
        g => format!("apis/{g}/{}", info.version),
    }
}

/// The `/openapi/v3` discovery document.
pub(crate) fn root(store: &Store) -> Value {
    let mut by_doc: BTreeMap<String, Vec<Arc<ResourceInfo>>> = BTreeMap::new();
    for info in store.served() {
        by_doc.entry(doc_path(&info)).or_default().push(info);
    }
    let paths: Map<String, Value> = by_doc
        .into_iter()
        .map(|(path, infos)| {
            let url = format!("/openapi/v3/{path}?hash={}", content_hash(&infos));
            (path, json!({"serverRelativeURL": url}))
        })
        .collect();
    json!({"paths": paths})
}

/// What a document is made of, hashed: the resources and their CRD schemas (the built-in
/// schemas do not change while the process runs).
fn content_hash(infos: &[Arc<ResourceInfo>]) -> String {
    let mut h = DefaultHasher::new();
    for i in infos {
        (&i.plural, &i.kind, i.namespaced).hash(&mut h);
        i.schema.as_ref().map(|s| s.to_string()).hash(&mut h);
    }
    format!("{:016X}", h.finish())
}

/// The document of one group version (`api/v1`, `apis/<group>/<version>`), if served.
pub(crate) fn document(store: &Store, path: &str) -> Option<Value> {
    let infos: Vec<Arc<ResourceInfo>> = store
        .served()
        .into_iter()
        .filter(|i| doc_path(i) == path)
        .collect();
    if infos.is_empty() {
        return None;
    }
    let mut schemas = builtins().definitions.clone();
    let mut paths = Map::new();
    for info in &infos {
        let name = kind_schema(info, &mut schemas);
        paths.extend(resource_paths(info, &name));
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.35.0"},
        "paths": paths,
        "components": {"schemas": schemas},
    }))
}

/// Adds the kind's schema (tagged with its group, version and kind) and its list's to
/// `schemas`; returns the kind schema's name.
fn kind_schema(info: &ResourceInfo, schemas: &mut Map<String, Value>) -> String {
    let (name, mut schema) = match &info.schema {
        Some(s) => (custom_name(info), custom_schema(s)),
        None => {
            let name = builtins().schema_name(&info.group, &info.version, &info.kind);
            let name = name
                .map(str::to_string)
                .unwrap_or_else(|| custom_name(info));
            let schema = schemas
                .get(&name)
                .cloned()
                .unwrap_or_else(|| json!({"type": "object"}));
            (name, schema)
        }
    };
    let gvk = json!([{"group": info.group, "version": info.version, "kind": info.kind}]);
    schema["x-kubernetes-group-version-kind"] = gvk;
    schemas.insert(name.clone(), schema);
    schemas.insert(format!("{name}List"), list_schema(info, &name));
    name
}

/// The schema name the server gives a custom resource: the group reversed, version, kind
/// (`dev.slices.v1alpha1.TrainCluster`).
fn custom_name(info: &ResourceInfo) -> String {
    let group: Vec<&str> = info.group.split('.').rev().collect();
    format!("{}.{}.{}", group.join("."), info.version, info.kind)
}

/// A CRD's schema as published: `metadata` is ObjectMeta, `apiVersion` and `kind` described.
fn custom_schema(crd: &Value) -> Value {
    let mut s = crd.clone();
    let meta_ref = json!({"allOf": [{"$ref": format!("#/components/schemas/{OBJECT_META}")}],
        "description": "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"});
    if let Some(props) = s.get_mut("properties").and_then(Value::as_object_mut) {
        props.insert("metadata".into(), meta_ref);
        props.entry("apiVersion").or_insert(json!({"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object."}));
        props.entry("kind").or_insert(json!({"type": "string", "description": "Kind is a string value representing the REST resource this object represents."}));
    }
    s
}

fn list_schema(info: &ResourceInfo, item: &str) -> Value {
    json!({
        "description": format!("{}List is a list of {}", info.kind, info.kind),
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "items": {"type": "array", "items": {"$ref": format!("#/components/schemas/{item}")}},
        },
        "required": ["items"],
        "x-kubernetes-group-version-kind": [{"group": info.group, "version": info.version, "kind": format!("{}List", info.kind)}],
    })
}

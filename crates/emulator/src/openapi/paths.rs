//! The paths of one resource in an OpenAPI v3 document, as kube-apiserver publishes them:
//! each operation tagged with `x-kubernetes-group-version-kind` and `x-kubernetes-action`,
//! writes taking `dryRun`, `fieldManager` and `fieldValidation` (kubectl looks for the
//! last on the PATCH to know the server validates fields itself).

use serde_json::{Map, Value, json};

use crate::store::ResourceInfo;

fn param(name: &str, place: &str, description: &str) -> Value {
    json!({"name": name, "in": place, "description": description, "required": place == "path", "schema": {"type": "string", "uniqueItems": true}})
}

fn write_params(patch: bool) -> Vec<Value> {
    let mut out = vec![
        param(
            "dryRun",
            "query",
            "When present, indicates that modifications should not be persisted.",
        ),
        param(
            "fieldManager",
            "query",
            "fieldManager is a name associated with the actor or entity that is making these changes.",
        ),
        param(
            "fieldValidation",
            "query",
            "fieldValidation instructs the server on how to handle objects in the request (POST/PUT/PATCH) containing unknown or duplicate fields. Valid values are: - Ignore - Warn (the default) - Strict",
        ),
    ];
    if patch {
        out.push(param("force", "query", "Force is going to \"force\" Apply requests. It means user will re-acquire conflicting fields owned by other people."));
    }
    out
}

fn operation(info: &ResourceInfo, action: &str, schema: &str, params: Vec<Value>) -> Value {
    let body = json!({"content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{schema}")}}}});
    let mut op = json!({
        "operationId": format!("{action}{}", info.kind),
        "parameters": params,
        "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{schema}")}}}}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {"group": info.group, "version": info.version, "kind": info.kind},
    });
    if matches!(action, "post" | "put" | "patch") {
        op["requestBody"] = body;
    }
    op
}

/// The collection's and the object's paths of `info`, whose kind's schema is `schema`.
pub(crate) fn resource_paths(info: &ResourceInfo, schema: &str) -> Map<String, Value> {
    let prefix = match info.group.as_str() {
        "" => format!("/api/{}", info.version),
        g => format!("/apis/{g}/{}", info.version),
    };
    let collection = match info.namespaced {
        true => format!("{prefix}/namespaces/{{namespace}}/{}", info.plural),
        false => format!("{prefix}/{}", info.plural),
    };
    let mut scope = vec![];
    if info.namespaced {
        scope.push(param(
            "namespace",
            "path",
            "object name and auth scope, such as for teams and projects",
        ));
    }
    let mut named = scope.clone();
    named.push(param("name", "path", &format!("name of the {}", info.kind)));
    let list = format!("{schema}List");
    let mut out = Map::new();
    out.insert(
        collection.clone(),
        json!({
            "get": operation(info, "list", &list, vec![]),
            "post": operation(info, "post", schema, write_params(false)),
            "parameters": scope,
        }),
    );
    out.insert(
        format!("{collection}/{{name}}"),
        json!({
            "get": operation(info, "get", schema, vec![]),
            "put": operation(info, "put", schema, write_params(false)),
            "patch": operation(info, "patch", schema, write_params(true)),
            "delete": operation(info, "delete", schema, vec![]),
            "parameters": named,
        }),
    );
    out
}

//! Unit tests of field management on plain objects (the HTTP-level rules are in
//! `tests/server_side_apply.rs`).

use serde_json::{Value, json};

use super::{Target, apply, record_update};

fn pod_target() -> Target<'static> {
    Target {
        kind: "Pod",
        api_version: "v1".into(),
        schema: None,
        has_status: true,
        subresource: None,
    }
}

fn fields(obj: &Value, manager: &str) -> Value {
    obj["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["manager"] == json!(manager))
        .map(|e| e["fieldsV1"].clone())
        .unwrap_or(Value::Null)
}

#[test]
fn a_create_owns_what_it_set_but_not_server_managed_metadata_or_status() {
    let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "d", "uid": "u", "labels": {"a": "b"}},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
        "status": {"phase": "Pending"}});
    record_update(&pod_target(), None, &mut pod, "kubectl");
    assert_eq!(
        fields(&pod, "kubectl"),
        json!({"f:metadata": {"f:labels": {".": {}, "f:a": {}}},
            "f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {".": {}, "f:image": {}, "f:name": {}}}}})
    );
    let entry = &pod["metadata"]["managedFields"][0];
    assert_eq!(entry["operation"], "Update");
    assert_eq!(entry["fieldsType"], "FieldsV1");
    assert!(entry["time"].is_string());
}

#[test]
fn finalizers_are_a_set_and_owner_references_a_map_by_uid() {
    let t = pod_target();
    let cfg = |fin: Value, owners: Value| {
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "finalizers": fin, "ownerReferences": owners}})
    };
    let owner = |uid: &str| json!({"apiVersion": "v1", "kind": "X", "name": uid, "uid": uid});
    let live = apply(
        &t,
        None,
        cfg(json!(["a"]), json!([owner("1")])),
        "one",
        false,
    )
    .unwrap();
    let live = apply(
        &t,
        Some(&live),
        cfg(json!(["b"]), json!([owner("2")])),
        "two",
        false,
    )
    .unwrap();
    assert_eq!(live["metadata"]["finalizers"], json!(["a", "b"]));
    assert_eq!(
        live["metadata"]["ownerReferences"],
        json!([owner("1"), owner("2")])
    );
    assert_eq!(
        fields(&live, "two")["f:metadata"]["f:finalizers"],
        json!({"v:\"b\"": {}})
    );
    let live = apply(&t, Some(&live), cfg(json!([]), json!([])), "one", false).unwrap();
    assert_eq!(live["metadata"]["finalizers"], json!(["b"]));
    assert_eq!(live["metadata"]["ownerReferences"], json!([owner("2")]));
}

#[test]
fn a_list_item_another_manager_partly_owns_keeps_its_key() {
    let t = pod_target();
    let cfg = |containers: Value| {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": containers}})
    };
    let live = apply(
        &t,
        None,
        cfg(json!([{"name": "c", "image": "i", "env": [{"name": "A", "value": "1"}]}])),
        "one",
        false,
    )
    .unwrap();
    let live = apply(
        &t,
        Some(&live),
        cfg(json!([{"name": "c", "image": "i"}])),
        "two",
        false,
    )
    .unwrap();
    let live = apply(&t, Some(&live), cfg(json!([])), "one", false).unwrap();
    assert_eq!(
        live["spec"]["containers"],
        json!([{"name": "c", "image": "i"}])
    );
}

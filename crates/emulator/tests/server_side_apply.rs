//! Server-side apply and `managedFields`, driven through a real `kube::Client`: each rule
//! as kube-apiserver applies it (structured-merge-diff).

mod common;

use common::{api_code, emu};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams, WatchEvent,
    WatchParams,
};
use kube::core::Status;
use serde_json::{Value, json};
use slice_emulator::Emulator;

fn cm_config(name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data})
}

async fn apply<K>(api: &Api<K>, name: &str, manager: &str, config: Value) -> Result<K, kube::Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.patch(name, &PatchParams::apply(manager), &Patch::Apply(config))
        .await
}

/// The `fieldsV1` of `manager`'s entry with this operation (and subresource), if any.
fn fields_of(obj: &Value, manager: &str, operation: &str, sub: Option<&str>) -> Option<Value> {
    obj.pointer("/metadata/managedFields")?
        .as_array()?
        .iter()
        .find(|e| {
            e["manager"] == json!(manager)
                && e["operation"] == json!(operation)
                && e.get("subresource").and_then(Value::as_str) == sub
        })
        .map(|e| e["fieldsV1"].clone())
}

fn stored_cm(emu: &Emulator, name: &str) -> Value {
    emu.object("v1", "configmaps", Some("default"), name)
        .expect("configmap stored")
}

fn api_status(e: kube::Error) -> Box<Status> {
    match e {
        kube::Error::Api(s) => s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_field_dropped_from_a_second_apply_is_removed() {
    let emu = emu().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(emu.client());
    let first = cm_config("c", json!({"a": "1", "b": "2"}));
    apply(&cms, "c", "mgr", first).await.unwrap();
    let cm = apply(&cms, "c", "mgr", cm_config("c", json!({"a": "1"})))
        .await
        .unwrap();
    let data = cm.data.unwrap();
    assert_eq!(data.get("a").map(String::as_str), Some("1"));
    assert!(!data.contains_key("b"), "b was dropped from the config");
    let applied = fields_of(&stored_cm(&emu, "c"), "mgr", "Apply", None);
    assert_eq!(applied, Some(json!({"f:data": {"f:a": {}}})));
    emu.shutdown().await;
}

#[tokio::test]
async fn a_field_another_manager_also_owns_is_kept() {
    let emu = emu().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(emu.client());
    apply(
        &cms,
        "c",
        "one",
        cm_config("c", json!({"a": "1", "b": "2"})),
    )
    .await
    .unwrap();
    // Same value: no conflict, both own b.
    apply(&cms, "c", "two", cm_config("c", json!({"b": "2"})))
        .await
        .unwrap();
    let shared = stored_cm(&emu, "c");
    assert_eq!(
        fields_of(&shared, "one", "Apply", None),
        Some(json!({"f:data": {"f:a": {}, "f:b": {}}}))
    );
    assert_eq!(
        fields_of(&shared, "two", "Apply", None),
        Some(json!({"f:data": {"f:b": {}}}))
    );
    let cm = apply(&cms, "c", "one", cm_config("c", json!({"a": "1"})))
        .await
        .unwrap();
    assert_eq!(cm.data.unwrap().get("b").map(String::as_str), Some("2"));
    emu.shutdown().await;
}

#[tokio::test]
async fn a_conflict_is_409_in_the_servers_words_and_force_takes_ownership() {
    let emu = emu().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(emu.client());
    let post = PostParams {
        field_manager: Some("other-manager".into()),
        ..PostParams::default()
    };
    let cm: ConfigMap = serde_json::from_value(cm_config("c", json!({"x": "1"}))).unwrap();
    cms.create(&post, &cm).await.unwrap();
    let created = stored_cm(&emu, "c");
    assert_eq!(
        fields_of(&created, "other-manager", "Update", None),
        Some(json!({"f:data": {".": {}, "f:x": {}}}))
    );

    let config = cm_config("c", json!({"x": "2"}));
    let e = apply(&cms, "c", "slice-operator", config.clone())
        .await
        .unwrap_err();
    let s = api_status(e);
    assert_eq!((s.code, s.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        s.message,
        "Apply failed with 1 conflict: conflict with \"other-manager\" using v1: .data.x"
    );
    let cause = &s.details.as_ref().expect("details").causes[0];
    assert_eq!(cause.reason, "FieldManagerConflict");
    assert_eq!(cause.field, ".data.x");
    assert_eq!(cause.message, "conflict with \"other-manager\" using v1");
    assert_eq!(
        stored_cm(&emu, "c")["data"]["x"],
        "1",
        "a conflict writes nothing"
    );

    let forced = PatchParams::apply("slice-operator").force();
    let cm = cms
        .patch("c", &forced, &Patch::Apply(config))
        .await
        .unwrap();
    assert_eq!(cm.data.unwrap()["x"], "2");
    let after = stored_cm(&emu, "c");
    assert_eq!(
        fields_of(&after, "slice-operator", "Apply", None),
        Some(json!({"f:data": {"f:x": {}}}))
    );
    // The updater keeps only the map itself, no longer x.
    assert_eq!(
        fields_of(&after, "other-manager", "Update", None),
        Some(json!({"f:data": {}}))
    );
    emu.shutdown().await;
}

#[tokio::test]
async fn an_update_by_another_manager_takes_ownership_so_a_later_apply_keeps_the_field() {
    let emu = emu().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(emu.client());
    apply(
        &cms,
        "c",
        "mgr",
        cm_config("c", json!({"a": "1", "b": "1"})),
    )
    .await
    .unwrap();
    let params = PatchParams {
        field_manager: Some("editor".into()),
        ..PatchParams::default()
    };
    cms.patch("c", &params, &Patch::Merge(json!({"data": {"b": "2"}})))
        .await
        .unwrap();
    let edited = stored_cm(&emu, "c");
    assert_eq!(
        fields_of(&edited, "editor", "Update", None),
        Some(json!({"f:data": {"f:b": {}}}))
    );
    assert_eq!(
        fields_of(&edited, "mgr", "Apply", None),
        Some(json!({"f:data": {"f:a": {}}}))
    );
    let cm = apply(&cms, "c", "mgr", cm_config("c", json!({"a": "1"})))
        .await
        .unwrap();
    assert_eq!(cm.data.unwrap().get("b").map(String::as_str), Some("2"));
    emu.shutdown().await;
}

#[tokio::test]
async fn a_no_op_apply_writes_nothing_and_sends_no_event() {
    let emu = emu().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(emu.client());
    let config = cm_config("c", json!({"a": "1"}));
    let first = apply(&cms, "c", "mgr", config.clone()).await.unwrap();
    let rv = first.metadata.resource_version.clone().unwrap();
    let stored = stored_cm(&emu, "c");
    assert!(fields_of(&stored, "mgr", "Apply", None).is_some());

    let mut events = cms
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    let again = apply(&cms, "c", "mgr", config).await.unwrap();
    assert_eq!(again.metadata.resource_version, Some(rv));
    assert_eq!(
        stored_cm(&emu, "c"),
        stored,
        "not even managedFields changed"
    );
    // A later write: the first event the watch sees must be that one.
    let marker: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "marker"}})).unwrap();
    cms.create(&PostParams::default(), &marker).await.unwrap();
    match events.next().await {
        Some(Ok(WatchEvent::Added(cm))) => assert_eq!(cm.metadata.name.as_deref(), Some("marker")),
        other => panic!("expected the marker's ADDED first, got {other:?}"),
    }
    emu.shutdown().await;
}

#[tokio::test]
async fn apply_requires_the_resources_api_version_and_kind() {
    let emu = emu().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(emu.client());
    let no_version = json!({"kind": "ConfigMap", "metadata": {"name": "c"}, "data": {}});
    let e = apply(&cms, "c", "mgr", no_version).await.unwrap_err();
    assert_eq!(api_code(&e), (400, "BadRequest".into()));
    assert_eq!(
        api_status(e).message,
        "Incorrect version specified in apply patch. Specified patch version: , expected: v1"
    );
    let wrong = json!({"apiVersion": "apps/v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
    let e = apply(&cms, "c", "mgr", wrong).await.unwrap_err();
    assert!(
        api_status(e)
            .message
            .contains("Specified patch version: apps/v1")
    );
    let no_kind = json!({"apiVersion": "v1", "metadata": {"name": "c"}, "data": {}});
    let e = apply(&cms, "c", "mgr", no_kind).await.unwrap_err();
    assert_eq!(api_code(&e), (400, "BadRequest".into()));
    assert!(
        emu.object("v1", "configmaps", Some("default"), "c")
            .is_none()
    );
    emu.shutdown().await;
}

fn gadget_crd() -> Value {
    let ports = json!({
        "type": "array",
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["name"],
        "items": {"type": "object", "required": ["name"], "properties": {
            "name": {"type": "string"}, "port": {"type": "integer"}}}
    });
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.ssa.example.com"},
        "spec": {
            "group": "ssa.example.com",
            "scope": "Namespaced",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget", "listKind": "GadgetList"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {
                        "replicas": {"type": "integer"}, "ports": ports}},
                    "status": {"type": "object", "properties": {
                        "ready": {"type": "boolean"}, "phase": {"type": "string"}}}
                }}}
            }]
        }
    })
}

async fn gadgets(emu: &Emulator) -> Api<DynamicObject> {
    emu.install_crd(&serde_json::from_value(gadget_crd()).unwrap())
        .unwrap();
    let gvk = GroupVersionKind::gvk("ssa.example.com", "v1", "Gadget");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "gadgets");
    Api::namespaced_with(emu.client(), "default", &ar)
}

fn gadget(body: Value) -> Value {
    let mut v =
        json!({"apiVersion": "ssa.example.com/v1", "kind": "Gadget", "metadata": {"name": "g"}});
    for (k, x) in body.as_object().unwrap() {
        v[k] = x.clone();
    }
    v
}

#[tokio::test]
async fn a_status_apply_touches_only_status_and_clears_what_it_drops() {
    let emu = emu().await;
    let api = gadgets(&emu).await;
    apply(&api, "g", "op", gadget(json!({"spec": {"replicas": 1}})))
        .await
        .unwrap();
    let status = |body: Value| {
        let api = api.clone();
        async move {
            let params = PatchParams::apply("op").force();
            api.patch_status("g", &params, &Patch::Apply(gadget(body)))
                .await
                .unwrap()
        }
    };
    status(json!({"spec": {"replicas": 5}, "status": {"ready": true, "phase": "Up"}})).await;
    let g = status(json!({"status": {"ready": true}})).await;
    assert_eq!(
        g.data["status"],
        json!({"ready": true}),
        "phase was dropped"
    );
    assert_eq!(
        g.data["spec"],
        json!({"replicas": 1}),
        "a status apply leaves spec alone"
    );
    let stored = emu
        .object("ssa.example.com/v1", "gadgets", Some("default"), "g")
        .unwrap();
    assert_eq!(
        fields_of(&stored, "op", "Apply", Some("status")),
        Some(json!({"f:status": {"f:ready": {}}}))
    );
    assert_eq!(
        fields_of(&stored, "op", "Apply", None),
        Some(json!({"f:spec": {"f:replicas": {}}}))
    );
    emu.shutdown().await;
}

#[tokio::test]
async fn a_crd_list_map_merges_by_key() {
    let emu = emu().await;
    let api = gadgets(&emu).await;
    let ports = |p: Value| gadget(json!({"spec": {"ports": p}}));
    apply(&api, "g", "one", ports(json!([{"name": "a", "port": 1}])))
        .await
        .unwrap();
    let g = apply(&api, "g", "two", ports(json!([{"name": "b", "port": 2}])))
        .await
        .unwrap();
    assert_eq!(
        g.data["spec"]["ports"],
        json!([{"name": "a", "port": 1}, {"name": "b", "port": 2}])
    );
    let g = apply(&api, "g", "one", ports(json!([]))).await.unwrap();
    assert_eq!(g.data["spec"]["ports"], json!([{"name": "b", "port": 2}]));
    let e = apply(&api, "g", "one", ports(json!([{"name": "b", "port": 3}])))
        .await
        .unwrap_err();
    assert_eq!(
        api_status(e).message,
        "Apply failed with 1 conflict: conflict with \"two\": .spec.ports[name=\"b\"].port"
    );
    emu.shutdown().await;
}

#[tokio::test]
async fn service_ports_merge_by_port_and_protocol() {
    let emu = emu().await;
    let svcs: Api<Service> = Api::default_namespaced(emu.client());
    let svc = |ports: Value| {
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
            "spec": {"clusterIP": "None", "ports": ports}})
    };
    apply(&svcs, "s", "one", svc(json!([{"name": "a", "port": 80}])))
        .await
        .unwrap();
    let s = apply(&svcs, "s", "two", svc(json!([{"name": "b", "port": 81}])))
        .await
        .unwrap();
    let ports: Vec<i32> = s
        .spec
        .unwrap()
        .ports
        .unwrap()
        .iter()
        .map(|p| p.port)
        .collect();
    assert_eq!(ports, vec![80, 81]);
    emu.shutdown().await;
}

/// A resourceVersion in an apply configuration is a precondition, as kube-apiserver's
/// update with optimistic locking has it: a stale one is 409 Conflict and writes nothing;
/// the current one applies.
#[tokio::test]
async fn an_apply_naming_a_stale_resource_version_is_a_conflict() {
    let emu = emu().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(emu.client());
    let first = apply(&cms, "c", "mgr", cm_config("c", json!({"a": "1"})))
        .await
        .unwrap();
    let read_at = first.metadata.resource_version.clone().unwrap();
    apply(&cms, "c", "other", cm_config("c", json!({"b": "2"})))
        .await
        .unwrap();
    let mut stale = cm_config("c", json!({"a": "old"}));
    stale["metadata"]["resourceVersion"] = json!(read_at);
    let refused = apply(&cms, "c", "mgr", stale).await.unwrap_err();
    assert_eq!(api_code(&refused).0, 409);
    assert_eq!(stored_cm(&emu, "c")["data"]["a"], "1");
    let now = stored_cm(&emu, "c")["metadata"]["resourceVersion"].clone();
    let mut current = cm_config("c", json!({"a": "new"}));
    current["metadata"]["resourceVersion"] = now;
    apply(&cms, "c", "mgr", current).await.unwrap();
    assert_eq!(stored_cm(&emu, "c")["data"]["a"], "new");
    emu.shutdown().await;
}

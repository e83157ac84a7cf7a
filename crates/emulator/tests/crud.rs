//! Create, read, update and patch through the main endpoint and the `status` and
//! `binding` subresources.

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

mod common;
use common::*;

#[tokio::test]
async fn pod_crud_and_errors() {
    let emu = emu().await;
    let pods: Api<Pod> = Api::namespaced(emu.client(), "default");
    let created = pods
        .create(&PostParams::default(), &pod("p1", json!({"app": "a"})))
        .await
        .unwrap();
    let meta = &created.metadata;
    assert!(meta.uid.is_some());
    assert!(meta.creation_timestamp.is_some());
    assert_eq!(meta.generation, Some(1));
    assert_eq!(created.status.unwrap().phase.as_deref(), Some("Pending"));
    let spec = created.spec.unwrap();
    assert_eq!(
        spec.restart_policy.as_deref(),
        Some("Always"),
        "pod defaults applied"
    );
    assert_eq!(
        spec.containers[0].image_pull_policy.as_deref(),
        Some("Always")
    );
    // pod spec is immutable apart from images etc.
    let e = pods
        .patch(
            "p1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"nodeName": "n1"}})),
        )
        .await
        .unwrap_err();
    assert_eq!(api_code(&e), (422, "Invalid".into()));

    let e = pods
        .create(&PostParams::default(), &pod("p1", json!({})))
        .await
        .unwrap_err();
    assert_eq!(api_code(&e), (409, "AlreadyExists".into()));
    let e = pods.get("nope").await.unwrap_err();
    assert_eq!(api_code(&e), (404, "NotFound".into()));
    assert_eq!(api_message(&e), "pods \"nope\" not found");

    // generateName
    let mut g = pod("", json!({}));
    g.metadata.name = None;
    g.metadata.generate_name = Some("gen-".into());
    let g = pods.create(&PostParams::default(), &g).await.unwrap();
    assert!(g.metadata.name.unwrap().starts_with("gen-"));

    // replace bumps generation (spec change), metadata-only patch does not
    let mut p = pods.get("p1").await.unwrap();
    p.spec.as_mut().unwrap().containers[0].image = Some("busybox:2".into());
    let p2 = pods
        .replace("p1", &PostParams::default(), &p)
        .await
        .unwrap();
    assert_eq!(p2.metadata.generation, Some(2));
    let rv2: u64 = p2
        .metadata
        .resource_version
        .clone()
        .unwrap()
        .parse()
        .unwrap();
    let p3 = pods
        .patch(
            "p1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})),
        )
        .await
        .unwrap();
    assert_eq!(p3.metadata.generation, Some(2));
    assert!(
        p3.metadata
            .resource_version
            .unwrap()
            .parse::<u64>()
            .unwrap()
            > rv2
    );

    // stale resourceVersion -> 409 Conflict
    let e = pods
        .replace("p1", &PostParams::default(), &p)
        .await
        .unwrap_err();
    assert_eq!(api_code(&e), (409, "Conflict".into()));

    // JSON patch, strategic merge and server-side apply
    let jp: json_patch::Patch = serde_json::from_value(
        json!([{"op": "add", "path": "/metadata/annotations", "value": {"a": "1"}}]),
    )
    .unwrap();
    let p4 = pods
        .patch("p1", &PatchParams::default(), &Patch::<()>::Json(jp))
        .await
        .unwrap();
    assert_eq!(p4.metadata.annotations.unwrap()["a"], "1");
    let p5 = pods
        .patch(
            "p1",
            &PatchParams::default(),
            &Patch::Strategic(json!({"metadata": {"labels": {"s": "t"}}})),
        )
        .await
        .unwrap();
    assert_eq!(p5.labels()["s"], "t");
    let applied = pods
        .patch(
            "p-apply",
            &PatchParams::apply("test").force(),
            &Patch::Apply(
                json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p-apply"},
                "spec": {"containers": [{"name": "c", "image": "img"}]}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(applied.metadata.generation, Some(1));

    // delete; then 404
    pods.delete("p1", &DeleteParams::default()).await.unwrap();
    assert_eq!(api_code(&pods.get("p1").await.unwrap_err()).0, 404);
    emu.shutdown().await;
}

#[tokio::test]
async fn pod_binding_and_status_subresources() {
    let emu = emu().await;
    let client = emu.client();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(&PostParams::default(), &pod("b1", json!({})))
        .await
        .unwrap();
    let binding = json!({"apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": "b1"}, "target": {"apiVersion": "v1", "kind": "Node", "name": "node-1"}});
    let _: serde_json::Value = pods
        .create_subresource("binding", "b1", &PostParams::default(), &binding)
        .await
        .unwrap();
    let p = pods.get("b1").await.unwrap();
    assert_eq!(p.spec.unwrap().node_name.as_deref(), Some("node-1"));
    let e = pods
        .create_subresource::<_, serde_json::Value>(
            "binding",
            "b1",
            &PostParams::default(),
            &binding,
        )
        .await
        .unwrap_err();
    assert_eq!(api_code(&e).0, 409);

    // pod status via /status only
    pods.patch(
        "b1",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Running"}})),
    )
    .await
    .unwrap();
    assert_eq!(phase_of(&pods, "b1").await.as_deref(), Some("Pending"));
    pods.patch_status(
        "b1",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Running"}})),
    )
    .await
    .unwrap();
    assert_eq!(phase_of(&pods, "b1").await.as_deref(), Some("Running"));

    // nodes are cluster-scoped and keep status on create
    let nodes: Api<Node> = Api::all(client);
    let n: Node = serde_json::from_value(
        json!({"metadata": {"name": "node-1"}, "status": {"capacity": {"cpu": "4"}}}),
    )
    .unwrap();
    let n = nodes.create(&PostParams::default(), &n).await.unwrap();
    assert!(n.metadata.namespace.is_none());
    assert!(n.status.unwrap().capacity.is_some());
}

/// A pod the API server refuses, as a client sees it: 422 Invalid with the server's message
/// (every field error, in brackets when there are several) and one cause per error, each with
/// its type, its field and the body of its message; an unparseable quantity is a 400.
#[tokio::test]
async fn an_invalid_pod_is_refused_with_the_servers_status() {
    let emu = emu().await;
    let pods: Api<Pod> = Api::namespaced(emu.client(), "default");
    let bad: Pod = serde_json::from_value(json!({
        "metadata": {"name": "x"},
        "spec": {"containers": [{"name": "a-", "env": [{"name": "A=B"}]}]},
    }))
    .unwrap();
    let kube::Error::Api(s) = pods.create(&PostParams::default(), &bad).await.unwrap_err() else {
        panic!("an API error")
    };
    assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        s.message,
        "Pod \"x\" is invalid: [spec.containers[0].name: Invalid value: \"a-\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?'), spec.containers[0].image: Required value, spec.containers[0].env[0].name: Invalid value: \"A=B\": a valid environment variable name must consist only of printable ASCII characters other than '=']"
    );
    let causes = &s.details.as_ref().expect("details").causes;
    assert_eq!(causes.len(), 3);
    assert_eq!(
        (
            causes[1].reason.as_str(),
            causes[1].field.as_str(),
            causes[1].message.as_str()
        ),
        (
            "FieldValueRequired",
            "spec.containers[0].image",
            "Required value"
        )
    );
    assert_eq!(causes[0].reason, "FieldValueInvalid");
    assert!(causes[0].message.starts_with("Invalid value: \"a-\": "));

    let unparseable: Pod = serde_json::from_value(json!({
        "metadata": {"name": "y"},
        "spec": {"containers": [{"name": "main", "image": "x",
            "resources": {"limits": {"cpu": "lots"}}}]},
    }))
    .unwrap();
    let kube::Error::Api(s) = pods
        .create(&PostParams::default(), &unparseable)
        .await
        .unwrap_err()
    else {
        panic!("an API error")
    };
    assert_eq!((s.code, s.reason.as_str()), (400, "BadRequest"));
    assert!(
        s.message
            .starts_with("Pod in version \"v1\" cannot be handled as a Pod: quantities must match"),
        "{}",
        s.message
    );
}

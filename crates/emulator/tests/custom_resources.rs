//! Custom resources: schema defaulting and validation (including CEL), the status
//! subresource, and CRDs created over HTTP being served and discoverable.

use std::time::Duration;

use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{CustomResource, CustomResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

mod common;
use common::*;

#[tokio::test]
async fn custom_resources_validation_and_status() {
    let emu = emu().await;
    emu.install_crd(&Widget::crd()).unwrap();
    let ws: Api<Widget> = Api::namespaced(emu.client(), "default");
    let w = ws
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"apiVersion": "test.example.com/v1", "kind": "Widget",
                "metadata": {"name": "w1"}, "spec": {"replicas": 3}, "status": {"ready": true}}),
            )
            .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(w.spec.mode, "fast", "schema default applied");
    assert!(w.status.is_none(), "status dropped on create");
    assert_eq!(w.metadata.generation, Some(1));

    // CEL rule violation -> 422 naming the field and the rule message
    let bad: Widget = serde_json::from_value(
        json!({"apiVersion": "test.example.com/v1", "kind": "Widget",
        "metadata": {"name": "w2"}, "spec": {"replicas": 11}}),
    )
    .unwrap();
    let e = ws.create(&PostParams::default(), &bad).await.unwrap_err();
    assert_eq!(api_code(&e), (422, "Invalid".into()));
    let msg = api_message(&e);
    assert!(msg.contains("replicas must be at most 10"), "{msg}");
    assert!(
        msg.starts_with("Widget.test.example.com \"w2\" is invalid: spec"),
        "{msg}"
    );
    // structural type error via merge patch
    let e = ws
        .patch(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": "many"}})),
        )
        .await
        .unwrap_err();
    assert_eq!(api_code(&e).0, 422);
    assert!(
        api_message(&e).contains("spec.replicas"),
        "{}",
        api_message(&e)
    );

    // status subresource separation
    let w = ws
        .patch(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"ready": true}})),
        )
        .await
        .unwrap();
    assert!(w.status.is_none(), "main endpoint ignores status");
    let w = ws
        .patch_status(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"ready": true}, "spec": {"replicas": 5}})),
        )
        .await
        .unwrap();
    assert!(w.status.as_ref().unwrap().ready);
    assert_eq!(w.spec.replicas, 3, "status endpoint ignores spec");
    assert_eq!(w.metadata.generation, Some(1));
    let w = ws
        .patch(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 4}})),
        )
        .await
        .unwrap();
    assert_eq!(w.metadata.generation, Some(2));
    assert!(w.status.unwrap().ready);

    // CRDs created over HTTP are served too, and discovery lists them
    let client = emu.client();
    let (resources, _) = client
        .list_api_group_resources("test.example.com/v1")
        .await
        .map(|r| (r, ()))
        .unwrap();
    let wr = resources
        .resources
        .iter()
        .find(|r| r.name == "widgets")
        .unwrap();
    assert_eq!(wr.short_names.as_deref(), Some(&["wd".to_string()][..]));
    assert!(
        resources
            .resources
            .iter()
            .any(|r| r.name == "widgets/status")
    );
}

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, JsonSchema)]
#[kube(group = "test.example.com", version = "v1", kind = "Gadget")]
pub struct GadgetSpec {
    size: u32,
}

#[tokio::test]
async fn crd_created_over_http_is_served_and_discoverable() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::runtime::wait::{await_condition, conditions};
    let emu = emu().await;
    let client = emu.client();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &Gadget::crd())
        .await
        .unwrap();
    tokio::time::timeout(
        Duration::from_secs(5),
        await_condition(
            crds.clone(),
            "gadgets.test.example.com",
            conditions::is_crd_established(),
        ),
    )
    .await
    .unwrap()
    .unwrap();
    let gadgets: Api<Gadget> = Api::all(client.clone());
    gadgets
        .create(
            &PostParams::default(),
            &Gadget::new("g1", GadgetSpec { size: 3 }),
        )
        .await
        .unwrap();
    let g = gadgets.get("g1").await.unwrap();
    assert!(g.metadata.namespace.is_none(), "cluster-scoped");

    let discovery = kube::discovery::Discovery::new(client.clone())
        .run()
        .await
        .unwrap();
    let (ar, caps) = discovery
        .groups()
        .flat_map(|g| g.recommended_resources())
        .find(|(ar, _)| ar.kind == "Gadget")
        .expect("Gadget discovered");
    assert_eq!(ar.plural, "gadgets");
    assert_eq!(caps.scope, kube::discovery::Scope::Cluster);

    // deleting the CRD removes its objects and stops serving it
    crds.delete("gadgets.test.example.com", &DeleteParams::default())
        .await
        .unwrap();
    assert_eq!(
        api_code(&gadgets.list(&ListParams::default()).await.unwrap_err()).0,
        404
    );
}

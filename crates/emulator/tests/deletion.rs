//! Deletion: preconditions, finalizers, owner-reference garbage collection and graceful
//! pod deletion.

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::ResourceExt;
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions, PropagationPolicy,
};
use serde_json::json;
use slice_emulator::{Emulator, EmulatorOptions};

mod common;
use common::*;

#[tokio::test]
async fn delete_preconditions_and_finalizers() {
    let emu = emu().await;
    let cms: Api<ConfigMap> = Api::namespaced(emu.client(), "default");
    let c = cms.create(&PostParams::default(), &cm("c1")).await.unwrap();
    let bad = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some("wrong".into()),
            resource_version: None,
        }),
        ..Default::default()
    };
    let e = cms.delete("c1", &bad).await.unwrap_err();
    assert_eq!(api_code(&e), (409, "Conflict".into()));
    let bad_rv = DeleteParams {
        preconditions: Some(Preconditions {
            uid: None,
            resource_version: Some("1".into()),
        }),
        ..Default::default()
    };
    assert_eq!(
        api_code(&cms.delete("c1", &bad_rv).await.unwrap_err()).0,
        409
    );
    let good = DeleteParams {
        preconditions: Some(Preconditions {
            uid: c.metadata.uid.clone(),
            resource_version: None,
        }),
        ..Default::default()
    };
    cms.delete("c1", &good).await.unwrap();
    assert!(cms.get_opt("c1").await.unwrap().is_none());

    // finalizers keep the object with a deletionTimestamp
    let mut f = cm("f1");
    f.metadata.finalizers = Some(vec!["test/hold".into()]);
    cms.create(&PostParams::default(), &f).await.unwrap();
    cms.delete("f1", &DeleteParams::default()).await.unwrap();
    let got = cms.get("f1").await.unwrap();
    assert!(got.metadata.deletion_timestamp.is_some());
    cms.patch(
        "f1",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert!(cms.get_opt("f1").await.unwrap().is_none());
}

#[tokio::test]
async fn owner_garbage_collection() {
    let emu = emu().await;
    let client = emu.client();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client, "default");
    for owner in ["o1", "o2"] {
        let o = cms
            .create(&PostParams::default(), &cm(owner))
            .await
            .unwrap();
        for i in 0..3 {
            let mut p = pod(&format!("{owner}-p{i}"), json!({}));
            p.metadata.owner_references = Some(vec![serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "ConfigMap", "name": owner, "uid": o.metadata.uid.clone().unwrap()
            }))
            .unwrap()]);
            pods.create(&PostParams::default(), &p).await.unwrap();
        }
    }
    cms.delete("o1", &DeleteParams::background()).await.unwrap();
    let left: Vec<String> = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .iter()
        .map(|p| p.name_any())
        .collect();
    assert_eq!(left, vec!["o2-p0", "o2-p1", "o2-p2"]);
    cms.delete("o2", &DeleteParams::orphan()).await.unwrap();
    let left = pods.list(&ListParams::default()).await.unwrap();
    assert_eq!(left.items.len(), 3);
    assert!(left.iter().all(|p| p.owner_references().is_empty()));
    let _ = PropagationPolicy::Background;
}

#[tokio::test]
async fn graceful_pod_deletion() {
    let emu = Emulator::start(EmulatorOptions {
        graceful_pod_deletion: true,
        ..Default::default()
    })
    .await
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(emu.client(), "default");
    let mut p = pod("g1", json!({}));
    p.spec.as_mut().unwrap().node_name = Some("n1".into());
    pods.create(&PostParams::default(), &p).await.unwrap();
    pods.create(&PostParams::default(), &pod("unbound", json!({})))
        .await
        .unwrap();
    pods.delete("g1", &DeleteParams::default()).await.unwrap();
    let got = pods.get("g1").await.unwrap();
    assert!(got.metadata.deletion_timestamp.is_some());
    assert_eq!(got.metadata.deletion_grace_period_seconds, Some(30));
    pods.delete(
        "g1",
        &DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert!(pods.get_opt("g1").await.unwrap().is_none());
    pods.delete("unbound", &DeleteParams::default())
        .await
        .unwrap();
    assert!(pods.get_opt("unbound").await.unwrap().is_none());
}

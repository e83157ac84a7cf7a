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

/// A pod bound to `node` (as the scheduler leaves it), in namespace `default`.
fn bound_pod(name: &str, node: &str) -> Pod {
    let mut p = pod(name, json!({}));
    p.spec.as_mut().unwrap().node_name = Some(node.into());
    p
}

fn grace(secs: u32) -> DeleteParams {
    DeleteParams {
        grace_period_seconds: Some(secs),
        ..Default::default()
    }
}

fn deletion_time(p: &Pod) -> jiff::Timestamp {
    p.metadata
        .deletion_timestamp
        .as_ref()
        .expect("terminating")
        .0
}

/// As the real pod strategy (CheckGracefulDelete) and BeforeDelete: a bound, running pod
/// is only marked for deletion (deletionTimestamp = now + grace), by default; deleting it
/// again without a shorter grace period changes nothing, a shorter one moves the deadline
/// forward, and the kubelet's grace-period-0 delete (with a uid precondition) removes it.
#[tokio::test]
async fn graceful_pod_deletion_is_on_by_default() {
    let emu = emu().await;
    let pods: Api<Pod> = Api::namespaced(emu.client(), "default");
    let created = pods
        .create(&PostParams::default(), &bound_pod("g1", "n1"))
        .await
        .unwrap();
    let before = jiff::Timestamp::now();
    let deleted = pods.delete("g1", &DeleteParams::default()).await.unwrap();
    let after = jiff::Timestamp::now();
    let marked = deleted.left().expect("the pod is returned, not a Status");
    assert_eq!(marked.metadata.deletion_grace_period_seconds, Some(30));
    let due = deletion_time(&marked);
    let thirty = jiff::SignedDuration::from_secs(30);
    let second = jiff::SignedDuration::from_secs(1);
    assert!(due >= before + thirty - second && due <= after + thirty + second);
    assert_eq!(
        marked.metadata.generation,
        created.metadata.generation.map(|g| g + 1),
        "the first graceful deletion bumps the generation"
    );
    let got = pods.get("g1").await.unwrap();
    assert_eq!(
        got.metadata.deletion_timestamp,
        marked.metadata.deletion_timestamp
    );

    // No grace period, or a longer one: a pending graceful deletion is left as it is.
    let rv = got.metadata.resource_version.clone();
    pods.delete("g1", &DeleteParams::default()).await.unwrap();
    pods.delete("g1", &grace(60)).await.unwrap();
    let got = pods.get("g1").await.unwrap();
    assert_eq!(
        got.metadata.resource_version, rv,
        "not extended, not rewritten"
    );
    assert_eq!(got.metadata.deletion_grace_period_seconds, Some(30));

    // A shorter one moves the deadline 20 s earlier.
    pods.delete("g1", &grace(10)).await.unwrap();
    let got = pods.get("g1").await.unwrap();
    assert_eq!(got.metadata.deletion_grace_period_seconds, Some(10));
    assert_eq!(
        deletion_time(&got),
        due - jiff::SignedDuration::from_secs(20)
    );

    // The kubelet's confirmation: grace 0 with a uid precondition.
    let wrong_uid = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: Some("not-the-uid".into()),
            resource_version: None,
        }),
        ..Default::default()
    };
    let e = pods.delete("g1", &wrong_uid).await.unwrap_err();
    assert_eq!(api_code(&e), (409, "Conflict".into()));
    assert!(pods.get_opt("g1").await.unwrap().is_some());
    let confirm = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: created.metadata.uid.clone(),
            resource_version: None,
        }),
        ..Default::default()
    };
    pods.delete("g1", &confirm).await.unwrap();
    assert!(pods.get_opt("g1").await.unwrap().is_none());
}

/// Pods the real server deletes at once: unbound, terminal (Succeeded or Failed), a grace
/// period of 0 in the request or `terminationGracePeriodSeconds: 0` in the spec.
#[tokio::test]
async fn unbound_terminal_and_zero_grace_pods_are_removed_at_once() {
    let emu = Emulator::start(EmulatorOptions {
        graceful_pod_deletion: true,
        ..Default::default()
    })
    .await
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(emu.client(), "default");
    let post = PostParams::default();
    pods.create(&post, &pod("unbound", json!({})))
        .await
        .unwrap();
    for (name, phase) in [("failed", "Failed"), ("succeeded", "Succeeded")] {
        pods.create(&post, &bound_pod(name, "n1")).await.unwrap();
        pods.patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": phase}})),
        )
        .await
        .unwrap();
    }
    let mut zero_spec = bound_pod("zero-spec", "n1");
    zero_spec
        .spec
        .as_mut()
        .unwrap()
        .termination_grace_period_seconds = Some(0);
    pods.create(&post, &zero_spec).await.unwrap();
    pods.create(&post, &bound_pod("zero-request", "n1"))
        .await
        .unwrap();
    for name in ["unbound", "failed", "succeeded", "zero-spec"] {
        pods.delete(name, &DeleteParams::default()).await.unwrap();
        assert!(pods.get_opt(name).await.unwrap().is_none(), "{name}");
    }
    pods.delete("zero-request", &grace(0)).await.unwrap();
    assert!(pods.get_opt("zero-request").await.unwrap().is_none());
}

/// A graceful deletion of a pod with a finalizer: the kubelet's grace-0 delete leaves it
/// (grace period 0) until the finalizer is removed.
#[tokio::test]
async fn graceful_pod_deletion_waits_for_finalizers_too() {
    let emu = emu().await;
    let pods: Api<Pod> = Api::namespaced(emu.client(), "default");
    let mut p = bound_pod("fin", "n1");
    p.metadata.finalizers = Some(vec!["test/hold".into()]);
    pods.create(&PostParams::default(), &p).await.unwrap();
    pods.delete("fin", &DeleteParams::default()).await.unwrap();
    assert_eq!(
        pods.get("fin")
            .await
            .unwrap()
            .metadata
            .deletion_grace_period_seconds,
        Some(30)
    );
    pods.delete("fin", &grace(0)).await.unwrap();
    let got = pods.get("fin").await.unwrap();
    assert_eq!(got.metadata.deletion_grace_period_seconds, Some(0));
    pods.patch(
        "fin",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert!(pods.get_opt("fin").await.unwrap().is_none());
}

/// Graceful deletion can still be turned off, for tests that want the old immediate removal.
#[tokio::test]
async fn graceful_pod_deletion_can_be_turned_off() {
    let emu = Emulator::start(EmulatorOptions {
        graceful_pod_deletion: false,
        ..Default::default()
    })
    .await
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(emu.client(), "default");
    pods.create(&PostParams::default(), &bound_pod("b", "n1"))
        .await
        .unwrap();
    pods.delete("b", &DeleteParams::default()).await.unwrap();
    assert!(pods.get_opt("b").await.unwrap().is_none());
}

//! The ResourceQuota admission plugin: a pod create that would take a namespace past a
//! quota's `spec.hard` is Forbidden in the server's words; terminal pods are free.

use k8s_openapi::api::core::v1::{Pod, ResourceQuota};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

mod common;
use common::*;

fn pod(name: &str, resources: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "busybox", "resources": resources}]},
    }))
    .unwrap()
}

async fn quota(emu: &slice_emulator::Emulator, name: &str, hard: serde_json::Value) {
    let quotas: Api<ResourceQuota> = Api::namespaced(emu.client(), "default");
    let quota = serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"hard": hard}}));
    quotas
        .create(&PostParams::default(), &quota.unwrap())
        .await
        .unwrap();
}

#[tokio::test]
async fn a_pod_past_the_pod_count_is_forbidden_until_one_finishes() {
    let emu = emu().await;
    quota(&emu, "two", json!({"pods": "2"})).await;
    let pods: Api<Pod> = Api::namespaced(emu.client(), "default");
    let pp = PostParams::default();
    for name in ["p1", "p2"] {
        pods.create(&pp, &pod(name, json!({}))).await.unwrap();
    }
    let e = pods.create(&pp, &pod("p3", json!({}))).await.unwrap_err();
    assert_eq!(api_code(&e), (403, "Forbidden".into()));
    assert!(
        e.to_string().contains(
            r#"pods "p3" is forbidden: exceeded quota: two, requested: pods=1, used: pods=2, limited: pods=2"#
        ),
        "{e}"
    );
    let done = json!({"status": {"phase": "Succeeded"}});
    pods.patch_status("p1", &PatchParams::default(), &Patch::Merge(&done))
        .await
        .unwrap();
    pods.create(&pp, &pod("p3", json!({}))).await.unwrap();
}

#[tokio::test]
async fn extended_resource_requests_are_counted_per_namespace() {
    let emu = emu().await;
    quota(&emu, "tpu", json!({"requests.google.com/tpu": "8"})).await;
    let pods: Api<Pod> = Api::namespaced(emu.client(), "default");
    let pp = PostParams::default();
    let four = json!({"requests": {"google.com/tpu": "4"}, "limits": {"google.com/tpu": "4"}});
    pods.create(&pp, &pod("a", four.clone())).await.unwrap();
    pods.create(&pp, &pod("b", four.clone())).await.unwrap();
    pods.create(&pp, &pod("cpu-only", json!({}))).await.unwrap();
    let e = pods.create(&pp, &pod("c", four)).await.unwrap_err();
    assert!(
        e.to_string().contains(
            "exceeded quota: tpu, requested: requests.google.com/tpu=4, used: requests.google.com/tpu=8, limited: requests.google.com/tpu=8"
        ),
        "{e}"
    );
    let other: Api<Pod> = Api::namespaced(emu.client(), "kube-system");
    let four = json!({"requests": {"google.com/tpu": "4"}, "limits": {"google.com/tpu": "4"}});
    other.create(&pp, &pod("c", four)).await.unwrap();
}

#[tokio::test]
async fn a_quota_on_cpu_refuses_pods_that_do_not_request_cpu() {
    let emu = emu().await;
    quota(&emu, "compute", json!({"requests.cpu": "2"})).await;
    let pods: Api<Pod> = Api::namespaced(emu.client(), "default");
    let e = pods
        .create(&PostParams::default(), &pod("bare", json!({})))
        .await
        .unwrap_err();
    assert_eq!(api_code(&e).0, 403);
    assert!(
        e.to_string()
            .contains("failed quota: compute: must specify requests.cpu for: c"),
        "{e}"
    );
    let half = json!({"requests": {"cpu": "500m"}});
    pods.create(&PostParams::default(), &pod("half", half))
        .await
        .unwrap();
}

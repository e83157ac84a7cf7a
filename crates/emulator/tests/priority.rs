//! The Priority admission plugin: pods name existing PriorityClasses, and get their value.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, PostParams};
use serde_json::json;

mod common;
use common::*;

fn pod_with(name: &str, extra: serde_json::Value) -> Pod {
    let mut pod = json!({
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    });
    for (k, v) in extra.as_object().unwrap() {
        pod["spec"][k] = v.clone();
    }
    serde_json::from_value(pod).unwrap()
}

#[tokio::test]
async fn a_pod_naming_a_missing_priority_class_is_forbidden_and_gets_the_value_once_it_exists() {
    let emu = emu().await;
    let pods: Api<Pod> = Api::namespaced(emu.client(), "default");
    let spare = json!({"priorityClassName": "spare"});
    let e = pods
        .create(&PostParams::default(), &pod_with("p1", spare.clone()))
        .await
        .unwrap_err();
    assert_eq!(api_code(&e), (403, "Forbidden".into()));
    assert!(
        e.to_string()
            .contains("no PriorityClass with name spare was found"),
        "{e}"
    );

    let classes: Api<PriorityClass> = Api::all(emu.client());
    let class: PriorityClass = serde_json::from_value(json!({
        "metadata": {"name": "spare"}, "value": -5, "preemptionPolicy": "Never",
    }))
    .unwrap();
    classes
        .create(&PostParams::default(), &class)
        .await
        .unwrap();
    let created = pods
        .create(&PostParams::default(), &pod_with("p1", spare))
        .await
        .unwrap();
    let spec = created.spec.unwrap();
    assert_eq!(spec.priority, Some(-5));
    assert_eq!(spec.preemption_policy.as_deref(), Some("Never"));

    let mismatched = json!({"priorityClassName": "spare", "priority": 7});
    let e = pods
        .create(&PostParams::default(), &pod_with("p2", mismatched))
        .await
        .unwrap_err();
    assert_eq!(api_code(&e).0, 403);
    let policy = json!({"priorityClassName": "spare", "preemptionPolicy": "PreemptLowerPriority"});
    let e = pods
        .create(&PostParams::default(), &pod_with("p3", policy))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("PreemptionPolicy"), "{e}");

    // A globalDefault class is named on pods that name none.
    let default: PriorityClass = serde_json::from_value(json!({
        "metadata": {"name": "batch"}, "value": 100, "globalDefault": true,
    }))
    .unwrap();
    classes
        .create(&PostParams::default(), &default)
        .await
        .unwrap();
    let plain = pods
        .create(&PostParams::default(), &pod_with("p4", json!({})))
        .await
        .unwrap();
    let spec = plain.spec.unwrap();
    assert_eq!(spec.priority_class_name.as_deref(), Some("batch"));
    assert_eq!(spec.priority, Some(100));
}

#[tokio::test]
async fn pods_without_a_class_get_0_and_system_classes_are_built_in() {
    let emu = emu().await;
    let pods: Api<Pod> = Api::namespaced(emu.client(), "default");
    let plain = pods
        .create(&PostParams::default(), &pod_with("plain", json!({})))
        .await
        .unwrap();
    assert_eq!(plain.spec.unwrap().priority, Some(0));
    let critical = json!({"priorityClassName": "system-cluster-critical"});
    let system = pods
        .create(&PostParams::default(), &pod_with("system", critical))
        .await
        .unwrap();
    assert_eq!(system.spec.unwrap().priority, Some(2_000_000_000));
}

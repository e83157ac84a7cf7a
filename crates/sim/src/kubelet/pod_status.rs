//! The pod status a kubelet reports: Running with every container started (and ready, or
//! not yet while the TPU initialises), and Ready/unready following the node.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::json;

use crate::clock::now_rfc3339;

pub(super) fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

pub(super) fn pod_phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending")
}

fn condition(type_: &str, status: bool, now: &str) -> serde_json::Value {
    json!({"type": type_, "status": if status { "True" } else { "False" }, "lastTransitionTime": now})
}

/// Fake pod IP, stable for a pod uid.
pub fn pod_ip(uid: &str) -> String {
    let h = uid
        .bytes()
        .fold(7u32, |acc, b| acc.wrapping_mul(31).wrapping_add(b as u32));
    format!(
        "10.{}.{}.{}",
        64 + h % 64,
        (h >> 8) % 256,
        1 + (h >> 16) % 254
    )
}

/// Status patch making a pod Running with every container started and ready.
pub fn running_status_patch(pod: &Pod, node: Option<&Node>) -> serde_json::Value {
    started_status_patch(pod, node, true)
}

/// Status patch making a pod Running with every container started; the containers and the
/// pod are Ready when `ready` (false: still initialising, e.g. the TPU runtime).
pub fn started_status_patch(pod: &Pod, node: Option<&Node>, ready: bool) -> serde_json::Value {
    let now = now_rfc3339();
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let host_ip = node
        .and_then(internal_ip)
        .unwrap_or_else(|| "10.128.0.1".into());
    let ip = pod_ip(&uid);
    json!({"status": {
        "phase": "Running",
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "startTime": now,
        "conditions": [
            condition("PodReadyToStartContainers", true, &now),
            condition("Initialized", true, &now),
            condition("Ready", ready, &now),
            condition("ContainersReady", ready, &now),
            condition("PodScheduled", true, &now),
        ],
        "containerStatuses": running_containers(pod, &uid, &now, ready),
    }})
}

/// One running status per container (ready when `ready`), keeping each container's restart
/// count.
fn running_containers(pod: &Pod, uid: &str, now: &str, ready: bool) -> Vec<serde_json::Value> {
    let prev: HashMap<String, i32> = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .map(|cs| {
            cs.iter()
                .map(|c| (c.name.clone(), c.restart_count))
                .collect()
        })
        .unwrap_or_default();
    pod.spec
        .as_ref()
        .map(|s| s.containers.as_slice())
        .unwrap_or(&[])
        .iter()
        .map(|c| {
            json!({
                "name": c.name,
                "image": c.image.clone().unwrap_or_default(),
                "imageID": "",
                "containerID": format!("sim://{uid}/{}", c.name),
                "ready": ready,
                "started": true,
                "restartCount": prev.get(&c.name).copied().unwrap_or(0),
                "state": {"running": {"startedAt": now}},
            })
        })
        .collect()
}

fn internal_ip(node: &Node) -> Option<String> {
    node.status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .and_then(|a| a.iter().find(|a| a.type_ == "InternalIP"))
        .map(|a| a.address.clone())
}

/// Status patch setting Ready/ContainersReady (and containers' `ready`) to `ready`, keeping
/// the pod's other conditions and container statuses.
pub fn ready_status_patch(pod: &Pod, ready: bool) -> serde_json::Value {
    let now = now_rfc3339();
    let status = pod.status.clone().unwrap_or_default();
    let mut conditions: Vec<serde_json::Value> = status
        .conditions
        .unwrap_or_default()
        .into_iter()
        .filter(|c| c.type_ != "Ready" && c.type_ != "ContainersReady")
        .filter_map(|c| serde_json::to_value(c).ok())
        .collect();
    conditions.push(condition("Ready", ready, &now));
    conditions.push(condition("ContainersReady", ready, &now));
    let containers: Vec<serde_json::Value> = status
        .container_statuses
        .unwrap_or_default()
        .into_iter()
        .map(|mut c| {
            c.ready = ready;
            serde_json::to_value(c).unwrap_or_default()
        })
        .collect();
    json!({"status": {"conditions": conditions, "containerStatuses": containers}})
}

/// Reason of a pod the kubelet did not admit because its node has too few free
/// `google.com/tpu` chips: the kubelet's `OutOf<resource name>`.
pub const OUT_OF_TPU_REASON: &str = "OutOfgoogle.com/tpu";

/// Status patch of a pod whose containers the kubelet stopped because the pod is being
/// deleted: as kubelets since 1.27 report it before confirming the deletion, phase `Failed`
/// (the containers were killed: exit code 143, SIGTERM), every container terminated and not
/// ready, Ready/ContainersReady False.
pub fn stopped_status_patch(pod: &Pod) -> serde_json::Value {
    let now = now_rfc3339();
    let status = pod.status.clone().unwrap_or_default();
    let mut conditions: Vec<serde_json::Value> = status
        .conditions
        .unwrap_or_default()
        .into_iter()
        .filter(|c| c.type_ != "Ready" && c.type_ != "ContainersReady")
        .filter_map(|c| serde_json::to_value(c).ok())
        .collect();
    for t in ["Ready", "ContainersReady"] {
        conditions.push(
            json!({"type": t, "status": "False", "reason": "PodCompleted", "lastTransitionTime": now}),
        );
    }
    let containers: Vec<serde_json::Value> = status
        .container_statuses
        .unwrap_or_default()
        .into_iter()
        .map(|c| {
            let started = c
                .state
                .as_ref()
                .and_then(|s| s.running.as_ref())
                .and_then(|r| r.started_at.clone());
            let mut v = serde_json::to_value(&c).unwrap_or_default();
            v["ready"] = json!(false);
            v["started"] = json!(false);
            v["state"] = json!({"terminated": {
                "exitCode": 143,
                "reason": "Error",
                "startedAt": started,
                "finishedAt": now,
                "containerID": c.container_id,
            }});
            v
        })
        .collect();
    json!({"status": {
        "phase": "Failed",
        "conditions": conditions,
        "containerStatuses": containers,
    }})
}

/// Status patch of a pod the kubelet did not admit: phase `Failed` with the admission
/// failure's reason and message, as a kubelet's `rejectPod` writes it.
pub fn rejected_status_patch(reason: &str, message: &str) -> serde_json::Value {
    json!({"status": {
        "phase": "Failed",
        "reason": reason,
        "message": format!("Pod was rejected: {message}"),
    }})
}

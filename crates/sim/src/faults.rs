//! Scripted faults on pods, written the way the kubelet (or a user) would.

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, DeleteParams, EvictParams, Patch, PatchParams};
use serde_json::json;

use crate::clock::now_rfc3339;
use crate::error::SimError;

/// Status patch of a container crash that the kubelet already restarted: `restartCount + 1`,
/// `lastState.terminated` with `exit_code`, state running again. `container` defaults to the
/// first container.
pub fn crash_status_patch(
    pod: &Pod,
    container: Option<&str>,
    exit_code: i32,
) -> Result<serde_json::Value, SimError> {
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let mut statuses = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.clone())
        .unwrap_or_default();
    if statuses.is_empty() {
        return Err(SimError::Invalid(format!(
            "pod {pod_name} has no container statuses (not running)"
        )));
    }
    let idx = match container {
        None => 0,
        Some(c) => statuses
            .iter()
            .position(|s| s.name == c)
            .ok_or_else(|| SimError::NotFound(format!("container {c} in pod {pod_name}")))?,
    };
    let now = now_rfc3339();
    let mut out = Vec::new();
    for (i, s) in statuses.drain(..).enumerate() {
        let mut v = serde_json::to_value(&s)?;
        if i == idx {
            let started = v
                .pointer("/state/running/startedAt")
                .cloned()
                .unwrap_or_else(|| json!(now));
            let restarts = s.restart_count + 1;
            v["restartCount"] = json!(restarts);
            v["lastState"] = json!({"terminated": {
                "exitCode": exit_code,
                "reason": "Error",
                "startedAt": started,
                "finishedAt": now,
                "containerID": format!("sim://{uid}/{}/{}", s.name, restarts - 1),
            }});
            v["state"] = json!({"running": {"startedAt": now}});
            v["containerID"] = json!(format!("sim://{uid}/{}/{restarts}", s.name));
            v["ready"] = json!(true);
            v["started"] = json!(true);
        }
        out.push(v);
    }
    Ok(json!({"status": {"containerStatuses": out}}))
}

/// Status patch of a failed pod: phase Failed, every container terminated with `exit_code`.
pub fn fail_status_patch(pod: &Pod, exit_code: i32) -> serde_json::Value {
    terminated_status_patch(pod, exit_code)
}

/// Status patch of a pod whose containers all exited 0 (restartPolicy Never or OnFailure):
/// phase Succeeded, as a kubelet writes it.
pub fn complete_status_patch(pod: &Pod) -> serde_json::Value {
    terminated_status_patch(pod, 0)
}

/// Every container terminated with `exit_code`: phase Failed, or Succeeded for exit 0.
pub(crate) fn terminated_status_patch(pod: &Pod, exit_code: i32) -> serde_json::Value {
    let (phase, reason) = match exit_code {
        0 => ("Succeeded", "Completed"),
        _ => ("Failed", "Error"),
    };
    let now = now_rfc3339();
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    // A container that ran keeps its start time and id in its terminated state, as a
    // kubelet writes them (a terminated state without them is one that never started).
    let names: Vec<(String, String, i32, Option<String>)> = match pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
    {
        Some(cs) if !cs.is_empty() => cs
            .iter()
            .map(|c| {
                let started = c
                    .state
                    .as_ref()
                    .and_then(|s| s.running.as_ref())
                    .and_then(|r| r.started_at.as_ref())
                    .map(|t| t.0.to_string());
                (c.name.clone(), c.image.clone(), c.restart_count, started)
            })
            .collect(),
        _ => pod
            .spec
            .as_ref()
            .map(|s| {
                s.containers
                    .iter()
                    .map(|c| (c.name.clone(), c.image.clone().unwrap_or_default(), 0, None))
                    .collect()
            })
            .unwrap_or_default(),
    };
    let statuses: Vec<serde_json::Value> = names
        .into_iter()
        .map(|(name, image, restarts, started)| {
            let id = format!("sim://{uid}/{name}");
            let mut terminated =
                json!({"exitCode": exit_code, "reason": reason, "finishedAt": now});
            if let Some(started) = started {
                terminated["startedAt"] = json!(started);
                terminated["containerID"] = json!(id);
            }
            json!({
                "name": name,
                "image": image,
                "imageID": "",
                "containerID": id,
                "ready": false,
                "started": false,
                "restartCount": restarts,
                "state": {"terminated": terminated},
            })
        })
        .collect();
    let why = if exit_code == 0 {
        "PodCompleted"
    } else {
        "PodFailed"
    };
    let conditions = not_ready_conditions(pod, why, &now);
    json!({"status": {
        "phase": phase,
        "reason": reason,
        "message": format!("container exited with code {exit_code} (simulated)"),
        "conditions": conditions,
        "containerStatuses": statuses,
    }})
}

/// Crashes a container of a running pod (see [`crash_status_patch`]).
pub async fn crash_container(
    client: &Client,
    namespace: &str,
    pod: &str,
    container: Option<&str>,
    exit_code: i32,
) -> Result<(), SimError> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let p = api.get(pod).await?;
    let patch = if restarts_containers(&p, exit_code) {
        crash_status_patch(&p, container, exit_code)?
    } else {
        end_container_patch(&p, container, exit_code)?
    };
    api.patch_status(pod, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// The pod's conditions with Ready and ContainersReady False for `reason`; the others kept as
/// they are (a merge patch replaces the list whole).
pub(crate) fn not_ready_conditions(pod: &Pod, reason: &str, now: &str) -> Vec<serde_json::Value> {
    let mut conditions: Vec<serde_json::Value> = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|c| c.type_ != "Ready" && c.type_ != "ContainersReady")
        .filter_map(|c| serde_json::to_value(c).ok())
        .collect();
    for t in ["Ready", "ContainersReady"] {
        conditions.push(
            json!({"type": t, "status": "False", "reason": reason, "lastTransitionTime": now}),
        );
    }
    conditions
}

/// Whether the kubelet restarts a container of `pod` that exited with `exit_code`
/// (`restartPolicy` Always, the API default, or OnFailure for a non-zero exit).
pub fn restarts_containers(pod: &Pod, exit_code: i32) -> bool {
    match pod.spec.as_ref().and_then(|s| s.restart_policy.as_deref()) {
        Some("Never") => false,
        Some("OnFailure") => exit_code != 0,
        _ => true,
    }
}

/// Status patch of a container that ended and is not restarted (`restartPolicy: Never`):
/// that container terminated with `exit_code`, the pod not ready; once every container has
/// ended, the pod's phase is Failed (or Succeeded when all exited 0), as a kubelet writes it.
pub fn end_container_patch(
    pod: &Pod,
    container: Option<&str>,
    exit_code: i32,
) -> Result<serde_json::Value, SimError> {
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    let statuses = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.clone())
        .unwrap_or_default();
    let idx = match container {
        None => 0,
        Some(c) => statuses
            .iter()
            .position(|s| s.name == c)
            .ok_or_else(|| SimError::NotFound(format!("container {c} in pod {pod_name}")))?,
    };
    let ended = |i: usize, s: &k8s_openapi::api::core::v1::ContainerStatus| {
        i == idx || s.state.as_ref().is_some_and(|st| st.terminated.is_some())
    };
    if statuses.iter().enumerate().all(|(i, s)| ended(i, s)) {
        return Ok(terminated_status_patch(pod, exit_code));
    }
    let now = now_rfc3339();
    let mut out = Vec::new();
    for (i, s) in statuses.into_iter().enumerate() {
        let mut v = serde_json::to_value(&s)?;
        if i == idx {
            v["ready"] = json!(false);
            v["started"] = json!(false);
            v["state"] = json!({"terminated": {"exitCode": exit_code, "reason": "Error", "finishedAt": now}});
        }
        out.push(v);
    }
    let conditions = not_ready_conditions(pod, "ContainersNotReady", &now);
    Ok(json!({"status": {"conditions": conditions, "containerStatuses": out}}))
}

/// Fails a pod (see [`fail_status_patch`]).
pub async fn fail_pod(
    client: &Client,
    namespace: &str,
    pod: &str,
    exit_code: i32,
) -> Result<(), SimError> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let p = api.get(pod).await?;
    let patch = fail_status_patch(&p, exit_code);
    api.patch_status(pod, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// Ends a pod's containers with exit 0 (see [`complete_status_patch`]).
pub async fn complete_pod(client: &Client, namespace: &str, pod: &str) -> Result<(), SimError> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let p = api.get(pod).await?;
    let patch = complete_status_patch(&p);
    api.patch_status(pod, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// Deletes a pod (with a grace period when given; the fake kubelet then finishes it).
pub async fn delete_pod(
    client: &Client,
    namespace: &str,
    pod: &str,
    grace_period_seconds: Option<u32>,
) -> Result<(), SimError> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let mut dp = DeleteParams::default();
    if let Some(g) = grace_period_seconds {
        dp = dp.grace_period(g);
    }
    api.delete(pod, &dp).await?;
    Ok(())
}

/// Evicts a pod through the eviction subresource.
pub async fn evict_pod(client: &Client, namespace: &str, pod: &str) -> Result<(), SimError> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    api.evict(pod, &EvictParams::default()).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{running, tpu_pod};

    #[test]
    fn crash_increments_restart_count() {
        let p = running(tpu_pod("a", 4));
        let patch = crash_status_patch(&p, Some("trainer"), 137).unwrap();
        let c = &patch["status"]["containerStatuses"][0];
        assert_eq!(c["restartCount"], 1);
        assert_eq!(c["lastState"]["terminated"]["exitCode"], 137);
        assert!(c["state"]["running"].is_object());
        assert!(crash_status_patch(&p, Some("nope"), 1).is_err());
        assert!(crash_status_patch(&tpu_pod("b", 4), None, 1).is_err());
    }

    #[test]
    fn fail_sets_phase_and_exit_code() {
        let patch = fail_status_patch(&running(tpu_pod("a", 4)), 1);
        assert_eq!(patch["status"]["phase"], "Failed");
        let c = &patch["status"]["containerStatuses"][0];
        assert_eq!(c["state"]["terminated"]["exitCode"], 1);
        assert_eq!(c["ready"], false);
        let conds = patch["status"]["conditions"].as_array().unwrap();
        assert!(
            conds
                .iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "False")
        );
        assert!(
            conds
                .iter()
                .any(|c| c["type"] == "PodScheduled" && c["status"] == "True")
        );
    }

    #[test]
    fn a_container_that_is_not_restarted_ends_and_the_last_one_ends_the_pod() {
        let mut p = running(tpu_pod("a", 4));
        assert!(restarts_containers(&p, 1), "Always is the API default");
        p.spec.as_mut().unwrap().restart_policy = Some("Never".into());
        assert!(!restarts_containers(&p, 1));
        let only = end_container_patch(&p, None, 137).unwrap();
        assert_eq!(
            only["status"]["phase"], "Failed",
            "its only container ended"
        );
        let done = complete_status_patch(&p);
        assert_eq!(done["status"]["phase"], "Succeeded");
        assert_eq!(
            done["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"],
            0
        );

        // With a sidecar still running the pod stays Running, not ready.
        let mut sidecar = p
            .status
            .as_ref()
            .unwrap()
            .container_statuses
            .clone()
            .unwrap()[0]
            .clone();
        sidecar.name = "sidecar".into();
        p.status
            .as_mut()
            .unwrap()
            .container_statuses
            .as_mut()
            .unwrap()
            .push(sidecar);
        let patch = end_container_patch(&p, None, 137).unwrap();
        assert!(patch["status"].get("phase").is_none());
        let c = &patch["status"]["containerStatuses"][0];
        assert_eq!(c["state"]["terminated"]["exitCode"], 137);
        assert_eq!(c["restartCount"], 0, "not restarted");
        assert!(patch["status"]["containerStatuses"][1]["state"]["running"].is_object());
        let conds = patch["status"]["conditions"].as_array().unwrap();
        assert!(
            conds.iter().any(|c| c["type"] == "PodScheduled"),
            "other conditions kept"
        );
    }
}

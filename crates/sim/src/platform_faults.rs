//! Faults that are the platform's, not the job's, written as the kubelet and the node
//! lifecycle controller write them: a graceful node shutdown, a node-pressure eviction, a
//! zone whose kubelets all stop reporting at once.

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

use crate::clock::now_rfc3339;
use crate::error::SimError;
use crate::faults::terminated_status_patch;
use crate::nodes::{pool_node_names, set_node_ready};
use slice_core::constants::{CONDITION_DISRUPTION_TARGET, NODE_LABEL_ZONE};

/// The message of the kubelet's node-shutdown manager (`status.message` and the
/// condition's).
pub const NODE_SHUTDOWN_MESSAGE: &str = "Pod was terminated in response to imminent node shutdown.";
/// The message of a kubelet's eviction under memory pressure.
pub const PRESSURE_EVICTION_MESSAGE: &str =
    "The node was low on resource: memory. Threshold quantity: 100Mi, available: 90Mi.";

/// Status patch of a pod the platform ended: its containers killed (exit 137), phase
/// `Failed`, `reason` and `message`, and the `DisruptionTarget` condition the kubelet sets
/// (`TerminationByKubelet`).
pub fn disruption_status_patch(pod: &Pod, reason: &str, message: &str) -> serde_json::Value {
    let mut patch = terminated_status_patch(pod, 137);
    let now = now_rfc3339();
    let status = &mut patch["status"];
    status["reason"] = json!(reason);
    status["message"] = json!(message);
    if let Some(conditions) = status["conditions"].as_array_mut() {
        conditions.retain(|c| c["type"] != CONDITION_DISRUPTION_TARGET);
        conditions.push(json!({
            "type": CONDITION_DISRUPTION_TARGET,
            "status": "True",
            "reason": "TerminationByKubelet",
            "message": message,
            "lastTransitionTime": now,
        }));
    }
    patch
}

async fn disrupt(api: &Api<Pod>, pod: &Pod, reason: &str, message: &str) -> Result<(), SimError> {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let patch = disruption_status_patch(pod, reason, message);
    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// A kubelet evicts the pod under node pressure.
pub async fn pressure_evict(client: &Client, namespace: &str, pod: &str) -> Result<(), SimError> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let p = api.get(pod).await?;
    disrupt(&api, &p, "Evicted", PRESSURE_EVICTION_MESSAGE).await
}

/// The kubelets of the pool's nodes shut down gracefully: every pod on them that has not
/// ended is ended (`Terminated`). No taint is written: on GKE it may reach the node watch
/// only after the pods' statuses. Returns how many pods were ended.
pub async fn shut_down_pool_pods(client: &Client, pool: &str) -> Result<usize, SimError> {
    let mut ended = 0;
    for node in pool_node_names(client, pool).await? {
        let pods: Api<Pod> = Api::all(client.clone());
        let on_node = ListParams::default().fields(&format!("spec.nodeName={node}"));
        for pod in pods.list(&on_node).await?.items {
            let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
            if matches!(phase, Some("Succeeded") | Some("Failed")) {
                continue;
            }
            let ns = pod.metadata.namespace.clone().unwrap_or_default();
            let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
            disrupt(&api, &pod, "Terminated", NODE_SHUTDOWN_MESSAGE).await?;
            ended += 1;
        }
    }
    Ok(ended)
}

/// Every node of `zone` stops reporting (`ready: false`) or reports Ready again.
pub async fn set_zone_ready(client: &Client, zone: &str, ready: bool) -> Result<usize, SimError> {
    let nodes: Api<Node> = Api::all(client.clone());
    let in_zone = ListParams::default().labels(&format!("{NODE_LABEL_ZONE}={zone}"));
    let names: Vec<String> = nodes
        .list(&in_zone)
        .await?
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    if names.is_empty() {
        return Err(SimError::NotFound(format!("nodes in zone {zone}")));
    }
    for name in &names {
        set_node_ready(client, name, ready).await?;
    }
    Ok(names.len())
}

/// Every running worker pod of the TrainCluster exits 0.
pub async fn complete_workers(
    client: &Client,
    namespace: &str,
    cluster: &str,
) -> Result<usize, SimError> {
    use slice_core::constants::{LABEL_CLUSTER, LABEL_ROLE, ROLE_WORKER};
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let selector = format!("{LABEL_CLUSTER}={cluster},{LABEL_ROLE}={ROLE_WORKER}");
    let mut completed = 0;
    for pod in api
        .list(&ListParams::default().labels(&selector))
        .await?
        .items
    {
        let running = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
        if !running || pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let name = pod.metadata.name.clone().unwrap_or_default();
        let patch = terminated_status_patch(&pod, 0);
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        completed += 1;
    }
    Ok(completed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{running, tpu_pod};

    /// As the kubelet's node-shutdown manager writes it: Failed, `Terminated`, and the
    /// DisruptionTarget condition; the operator's lean view reads it as a disruption.
    #[test]
    fn a_shut_down_pod_reads_as_the_platforms_disruption() {
        let mut pod = running(tpu_pod("a", 4));
        let patch = disruption_status_patch(&pod, "Terminated", NODE_SHUTDOWN_MESSAGE);
        assert_eq!(patch["status"]["phase"], "Failed");
        let status: k8s_openapi::api::core::v1::PodStatus =
            serde_json::from_value(patch["status"].clone()).unwrap();
        pod.status = Some(status);
        let lean = slice_core::lean::LeanPod::from(&pod);
        let disruption = lean.disruption().expect("a disruption");
        assert_eq!(disruption.reason, "TerminationByKubelet");
        assert_eq!(disruption.pod_reason.as_deref(), Some("Terminated"));
        assert!(lean.rejection.is_none(), "it ran");
    }
}

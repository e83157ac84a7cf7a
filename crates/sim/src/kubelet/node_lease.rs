//! Node heartbeats as a kubelet sends them: one Lease per node in `kube-node-lease`, renewed
//! every [`RENEW_INTERVAL`]. A real node lifecycle controller marks a node whose Lease goes
//! unrenewed past its grace (50 s) `Unknown` and taints it `unreachable`: a fake node whose
//! kubelet is alive must not go that way, and one whose kubelet is down (Ready `Unknown`, as
//! the simulator writes it) gets no heartbeat. If a heartbeat came late all the same (a busy
//! API server), the live kubelet posts its node Ready again at its next round, as a real
//! kubelet's status update does, and the controller lifts its taints.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::Store;
use serde_json::json;

use crate::nodes::KUBELET_DOWN_MESSAGE;

/// Where kubelets keep their node Leases.
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";
/// A kubelet's Lease duration (`--node-lease-duration-seconds`, default 40).
pub const LEASE_DURATION_SECONDS: i32 = 40;
/// A kubelet renews its Lease every quarter of the duration.
pub const RENEW_INTERVAL: Duration = Duration::from_secs(10);
/// Field manager of the heartbeats.
const MANAGER: &str = "fake-kubelet";

/// True unless the simulator took the node's kubelet down (Ready `Unknown` with
/// [`KUBELET_DOWN_MESSAGE`]). A node a real controller marked `Unknown` (a heartbeat came
/// late) still has a live kubelet, which keeps renewing.
pub fn kubelet_alive(node: &Node) -> bool {
    !node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.type_ == "Ready"
                    && c.status == "Unknown"
                    && c.message.as_deref() == Some(KUBELET_DOWN_MESSAGE)
            })
        })
}

/// The Lease a kubelet keeps for `node`: held by the node, owned by it (so it goes with it).
pub fn node_lease(node: &Node, renew_time: &str) -> serde_json::Value {
    let name = node.metadata.name.clone().unwrap_or_default();
    json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": name,
            "namespace": NODE_LEASE_NAMESPACE,
            "ownerReferences": [{
                "apiVersion": "v1",
                "kind": "Node",
                "name": name,
                "uid": node.metadata.uid.clone().unwrap_or_default(),
            }],
        },
        "spec": {
            "holderIdentity": name,
            "leaseDurationSeconds": LEASE_DURATION_SECONDS,
            "renewTime": renew_time,
        },
    })
}

/// How many heartbeats are in flight at once. Each real kubelet renews its own Lease; one
/// fake kubelet for hundreds of nodes must not let a busy API server (seconds per request)
/// stretch a round past the lifecycle controller's grace, so many go at once.
const HEARTBEATS_IN_FLIGHT: usize = 64;

/// Renews the Lease of every node whose kubelet is alive, [`HEARTBEATS_IN_FLIGHT`] at a time.
/// Failures are logged: the next round tries again, as a kubelet does.
pub async fn renew_all(client: &Client, nodes: &[std::sync::Arc<Node>]) {
    let api: Api<Lease> = Api::namespaced(client.clone(), NODE_LEASE_NAMESPACE);
    let now = crate::clock::now_rfc3339_micros();
    let params = PatchParams::apply(MANAGER).force();
    futures::stream::iter(nodes.iter().filter(|n| kubelet_alive(n)))
        .for_each_concurrent(HEARTBEATS_IN_FLIGHT, |node| {
            let (api, params, lease) = (&api, &params, node_lease(node, &now));
            async move {
                let name = node.metadata.name.as_deref().unwrap_or_default();
                if let Err(e) = api.patch(name, params, &Patch::Apply(&lease)).await {
                    tracing::debug!(node = name, error = %e, "fake kubelet heartbeat failed");
                }
            }
        })
        .await;
}

/// True when the node lifecycle controller marked the node `Unknown` (its heartbeat came
/// late) while its kubelet is alive: the kubelet posts its status again.
pub fn marked_unknown_while_alive(node: &Node) -> bool {
    kubelet_alive(node)
        && node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c.type_ == "Ready" && c.status == "Unknown")
            })
}

/// Posts Ready `True` for every node the lifecycle controller marked `Unknown` while its
/// kubelet lives (a merge of the node's conditions, as the kubelet's own status patch is).
pub async fn repost_ready(client: &Client, nodes: &[std::sync::Arc<Node>]) {
    let api: Api<Node> = Api::all(client.clone());
    let now = crate::clock::now_rfc3339_micros();
    for node in nodes.iter().filter(|n| marked_unknown_while_alive(n)) {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        // Ready as at the node's start; the pressure conditions the controller set Unknown
        // go back to False.
        let conditions: Vec<serde_json::Value> = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .filter_map(|c| match c.type_.as_str() {
                "Ready" => Some(crate::nodes::ready_condition(true)),
                _ => serde_json::to_value(c).ok().map(|mut c| {
                    c["status"] = json!("False");
                    c["reason"] = json!("KubeletHasSufficientResources");
                    c["message"] = json!("kubelet is healthy (simulated)");
                    c["lastHeartbeatTime"] = json!(now);
                    c["lastTransitionTime"] = json!(now);
                    c
                }),
            })
            .collect();
        let patch = json!({"status": {"conditions": conditions}});
        let params = PatchParams::default();
        if let Err(e) = api.patch_status(name, &params, &Patch::Merge(&patch)).await {
            tracing::debug!(node = name, error = %e, "fake kubelet status update failed");
        }
    }
}

/// Heartbeats every [`RENEW_INTERVAL`] on a task of their own; stopped when the returned
/// guard is dropped.
pub fn spawn_heartbeats(client: Client, nodes: Store<Node>) -> AbortOnDrop {
    AbortOnDrop(tokio::spawn(async move {
        let mut every = tokio::time::interval(RENEW_INTERVAL);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            let state = nodes.state();
            renew_all(&client, &state).await;
            repost_ready(&client, &state).await;
        }
    }))
}

/// Aborts its task when dropped.
pub struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{pool_nodes, set_not_ready};

    #[test]
    fn a_node_whose_kubelet_is_down_gets_no_heartbeat() {
        let mut nodes = pool_nodes("pool-0");
        assert!(kubelet_alive(&nodes[0]));
        // NotReady (False) is a live kubelet reporting trouble.
        set_not_ready(&mut nodes[0]);
        assert!(kubelet_alive(&nodes[0]));
        let set = |n: &mut Node, message: &str| {
            let ready = &mut n.status.as_mut().unwrap().conditions.as_mut().unwrap()[0];
            ready.status = "Unknown".into();
            ready.message = Some(message.into());
        };
        set(&mut nodes[0], "Kubelet stopped posting node status.");
        assert!(
            kubelet_alive(&nodes[0]),
            "a real controller's verdict: keep renewing"
        );
        assert!(marked_unknown_while_alive(&nodes[0]), "posts Ready again");
        set(&mut nodes[0], KUBELET_DOWN_MESSAGE);
        assert!(!kubelet_alive(&nodes[0]), "the simulator took it down");
        assert!(!marked_unknown_while_alive(&nodes[0]), "and stays down");
        assert!(
            !marked_unknown_while_alive(&nodes[1]),
            "a Ready node: nothing to post"
        );
        let lease = node_lease(&nodes[1], "2026-01-01T00:00:00.000000Z");
        assert_eq!(lease["spec"]["holderIdentity"], "pool-0-1");
        assert_eq!(lease["metadata"]["name"], "pool-0-1");
        assert_eq!(lease["metadata"]["ownerReferences"][0]["kind"], "Node");
    }
}

//! Node heartbeats as a kubelet sends them: one Lease per node in `kube-node-lease`, renewed
//! every [`RENEW_INTERVAL`]. A real node lifecycle controller marks a node whose Lease goes
//! unrenewed past its grace (50 s) `Unknown` and taints it `unreachable`: a fake node whose
//! kubelet is alive must not go that way, and one whose kubelet is down (Ready `Unknown`, as
//! the simulator writes it) gets no heartbeat.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
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

/// Renews the Lease of every node whose kubelet is alive, a few at a time. Failures are
/// logged: the next round tries again, as a kubelet does.
pub async fn renew_all(client: &Client, nodes: &[std::sync::Arc<Node>]) {
    let api: Api<Lease> = Api::namespaced(client.clone(), NODE_LEASE_NAMESPACE);
    let now = crate::clock::now_rfc3339_micros();
    let params = PatchParams::apply(MANAGER).force();
    futures::stream::iter(nodes.iter().filter(|n| kubelet_alive(n)))
        .for_each_concurrent(8, |node| {
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
        set(&mut nodes[0], KUBELET_DOWN_MESSAGE);
        assert!(!kubelet_alive(&nodes[0]), "the simulator took it down");
        let lease = node_lease(&nodes[1], "2026-01-01T00:00:00.000000Z");
        assert_eq!(lease["spec"]["holderIdentity"], "pool-0-1");
        assert_eq!(lease["metadata"]["name"], "pool-0-1");
        assert_eq!(lease["metadata"]["ownerReferences"][0]["kind"], "Node");
    }
}
